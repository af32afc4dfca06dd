"""The backend-neutral graph every path plans against: nodes in topological order with decoded
attributes, constants as NumPy arrays, and static shapes where they are known."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

Shape = tuple[int, ...]


@dataclass
class Node:
    name: str
    op_type: str
    inputs: list[str]  # "" marks an absent optional input
    outputs: list[str]
    attrs: dict[str, Any] = field(default_factory=dict)
    domain: str = ""

    def __repr__(self) -> str:
        return f"Node({self.name!r}, {self.op_type}, {self.inputs} -> {self.outputs})"


@dataclass
class Graph:
    nodes: list[Node]
    inputs: list[str]  # runtime feeds, initializers excluded
    outputs: list[str]
    constants: dict[str, np.ndarray]
    shapes: dict[str, Shape] = field(default_factory=dict)  # static shapes, where known
    dtypes: dict[str, np.dtype] = field(default_factory=dict)
    opset: int = 17
    # declared input shapes, None for a symbolic dimension
    input_shapes: dict[str, tuple[int | None, ...]] = field(default_factory=dict)
    fused: dict[str, list[str]] = field(default_factory=dict)  # node name -> names folded into it
    # folded constant -> ops.quant.DequantizedWeight: the constant was DequantizeLinear of integers
    dequantized: dict[str, Any] = field(default_factory=dict)
    # activations a precision plan keeps fp32 under precision="fp16" (gpubackend.mixed_precision)
    fp32_plan: frozenset[str] = frozenset()
    # activations a rewrite made that stay fp32 under precision="fp16", each with why
    fp32_rewritten: dict[str, str] = field(default_factory=dict)
    # Conv name -> the name of the upsampling Resize it now runs before (rewrites.conv_before_upsample)
    conv_before_upsample: dict[str, str] = field(default_factory=dict)

    def producers(self) -> dict[str, Node]:
        return {o: n for n in self.nodes for o in n.outputs if o}

    def consumers(self) -> dict[str, list[Node]]:
        out: dict[str, list[Node]] = {}
        for n in self.nodes:
            for i in n.inputs:
                if i:
                    out.setdefault(i, []).append(n)
        return out

    def is_const(self, name: str) -> bool:
        return name in self.constants

    def shape(self, name: str) -> Shape | None:
        if name in self.constants:
            return tuple(self.constants[name].shape)
        return self.shapes.get(name)
