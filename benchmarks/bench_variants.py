"""Tuning variants of one kernel unit timed interleaved in one process on a roofline kernel.

Usage: ``python benchmarks/bench_variants.py --path vulkan --unit gemm --kernel gemm
--variants px8cb2,px4cb4sg [--rounds 5]``. Kernels: ``gemm`` (256x1024x1024), ``matmul`` (512^3),
``conv3`` (3x3 64ch 128x128), ``conv1`` (1x1 128ch 64x64), the ``gpubackend bench --roofline``
set. One session per variant (that unit forced), each checked against the CPU path, then the
sessions run round by round (A, B, ..., A, B, ...); prints the median ms and GFLOP/s per variant.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import gpubackend  # noqa: E402
from gpubackend import tuning  # noqa: E402
from gpubackend.bench import kernels  # noqa: E402

KERNELS = {
    "gemm": (lambda: kernels.gemm(256, 1024, 1024), (256, 1024), 2 * 256 * 1024 * 1024),
    "matmul": (lambda: kernels.matmul(512), (512, 512), 2 * 512 ** 3),
    "conv3": (lambda: kernels.conv(64, 128, 3), (1, 64, 128, 128), 2 * 64 * 64 * 9 * 128 * 128),
    "conv1": (lambda: kernels.conv(128, 64, 1), (1, 128, 64, 64), 2 * 128 * 128 * 64 * 64),
}


def _first(out):
    return out["y"] if isinstance(out, dict) else out[0]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--path", default="vulkan")
    ap.add_argument("--unit", default="gemm", choices=sorted(tuning.units()))
    ap.add_argument("--kernel", default="gemm", choices=sorted(KERNELS))
    ap.add_argument("--variants", required=True, help="comma-separated variant names of the unit")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    build, shape, flops = KERNELS[args.kernel]
    data = build()
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    ref = _first(gpubackend.Session(data, path="cpu").run({"x": x}))
    sessions = {}
    for name in args.variants.split(","):
        t = time.perf_counter()
        with tuning.forced(**{args.unit: name}):
            sess = gpubackend.Session(data, path=args.path)
            got = _first(sess.run({"x": x}))
        err = float(np.abs(got - ref).max() / max(1.0, float(np.abs(ref).max())))
        print(f"{name}: first run (compile) {time.perf_counter() - t:.1f} s, error {err:.1e}", flush=True)
        sessions[name] = sess
    times: dict[str, list[float]] = {n: [] for n in sessions}
    for _ in range(args.rounds):
        for name, sess in sessions.items():
            t = time.perf_counter()
            sess.run({"x": x})
            times[name].append(time.perf_counter() - t)
    for name, ts in times.items():
        m = statistics.median(ts)
        print(f"{name}: median {m * 1e3:.1f} ms, {flops / m / 1e9:.2f} GFLOP/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
