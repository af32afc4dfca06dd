"""``gpubackend tune MODEL [--path vulkan]``: measure the kernel variants the model uses on a path
and store the fastest per layer shape class for this driver (``gpubackend.tuning``)."""

from __future__ import annotations

import argparse
import json

from .. import tuning
from . import add_shape_option, shapes_of


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tune", help="measure kernel variants on this device and cache the fastest",
                       description="For each tunable kernel (conv and gemm blocking and workgroup size) the model "
                                   "runs on the path, time every variant interleaved in one process and store the "
                                   "fastest per layer shape class under this driver's fingerprint in "
                                   "GPUBACKEND_CACHE_DIR/tuning.json; later sessions on this driver use it "
                                   "(explain() says 'tuned DATE').")
    p.add_argument("model", help="path to an .onnx file")
    p.add_argument("--path", default="vulkan", choices=tuning.TUNABLE_PATHS, help="code path (default: vulkan)")
    p.add_argument("--precision", default="fp32", choices=("fp32", "fp16"))
    p.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds per variant (default 5)")
    p.add_argument("--dry-run", action="store_true", help="measure and report, store nothing")
    add_shape_option(p)
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..bench.tune import tune_model

    rows = tune_model(args.model, args.path, args.precision, max(1, args.rounds), shapes_of(args),
                      write=not args.dry_run)
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    if not rows:
        print(f"{args.model}: no tunable kernel runs on {args.path}")
        return 0
    for r in rows:
        times = ", ".join(f"{v} {s * 1e3:.3f}" for v, s in sorted(r["seconds"].items(), key=lambda kv: kv[1]))
        print(f"{r['unit']:5s} {r['shape_class']:40s} {len(r['nodes']):3d} node(s)  best {r['best']} "
              f"({r['speedup']:.2f}x the default {r['default']})  ms: {times}")
    print("stored in the tuning cache" if rows[0]["stored"] else "not stored (--dry-run or no driver fingerprint)")
    return 0
