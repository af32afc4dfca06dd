"""The CPU path's two engines against onnxruntime alone, interleaved in one process.

    python benchmarks/bench_cpu.py [--models selfie,mobilenet,unet,yolov8n_nudenet,...] [--blocks 5]
                                   [--runs 5] [--ops] [--threads 2] [--clock wall|cpu]
                                   [--split-sweep 18,20,22,24] [--serial-share 20,22]

Prints the table ``model | onnxruntime ms | cpu:onnxruntime | cpu:numpy``: onnxruntime's p50 (2
threads, no spinning) and each engine's p50 as a ratio to it, plus the NumPy engine's error against
onnxruntime. ``--threads N`` gives onnxruntime and both engines N threads; ``--clock cpu`` times
process CPU seconds instead of wall seconds: with ``--threads 1`` a comparison that a loaded machine
disturbs far less than wall time (other processes' load does not count, cache contention still does).
Runners are timed in rounds (a settle run, then ``--runs`` timed runs each, in turn) so
drift on a busy machine hits all alike, with a pause before each runner's turn so BLAS threads
left spinning by the one before do not slow it. Models: ``selfie`` (gpubackend/models), ``mobilenet`` and
``unet`` (the test models of tests/models.py), and any zoo model name (fetched already, see
``gpubackend zoo fetch``); the default is the three plus three zoo models. With ``--ops`` it also
prints the NumPy engine's mean milliseconds per op type from profiled runs (depthwise and per-kernel
convolutions split out). With ``--serial-share`` it prints, per ``MIN_PART_WORK`` exponent, how
much of a NumPy-engine run with ``--threads`` threads can use them at all: CPU ms outside the kernel
calls that split (serial), CPU ms inside them (all threads), hand-offs, and the Amdahl bound
serial + split / threads on the wall-time speed-up; CPU shares, so usable on a busy machine. With
``--baseline-conv REV`` it adds a runner ``numpy@REV``: the NumPy engine with the Conv kernels of
``fallback/conv.py`` at git revision REV (the rest of ``fallback`` as checked out), for an
interleaved before/after of Conv changes in one process. Run the table on a quiet machine.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import gpubackend  # noqa: E402
from gpubackend.paths.base import RunStats  # noqa: E402

BLAS_IDLE_S = 0.3  # OpenBLAS's threads spin ~2^28 cycles (~0.13 s here) after their last call
DEFAULT_MODELS = "selfie,mobilenet,unet,yolov8n_nudenet,mobilenetv3_orientation,ppocr_v4_det"


def _model(name: str) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """The model and a realistic (zoo) or seeded random (test models) feed."""
    if name in ("selfie", "mobilenet", "unet"):
        if name == "selfie":
            from gpubackend.models import SELFIE_SEGMENTATION

            model = onnx.load(str(SELFIE_SEGMENTATION))
        else:
            import models as test_models

            model = test_models.mobilenet_v2_like() if name == "mobilenet" else test_models.unet_like()
        feeds = {i.name: np.random.default_rng(0).random(
            [d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
            for i in model.graph.input}
        return model, feeds
    from gpubackend import zoo
    from gpubackend.zoo.inputs import make_input

    if name not in zoo.BY_NAME:
        raise SystemExit(f"unknown model {name}: selfie, mobilenet, unet or one of {', '.join(zoo.BY_NAME)}")
    return onnx.load(str(zoo.fetch(name))), make_input(zoo.BY_NAME[name], small=False)


def _baseline_conv(rev: str):  # -> module
    """``fallback/conv.py`` at git revision ``rev`` as a module of the live ``gpubackend.fallback``
    package (its helpers are the checked-out ones), without replacing the live Conv kernels."""
    import subprocess
    import types

    from gpubackend import fallback
    from gpubackend.fallback import _registry

    src = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:fallback/conv.py"], check=True,
                         capture_output=True, text=True).stdout
    mod = types.ModuleType(f"{fallback.__name__}.conv_at_{rev}")
    mod.__package__ = fallback.__name__
    saved = dict(_registry.KERNELS), dict(_registry.NODE_KERNELS)
    try:
        exec(compile(src, f"{rev}:fallback/conv.py", "exec"), mod.__dict__)
    finally:  # its @register / NODE_KERNELS lines must not replace the live kernels
        _registry.KERNELS.clear()
        _registry.KERNELS.update(saved[0])
        _registry.NODE_KERNELS.clear()
        _registry.NODE_KERNELS.update(saved[1])
    return mod


def _baseline_session(model: onnx.ModelProto, threads: int, conv_mod) -> gpubackend.Session:
    """A NumPy-engine session whose Conv nodes get ``conv_mod``'s kernels (they are bound when the
    session compiles, so only its construction sees the swap)."""
    from gpubackend import fallback
    from gpubackend.fallback import _registry

    live = _registry.KERNELS["Conv"], _registry.NODE_KERNELS["Conv"], fallback.conv_node_kernel
    _registry.KERNELS["Conv"], _registry.NODE_KERNELS["Conv"] = conv_mod.k_conv, conv_mod.conv_node_kernel
    fallback.conv_node_kernel = conv_mod.conv_node_kernel
    try:
        return gpubackend.Session(model, path="cpu", options=gpubackend.SessionOptions(
            cpu_engine="numpy", intra_op_num_threads=threads))
    finally:
        _registry.KERNELS["Conv"], _registry.NODE_KERNELS["Conv"], fallback.conv_node_kernel = live


def _ort(model: onnx.ModelProto, threads: int) -> ort.InferenceSession:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def _op_key(node, consts) -> str:
    if node.op_type != "Conv":
        return node.op_type
    w = consts.get(node.inputs[1])
    if w is None:
        return "Conv"
    if int(node.attrs.get("group", 1)) > 1 and w.shape[1] == 1:
        return "Conv dw"
    return f"Conv {'x'.join(str(k) for k in w.shape[2:])}"


def _error(got: list[np.ndarray], ref: list[np.ndarray]) -> float:
    return max(float(np.max(np.abs(g.astype(np.float64) - r))) / max(1.0, float(np.max(np.abs(r))))
               for g, r in zip(got, ref) if r.size)


def _op_profile(sess: gpubackend.Session, feeds: dict[str, np.ndarray], reps: int) -> None:
    per: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    for seg in sess._current.segments:
        consts = sess._current.graph.constants
        seg_feeds = {n: feeds[n] for n in seg.inputs if n in feeds}
        if len(seg_feeds) != len(seg.inputs):
            continue  # a segment fed by another: profile only the whole-model one
        for node in seg.nodes:
            counts[_op_key(node, consts)] += 1
        for _ in range(reps):
            st = RunStats(profile=True)
            seg.run(seg_feeds, st)
            for node in seg.nodes:
                per[_op_key(node, consts)] += st.node_seconds.get(node.name, 0.0) / reps
    total = sum(per.values())
    for key, secs in sorted(per.items(), key=lambda kv: -kv[1]):
        print(f"    {key:22s} n={counts[key]:3d} {secs * 1e3:8.2f} ms  {100 * secs / total:5.1f}%")


def _split_sweep(name: str, exponents: list[int], args: argparse.Namespace) -> None:
    """How the kernel-thread split threshold (``fallback._runtime.MIN_PART_WORK``) trades hand-offs
    for parallel work: one NumPy-engine session with 1 thread and one with ``args.threads``, each
    threshold in turn, interleaved rounds."""
    from gpubackend.fallback import _runtime

    model, feeds = _model(name)
    sessions = {t: gpubackend.Session(model, path="cpu", options=gpubackend.SessionOptions(
        cpu_engine="numpy", intra_op_num_threads=t)) for t in (1, args.threads)}
    variants = [("1 thread", 1, _runtime.MIN_PART_WORK)] + [
        (f"{args.threads} threads, 1 << {e}", args.threads, 1 << e) for e in exponents]
    pool = _runtime._executor()
    submit, handoffs = pool.submit, [0]

    def counted(*a, **k):  # noqa: ANN002, ANN003
        handoffs[0] += 1
        return submit(*a, **k)

    default = _runtime.MIN_PART_WORK
    pool.submit = counted
    wall: dict[str, list[float]] = defaultdict(list)
    cpu: dict[str, list[float]] = defaultdict(list)
    per_run: dict[str, int] = {}
    try:
        for _ in range(args.blocks):
            for label, threads, min_work in variants:
                _runtime.MIN_PART_WORK = min_work
                sessions[threads].run(feeds)  # settle
                handoffs[0] = 0
                for _ in range(args.runs):
                    t0, c0 = time.perf_counter(), time.process_time()
                    sessions[threads].run(feeds)
                    wall[label].append(time.perf_counter() - t0)
                    cpu[label].append(time.process_time() - c0)
                per_run[label] = handoffs[0] // args.runs
    finally:
        _runtime.MIN_PART_WORK = default
        pool.submit = submit
    for label, *_ in variants:
        print(f"{name:24s} {label:22s} wall {statistics.median(wall[label]) * 1e3:8.2f} ms  "
              f"cpu {statistics.median(cpu[label]) * 1e3:8.2f} ms  hand-offs/run {per_run[label]}", flush=True)


def _serial_share(name: str, exponents: list[int], args: argparse.Namespace) -> None:
    """Per MIN_PART_WORK exponent: CPU seconds of a run outside and inside the ``parallel`` calls that
    split, so the speed-up ``--threads`` threads can give at best (see the module doc)."""
    import threading

    from gpubackend.fallback import _runtime

    model, feeds = _model(name)
    sess = gpubackend.Session(model, path="cpu", options=gpubackend.SessionOptions(
        cpu_engine="numpy", intra_op_num_threads=args.threads))
    original = _runtime.parallel
    main_thread = threading.get_ident()
    split = {"cpu": 0.0, "caller": 0.0, "calls": 0}
    busy = [False]

    def observed(fn, count, work=0):  # noqa: ANN001, ANN202
        if busy[0] or threading.get_ident() != main_thread:
            return original(fn, count, work)
        parts = min(_runtime.current_threads(), count, max(1, work // _runtime.MIN_PART_WORK))
        busy[0] = True
        c0, t0 = time.process_time(), time.thread_time()
        try:
            return original(fn, count, work)
        finally:
            busy[0] = False
            if parts > 1:
                split["cpu"] += time.process_time() - c0
                split["caller"] += time.thread_time() - t0
                split["calls"] += 1

    # the kernels import ``parallel`` by name: replace it in every fallback module for the measurement
    modules = [m for n, m in list(sys.modules.items())
               if n.startswith(("gpubackend.fallback", "fallback")) and getattr(m, "parallel", None) is original]
    default = _runtime.MIN_PART_WORK
    try:
        for m in modules:
            m.parallel = observed
        for e in exponents:
            _runtime.MIN_PART_WORK = 1 << e
            sess.run(feeds)  # settle (plans are per kernel-thread count, not per threshold)
            split.update(cpu=0.0, caller=0.0, calls=0)
            t0, c0 = time.thread_time(), time.process_time()
            for _ in range(args.runs):
                sess.run(feeds)
            total = (time.process_time() - c0) / args.runs
            serial = (time.thread_time() - t0 - split["caller"]) / args.runs
            par = split["cpu"] / args.runs
            bound = serial + par / args.threads
            print(f"{name:24s} 1 << {e}: CPU {total * 1e3:8.2f} ms  serial {serial * 1e3:8.2f}  in split calls "
                  f"{par * 1e3:8.2f} ({split['calls'] // args.runs} calls/run)  best {args.threads}-thread speed-up "
                  f"{total / bound:.2f}x", flush=True)
    finally:
        _runtime.MIN_PART_WORK = default
        for m in modules:
            m.parallel = original


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=DEFAULT_MODELS)
    ap.add_argument("--blocks", type=int, default=5, help="interleaved rounds")
    ap.add_argument("--runs", type=int, default=5, help="timed runs per runner and round")
    ap.add_argument("--engines", default="onnxruntime,numpy")
    ap.add_argument("--ops", action="store_true", help="per-op-type profile of the NumPy engine")
    ap.add_argument("--threads", type=int, default=2, help="threads of onnxruntime and of both engines")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="wall seconds, or process CPU seconds (use with --threads 1 on a busy machine)")
    ap.add_argument("--split-sweep", default="",
                    help="instead of the table: the NumPy engine with 1 thread and with --threads threads at each "
                         "MIN_PART_WORK exponent of this comma list (e.g. 18,20,22,24), interleaved, wall and CPU "
                         "ms and thread hand-offs per run")
    ap.add_argument("--serial-share", default="",
                    help="instead of the table: the NumPy engine's CPU time outside and inside the kernel calls "
                         "that split over --threads threads, at each MIN_PART_WORK exponent of this comma list")
    ap.add_argument("--baseline-conv", default="", metavar="REV",
                    help="add a runner numpy@REV: the NumPy engine with fallback/conv.py at git revision REV")
    args = ap.parse_args()
    if args.serial_share:
        for name in args.models.split(","):
            _serial_share(name, [int(e) for e in args.serial_share.split(",")], args)
        return
    if args.split_sweep:
        for name in args.models.split(","):
            _split_sweep(name, [int(e) for e in args.split_sweep.split(",")], args)
        return
    clock = time.perf_counter if args.clock == "wall" else time.process_time
    engines = args.engines.split(",")
    baseline = _baseline_conv(args.baseline_conv) if args.baseline_conv else None
    columns = ["cpu:" + e for e in engines] + ([f"numpy@{args.baseline_conv}"] if baseline else [])
    print(f"| model | onnxruntime ms | {' | '.join(columns)} | numpy error |")
    print(f"|---|---|{'---|' * len(columns)}---|")
    for name in args.models.split(","):
        model, feeds = _model(name)
        ref_sess = _ort(model, args.threads)
        ref = ref_sess.run(None, feeds)
        runners = {"ort": functools.partial(ref_sess.run, None, feeds)}
        sessions = {}
        for engine in engines:
            sessions[engine] = gpubackend.Session(model, path="cpu", options=gpubackend.SessionOptions(
                cpu_engine=engine, intra_op_num_threads=args.threads))
            runners["cpu:" + engine] = functools.partial(sessions[engine].run, feeds)
        if baseline is not None:
            runners[columns[-1]] = functools.partial(_baseline_session(model, args.threads, baseline).run, feeds)
        err = _error(sessions["numpy"].run(feeds), ref) if "numpy" in sessions else float("nan")
        times: dict[str, list[float]] = {k: [] for k in runners}
        for _ in range(args.blocks):
            for key, fn in runners.items():
                # BLAS's threads (the NumPy engine may use them, see fallback.allow_blas_threads) spin
                # for ~0.13 s after their last call, on the core the next runner's threads want
                time.sleep(BLAS_IDLE_S)
                fn()  # settle
                for _ in range(args.runs):
                    t0 = clock()
                    fn()
                    times[key].append(clock() - t0)
        base = statistics.median(times["ort"])
        p50 = {col: statistics.median(times[col]) for col in columns}
        cells = [f"{p50[col] * 1e3:.2f} ms ({p50[col] / base:.2f}x)" for col in columns]
        print(f"| {name} | {base * 1e3:.2f} | {' | '.join(cells)} | {err:.1e} |", flush=True)
        if args.ops and "numpy" in sessions:
            _op_profile(sessions["numpy"], feeds, max(3, args.runs))


if __name__ == "__main__":
    main()
