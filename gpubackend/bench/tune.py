"""Timing kernel variants: ``gpubackend tune MODEL`` and the first-use tuning of a device.

Both go through :func:`time_variants`: one session per *trial* (a choice of variant per tuning
unit, made with :func:`gpubackend.tuning.trial`, so other threads' sessions are not affected),
run interleaved round after round (A/B/C, A/B/C, ...: drift and load hit every variant alike),
per-node median seconds from the profiled runs.

- :func:`tune_model` (``gpubackend tune``): per unit the model uses, one trial per variant; per
  shape class the variant with the least summed median time is stored for this driver.
- :func:`first_use` (a session creating a vulkan or gles31 path on a driver with no device-wide
  record, ``SessionOptions.tune="auto"``): the unit's first-use variants for the device class
  (:meth:`gpubackend.tuning.Unit.first_use_for`) timed on :func:`representative_model`, conv and
  gemm in the same sessions; per unit (and shape kind: gemm's few-row layers) the variant with the
  least geometric mean time over its layers is stored as the device-wide record (shape class
  ``"*"``, ``"* rows<=16"``). A file lock makes one process
  measure while the others wait and then read its record.
"""

from __future__ import annotations

import functools
import logging
import math
import time
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from .. import tuning
from ..options import SessionOptions

log = logging.getLogger("gpubackend")

FIRST_USE_ROUNDS = 7
# How long a session waits for another process's first-use measurement before running the defaults.
FIRST_USE_LOCK_WAIT_S = 120.0
# A variant whose outputs differ from the CPU's by more than this (relative to max(1, max|ref|))
# is not a candidate: every variant is tested, but a driver can still miscompile one.
FIRST_USE_TOLERANCE = 1e-3


@dataclass
class TrialResult:
    """One trial of :func:`time_variants`: the variants it forced, the nodes of each forced unit
    on the path by shape class, each node's median seconds, or why it could not run."""

    choices: dict[str, str]
    classes: dict[str, dict[str, set[str]]] = field(default_factory=dict)  # unit -> shape class -> nodes
    seconds: dict[str, float] = field(default_factory=dict)  # node -> median seconds
    error: str = ""


def time_variants(data: bytes, path: str, trials: list[dict[str, str]], feeds: dict[str, np.ndarray],
                  rounds: int, options: SessionOptions | None = None,
                  input_shapes: dict[str, tuple[int, ...]] | None = None,
                  reference: list[np.ndarray] | None = None, tolerance: float = FIRST_USE_TOLERANCE
                  ) -> list[TrialResult]:
    """Time each trial (unit -> variant) of ``data`` on ``path``. A trial that fails to build or
    run, or whose outputs stray from ``reference`` by more than ``tolerance``, keeps its error and
    no times. If the first trial's forced units run on no node of the path, nothing more is
    built or timed (the model has no kernel of those units there)."""
    import gpubackend

    opts = replace(options or SessionOptions(), path=path, providers=None, tune="off")
    results = [TrialResult(dict(choices)) for choices in trials]
    sessions: dict[int, Any] = {}
    try:
        for i, res in enumerate(results):
            try:
                with tuning.trial(**res.choices), tuning.recording() as seen:
                    sess = gpubackend.Session(data, options=opts, input_shapes=input_shapes)
                    sessions[i] = sess
                    got = sess.run(feeds)  # generates and compiles every kernel of the trial
            except Exception as exc:  # noqa: BLE001 - a variant the driver cannot build is no candidate
                res.error = f"{type(exc).__name__}: {exc}"
                log.warning("tuning trial %s on %s failed: %s", res.choices, path, res.error)
                continue
            placed = {n for n, k in sess.placement.items() if k == path}
            for node, unit, cls, _ in seen:
                if unit in res.choices and node in placed:
                    res.classes.setdefault(unit, {}).setdefault(cls, set()).add(node)
            if i == 0 and not res.classes:
                return []
            if reference is not None:
                err = max((float(np.abs(g - r).max()) / max(1.0, float(np.abs(r).max()))
                           for g, r in zip(got, reference) if r.size), default=0.0)
                if not err <= tolerance:
                    res.error = f"outputs differ from the CPU's by {err:.1e}"
                    log.warning("tuning trial %s on %s left out: %s", res.choices, path, res.error)
                    sessions.pop(i).close()
        samples: dict[int, dict[str, list[float]]] = {i: {} for i in sessions}
        for _ in range(rounds):
            for i, sess in sessions.items():
                sess.run(feeds, profile=True)
                for node, secs in sess.stats.node_seconds.items():
                    samples[i].setdefault(node, []).append(secs)
    finally:
        for sess in sessions.values():
            sess.close()
    for i, per_node in samples.items():
        results[i].seconds = {node: float(np.median(ts)) for node, ts in per_node.items()}
    return results


def distinct_variants(variants: tuple[tuning.Variant, ...], path: str) -> list[tuning.Variant]:
    """``variants`` less those that compile to the same kernel on ``path`` as an earlier one: on
    Vulkan the GL ES-only buffer-texture defines are dropped, so ``px4cb4tex`` is ``px4cb4``
    (timing both wasted the measurement, and their spread, up to 1.3x for one binary, could name a
    texture variant the winner)."""
    from ..shaders.build_spirv import GL_ONLY_DEFINES

    seen: set[tuple] = set()
    out = []
    for v in variants:
        key = (tuple(d for d in v.defines if path != "vulkan" or d[0] not in GL_ONLY_DEFINES), v.local)
        if key not in seen:
            seen.add(key)
            out.append(v)
    return out


def tune_model(model: str | bytes, path: str, precision: str = "fp32", rounds: int = 5,
               input_shapes: dict[str, tuple[int, ...]] | None = None, write: bool = True) -> list[dict[str, Any]]:
    """One row per (unit, shape class) the model runs on ``path``: the nodes, each variant's
    summed median seconds, the best and the default; stored in the tuning file when ``write``."""
    import gpubackend

    from .runner import make_inputs

    data = model if isinstance(model, bytes) else open(model, "rb").read()
    feeds = make_inputs(data, input_shapes=input_shapes)
    table = tuning.load(path, gpubackend.probe().fingerprint)
    rows: list[dict[str, Any]] = []
    for unit, spec in tuning.units().items():
        if path not in spec.paths:
            continue
        trials = [{unit: v.name} for v in distinct_variants(spec.variants, path)]
        results = [r for r in time_variants(data, path, trials, feeds, rounds,
                                            SessionOptions(precision=precision), input_shapes) if not r.error]
        classes: dict[str, set[str]] = {}
        for res in results:
            for cls, nodes in res.classes.get(unit, {}).items():
                classes.setdefault(cls, set()).update(nodes)
        for cls, nodes in sorted(classes.items()):
            totals = {res.choices[unit]: float(sum(res.seconds[n] for n in nodes if n in res.seconds))
                      for res in results}
            best = min(totals, key=lambda v: totals[v])
            default = spec.default_for(table.device_class).name
            row = {"path": path, "unit": unit, "shape_class": cls, "nodes": sorted(nodes), "seconds": totals,
                   "best": best, "default": default,
                   "speedup": totals[default] / totals[best] if totals.get(default) and totals[best] > 0 else 1.0}
            if write and table.fingerprint_id:
                tuning.store(table, unit, cls, best, totals, note=f"{len(nodes)} node(s), {rounds} rounds")
            row["stored"] = bool(write and table.fingerprint_id)
            rows.append(row)
    return rows


# ---- first use --------------------------------------------------------------------------------
@functools.lru_cache(maxsize=1)
def representative_model() -> bytes:
    """The layers the first-use tuning times, independent of each other (one input each): the
    conv unit on a 3x3 stride-1 32->32 layer at 32x32, a 3x3 stride-2 32->64 layer at 56x56 and a
    3x3 stride-2 RGB stem (3->16 at 128x128); the gemm unit on 1x1 convolutions 64->64 at 32x32
    and 16->96 at 56x56 and a 256x256x256 MatMul, and on one-row fully connected layers
    1024->256 and 576->1024 (its few-row kind). Each runs 0.3-5 ms on lavapipe/llvmpipe."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    nodes, inputs, outputs, inits = [], [], [], []

    def add(name: str, op: str, x_shape: list[int], y_shape: list[int], weights: list[np.ndarray],
            **attrs: Any) -> None:
        names = [f"{name}/w{i}" for i in range(len(weights))]
        inits.extend(numpy_helper.from_array(w, n) for w, n in zip(weights, names))
        inputs.append(helper.make_tensor_value_info(f"{name}/x", TensorProto.FLOAT, x_shape))
        outputs.append(helper.make_tensor_value_info(f"{name}/y", TensorProto.FLOAT, y_shape))
        nodes.append(helper.make_node(op, [f"{name}/x", *names], [f"{name}/y"], name=name, **attrs))

    def conv(name: str, ci: int, co: int, size: int, k: int, stride: int) -> None:
        out = (size + 2 * (k // 2) - k) // stride + 1
        w = (rng.standard_normal((co, ci, k, k)) / np.sqrt(ci * k * k)).astype(np.float32)
        add(name, "Conv", [1, ci, size, size], [1, co, out, out], [w, rng.standard_normal(co).astype(np.float32)],
            kernel_shape=[k, k], pads=[k // 2] * 4, strides=[stride, stride])

    conv("conv3x3_s1_32_32x32", 32, 32, 32, 3, 1)
    conv("conv3x3_s2_32to64_56x56", 32, 64, 56, 3, 2)
    conv("conv3x3_s2_stem_3to16_128x128", 3, 16, 128, 3, 2)
    conv("conv1x1_64_32x32", 64, 64, 32, 1, 1)
    conv("conv1x1_16to96_56x56", 16, 96, 56, 1, 1)
    for m, k, n in ((256, 256, 256), (1, 1024, 256), (1, 576, 1024)):
        w = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
        add(f"matmul_{m}x{k}x{n}", "MatMul", [m, k], [m, n], [w])
    graph = helper.make_graph(nodes, "gpubackend-first-use-tuning", inputs, outputs, inits)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="gpubackend-tune")
    proto.ir_version = 8
    return proto.SerializeToString()


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(max(v, 1e-9)) for v in values) / len(values))


def _timed_nodes_by_kind(result: TrialResult, unit: str, spec: tuning.Unit) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for cls, nodes in result.classes[unit].items():
        out.setdefault(spec.kind_of(cls), set()).update(nodes & set(result.seconds))
    return out


def tune_device(path: str, fingerprint: dict[str, Any], options: SessionOptions | None = None,
                rounds: int = FIRST_USE_ROUNDS, write: bool = True) -> list[dict[str, Any]]:
    """Time the first-use variants of every unit without a device-wide record on ``path`` (on
    the representative layers) and store the fastest of each unit and shape kind; one row per
    (unit, kind) measured."""
    import gpubackend

    from .runner import make_inputs

    t0 = time.perf_counter()
    table = tuning.load(path, fingerprint)
    candidates = {u: tuning.units()[u].first_use_for(table.device_class) for u in table.first_use_pending()}
    if not candidates:
        return []
    data = representative_model()
    feeds = make_inputs(data)
    with gpubackend.Session(data, path="cpu", options=SessionOptions(tune="off")) as cpu:
        reference = cpu.run(feeds)
    trials = [{u: vs[i].name for u, vs in candidates.items() if i < len(vs)}
              for i in range(max(len(vs) for vs in candidates.values()))]
    # the caller's thread placement and disabled paths; nothing model-specific (its free
    # dimension overrides would name no input of the representative model)
    given = options or SessionOptions()
    opts = SessionOptions(thread=given.thread, disabled_paths=given.disabled_paths, fallback=False,
                          kernel_check=False)
    results = [r for r in time_variants(data, path, trials, feeds, rounds, opts, reference=reference)
               if not r.error]
    seconds = time.perf_counter() - t0
    rows = []
    for unit in candidates:
        spec = tuning.units()[unit]
        ran = [r for r in results if unit in r.classes]
        timed_by_kind = [_timed_nodes_by_kind(r, unit, spec) for r in ran]
        kinds = {kind: set.intersection(*(t.get(kind, set()) for t in timed_by_kind))
                 for kind in (timed_by_kind[0] if ran else {})}  # the nodes every trial timed
        for kind, nodes in sorted(kinds.items()):
            if not nodes:
                continue
            geomeans = {r.choices[unit]: _geomean([r.seconds[n] for n in sorted(nodes)]) for r in ran}
            best = min(geomeans, key=lambda v: geomeans[v])
            default = spec.default_for(table.device_class).name
            row = {"path": path, "unit": unit, "kind": kind, "best": best, "default": default, "seconds": geomeans,
                   "nodes": sorted(nodes),
                   "speedup": geomeans[default] / geomeans[best] if default in geomeans else 1.0}
            if write and table.fingerprint_id:
                tuning.store(table, unit, tuning.device_wide_class(kind), best, geomeans,
                             note=f"first use: geometric mean over {len(nodes)} layers, {rounds} rounds, "
                                  f"{len(trials)} sessions, {seconds:.1f} s")
            rows.append(row)
    return rows


# (tuning file, fingerprint id, path) this process measured or failed to measure: never twice.
_ATTEMPTED: set[tuple[str, str, str]] = set()


def first_use(path: str, fingerprint: dict[str, Any], options: SessionOptions) -> str:
    """Measure ``path``'s kernel variants once for this driver if it has no device-wide record
    and ``options.tune`` is "auto"; returns a note for ``explain()`` ("" when nothing was
    measured here). Never raises: a failed measurement leaves the defaults running."""
    from filelock import Timeout

    if options.tune == "off" or path not in tuning.TUNABLE_PATHS:
        return ""
    table = tuning.load(path, fingerprint)
    key = (str(tuning.tuning_file()), table.fingerprint_id, path)
    if not table.fingerprint_id or not table.first_use_pending() or key in _ATTEMPTED:
        return ""
    t0 = time.perf_counter()
    try:
        with tuning.file_lock(timeout=FIRST_USE_LOCK_WAIT_S):
            if not tuning.load(path, fingerprint).first_use_pending():
                return ""  # another process measured while this one waited
            _ATTEMPTED.add(key)
            log.info("tuning the %s kernels once for this driver (%s): a few seconds, cached in %s; "
                     "GPUBACKEND_TUNE=off skips it", path, table.device_class, tuning.tuning_file())
            rows = tune_device(path, fingerprint, options)
    except Timeout:
        log.warning("another process has been tuning the %s kernels for %.0f s; this session runs the defaults",
                    path, FIRST_USE_LOCK_WAIT_S)
        return ""
    except Exception as exc:  # noqa: BLE001 - tuning is an optimisation: the defaults still work
        _ATTEMPTED.add(key)
        log.warning("first-use tuning of the %s kernels failed (%s: %s); the defaults run", path,
                    type(exc).__name__, exc)
        return ""
    seconds = time.perf_counter() - t0
    if not rows:
        log.warning("first-use tuning of the %s kernels measured nothing (every trial failed); the defaults run",
                    path)
        return ""
    chosen = ", ".join(f"{r['unit']}{f' [{k}]' if (k := r['kind']) else ''} {r['best']}" for r in rows)
    log.info("tuned the %s kernels in %.1f s: %s", path, seconds, chosen)
    return f"{path}: timed the kernel variants once for this device at first use ({seconds:.1f} s): {chosen}"
