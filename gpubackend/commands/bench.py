"""``gpubackend bench``: latency distributions per path against onnxruntime, per-op profiles,
microbenchmark peaks and the roofline, a figure, and the measured record behind ``auto``."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from . import add_shape_option, shapes_of

PATH_CHOICES = ("vulkan", "gles31", "gles3", "gles2", "cpu")


def _paths(value: str) -> list[str]:
    keys = [k.strip() for k in value.split(",") if k.strip()]
    bad = [k for k in keys if k not in PATH_CHOICES]
    if bad or not keys:
        raise argparse.ArgumentTypeError(f"unknown path(s) {bad}; choose from {', '.join(PATH_CHOICES)}")
    return keys


def register(subparsers: Any) -> None:
    """Add the ``bench`` subcommand to ``gpubackend``'s subparsers."""
    p = subparsers.add_parser(
        "bench",
        help="benchmark a model on each code path (distributions, profiles, roofline)",
        description="Time MODEL on each code path and, with --compare onnxruntime, on onnxruntime in the same "
                    "process, round-robin. Per path: cold start (probe, shader compilation and weight packing in "
                    "a child process with an empty GPUBACKEND_CACHE_DIR), warm start (a second child reusing the "
                    "caches), first-run latency, and the steady-state min/p50/p90/p99/max/mean/std with each "
                    "p50 over onnxruntime's. MODEL is an .onnx file or 'selfie' (the bundled selfie segmentation "
                    "model); several MODELs are benchmarked one after the other (the JSON is then a list and "
                    "the plot has a row per model). MODEL may be omitted with --roofline to run only the "
                    "microbenchmarks.",
    )
    p.add_argument("model", nargs="*", metavar="MODEL", help="one or more .onnx files, or 'selfie'")
    add_shape_option(p)
    p.add_argument("--paths", type=_paths, default=None,
                   help="comma list of paths (default: every path the probe verified, plus cpu)")
    p.add_argument("--precision", choices=("fp32", "fp16", "fp16-compute"), default="fp32")
    p.add_argument("--runs", type=int, default=50, help="timed runs per path (default 50)")
    p.add_argument("--warmup", type=int, default=5, help="untimed runs per path first (default 5)")
    p.add_argument("--compare", action="append", default=[], choices=("onnxruntime",),
                   help="also time this runtime, interleaved with the paths")
    p.add_argument("--profile", action="store_true",
                   help="per-node and per-op-type time, transfers and bytes, top-10 nodes per path")
    p.add_argument("--profile-runs", type=int, default=3, help="profiled runs per path (median; default 3)")
    p.add_argument("--roofline", action="store_true",
                   help="measure each path's FMA peak and copy bandwidth, place the model's Conv/Gemm/MatMul nodes "
                        "and a set of large kernels on the roofline (implies --profile)")
    p.add_argument("--no-cold", dest="cold", action="store_false",
                   help="skip the cold/warm start child processes")
    p.add_argument("--cold-timeout", type=float, default=300.0, metavar="S",
                   help="seconds a cold or warm start child may take; a path whose cold start times out is "
                        "not timed (default 300)")
    p.add_argument("--slow-run", type=float, default=10.0, metavar="S",
                   help="a path whose first run takes longer than S seconds gets only 3 warm-up and 3 timed "
                        "runs (default 10)")
    p.add_argument("--cold-full-probe", action="store_true",
                   help="cold start verifies every GPU path, as path='auto' does (default: only the path timed)")
    p.add_argument("--json", metavar="FILE", help="write the full result (with every sample) as JSON ('-': stdout)")
    p.add_argument("--plot", metavar="FILE.png", help="write a PNG: latency box plots and per-op-type breakdown")
    p.add_argument("--record", action="store_true",
                   help="store each path's p50 in the cache as the measured basis for path='auto'")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..bench import kernels, micro, report
    from ..bench.runner import BenchOptions, bench_model, default_paths, machine_info, resolve_model
    from ..errors import OptionError

    if args.runs < 1 or args.warmup < 0 or args.profile_runs < 1:
        raise OptionError("--runs and --profile-runs must be at least 1, --warmup at least 0")
    if not args.model and not args.roofline:
        raise OptionError("give a MODEL (an .onnx file or 'selfie'), or --roofline for the microbenchmarks alone")
    profile = args.profile or args.roofline or bool(args.plot)
    opts = BenchOptions(paths=args.paths, precision=args.precision, runs=args.runs, warmup=args.warmup,
                        compare=list(dict.fromkeys(args.compare)), profile=profile, profile_runs=args.profile_runs,
                        roofline=args.roofline, cold=args.cold, progress=not args.quiet,
                        cold_full_probe=args.cold_full_probe, cold_timeout=args.cold_timeout,
                        slow_run_s=args.slow_run, input_shapes=shapes_of(args))
    results = []
    for i, spec in enumerate(args.model):
        name, data = resolve_model(spec)
        result = bench_model(name, data, opts)
        result["model"]["spec"] = spec
        results.append((result, data))
        print(("\n" if i else "") + report.render(result, profile=args.profile or args.roofline), flush=True)
    if not results:
        import gpubackend

        paths = args.paths or default_paths(gpubackend.probe())
        results.append(({"model": None, "machine": machine_info(), "options": {"paths": paths}, "paths": {},
                         "micro": {k: micro.measure_peak(k).as_dict() for k in paths}}, b""))
    if args.roofline:  # the large kernels are the same for every model: once, with the first result
        # (on the paths the roofline targets are about: gles31/vulkan, gles3; cpu for scale)
        first = results[0][0]
        sweep = []
        for key in [k for k in first["options"]["paths"] if k in kernels.SWEEP_PATHS]:
            if not args.quiet:
                print(f"large kernels on {key} ...", file=sys.stderr)
            p = first.get("micro", {}).get(key) or {}
            peak = micro.Peak(key, p.get("gflops"), p.get("gbytes")) if not p.get("error") else None
            sweep += kernels.kernel_sweep(key, peak, args.precision)
        first["kernels"] = sweep
    if results[0][0]["model"] is None:
        print("\n".join(report.roofline_lines(results[0][0])).lstrip("\n"))
    elif results[0][0].get("kernels"):
        print("\nlarge kernels (per-node timing, median of 5 after a warm-up run):")
        print("\n".join(report.point_table(results[0][0]["kernels"], with_path=True)))
        print("\n".join(ln for ln in report.target_lines(results[0][0]) if "FMA peak" in ln or "targets" in ln))
    if args.record:
        import gpubackend

        from ..bench.choice import record_measurement

        for result, data in results:
            if result["model"] is None:
                continue
            p50 = {k: e["latency_ms"]["p50"] / 1e3 for k, e in result["paths"].items()
                   if e.get("kind") == "path" and "latency_ms" in e}
            file = record_measurement(data, gpubackend.probe(), p50, args.precision, args.runs,
                                      result["model"]["name"])
            print(f"recorded the measured p50s of {result['model']['name']} in {file}", file=sys.stderr)
    plain = [r for r, _ in results]
    if args.json:
        text = json.dumps(plain[0] if len(plain) == 1 else plain, indent=1, default=str)
        if args.json == "-":
            print(text)
        else:
            with open(args.json, "w") as fh:
                fh.write(text)
    if args.plot and args.model:
        from ..bench.plot import plot

        plot([r for r in plain if r["model"] is not None], args.plot)
    failed = [k for r in plain for k, e in r["paths"].items() if "latency_ms" not in e]
    timed = [k for r in plain for k in r["paths"]]
    return 1 if timed and len(failed) == len(timed) else 0
