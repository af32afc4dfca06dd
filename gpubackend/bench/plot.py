"""The benchmark figure: the latency distribution of each path (box plot over the samples,
log scale) and, when profiled, each path's time per op type (stacked bars)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def plot(results: list[dict[str, Any]] | dict[str, Any], file: str | Path, top_ops: int = 8) -> Path:
    """Write a PNG for one result or several (one row per model); returns the file."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = [results] if isinstance(results, dict) else list(results)
    fig, axes = plt.subplots(len(results), 2, figsize=(13, 4.2 * len(results)), squeeze=False,
                             gridspec_kw={"width_ratios": [1.1, 1]})
    for row, result in zip(axes, results):
        _latency(row[0], result)
        _breakdown(row[1], result, top_ops)
    fig.tight_layout()
    out = Path(file)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def _latency(ax: Any, result: dict[str, Any]) -> None:
    keys = [k for k, e in result["paths"].items() if e.get("samples_ms")]
    data = [result["paths"][k]["samples_ms"] for k in keys]
    name = result["model"]["name"]
    if not data:
        ax.text(0.5, 0.5, "no timed runs", ha="center", va="center")
        ax.set_title(f"{name}: latency")
        return
    ax.boxplot(data, whis=(1, 99), showfliers=True, flierprops={"markersize": 3})
    ax.set_xticks(range(1, len(keys) + 1))
    labels = []
    for k in keys:
        r = result["paths"][k].get("p50_over_onnxruntime")
        shown = "" if r is None or k == "onnxruntime" else f"\n{r:.2g}x ort" if r < 10 else f"\n{r:.0f}x ort"
        labels.append(k + shown)
    ax.set_xticklabels(labels)
    ax.set_yscale("log")
    ax.set_ylabel("latency per run (ms, log)")
    n = result["options"]["runs"]
    ax.set_title(f"{name}: steady-state latency, {n} runs each (whiskers p1-p99)")
    ax.grid(axis="y", which="both", alpha=0.3)


def _breakdown(ax: Any, result: dict[str, Any], top_ops: int) -> None:
    profs = {k: e["profile"]["by_op_ms"] for k, e in result["paths"].items()
             if (e.get("profile") or {}).get("by_op_ms")}
    name = result["model"]["name"]
    if not profs:
        ax.text(0.5, 0.5, "not profiled (run with --profile)", ha="center", va="center")
        ax.set_axis_off()
        return
    totals: dict[str, float] = {}
    for by_op in profs.values():
        for op, ms in by_op.items():
            totals[op] = totals.get(op, 0.0) + ms
    ops = sorted(totals, key=lambda o: -totals[o])[:top_ops]
    keys = list(profs)
    sums = {k: sum(profs[k].values()) or 1.0 for k in keys}
    left = [0.0] * len(keys)
    cmap = __import__("matplotlib").colormaps["tab10"]
    for i, op in enumerate(ops + ["other"]):
        ms = [(profs[k].get(op, 0.0) if op != "other" else sum(v for o, v in profs[k].items() if o not in ops))
              for k in keys]
        share = [100.0 * v / sums[k] for v, k in zip(ms, keys)]
        ax.barh(keys, share, left=left, label=op, color=cmap(i % 10))
        left = [a + b for a, b in zip(left, share)]
    for y, k in enumerate(keys):
        ax.text(101, y, f"{sums[k]:.3g} ms", va="center", fontsize=8)
    ax.set_xlim(0, 118)
    ax.set_xlabel("share of time in nodes (%), per-node timing")
    ax.set_title(f"{name}: time per op type")
    ax.invert_yaxis()
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=5, frameon=False)


def main(argv: list[str] | None = None) -> int:
    """``python -m gpubackend.bench.plot OUT.png RESULT.json [...]``: one figure from the JSON of
    several ``gpubackend bench --json`` runs (a row per model)."""
    import json
    import sys

    args = sys.argv[1:] if argv is None else argv
    if len(args) < 2:
        print("usage: python -m gpubackend.bench.plot OUT.png RESULT.json [RESULT.json ...]", file=sys.stderr)
        return 2
    results: list[dict[str, Any]] = []
    for file in args[1:]:
        data = json.loads(Path(file).read_text())
        results += [r for r in (data if isinstance(data, list) else [data]) if r.get("model")]
    plot(results, args[0])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
