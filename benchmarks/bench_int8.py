"""Float vs int8 vs fp16-compute per path, interleaved with onnxruntime's int8 and float runs in
the same process (issue 17's speed table).

    python benchmarks/bench_int8.py [--models mtcnn_onet,ppocr_cls,selfie_segmentation]
                                    [--paths gles3,gles31,vulkan] [--blocks 5] [--runs 5] [--json out.json]

Per model the runners are onnxruntime float and onnxruntime int8 (CPU, 2 threads), then per path
gpubackend on the float model (fp32), on the int8 QDQ model (``gpubackend.zoo.quantized``, fp32)
and on the float model with ``precision="fp16"`` (fp16 storage) and ``"fp16-compute"`` (fp16
storage and, on gles3/gles31, mediump arithmetic: ``gpubackend/paths/fp16_compute.py``). They
are timed in rounds: each runner gets an untimed settle run and then ``--runs`` timed runs, in
turn, so drift on a busy machine hits all alike. Prints p50 ms, p50 / onnxruntime float p50, the
error (int8 rows: max |diff| from onnxruntime int8 in output steps; float rows: max relative error
from onnxruntime float), the segments and the device weight bytes. Run it on a quiet machine: nothing else running.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpubackend import Session, zoo  # noqa: E402
from gpubackend.zoo.check import max_rel_error  # noqa: E402
from gpubackend.zoo.inputs import make_input  # noqa: E402
from gpubackend.zoo.quantized import quantized_path  # noqa: E402

MODELS = ("mtcnn_onet", "ppocr_cls", "selfie_segmentation")
PATHS = ("gles3", "gles31", "vulkan")


def _steps(got: list[np.ndarray], want: list[np.ndarray]) -> float:
    """Max |diff| in output steps (an output's range / 255: every quantized model here ends in a
    DequantizeLinear of uint8)."""
    worst = 0.0
    for g, w in zip(got, want):
        span = float(w.max() - w.min())
        worst = max(worst, float(np.max(np.abs(g - w))) / (span / 255 if span else 1.0))
    return worst


def _weight_bytes(sess: Session) -> int | None:
    line = next((x for x in sess.explain().splitlines() if x.startswith("device weight bytes")), None)
    return None if line is None else sum(int(p.split("=")[1]) for p in line.split(": ", 1)[1].split(", "))


def bench_model(name: str, paths: list[str], blocks: int, runs: int, quant_format: str = "QDQ") -> list[dict]:
    import onnxruntime as ort

    float_file, int8_file = str(zoo.fetch(name)), str(quantized_path(name, quant_format))
    feeds = make_input(zoo.BY_NAME[name])
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 2
    ort_float = ort.InferenceSession(float_file, opts, providers=["CPUExecutionProvider"])
    ort_int8 = ort.InferenceSession(int8_file, opts, providers=["CPUExecutionProvider"])
    ref_float, ref_int8 = ort_float.run(None, feeds), ort_int8.run(None, feeds)
    runners = {"onnxruntime/float": lambda: ort_float.run(None, feeds),
               "onnxruntime/int8": lambda: ort_int8.run(None, feeds)}
    rows = {k: {"model": name, "runner": k} for k in runners}
    sessions = []
    for key in paths:
        for kind, file, precision in (("float", float_file, "fp32"), ("int8", int8_file, "fp32"),
                                      ("fp16", float_file, "fp16"), ("fp16-compute", float_file, "fp16-compute")):
            label = f"{key}/{kind}"
            row = {"model": name, "runner": label}
            try:
                sess = Session(file, path=key, precision=precision, fallback=True)
                got = sess.run(feeds)  # compile and warm up, outside the timing
                sessions.append(sess)
                if kind == "int8":
                    row["steps_from_ort_int8"] = round(_steps(got, ref_int8), 2)
                    row["error_vs_float"] = max_rel_error(got, ref_float)
                else:
                    row["error_vs_float"] = max_rel_error(got, ref_float)
                row["segments"] = len(sess._current.segments) if sess._current else None  # noqa: SLF001
                row["weight_bytes"] = _weight_bytes(sess)
                runners[label] = (lambda s: lambda: s.run(feeds))(sess)
            except Exception as exc:  # noqa: BLE001 - a failing runner is a row, not the end
                row["failed"] = f"{type(exc).__name__}: {exc}"
            rows[label] = row
    times: dict[str, list[float]] = {k: [] for k in runners}
    for _ in range(blocks):
        for key, fn in runners.items():
            fn()  # settle
            for _ in range(runs):
                t0 = time.perf_counter()
                fn()
                times[key].append(time.perf_counter() - t0)
    base = statistics.median(times["onnxruntime/float"])
    for key, ts in times.items():
        p50 = statistics.median(ts)
        rows[key]["p50_ms"] = round(p50 * 1e3, 3)
        rows[key]["vs_ort_float"] = round(p50 / base, 2)
    for sess in sessions:
        sess.close()
    return list(rows.values())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(MODELS), help="comma list of zoo models")
    ap.add_argument("--paths", default=",".join(PATHS), help="comma list of GPU paths")
    ap.add_argument("--blocks", type=int, default=5, help="interleaved rounds per model")
    ap.add_argument("--runs", type=int, default=5, help="timed runs per runner per round")
    ap.add_argument("--format", default="QDQ", choices=("QDQ", "QOperator"), help="the int8 models' format")
    ap.add_argument("--json", default="", help="also write the rows to this file")
    args = ap.parse_args()
    all_rows = []
    print(f"{'model':22s} {'runner':22s} {'p50 ms':>9s} {'x ort fp':>8s} {'steps':>6s} {'err vs fp':>9s} "
          f"{'seg':>4s} {'weight B':>10s}")
    for name in [m for m in args.models.split(",") if m]:
        for row in bench_model(name, [p for p in args.paths.split(",") if p], args.blocks, args.runs, args.format):
            all_rows.append(row)
            err = row.get("error_vs_float")
            print(f"{row['model']:22s} {row['runner']:22s} {row.get('p50_ms', float('nan')):9.2f} "
                  f"{row.get('vs_ort_float', float('nan')):8.2f} {str(row.get('steps_from_ort_int8', '')):>6s} "
                  f"{'' if err is None else f'{err:.1e}':>9s} {str(row.get('segments', '')):>4s} "
                  f"{str(row.get('weight_bytes', '')):>10s} {row.get('failed', '')}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(all_rows, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
