"""Pure NumPy CPU kernels: the CPU code path, and the reference every GPU path is tested against.

``run_node(op_type, inputs, attrs, opset)`` runs one ONNX node. ``inputs`` are the positional ONNX
inputs (None for an absent optional input), ``attrs`` the decoded attributes, plus two internal ones:

* ``"_act"``: ``(op_type, params)``, an activation fused into Conv / ConvTranspose / Gemm / MatMul;
* ``"_num_outputs"``: how many outputs the node has. MaxPool computes its Indices output only when this
  is 2 or more; Split uses it when no split sizes are given. Other kernels return every output they
  define (e.g. Dropout's mask); a caller may ignore trailing ones.

Outputs may be views of (or the very objects given as) inputs, e.g. for Identity, Reshape, Squeeze and
Transpose: a caller must not modify an output in place unless it owns the buffer.

Importing the package changes no process-wide setting. ``blas_threads(n)`` scopes NumPy's BLAS thread
count to a block and ``kernel_threads(n)`` the threads the heavy kernels split their work over (the
CPU path wraps each run in both), and ``tune_malloc()`` is an opt-in allocator
setting for applications that own their process (see ``fallback._runtime``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from . import conv, elementwise, linalg, norm, pool, quant, resize, tensor  # noqa: F401  (registers kernels)
from ._registry import DOMAIN_KERNELS, KERNELS, NODE_KERNELS, RUN_TIME, FallbackError
from ._runtime import (
    BufferPool,
    FastestWay,
    allow_blas_threads,
    binary,
    blas_threads,
    get_blas_threads,
    kernel_threads,
    tune_malloc,
)
from .conv import conv_node_kernel
from .elementwise import apply_activation, silu, silu_kernel

__all__ = ["KERNELS", "KERNEL_ERRORS", "RUN_TIME", "BufferPool", "FallbackError", "FastestWay", "allow_blas_threads",
           "apply_activation", "binary",
           "blas_threads", "get_blas_threads", "kernel_for", "kernel_threads", "node_kernel",
           "node_kernel_then_silu", "run_node", "silu_kernel", "supported_ops", "tune_malloc"]

KERNELS: dict[str, Callable[[list[np.ndarray | None], dict[str, Any], int], list[np.ndarray]]]

_SUPPORTED = frozenset(KERNELS)


def supported_ops(domain: str = "") -> frozenset[str]:
    """Op types of ``domain`` (default: the ONNX domain) that have a CPU kernel."""
    if domain in ("", "ai.onnx"):
        return _SUPPORTED
    return frozenset(op for d, op in DOMAIN_KERNELS if d == domain)


# What a kernel raises for bad attributes or inputs (FallbackError, or NumPy's own errors).
KERNEL_ERRORS = (FallbackError, ValueError, IndexError, TypeError, np.exceptions.AxisError)


def kernel_for(op_type: str,
               domain: str = "") -> Callable[[list[np.ndarray | None], dict[str, Any], int], list[np.ndarray]]:
    """The kernel of ``op_type``, for callers that run many nodes (a compiled plan): call it as
    ``kernel(inputs_list, attrs, opset)`` inside ``np.errstate(all="ignore")``, catch
    ``KERNEL_ERRORS``, and pass outputs through ``np.asarray`` (a kernel may return NumPy scalars).
    ``run_node`` does all of that for one node."""
    kernel = KERNELS.get(op_type) if domain in ("", "ai.onnx") else DOMAIN_KERNELS.get((domain, op_type))
    if kernel is None:
        raise FallbackError(f"no CPU kernel for op {op_type}" + (f" in domain {domain!r}" if domain else ""))
    return kernel


def node_kernel(op_type: str, domain: str, inputs: list, attrs: dict[str, Any]
                ) -> Callable[[list[np.ndarray | None], dict[str, Any], int], list[np.ndarray]]:
    """:func:`kernel_for`, specialised for one node when its op has a specialisation: ``inputs`` holds
    the node's constant inputs as arrays, None for an absent input and ``RUN_TIME`` for an input
    known only at run time. A specialised kernel resolves what depends on the constants and the
    input shapes once per shape (e.g. a Conv's geometry, algorithm and weight layouts) and computes
    what the plain kernel computes; call it the same way, with the same ``attrs``."""
    if domain in ("", "ai.onnx") and op_type in NODE_KERNELS:
        kernel = NODE_KERNELS[op_type](inputs, attrs)
        if kernel is not None:
            return kernel
    return kernel_for(op_type, domain)


def node_kernel_then_silu(op_type: str, domain: str, inputs: list, attrs: dict[str, Any]
                          ) -> Callable[[list[np.ndarray | None], dict[str, Any], int], list[np.ndarray]] | None:
    """A :func:`node_kernel` whose first output y comes out as ``y * sigmoid(y)`` (the Sigmoid and Mul
    that follow it, fused into its epilogue while each block of y is in cache), or None when the
    op cannot take it (only a Conv with constant weights can)."""
    if domain in ("", "ai.onnx") and op_type == "Conv":
        return conv_node_kernel(inputs, attrs, tail=silu)
    return None


def run_node(op_type: str, inputs: list[np.ndarray | None], attrs: dict[str, Any],
             opset: int = 17, domain: str = "") -> list[np.ndarray]:
    """Run one ONNX node on the CPU; returns its outputs in order.

    Raises FallbackError (a ValueError) for an unknown op, bad attributes or bad input shapes.
    """
    kernel = kernel_for(op_type, domain)
    attrs = attrs if attrs is not None else {}
    try:
        with np.errstate(all="ignore"):
            outs = kernel(list(inputs), attrs, int(opset))
    except FallbackError:
        raise
    except KERNEL_ERRORS as e:
        raise FallbackError(f"{op_type}: {e}") from e
    return [o if isinstance(o, np.ndarray) else np.asarray(o) for o in outs]
