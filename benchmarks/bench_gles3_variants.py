"""gles3 kernel variants A/B, interleaved in one process: whole models through ``Session`` with
the gles3 path built per variant (kernels taken out by name, ``Limits`` knobs changed), timed
run by run in turn (A, B, A, B, ...), medians; per op type the profiled node seconds. Only the
ratios inside one run mean anything on a loaded machine.

    python benchmarks/bench_gles3_variants.py [--models selfie,unet_like] [--variants taps,gather] [--runs 5]

Variants: ``taps`` (the default kernels), ``gather`` (ConvTranspose in the one-pass gather form:
``convtranspose_taps`` taken out), ``unroll40`` (conv bodies unrolled only up to 40
matrix-vector products, the cap before the third session; ``unroll576``: up to 576), ``tiled`` (Gemm/MatMul and other
1-pixel-tile outputs drawn tile by tile, as before the fourth session; ``onedraw196``: tiles
up to 14x14 in one draw as well; ``targets2``: every tensor in 2 planes, so a conv fragment
keeps 2 output slices instead of 4; ``px1``: Conv one output pixel per fragment, ``conv_px`` taken
out; ``noblend``: Conv, Gemm and MatMul without ``conv_blend``; ``blend16``/``blend256``: its
multiply-add floor; ``blend2x2``: 2 output x 2 input slices per draw). Models: selfie,
unet_like, mobilenet_v2_like, an .onnx file, or one of the roofline kernels
(matmul512, gemm256, conv3x3, conv1x1).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import gpubackend  # noqa: E402
from gpubackend import session as session_module  # noqa: E402

VARIANTS: dict[str, dict[str, Any]] = {
    "taps": {},
    "gather": {"disabled": {"convtranspose_taps"}},
    "unroll40": {"limits": {"unroll_matvecs": 40}},
    "unroll576": {"limits": {"unroll_matvecs": 576}},  # a 3x3 conv of 64 channels fully unrolled
    "tiled": {"limits": {"one_draw_tile_pixels": 0}},
    "onedraw196": {"limits": {"one_draw_tile_pixels": 196}},  # tiles up to 14x14 in one draw too
    "targets2": {"limits": {"targets": 2}},  # 2 render targets per pass (8 accumulator vectors, not 16)
    "px1": {"disabled": {"conv_px"}},
    "px4": {"limits": {"conv_px_pixels": 4}},  # conv_px: 4 pixels of one slice per fragment (default: 2 x 2 slices)
    "pxall": {"limits": {"conv_px_min_macs": 0}},  # conv_px also for convs with few input channels
    "noblend": {"disabled": {"conv_blend"}},  # Conv/Gemm/MatMul without conv_blend (before the fourteenth session)
    "blend16": {"limits": {"conv_blend_min_macs": 16}},  # conv_blend also for convs of few multiply-adds
    "blend256": {"limits": {"conv_blend_min_macs": 256}},
    "blend2x2": {"limits": {"max_varying_vectors": 18}},  # conv_blend with 2 output x 2 input slices per draw
}
ROOFLINE = {"matmul512": "matmul 512^3", "gemm256": "gemm 256x1024x1024", "conv3x3": "conv 3x3 64ch 128x128",
            "conv1x1": "conv 1x1 128ch 64x64"}


@contextlib.contextmanager
def gles3_variant(spec: dict[str, Any]) -> Iterator[None]:
    """While a Session is created: its gles3 path without ``spec['disabled']`` kernels and with
    ``spec['limits']`` replaced."""
    create = session_module.create_path

    def patched(key, precision, disabled, options):
        if key != "gles3":
            return create(key, precision, disabled, options)
        path = create(key, precision, frozenset(disabled) | frozenset(spec.get("disabled", ())), options)
        if spec.get("limits"):
            path.limits = dataclasses.replace(path.limits, **spec["limits"])
        return path

    session_module.create_path = patched
    try:
        yield
    finally:
        session_module.create_path = create


def model_bytes(name: str) -> bytes:
    import models

    if name == "selfie":
        return (ROOT / "gpubackend" / "models" / "selfie_segmentation.onnx").read_bytes()
    if name == "unet_like":
        return models.unet_like(256).SerializeToString()
    if name in ROOFLINE:  # the large kernels of bench --roofline, one node each
        from gpubackend.bench import kernels

        return kernels.KERNELS[ROOFLINE[name]]()
    if name == "mobilenet_v2_like":
        return models.mobilenet_v2_like(224).SerializeToString()
    return Path(name).read_bytes()


def compare(name: str, variants: list[str], runs: int) -> dict[str, Any]:
    from gpubackend.bench.runner import make_inputs
    from gpubackend.model import load_model, to_graph

    data = model_bytes(name)
    feeds = make_inputs(data)
    ops = {n.name: n.op_type for n in to_graph(load_model(data)).nodes}
    sessions, first_s = {}, {}
    for v in variants:
        with gles3_variant(VARIANTS[v]):
            t0 = time.perf_counter()
            sessions[v] = gpubackend.Session(data, path="gles3")
            sessions[v].run(feeds)  # llvmpipe compiles each program at its first draw
            first_s[v] = time.perf_counter() - t0
    ref = sessions[variants[0]].run(feeds)
    errs = {v: max(float(np.max(np.abs(a - b)) / max(1.0, float(np.max(np.abs(b)))))
                   for a, b in zip(s.run(feeds), ref)) for v, s in sessions.items()}
    wall: dict[str, list[float]] = {v: [] for v in variants}
    per_op: dict[str, dict[str, list[float]]] = {v: {} for v in variants}
    for _ in range(runs):
        for v, s in sessions.items():
            t0 = time.perf_counter()
            s.run(feeds)
            wall[v].append(time.perf_counter() - t0)
            s.run(feeds, profile=True)
            sums: dict[str, float] = {}
            for node, sec in s.stats.node_seconds.items():
                op = ops.get(node, "?")
                sums[op] = sums.get(op, 0.0) + sec
            for op, sec in sums.items():
                per_op[v].setdefault(op, []).append(sec)
    for s in sessions.values():
        s.close()
    return {"model": name, "runs": runs,
            "first_run_s": first_s, "max_err_vs_" + variants[0]: errs,
            "ms": {v: statistics.median(t) * 1e3 for v, t in wall.items()},
            "op_ms": {v: {op: statistics.median(t) * 1e3 for op, t in d.items()} for v, d in per_op.items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="selfie,unet_like")
    ap.add_argument("--variants", default="taps,gather", help=f"from {', '.join(VARIANTS)}")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    variants = args.variants.split(",")
    results = [compare(m, variants, args.runs) for m in args.models.split(",")]
    if args.json:
        print(json.dumps(results, indent=1))
        return
    for r in results:
        base = variants[0]
        print(f"{r['model']} (median of {r['runs']} interleaved runs; first run incl. compile)")
        for v in variants:
            top = sorted(r["op_ms"][v].items(), key=lambda kv: -kv[1])[:4]
            ratio = r["ms"][v] / r["ms"][base]
            print(f"  {v:10s} {r['ms'][v]:9.1f} ms  x{ratio:.2f}  first {r['first_run_s'][v]:.1f} s"
                  f"  err {r['max_err_vs_' + base][v]:.1e}  " + ", ".join(f"{op} {ms:.1f}" for op, ms in top))


if __name__ == "__main__":
    main()
