"""Benchmarks of the gles2 path (GL ES 2.0 fragment kernels on RGBA8 textures).

    python benchmarks/bench_gles2.py [--repeats 5] [--models selfie,mobilenet,unet] [--json]
    python benchmarks/bench_gles2.py --session5-ab [--repeats 5] [--models selfie,mobilenet,unet,yolov8n]
    python benchmarks/bench_gles2.py --varyings-ab [--repeats 6] [--models selfie,mobilenet,yolov8n]

Reports medians of ``--repeats`` runs (the machine is noisy: compare ratios inside one run):
* the FMA-only peak of a ``#version 100`` fragment shader on this driver, and per-kernel GFLOP/s
  (conv 1x1, conv 3x3, depthwise 3x3, GEMM) in fp32 and fp16 storage;
* the cost of one draw (a trivial kernel on a 1x1 texture);
* whole-model latency on gles2 fp32 / fp16 against the cpu path and onnxruntime, interleaved
  run by run, with the number of draws and host transfers per model.

``--session5-ab``: every node of each model on gles2 (fp32), the fifth session's kernel changes
switched off ("before": weight textures below 1024 output pixels, the gather ConvTranspose, one
input channel per loop step, one loop per tap) against the default, runs alternating; wall and
process CPU milliseconds (CPU time counts llvmpipe's threads too and depends less on load).

``--varyings-ab``: channel draws with their weights in the uniform array against varyings (the
fourteenth session's ``Config.channel_varyings``), runs alternating in order round by round.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from gpubackend.graph import Graph, Node  # noqa: E402
from gpubackend.paths import gles2  # noqa: E402
from gpubackend.paths.base import RunStats  # noqa: E402


def _median_ms(fn: Any, repeats: int) -> float:
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e3


def _finish(path: Any) -> None:
    path.runtime.dev.ctx.finish()


def peak_gflops(path: Any, repeats: int) -> float:
    """FMA-only fragment shader: 4 independent vec4 FMA chains x 256 iterations per fragment."""
    import moderngl

    from gpubackend import shaders

    rt = path.runtime
    fs = shaders.source("gles2/kernel.frag", "100") + """
uniform float u_a;
void main() {
    highp vec2 fc = gl_FragCoord.xy;
    vec4 a = vec4(fc, fc.yx) * 1e-3, b = a + 1.0, c = a + 2.0, d = a + 3.0;
    vec4 m = vec4(u_a), k = vec4(0.999);
    for (int i = 0; i < 256; i++) { a = a * k + m; b = b * k + m; c = c * k + m; d = d * k + m; }
    gl_FragColor = g2_encode32(dot(a + b + c + d, vec4(1.0)));
}
"""
    prog = rt.dev.program(rt.vertex, fs)
    prog["u_a"].value = 0.5
    vao = rt.dev.ctx.vertex_array(prog, [(rt.vbo, "2f", "a_pos")])
    from gpubackend.paths.gles2.layout import Layout

    size = 512
    tex = rt.texture(Layout.of((size, size), 1, rt.max_size))
    fbo = rt.dev.ctx.framebuffer(color_attachments=[tex])

    def draw() -> None:
        fbo.use()
        vao.render(moderngl.TRIANGLES, vertices=3)
        _finish(path)

    draw()
    ms = _median_ms(draw, repeats)
    flops = size * size * 256 * 4 * 4 * 2
    return flops / (ms * 1e-3) / 1e9


def draw_overhead_us(path: Any, repeats: int) -> float:
    """Median time of one draw of a trivial kernel (Relu on 1 element), finish included."""
    seg, feeds = _single_segment(path, "Relu", {"x": np.ones((1, 1), np.float32)}, {}, {}, (1, 1))
    seg.run(feeds, RunStats())
    import moderngl

    step = seg.steps[0]

    def draws() -> None:
        for _ in range(50):
            step.fbo.use()
            for unit, tex in enumerate(step.inputs):
                tex.use(location=unit)
            step.vao.render(moderngl.TRIANGLES, vertices=3)
        _finish(path)

    draws()
    us = _median_ms(draws, repeats) * 1e3 / 50
    seg.close()
    return us


def _single_segment(path: Any, op: str, feeds: dict, consts: dict, attrs: dict, out_shape: tuple) -> tuple:
    names = list(feeds) + list(consts)
    shapes = {n: tuple(a.shape) for n, a in {**feeds, **consts}.items()}
    shapes["out"] = out_shape
    node = Node("k", op, names, ["out"], attrs)
    graph = Graph([node], list(feeds), ["out"], dict(consts), shapes, {}, 17)
    why = path.decline(node, graph)
    if why:
        raise RuntimeError(why)
    return path.compile([node], graph, list(feeds), ["out"]), feeds


def kernel_gflops(path: Any, repeats: int) -> dict[str, float]:
    rng = np.random.default_rng(0)

    def r(*s: int) -> np.ndarray:
        return rng.standard_normal(s).astype(np.float32)

    cases = {
        "conv1x1 64->64 @64x64": ("Conv", {"x": r(1, 64, 64, 64)}, {"w": r(64, 64, 1, 1), "b": r(64)},
                                  {"kernel_shape": [1, 1]}, (1, 64, 64, 64), 64 * 64 * 64 * 64 * 2),
        "conv3x3 32->32 @32x32": ("Conv", {"x": r(1, 32, 32, 32)}, {"w": r(32, 32, 3, 3), "b": r(32)},
                                  {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, (1, 32, 32, 32),
                                  32 * 32 * 32 * 32 * 9 * 2),
        "depthwise3x3 128 @64x64": ("Conv", {"x": r(1, 128, 64, 64)}, {"w": r(128, 1, 3, 3), "b": r(128)},
                                    {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "group": 128},
                                    (1, 128, 64, 64), 128 * 64 * 64 * 9 * 2),
        "gemm 256x256x256": ("Gemm", {"a": r(256, 256)}, {"b": r(256, 256)}, {}, (256, 256), 256 ** 3 * 2),
    }
    out = {}
    for name, (op, feeds, consts, attrs, shape, flops) in cases.items():
        seg, f = _single_segment(path, op, feeds, consts, attrs, shape)
        seg.run(f, RunStats())  # first draw compiles the driver's code
        ms = _median_ms(lambda seg=seg, f=f: seg.run(f, RunStats()), repeats)
        out[name] = flops / (ms * 1e-3) / 1e9
        seg.close()
    return out


def _models(which: list[str]) -> dict[str, Any]:
    import models
    import onnx

    out = {}
    if "selfie" in which:
        out["selfie 256"] = onnx.load(str(ROOT / "gpubackend" / "models" / "selfie_segmentation.onnx"))
    if "mobilenet" in which:
        out["mobilenet_v2_like 224"] = models.mobilenet_v2_like()
    if "unet" in which:
        out["unet_like 256"] = models.unet_like()
    if "yolov8n" in which:  # the zoo's copy (fetched by the zoo tests), input pinned to 320x320
        proto = onnx.load(str(Path.home() / ".cache" / "gpubackend" / "zoo" / "models" / "yolov8n_nudenet.onnx"))
        for dim, size in zip(proto.graph.input[0].type.tensor_type.shape.dim, (1, 3, 320, 320)):
            dim.dim_value = size
        out["yolov8n 320"] = proto
    return out


def model_latency(which: list[str], repeats: int) -> dict[str, dict[str, Any]]:
    import models
    import onnxruntime as ort

    import gpubackend
    from gpubackend.model import to_graph

    results: dict[str, dict[str, Any]] = {}
    for name, proto in _models(which).items():
        feeds = models.random_inputs(proto)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 2
        ort_sess = ort.InferenceSession(proto.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        cpu = gpubackend.Session(proto, path="cpu")
        runners: dict[str, Any] = {"onnxruntime": lambda s=ort_sess, f=feeds: s.run(None, f),
                                   "cpu": lambda s=cpu, f=feeds: s.run(f)}
        info: dict[str, Any] = {}
        for precision in ("fp32", "fp16"):
            p = gles2.create(precision)
            g = to_graph(proto)
            declined = [n.op_type for n in g.nodes if p.decline(n, g)]
            if declined:
                info[f"gles2 {precision} declined"] = declined
                continue
            seg = p.compile(g.nodes, g, list(g.inputs), list(g.outputs))
            stats = RunStats()
            out = seg.run(feeds, stats)[g.outputs[0]]
            ref = ort_sess.run(None, feeds)[0]
            info[f"gles2 {precision} max abs err vs onnxruntime"] = float(np.abs(out - ref).max())
            info["draws"] = stats.dispatches
            info["transfers"] = stats.transfers
            info[f"gles2 {precision} transfer bytes"] = stats.upload_bytes + stats.download_bytes
            runners[f"gles2 {precision}"] = lambda seg=seg, f=feeds: seg.run(f, RunStats())
        times: dict[str, list[float]] = {k: [] for k in runners}
        for _ in range(repeats):  # interleaved, so drift hits every runner alike
            for key, fn in runners.items():
                t0 = time.perf_counter()
                fn()
                times[key].append(time.perf_counter() - t0)
        med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
        info.update({f"{k} ms": round(v, 2) for k, v in med.items()})
        for k in med:
            info[f"{k} / onnxruntime"] = round(med[k] / med["onnxruntime"], 1)
        if "gles2 fp16" in med and "gles2 fp32" in med:
            info["fp16 speed-up over fp32"] = round(med["gles2 fp32"] / med["gles2 fp16"], 2)
        results[name] = info
    return results


def _session5_before() -> Any:
    """A gles2 path generating kernels as before the fifth session (see the module docstring)."""
    import dataclasses

    from gpubackend.paths.gles2 import kernels
    from gpubackend.paths.kernel_contract import KernelCache

    off = frozenset({"convtranspose_tap"})
    p = gles2.create("fp32", disabled_kernels=off)
    p.kernels = KernelCache(kernels.REGISTRY, lambda: dataclasses.replace(
        p.runtime.config("fp32"), channel_draw_min_macs=2 ** 62), off, lazy_context=True)
    return p


def session5_ab(which: list[str], repeats: int) -> dict[str, dict[str, Any]]:
    import models

    from gpubackend.model import to_graph
    from gpubackend.paths.gles2 import kernels

    results: dict[str, dict[str, Any]] = {}
    for name, proto in _models(which).items():
        feeds = models.random_inputs(proto)
        segs, outs, info = {}, {}, {}
        for label in ("before", "after"):
            saved = kernels.CHANNEL_LOOP_STEP, kernels.CHANNEL_TAPS_INNER
            if label == "before":  # read when the kernels are generated, at compile
                kernels.CHANNEL_LOOP_STEP, kernels.CHANNEL_TAPS_INNER = 1, False
            try:
                p = _session5_before() if label == "before" else gles2.create("fp32")
                g = to_graph(proto)
                t0 = time.perf_counter()
                segs[label] = p.compile(g.nodes, g, list(g.inputs), list(g.outputs))
                outs[label] = segs[label].run(feeds, RunStats())[g.outputs[0]]
            finally:
                kernels.CHANNEL_LOOP_STEP, kernels.CHANNEL_TAPS_INNER = saved
            info[f"{label} compile + first run s"] = round(time.perf_counter() - t0, 1)
            info[f"{label} draws"] = segs[label].draws
        ref = outs["before"]
        info["max |after - before| / max(1, max |before|)"] = float(
            np.abs(outs["after"] - ref).max() / max(1.0, float(np.abs(ref).max())))
        wall: dict[str, list[float]] = {k: [] for k in segs}
        cpu: dict[str, list[float]] = {k: [] for k in segs}
        for _ in range(repeats):
            for label, seg in segs.items():
                c0, t0 = time.process_time(), time.perf_counter()
                seg.run(feeds, RunStats())
                wall[label].append(time.perf_counter() - t0)
                cpu[label].append(time.process_time() - c0)
        for label in segs:
            info[f"{label} wall ms"] = round(statistics.median(wall[label]) * 1e3, 1)
            info[f"{label} cpu ms"] = round(statistics.median(cpu[label]) * 1e3, 1)
        info["speed-up wall"] = round(info["before wall ms"] / info["after wall ms"], 2)
        info["speed-up cpu"] = round(info["before cpu ms"] / info["after cpu ms"], 2)
        for seg in segs.values():
            seg.close()
        results[name] = info
    return results


def varyings_ab(which: list[str], repeats: int) -> dict[str, dict[str, Any]]:
    """Channel draws with their weights in the uniform array against varyings (``channel_varyings``,
    the fourteenth session), every node of each model on gles2 (fp32), runs alternating in order
    round by round (the one timed first in a round ran about 10% slower)."""
    import models

    from gpubackend.model import to_graph

    results: dict[str, dict[str, Any]] = {}
    for name, proto in _models(which).items():
        feeds = models.random_inputs(proto)
        segs, outs, info = {}, {}, {}
        for label in ("uniforms", "varyings"):
            p = gles2.create("fp32")
            p.runtime.channel_varyings = label == "varyings"  # read at the first generation
            g = to_graph(proto)
            t0 = time.perf_counter()
            segs[label] = p.compile(g.nodes, g, list(g.inputs), list(g.outputs))
            outs[label] = segs[label].run(feeds, RunStats())[g.outputs[0]]
            info[f"{label} compile + first run s"] = round(time.perf_counter() - t0, 1)
        ref = outs["uniforms"]
        info["max |varyings - uniforms| / max(1, max |uniforms|)"] = float(
            np.abs(outs["varyings"] - ref).max() / max(1.0, float(np.abs(ref).max())))
        wall: dict[str, list[float]] = {k: [] for k in segs}
        order = list(segs.items())
        for i in range(repeats):
            for label, seg in order if i % 2 else order[::-1]:
                t0 = time.perf_counter()
                seg.run(feeds, RunStats())
                wall[label].append(time.perf_counter() - t0)
        for label in segs:
            info[f"{label} wall ms"] = round(statistics.median(wall[label]) * 1e3, 1)
        info["speed-up"] = round(info["uniforms wall ms"] / info["varyings wall ms"], 2)
        for seg in segs.values():
            seg.close()
        results[name] = info
    return results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--models", default="selfie,mobilenet,unet", help="comma list; empty for none")
    ap.add_argument("--no-kernels", action="store_true")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--session5-ab", action="store_true", help="the fifth session's kernels off vs on, per model")
    ap.add_argument("--varyings-ab", action="store_true",
                    help="channel-draw weights in uniforms vs varyings (fourteenth session), per model")
    args = ap.parse_args(argv)
    report: dict[str, Any] = {}
    if args.session5_ab or args.varyings_ab:
        ab = session5_ab if args.session5_ab else varyings_ab
        report["models"] = ab([m for m in args.models.split(",") if m], args.repeats)
        args.no_kernels, args.models = True, ""
    p32, p16 = gles2.create("fp32"), gles2.create("fp16")
    if not args.no_kernels:
        report["fma peak GFLOP/s"] = round(peak_gflops(p32, args.repeats), 2)
        report["draw overhead us"] = round(draw_overhead_us(p32, args.repeats), 1)
        for label, p in (("fp32", p32), ("fp16", p16)):
            report[f"kernels GFLOP/s {label}"] = {k: round(v, 3) for k, v in kernel_gflops(p, args.repeats).items()}
    which = [m for m in args.models.split(",") if m]
    if which:
        report["models"] = model_latency(which, args.repeats)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for k, v in report.items():
            if isinstance(v, dict):
                print(f"{k}:")
                for k2, v2 in v.items():
                    print(f"  {k2}: {v2}")
            else:
                print(f"{k}: {v}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
