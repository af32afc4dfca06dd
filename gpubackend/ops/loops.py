"""The input axes a node's kernel loops over: the lengths a reduction, a normalisation or a
matrix product runs across (Softmax's axis, a Reduce's axes, the inner length K of MatMul/Gemm,
a Conv's input channels). A kernel's loop counter or accumulator can fail only past some
length (a mediump counter is exact to 2048), so a check of the kernel must keep these axes at
their real length even when it shrinks the others.
"""

from __future__ import annotations

from ..errors import ModelError
from ..graph import Graph, Node
from . import records


def loop_axes(node: Node, graph: Graph) -> dict[str, tuple[int, ...]]:
    """Input name -> the axes of that input the node's kernel loops over (empty: none known)."""
    try:
        rec = records.lower(node, graph)
    except ModelError:
        return {}
    if rec is None or isinstance(rec, str) or not node.inputs or not node.inputs[0]:
        return {}
    x = node.inputs[0]
    shape = graph.shape(x)
    if shape is None:
        return {}
    rank = len(shape)
    axes: dict[str, tuple[int, ...]] = {}
    if isinstance(rec, records.AxisRecord) and rec.op in ("Softmax", "LogSoftmax", "Hardmax"):
        # before opset 13 these flatten every axis from ``axis`` on into one row
        axes[x] = (rec.axis,) if graph.opset >= 13 else tuple(range(rec.axis, rank))
    elif isinstance(rec, records.ReduceRecord) and not rec.noop:
        axes[x] = rec.axes
    elif isinstance(rec, records.ArgRecord):
        axes[x] = (rec.axis,)
    elif isinstance(rec, records.NormRecord):
        if rec.op == "LayerNormalization":
            axes[x] = tuple(range(rec.axis, rank))
        elif rec.op == "InstanceNormalization":
            axes[x] = tuple(range(2, rank))
        elif rec.training:
            axes[x] = (0, *range(2, rank))
    elif isinstance(rec, records.GlobalPoolRecord):
        axes[x] = tuple(range(2, rank))
    elif isinstance(rec, records.MatMulRecord) and len(node.inputs) > 1:
        b_shape = graph.shape(node.inputs[1])
        axes[x] = (rank - 1,)
        if b_shape is not None and node.inputs[1]:
            axes[node.inputs[1]] = (max(len(b_shape) - 2, 0),)
    elif isinstance(rec, records.GemmRecord) and len(node.inputs) > 1:
        axes[x] = (0 if rec.trans_a else 1,)
        axes[node.inputs[1]] = (1 if rec.trans_b else 0,)
    elif isinstance(rec, records.ConvRecord):
        axes[x] = (1,)
    return {name: a for name, a in axes.items() if a}
