"""Calibrated mixed precision: which activations a model needs in fp32 for ``precision="fp16"``
to stay within a tolerance of fp32 on a given input, measured on the CPU.

The measure is onnxruntime (fp32 arithmetic) with activations rounded through float16 where a
GPU path would store them in fp16 (:func:`masked_model`: a switchable round trip after the graph's
float inputs and each chosen node output), against onnxruntime in fp32. Constants stay fp32, as
the GPU paths keep weights and biases in fp32. :func:`calibrate` rounds exactly what
``precision="fp16"`` stores: the float node outputs of gpubackend's own optimised graph (fused
activations leave no separate tensor) less the graph's outputs and the tensors the static rule
of :mod:`gpubackend.mixed_precision` already keeps; it then keeps the fewest of them in fp32,
most harmful first, until the simulated error is below the tolerance times a margin (the GPU
paths' own error lies somewhat above this storage floor: they sum in other orders).

Error: max |got - ref| / max(1, max |ref|) over the outputs (``gpubackend.zoo.check.max_rel_error``).
``gpubackend calibrate-fp16`` is the command; ``tools/fp16_storage_sim.py`` uses the same model.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper

from . import mixed_precision
from .errors import InputError
from .model import to_graph
from .zoo.check import max_rel_error as output_error

FLAG_PREFIX = "__fp16_round__"


def masked_model(model: onnx.ModelProto, names: Iterable[str]) -> tuple[onnx.ModelProto, dict[str, str]]:
    """``model`` with a float16 round trip after each of ``names`` (float graph inputs or node
    outputs) that a boolean scalar graph input switches on, so that one onnxruntime session
    measures any set of roundings; and tensor name -> the name of its switch."""
    inferred = onnx.shape_inference.infer_shapes(model)
    g = inferred.graph
    wanted = list(dict.fromkeys(names))
    rename: dict[str, str] = {}
    flags: dict[str, str] = {}
    nodes: list[onnx.NodeProto] = []

    def round_trip(name: str) -> None:
        flag, half, back, out = (f"{FLAG_PREFIX}{len(flags)}", f"{name}__fp16", f"{name}__fp16_back",
                                 f"{name}__fp16_sel")
        nodes.append(helper.make_node("Cast", [name], [half], to=TensorProto.FLOAT16))
        nodes.append(helper.make_node("Cast", [half], [back], to=TensorProto.FLOAT))
        nodes.append(helper.make_node("Where", [flag, back, name], [out]))
        g.input.append(helper.make_tensor_value_info(flag, TensorProto.BOOL, []))
        flags[name] = flag
        rename[name] = out

    initializers = {i.name for i in g.initializer}
    for inp in list(g.input):
        if inp.name in wanted and inp.name not in initializers:
            round_trip(inp.name)
    outputs = {o.name for o in g.output}
    for node in g.node:
        copy = onnx.NodeProto()
        copy.CopyFrom(node)
        copy.input[:] = [rename.get(i, i) for i in node.input]
        nodes.append(copy)
        for out in node.output:
            if out in wanted and out not in outputs:
                round_trip(out)
    del g.node[:]
    g.node.extend(nodes)
    return inferred, flags


def ort_session(model: onnx.ModelProto, threads: int = 0) -> object:
    """An onnxruntime CPU session that runs the graph as written (no fusion: round where asked)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    if threads:
        opts.intra_op_num_threads = threads
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def stored_tensors(model: onnx.ModelProto,
                   shapes: Mapping[str, tuple[int, ...]]) -> tuple[list[str], list[str], list[str]]:
    """(float graph inputs, node outputs ``precision="fp16"`` stores in fp16, those the static
    rule keeps fp32) for ``model`` specialised to the input ``shapes``: node outputs of
    gpubackend's optimised graph that are also tensors of ``model`` (fusion removes some)."""
    graph = to_graph(model, shapes)
    in_model = {o for n in model.graph.node for o in n.output if o}
    inputs = [n for n in graph.inputs if np.dtype(graph.dtypes.get(n, np.float32)) == np.float32]
    rounded, static = [], []
    for node in graph.nodes:
        for name in node.outputs:
            if not name or name in graph.outputs or name not in in_model or graph.shape(name) is None \
                    or np.dtype(graph.dtypes.get(name, np.float32)) != np.float32:
                continue
            (static if mixed_precision.keeps_fp32(name, graph) else rounded).append(name)
    return inputs, rounded, static


@dataclass
class Calibration:
    """What :func:`calibrate` found. Errors are simulated (fp16 storage on onnxruntime)."""

    keep: list[str]  # the planned tensors, most harmful first
    tolerance: float
    target: float  # tolerance x margin: what the simulated error had to reach
    error_static: float  # every stored tensor fp16 but the static rule's
    error_planned: float  # with ``keep`` in fp32 as well
    candidates: int  # tensors considered (stored fp16 under the static rule)
    static: int  # tensors the static rule keeps
    fp32_byte_share: float  # of activation bytes, static rule and plan together
    runs: int  # onnxruntime runs made
    reached: bool  # error_planned <= target
    harm: dict[str, float] = field(default_factory=dict)  # tensor -> error with only it rounded

    def about(self) -> dict[str, object]:
        """The plan file's description of how it was made."""
        return {"tolerance": self.tolerance, "target": self.target,
                "simulated_error_static_rule": self.error_static, "simulated_error_with_plan": self.error_planned,
                "reached": self.reached, "candidates": self.candidates, "static_rule_keeps": self.static,
                "fp32_activation_byte_share": round(self.fp32_byte_share, 6)}


def calibrate(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], tolerance: float = 2e-2,
              margin: float = 0.5, prune: bool = True, threads: int = 0,
              progress: Callable[[str], None] | None = None) -> Calibration:
    """The fewest stored activations to keep in fp32 so that fp16 storage of the rest stays
    within ``tolerance * margin`` of fp32 on ``feeds``. Ranks every candidate by the error it
    causes rounded alone, keeps the most harmful first (the shortest prefix of that ranking
    that reaches the target, found by doubling then bisection), then with ``prune`` tries to
    drop each kept one again, least harmful first."""
    say = progress or (lambda _msg: None)
    if not 0 < margin <= 1 or not tolerance > 0:
        raise InputError(f"tolerance must be > 0 and margin in (0, 1], not {tolerance!r} / {margin!r}")
    shapes = {n: tuple(np.asarray(v).shape) for n, v in feeds.items()}
    inputs, stored, static = stored_tensors(model, shapes)
    candidates = [*inputs, *stored]  # a path uploads a planned graph input as fp32 too
    masked, flags = masked_model(model, candidates)
    sess = ort_session(masked, threads)
    feeds = {k: np.asarray(v) for k, v in feeds.items()}
    runs = 0

    def run(rounded: Iterable[str]) -> list[np.ndarray]:
        nonlocal runs
        runs += 1
        on = set(rounded)
        switches = {flag: np.array(name in on) for name, flag in flags.items()}
        return sess.run(None, {**feeds, **switches})  # type: ignore[attr-defined]

    target = tolerance * margin
    ref = run(())

    def error_keeping(keep: Iterable[str]) -> float:
        kept = set(keep)
        return output_error(run([c for c in candidates if c not in kept]), ref)

    before = error_keeping(())
    say(f"{len(candidates)} activations stored fp16 ({len(static)} more kept fp32 by the static rule); "
        f"simulated fp16 error {before:.2e}, target {target:.2e}")
    harm: dict[str, float] = {}
    if before > target:
        for i, name in enumerate(candidates):
            harm[name] = output_error(run([name]), ref)
            if (i + 1) % 25 == 0 or i + 1 == len(candidates):
                say(f"  ranked {i + 1}/{len(candidates)} activations by the error each causes alone")
    order = sorted(candidates, key=lambda n: -harm.get(n, 0.0))
    keep: list[str] = []
    err = before
    if before > target:
        errors = {0: before}
        lo, hi = 0, 1
        while hi < len(order):
            errors[hi] = error_keeping(order[:hi])
            say(f"  keeping the {hi} most harmful: {errors[hi]:.2e}")
            if errors[hi] <= target:
                break
            lo, hi = hi, min(2 * hi, len(order))
        if hi >= len(order):
            hi = len(order)
            errors[hi] = error_keeping(order)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            errors[mid] = error_keeping(order[:mid])
            say(f"  keeping the {mid} most harmful: {errors[mid]:.2e}")
            lo, hi = (lo, mid) if errors[mid] <= target else (mid, hi)
        keep, err = order[:hi], errors[hi]
        if prune and err <= target:
            for name in reversed(keep[:]):
                trial = [k for k in keep if k != name]
                e = error_keeping(trial)
                if e <= target:
                    keep, err = trial, e
            say(f"  after pruning: {len(keep)} kept, {err:.2e}")
    graph = to_graph(model, shapes)
    kept = {**{n: "static" for n in static}, **{n: "plan" for n in keep}}
    share = mixed_precision.fp32_byte_share(graph.nodes, graph, kept)
    return Calibration(keep, tolerance, target, before, err, len(candidates), len(static), share, runs,
                       err <= target, harm)


def calibrate_verified(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], tolerance: float = 2e-2,
                       margin: float = 0.5, verify: Iterable[str] = (), verify_within: float | None = None,
                       prune: bool = True, attempts: int = 4,
                       progress: Callable[[str], None] | None = None) -> tuple[Calibration, dict[str, float]]:
    """:func:`calibrate`, then the plan run on each GPU path of ``verify``: while one of them is
    above ``verify_within`` (default ``tolerance``), halve the margin and calibrate again (at most
    ``attempts`` calibrations). Returns the last calibration and each verified path's real error
    with its plan."""
    say = progress or (lambda _msg: None)
    paths = list(verify)
    verified: dict[str, float] = {}
    for attempt in range(attempts):
        cal = calibrate(model, feeds, tolerance, margin, prune=prune, progress=say)
        verified = {}
        for path in paths:
            verified[path] = path_error(model, feeds, path, cal.keep)
            say(f"{path} fp16 with the plan ({len(cal.keep)} kept): {verified[path]:.2e}")
        within = tolerance if verify_within is None else verify_within
        above = [p for p, e in verified.items() if not e <= within]
        if not above or attempt + 1 == attempts or len(cal.keep) == cal.candidates:
            break
        margin /= 2
        say(f"{', '.join(above)} above {within:g}: calibrating again with margin {margin:g}")
    return cal, verified


def path_error(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], path: str, keep: Iterable[str]) -> float:
    """The real error of ``path`` at ``precision="fp16"`` with ``keep`` as the precision plan,
    against onnxruntime in fp32 on ``feeds`` (the check that a simulated plan holds on a GPU)."""
    from .options import SessionOptions
    from .session import Session

    ref = ort_session(model).run(None, dict(feeds))  # type: ignore[attr-defined]
    opts = SessionOptions(precision_plan=list(keep))
    with Session(model.SerializeToString(), path=path, precision="fp16", options=opts) as sess:
        return output_error(sess.run(dict(feeds)), ref)


def storage_error(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], keep: Iterable[str] = (),
                  every_output: bool = True) -> float:
    """The simulated fp16-storage error of ``model`` on ``feeds`` with ``keep`` in fp32: every
    float node output rounded (``every_output``: as written in the model, before any fusion) or
    only what ``precision="fp16"`` stores (gpubackend's graph, static rule applied)."""
    shapes = {n: tuple(np.asarray(v).shape) for n, v in feeds.items()}
    if every_output:
        inferred = onnx.shape_inference.infer_shapes(model).graph
        floats = {v.name for v in (*inferred.value_info, *inferred.input)
                  if v.type.tensor_type.elem_type == TensorProto.FLOAT}
        inputs = [i.name for i in model.graph.input if i.name in floats]
        rounded = [o for n in model.graph.node if n.op_type != "Constant" for o in n.output if o in floats]
    else:
        inputs, rounded, _ = stored_tensors(model, shapes)
    kept = set(keep)
    masked, flags = masked_model(model, [*inputs, *rounded])
    sess = ort_session(masked)
    off = {flag: np.array(False) for flag in flags.values()}
    ref = sess.run(None, {**feeds, **off})  # type: ignore[attr-defined]
    on = {flag: np.array(name not in kept) for name, flag in flags.items()}
    return output_error(sess.run(None, {**feeds, **on}), ref)  # type: ignore[attr-defined]


def elements(model: onnx.ModelProto, shapes: Mapping[str, tuple[int, ...]]) -> dict[str, int]:
    """Node output -> element count in gpubackend's graph at ``shapes`` (where static)."""
    graph = to_graph(model, shapes)
    return {o: math.prod(graph.shape(o) or ()) for n in graph.nodes for o in n.outputs
            if o and graph.shape(o) is not None}
