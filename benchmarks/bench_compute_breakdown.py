"""Where the time goes on the compute paths (gles31, vulkan): per op type, the share of a run,
the node count times the cheapest node's time (an upper bound of what dispatch and
synchronisation cost alone), and the achieved GFLOP/s of the heavy kinds (conv, pointwise,
depthwise, gemm) from ``gpubackend.bench.roofline``; each node timed alone to completion
(``Session.run(profile=True)``), medians over the runs, plus the unprofiled run time.

Usage: ``python benchmarks/bench_compute_breakdown.py [--runs N] [--paths vulkan,gles31]
[--models selfie,unet_like,yolov8n] [--json]``. Paths are timed interleaved, run by run.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import gpubackend  # noqa: E402
from gpubackend.bench import roofline  # noqa: E402
from gpubackend.bench.runner import make_inputs  # noqa: E402
from gpubackend.model import load_model, to_graph  # noqa: E402

ZOO = Path.home() / ".cache" / "gpubackend" / "zoo" / "models"


def model_bytes(name: str) -> tuple[bytes, dict[str, tuple[int, ...]] | None]:
    if name == "selfie":
        return (ROOT / "gpubackend" / "models" / "selfie_segmentation.onnx").read_bytes(), None
    if name == "unet_like":
        import models

        return models.unet_like(256).SerializeToString(), None
    if name == "yolov8n":
        import onnx

        proto = onnx.load(str(ZOO / "yolov8n_nudenet.onnx"))
        inp = proto.graph.input[0].name
        return proto.SerializeToString(), {inp: (1, 3, 320, 320)}
    raise SystemExit(f"unknown model {name}")


def breakdown(name: str, paths: list[str], runs: int) -> list[dict[str, Any]]:
    data, shapes = model_bytes(name)
    feeds = make_inputs(data, input_shapes=shapes)
    sessions = {p: gpubackend.Session(data, path=p, input_shapes=shapes) for p in paths}
    samples: dict[str, dict[str, list[float]]] = {p: {} for p in paths}
    wall: dict[str, list[float]] = {p: [] for p in paths}
    try:
        for s in sessions.values():
            s.run(feeds)
        for _ in range(runs):
            for p, s in sessions.items():
                t0 = time.perf_counter()
                s.run(feeds)
                wall[p].append(time.perf_counter() - t0)
                s.run(feeds, profile=True)
                for n, sec in s.stats.node_seconds.items():
                    samples[p].setdefault(n, []).append(sec)
        out = []
        for p, s in sessions.items():
            graph = s._current.graph if s._current is not None else to_graph(load_model(data))
            ops = {n.name: n.op_type for n in graph.nodes}
            costs = roofline.graph_costs(graph)
            med = {n: float(np.median(v)) for n, v in samples[p].items()}
            floor = min(med.values()) if med else 0.0
            by_op: dict[str, dict[str, float]] = {}
            for n, sec in med.items():
                key = costs[n].kind if n in costs else ops.get(n, "?")
                row = by_op.setdefault(key, {"nodes": 0, "ms": 0.0, "gflop": 0.0})
                row["nodes"] += 1
                row["ms"] += sec * 1e3
                row["gflop"] += costs[n].flops / 1e9 if n in costs else 0.0
            total = sum(med.values())
            out.append({"model": name, "path": p, "placement": sorted(set(s.placement.values())),
                        "run_ms": float(np.median(wall[p])) * 1e3, "profiled_sum_ms": total * 1e3,
                        "nodes": len(med), "floor_ms": floor * 1e3,
                        "floor_share": floor * len(med) / total if total else 0.0,
                        "by_op": {k: dict(v, share=v["ms"] / (total * 1e3) if total else 0.0,
                                          gflops=v["gflop"] / (v["ms"] / 1e3) if v["gflop"] else None)
                                  for k, v in sorted(by_op.items(), key=lambda kv: -kv[1]["ms"])}})
        return out
    finally:
        for s in sessions.values():
            s.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--paths", default="vulkan,gles31")
    ap.add_argument("--models", default="selfie,unet_like,yolov8n")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    rows = []
    for m in args.models.split(","):
        rows += breakdown(m, args.paths.split(","), args.runs)
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    for r in rows:
        print(f"\n{r['model']} on {r['path']} (nodes on {', '.join(r['placement'])}): run {r['run_ms']:.1f} ms, "
              f"profiled sum {r['profiled_sum_ms']:.1f} ms over {r['nodes']} nodes; cheapest node "
              f"{r['floor_ms']:.3f} ms, x nodes = {100 * r['floor_share']:.0f}% of the sum")
        for k, v in r["by_op"].items():
            rate = f"{v['gflops']:.2f} GFLOP/s" if v["gflops"] else ""
            print(f"  {k:18s} {v['nodes']:4d} nodes {v['ms']:9.2f} ms {100 * v['share']:5.1f}%  {rate}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
