"""p50 latency of every zoo model on every path, interleaved with onnxruntime in the same process.

    python benchmarks/bench_zoo.py [--models a,b] [--paths cpu,gles3,...] [--small] [--blocks 5]
                                   [--runs 5] [--precision fp32] [--json out.json]

For each model, every runner (onnxruntime with 2 threads, then each gpubackend path) is timed in
rounds: a round gives each runner an untimed settle run and then ``--runs`` timed runs, in
turn, so that drift on a busy machine hits all runners alike (onnxruntime's idle workers spin
for ~40 ms after a run; sleeping instead would inflate everything). Prints per model and path:
p50 ms, p50 / onnxruntime p50, nodes on the path, segments, and the fp32 error against
onnxruntime. Run it on a quiet machine: nothing else running.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpubackend import Session, zoo  # noqa: E402
from gpubackend.zoo.check import coverage, max_rel_error  # noqa: E402
from gpubackend.zoo.inputs import make_input  # noqa: E402

PATHS = ("cpu", "gles2", "gles3", "gles31", "vulkan")


def bench_model(name: str, paths: list[str], small: bool, blocks: int, runs: int, precision: str) -> list[dict]:
    import onnxruntime as ort

    model = zoo.BY_NAME[name]
    path_file = str(zoo.fetch(name))
    feeds = make_input(model, small=small)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 2
    ref_sess = ort.InferenceSession(path_file, opts, providers=["CPUExecutionProvider"])
    ref = ref_sess.run(None, feeds)
    runners = {"onnxruntime": lambda: ref_sess.run(None, feeds)}
    rows: dict[str, dict] = {"onnxruntime": {"model": name, "path": "onnxruntime"}}
    covs = coverage(model, [p for p in paths if p != "cpu"], small=small) if set(paths) - {"cpu"} else {}
    for key in paths:
        row = {"model": name, "path": key, "precision": precision}
        try:
            sess = Session(path_file, path=key, precision=precision, fallback=True)
            got = sess.run(feeds)  # compile and warm up, outside the timing
            row["error"] = max_rel_error(got, ref)
            row["segments"] = len(sess._current.segments) if sess._current else None
            if key in covs:
                row["nodes_on_path"] = f"{covs[key].on_path}/{covs[key].nodes}"
            runners[key] = (lambda s: lambda: s.run(feeds))(sess)
        except Exception as exc:
            row["failed"] = f"{type(exc).__name__}: {exc}"
        rows[key] = row
    times: dict[str, list[float]] = {k: [] for k in runners}
    for _ in range(blocks):
        for key, fn in runners.items():
            fn()  # settle
            for _ in range(runs):
                t0 = time.perf_counter()
                fn()
                times[key].append(time.perf_counter() - t0)
    ort_p50 = statistics.median(times["onnxruntime"])
    for key, ts in times.items():
        p50 = statistics.median(ts)
        rows[key]["p50_ms"] = round(p50 * 1e3, 3)
        rows[key]["vs_onnxruntime"] = round(p50 / ort_p50, 2)
    return list(rows.values())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="", help="comma list of zoo models (default: all)")
    ap.add_argument("--paths", default=",".join(PATHS), help="comma list of paths")
    ap.add_argument("--small", action="store_true", help="reduced input sizes where the zoo has them")
    ap.add_argument("--blocks", type=int, default=5, help="interleaved rounds per model")
    ap.add_argument("--runs", type=int, default=5, help="timed runs per runner per round")
    ap.add_argument("--precision", default="fp32", choices=("fp32", "fp16"))
    ap.add_argument("--json", default="", help="also write the rows to this file")
    args = ap.parse_args()
    models = [m for m in args.models.split(",") if m] or [m.name for m in zoo.MODELS]
    paths = [p for p in args.paths.split(",") if p]
    all_rows = []
    print(f"{'model':24s} {'path':11s} {'p50 ms':>9s} {'x ort':>6s} {'error':>8s} {'on path':>9s} {'seg':>4s}")
    for name in models:
        for row in bench_model(name, paths, args.small, args.blocks, args.runs, args.precision):
            all_rows.append(row)
            err = row.get("error")
            print(f"{row['model']:24s} {row['path']:11s} {row.get('p50_ms', float('nan')):9.2f} "
                  f"{row.get('vs_onnxruntime', float('nan')):6.2f} {'' if err is None else f'{err:.1e}':>8s} "
                  f"{row.get('nodes_on_path', ''):>9s} {str(row.get('segments', '')):>4s} {row.get('failed', '')}",
                  flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(all_rows, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
