"""Kernel registry, the error type and small attribute helpers shared by every kernel module."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

Kernel = Callable[[list, dict, int], list]

KERNELS: dict[str, Kernel] = {}  # the default ONNX domain
# op type -> factory(inputs, attrs) of a kernel specialised for one node (see ``node_kernel``)
NODE_KERNELS: dict[str, Callable[[list, dict], Kernel | None]] = {}


class _RunTime:
    """Marks an input that is known only at run time (see ``fallback.node_kernel``)."""

    def __repr__(self) -> str:
        return "RUN_TIME"


RUN_TIME = _RunTime()
MS_DOMAIN = "com.microsoft"
DOMAIN_KERNELS: dict[tuple[str, str], Kernel] = {}  # (domain, op type) for other domains


class FallbackError(ValueError):
    """A node the CPU kernels cannot run: unknown op, bad attributes or bad input shapes."""


def register(*op_types: str, domain: str = "") -> Callable[[Kernel], Kernel]:
    def deco(fn: Kernel) -> Kernel:
        for op in op_types:
            if domain in ("", "ai.onnx"):
                KERNELS[op] = fn
            else:
                DOMAIN_KERNELS[(domain, op)] = fn
        return fn

    return deco


def fail(op: str, msg: str) -> FallbackError:
    return FallbackError(f"{op}: {msg}")


def need(op: str, inputs: Sequence[np.ndarray | None], i: int, what: str = "") -> np.ndarray:
    """Input ``i``; raise a clear error when it is absent."""
    if i >= len(inputs) or inputs[i] is None:
        raise fail(op, f"missing required input {i}{' (' + what + ')' if what else ''}")
    return np.asarray(inputs[i])


def opt(inputs: Sequence[np.ndarray | None], i: int) -> np.ndarray | None:
    """Optional input ``i`` (None when absent or given as the empty name)."""
    if i >= len(inputs) or inputs[i] is None:
        return None
    return np.asarray(inputs[i])


def sattr(attrs: dict[str, Any], name: str, default: str) -> str:
    v = attrs.get(name, default)
    if isinstance(v, bytes):
        v = v.decode()
    return str(v)


def iattr(attrs: dict[str, Any], name: str, default: int) -> int:
    v = attrs.get(name, default)
    return int(v)


def ints_attr(attrs: dict[str, Any], name: str) -> list[int] | None:
    v = attrs.get(name)
    if v is None:
        return None
    if isinstance(v, np.ndarray):
        return [int(a) for a in v.reshape(-1)]
    if isinstance(v, (int, np.integer)):
        return [int(v)]
    return [int(a) for a in v]


def as_int_list(op: str, arr: np.ndarray | None, what: str) -> list[int] | None:
    if arr is None:
        return None
    a = np.asarray(arr)
    if a.dtype.kind not in "iub":
        raise fail(op, f"{what} must be an integer tensor, got {a.dtype}")
    return [int(v) for v in a.reshape(-1)]


def norm_axis(op: str, axis: int, rank: int, what: str = "axis") -> int:
    if not -rank <= axis < rank:
        raise fail(op, f"{what} {axis} out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def half_via_float32(fn: Kernel) -> Kernel:
    """Run a float16 node in float32 (NumPy's float16 GEMMs are slow and accumulate in half precision)
    and cast the outputs back; other dtypes pass straight through."""

    def wrapper(inputs: list, attrs: dict, opset: int) -> list:
        if inputs and inputs[0] is not None and np.asarray(inputs[0]).dtype == np.float16:
            up = [None if v is None else (np.asarray(v).astype(np.float32) if np.asarray(v).dtype == np.float16
                                          else v) for v in inputs]
            return [o.astype(np.float16) if o.dtype == np.float32 else o for o in fn(up, attrs, opset)]
        return fn(inputs, attrs, opset)

    wrapper.__name__ = fn.__name__
    wrapper.__doc__ = fn.__doc__
    return wrapper
