"""gles3 benchmarks: FMA peak of the driver's fragment shaders, per-draw overhead, per-kernel
GFLOP/s, the effect of render targets per pass and of baked shape constants, and whole-model
latency against gles31, cpu and onnxruntime, all in one process (medians; compare ratios).

    python benchmarks/bench_gles3.py [--quick] [--targets 1,2,4,8] [--runs 7] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from gpubackend.graph import Graph, Node  # noqa: E402
from gpubackend.paths import gles3  # noqa: E402
from gpubackend.paths.base import RunStats  # noqa: E402


def median_time(fn, runs: int) -> float:
    fn()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def fma_peak(path: gles3.Gles3Path, runs: int) -> float:
    """GFLOP/s of independent vec4 FMA chains in a fragment shader (no memory traffic)."""
    from gpubackend import shaders

    dev, ctx = path.dev, path.dev.ctx
    iters, size = 256, 256
    prog = dev.program(gles3.kernels.vertex_source(),
                       shaders.source("gles3/fma_peak.frag", "300 es", {"PEAK_ITERS": iters},
                                      shaders.read("gles3/header.glsl")))
    tex = dev.texture((size, size), 4, None, dtype="f4")
    fbo = ctx.framebuffer(color_attachments=[tex])
    vao = ctx.vertex_array(prog, [])
    prog["u_seed"].value = (0.1, 0.2, 0.3, 0.4)

    def draw() -> None:
        fbo.use()
        fbo.viewport = (0, 0, size, size)
        vao.render(mode=4, vertices=3)
        ctx.finish()

    t = median_time(draw, runs)
    for obj in (vao, fbo, tex):
        obj.release()
    return size * size * iters * 8 * 4 * 2 / t / 1e9


def draw_overhead(path: gles3.Gles3Path, runs: int) -> float:
    """Seconds per draw of a tiny (1 texel) unary kernel, 200 draws per timing."""
    node = Node("r", "Relu", ["x"], ["y"])
    g = Graph([node], ["x"], ["y"], {}, {"x": (1, 4, 1, 1), "y": (1, 4, 1, 1)}, {}, 17)
    seg = path.compile([node], g, ["x"], ["y"])
    seg.run({"x": np.ones((1, 4, 1, 1), np.float32)}, RunStats())
    step = seg.steps[0]

    def many() -> None:
        st = RunStats()
        for _ in range(200):
            seg._draw(step, st)
        path.dev.ctx.finish()

    t = median_time(many, runs) / 200
    seg.close()
    return t


KERNEL_CASES = {
    # name: (op, input shape, constants, attrs)
    "conv3x3 32->64 @56": ("Conv", (1, 32, 56, 56), {"w": (64, 32, 3, 3)}, {"pads": [1, 1, 1, 1]}),
    "conv1x1 96->24 @56": ("Conv", (1, 96, 56, 56), {"w": (24, 96, 1, 1)}, {}),
    "conv1x1 24->144 @56": ("Conv", (1, 24, 56, 56), {"w": (144, 24, 1, 1)}, {}),
    "depthwise3x3 144 @56": ("Conv", (1, 144, 56, 56), {"w": (144, 1, 3, 3)}, {"pads": [1, 1, 1, 1], "group": 144}),
    "gemm 1x1280->1000": ("Gemm", (1, 1280), {"w": (1000, 1280)}, {"transB": 1}),
}


def kernel_case(path: gles3.Gles3Path, name: str, runs: int) -> dict:
    from gpubackend import fallback

    op, shape, consts, attrs = KERNEL_CASES[name]
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(np.float32)
    cs = {k: (rng.standard_normal(s) * 0.1).astype(np.float32) for k, s in consts.items()}
    y = fallback.run_node(op, [x] + list(cs.values()), attrs, 17)[0]
    node = Node("k", op, ["x"] + list(cs), ["y"], dict(attrs))
    g = Graph([node], ["x"], ["y"], cs, {"x": shape, "y": tuple(y.shape)}, {}, 17)
    kern = path.kernel(node, g)
    assert not isinstance(kern, str), kern
    seg = path.compile([node], g, ["x"], ["y"])
    got = seg.run({"x": x}, RunStats())["y"]
    err = float(np.linalg.norm(got - y) / np.linalg.norm(y))
    step = seg.steps[0]

    def once() -> None:
        seg._draw(step, RunStats())
        path.dev.ctx.finish()

    t = median_time(once, runs)
    draws = RunStats()
    seg._draw(step, draws)
    seg.close()
    return {"ms": t * 1e3, "gflops": kern.flops / t / 1e9, "draws": draws.dispatches, "rel_err": err}


def model_latency(runs: int, quick: bool, targets: list[int]) -> dict:
    import models
    import onnxruntime as ort

    import gpubackend
    from gpubackend.model import load_model, to_graph

    out = {}
    specs = [("mobilenet_v2_like", models.mobilenet_v2_like(112 if quick else 224)),
             ("unet_like", models.unet_like(128 if quick else 256))]
    for name, model in specs:
        feeds = models.random_inputs(model, 0)
        want = models.onnxruntime_outputs(model, feeds)
        runners = {}
        so = ort.SessionOptions()
        so.intra_op_num_threads = 2
        ort_sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        runners["onnxruntime"] = lambda s=ort_sess, f=feeds: s.run(None, f)
        cpu = gpubackend.Session(model, path="cpu")
        runners["cpu"] = lambda s=cpu, f=feeds: s.run(f)
        g = to_graph(load_model(model))
        errs = {}
        for t in targets:
            p = gles3.Gles3Path("fp32", targets=t)
            seg = p.compile(g.nodes, g, g.inputs, g.outputs)
            res = seg.run(feeds, RunStats())
            errs[f"gles3 targets={t}"] = max(float(np.linalg.norm(res[o] - w) / np.linalg.norm(w))
                                             for o, w in zip(g.outputs, want))
            runners[f"gles3 targets={t}"] = lambda s=seg, f=feeds: s.run(f, RunStats())
        try:
            s31 = gpubackend.Session(model, path="gles31", fallback=True)
            s31.run(feeds)
            runners["gles31"] = lambda s=s31, f=feeds: s.run(f)
            runners_note = ", ".join(sorted(set(s31.placement.values())))
        except Exception as exc:  # noqa: BLE001 - another engineer's path may not be ready
            runners_note = f"unavailable: {exc}"[:200]
        times: dict[str, list[float]] = {k: [] for k in runners}
        for fn in runners.values():
            fn()
        for _ in range(runs):  # interleaved, so drift hits every runner alike
            for key, fn in runners.items():
                t0 = time.perf_counter()
                fn()
                times[key].append(time.perf_counter() - t0)
        med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
        out[name] = {"ms": med, "x_onnxruntime": {k: v / med["onnxruntime"] for k, v in med.items()},
                     "rel_err_vs_onnxruntime": errs, "gles31_placement": runners_note}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smaller models")
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--targets", default="1,2,4,8", help="render targets per pass to compare")
    ap.add_argument("--no-models", action="store_true")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    targets = [int(t) for t in a.targets.split(",")]
    base = gles3.Gles3Path("fp32")
    res: dict = {"renderer": base.dev.ctx.info.get("GL_RENDERER"), "fma_peak_gflops": fma_peak(base, a.runs),
                 "draw_overhead_us": draw_overhead(base, a.runs) * 1e6, "kernels": {}}
    for t in targets:
        p = gles3.Gles3Path("fp32", targets=t)
        for name in KERNEL_CASES:
            res["kernels"].setdefault(name, {})[f"targets={t}"] = kernel_case(p, name, a.runs)
    unbaked = gles3.Gles3Path("fp32", baked=False)
    for name in KERNEL_CASES:
        res["kernels"][name]["uniform shapes"] = kernel_case(unbaked, name, a.runs)
    if not a.no_models:
        res["models"] = model_latency(a.runs, a.quick, targets)
    if a.json:
        print(json.dumps(res, indent=1))
        return
    print(f"{res['renderer']}: FMA peak {res['fma_peak_gflops']:.1f} GFLOP/s, "
          f"draw overhead {res['draw_overhead_us']:.0f} us")
    for name, rows in res["kernels"].items():
        print(f"  {name}")
        for key, r in rows.items():
            print(f"    {key:16s} {r['ms']:8.2f} ms {r['gflops']:6.2f} GFLOP/s "
                  f"({100 * r['gflops'] / res['fma_peak_gflops']:.0f}% of peak) "
                  f"draws={r['draws']} err={r['rel_err']:.1e}")
    for name, r in res.get("models", {}).items():
        print(f"  {name}: " + ", ".join(f"{k} {v:.1f} ms ({r['x_onnxruntime'][k]:.1f}x)" for k, v in r["ms"].items()))
        print(f"    errors vs onnxruntime: {r['rel_err_vs_onnxruntime']}; gles31 placement: {r['gles31_placement']}")


if __name__ == "__main__":
    main()
