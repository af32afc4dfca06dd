"""The zoo's coverage ratchet and results table.

``python tools/zoo_table.py --record``: for every zoo model (full input size) and GPU path, how
many nodes leave the path with fallback=False, and why; writes tests/data/zoo_coverage.json
(the numbers tests/test_zoo.py holds the paths to).

``python tools/zoo_table.py --errors [--small] [--models a,b] [--paths p,q]``: also runs each
model on each path in fp32 and fp16 against onnxruntime and prints the error columns; with
``--markdown`` the whole table as docs/zoo.md writes it.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpubackend import zoo  # noqa: E402
from gpubackend.zoo.check import coverage, max_rel_error, run_on_path  # noqa: E402

GPU_PATHS = ("gles2", "gles3", "gles31", "vulkan")
COVERAGE_FILE = ROOT / "tests" / "data" / "zoo_coverage.json"


def record(models: list[str]) -> dict:
    data = json.loads(COVERAGE_FILE.read_text()) if COVERAGE_FILE.is_file() else {"models": {}}
    data["note"] = ("nodes leaving each GPU path with fallback=False at the full input size; "
                    "tests/test_zoo.py fails if a count grows. Regenerate: python tools/zoo_table.py --record")
    for name in models:
        try:
            covs = coverage(zoo.BY_NAME[name], GPU_PATHS)
        except Exception as exc:  # a model that cannot be specialised yet is listed with its error
            print(f"{name}: {type(exc).__name__}: {exc}", file=sys.stderr)
            data["models"][name] = {"error": f"{type(exc).__name__}: {exc}"}
            continue
        entry = {}
        for key, cov in covs.items():
            reasons = collections.Counter(f"{op}: {why}" for _, op, why in cov.declines)
            by_op = collections.Counter(op for _, op, _ in cov.declines)
            entry[key] = {"nodes": cov.nodes, "declines": len(cov.declines), "segments": cov.segments,
                          "by_op": dict(by_op.most_common()), "reasons": dict(reasons.most_common())}
        data["models"][name] = entry
        print(f"{name}: " + ", ".join(f"{k} {v['declines']}/{v['nodes']} off, {v['segments']} seg"
                                      for k, v in entry.items()), flush=True)
    COVERAGE_FILE.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    return data


def errors(models: list[str], paths: list[str], small: bool) -> dict:
    out: dict = {}
    for name in models:
        for key in paths:
            for precision in ("fp32", "fp16") if key != "cpu" else ("fp32",):
                try:
                    got, ref, sess = run_on_path(zoo.BY_NAME[name], key, precision, small=small)
                    sess.close()
                    err = f"{max_rel_error(got, ref):.1e}"
                except Exception as exc:
                    err = f"{type(exc).__name__}"
                    print(f"  {name} {key} {precision}: {exc}", file=sys.stderr)
                out[(name, key, precision)] = err
                print(f"{name} {key} {precision} {err}", flush=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--record", action="store_true", help="rewrite tests/data/zoo_coverage.json")
    ap.add_argument("--errors", action="store_true", help="run against onnxruntime and print the errors")
    ap.add_argument("--small", action="store_true", help="reduced input sizes for --errors")
    ap.add_argument("--models", default="", help="comma list (default: all)")
    ap.add_argument("--paths", default="cpu,gles2,gles3,gles31,vulkan", help="comma list for --errors")
    args = ap.parse_args()
    models = [m for m in args.models.split(",") if m] or [m.name for m in zoo.MODELS]
    zoo.fetch_all(models)
    if args.record:
        record(models)
    if args.errors:
        errors(models, [p for p in args.paths.split(",") if p], args.small)
    return 0


if __name__ == "__main__":
    sys.exit(main())
