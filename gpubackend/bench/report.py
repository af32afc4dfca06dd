"""Readable tables for ``gpubackend bench`` results (the dicts :mod:`.runner` returns)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tabulate import tabulate


def _table(rows: Sequence[Sequence[str]], right: Sequence[bool] | None = None) -> list[str]:
    """Header row first; ``right``: which columns align right (default: all but the first)."""
    right = right or [i > 0 for i in range(len(rows[0]))]
    text = tabulate(rows[1:], headers=rows[0], tablefmt="simple", disable_numparse=True,
                    colalign=["right" if r else "left" for r in right])
    return [line.rstrip() for line in text.splitlines()]


def _f(v: Any, fmt: str = "{:.2f}") -> str:
    return "-" if v is None else fmt.format(v)


def _ms(v: Any) -> str:
    if v is None:
        return "-"
    return f"{v:.3g}" if v < 10 else f"{v:.1f}"


def latency_table(result: dict[str, Any]) -> list[str]:
    rows = [["path", "cold s", "1st s", "warm s", "1st s", "warm/cold", "create s", "first ms", "min", "p50", "p90",
             "p99", "max", "mean", "std", "p50/ort", "max err"]]
    notes = []
    for key, e in result["paths"].items():
        if e.get("error") and "latency_ms" not in e:
            notes.append(f"{key}: {e['error']}")
            continue
        lat = e.get("latency_ms", {})
        cold, warm = e.get("cold", {}), e.get("warm", {})
        if e.get("note"):
            notes.append(f"{key}: {e['note']}")
        for which, d in (("cold", cold), ("warm", warm)):
            if d.get("error"):
                notes.append(f"{key} {which} start: {d['error']}")
        label = key if lat.get("n", 0) >= result["options"]["runs"] else f"{key} ({lat.get('n', 0)} runs)"
        rows.append([label, _f(cold.get("create_s")), _f(cold.get("first_run_s")), _f(warm.get("create_s")),
                     _f(warm.get("first_run_s")), _f(e.get("warm_over_cold")),
                     _f(e.get("creation_s")),
                     _ms(1e3 * e["first_run_s"] if "first_run_s" in e else None),
                     *[_ms(lat.get(k)) for k in ("min", "p50", "p90", "p99", "max", "mean", "std")],
                     _f(e.get("p50_over_onnxruntime"), "{:.2f}x"), _f(e.get("max_abs_err"), "{:.1e}")])
    return _table(rows) + [f"  note: {n}" for n in notes]


def header(result: dict[str, Any]) -> list[str]:
    m, mach, o = result["model"], result["machine"], result["options"]
    load = " ".join(f"{x:.1f}" for x in mach.get("loadavg", []))
    return [f"model {m['name']}: {m['gflop']:.3g} GFLOP in Conv/Gemm/MatMul, {m['onnx_nodes']} ONNX nodes "
            f"({m['nodes_after_fusion']} after fusion), sha256 {m['sha256'][:12]}",
            f"machine: {mach.get('cpus')} CPUs, load average {load or '?'}; {o['runs']} timed runs after "
            f"{o['warmup']} warm-up, round-robin in one process; precision {o['precision']}",
            "cold/warm = probe + session creation (s) in a child process with an empty/reused cache, then that "
            "child's first run (1st, s); create = in this process; latency in ms"]


def profile_lines(result: dict[str, Any], top: int = 10) -> list[str]:
    out = []
    for key, e in result["paths"].items():
        prof = e.get("profile")
        if not prof:
            continue
        if prof.get("error"):
            out += ["", f"profile {key}: {prof['error']}"]
            continue
        t = prof.get("transfers") or {}
        timing = prof.get("timing", "host")
        what = ("host clock, synchronising after every node" if timing == "host" else timing)
        out += ["", f"profile {key}: {prof.get('total_ms', 0):.3g} ms in nodes, timed by {what}"]
        if t:
            out.append(f"  transfers per run: {t.get('uploads', 0)} uploads ({t.get('upload_bytes', 0) / 1e6:.2f} MB), "
                       f"{t.get('downloads', 0)} downloads ({t.get('download_bytes', 0) / 1e6:.2f} MB), "
                       f"{t.get('dispatches', 0)} dispatches")
        if not prof.get("node_seconds"):
            out.append(f"  no per-node times: the {key} path does not record them (RunStats.node_seconds) yet")
            continue
        total = prof.get("total_ms") or 0.0
        rows = [["op type", "ms", "share"]]
        for op, ms in prof.get("by_op_ms", {}).items():
            rows.append([op, _ms(ms), f"{100 * ms / total:.0f}%" if total else "-"])
        out += ["  " + ln for ln in _table(rows, [False, True, True])]
        rows = [["top node", "op", "ms", "share", "ran on"]]
        for n in prof.get("top_nodes", [])[:top]:
            rows.append([n["node"][:40], n["op"], _ms(n["ms"]), f"{100 * n['share']:.0f}%", n.get("path") or key])
        out += ["  " + ln for ln in _table(rows, [False, False, True, True, False])]
    return out


def roofline_lines(result: dict[str, Any], limit: int = 12) -> list[str]:
    out = []
    micro = result.get("micro") or {}
    if micro:
        rows = [["path", "FMA GFLOP/s", "copy GB/s", "ridge FLOP/B", "how"]]
        for key, p in micro.items():
            if p.get("error"):
                rows.append([key, "-", "-", "-", p["error"][:70]])
            else:
                rows.append([key, _f(p["gflops"], "{:.1f}"), _f(p["gbytes"], "{:.1f}"),
                             _f(p.get("ridge_flop_per_byte"), "{:.1f}"), p.get("detail", "")])
        out += ["", "microbenchmarks (best of 5, host timing):"] + _table(rows, [False, True, True, True, False])
    for key, e in result["paths"].items():
        pts = (e.get("profile") or {}).get("roofline")
        if pts:
            out += ["", f"roofline {key} (Conv/Gemm/MatMul nodes, most FLOPs first):"]
            out += ["  " + ln for ln in point_table(pts[:limit])]
    sweep = result.get("kernels")
    if sweep and result.get("model") is None:
        out += ["", "large kernels (per-node timing, median of 5 after a warm-up run):"]
        out += point_table(sweep, with_path=True)
    return out


def point_table(pts: Sequence[dict[str, Any]], with_path: bool = False) -> list[str]:
    """Roofline points as a table (``with_path``: the large-kernel sweep, titled)."""
    head = (["kernel", "path"] if with_path else ["node", "kind"]) + [
        "shape", "GFLOP", "FLOP/B", "ms", "GFLOP/s", "of peak", "GB/s", "of bw", "bound"] + (
        ["timing"] if with_path else [])
    rows = [head]
    for p in pts:
        first = [p.get("kernel", ""), p.get("path", "")] if with_path else [p["name"][:32], p["kind"]]
        if p.get("error"):
            rows.append(first + [p["error"][:100]] + [""] * (len(head) - 3))
            continue
        rows.append(first + [p["shape"], f"{p['gflop']:.3f}", f"{p['intensity']:.1f}", _ms(1e3 * p["seconds"]),
                             f"{p['gflops']:.2f}", _f(p.get("frac_flops"), "{:.0%}"), f"{p['gbytes']:.2f}",
                             _f(p.get("frac_bytes"), "{:.0%}"), p.get("bound", "?")]
                    + ([p.get("timing", "")] if with_path else []))
    return _table(rows, [False, False, False] + [True] * 7 + [False] * (len(head) - 10))


# Issue 16: the share of the path's FMA peak the large kernels (bench/kernels.py) should reach.
ROOFLINE_GOALS = {"gles31": 0.3, "vulkan": 0.3, "gles3": 0.2}


def target_lines(result: dict[str, Any]) -> list[str]:
    """The issue's targets as far as this result measures them."""
    out = []
    cpu = result["paths"].get("cpu", {})
    r = cpu.get("p50_over_onnxruntime")
    if r is not None and r != 1.0:
        out.append(f"  cpu p50 within 1.5x of onnxruntime: {'met' if r <= 1.5 else 'NOT met'} ({r:.2f}x)")
    for key, e in result["paths"].items():
        w = e.get("warm_over_cold")
        if w is not None and key != "cpu":
            out.append(f"  {key} warm start <= 1/4 of cold: {'met' if w <= 0.25 else 'NOT met'} "
                       f"({e['warm']['create_s']:.2f} s / {e['cold']['create_s']:.2f} s = {w:.2f})")
    for p in result.get("kernels") or []:
        goal = ROOFLINE_GOALS.get(p.get("path", ""))
        if goal is not None and p.get("frac_flops") is not None:
            f = p["frac_flops"]
            out.append(f"  {p['path']} {p['kernel']} >= {goal:.0%} of FMA peak: {'met' if f >= goal else 'NOT met'} "
                       f"({f:.0%})")
    return ["", "targets (issue #10):"] + out if out else []


def render(result: dict[str, Any], profile: bool = True) -> str:
    lines = header(result) + [""] + latency_table(result) + target_lines(result)
    if profile:
        lines += profile_lines(result)
    lines += roofline_lines(result)
    return "\n".join(lines)
