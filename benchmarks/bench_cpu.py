"""CPU path (``fallback``) vs onnxruntime, measured interleaved in one process.

    python benchmarks/bench_cpu.py [--runs 30] [--models selfie,mobilenet,unet] [--ops]

Prints per model the p50 of both runtimes and their ratio; with ``--ops`` also the mean seconds per
op type (depthwise and 1x1 / 3x3 convolutions split out) from a profiled run of the CPU segment.
"""

from __future__ import annotations

import argparse
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


def _models(names: list[str]) -> dict[str, onnx.ModelProto]:
    import models as test_models

    out = {}
    for name in names:
        if name == "selfie":
            from gpubackend.models import SELFIE_SEGMENTATION

            out[name] = onnx.load(str(SELFIE_SEGMENTATION))
        elif name == "mobilenet":
            out[name] = test_models.mobilenet_v2_like()
        elif name == "unet":
            out[name] = test_models.unet_like()
        else:
            raise SystemExit(f"unknown model {name}")
    return out


def _ort(model: onnx.ModelProto) -> ort.InferenceSession:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 2
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def _op_key(node, graph_consts) -> str:
    if node.op_type != "Conv":
        return node.op_type
    w = graph_consts.get(node.inputs[1])
    if w is None:
        return "Conv"
    group = int(node.attrs.get("group", 1))
    if group > 1 and w.shape[1] == 1:
        return "Conv dw"
    return f"Conv {'x'.join(str(k) for k in w.shape[2:])}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--models", default="selfie,mobilenet,unet")
    ap.add_argument("--ops", action="store_true")
    args = ap.parse_args()
    for name, model in _models(args.models.split(",")).items():
        feeds = {i.name: np.random.default_rng(0).random(
            [d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
            for i in model.graph.input}
        sess = gpubackend.Session(model, path="cpu")
        ref = _ort(model)
        for _ in range(3):
            sess.run(feeds)
            ref.run(None, feeds)
        t_ours, t_ort = [], []
        for _ in range(args.runs):
            t0 = time.perf_counter()
            ref.run(None, feeds)
            t1 = time.perf_counter()
            sess.run(feeds)
            t2 = time.perf_counter()
            t_ort.append(t1 - t0)
            t_ours.append(t2 - t1)
        a, b = np.median(t_ours) * 1e3, np.median(t_ort) * 1e3
        print(f"{name:10s} cpu p50 {a:7.2f} ms  ort p50 {b:7.2f} ms  ratio {a / b:5.2f}x")
        if args.ops:
            seg = sess._current.segments[0]
            consts = seg._constants
            per = defaultdict(float)
            counts = defaultdict(int)
            reps = max(5, args.runs // 3)
            for _ in range(reps):
                st = RunStats(profile=True)
                seg.run(feeds, st)
                for node in seg.nodes:
                    per[_op_key(node, consts)] += st.node_seconds.get(node.name, 0.0) / reps
            for node in seg.nodes:
                counts[_op_key(node, consts)] += 1
            for k, v in sorted(per.items(), key=lambda kv: -kv[1]):
                print(f"    {k:22s} n={counts[k]:3d} {v * 1e3:7.2f} ms")


if __name__ == "__main__":
    main()
