"""The roofline: FLOPs and bytes of the compute-heavy nodes (Conv, ConvTranspose, Gemm,
MatMul), their arithmetic intensity, and achieved rates as fractions of a path's measured peaks.

Conventions: a multiply-add is 2 FLOP; FLOPs are ``2 * outputs * reduction length``; bytes moved
are the ideal traffic (input + weights + bias + output, each read or written once) at the path's
storage width (2 bytes for fp16 on a GPU path, else 4). A node whose intensity (FLOP/byte) is
below the path's ridge point (peak FLOP/s / peak bytes/s) is memory-bound, else compute-bound."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from .. import ops
from ..graph import Graph, Node
from .micro import Peak

HEAVY_OPS = ("Conv", "ConvTranspose", "Gemm", "MatMul")


@dataclass
class NodeCost:
    name: str
    op_type: str
    kind: str  # "conv", "depthwise", "pointwise", "convtranspose", "gemm", "matmul"
    flops: float
    bytes: float
    shape: str  # human-readable summary, e.g. "1x64x128x128 -> 1x64x128x128, 3x3"

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes if self.bytes else 0.0


def _numel(shape: tuple[int, ...] | None) -> int:
    return int(np.prod(shape)) if shape else 0


def _fmt(shape: tuple[int, ...] | None) -> str:
    return "x".join(str(d) for d in shape) if shape else "?"


def node_cost(node: Node, graph: Graph, elem_bytes: int = 4) -> NodeCost | None:
    """FLOPs and ideal bytes of a heavy node with static shapes, else None."""
    if node.op_type not in HEAVY_OPS:
        return None
    shapes = [graph.shape(n) if n else None for n in node.inputs]
    out = graph.shape(node.outputs[0])
    if out is None or len(shapes) < 2 or shapes[0] is None or shapes[1] is None:
        return None
    x, w = shapes[0], shapes[1]
    bias = _numel(shapes[2]) if len(shapes) > 2 and shapes[2] is not None else 0
    moved = (_numel(x) + _numel(w) + bias + _numel(out)) * elem_bytes
    rec = ops.lower(node, graph)
    if node.op_type == "Conv":
        group = rec.group if isinstance(rec, ops.ConvRecord) else 1
        reduction = _numel(w[1:])
        kind = "depthwise" if group > 1 and group == x[1] else "pointwise" if _numel(w[2:]) == 1 else "conv"
        kernel = "x".join(str(d) for d in w[2:])
        return NodeCost(node.name, node.op_type, kind, 2.0 * _numel(out) * reduction, moved,
                        f"{_fmt(x)} -> {_fmt(out)}, {kernel}" + (f", group {group}" if group > 1 else ""))
    if node.op_type == "ConvTranspose":
        group = rec.group if isinstance(rec, ops.ConvRecord) else 1
        return NodeCost(node.name, node.op_type, "convtranspose", 2.0 * _numel(x) * _numel(w[1:]), moved,
                        f"{_fmt(x)} -> {_fmt(out)}, {'x'.join(str(d) for d in w[2:])}")
    if node.op_type == "Gemm":
        k = x[0] if isinstance(rec, ops.GemmRecord) and rec.trans_a else x[-1]
        return NodeCost(node.name, node.op_type, "gemm", 2.0 * _numel(out) * k, moved,
                        f"{_fmt(out)} x K={k}")
    k = x[-1]  # MatMul
    return NodeCost(node.name, node.op_type, "matmul", 2.0 * _numel(out) * k, moved, f"{_fmt(out)} x K={k}")


def graph_costs(graph: Graph, elem_bytes: int = 4) -> dict[str, NodeCost]:
    """Node name -> cost for every heavy node of ``graph`` with static shapes."""
    costs = {}
    for node in graph.nodes:
        c = node_cost(node, graph, elem_bytes)
        if c is not None:
            costs[node.name] = c
    return costs


def total_flops(graph: Graph) -> float:
    """FLOPs of the heavy nodes (the rest of a CNN is noise next to them)."""
    return sum(c.flops for c in graph_costs(graph).values())


@dataclass
class RooflinePoint:
    name: str
    op_type: str
    kind: str
    shape: str
    gflop: float
    mbytes: float
    intensity: float  # FLOP / byte
    seconds: float
    gflops: float  # achieved GFLOP/s
    gbytes: float  # achieved GB/s (ideal bytes / time)
    frac_flops: float | None  # of the path's FMA peak
    frac_bytes: float | None  # of the path's copy bandwidth
    bound: str  # "compute", "memory" or "?" (no peaks)
    frac_roof: float | None  # achieved / attainable under the roofline

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def point(cost: NodeCost, seconds: float, peak: Peak | None) -> RooflinePoint:
    """Where a node measured at ``seconds`` sits against ``peak``."""
    gflops = cost.flops / seconds / 1e9 if seconds > 0 else 0.0
    gbytes = cost.bytes / seconds / 1e9 if seconds > 0 else 0.0
    frac_f = frac_b = roof = None
    bound = "?"
    if peak is not None and peak.gflops and peak.gbytes:
        frac_f = gflops / peak.gflops
        frac_b = gbytes / peak.gbytes
        attainable = min(peak.gflops, cost.intensity * peak.gbytes)
        bound = "compute" if cost.intensity >= (peak.ridge or 0.0) else "memory"
        roof = gflops / attainable if attainable > 0 else None
    return RooflinePoint(cost.name, cost.op_type, cost.kind, cost.shape, cost.flops / 1e9, cost.bytes / 1e6,
                         cost.intensity, seconds, gflops, gbytes, frac_f, frac_b, bound, roof)


def points(costs: dict[str, NodeCost], node_seconds: dict[str, float], peak: Peak | None) -> list[RooflinePoint]:
    """Roofline points for every costed node that has a measured time, most FLOPs first."""
    out = [point(costs[n], s, peak) for n, s in node_seconds.items() if n in costs and s > 0]
    return sorted(out, key=lambda p: -p.gflop)
