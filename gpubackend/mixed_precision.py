"""The mixed-precision policy of ``precision="fp16"``: which activations a path keeps in fp32 while
it stores the others in fp16. Two sources: a static rule from the graph's shapes, and a
*precision plan* (``SessionOptions.precision_plan``: tensor names, or a JSON file that
``gpubackend calibrate-fp16`` writes from measurements, :mod:`gpubackend.fp16_calibration`).

Rule (from per-tensor fp16-storage runs of the zoo, ``tools/fp16_storage_sim.py --keep-small``):
tensors of at most :data:`SMALL_TENSOR_ELEMENTS` elements stay fp32. They are pooled features,
squeeze-excite vectors and their gates: one value scales a whole channel plane, so its rounding
error reaches every pixel of that channel (selfie_segmentation's fp16-storage floor drops from
5.0e-2 to 1.6e-2 with them in fp32), while they hold a negligible share of activation bytes.
The OCR detectors' fp16 losses are spread over their large feature maps; no static rule for
those is known, hence the calibrated plan: the session puts its names on the graph
(``Graph.fp32_plan``), so every question below answers the same for them.

A path applies the policy where it can store tensors in different formats within one segment
(gles3: RGBA32F beside RGBA16F textures; gles31 / vulkan: ``paths/compute_mixed.py``; segment
inputs and outputs keep the path's format there). gles2 decides per tensor from the graph
(:func:`keeps_fp32`): a kept tensor is an RGBA8 texture of one fp32 per texel beside textures of
two fp16 per texel, also where it crosses to a cpu segment (uploaded and read back as fp32); the
graph's own inputs and outputs keep fp16.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable

import numpy as np
import onnx

from .errors import OptionError
from .graph import Graph, Node

SMALL_TENSOR_ELEMENTS = 4096
REASON_SMALL = f"at most {SMALL_TENSOR_ELEMENTS} elements (pooled features, channel gates)"
REASON_CALIBRATED = "calibrated (precision plan)"
PLAN_FORMAT = "gpubackend-precision-plan"

PlanLike = str | os.PathLike | Iterable[str]


def keeps_fp32(name: str, graph: Graph) -> str | None:
    """Why the node output ``name`` stays fp32 under ``precision="fp16"`` (None: stored fp16).
    Decided from the graph alone (shape, dtype and ``graph.fp32_plan``), so a path's kernel
    generators, which see one node at a time, and its segments agree on every tensor."""
    shape = graph.shape(name) if name else None
    if shape is None or None in shape or np.dtype(graph.dtypes.get(name, np.float32)).kind != "f":
        return None
    if math.prod(shape) <= SMALL_TENSOR_ELEMENTS:
        return REASON_SMALL
    if name in graph.fp32_rewritten:
        return graph.fp32_rewritten[name]
    return REASON_CALIBRATED if name in graph.fp32_plan else None


def fp32_tensors(nodes: list[Node], graph: Graph) -> dict[str, str]:
    """The float outputs of ``nodes`` that stay fp32 under ``precision="fp16"``, each with why."""
    keep: dict[str, str] = {}
    for node in nodes:
        for name in node.outputs:
            why = keeps_fp32(name, graph)
            if why is not None:
                keep[name] = why
    return keep


def planned_edges(graph: Graph, edges: Iterable[str]) -> dict[str, str]:
    """The float tensors among a segment's inputs and outputs (``edges``) that the precision plan
    keeps fp32, graph outputs aside (they keep the path's format): a path uploads them, and reads
    them back, as fp32. The graph's own inputs (the static rule never keeps an input:
    selfie_segmentation's rounded input image alone puts it past 2e-2) and the tensors a segment
    exchanges with a CPU segment."""
    return {n: REASON_CALIBRATED for n in edges
            if n in graph.fp32_plan and n not in graph.outputs
            and np.dtype(graph.dtypes.get(n, np.float32)).kind == "f"}


def planned_inputs(graph: Graph) -> dict[str, str]:
    """The graph's float inputs that the precision plan keeps fp32 (:func:`planned_edges`)."""
    return planned_edges(graph, graph.inputs)


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


def read_plan(plan: PlanLike) -> tuple[frozenset[str], str]:
    """(the tensor names, where they came from) of a precision plan: a path to a JSON plan
    (``{"format": "gpubackend-precision-plan", "keep_fp32": [...], ...}``, as
    :func:`write_plan` writes it) or the names themselves. OptionError names a file that cannot
    be read or is not a plan."""
    if isinstance(plan, (str, os.PathLike)):
        try:
            with open(plan, encoding="utf-8") as f:
                data = json.load(f)
        except OSError as exc:
            raise OptionError(f"precision plan {os.fspath(plan)!r} cannot be read: {exc}") from exc
        except ValueError as exc:
            raise OptionError(f"precision plan {os.fspath(plan)!r} is not JSON: {exc}") from exc
        names = data.get("keep_fp32") if isinstance(data, dict) else None
        if not isinstance(data, dict) or data.get("format") != PLAN_FORMAT or not isinstance(names, list) \
                or not all(isinstance(n, str) for n in names):
            raise OptionError(f"precision plan {os.fspath(plan)!r} is not a {PLAN_FORMAT} file (a JSON object "
                              f"with \"format\": \"{PLAN_FORMAT}\" and \"keep_fp32\": a list of tensor names)")
        return frozenset(names), f"plan {os.path.basename(os.fspath(plan))}"
    names = list(plan)
    if not all(isinstance(n, str) for n in names):
        raise OptionError(f"precision_plan must be a JSON file's path or a list of tensor names, not {plan!r}")
    return frozenset(names), "names given"


def write_plan(path: str | os.PathLike, names: Iterable[str], **about: object) -> None:
    """Write a precision plan that :func:`read_plan` reads: the names, and ``about`` (how it was
    made: model, input, tolerance, errors) for people."""
    data = {"format": PLAN_FORMAT, "version": 1, **about, "keep_fp32": sorted(names)}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1)
        f.write("\n")


def check_plan(names: frozenset[str], proto: onnx.ModelProto) -> None:
    """OptionError naming the plan's names that are neither a node output nor an input of
    ``proto`` (a plan made for another model, or a typo): a name that matched nothing would
    silently keep nothing fp32."""
    initializers = {i.name for i in proto.graph.initializer}
    known = {o for n in proto.graph.node for o in n.output if o} | {
        i.name for i in proto.graph.input if i.name not in initializers}
    unknown = sorted(names - known)
    if unknown:
        shown = ", ".join(map(repr, unknown[:8])) + (f" and {len(unknown) - 8} more" if len(unknown) > 8 else "")
        raise OptionError(f"precision plan: {len(unknown)} name(s) are neither a node output nor an input of the "
                          f"model: {shown}")
