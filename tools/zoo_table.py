"""The zoo's coverage ratchet and its per model x path x precision table (docs/zoo.md).

``python tools/zoo_table.py --record``: for every zoo model (full input size) and GPU path, how
many nodes leave the path with fallback=False, and why; writes tests/data/zoo_coverage.json
(the numbers tests/test_zoo.py holds the paths to).

``python tools/zoo_table.py --table [--small] [--models a,b] [--paths p,q] [--precisions fp32,fp16]
[--json rows.json] [--merge old.json ...] [--write] [--time N]``: runs each model on each path
(``fallback=True``) on the zoo's realistic input against onnxruntime and reports per row: nodes
on the path, segments, error = max|got - ref| / max(1, max|ref|) and the output where it is worst,
and a verdict against the issue's bars (fp32 <= 1e-4, fp16 <= 2e-2, one segment on gles3, gles31
and vulkan, >= 90% of the nodes on gles2). ``--small`` uses each model's reduced input size where
the zoo defines one (the table names the size of every row). ``--json`` keeps the rows (written
after every row, so a long run can be stopped and merged later); ``--merge`` adds rows of earlier
runs (later rows win per model, size, path and precision); ``--merge-doc`` starts from the rows
already in docs/zoo.md (``--drop MODEL:SIZE`` leaves some out); ``--write`` replaces the table between
the markers in docs/zoo.md. ``--time N`` adds the p50 of N runs after the first, and onnxruntime's
p50 timed interleaved in the same process: only meaningful on a quiet machine.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
from doc_markers import replace_between  # noqa: E402  (tools/ is on sys.path when run)

from gpubackend import zoo  # noqa: E402
from gpubackend.zoo.check import coverage, flat_outputs, ort_session, rel_error, session_options  # noqa: E402
from gpubackend.zoo.inputs import make_input  # noqa: E402

PATHS = ("cpu", "gles2", "gles3", "gles31", "vulkan")
GPU_PATHS = PATHS[1:]
ONE_SEGMENT_PATHS = ("gles3", "gles31", "vulkan")
TOL = {"fp32": 1e-4, "fp16": 2e-2}
GLES2_SHARE = 0.9
COVERAGE_FILE = ROOT / "tests" / "data" / "zoo_coverage.json"
DOC = ROOT / "docs" / "zoo.md"
BEGIN, END = "<!-- zoo-table:begin -->", "<!-- zoo-table:end -->"


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


def verdict(row: dict) -> str:
    """'ok', or what misses the issue's bars."""
    if "failed" in row:
        return "FAILED"
    misses = []
    if row.get("flat_outputs"):
        misses.append("reference output flat (input not realistic)")
    if not row["error"] <= TOL[row["precision"]]:  # NaN included
        misses.append(f"error > {TOL[row['precision']]:g}")
    if row["path"] in ONE_SEGMENT_PATHS and row["segments"] > 1:
        misses.append("> 1 segment")
    if row["path"] == "gles2" and row["on_path"] < GLES2_SHARE * row["nodes"]:
        misses.append(f"< {GLES2_SHARE:.0%} on gles2")
    return "; ".join(misses) or "ok"


def _p50(fn, runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def measure(name: str, path: str, precision: str, small: bool, runs: int = 0) -> dict:
    """One row: the model on ``path`` with fallback, against onnxruntime on the same input."""
    from gpubackend import Session, mixed_precision

    model = zoo.BY_NAME[name]
    feeds = make_input(model, small=small)
    (x,) = feeds.values()
    row: dict = {"model": name, "size": "x".join(map(str, x.shape)), "path": path, "precision": precision}
    ref_sess = ort_session(model)
    ref = ref_sess.run(None, feeds)
    if flat_outputs(ref):
        row["flat_outputs"] = [ref_sess.get_outputs()[i].name for i, _ in flat_outputs(ref)]
    t0 = time.perf_counter()
    try:
        opts = session_options(model, precision, small)
        if opts.precision_plan:
            row["plan"] = len(mixed_precision.read_plan(opts.precision_plan)[0])
        with Session(str(zoo.fetch(name)), path=path, precision=precision, fallback=True, options=opts) as sess:
            got = sess.run(feeds)
            row["first_run_s"] = round(time.perf_counter() - t0, 1)  # compile included; machine load unknown
            placement = sess.placement
            row["nodes"] = len(placement)
            row["on_path"] = sum(1 for key in placement.values() if key == path)
            row["segments"] = len(sess._current.segments) if sess._current else 0
            errs = [rel_error(g, r) for g, r in zip(got, ref)]
            worst = int(np.nanargmax(errs)) if not all(np.isnan(errs)) else 0
            if any(np.isnan(errs)):
                worst = int(np.argmax(np.isnan(errs)))
            row["error"] = float("nan") if any(np.isnan(errs)) else max(errs)
            row["worst_output"] = ref_sess.get_outputs()[worst].name
            if runs:
                row["p50_ms"] = _p50(lambda: sess.run(feeds), runs)
                row["ort_p50_ms"] = _p50(lambda: ref_sess.run(None, feeds), runs)
    except Exception as exc:  # a crash is a row of the table, not the end of the run
        row["failed"] = f"{type(exc).__name__}: {str(exc)[:300]}"
    row["verdict"] = verdict(row)
    return row


def _key(row: dict) -> tuple:
    return row["model"], row["size"], row["path"], row["precision"]


def cell(row: dict | None) -> str:
    if row is None:
        return "-"
    if "failed" in row:
        return f"**failed**: {row['failed'][:80]}"
    err = "NaN" if np.isnan(row["error"]) else f"{row['error']:.1e}"
    text = f"{err} ({row['worst_output']})" if row["error"] > 0 else err
    if row.get("plan"):
        text += f" [plan {row['plan']}]"
    if row["verdict"] != "ok":
        text = f"**{text}: {row['verdict']}**"
    return text


def _parse_cell(cell_text: str) -> dict | None:
    """The measured fields of one error cell of the docs table (``cell``'s inverse)."""
    text = cell_text.strip().strip("*")
    if text in ("-", "(fp32 only)"):
        return None
    if text.startswith("failed"):
        return {"failed": text.split(": ", 1)[-1]}
    text = text.split(": ", 1)[0]
    plan = re.search(r" \[plan (\d+)\]$", text)
    text = text[:plan.start()] if plan else text
    err, _, worst = text.partition(" (")
    return {"error": float(err), "worst_output": worst.rstrip(")") or "", **({"plan": int(plan[1])} if plan else {})}


def rows_from_doc(doc: Path = DOC) -> list[dict]:
    """The rows of the table in docs/zoo.md, so that a run of a few models or paths can be
    merged into it (``--merge-doc``) instead of replacing the whole table."""
    content = doc.read_text()
    body = content.split(BEGIN, 1)[1].split(END, 1)[0]
    rows = []
    for line in body.strip().splitlines()[2:]:
        cols = [c.strip() for c in line.strip().strip("|").split("|")]
        model, size, path, nodes, segments = cols[:5]
        for precision, text in (("fp32", cols[5]), ("fp16", cols[6])):
            measured = _parse_cell(text)
            if measured is None:
                continue
            row = {"model": model, "size": size, "path": path, "precision": precision, **measured}
            if nodes != "-":
                on_path, total = nodes.split("/")
                row.update(on_path=int(on_path), nodes=int(total), segments=int(segments))
            row["verdict"] = verdict(row)
            rows.append(row)
    return rows


def table(rows: list[dict]) -> str:
    """Markdown: one line per model, size and path; fp32 and fp16 side by side."""
    by = {_key(r): r for r in rows}
    lines = ["| model | input | path | nodes on path | segments | fp32 error (worst output) | fp16 error |"
             + (" p50 ms fp32 (onnxruntime) |" if any("p50_ms" in r for r in rows) else ""),
             "|---|---|---|---|---|---|---|" + ("---|" if any("p50_ms" in r for r in rows) else "")]
    timed = any("p50_ms" in r for r in rows)
    seen = sorted({(r["model"], r["size"], r["path"]) for r in rows},
                  key=lambda k: (k[0], k[1], PATHS.index(k[2]) if k[2] in PATHS else 9))
    for model, size, path in seen:
        r32, r16 = by.get((model, size, path, "fp32")), by.get((model, size, path, "fp16"))
        first = r32 or r16
        assert first is not None
        nodes = f"{first['on_path']}/{first['nodes']}" if "nodes" in first else "-"
        segs = str(first.get("segments", "-"))
        fp16 = cell(r16) if path != "cpu" else "(fp32 only)"
        line = f"| {model} | {size} | {path} | {nodes} | {segs} | {cell(r32)} | {fp16} |"
        if timed:
            p50 = f"{r32['p50_ms']:.1f} ({r32['ort_p50_ms']:.1f})" if r32 and "p50_ms" in r32 else "-"
            line += f" {p50} |"
        lines.append(line)
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--record", action="store_true", help="rewrite tests/data/zoo_coverage.json")
    ap.add_argument("--table", action="store_true", help="run against onnxruntime, one row per model/path/precision")
    ap.add_argument("--small", action="store_true", help="reduced input sizes where the zoo defines them")
    ap.add_argument("--models", default="", help="comma list (default: all)")
    ap.add_argument("--paths", default=",".join(PATHS), help="comma list for --table")
    ap.add_argument("--precisions", default="fp32,fp16", help="comma list for --table (cpu: fp32 only)")
    ap.add_argument("--time", type=int, default=0, metavar="N", help="p50 of N timed runs (quiet machine only)")
    ap.add_argument("--json", type=Path, help="write the rows (measured and merged) here, after every row")
    ap.add_argument("--merge", type=Path, action="append", default=[], help="rows of an earlier --json run")
    ap.add_argument("--merge-doc", action="store_true", help="start from the rows of the table in docs/zoo.md")
    ap.add_argument("--drop", action="append", default=[], metavar="MODEL:SIZE",
                    help="with --merge-doc: leave out the doc's rows of this model and input size (its input changed)")
    ap.add_argument("--write", action="store_true", help="replace the table in docs/zoo.md")
    args = ap.parse_args()
    models = [m for m in args.models.split(",") if m] or [m.name for m in zoo.MODELS]
    if args.record:
        zoo.fetch_all(models)
        record(models)
    if not (args.table or args.merge or args.merge_doc):
        return 0
    dropped = {tuple(d.split(":", 1)) for d in args.drop}
    rows = {_key(r): r for r in (rows_from_doc() if args.merge_doc else []) if (r["model"], r["size"]) not in dropped}
    for saved in args.merge:
        rows.update({_key(r): r for r in json.loads(saved.read_text())})
    if args.table:
        zoo.fetch_all(models)
        for name in models:
            for path in [p for p in args.paths.split(",") if p]:
                for precision in [p for p in args.precisions.split(",") if p]:
                    if path == "cpu" and precision != "fp32":
                        continue
                    row = measure(name, path, precision, args.small, args.time)
                    rows[_key(row)] = row
                    print(json.dumps(row), flush=True)
                    if args.json:
                        args.json.write_text(json.dumps(list(rows.values()), indent=1) + "\n")
    text = table(list(rows.values()))
    print(text)
    if args.write:
        replace_between(DOC, BEGIN, END, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
