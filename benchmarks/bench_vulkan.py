"""Vulkan path benchmarks on this machine's Vulkan driver (lavapipe here).

Reports, as medians of several runs (the machine is noisy: compare ratios within one run):

- the driver's FMA peak and copy bandwidth (the project's ``shaders/bench`` shaders),
- per-kernel GFLOP/s of representative layers and their fraction of that peak,
- per-dispatch overhead (a one-invocation dispatch: alone per ``eval()`` and inside one sequence),
- per-run overhead of the recorded-once sequence against one ``eval()`` per node (whole models),
- whole-model latency on ``vulkan`` (fp32, fp16) against ``gles31``, ``cpu`` and onnxruntime,
  interleaved in one process.

Usage: ``python benchmarks/bench_vulkan.py [--repeats N] [--models] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from gpubackend.paths import vulkan  # noqa: E402
from gpubackend.paths.vulkan.device import VkDevice, params_words  # noqa: E402
from gpubackend.paths.vulkan.program import BufferSpec, Compiled, Edge, Program, Step  # noqa: E402


def median_time(fn: Any, repeats: int, warmup: int = 1) -> float:
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))


def selftest_program(spv: str, n4: int, dispatches: int) -> Program:
    p = Program()
    p.add_buffer(BufferSpec("x", n4 * 4, np.float32, "input"))
    p.add_buffer(BufferSpec("y", n4 * 4, np.float32, "output"))
    groups = max(1, -(-n4 // 64))
    for i in range(dispatches):
        p.steps.append(Step(f"s{i}", spv, ["x", "y"], params_words([n4, 0.999, 0.001, 0.0, 0.0]),
                            (groups, 1, 1), (64, 1, 1)))
    p.inputs.append(Edge("x", "x"))
    p.outputs.append(Edge("y", "y"))
    return p


def fma_peak(repeats: int) -> tuple[float, float]:
    """(GFLOP/s, GB/s) of the project's shared FMA-only and copy shaders (``shaders/bench``,
    ``gpubackend.bench.micro.vulkan_peak``; best of ``repeats``) on this Vulkan driver."""
    from gpubackend.bench.micro import vulkan_peak

    peak = vulkan_peak(repeats=repeats)
    return float(peak.gflops or 0.0), float(peak.gbytes or 0.0)


def dispatch_overhead(dev: VkDevice, repeats: int, n: int = 35) -> dict[str, float]:
    """Tiny (one-invocation) dispatches, so only overhead is timed, interleaved: one ``eval()``
    of a single dispatch; one sequence of ``n`` dispatches (per dispatch); and a whole segment
    run (upload, ``n`` dispatches, download) replaying the recorded sequence against one
    ``eval()`` per node (``n`` matches the MobileNetV2-like model's dispatch count)."""
    prog = selftest_program("vk_selftest.spv", 1, n)
    rec = Compiled(dev, prog, record_once=True)
    per = Compiled(dev, selftest_program("vk_selftest.spv", 1, n), record_once=False)
    one = dev.sequence().record(dev.dispatch_op(rec.algos[0]))
    many = dev.sequence()
    for a in rec.algos:
        many.record(dev.dispatch_op(a))
    x = [np.ones(4, np.float32)]
    fns = {"one": one.eval, "many": many.eval, "rec": lambda: rec.execute(x), "per": lambda: per.execute(x)}
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats * 3):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - t0)
    med = {k: float(np.median(v)) for k, v in times.items()}
    rec.close()
    per.close()
    return {"eval_of_one_dispatch_us": med["one"] * 1e6, "per_dispatch_in_one_sequence_us": med["many"] / n * 1e6,
            f"segment_of_{n}_replayed_us": med["rec"] * 1e6, f"segment_of_{n}_per_node_evals_us": med["per"] * 1e6}


def r(*shape: int) -> np.ndarray:
    return np.random.default_rng(0).uniform(-1, 1, shape).astype(np.float32)


def kernel_cases() -> list[tuple[str, str, list, dict, tuple, float]]:
    """(label, op, inputs, attrs, const indices, flops)."""
    cases = []

    def conv(label: str, n: int, ci: int, h: int, w: int, co: int, k: int, s: int = 1, g: int = 1) -> None:
        attrs = {"kernel_shape": [k, k], "strides": [s, s], "pads": [k // 2] * 4, "group": g,
                 "_act": ("Clip", {"min": 0.0, "max": 6.0})}
        oh, ow = (h + 2 * (k // 2) - k) // s + 1, (w + 2 * (k // 2) - k) // s + 1
        flops = 2.0 * n * oh * ow * co * (ci // g) * k * k
        cases.append((label, "Conv", [r(n, ci, h, w), r(co, ci // g, k, k), r(co)], attrs, (1, 2), flops))

    conv("conv3x3 3->32 @224 s2 (stem)", 1, 3, 224, 224, 32, 3, 2)
    conv("conv3x3 32->32 @56", 1, 32, 56, 56, 32, 3)
    conv("conv1x1 32->192 @56", 1, 32, 56, 56, 192, 1)
    conv("conv1x1 192->32 @28", 1, 192, 28, 28, 32, 1)
    conv("depthwise3x3 192 @56", 1, 192, 56, 56, 192, 3, 1, 192)
    cases.append(("convtranspose2x2 s2 32->16 @64", "ConvTranspose", [r(1, 32, 64, 64), r(32, 16, 2, 2), r(16)],
                  {"kernel_shape": [2, 2], "strides": [2, 2]}, (1, 2), 2.0 * 128 * 128 * 16 * 32))
    cases.append(("gemm 256x256x256", "Gemm", [r(256, 256), r(256, 256), r(256)], {"transB": 1}, (1, 2),
                  2.0 * 256 ** 3))
    return cases


def kernel_throughput(repeats: int) -> list[dict[str, Any]]:
    path = vulkan.create("fp32")
    out = []
    for label, op, inputs, attrs, consts, flops in kernel_cases():
        graph, _ = vulkan.single_node_graph(op, inputs, attrs, consts)
        seg = path.compile(graph.nodes, graph, list(graph.inputs), list(graph.outputs))
        secs = seg.compiled.time_dispatches(repeats)
        total = float(sum(secs))
        out.append({"kernel": label, "ms": total * 1e3, "gflops": flops / total / 1e9})
        seg.close()
    return out


def models(repeats: int) -> dict[str, Any]:
    import onnxruntime as ort
    from models import mobilenet_v2_like, random_inputs, unet_like

    import gpubackend

    res: dict[str, Any] = {}
    import onnx

    from gpubackend.models import SELFIE_SEGMENTATION

    for name, model in (("mobilenet_v2_like 224", mobilenet_v2_like(224)), ("unet_like 256", unet_like(256)),
                        ("selfie_segmentation 256 (MediaPipe)", onnx.load(str(SELFIE_SEGMENTATION)))):
        feeds = random_inputs(model, seed=0)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 2
        # onnxruntime's workers spin after a run and would steal the CPU from whatever runs next
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        runners: dict[str, Any] = {"onnxruntime": (lambda s, f: lambda: s.run(None, f))(
            ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"]), feeds)}
        for label, path, prec, record in (("vulkan fp32", "vulkan", "fp32", "1"),
                                          ("vulkan fp32 per-node eval", "vulkan", "fp32", "0"),
                                          ("vulkan fp16", "vulkan", "fp16", "1"),
                                          ("gles31 fp32", "gles31", "fp32", "1"), ("cpu", "cpu", "fp32", "1")):
            os.environ[vulkan.RECORD_ENV] = record
            try:
                sess = gpubackend.Session(model, path=path, precision=prec, fallback=True)
                if path != "cpu" and set(sess.placement.values()) != {path}:
                    label += f" ({sum(v != path for v in sess.placement.values())} nodes on cpu)"
                runners[label] = (lambda s, f: lambda: s.run(f))(sess, feeds)
            except Exception as exc:  # noqa: BLE001 - report and go on
                res.setdefault("errors", []).append(f"{name} {label}: {exc}")
        os.environ.pop(vulkan.RECORD_ENV, None)
        times: dict[str, list[float]] = {k: [] for k in runners}
        for fn in runners.values():
            fn()
        order = list(runners)
        for i in range(repeats):  # interleaved: every runner once per round, the order rotating
            for k in order[i % len(order):] + order[:i % len(order)]:
                fn = runners[k]
                t0 = time.perf_counter()
                fn()
                times[k].append(time.perf_counter() - t0)
        med = {k: float(np.median(v)) * 1e3 for k, v in times.items()}
        ort_ms = med["onnxruntime"]
        res[name] = {k: {"ms": round(v, 2), "x_onnxruntime": round(v / ort_ms, 1)} for k, v in med.items()}
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--no-models", action="store_true", help="skip the whole-model comparison")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    dev = VkDevice()
    report: dict[str, Any] = {"device": dev.mgr.get_device_properties().get("device_name")}
    gflops, gbytes = fma_peak(args.repeats)
    report["fma_peak_gflops"], report["copy_gbytes_per_s"] = round(gflops, 2), round(gbytes, 2)
    report["dispatch_overhead"] = {k: round(v, 1) for k, v in dispatch_overhead(dev, args.repeats).items()}
    ks = kernel_throughput(args.repeats)
    for k in ks:
        k["of_peak"] = round(k["gflops"] / report["fma_peak_gflops"], 3)
        k["gflops"], k["ms"] = round(k["gflops"], 2), round(k["ms"], 2)
    report["kernels"] = ks
    if not args.no_models:
        report["models"] = models(args.repeats)
    if args.json:
        print(json.dumps(report, indent=1))
        return 0
    print(f"device: {report['device']}")
    print(f"FMA peak: {report['fma_peak_gflops']} GFLOP/s, copy bandwidth {report['copy_gbytes_per_s']} GB/s")
    print("dispatch overhead: " + ", ".join(f"{k} {v}" for k, v in report["dispatch_overhead"].items()))
    for k in ks:
        print(f"  {k['kernel']:<34} {k['ms']:8.2f} ms {k['gflops']:7.2f} GFLOP/s  {k['of_peak'] * 100:5.1f}% of peak")
    for name, rows in report.get("models", {}).items():
        if name == "errors":
            continue
        print(name)
        for label, v in rows.items():
            print(f"  {label:<34} {v['ms']:9.2f} ms  {v['x_onnxruntime']:6.1f}x onnxruntime")
    for e in report.get("models", {}).get("errors", []):
        print("error:", e)
    return 0


if __name__ == "__main__":
    sys.exit(main())
