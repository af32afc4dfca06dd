"""The MediaPipe .tflite table of docs/tflite.md: model x path -> imported?, error vs the TFLite interpreter,
nodes off the path, p50 latency.

    python tools/tflite_table.py                                  # every model, every path, print the table
    python tools/tflite_table.py --paths gles2 --models selfie_segmentation,face_detection_short_range
    python tools/tflite_table.py --runs 20 --json rows.json       # more timed runs; keep the raw rows
    python tools/tflite_table.py --merge rows.json --write        # put saved rows into docs/tflite.md

For every ``.tflite`` of the mediapipe 0.10.14 wheel (``gpubackend.importers.mediapipe_models``) and
every path: import it, run it with fallback on the interpreter's input (the astronaut photo,
``interpreter_reference``), error = max over outputs of max|got - ref| / max(1, max|ref|), nodes the
path declined (run on the CPU), and the p50 of ``--runs`` timed runs after one untimed run. A model
whose import fails shows the missing operators. Timings are only meaningful on a quiet machine.
``--write`` replaces the table between the markers in docs/tflite.md; ``--merge`` adds the rows of
earlier ``--json`` files (later rows win per model and path), so paths can be measured separately.
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

import numpy as np  # noqa: E402
from doc_markers import replace_between  # noqa: E402  (tools/ is on sys.path when run)

from gpubackend import Session  # noqa: E402
from gpubackend.errors import ModelError  # noqa: E402
from gpubackend.importers.mediapipe_models import interpreter_reference, mediapipe_models  # noqa: E402

PATHS = ("cpu", "gles2", "gles3", "gles31", "vulkan")
DOC = ROOT / "docs" / "tflite.md"
BEGIN, END = "<!-- tflite-table:begin -->", "<!-- tflite-table:end -->"


def measure(name: str, model: Path, path: str, runs: int) -> dict:
    row: dict = {"model": name, "path": path}
    try:
        feeds, refs = interpreter_reference(model)
    except Exception as exc:  # noqa: BLE001 - the interpreter cannot run MediaPipe-only custom ops
        row["reference_error"] = f"{type(exc).__name__}: {str(exc)[:120]}"
        feeds, refs = None, None
    try:
        sess = Session(model, path=path, fallback=True)
    except ModelError as exc:
        row["imported"] = False
        row["why"] = str(exc).split(": ", 1)[-1][:300]
        return row
    row["imported"] = True
    if feeds is None:
        return row
    with sess:
        outs = sess.run(feeds)
        row["error"] = max(float(np.max(np.abs(g - r)) / max(1.0, float(np.max(np.abs(r)))))
                           for g, r in zip(outs, refs))
        row["nodes"] = len(sess.placement)
        row["off_path"] = sum(1 for p in sess.placement.values() if p != path)
        times = []
        for _ in range(runs):
            t0 = time.perf_counter()
            sess.run(feeds)
            times.append((time.perf_counter() - t0) * 1e3)
        row["p50_ms"] = statistics.median(times) if times else None
    return row


def cell(row: dict | None) -> str:
    if row is None:
        return "not measured"
    if not row.get("imported", False):
        return "not imported"
    if "error" not in row:
        return "imported; no reference"
    off = f" ({row['off_path']} off)" if row["path"] != "cpu" else ""
    p50 = f", {row['p50_ms']:.1f} ms" if row.get("p50_ms") is not None else ""
    return f"{row['error']:.1e}{off}{p50}"


def table(rows: list[dict], paths: list[str]) -> str:
    by = {(r["model"], r["path"]): r for r in rows}
    models = sorted({r["model"] for r in rows})
    lines = ["| model | imported | " + " | ".join(paths) + " |", "|---" * (len(paths) + 2) + "|"]
    for m in models:
        first = next((by[m, p] for p in paths if (m, p) in by), None)
        imported = "yes" if first and first.get("imported") else f"**no**: {first.get('why', '?') if first else '?'}"
        cells = [cell(by.get((m, p))) if (first is None or first.get("imported")) else "-" for p in paths]
        lines.append(f"| {m} | {imported} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", help="comma list of model stems (default: every model in the wheel)")
    ap.add_argument("--paths", default=",".join(PATHS))
    ap.add_argument("--runs", type=int, default=10, help="timed runs per model and path (p50)")
    ap.add_argument("--json", type=Path, help="write the rows measured now (and merged) here")
    ap.add_argument("--merge", type=Path, action="append", default=[], help="rows of an earlier --json run")
    ap.add_argument("--write", action="store_true", help="replace the table in docs/tflite.md")
    args = ap.parse_args(argv)
    paths = [p for p in args.paths.split(",") if p]
    rows: list[dict] = []
    for saved in args.merge:
        rows += json.loads(saved.read_text())
    if not args.merge or args.models:
        models = mediapipe_models()
        names = args.models.split(",") if args.models else sorted(models)
        for name in names:
            for path in paths:
                row = measure(name, models[name], path, args.runs)
                print(json.dumps(row), file=sys.stderr, flush=True)
                rows.append(row)
    merged = {(r["model"], r["path"]): r for r in rows}  # later rows win
    rows = list(merged.values())
    shown = [p for p in PATHS if any(r["path"] == p for r in rows)]
    text = table(rows, shown)
    print(text)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    if args.write:
        replace_between(DOC, BEGIN, END, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
