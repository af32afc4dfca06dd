"""The suite's outputs: the summary table, JSON, JUnit XML, a self-contained HTML page, and a
blocklist entry generated from a failing report. All but the summary work from the JSON form
(``SuiteResult.to_dict()``), so a saved report can be turned into the others later."""

from __future__ import annotations

import html
import json
import math
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from tabulate import tabulate

from .runner import SuiteResult


def _num(v: Any) -> float:
    if isinstance(v, str):
        return float(v) if v not in ("inf", "-inf", "nan") else {"inf": math.inf, "-inf": -math.inf}.get(v, math.nan)
    return float(v or 0.0)


def _fmt(v: Any) -> str:
    x = _num(v)
    if math.isinf(x):
        return "inf"
    if x == 0:
        return "0"
    return f"{x:.2e}"


# ---- text ----------------------------------------------------------------------------------

def summary_table(result: SuiteResult, max_failures: int = 40) -> str:
    """Per path and precision: passed, failed, unsupported, worst error; then the failing cases."""
    head = ("path", "precision", "status", "cases", "passed", "failed", "unsupported", "worst tol-ratio",
            "worst rel err", "time s")
    rows = [head]
    for row in result.summary():
        rows.append((row["path"], row["precision"], row["status"], str(row["cases"]), str(row["passed"]),
                     str(row["failed"]), str(row["unsupported"]), _fmt(row["worst_ratio"]), _fmt(row["worst_rel"]),
                     f"{row['elapsed_s']:.1f}"))
    lines = tabulate(rows[1:], headers=head, tablefmt="simple", disable_numparse=True,
                     colalign=["left"] * 3 + ["right"] * (len(head) - 3)).splitlines()
    for row in result.summary():
        if row["status"] != "run" and row["reason"]:
            lines.append(f"  {row['path']}/{row['precision']}: {row['status']}: {row['reason'].splitlines()[0]}")
    fails = result.failures
    verdict = "PASSED" if not fails else f"FAILED ({len(fails)} failing case(s))"
    if result.interrupted:
        verdict = "INTERRUPTED (partial results)" + (f", {len(fails)} failing case(s)" if fails else "")
    lines.append("")
    lines.append(f"{result.mode} run: {len(result.results)} case runs in {result.elapsed_s:.1f} s: {verdict}")
    if fails:
        lines.append("failing cases (tolerance ratio = worst |got - want| / tolerance, 1 = at the limit):")
        for r in fails[:max_failures]:
            m = r.metrics
            detail = (f"{m.bad}/{m.total} out of tolerance, max abs {_fmt(m.max_abs)}, max rel {_fmt(m.max_rel)}, "
                      f"ratio {_fmt(m.ratio)}" if m is not None and r.status == "failed" else r.reason.splitlines()[0])
            lines.append(f"  {r.path}/{r.precision} {r.case} [{', '.join(r.kernels) or r.family}]: {detail}")
        if len(fails) > max_failures:
            lines.append(f"  ... and {len(fails) - max_failures} more (see --json / --html)")
        fk = {k: v for k, v in result.failed_kernels().items() if v}
        lines.append("failing kernels: " + "; ".join(f"{k}: {', '.join(v)}" for k, v in fk.items()))
    if result.verdicts:
        lines.append("verdicts written: " + "; ".join(f"{k}: {', '.join(v) or 'no failing kernel'}"
                                                       for k, v in result.verdicts.items()))
    return "\n".join(lines)


# ---- JSON / JUnit --------------------------------------------------------------------------

def write_json(data: dict[str, Any], file: str | Path) -> None:
    Path(file).write_text(json.dumps(data, indent=1, default=str), encoding="utf-8")


def junit_xml(data: dict[str, Any]) -> str:
    """JUnit XML: a testsuite per path and precision; unsupported cases are skipped."""
    root = ET.Element("testsuites", name="gpubackend conformance", time=f"{_num(data.get('elapsed_s')):.3f}")
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for t in data["targets"]:
        rs = [r for r in data["results"] if r["path"] == t["path"] and r["precision"] == t["precision"]]
        counts = {"tests": len(rs), "failures": sum(r["status"] == "failed" for r in rs),
                  "errors": sum(r["status"] == "error" for r in rs),
                  "skipped": sum(r["status"] == "unsupported" for r in rs)}
        suite = ET.SubElement(root, "testsuite", name=f"{t['path']}/{t['precision']}",
                              time=f"{_num(t.get('elapsed_s')):.3f}", **{k: str(v) for k, v in counts.items()})
        for k in totals:
            totals[k] += counts[k]
        for r in rs:
            tc = ET.SubElement(suite, "testcase", classname=f"conformance.{r['path']}.{r['precision']}",
                               name=r["case"], time=f"{(r['compile_ms'] + r['run_ms']) / 1e3:.4f}")
            m = r.get("metrics") or {}
            if r["status"] == "failed":
                msg = (f"{m.get('bad')}/{m.get('total')} elements out of tolerance; max abs {_fmt(m.get('max_abs'))}; "
                       f"max rel {_fmt(m.get('max_rel'))}; tolerance ratio {_fmt(m.get('ratio'))}")
                ET.SubElement(tc, "failure", message=msg, type="OutOfTolerance").text = r["reason"]
            elif r["status"] == "error":
                ET.SubElement(tc, "error", message=r["reason"].splitlines()[0] if r["reason"] else "error",
                              type="DriverError").text = r["reason"]
            elif r["status"] == "unsupported":
                ET.SubElement(tc, "skipped", message=r["reason"].splitlines()[0] if r["reason"] else "unsupported")
            if r.get("kernels"):
                props = ET.SubElement(tc, "properties")
                ET.SubElement(props, "property", name="kernels", value=",".join(r["kernels"]))
    for k, v in totals.items():
        root.set(k, str(v))
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


# ---- HTML ----------------------------------------------------------------------------------

_BINS = [(-math.inf, -6, "<1e-6"), (-6, -5, "1e-6"), (-5, -4, "1e-5"), (-4, -3, "1e-4"), (-3, -2, "1e-3"),
         (-2, -1, "0.01"), (-1, 0, "0.1"), (0, 1, ">1"), (1, 2, ">10"), (2, math.inf, ">100")]


def _histogram(ratios: list[float]) -> list[int]:
    counts = [0] * (len(_BINS) + 1)  # the last bin: non-finite (NaN/Inf disagreement, errors)
    for r in ratios:
        if not math.isfinite(r):
            counts[-1] += 1
            continue
        lg = math.log10(r) if r > 0 else -math.inf
        for i, (lo, hi, _) in enumerate(_BINS):
            if lo <= lg < hi or (hi == math.inf and lg >= lo):
                counts[i] += 1
                break
    return counts


def error_svg(ratios: list[float], title: str) -> str:
    """An inline SVG histogram of the cases' tolerance ratios (log scale; red at and past 1)."""
    counts = _histogram(ratios)
    labels = [b[2] for b in _BINS] + ["NaN/Inf"]
    w, h, left, bottom, top = 560, 190, 40, 40, 24
    bw = (w - left - 10) / len(counts)
    peak = max(counts) or 1
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="{w}" height="{h}" '
             f'viewBox="0 0 {w} {h}" role="img" aria-label="{html.escape(title)}">',
             f'<text x="{left}" y="15" font-size="12">{html.escape(title)}</text>',
             f'<line x1="{left}" y1="{h - bottom}" x2="{w - 10}" y2="{h - bottom}" stroke="#444"/>']
    for i, (n, lab) in enumerate(zip(counts, labels)):
        x = left + i * bw
        bh = (h - bottom - top) * n / peak
        fail = i >= 7
        parts.append(f'<rect x="{x + 2:.1f}" y="{h - bottom - bh:.1f}" width="{bw - 4:.1f}" height="{bh:.1f}" '
                     f'fill="{"#d33" if fail else "#3a7"}"><title>{lab}: {n}</title></rect>')
        if n:
            parts.append(f'<text x="{x + bw / 2:.1f}" y="{h - bottom - bh - 3:.1f}" font-size="10" '
                         f'text-anchor="middle">{n}</text>')
        parts.append(f'<text x="{x + bw / 2:.1f}" y="{h - bottom + 13}" font-size="9" text-anchor="middle">'
                     f'{html.escape(lab)}</text>')
    xline = left + 7 * bw
    parts.append(f'<line x1="{xline:.1f}" y1="{top - 4}" x2="{xline:.1f}" y2="{h - bottom}" stroke="#d33" '
                 f'stroke-dasharray="4 3"/><text x="{xline + 3:.1f}" y="{top + 6}" font-size="10" fill="#d33">'
                 f'tolerance</text>')
    parts.append(f'<text x="{left + (w - left) / 2:.0f}" y="{h - 8}" font-size="10" text-anchor="middle">'
                 f'worst |got - want| / tolerance, per case</text></svg>')
    return "".join(parts)


_CSS = """
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.2em}
th,td{border:1px solid #ccc;padding:2px 7px;font-size:13px;text-align:left;vertical-align:top}
th{background:#eee} td.n{text-align:right;font-variant-numeric:tabular-nums}
tr.fail td,tr.error td{background:#fdd} tr.passed td{background:#f3fbf5} tr.unsupported td{color:#888}
.badge{display:inline-block;padding:2px 10px;border-radius:4px;color:#fff;font-weight:bold}
.ok{background:#2a7} .bad{background:#c22} code{font-size:12px;overflow-wrap:anywhere}
td:has(code){min-width:16em}
pre{white-space:pre-wrap;margin:0;font-size:11px}
"""


def _row(cells: list[str], cls: str = "") -> str:
    return f'<tr class="{cls}">' + "".join(cells) + "</tr>"


def _td(v: Any, num: bool = False) -> str:
    return f'<td class="n">{html.escape(str(v))}</td>' if num else f"<td>{html.escape(str(v))}</td>"


def _detail(reason: str) -> str:
    """The reason's first line, the rest (a traceback, a driver log) folded away."""
    first, _, rest = (reason or "").partition("\n")
    more = f"<details><summary>more</summary><pre>{html.escape(rest)}</pre></details>" if rest.strip() else ""
    return f"<td><pre>{html.escape(first)}</pre>{more}</td>"


def _case_row(r: dict[str, Any], with_target: bool = False) -> str:
    m = r.get("metrics") or {}
    cls = {"failed": "fail", "error": "error"}.get(r["status"], r["status"])
    cells = [_td(f"{r['path']}/{r['precision']}")] if with_target else []
    cells += [f"<td><code>{html.escape(r['case'])}</code></td>", _td(", ".join(r.get("kernels") or []) or r["family"]),
              _td(r["status"]), _td(_fmt(m.get("max_abs")) if m else "", True),
              _td(_fmt(m.get("max_rel")) if m else "", True), _td(_fmt(m.get("ratio")) if m else "", True),
              _td(f"{m.get('bad')}/{m.get('total')}" if m else "", True),
              _td(f"{r['compile_ms'] + r['run_ms']:.1f}", True),
              _detail(r["reason"])]
    return _row(cells, cls)


_CASE_HEAD = ("<tr><th>case</th><th>kernel</th><th>status</th><th>max abs</th><th>max rel</th><th>tol ratio</th>"
              "<th>out of tol</th><th>ms</th><th>detail</th></tr>")


def html_report(data: dict[str, Any]) -> str:
    """A self-contained page: summary, failure table, per path a chart and a table of cases."""
    fails = [r for r in data["results"] if r["status"] in ("failed", "error")]
    ok = not fails
    fp = data.get("fingerprint") or {}
    out = ["<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
           "<title>gpubackend conformance report</title>", f"<style>{_CSS}</style></head><body>",
           "<h1>gpubackend driver conformance</h1>",
           f"<p><span id='verdict' class='badge {'ok' if ok else 'bad'}'>{'PASSED' if ok else 'FAILED'}</span> "
           f"{html.escape(data['mode'])} run started {html.escape(str(data.get('started', '')))}, "
           f"{_num(data.get('elapsed_s')):.1f} s, {len(data['results'])} case runs, {len(fails)} failing"
           + (" (<b>interrupted</b>: partial results)" if data.get("interrupted") else "")
           + (f", selection <code>-k {html.escape(str(data['pattern']))}</code>" if data.get("pattern") else "")
           + "</p>"]
    drivers = []
    for api in ("gl", "vulkan"):
        f = fp.get(api) or {}
        if f:
            drivers.append(f"<li><b>{api}</b>: {html.escape(str(f.get('renderer', '?')))} | "
                           f"{html.escape(str(f.get('version') or f.get('driver_info') or ''))} | driver "
                           f"{html.escape(str(f.get('driver_version', '?')))}</li>")
    if drivers:
        out.append("<ul>" + "".join(drivers) + "</ul>")
    tol = data.get("tolerances", {})
    out.append("<p>Tolerance per element: |got &minus; want| &le; atol&middot;scale + rtol&middot;|want|, "
               "scale = max(1, max|want|). " + "; ".join(f"{html.escape(k)}: rtol {v['rtol']:g}, atol {v['atol']:g}"
                                                          for k, v in tol.items()) + ".</p>")
    out.append("<h2>Summary</h2><table id='summary'><tr><th>path</th><th>precision</th><th>status</th><th>cases</th>"
               "<th>passed</th><th>failed</th><th>unsupported</th><th>worst tol ratio</th><th>worst rel err</th>"
               "<th>time s</th></tr>")
    for row in data["summary"]:
        cls = "fail" if row["failed"] else ("passed" if row["status"] == "run" else "unsupported")
        out.append(_row([_td(row["path"]), _td(row["precision"]),
                         _td(row["status"] + (f": {row['reason']}" if row["status"] != "run" else "")),
                         _td(row["cases"], True), _td(row["passed"], True), _td(row["failed"], True),
                         _td(row["unsupported"], True), _td(_fmt(row["worst_ratio"]), True),
                         _td(_fmt(row["worst_rel"]), True), _td(f"{_num(row['elapsed_s']):.1f}", True)], cls))
    out.append("</table>")
    out.append(f"<h2>Failures ({len(fails)})</h2>")
    if fails:
        out.append("<table id='failures'><tr><th>target</th>" + _CASE_HEAD[4:])
        out.extend(_case_row(r, with_target=True) for r in fails)
        out.append("</table>")
        fk = {k: v for k, v in (data.get("failed_kernels") or {}).items() if v}
        out.append("<p>Failing kernels: " + html.escape("; ".join(f"{k}: {', '.join(v)}" for k, v in fk.items()))
                   + "</p>")
    else:
        out.append("<p id='failures'>None.</p>")
    for t in data["targets"]:
        rs = [r for r in data["results"] if r["path"] == t["path"] and r["precision"] == t["precision"]]
        label = f"{t['path']}/{t['precision']}"
        anchor = re.sub(r"[^a-z0-9]+", "-", label)
        out.append(f"<h2 id='t-{anchor}'>{html.escape(label)}</h2>")
        if t["status"] != "run":
            out.append(f"<p>{html.escape(t['status'])}: {html.escape(t['reason'])}</p>")
            continue
        if t.get("reason"):
            out.append(f"<p>{html.escape(t['reason'])}</p>")
        ratios = [_num((r.get("metrics") or {}).get("ratio")) if r["status"] != "error" else math.inf
                  for r in rs if r["status"] != "unsupported"]
        if ratios:
            out.append(error_svg(ratios, f"error distribution on {label} ({len(ratios)} cases run)"))
        else:
            out.append("<p>No case ran on this target (every case was unsupported).</p>")
        ran = [r for r in rs if r["status"] != "unsupported"]
        ran.sort(key=lambda r: (r["status"] == "passed", r["case"]))
        out.append(f"<table class='cases' data-target='{html.escape(label)}'>{_CASE_HEAD}")
        out.extend(_case_row(r) for r in ran)
        out.append("</table>")
        uns = [r for r in rs if r["status"] == "unsupported"]
        if uns:
            out.append(f"<details><summary>{len(uns)} unsupported case(s)</summary><table>{_CASE_HEAD}")
            out.extend(_case_row(r) for r in uns)
            out.append("</table></details>")
    probe = data.get("probe")
    if probe:
        out.append("<h2>Probe report</h2><details><summary>JSON</summary><pre>"
                   + html.escape(json.dumps(probe, indent=1, default=str)) + "</pre></details>")
    out.append("</body></html>")
    return "\n".join(out)


# ---- blocklist -----------------------------------------------------------------------------

_API_PATHS = {"gl": ("gles31", "gles3", "gles2"), "vulkan": ("vulkan",)}


def blocklist_entries(data: dict[str, Any]) -> dict[str, Any]:
    """A blocklist file (``capability_probe/blocklist.json`` format) disabling, for this driver,
    the failing kernels (``PATH:KERNEL``), or a whole path when none of its cases passed."""
    fp = data.get("fingerprint") or {}
    failed = data.get("failed_kernels") or {}
    passed: dict[str, int] = {}
    for row in data.get("summary", []):
        passed[row["path"]] = passed.get(row["path"], 0) + int(row["passed"])
    entries = []
    for api, keys in _API_PATHS.items():
        f = fp.get(api) or {}
        disable: list[str] = []
        for key in keys:
            kernels = failed.get(key) or []
            if not kernels:
                continue
            disable += [key] if passed.get(key, 0) == 0 else [f"{key}:{k}" for k in kernels]
        if not disable or not f:
            continue
        n = sum(1 for r in data["results"] if r["status"] in ("failed", "error") and r["path"] in keys)
        slug = re.sub(r"[^a-z0-9]+", "-", str(f.get("renderer", "")).lower())[:40].strip("-")
        entry: dict[str, Any] = {"id": f"conformance-{api}-{slug}", "api": api}
        if f.get("vendor"):
            entry["vendor"] = "^" + re.escape(str(f["vendor"])) + "$"
        if f.get("renderer"):
            entry["renderer"] = "^" + re.escape(str(f["renderer"])) + "$"
        if f.get("driver_version"):
            entry["driver_version"] = f"=={f['driver_version']}"
        entry["disable"] = disable
        entry["reason"] = (f"gpubackend conformance ({data.get('mode')}, {data.get('started')}): {n} failing case(s); "
                           + "; ".join(f"{k}: {', '.join(failed[k])}" for k in keys if failed.get(k)))
        entries.append(entry)
    return {"version": 1, "comment": "generated by `gpubackend conformance --blocklist-entry`", "entries": entries}
