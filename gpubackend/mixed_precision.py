"""The mixed-precision policy of ``precision="fp16"``: which activations a path keeps in fp32 while
it stores the others in fp16, decided statically from the graph (shapes only, no calibration).

Rule (from per-tensor fp16-storage runs of the zoo, ``tools/fp16_storage_sim.py --keep-small``):
tensors of at most :data:`SMALL_TENSOR_ELEMENTS` elements stay fp32. They are pooled features,
squeeze-excite vectors and their gates: one value scales a whole channel plane, so its rounding
error reaches every pixel of that channel (selfie_segmentation's fp16-storage floor drops from
5.0e-2 to 1.6e-2 with them in fp32), while they hold a negligible share of activation bytes.
The OCR detectors' fp16 losses are spread over their large feature maps; no static rule for
those is known yet.

A path applies the policy where it can store tensors in different formats within one segment
(gles3: RGBA32F beside RGBA16F textures; gles31 / vulkan: ``paths/compute_mixed.py``; segment
inputs and outputs keep the path's format there). gles2 decides per tensor from the graph
(:func:`keeps_fp32`): a kept tensor is an RGBA8 texture of one fp32 per texel beside textures of
two fp16 per texel, also where it crosses to a cpu segment (uploaded and read back as fp32); the
graph's own inputs and outputs keep fp16.
"""

from __future__ import annotations

import math

import numpy as np

from .graph import Graph, Node

SMALL_TENSOR_ELEMENTS = 4096
REASON_SMALL = f"at most {SMALL_TENSOR_ELEMENTS} elements (pooled features, channel gates)"


def keeps_fp32(name: str, graph: Graph) -> str | None:
    """Why the node output ``name`` stays fp32 under ``precision="fp16"`` (None: stored fp16).
    Decided from the graph alone (shape and dtype), so a path's kernel generators, which see one
    node at a time, and its segments agree on every tensor."""
    shape = graph.shape(name) if name else None
    if shape is None or None in shape or np.dtype(graph.dtypes.get(name, np.float32)).kind != "f":
        return None
    return REASON_SMALL if math.prod(shape) <= SMALL_TENSOR_ELEMENTS else None


def fp32_tensors(nodes: list[Node], graph: Graph) -> dict[str, str]:
    """The float outputs of ``nodes`` that stay fp32 under ``precision="fp16"``, each with why."""
    keep: dict[str, str] = {}
    for node in nodes:
        for name in node.outputs:
            why = keeps_fp32(name, graph)
            if why is not None:
                keep[name] = why
    return keep


def fp32_byte_share(nodes: list[Node], graph: Graph, keep: dict[str, str]) -> float:
    """The share of the activation bytes of ``nodes``' float outputs held in fp32 (4 bytes where
    kept, 2 elsewhere)."""
    total = kept = 0
    for node in nodes:
        for name in node.outputs:
            shape = graph.shape(name) if name else None
            if shape is None or None in shape:
                continue
            n = math.prod(shape)
            total += 4 * n if name in keep else 2 * n
            kept += 4 * n if name in keep else 0
    return kept / total if total else 0.0


def describe(nodes: list[Node], graph: Graph, keep: dict[str, str]) -> str:
    """One line for ``explain()``: how many activations stay fp32, why, and their byte share."""
    if not keep:
        return "mixed precision: every activation in fp16"
    reasons: dict[str, int] = {}
    for why in keep.values():
        reasons[why] = reasons.get(why, 0) + 1
    outs = sum(1 for n in nodes for o in n.outputs if o)
    listed = "; ".join(f"{k} {why}" for why, k in reasons.items())
    return (f"mixed precision: {len(keep)} of {outs} activations kept fp32 ({listed}), "
            f"{fp32_byte_share(nodes, graph, keep):.2%} of activation bytes")
