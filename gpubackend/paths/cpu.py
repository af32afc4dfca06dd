"""The CPU path: every node through the NumPy kernels of ``fallback``."""

from __future__ import annotations

import time

import numpy as np

import fallback

from ..graph import Graph, Node
from .base import Path, RunStats, Segment


class CpuSegment(Segment):
    def __init__(self, nodes: list[Node], graph: Graph, inputs: list[str], outputs: list[str]):
        super().__init__("cpu", nodes, inputs, outputs)
        self._constants = graph.constants
        self._opset = graph.opset
        # Release each intermediate after its last use inside the segment.
        last_use: dict[str, int] = {}
        for idx, node in enumerate(nodes):
            for name in node.inputs:
                last_use[name] = idx
        keep = set(outputs) | set(inputs)
        self._release = [[n for n in node.inputs if n and last_use.get(n) == idx and n not in keep]
                         for idx, node in enumerate(nodes)]

    def run(self, feeds: dict[str, np.ndarray], stats: RunStats) -> dict[str, np.ndarray]:
        env = dict(feeds)
        consts = self._constants
        for node, release in zip(self.nodes, self._release):
            args = [None if not n else env[n] if n in env else consts[n] for n in node.inputs]
            t0 = time.perf_counter() if stats.profile else 0.0
            results = fallback.run_node(node.op_type, args, node.attrs, self._opset)
            if stats.profile:
                stats.node_seconds[node.name] = time.perf_counter() - t0
            for name, value in zip(node.outputs, results):
                if name:
                    env[name] = value
            for name in release:
                env.pop(name, None)
        return {name: env[name] for name in self.outputs}


class CpuPath(Path):
    key = "cpu"

    def decline(self, node: Node, graph: Graph) -> str | None:
        if node.domain not in ("", "ai.onnx"):
            return f"no CPU kernel for domain {node.domain!r}"
        if node.op_type not in fallback.supported_ops():
            return f"no CPU kernel for {node.op_type}"
        return None

    def compile(self, nodes: list[Node], graph: Graph, inputs: list[str], outputs: list[str]) -> Segment:
        return CpuSegment(nodes, graph, inputs, outputs)


def create(precision: str = "fp32", disabled_kernels: frozenset[str] = frozenset()) -> CpuPath:
    return CpuPath(precision, disabled_kernels)
