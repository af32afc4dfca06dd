"""Calibrate the zoo's fp16 precision plans (gpubackend/zoo/fp16_plans, docs/zoo.md).

``python tools/zoo_fp16_plans.py [--models a,b] [--sizes small,full] [--verify gles31,vulkan]``:
for each zoo model at each input size, measure on onnxruntime what fp16 storage costs with the
static rule alone; where that is above the target (tolerance x margin), or a ``--verify`` path's
real fp16 error is above --verify-within, calibrate a plan (``gpubackend.fp16_calibration``,
margin halved until every verified path is within) and write it where the zoo's fp16 runs find
it. A model/size that needs no plan has its stale plan removed. Prints one row per model/size.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import onnx  # noqa: E402

from gpubackend import fp16_calibration, mixed_precision, zoo  # noqa: E402
from gpubackend.zoo.inputs import make_input  # noqa: E402
from gpubackend.zoo.plans import plan_path  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(m.name for m in zoo.MODELS), help="comma list (default: all)")
    ap.add_argument("--sizes", default="small,full", help="comma list of small and/or full (default both)")
    ap.add_argument("--verify", default="", help="GPU paths whose real fp16 error must be within the tolerance")
    ap.add_argument("--tolerance", type=float, default=2e-2)
    ap.add_argument("--margin", type=float, default=0.5)
    ap.add_argument("--verify-within", type=float, default=1.5e-2,
                    help="a verified path's real error must be at most this (default 1.5e-2: room for other images)")
    ap.add_argument("-v", "--verbose", action="store_true", help="print the calibration's progress")
    args = ap.parse_args(argv)
    verify = [p for p in args.verify.split(",") if p]
    for name in args.models.split(","):
        model = zoo.BY_NAME[name]
        proto = onnx.load(str(zoo.fetch(name)))
        sizes = {model.shape(small) for small in (True, False) if ("small" if small else "full") in args.sizes}
        for shape in sorted(sizes):
            small = shape != model.input_shape
            feeds = make_input(model, small=small)
            t0 = time.perf_counter()
            cal, verified = fp16_calibration.calibrate_verified(
                proto, feeds, args.tolerance, args.margin, verify, args.verify_within,
                progress=(lambda msg: print("  " + msg, flush=True)) if args.verbose else None)
            target = plan_path(name, shape)
            if cal.keep:
                mixed_precision.write_plan(target, cal.keep, model=name, input="zoo " + ("small" if small else "full"),
                                           shape=list(shape), **cal.about(),
                                           **({"verified_fp16_error": verified} if verified else {}))
            elif target.is_file():
                target.unlink()
            row = (f"{name} {'x'.join(map(str, shape))}: static rule {cal.error_static:.2e}; "
                   + (f"plan of {len(cal.keep)} ({cal.fp32_byte_share:.0%} of activation bytes) "
                      f"{cal.error_planned:.2e}" if cal.keep else "no plan needed")
                   + "".join(f"; {p} {e:.2e}" for p, e in verified.items())
                   + f" ({time.perf_counter() - t0:.0f} s)")
            print(row, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
