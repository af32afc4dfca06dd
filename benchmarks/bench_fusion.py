"""Before/after of the elementwise-tail fusions (gpubackend/rewrites.py: per-channel affine and
BatchNormalization folded into the conv, four-node HardSwish; compute_kernels.fuse_gates: SiLU in
the conv epilogue), in one process: per model and path a session built with the fusions switched
off and one with them on, run alternately (interleaved), p50 wall ms of each, the dispatch count
of one run (load-independent) and both sessions' error from onnxruntime.

Usage: ``python benchmarks/bench_fusion.py [--models ppocr_v4_det,yolov8n] [--paths vulkan,gles31]
[--runs 5]``
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import gpubackend  # noqa: E402
from gpubackend import rewrites  # noqa: E402
from gpubackend.paths import compute_kernels  # noqa: E402

ZOO = Path.home() / ".cache" / "gpubackend" / "zoo" / "models"
MODELS = {"ppocr_v4_det": (1, 3, 480, 640), "yolov8n_nudenet": (1, 3, 320, 320), "ppocr_v4_rec": (1, 3, 48, 320)}
ALIASES = {"yolov8n": "yolov8n_nudenet"}


@contextlib.contextmanager
def fusions_off() -> Iterator[None]:
    saved = (rewrites.fold_channel_affine, rewrites.fuse_decomposed_hardswish, compute_kernels.fuse_gates)
    rewrites.fold_channel_affine = rewrites.fuse_decomposed_hardswish = lambda graph: None
    compute_kernels.fuse_gates = lambda records, keep: records
    try:
        yield
    finally:
        rewrites.fold_channel_affine, rewrites.fuse_decomposed_hardswish, compute_kernels.fuse_gates = saved


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="ppocr_v4_det,yolov8n")
    ap.add_argument("--paths", default="vulkan,gles31")
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args(argv)
    import onnx
    import onnxruntime as ort

    for model in args.models.split(","):
        name = ALIASES.get(model, model)
        proto = onnx.load(str(ZOO / f"{name}.onnx"))
        inp = proto.graph.input[0].name
        shape = MODELS[name]
        feeds = {inp: np.random.default_rng(0).standard_normal(shape).astype(np.float32)}
        ref = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
        for path in args.paths.split(","):
            sessions = {}
            with fusions_off():
                sessions["before"] = gpubackend.Session(proto, path=path, input_shapes={inp: shape})
                sessions["before"].run(feeds)
            sessions["after"] = gpubackend.Session(proto, path=path, input_shapes={inp: shape})
            sessions["after"].run(feeds)
            times: dict[str, list[float]] = {k: [] for k in sessions}
            info = {}
            for k, s in sessions.items():
                got = s.run(feeds)
                err = max(float(np.abs(g - r).max()) / max(1.0, float(np.abs(r).max())) for g, r in zip(got, ref))
                info[k] = (s.stats.dispatches, err)
            for _ in range(args.runs):
                for k, s in sessions.items():
                    t0 = time.perf_counter()
                    s.run(feeds)
                    times[k].append((time.perf_counter() - t0) * 1e3)
            b, a = (float(np.median(times[k])) for k in ("before", "after"))
            print(f"{model:14s} {path:7s} dispatches {info['before'][0]:4d} -> {info['after'][0]:4d}  "
                  f"p50 ms {b:8.1f} -> {a:8.1f} ({b / a:.2f}x)  error {info['before'][1]:.1e} / {info['after'][1]:.1e}",
                  flush=True)
            for s in sessions.values():
                s.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
