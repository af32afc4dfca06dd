"""First-use tuning against the class defaults, interleaved in one process.

Usage: ``GPUBACKEND_CACHE_DIR=$(mktemp -d) python benchmarks/bench_first_use.py [--models a,b]
[--paths vulkan,gles31] [--runs 15]``. Per path: sessions of every model with ``tune="off"`` and
no record (the device class's defaults), then the first-use measurement (its wall seconds and
picks are printed), then sessions of the same models reading its records; then ``--runs`` runs of
each pair, A/B order alternating run by run; prints p50 per side and their ratio. Use an empty
cache dir: a record already there would make both sides tuned. ``MESA_SHADER_CACHE_DIR`` pointed
at an empty dir as well gives the cold-compile cost of the measurement.
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
from gpubackend.bench.tune import first_use  # noqa: E402
from gpubackend.zoo.cache import fetch, get  # noqa: E402
from gpubackend.zoo.inputs import make_input  # noqa: E402

MODELS = "mtcnn_onet,mtcnn_pnet,ppocr_cls,mobilenetv3_orientation,selfie_segmentation"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=MODELS)
    ap.add_argument("--paths", default="vulkan,gles31")
    ap.add_argument("--runs", type=int, default=15)
    args = ap.parse_args(argv)
    models, paths = args.models.split(","), args.paths.split(",")
    report = gpubackend.probe()
    off = gpubackend.SessionOptions(tune="off")
    feeds = {m: make_input(get(m), small=True) for m in models}

    def sessions(path: str) -> dict[tuple[str, str], gpubackend.Session]:
        out = {}
        for m in models:
            out[(m, path)] = gpubackend.Session(str(fetch(m)), path=path, options=off)
            out[(m, path)].run(feeds[m])  # compiles
        return out

    defaults: dict[tuple[str, str], gpubackend.Session] = {}
    tuned: dict[tuple[str, str], gpubackend.Session] = {}
    for path in paths:
        defaults |= sessions(path)
        t0 = time.perf_counter()
        note = first_use(path, report.fingerprint, gpubackend.SessionOptions())
        print(f"first use on {path}: {time.perf_counter() - t0:.2f} s: {note or 'nothing measured'}", flush=True)
        tuned |= sessions(path)
    for key, sess in defaults.items():
        a, b = sess.run(feeds[key[0]]), tuned[key].run(feeds[key[0]])
        diff = max(float(np.abs(x - y).max()) for x, y in zip(a, b))
        print(f"{key[0]} on {key[1]}: max |defaults - tuned| {diff:.1e}")
    times: dict[tuple[str, str], tuple[list[float], list[float]]] = {k: ([], []) for k in defaults}
    for r in range(args.runs):
        for key in defaults:
            pair = ((defaults[key], times[key][0]), (tuned[key], times[key][1]))
            for sess, acc in (pair if r % 2 == 0 else pair[::-1]):
                t0 = time.perf_counter()
                sess.run(feeds[key[0]])
                acc.append(time.perf_counter() - t0)
    print("| model | path | p50 defaults (tune off), ms | p50 first-use tuned, ms | defaults / tuned |")
    print("|---|---|---|---|---|")
    for (model, path), (ta, tb) in times.items():
        pa, pb = statistics.median(ta) * 1e3, statistics.median(tb) * 1e3
        print(f"| {model} | {path} | {pa:.2f} | {pb:.2f} | {pa / pb:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
