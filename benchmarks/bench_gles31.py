"""Benchmarks of the gles31 compute path on this machine's driver (llvmpipe here).

    python benchmarks/bench_gles31.py [--quick] [--json]

Reports: the driver's FMA-only peak (GFLOP/s), per-dispatch overhead, per-kernel throughput
(GFLOP/s, each dispatch timed to completion, median of several), cold and warm session creation
(fresh processes: no program binaries vs. persisted binaries), and whole-model latency of the two
test models on gles31 (fp32, fp16) against the cpu path and onnxruntime, interleaved in one run.
Timings here swing 2x between runs: compare ratios within one run."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from gpubackend.graph import Graph, Node  # noqa: E402
from gpubackend.paths import gles31  # noqa: E402
from gpubackend.paths.base import RunStats  # noqa: E402

_PEAK_SRC = """#version 310 es
layout(local_size_x = 64) in;
layout(std430, binding = 0) buffer Out { vec4 o[]; };
layout(std140, binding = 0) uniform Params { int iters; float k; } p;
void main() {
    vec4 a = vec4(float(gl_GlobalInvocationID.x)) * 1e-6, b = a + 0.1, c = a + 0.2, d = a + 0.3;
    vec4 m = vec4(p.k);
    for (int i = 0; i < p.iters; i++) {
        a = a * m + m; b = b * m + m; c = c * m + m; d = d * m + m;
        a = a * m + m; b = b * m + m; c = c * m + m; d = d * m + m;
    }
    o[gl_GlobalInvocationID.x] = a + b + c + d;
}
"""


def fma_peak(groups: int = 256, iters: int = 512) -> float:
    """GFLOP/s of a shader doing nothing but independent vec4 FMAs (8 chains of vec4)."""
    dev, programs = gles31.device_and_programs()
    g = programs.gl
    prog = programs.get(_PEAK_SRC)
    out = dev.buffer(reserve=groups * 64 * 16)
    ubo = dev.buffer(np.array([iters, 0], np.int32).view(np.uint8).copy()
                     if False else np.frombuffer(np.array([iters, 0, 0, 0], np.int32).tobytes()[:4]
                                                 + np.array([0.999, 0, 0], np.float32).tobytes(), np.uint8))
    times = []
    for _ in range(5):
        g.glFinish()
        t0 = time.perf_counter()
        g.use_program(prog)
        g.bind_buffer_base(0x90D2, 0, out.glo)
        g.bind_buffer_base(0x8A11, 0, ubo.glo)
        g.dispatch_compute(groups, 1, 1)
        g.glFinish()
        times.append(time.perf_counter() - t0)
    flops = groups * 64 * iters * 8 * 4 * 2
    out.release()
    ubo.release()
    return flops / float(np.median(times)) / 1e9


def _segment(nodes: list[Node], graph: Graph, precision: str):
    path = gles31.create(precision)
    produced = {o for n in nodes for o in n.outputs}
    inputs = list(dict.fromkeys(i for n in nodes for i in n.inputs if i and i not in produced
                                and i not in graph.constants))
    return path.compile(nodes, graph, inputs, list(graph.outputs))


def dispatch_overhead(n: int = 200) -> float:
    """Seconds per dispatch of a trivial kernel (a chain of Relu on 4 floats), host included."""
    nodes = [Node(f"r{i}", "Relu", [f"t{i}"], [f"t{i + 1}"]) for i in range(n)]
    shapes = {f"t{i}": (1, 4) for i in range(n + 1)}
    graph = Graph(nodes, ["t0"], [f"t{n}"], {}, shapes=shapes)
    seg = _segment(nodes, graph, "fp32")
    x = {"t0": np.ones((1, 4), np.float32)}
    seg.run(x, RunStats())
    times = []
    for _ in range(7):
        t0 = time.perf_counter()
        seg.run(x, RunStats())
        times.append(time.perf_counter() - t0)
    seg.close()
    return float(np.median(times)) / n


def _conv_case(name, n, cin, h, w, cout, k, s=1, group=1, act=("Relu", {}), transpose=False):
    rng = np.random.default_rng(0)
    pad = 0 if transpose else k // 2
    wshape = (cin, cout // group, k, k) if transpose else (cout, cin // group, k, k)
    consts = {"w": rng.standard_normal(wshape).astype(np.float32) * 0.1,
              "b": rng.standard_normal(cout).astype(np.float32)}
    attrs = {"kernel_shape": [k, k], "strides": [s, s], "pads": [pad] * 4, "group": group, "_act": act}
    oh = (h - 1) * s + k if transpose else (h + 2 * pad - k) // s + 1
    ow = (w - 1) * s + k if transpose else (w + 2 * pad - k) // s + 1
    node = Node(name, "ConvTranspose" if transpose else "Conv", ["x", "w", "b"], ["y"], attrs)
    flops = 2 * n * oh * ow * cout * (cin // group) * k * k
    return node, {"x": (n, cin, h, w), "y": (n, cout, oh, ow)}, consts, flops


def kernel_cases():
    cases = [
        ("conv3x3 32->32 @56", _conv_case("conv3x3", 1, 32, 56, 56, 32, 3)),
        ("conv3x3 s2 3->16 @224 (stem)", _conv_case("stem", 1, 3, 224, 224, 16, 3, s=2)),
        ("conv1x1 24->144 @56", _conv_case("pw_expand", 1, 24, 56, 56, 144, 1)),
        ("conv1x1 144->24 @56", _conv_case("pw_project", 1, 144, 56, 56, 24, 1, act=None)),
        ("depthwise3x3 144 @56", _conv_case("dw", 1, 144, 56, 56, 144, 3, group=144)),
        ("depthwise3x3 s2 144 @56", _conv_case("dw_s2", 1, 144, 56, 56, 144, 3, s=2, group=144)),
        ("convtranspose2x2 s2 32->16 @64", _conv_case("convt", 1, 32, 64, 64, 16, 2, s=2, transpose=True)),
    ]
    rng = np.random.default_rng(1)
    node = Node("mm", "MatMul", ["x", "w"], ["y"], {})
    cases.append(("matmul 256x256x256 (const B)", (node, {"x": (256, 256), "y": (256, 256)},
                                                   {"w": rng.standard_normal((256, 256)).astype(np.float32)},
                                                   2 * 256 ** 3)))
    return cases


def kernel_throughput(precision: str = "fp32", repeat: int = 5) -> list[dict]:
    out = []
    for label, (node, shapes, consts, flops) in kernel_cases():
        graph = Graph([node], ["x"], ["y"], consts, shapes=shapes)
        seg = _segment([node], graph, precision)
        x = {"x": np.random.default_rng(2).standard_normal(shapes["x"]).astype(np.float32)}
        prof = seg.profile(x, repeat=repeat)
        t = sum(p[2] for p in prof)
        out.append({"kernel": label, "ms": t * 1e3, "gflops": flops / t / 1e9, "precision": precision})
        seg.close()
    return out


_CREATE_SNIPPET = """
import json, sys, time
sys.path.insert(0, {tests!r})
import models, gpubackend
m = models.{model}
t0 = time.perf_counter()
s = gpubackend.Session(m, path="gles31", precision={prec!r}, fallback=False)
t = time.perf_counter() - t0
feeds = models.random_inputs(m, 0)
t0 = time.perf_counter()
s.run(feeds)
first = time.perf_counter() - t0
t0 = time.perf_counter()
s.run(feeds)
second = time.perf_counter() - t0
from gpubackend.paths import gles31
_, progs = gles31.device_and_programs()
print(json.dumps({{"seconds": t, "first_run": first, "second_run": second, **progs.stats}}))
"""


def session_creation(model: str = "mobilenet_v2_like(224)", precision: str = "fp32") -> dict:
    """Creation time in fresh processes: cold (empty cache dir and empty Mesa shader cache), warm
    (program binaries and probe verdict cached), and probe-warm but without program binaries and
    with an empty Mesa shader cache (isolates what the binaries save)."""
    import shutil

    code = _CREATE_SNIPPET.format(tests=str(ROOT / "tests"), model=model, prec=precision)
    res = {}
    with tempfile.TemporaryDirectory(prefix="gpub-bench-") as d:
        # Mesa keeps its own on-disk shader cache; point it at a fresh directory so "cold" is cold.
        env = dict(os.environ, GPUBACKEND_CACHE_DIR=d, MESA_SHADER_CACHE_DIR=str(Path(d) / "mesa"))

        def once() -> dict:
            p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=ROOT)
            if p.returncode:
                raise RuntimeError(p.stderr[-2000:])
            return json.loads(p.stdout.strip().splitlines()[-1])

        res["cold"] = once()
        res["warm"] = once()
        shutil.rmtree(Path(d) / "programs", ignore_errors=True)
        shutil.rmtree(Path(d) / "mesa", ignore_errors=True)
        res["no_binaries"] = once()
        res["warm2"] = once()
    return res


def _median_ms(fn, n: int) -> float:
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts)) * 1e3


def model_latency(runs: int = 7) -> list[dict]:
    import models
    import onnxruntime as ort

    import gpubackend

    rows = []
    for label, model in (("mobilenet_v2_like 224", models.mobilenet_v2_like(224)),
                         ("unet_like 256", models.unet_like(256))):
        feeds = models.random_inputs(model, 0)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 2
        ort_s = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        sessions = {"onnxruntime": lambda s=ort_s, f=feeds: s.run(None, f)}
        for path, prec in (("gles31", "fp32"), ("gles31", "fp16"), ("cpu", "fp32")):
            s = gpubackend.Session(model, path=path, precision=prec, fallback=False)
            s.run(feeds)
            sessions[f"{path}/{prec}"] = lambda s=s, f=feeds: s.run(f)
        times: dict[str, list[float]] = {k: [] for k in sessions}
        for _ in range(runs):  # interleaved
            for k, fn in sessions.items():
                times[k].append(_median_ms(fn, 1))
        med = {k: float(np.median(v)) for k, v in times.items()}
        for k, v in med.items():
            rows.append({"model": label, "runner": k, "ms": v, "x_onnxruntime": v / med["onnxruntime"]})
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer repetitions, skip session creation")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    report: dict = {}
    report["fma_peak_gflops"] = fma_peak()
    report["dispatch_overhead_us"] = dispatch_overhead() * 1e6
    report["kernels"] = kernel_throughput("fp32", 3 if args.quick else 5) + kernel_throughput("fp16", 3)
    if not args.quick:
        report["session_creation"] = {m: session_creation(m) for m in ("mobilenet_v2_like(224)", "unet_like(256)")}
    report["models"] = model_latency(3 if args.quick else 7)
    if args.json:
        print(json.dumps(report, indent=1))
        return 0
    print(f"FMA-only peak: {report['fma_peak_gflops']:.1f} GFLOP/s; dispatch overhead: "
          f"{report['dispatch_overhead_us']:.0f} us")
    for k in report["kernels"]:
        print(f"  {k['kernel']:<34} {k['precision']}  {k['ms']:8.2f} ms  {k['gflops']:6.2f} GFLOP/s "
              f"({100 * k['gflops'] / report['fma_peak_gflops']:.0f}% of peak)")
    for m, r in report.get("session_creation", {}).items():
        print(f"  session creation {m}: " + ", ".join(
            f"{k} {v['seconds']:.2f}s + first run {v['first_run']:.2f}s (compiled {v['compiled']}, "
            f"from binary {v['from_binary']})"
            for k, v in r.items()))
    for r in report["models"]:
        print(f"  {r['model']:<22} {r['runner']:<12} {r['ms']:8.1f} ms  {r['x_onnxruntime']:6.1f}x onnxruntime")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
