"""The model benchmark behind ``gpubackend bench``.

For each path: cold start (a child process with empty caches: probe, shader compilation, weight
packing), warm start (a second child reusing those caches), first-run latency, then the
steady-state distribution. Every path and onnxruntime are timed in this one process, round-robin
(the starting path rotating each round), so load and thermal drift hit all of them alike; each
path's p50 is divided by onnxruntime's p50 from the same rounds. ``profile`` adds per-node and
per-op-type times, transfers and the top nodes; ``roofline`` adds the microbenchmark peaks and
places every Conv/Gemm/MatMul node against them."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from . import micro, roofline
from .progress import Progress
from .stats import ratio, summarize

ORT = "onnxruntime"
_PEAKS: dict[str, micro.Peak] = {}
_DTYPES = {onnx.TensorProto.FLOAT: np.float32, onnx.TensorProto.FLOAT16: np.float16,
           onnx.TensorProto.DOUBLE: np.float64, onnx.TensorProto.INT64: np.int64, onnx.TensorProto.INT32: np.int32,
           onnx.TensorProto.UINT8: np.uint8, onnx.TensorProto.INT8: np.int8, onnx.TensorProto.BOOL: np.bool_}


@dataclass
class BenchOptions:
    paths: list[str] | None = None  # None: every verified path plus cpu
    precision: str = "fp32"
    runs: int = 50
    warmup: int = 5
    compare: list[str] = field(default_factory=list)  # ["onnxruntime"]
    profile: bool = False
    profile_runs: int = 3
    roofline: bool = False
    cold: bool = True  # measure cold and warm start in child processes
    cold_timeout: float = 300.0
    slow_run_s: float = 10.0  # a path whose first run takes longer than this ...
    slow_runs: int = 3  # ... gets at most this many warm-up and timed runs
    cold_full_probe: bool = False  # cold start verifies every path (as auto does), not just the one timed
    progress: bool = True
    seed: int = 0
    input_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)  # pins dynamic inputs


# ---- models and inputs ------------------------------------------------------------------------
def resolve_model(spec: str) -> tuple[str, bytes]:
    """``spec`` is a model file, or ``selfie`` for the bundled selfie segmentation model;
    returns (display name, bytes)."""
    if spec in ("selfie", "selfie_segmentation"):
        spec = str(Path(__file__).resolve().parent.parent / "models" / "selfie_segmentation.onnx")
    p = Path(spec)
    if not p.is_file():
        from ..errors import InputError

        raise InputError(f"model file not found: {spec} (give an .onnx file, or 'selfie' for the bundled model)")
    return p.stem, p.read_bytes()


def make_inputs(model: str | bytes | onnx.ModelProto, seed: int = 0,
                input_shapes: dict[str, tuple[int, ...]] | None = None) -> dict[str, np.ndarray]:
    """Seeded inputs for every graph input: uniform [0, 1) floats (integers 0..9), of the declared
    shape or the one in ``input_shapes``. An input with a symbolic dimension and no given shape is
    an InputError naming it and ``--shape`` (a guessed size would benchmark another workload)."""
    from ..errors import InputError
    from ..model import declared_shape, pin_shape

    proto = model if isinstance(model, onnx.ModelProto) else (
        onnx.load_model_from_string(model) if isinstance(model, bytes) else onnx.load(model))
    rng = np.random.default_rng(seed)
    inits = {i.name for i in proto.graph.initializer}
    given = input_shapes or {}
    feeds = {}
    for inp in proto.graph.input:
        if inp.name in inits:
            continue
        tt = inp.type.tensor_type
        declared = declared_shape(inp.name, inp.type)
        if inp.name in given:
            shape = list(pin_shape(inp.name, declared, given[inp.name]))
        elif declared is None or None in declared:
            shown = "x".join("?" if d is None else str(d) for d in declared or ())
            raise InputError(f"input {inp.name!r} has a dynamic shape ({shown or 'unknown'}): give its shape with "
                             f"--shape {inp.name}={shown or '1x3xHxW'} (each ? a size; input_shapes= in the API)")
        else:
            shape = list(declared)  # type: ignore[arg-type]
        dtype = _DTYPES.get(tt.elem_type, np.float32)
        if np.issubdtype(dtype, np.floating):
            feeds[inp.name] = rng.random(shape).astype(dtype)
        else:
            feeds[inp.name] = rng.integers(0, 10, shape).astype(dtype)
    return feeds


def model_info(name: str, model_bytes: bytes, input_shapes: dict[str, tuple[int, ...]] | None = None
               ) -> dict[str, Any]:
    import hashlib

    from ..model import load_model, to_graph

    proto = load_model(model_bytes)
    graph = to_graph(proto, input_shapes)
    ops = Counter(n.op_type for n in proto.graph.node)
    return {"name": name, "sha256": hashlib.sha256(model_bytes).hexdigest(), "bytes": len(model_bytes),
            "onnx_nodes": len(proto.graph.node), "nodes_after_fusion": len(graph.nodes),
            "gflop": roofline.total_flops(graph) / 1e9, "op_types": dict(ops.most_common()),
            "inputs": {k: list(v.shape) for k, v in make_inputs(proto, 0, input_shapes).items()}}


def machine_info() -> dict[str, Any]:
    info: dict[str, Any] = {"cpus": os.cpu_count(), "platform": platform.platform(),
                            "python": platform.python_version()}
    try:
        info["loadavg"] = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        pass
    try:
        import onnxruntime

        info["onnxruntime"] = onnxruntime.__version__
    except ImportError:
        pass
    return info


# ---- cold / warm start -----------------------------------------------------------------------------
def _child(model_file: str, path: str, precision: str, env: dict[str, str], timeout: float,
           input_shapes: dict[str, tuple[int, ...]] | None = None) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "gpubackend.bench.coldstart", model_file, path, precision,
           json.dumps({k: list(v) for k, v in (input_shapes or {}).items()})]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    wall = time.perf_counter() - t0
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": f"exit {proc.returncode}: {tail}"}
    out = json.loads(lines[-1])
    out["process_s"] = wall
    return out


def cold_warm(model_file: str, path: str, precision: str = "fp32", timeout: float = 300.0,
              full_probe: bool = False, input_shapes: dict[str, tuple[int, ...]] | None = None) -> dict[str, Any]:
    """Cold start in a child with a fresh, empty ``GPUBACKEND_CACHE_DIR`` (and Mesa shader cache),
    then warm start in a second child reusing them. Unless ``full_probe``, the probe verifies
    only ``path`` (the other GPU paths go in ``GPUBACKEND_DISABLE``), so each path's cold start
    is its own cost, not the cost of verifying every path."""
    from ..paths import GPU_PATH_KEYS

    with tempfile.TemporaryDirectory(prefix="gpubackend-bench-cold-") as d:
        env = dict(os.environ, GPUBACKEND_CACHE_DIR=d, MESA_SHADER_CACHE_DIR=os.path.join(d, "mesa"))
        env.pop("GPUBACKEND_PATH", None)
        if not full_probe:
            env["GPUBACKEND_DISABLE"] = ",".join(k for k in GPU_PATH_KEYS if k != path)
        cold = _child(model_file, path, precision, env, timeout, input_shapes)
        warm = (_child(model_file, path, precision, env, timeout, input_shapes) if "error" not in cold
                else {"error": "cold failed"})
    return {"cold": cold, "warm": warm, "warm_over_cold": ratio(warm.get("create_s"), cold.get("create_s")),
            "cold_probe": "every path" if full_probe else f"{path} only"}


# ---- runners -------------------------------------------------------------------------------------------
class _Runner:
    """One timed thing: a gpubackend session on one path, or onnxruntime."""

    def __init__(self, key: str, run: Callable[[], list[np.ndarray]], limit: int | None = None):
        self.key = key
        self.run = run
        self.samples: list[float] = []
        self.limit = limit  # at most this many warm-up and timed runs (a very slow path)
        self.done = {"warm-up": 0, "timed": 0}


def default_paths(report: Any) -> list[str]:
    """Every path the probe verified, plus cpu."""
    from ..paths import GPU_PATH_KEYS

    return [k for k in GPU_PATH_KEYS if report is not None and report.usable(k)] + ["cpu"]


def other_cpu_engines() -> list[str]:
    """Bench keys ("cpu:<engine>") for the CPU engines ``cpu`` (the default engine) does not use,
    so that a benchmark times both when onnxruntime is installed."""
    from ..paths.cpu import resolve_engine

    return ["cpu:numpy"] if resolve_engine("auto") != "numpy" else []


def _ort_session(model_bytes: bytes, profile_dir: str | None = None) -> Any:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    if profile_dir:
        opts.enable_profiling = True
        opts.profile_file_prefix = os.path.join(profile_dir, "ort")
    return ort.InferenceSession(model_bytes, opts, providers=["CPUExecutionProvider"])


def _ort_profile(model_bytes: bytes, feeds: dict[str, np.ndarray], runs: int) -> dict[str, Any]:
    """Per-node kernel times from onnxruntime's own profiler (median over ``runs``)."""
    with tempfile.TemporaryDirectory(prefix="gpubackend-bench-ort-") as d:
        sess = _ort_session(model_bytes, d)
        sess.run(None, feeds)  # first run, not kept
        per_node: dict[str, list[float]] = {}
        op_of: dict[str, str] = {}
        file = None
        for _ in range(runs):
            sess.run(None, feeds)
        file = sess.end_profiling()
        events = json.loads(Path(file).read_text())
    runs_seen: dict[str, int] = Counter()
    for ev in events:
        if ev.get("cat") != "Node" or not str(ev.get("name", "")).endswith("_kernel_time"):
            continue
        name = ev["name"][: -len("_kernel_time")]
        runs_seen[name] += 1
        per_node.setdefault(name, []).append(ev.get("dur", 0) / 1e6)
        op_of[name] = ev.get("args", {}).get("op_name", "?")
    # drop the first (unkept) run of each node, take the median of the rest
    node_seconds = {n: float(np.median(v[1:] if len(v) > 1 else v)) for n, v in per_node.items()}
    return {"node_seconds": node_seconds, "op_of": op_of, "timing": "onnxruntime profiler (host)"}


def _profile_session(sess: Any, feeds: dict[str, np.ndarray], runs: int) -> dict[str, Any]:
    samples: dict[str, list[float]] = {}
    timing = "host"
    for _ in range(runs):
        sess.run(feeds, profile=True)
        timing = sess.stats.timing
        for n, s in sess.stats.node_seconds.items():
            samples.setdefault(n, []).append(s)
    sess.run(feeds)
    stats = sess.stats.as_dict()
    node_seconds = {n: float(np.median(v)) for n, v in samples.items()}
    return {"node_seconds": node_seconds, "timing": timing, "transfers": stats}


def _op_table(node_seconds: dict[str, float], op_of: dict[str, str]) -> dict[str, float]:
    by_op: dict[str, float] = {}
    for n, s in node_seconds.items():
        op = op_of.get(n, "?")
        by_op[op] = by_op.get(op, 0.0) + s
    return dict(sorted(by_op.items(), key=lambda kv: -kv[1]))


def _max_err(a: Sequence[np.ndarray], b: Sequence[np.ndarray]) -> float:
    errs = [float(np.max(np.abs(np.asarray(x, np.float64) - np.asarray(y, np.float64)))) if np.size(x) else 0.0
            for x, y in zip(a, b)]
    return max(errs) if errs else 0.0


def bench_model(name: str, model_bytes: bytes, opts: BenchOptions) -> dict[str, Any]:
    """Benchmark one model on the chosen paths; returns the JSON-ready result."""
    import gpubackend

    from ..model import load_model, to_graph

    feeds = make_inputs(model_bytes, opts.seed, opts.input_shapes)  # first: a missing --shape fails fast
    graph = to_graph(load_model(model_bytes), opts.input_shapes)
    op_of = {n.name: n.op_type for n in graph.nodes}
    try:
        report = gpubackend.probe()
    except Exception as exc:  # noqa: BLE001 - the cpu path needs no probe
        report = None
        probe_error = str(exc)
    else:
        probe_error = ""
    paths = list(opts.paths) if opts.paths else default_paths(report)
    engines = other_cpu_engines() if "cpu" in paths else []
    compare = [c for c in opts.compare if c == ORT]
    n_timed = len(paths) + len(engines) + len(compare)
    steps = (2 * len(paths) if opts.cold else 0) + n_timed * (1 + opts.warmup + opts.runs)
    if opts.profile:
        steps += n_timed
    if opts.roofline:
        steps += len(paths)
    bar = Progress(steps, enabled=opts.progress)
    result: dict[str, Any] = {
        "model": model_info(name, model_bytes, opts.input_shapes), "machine": machine_info(),
        "options": {"paths": paths, "cpu_engines": engines, "precision": opts.precision, "runs": opts.runs,
                    "warmup": opts.warmup,
                    "compare": compare, "profile": opts.profile, "roofline": opts.roofline, "cold": opts.cold,
                    "cold_full_probe": opts.cold_full_probe},
        "probe": {"fingerprint": getattr(report, "fingerprint", {}), "error": probe_error,
                  "verdicts": {k: {"usable": bool(report.usable(k)), "software": bool(v.software), "reason": v.reason}
                               for k, v in report.paths.items()} if report is not None else {}},
        "paths": {},
    }
    res: dict[str, dict[str, Any]] = result["paths"]

    # cold and warm start, each in fresh child processes
    tmp_model = None
    if opts.cold:
        fd, tmp_model = tempfile.mkstemp(suffix=".onnx", prefix="gpubackend-bench-")
        with os.fdopen(fd, "wb") as fh:
            fh.write(model_bytes)
    try:
        for key in paths:
            res[key] = {"kind": "path"}
            if opts.cold and tmp_model:
                bar.show(f"{key}: cold start (fresh cache, child process)")
                res[key].update(cold_warm(tmp_model, key, opts.precision, opts.cold_timeout, opts.cold_full_probe,
                                          opts.input_shapes))
                bar.step(f"{key}: cold + warm start", 2)
    finally:
        if tmp_model:
            os.unlink(tmp_model)
    for key in engines:
        res[key] = {"kind": "engine"}

    # sessions in this process, first runs
    runners: list[_Runner] = []
    sessions: dict[str, Any] = {}
    reference: list[np.ndarray] | None = None
    for key in paths + engines:
        bar.show(f"{key}: creating the session")
        path_key, _, engine = key.partition(":")  # "cpu:numpy": the cpu path on another engine
        entry = res[key]
        if "timed out" in str(entry.get("cold", {}).get("error", "")):
            entry["error"] = f"skipped: its cold start {entry['cold']['error']}"
            bar.step(f"{key}: skipped", 1 + opts.warmup + opts.runs)
            continue
        try:
            t0 = time.perf_counter()
            sess = gpubackend.Session(model_bytes, path=path_key, precision=opts.precision, cpu_engine=engine or None,
                                      input_shapes=opts.input_shapes)
            entry["creation_s"] = time.perf_counter() - t0
            if path_key == "cpu":
                entry["engine"] = sess.cpu_engine
            if sess.path != path_key:
                entry["error"] = f"not usable here, the session chose {sess.path}: " + sess.explain().splitlines()[1]
                sess.close()
                bar.step(f"{key}: skipped", 1 + opts.warmup + opts.runs)
                continue
            t0 = time.perf_counter()
            out = sess.run(feeds)
            entry["first_run_s"] = time.perf_counter() - t0
        except Exception as exc:  # noqa: BLE001 - one broken path must not end the benchmark
            entry["error"] = f"{type(exc).__name__}: {exc}"
            bar.step(f"{key}: failed", 1 + opts.warmup + opts.runs)
            continue
        entry["placement"] = dict(Counter(sess.placement.values()))
        if key == "cpu":
            reference = out
        entry["_out"] = out
        sessions[key] = sess
        limit = None
        if entry["first_run_s"] > opts.slow_run_s:
            limit = opts.slow_runs
            entry["note"] = (f"first run took {entry['first_run_s']:.1f} s (> {opts.slow_run_s:g} s): "
                             f"at most {limit} warm-up and {limit} timed runs")
        runners.append(_Runner(key, lambda s=sess: s.run(feeds), limit))
        bar.step(f"{key}: first run")
    if ORT in compare:
        bar.show("onnxruntime: creating the session")
        entry = res.setdefault(ORT, {"kind": "reference"})
        try:
            t0 = time.perf_counter()
            osess = _ort_session(model_bytes)
            entry["creation_s"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            out = osess.run(None, feeds)
            entry["first_run_s"] = time.perf_counter() - t0
            entry["threads"] = osess.get_session_options().intra_op_num_threads or os.cpu_count()
            entry["_out"] = out
            reference = out
            runners.append(_Runner(ORT, lambda s=osess: s.run(None, feeds)))
        except Exception as exc:  # noqa: BLE001
            entry["error"] = f"{type(exc).__name__}: {exc}"
        bar.step("onnxruntime: first run")
    if reference is not None:
        for entry in res.values():
            if "_out" in entry:
                entry["max_abs_err"] = _max_err(entry["_out"], reference)
                entry["error_vs"] = ORT if ORT in compare else "cpu"
    for entry in res.values():
        entry.pop("_out", None)

    # warm-up and timed rounds, round-robin with a rotating start
    for phase, count in (("warm-up", opts.warmup), ("timed", opts.runs)):
        for i in range(count):
            k = i % max(1, len(runners))
            for r in runners[k:] + runners[:k]:
                if r.limit is not None and r.done[phase] >= r.limit:
                    bar.step(f"{phase} round {i + 1}/{count}: {r.key} (slow: skipped)")
                    continue
                t0 = time.perf_counter()
                r.run()
                dt = time.perf_counter() - t0
                r.done[phase] += 1
                if phase == "timed":
                    r.samples.append(dt)
                bar.step(f"{phase} round {i + 1}/{count}: {r.key}")
    ort_p50 = None
    for r in runners:
        if r.samples:
            res[r.key]["latency_ms"] = summarize(1e3 * s for s in r.samples)
            res[r.key]["samples_ms"] = [1e3 * s for s in r.samples]
    if ORT in res and "latency_ms" in res[ORT]:
        ort_p50 = res[ORT]["latency_ms"]["p50"]
    for entry in res.values():
        if "latency_ms" in entry:
            entry["p50_over_onnxruntime"] = ratio(entry["latency_ms"]["p50"], ort_p50)

    # profile
    if opts.profile or opts.roofline:
        for key, sess in sessions.items():
            bar.show(f"{key}: profiling {opts.profile_runs} runs")
            try:
                prof = _profile_session(sess, feeds, 1 if res[key].get("note") else opts.profile_runs)
            except Exception as exc:  # noqa: BLE001
                res[key]["profile"] = {"error": f"{type(exc).__name__}: {exc}"}
                continue
            prof["by_op_ms"] = {k: 1e3 * v for k, v in _op_table(prof["node_seconds"], op_of).items()}
            prof["placement_of"] = {n: p for n, p in sess.placement.items() if n in prof["node_seconds"]}
            res[key]["profile"] = prof
            bar.step(f"{key}: profiled")
        if ORT in compare and "error" not in res.get(ORT, {}):
            bar.show("onnxruntime: profiling")
            try:
                prof = _ort_profile(model_bytes, feeds, opts.profile_runs)
                prof["by_op_ms"] = {k: 1e3 * v for k, v in _op_table(prof["node_seconds"], prof["op_of"]).items()}
                res[ORT]["profile"] = prof
            except Exception as exc:  # noqa: BLE001
                res[ORT]["profile"] = {"error": f"{type(exc).__name__}: {exc}"}
            bar.step("onnxruntime: profiled")
        for entry in res.values():
            prof = entry.get("profile") or {}
            ns = prof.get("node_seconds")
            if ns:
                total = sum(ns.values())
                top = sorted(ns.items(), key=lambda kv: -kv[1])[:10]
                prof["total_ms"] = 1e3 * total
                ops = prof.pop("op_of", None) or op_of
                prof["top_nodes"] = [{"node": n, "op": ops.get(n, "?"), "ms": 1e3 * s,
                                      "share": s / total if total else 0.0,
                                      "path": prof.get("placement_of", {}).get(n, "")} for n, s in top]
    for sess in sessions.values():
        sess.close()

    # microbenchmarks and the roofline of this model's heavy nodes
    if opts.roofline:
        micro_res = result.setdefault("micro", {})
        for key in paths:
            bar.show(f"{key}: FMA peak and copy bandwidth")
            if key not in _PEAKS or _PEAKS[key].error:  # peaks belong to the device: once per process
                _PEAKS[key] = micro.measure_peak(key)
            peak = _PEAKS[key]
            micro_res[key] = peak.as_dict()
            bar.step(f"{key}: microbenchmarks")
            prof = res.get(key, {}).get("profile") or {}
            if prof.get("node_seconds") and not peak.error:
                elem = 2 if opts.precision == "fp16" and key != "cpu" else 4
                costs = roofline.graph_costs(graph, elem)
                placed = prof.get("placement_of", {})
                ns = {n: s for n, s in prof["node_seconds"].items() if placed.get(n, key) == key}
                prof["roofline"] = [p.as_dict() for p in roofline.points(costs, ns, peak)]
    bar.close()
    return result
