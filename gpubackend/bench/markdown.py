"""Markdown tables from ``gpubackend bench --json`` results, for ``docs/benchmarks.md``:
``python -m gpubackend.bench.markdown RESULT.json [...]``."""

from __future__ import annotations

import json
import sys
from typing import Any


def _n(v: Any, fmt: str) -> str:
    return "-" if v is None else fmt.format(v)


def _ms(v: float) -> str:
    return f"{v:.3g}" if v < 100 else f"{v:.0f}"


def latency_rows(result: dict[str, Any]) -> list[str]:
    m = result["model"]
    out = [f"**{m['name']}** ({m['gflop']:.3g} GFLOP in Conv/Gemm/MatMul, {m['onnx_nodes']} ONNX nodes, "
           f"input {', '.join('x'.join(map(str, s)) for s in m['inputs'].values())}; "
           f"load average at start {' '.join(f'{x:.1f}' for x in result['machine'].get('loadavg', []))})", "",
           "| path | cold start s | cold 1st run s | warm start s | warm 1st run s | warm/cold start | first run ms "
           "| min ms | p50 ms | p90 ms | p99 ms | max ms | mean ms | std ms | p50 / onnxruntime | max abs err |",
           "|---|" + "---:|" * 15]
    for key, e in result["paths"].items():
        lat = e.get("latency_ms")
        if not lat:
            out.append(f"| {key} | {e.get('error', 'not run')} |" + " |" * 15)
            continue
        cold, warm = e.get("cold", {}), e.get("warm", {})
        label = key if lat["n"] >= result["options"]["runs"] else f"{key} ({lat['n']} runs: slow)"
        out.append(
            f"| {label} | {_n(cold.get('create_s'), '{:.2f}')} | {_n(cold.get('first_run_s'), '{:.2f}')} | "
            f"{_n(warm.get('create_s'), '{:.2f}')} | {_n(warm.get('first_run_s'), '{:.2f}')} | "
            f"{_n(e.get('warm_over_cold'), '{:.2f}')} | {_ms(1e3 * e['first_run_s'])} | "
            + " | ".join(_ms(lat[k]) for k in ("min", "p50", "p90", "p99", "max", "mean", "std"))
            + f" | {_n(e.get('p50_over_onnxruntime'), '{:.2f}x')} | {_n(e.get('max_abs_err'), '{:.1e}')} |")
    return out


def micro_rows(result: dict[str, Any]) -> list[str]:
    micro = result.get("micro") or {}
    if not micro:
        return []
    out = ["| path | FMA peak GFLOP/s | copy GB/s | ridge FLOP/byte | shaders |", "|---|---:|---:|---:|---|"]
    for key, p in micro.items():
        if p.get("error"):
            out.append(f"| {key} | - | - | - | {p['error']} |")
        else:
            out.append(f"| {key} | {p['gflops']:.1f} | {p['gbytes']:.2f} | {p['ridge_flop_per_byte']:.1f} | "
                       f"{p['detail']} |")
    return out


def kernel_rows(result: dict[str, Any]) -> list[str]:
    sweep = result.get("kernels") or []
    if not sweep:
        return []
    out = ["| kernel | path | GFLOP | FLOP/byte | ms | GFLOP/s | of FMA peak | GB/s | of copy bw | bound | timing |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|"]
    for p in sweep:
        if p.get("error"):
            out.append(f"| {p['kernel']} | {p['path']} | {p['error']} |" + " |" * 8)
            continue
        out.append(f"| {p['kernel']} | {p['path']} | {p['gflop']:.3f} | {p['intensity']:.1f} | "
                   f"{1e3 * p['seconds']:.2f} | {p['gflops']:.2f} | {_n(p.get('frac_flops'), '{:.0%}')} | "
                   f"{p['gbytes']:.2f} | {_n(p.get('frac_bytes'), '{:.0%}')} | {p.get('bound', '?')} | "
                   f"{p.get('timing', '')} |")
    return out


def main(argv: list[str] | None = None) -> int:
    for file in argv if argv is not None else sys.argv[1:]:
        data = json.load(open(file))
        shown_micro = False
        for result in data if isinstance(data, list) else [data]:
            if result.get("model"):
                print("\n".join(latency_rows(result)) + "\n")
            for rows in (micro_rows(result) if not shown_micro else [], kernel_rows(result)):
                if rows:
                    print("\n".join(rows) + "\n")
            shown_micro = shown_micro or bool(result.get("micro"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
