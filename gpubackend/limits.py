"""Resource limits checked on a specialised graph before anything is allocated or dispatched.

A hostile or mistaken model (a Resize with scales 1e5, sizes of 65536 x 65536, a convolution over a
gigapixel input) otherwise costs the caller's memory or hangs a dispatch loop. Once every shape is
static, the sizes are known, so the check is exact and cheap: it reads shapes only.

Three limits, each a field of :class:`gpubackend.SessionOptions` with an environment override:

=========================  ===================================  ====================================
field                      default                              environment
=========================  ===================================  ====================================
``max_tensor_elements``    2**28 (1 GiB as float32)             ``GPUBACKEND_MAX_TENSOR_ELEMENTS``
``max_total_bytes``        8 GiB (every tensor of the graph)    ``GPUBACKEND_MAX_TOTAL_BYTES``
``max_node_macs``          2**40 multiply-adds per node         ``GPUBACKEND_MAX_NODE_MACS``
=========================  ===================================  ====================================

``max_total_bytes`` adds up every input, constant and intermediate tensor as if all were alive at
once: an upper bound of what any path allocates for one run. Set a limit to 0 to disable it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from . import ops
from .errors import ResourceLimitError
from .graph import Graph, Node

DEFAULT_MAX_TENSOR_ELEMENTS = 1 << 28
DEFAULT_MAX_TOTAL_BYTES = 8 << 30
DEFAULT_MAX_NODE_MACS = 1 << 40


@dataclass(frozen=True)
class ResourceLimits:
    max_tensor_elements: int = DEFAULT_MAX_TENSOR_ELEMENTS
    max_total_bytes: int = DEFAULT_MAX_TOTAL_BYTES
    max_node_macs: int = DEFAULT_MAX_NODE_MACS


def node_macs(node: Node, graph: Graph) -> int | None:
    """Multiply-adds of a Conv / ConvTranspose / Gemm / MatMul node (None when not such a node or
    a shape is unknown)."""
    def shape(i: int) -> tuple[int, ...] | None:
        return graph.shape(node.inputs[i]) if len(node.inputs) > i and node.inputs[i] else None

    out = graph.shape(node.outputs[0]) if node.outputs and node.outputs[0] else None
    if node.op_type == "Conv":
        w = shape(1)
        return math.prod(out) * math.prod(w[1:]) if out and w else None
    if node.op_type == "ConvTranspose":
        x, w = shape(0), shape(1)
        return math.prod(x) * math.prod(w[1:]) if x and w else None
    if node.op_type in ("MatMul", "Gemm"):
        a = shape(0)
        if not out or not a:
            return None
        rec = ops.lower(node, graph)
        k = a[0] if isinstance(rec, ops.GemmRecord) and rec.trans_a else a[-1]
        return math.prod(out) * k
    return None


def _itemsize(graph: Graph, name: str) -> int:
    dtype = graph.constants[name].dtype if name in graph.constants else graph.dtypes.get(name, np.dtype(np.float32))
    return np.dtype(dtype).itemsize


def check(graph: Graph, limits: ResourceLimits) -> None:
    """Raise ResourceLimitError naming the first node (op, tensor, size) over a limit."""
    total = sum(int(value.nbytes) for value in graph.constants.values())
    for name in graph.inputs:  # the feeds are uploaded too
        shape = graph.shape(name)
        if shape is not None and name not in graph.constants:
            total += math.prod(shape) * _itemsize(graph, name)
    for node in graph.nodes:
        for out in node.outputs:
            shape = graph.shape(out) if out else None
            if shape is None:
                continue
            elements = math.prod(shape)
            if limits.max_tensor_elements and elements > limits.max_tensor_elements:
                raise ResourceLimitError(
                    f"node {node.name} ({node.op_type}): output {out!r} would have shape {tuple(shape)} = "
                    f"{elements:,} elements, over the limit of {limits.max_tensor_elements:,} "
                    "(SessionOptions.max_tensor_elements / GPUBACKEND_MAX_TENSOR_ELEMENTS)", node.name, node.op_type)
            if out not in graph.constants:
                total += elements * _itemsize(graph, out)
        macs = node_macs(node, graph)
        if limits.max_node_macs and macs is not None and macs > limits.max_node_macs:
            raise ResourceLimitError(
                f"node {node.name} ({node.op_type}): {macs:,} multiply-adds, over the limit of "
                f"{limits.max_node_macs:,} (SessionOptions.max_node_macs / GPUBACKEND_MAX_NODE_MACS)",
                node.name, node.op_type)
    if limits.max_total_bytes and total > limits.max_total_bytes:
        raise ResourceLimitError(
            f"the model's tensors add up to {total / 2**30:.2f} GiB for these input shapes, over the limit of "
            f"{limits.max_total_bytes / 2**30:.2f} GiB (SessionOptions.max_total_bytes / GPUBACKEND_MAX_TOTAL_BYTES)")
