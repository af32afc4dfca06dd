"""``gpubackend run MODEL --input NAME=FILE.npy ...``: run a model once and report its outputs."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from ..errors import InputError
from ..paths import PATH_KEYS
from ..session import Session
from . import add_shape_option, shapes_of


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="run a model on inputs from .npy files",
                       description="Run an ONNX model once. Inputs not given are filled with seeded random values "
                                   "of the model's declared shape (or the --shape given).")
    p.add_argument("model", help="path to an .onnx file")
    p.add_argument("--input", "-i", action="append", default=[], metavar="NAME=FILE.npy",
                   help="an input array (repeat for several inputs)")
    add_shape_option(p)
    p.add_argument("--path", default="auto", choices=("auto",) + PATH_KEYS, help="code path (default: auto)")
    p.add_argument("--precision", default="fp32", choices=("fp32", "fp16", "fp16-compute"))
    p.add_argument("--no-fallback", action="store_true", help="fail instead of running unsupported nodes on cpu")
    p.add_argument("--output-dir", "-o", type=Path, help="write each output to DIR/<name>.npy")
    p.add_argument("--runs", type=int, default=1, help="run this many times and report the timing (default 1)")
    p.add_argument("--explain", action="store_true", help="print where each node ran and why")
    p.add_argument("--json", action="store_true", help="print a JSON report instead of text")
    p.set_defaults(func=run)


def _load_inputs(specs: list[str], sess: Session) -> dict[str, np.ndarray]:
    feeds: dict[str, np.ndarray] = {}
    for spec in specs:
        name, sep, file = spec.partition("=")
        if not sep:
            if len(sess.input_names) != 1:
                raise InputError(f"--input {spec!r}: write NAME=FILE.npy (inputs: {sess.input_names})")
            name, file = sess.input_names[0], spec
        try:
            feeds[name] = np.load(file, allow_pickle=False)
        except Exception as exc:
            raise InputError(f"--input {spec}: cannot read {file}: {exc}") from exc
    rng = np.random.default_rng(0)
    graph = sess._base_graph
    for name in sess.input_names:
        if name not in feeds:
            shape = graph.input_shapes.get(name)
            if shape is None or None in shape:
                shown = "unknown" if shape is None else "x".join("?" if d is None else str(d) for d in shape)
                raise InputError(f"input {name!r} has a dynamic shape ({shown}): give its shape with --shape "
                                 f"{name}={shown} (each ? a size), or an array with --input {name}=FILE.npy")
            dtype = graph.dtypes.get(name, np.dtype(np.float32))
            feeds[name] = rng.random(shape).astype(dtype)  # type: ignore[arg-type]
    return feeds


def run(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    sess = Session(args.model, path=args.path, precision=args.precision, fallback=not args.no_fallback,
                   input_shapes=shapes_of(args))
    created = time.perf_counter() - t0
    feeds = _load_inputs(args.input, sess)
    times = []
    outputs: list[np.ndarray] = []
    for _ in range(max(1, args.runs)):
        t = time.perf_counter()
        outputs = sess.run(feeds)
        times.append(time.perf_counter() - t)
    summary = []
    for name, out in zip(sess.output_names, outputs):
        finite = out[np.isfinite(out)] if out.dtype.kind == "f" else out
        summary.append({"name": name, "shape": list(out.shape), "dtype": str(out.dtype),
                        "min": float(finite.min()) if finite.size else None,
                        "max": float(finite.max()) if finite.size else None,
                        "mean": float(finite.mean()) if finite.size else None})
        if args.output_dir:
            args.output_dir.mkdir(parents=True, exist_ok=True)
            np.save(args.output_dir / f"{name.replace('/', '_')}.npy", out)
    counts: dict[str, int] = {}
    for key in sess.placement.values():
        counts[key] = counts.get(key, 0) + 1
    report = {"model": str(args.model), "path": sess.path, "precision": sess.precision,
              "session_creation_ms": created * 1e3, "run_ms": [t * 1e3 for t in times],
              "run_ms_median": float(np.median(times) * 1e3), "placement_counts": counts,
              "stats": sess.stats.as_dict(), "outputs": summary}
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"model {args.model}: path {sess.path} ({sess.precision}), nodes per path {counts}")
        print(f"session created in {created * 1e3:.1f} ms; run median {report['run_ms_median']:.2f} ms "
              f"over {len(times)} run(s)")
        for s in summary:
            print(f"  {s['name']}: {s['dtype']}{s['shape']} min {s['min']:.6g} max {s['max']:.6g} mean {s['mean']:.6g}"
                  if s["min"] is not None else f"  {s['name']}: {s['dtype']}{s['shape']}")
        if args.output_dir:
            print(f"outputs written to {args.output_dir}/")
    if args.explain:
        print(sess.explain())
    return 0
