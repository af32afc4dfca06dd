"""gpubackend against the other runtimes of this machine (issues 15 and 16), one table per issue.

    ./setup.sh --peers          # once: the peers' own venv, .venv-peers (ncnn, pnnx, OpenCV, LiteRT, MediaPipe)
    python benchmarks/bench_peers.py [--models selfie,mobilenet,unet,yolov8n,ppocr_v4_det]
        [--peers ncnn-cpu,opencv,tflite-xnnpack,ncnn-vulkan,mediapipe-gpu] [--paths cpu,vulkan,gles31,gles3,gles2]
        [--blocks 5] [--runs 5] [--threads 2] [--json out.json] [--markdown out.md] [--peers-python PY]
        [--tune [--tune-rounds 3]]

Every figure is a median latency over onnxruntime's median (``--threads`` threads) timed in the SAME
process, in blocks: each block gives each runner an untimed settle run and then ``--runs`` timed runs,
in turn, so drift on a busy machine hits both alike. A peer runs in a child process of the peers'
venv (its pins, e.g. MediaPipe's protobuf and numpy, stay out of the project's venv) with its own
onnxruntime session; the gpubackend paths run in this process with theirs. Each cell is
``p50 ratio (p90 ratio) error``, the error being max|got - ref| / max(1, max|ref|) against
onnxruntime on the same input: a fast wrong runner is not a bar. ``-`` means the runner has no form
of that model (the TFLite peers have only the selfie model, from the mediapipe wheel).

Peers (``--peers``; ``PEERS`` below): ``ncnn-cpu`` and ``ncnn-vulkan`` (the ONNX model converted by
pnnx, cached; Vulkan fp32: fp16 storage and arithmetic off), ``opencv`` (``cv2.dnn.readNetFromONNX``,
default engine), ``tflite-xnnpack`` (the LiteRT interpreter, XNNPACK, ``--threads`` threads: MediaPipe's
CPU engine) and ``mediapipe-gpu`` (MediaPipe's ImageSegmenter with the GPU delegate: TFLite's GL ES
3.1 delegate, through EGL). Conversions live in ``$GPUBACKEND_CACHE_DIR/peers`` (default
``~/.cache/gpubackend/peers``). MediaPipe is pinned to 0.10.14: later releases refuse llvmpipe.
``--paths`` names gpubackend paths; ``cpu:numpy`` and
``cpu:onnxruntime`` pick a CPU engine. ``--tune`` runs ``gpubackend tune`` on each model and compute
path first (issue 16's per-device tuning; without it the paths run their first-use defaults). Run it
on a quiet machine: nothing else running.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

# peer -> (issue table it belongs to, model format it needs)
PEERS: dict[str, tuple[str, str]] = {
    "ncnn-cpu": ("cpu", "ncnn"),
    "opencv": ("cpu", "onnx"),
    "tflite-xnnpack": ("cpu", "tflite"),
    "ncnn-vulkan": ("gpu", "ncnn"),
    "mediapipe-gpu": ("gpu", "tflite"),
}
PATHS = ("cpu", "cpu:numpy", "cpu:onnxruntime", "vulkan", "gles31", "gles3", "gles2")
# model -> (source, input shape); the zoo models at the sizes of the issues' tables
MODELS: dict[str, tuple[str, tuple[int, ...]]] = {
    "selfie": ("zoo:selfie_segmentation", (1, 3, 256, 256)),
    "mobilenet": ("tests:mobilenet_v2_like", (1, 3, 224, 224)),
    "unet": ("tests:unet_like", (1, 3, 256, 256)),
    "yolov8n": ("zoo:yolov8n_nudenet", (1, 3, 320, 320)),
    "ppocr_v4_det": ("zoo:ppocr_v4_det", (1, 3, 480, 640)),
}
DEFAULT_PEERS = ",".join(PEERS)
DEFAULT_PATHS = "cpu,cpu:numpy,vulkan,gles31,gles3,gles2"
TUNABLE_PATHS = ("vulkan", "gles31")  # the paths `gpubackend tune` measures
DEFAULT_MODELS = ",".join(MODELS)


class PeerSetupError(RuntimeError):
    """The peers' venv is missing or cannot run a child."""


def parse_list(text: str, known: Sequence[str], what: str) -> list[str]:
    """The comma list ``text`` (empty or ``none`` for no items), each checked against ``known``."""
    if text.strip() in ("", "none"):
        return []
    items = [t.strip() for t in text.split(",") if t.strip()]
    unknown = [t for t in items if t not in known]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown {what}: {', '.join(unknown)} (known: {', '.join(known)})")
    return items


def rel_error(got: Sequence[np.ndarray], ref: Sequence[np.ndarray]) -> float:
    """max|got - ref| / max(1, max|ref|) over the outputs, compared in order and flattened (a peer may
    give the same values in another layout: NHWC, a dropped batch axis)."""
    worst = 0.0
    for g, r in zip(got, ref):
        g = np.asarray(g, dtype=np.float64).reshape(-1)
        r = np.asarray(r, dtype=np.float64).reshape(-1)
        if g.size != r.size:
            return float("inf")
        if r.size:
            err = float(np.max(np.abs(g - r))) / max(1.0, float(np.max(np.abs(r))))
            worst = err if np.isnan(err) or err > worst else worst  # NaN is an error, not a zero
    return worst


# OpenBLAS's threads spin ~2^28 cycles (~0.13 s here) after their last call, on the cores the next
# runner's threads want: the runner after one that may use them (the NumPy engine, see
# fallback.allow_blas_threads) waits this long first (as bench_cpu.py does)
BLAS_IDLE_S = 0.3


def time_interleaved(runners: dict[str, Callable[[], Any]], blocks: int, runs: int,
                     blas_users: Sequence[str] = ()) -> dict[str, list[float]]:
    """Seconds per run of each runner: ``blocks`` rounds of (settle run, ``runs`` timed runs) per
    runner in turn; the runner after one of ``blas_users`` starts after a pause."""
    times: dict[str, list[float]] = {k: [] for k in runners}
    previous = None
    for _ in range(blocks):
        for key, fn in runners.items():
            if previous in blas_users:
                time.sleep(BLAS_IDLE_S)
            previous = key
            fn()  # settle: onnxruntime's idle workers spin after a run; sleeping would inflate all
            for _ in range(runs):
                t0 = time.perf_counter()
                fn()
                times[key].append(time.perf_counter() - t0)
    return times


def summary(times: Sequence[float], base: Sequence[float]) -> dict[str, float]:
    """p50 and p90 in ms and both as ratios to the baseline's p50."""
    p50, p90 = float(np.percentile(times, 50)), float(np.percentile(times, 90))
    ref = statistics.median(base)
    return {"p50_ms": p50 * 1e3, "p90_ms": p90 * 1e3, "ratio": p50 / ref, "ratio_p90": p90 / ref,
            "onnxruntime_ms": ref * 1e3}


def cell(result: dict[str, Any] | None) -> str:
    """A table cell: ``p50 ratio (p90 ratio) error``, or why there is no figure."""
    if result is None:
        return "-"
    if "failed" in result:
        return f"failed: {result['failed'][:60]}"
    return f"{result['ratio']:.2f} ({result['ratio_p90']:.2f}) {result['error']:.1e}"


def tables(results: dict[str, dict[str, dict[str, Any]]], peers: Sequence[str], paths: Sequence[str]) -> str:
    """The issue-15 (CPU) and issue-16 (GPU) markdown tables: a row per model, onnxruntime's p50
    (in this process) and each runner's cell."""
    out = []
    titles = (("cpu", "CPU runtimes (issue 15)"), ("gpu", "GPU runtimes on the same Mesa drivers (issue 16)"))
    for kind, title in titles:
        cols = [p for p in peers if PEERS[p][0] == kind] + [
            p for p in paths if (p.split(":")[0] == "cpu") == (kind == "cpu")]
        if not cols:
            continue
        out.append(f"{title}: p50 / onnxruntime p50 in the same process (p90 ratio) error vs onnxruntime\n")
        out.append("| model | onnxruntime ms | " + " | ".join(cols) + " |")
        out.append("|---|---|" + "---|" * len(cols))
        for model, row in results.items():
            base = next((r["onnxruntime_ms"] for r in row.values() if r and "onnxruntime_ms" in r), None)
            base_txt = f"{base:.2f}" if base is not None else "-"
            out.append(f"| {model} | {base_txt} | " + " | ".join(cell(row.get(c)) for c in cols) + " |")
        out.append("")
    return "\n".join(out)


# ---- child side: runs in the peers' venv ----------------------------------------------------------

def _ort_session(onnx_file: str, threads: int) -> Any:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(onnx_file, opts, providers=["CPUExecutionProvider"])


def _ncnn_runner(spec: dict[str, Any], x: np.ndarray, vulkan: bool) -> tuple[Callable[[], list], dict]:
    import ncnn

    info: dict[str, Any] = {"ncnn": ncnn.__version__}
    if vulkan:
        if ncnn.get_gpu_count() < 1:
            raise PeerSetupError("ncnn sees no Vulkan device (is lavapipe installed? VK_ICD_FILENAMES?)")
        info["device"] = ncnn.get_gpu_device(0).info().device_name()
    net = ncnn.Net()
    net.opt.use_vulkan_compute = vulkan
    net.opt.num_threads = spec["threads"]
    # fp32 throughout, as the bar: no fp16/bf16 storage or arithmetic, no int8
    for flag in ("use_fp16_packed", "use_fp16_storage", "use_fp16_arithmetic", "use_bf16_packed",
                 "use_bf16_storage", "use_int8_inference"):
        if hasattr(net.opt, flag):
            setattr(net.opt, flag, False)
    if vulkan:
        net.set_vulkan_device(0)
    if net.load_param(spec["ncnn_param"]) != 0 or net.load_model(spec["ncnn_bin"]) != 0:
        raise PeerSetupError(f"ncnn could not load {spec['ncnn_param']}")
    n_out = spec["n_outputs"]
    chw = np.ascontiguousarray(x[0])

    def run() -> list[np.ndarray]:
        with net.create_extractor() as ex:
            ex.input("in0", ncnn.Mat(chw))
            return [np.array(ex.extract(f"out{i}")[1]) for i in range(n_out)]

    return run, info


def _opencv_runner(spec: dict[str, Any], x: np.ndarray) -> tuple[Callable[[], list], dict]:
    import cv2

    cv2.setNumThreads(spec["threads"])
    net = cv2.dnn.readNetFromONNX(spec["onnx"])
    names = net.getUnconnectedOutLayersNames()

    def run() -> list[np.ndarray]:
        net.setInput(x)
        return list(net.forward(names))

    return run, {"opencv": cv2.__version__}


def _tflite_runner(spec: dict[str, Any], x: np.ndarray) -> tuple[Callable[[], list], dict]:
    from ai_edge_litert.interpreter import Interpreter

    it = Interpreter(model_path=spec["tflite"], num_threads=spec["threads"])  # XNNPACK is LiteRT's default
    it.allocate_tensors()
    inp, outs = it.get_input_details()[0], it.get_output_details()
    nhwc = np.ascontiguousarray(x.transpose(0, 2, 3, 1))

    def run() -> list[np.ndarray]:
        it.set_tensor(inp["index"], nhwc)
        it.invoke()
        return [it.get_tensor(o["index"]).copy() for o in outs]

    return run, {}


def _mediapipe_gpu_runner(spec: dict[str, Any], x: np.ndarray) -> tuple[Callable[[], list], dict]:
    import mediapipe as mp
    from mediapipe.tasks.python import BaseOptions, vision

    # MediaPipe feeds the model uint8 RGB / 255: the parent quantised the input to k/255 already
    rgb = np.ascontiguousarray(np.rint(x[0].transpose(1, 2, 0) * 255.0).astype(np.uint8))
    image = mp.Image(image_format=mp.ImageFormat.SRGB, data=rgb)
    options = vision.ImageSegmenterOptions(
        base_options=BaseOptions(model_asset_path=spec["tflite"], delegate=BaseOptions.Delegate.GPU),
        output_confidence_masks=True, output_category_mask=False)
    segmenter = vision.ImageSegmenter.create_from_options(options)

    def run() -> list[np.ndarray]:
        res = segmenter.segment(image)
        return [res.confidence_masks[0].numpy_view().copy()]

    return run, {"mediapipe": mp.__version__}


def child_main(spec_file: str) -> int:
    """Time one peer against onnxruntime in this process; write the result JSON beside the spec."""
    spec = json.loads(Path(spec_file).read_text())
    x = np.load(spec["input_npy"])
    result: dict[str, Any] = {"peer": spec["peer"]}
    try:
        ref_sess = _ort_session(spec["onnx"], spec["threads"])
        feeds = {ref_sess.get_inputs()[0].name: x}
        ref = ref_sess.run(None, feeds)
        peer = spec["peer"]
        if peer in ("ncnn-cpu", "ncnn-vulkan"):
            run, info = _ncnn_runner(spec, x, vulkan=peer == "ncnn-vulkan")
        elif peer == "opencv":
            run, info = _opencv_runner(spec, x)
        elif peer == "tflite-xnnpack":
            run, info = _tflite_runner(spec, x)
        else:
            run, info = _mediapipe_gpu_runner(spec, x)
        result.update(info)
        result["error"] = rel_error(run(), ref)
        times = time_interleaved({"onnxruntime": lambda: ref_sess.run(None, feeds), peer: run},
                                 spec["blocks"], spec["runs"])
        result.update(summary(times[peer], times["onnxruntime"]))
    except Exception as exc:  # reported in the table's cell; the other peers go on
        result["failed"] = f"{type(exc).__name__}: {exc}"
    Path(spec["result"]).write_text(json.dumps(result))
    return 0


# ---- parent side: the project's venv --------------------------------------------------------------

def cache_dir() -> Path:
    base = os.environ.get("GPUBACKEND_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "gpubackend")
    path = Path(base) / "peers"
    path.mkdir(parents=True, exist_ok=True)
    return path


def peers_python(explicit: str | None) -> Path:
    """The peers' venv interpreter: ``--peers-python``, ``$GPUBACKEND_PEERS_PYTHON`` or ``.venv-peers``."""
    py = Path(explicit or os.environ.get("GPUBACKEND_PEERS_PYTHON") or ROOT / ".venv-peers" / "bin" / "python")
    if not py.exists():
        raise PeerSetupError(f"no peers venv at {py}: run ./setup.sh --peers (or pass --peers-python / --peers none)")
    return py


def prepare_model(name: str, cache: Path) -> dict[str, Any]:
    """The model as an ONNX file, its input (the zoo's realistic one, a seeded random one for the test
    models; the selfie photo quantised to k/255 so that MediaPipe's uint8 image is the same input),
    the .tflite where the model has one."""
    import onnx

    source, shape = MODELS[name]
    onnx_file = cache / f"{name}.onnx"
    if source.startswith("zoo:"):
        from gpubackend import zoo
        from gpubackend.zoo.inputs import make_input

        zm = zoo.BY_NAME[source[4:]]
        onnx_file = Path(zoo.fetch(zm.name))
        x = next(iter(make_input(zm, small=False).values())).astype(np.float32)
        if name == "selfie":
            x = (np.rint(x * 255.0) / 255.0).astype(np.float32)
    else:
        sys.path.insert(0, str(ROOT / "tests"))
        import models as test_models

        onnx.save(getattr(test_models, source.split(":")[1])(), str(onnx_file))
        x = np.random.default_rng(0).random(shape).astype(np.float32)
    if tuple(x.shape) != shape:
        raise SystemExit(f"{name}: input {x.shape}, expected {shape}")
    input_npy = cache / f"{name}.input.npy"
    np.save(input_npy, x)
    n_outputs = len(onnx.load(str(onnx_file), load_external_data=False).graph.output)
    prepared = {"name": name, "onnx": str(onnx_file), "input_npy": str(input_npy), "shape": shape,
                "n_outputs": n_outputs}
    if name == "selfie":
        from gpubackend.importers.mediapipe_models import mediapipe_models

        prepared["tflite"] = str(mediapipe_models()["selfie_segmentation"])
    return prepared


def convert_ncnn(prepared: dict[str, Any], py: Path, cache: Path) -> tuple[str, str]:
    """The model converted by pnnx (from the peers' venv) to ncnn's .param/.bin with fp32 weights,
    cached by the ONNX file's content and the input shape."""
    import hashlib

    digest = hashlib.sha256(Path(prepared["onnx"]).read_bytes()).hexdigest()[:12]
    shape = ",".join(str(d) for d in prepared["shape"])
    work = cache / f"ncnn-{prepared['name']}-{digest}-{shape.replace(',', 'x')}-fp32"
    param, weights = work / "model.ncnn.param", work / "model.ncnn.bin"
    if not (param.exists() and weights.exists()):
        work.mkdir(parents=True, exist_ok=True)
        local = work / "model.onnx"
        local.write_bytes(Path(prepared["onnx"]).read_bytes())
        # the wheel's own executable: its Python wrapper imports torch, which the venv leaves out
        find = subprocess.run([str(py), "-c", "import importlib.util; print(importlib.util.find_spec('pnnx').origin)"],
                              capture_output=True, text=True)
        if find.returncode != 0:
            raise PeerSetupError(f"pnnx is not installed in {py}: run ./setup.sh --peers")
        exe = Path(find.stdout.strip()).parent / "pnnx"
        # fp16=0: pnnx stores ncnn weights as fp16 by default, which alone costs ~2e-3 of error
        proc = subprocess.run([str(exe), str(local.name), f"inputshape=[{shape}]", "fp16=0"], cwd=work,
                              capture_output=True, text=True, timeout=1800)
        if proc.returncode != 0 or not param.exists():
            raise PeerSetupError(f"pnnx failed on {prepared['name']}: {proc.stderr.strip()[-300:]}")
    return str(param), str(weights)


def run_peer(peer: str, prepared: dict[str, Any], args: argparse.Namespace, cache: Path) -> dict[str, Any] | None:
    """One peer on one model in a child process of the peers' venv; None when the peer has no form
    of the model."""
    fmt = PEERS[peer][1]
    if fmt == "tflite" and "tflite" not in prepared:
        return None
    py = peers_python(args.peers_python)
    spec = {"peer": peer, "threads": args.threads, "blocks": args.blocks, "runs": args.runs,
            **{k: prepared[k] for k in ("onnx", "input_npy", "n_outputs")}, "tflite": prepared.get("tflite"),
            "result": str(cache / f"result-{prepared['name']}-{peer}.json")}
    try:
        if fmt == "ncnn":
            spec["ncnn_param"], spec["ncnn_bin"] = convert_ncnn(prepared, py, cache)
    except (PeerSetupError, subprocess.TimeoutExpired) as exc:
        return {"peer": peer, "failed": str(exc)}
    spec_file = cache / f"spec-{prepared['name']}-{peer}.json"
    spec_file.write_text(json.dumps(spec))
    Path(spec["result"]).unlink(missing_ok=True)
    env = dict(os.environ)
    if peer == "mediapipe-gpu":
        env.setdefault("EGL_PLATFORM", "surfaceless")  # Mesa's EGL without a display (no X, no Wayland)
    try:
        proc = subprocess.run([str(py), __file__, "--child", str(spec_file)], capture_output=True, text=True,
                              timeout=args.peer_timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"peer": peer, "failed": f"timed out after {args.peer_timeout} s"}
    if not Path(spec["result"]).exists():
        return {"peer": peer, "failed": f"child exited {proc.returncode}: {proc.stderr.strip()[-300:]}"}
    return json.loads(Path(spec["result"]).read_text())


def tune(prepared: dict[str, Any], path: str, input_name: str, shape: Sequence[int], rounds: int) -> None:
    """``gpubackend tune`` of the model on ``path`` at the benchmark's input shape, stored in
    GPUBACKEND_CACHE_DIR's tuning file, which the sessions created after it read."""
    t0 = time.perf_counter()
    cmd = [sys.executable, "-m", "gpubackend", "tune", prepared["onnx"], "--path", path, "--rounds", str(rounds),
           "--shape", f"{input_name}={'x'.join(map(str, shape))}"]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{done.stderr[-2000:]}")
    print(f"{prepared['name']:14s} tuned on {path} in {time.perf_counter() - t0:.0f} s", flush=True)


def run_paths(paths: Sequence[str], prepared: dict[str, Any], args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """The gpubackend paths on one model, interleaved with onnxruntime in this process."""
    import gpubackend

    x = np.load(prepared["input_npy"])
    ref_sess = _ort_session(prepared["onnx"], args.threads)
    feeds = {ref_sess.get_inputs()[0].name: x}
    ref = ref_sess.run(None, feeds)
    runners: dict[str, Callable[[], Any]] = {"onnxruntime": lambda: ref_sess.run(None, feeds)}
    rows: dict[str, dict[str, Any]] = {}
    for key in paths:
        path, _, engine = key.partition(":")
        if args.tune and path in TUNABLE_PATHS:
            tune(prepared, path, ref_sess.get_inputs()[0].name, x.shape, args.tune_rounds)
        try:
            opts = gpubackend.SessionOptions(intra_op_num_threads=args.threads,
                                             **({"cpu_engine": engine} if engine else {}))
            sess = gpubackend.Session(prepared["onnx"], path=path, options=opts)
            rows[key] = {"path": key, "error": rel_error(sess.run(feeds), ref)}  # compiles outside the timing
            runners[key] = (lambda s: lambda: s.run(feeds))(sess)
        except Exception as exc:  # the cell says why; the other paths go on
            rows[key] = {"path": key, "failed": f"{type(exc).__name__}: {exc}"}
    from gpubackend.paths.cpu import resolve_engine

    numpy_engine = [key for key in runners
                    if key == "cpu:numpy" or (key == "cpu" and resolve_engine("auto") == "numpy")]
    times = time_interleaved(runners, args.blocks, args.runs, numpy_engine)
    for key in runners:
        if key != "onnxruntime":
            rows[key].update(summary(times[key], times["onnxruntime"]))
    return rows


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=DEFAULT_MODELS, type=lambda s: parse_list(s, list(MODELS), "model"))
    ap.add_argument("--peers", default=DEFAULT_PEERS, type=lambda s: parse_list(s, list(PEERS), "peer"))
    ap.add_argument("--paths", default=DEFAULT_PATHS, type=lambda s: parse_list(s, PATHS, "path"))
    ap.add_argument("--blocks", type=int, default=5, help="interleaved rounds")
    ap.add_argument("--runs", type=int, default=5, help="timed runs per runner and round")
    ap.add_argument("--threads", type=int, default=2, help="threads of onnxruntime and of every CPU runner")
    ap.add_argument("--peers-python", default=None, help="the peers' venv python (default .venv-peers/bin/python)")
    ap.add_argument("--peer-timeout", type=float, default=1800.0, help="seconds one peer child may take")
    ap.add_argument("--json", type=Path, default=None, help="write every figure (ms, ratios, errors) here")
    ap.add_argument("--markdown", type=Path, default=None, help="write the two tables here")
    ap.add_argument("--tune", action="store_true",
                    help="run `gpubackend tune` on each model for each compute path (vulkan, gles31) before timing it, "
                         "into GPUBACKEND_CACHE_DIR (use a fresh one to compare with untuned first-use defaults)")
    ap.add_argument("--tune-rounds", type=int, default=3, help="interleaved rounds per variant of --tune (default 3)")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.child:
        return child_main(args.child)
    sys.path.insert(0, str(ROOT))  # the parent side imports gpubackend from this checkout
    if args.peers:
        peers_python(args.peers_python)  # fail before any work when the venv is missing
    cache = cache_dir()
    results: dict[str, dict[str, dict[str, Any]]] = {}
    for name in args.models:
        prepared = prepare_model(name, cache)
        row: dict[str, dict[str, Any]] = {}
        for peer in args.peers:
            res = run_peer(peer, prepared, args, cache)
            if res is not None:
                row[peer] = res
            print(f"{name:14s} {peer:16s} {cell(res)}", flush=True)
        for key, res in run_paths(args.paths, prepared, args).items():
            row[key] = res
            print(f"{name:14s} {key:16s} {cell(res)}", flush=True)
        results[name] = row
    text = tables(results, args.peers, args.paths)
    print("\n" + text)
    if args.markdown:
        args.markdown.write_text(text + "\n")
    if args.json:
        args.json.write_text(json.dumps({"blocks": args.blocks, "runs": args.runs, "threads": args.threads,
                                         "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
