"""Running a zoo model on a path against onnxruntime, and what of it stays on the path.

Used by tests/test_zoo.py, tools/zoo_table.py (docs/zoo.md) and benchmarks/bench_zoo.py."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ..errors import UnsupportedOperatorError
from .cache import fetch
from .inputs import make_input
from .manifest import ZooModel

if TYPE_CHECKING:
    from ..options import SessionOptions


def rel_error(got: np.ndarray, ref: np.ndarray) -> float:
    """max|got - ref| / max(1, max|ref|); NaN where NaN/Inf positions or signs disagree."""
    got = np.asarray(got, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if got.shape != ref.shape:
        return float("nan")
    finite = np.isfinite(ref)
    if not np.array_equal(finite, np.isfinite(got)) or not np.array_equal(got[~finite], ref[~finite],
                                                                          equal_nan=True):
        return float("nan")
    if not finite.any():
        return 0.0
    diff = np.abs(got[finite] - ref[finite]).max()
    return float(diff / max(1.0, float(np.abs(ref[finite]).max())))


# An output whose reference spans less than this is too flat for the error measure to mean
# anything (a DBNet map of ~1e-6 everywhere matches any near-zero answer): the input is wrong.
MIN_OUTPUT_SPREAD = 1e-2


def flat_outputs(ref: list[np.ndarray]) -> list[tuple[int, float]]:
    """(index, spread) of each reference output whose finite values span less than
    MIN_OUTPUT_SPREAD (max - min)."""
    flat = []
    for i, r in enumerate(ref):
        finite = np.asarray(r, dtype=np.float64)[np.isfinite(r)]
        spread = float(finite.max() - finite.min()) if finite.size else 0.0
        if spread < MIN_OUTPUT_SPREAD:
            flat.append((i, spread))
    return flat


def ort_session(model: ZooModel):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    return ort.InferenceSession(str(fetch(model.name)), opts, providers=["CPUExecutionProvider"])


def reference(model: ZooModel, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """onnxruntime's outputs (CPU) for ``feeds``."""
    return ort_session(model).run(None, feeds)


@dataclass
class Coverage:
    """How a model sits on one path: ``declines`` are the nodes that leave it with
    ``fallback=False`` (node name, op type, reason); ``segments`` counts the segments of the
    ``fallback=True`` plan (path and cpu)."""

    path: str
    nodes: int
    declines: list[tuple[str, str, str]] = field(default_factory=list)
    segments: int = 0

    @property
    def on_path(self) -> int:
        return self.nodes - len(self.declines)


def coverage(model: ZooModel, paths: tuple[str, ...] | list[str], small: bool = False) -> dict[str, Coverage]:
    """For each GPU path: place the model's specialised graph on that path alone (as
    ``fallback=False`` does) and on it plus cpu (as ``fallback=True`` does), compiling nothing."""
    from ..model import load_model, to_graph
    from ..paths import create_path
    from ..planner import place

    feeds = make_input(model, small=small)
    graph = to_graph(load_model(str(fetch(model.name))), {k: tuple(v.shape) for k, v in feeds.items()})
    cpu = create_path("cpu")
    out = {}
    for key in paths:
        target = create_path(key)
        declines: list[tuple[str, str, str]] = []
        try:
            place(graph, graph.nodes, [target])
        except UnsupportedOperatorError as exc:
            declines = [(name, op, "; ".join(r.split(": ", 1)[-1] for r in reasons))
                        for name, op, reasons in exc.nodes]
        plan = place(graph, graph.nodes, [target, cpu] if key != "cpu" else [target])
        out[key] = Coverage(key, len(graph.nodes), declines, len(plan.segments))
    return out


def session_options(model: ZooModel, precision: str, small: bool = False, plan: bool = True,
                    cpu_engine: str = "auto") -> SessionOptions:
    """The options the zoo runs ``model`` with: at ``precision="fp16"``, its shipped calibrated
    precision plan where it has one (``plan=False``: the static rule alone)."""
    from ..options import SessionOptions
    from .plans import fp16_plan

    shipped = fp16_plan(model, small) if plan and precision == "fp16" else None
    return SessionOptions(precision_plan=str(shipped) if shipped else None, cpu_engine=cpu_engine)


def run_on_path(model: ZooModel, path: str, precision: str = "fp32", small: bool = False,
                fallback: bool = True, plan: bool = True) -> tuple[list[np.ndarray], list[np.ndarray], object]:
    """(gpubackend's outputs, onnxruntime's outputs, the session) for the model's input; fp16 runs
    with the model's shipped precision plan unless ``plan`` is False. ``path`` may name a CPU
    engine as the benchmarks do: "cpu:numpy" is the cpu path on the NumPy engine."""
    from ..session import Session

    path, _, engine = path.partition(":")
    feeds = make_input(model, small=small)
    ref = reference(model, feeds)
    sess = Session(str(fetch(model.name)), path=path, precision=precision, fallback=fallback,
                   options=session_options(model, precision, small, plan, engine or "auto"))
    got = sess.run(feeds)
    return got, ref, sess


def max_rel_error(got: list[np.ndarray], ref: list[np.ndarray]) -> float:
    errs = [rel_error(g, r) for g, r in zip(got, ref)]
    return float("nan") if any(np.isnan(errs)) else max(errs)
