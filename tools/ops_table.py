"""The table of supported operators per path, generated from the kernel registries.

``python tools/ops_table.py --write`` rewrites ``docs/ops.md``; ``--check`` exits 1 (saying so)
when the file is not what the registries give today (``tests/test_ops_table.py`` runs the check).

What is read, per path:
- ``cpu``: ``fallback.supported_ops()`` (the NumPy kernels; the onnxruntime engine runs more).
- ``gles2``: ``paths/gles2/kernels.REGISTRY``.
- ``gles3``: ``paths/gles3/kernels.REGISTRY``.
- ``gles31`` and ``vulkan``: ``paths/compute_kernels.REGISTRY`` (one set of generators for both).

"Declines" are the reasons a generator gives for a node of an op it otherwise runs, read from the
generator's source (a ``Decline(...)`` it raises, or, in gles3, a string it returns), with
``{...}`` standing for values filled in at run time. They are the words ``Session.explain()``
prints; the conditions themselves are in the generators.
"""

from __future__ import annotations

import argparse
import ast
import inspect
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

OUTPUT = ROOT / "docs" / "ops.md"
COLUMNS = ("cpu", "gles2", "gles3", "gles31", "vulkan")
REGENERATE = "python tools/ops_table.py --write"


# ---- what each path registers ------------------------------------------------------------------
def _candidates(registry: dict) -> tuple[dict[str, list[tuple[str, Callable]]], list[Callable]]:
    """A path's registry (``paths/kernel_contract.KernelRegistry``) and the functions whose
    declines apply to every op: the shared contract loop and the path's own check."""
    from gpubackend.paths import kernel_contract

    gates = [kernel_contract.generate] + ([registry.check] if registry.check is not None else [])
    return {op: list(c) for op, c in registry.items()}, gates


# ---- decline reasons from the generators' source ----------------------------------------------
def _render(node: ast.expr) -> str | None:
    """The text of a string literal or f-string, ``{...}`` for run-time values; None otherwise."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        parts = []
        for v in node.values:
            if isinstance(v, ast.Constant):
                parts.append(str(v.value))
            else:
                expr = v.value  # type: ignore[attr-defined]
                simple = isinstance(expr, (ast.Name, ast.Attribute))
                parts.append("{" + (ast.unparse(expr) if simple else "...") + "}")
        return "".join(parts)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _render(node.left), _render(node.right)
        return left + right if left is not None and right is not None else None
    return None


def _returns_reason(fn: Callable) -> bool:
    """A generator or helper returning ``Something | str`` gives its decline as the string."""
    note = str(getattr(fn, "__annotations__", {}).get("return", ""))
    parts = {p.strip() for p in note.split("|")}
    if getattr(fn, "__name__", "") in ("decline", "generate", "_check"):  # the reason, or None to accept
        return "str" in parts
    return "str" in parts and bool(parts - {"str", "None"})


def _reasons(fn: Callable, module: ModuleType, returns_reasons: bool, depth: int = 2,
             seen: set[str] | None = None) -> list[str]:
    """Decline texts in ``fn`` and (``depth`` levels down) the module's functions it calls."""
    seen = set() if seen is None else seen
    fn = inspect.unwrap(fn)
    key = getattr(fn, "__qualname__", repr(fn))
    if key in seen:
        return []
    seen.add(key)
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return []
    out: list[str] = []
    callees: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = node.func.id if isinstance(node.func, ast.Name) else (
                node.func.attr if isinstance(node.func, ast.Attribute) else "")
            if name == "Decline" and node.args:
                text = _render(node.args[0])
                if text:
                    out.append(text)
            elif name:
                callees.append(name)
        elif returns_reasons and _returns_reason(fn) and isinstance(node, ast.Return) and node.value is not None:
            text = _render(node.value)
            if text:
                out.append(text)
    if depth > 0:
        for name in callees:
            callee = getattr(module, name, None)
            if inspect.isfunction(callee) and callee.__module__ == module.__name__:
                out += _reasons(callee, module, returns_reasons, depth - 1, seen)
    return list(dict.fromkeys(out))


# ---- the table -------------------------------------------------------------------------------
def collect() -> dict:
    """{"ops": sorted op types, "cells": {path: {op: kernel names}}, "declines": {path: {op: [..]}},
    "common": {path: [reasons for every op]}}."""
    from gpubackend import fallback
    from gpubackend.paths import compute_kernels as ck
    from gpubackend.paths.gles2 import kernels as k2
    from gpubackend.paths.gles3 import kernels as k3

    compute, compute_gate = _candidates(ck.REGISTRY)
    gles2, gles2_gate = _candidates(k2.REGISTRY)
    gles3, gles3_gate = _candidates(k3.REGISTRY)
    cpu_ops = sorted(fallback.supported_ops())
    all_ops = sorted(set(cpu_ops) | set(compute) | set(gles2) | set(gles3))
    per_path = {
        "gles2": (gles2, gles2_gate, False),
        "gles3": (gles3, gles3_gate, True),
        "gles31": (compute, compute_gate, False),
        "vulkan": (compute, compute_gate, False),
    }
    cells: dict[str, dict[str, list[str]]] = {"cpu": {op: ["numpy"] for op in cpu_ops}}
    declines: dict[str, dict[str, list[str]]] = {}
    common: dict[str, list[str]] = {}
    for key, (table, gates, returns) in per_path.items():
        cells[key] = {op: list(dict.fromkeys(name for name, _ in cands)) for op, cands in table.items()}
        gate_reasons: list[str] = []
        for gate in gates:
            gate_reasons += _reasons(gate, sys.modules[gate.__module__], True, depth=0)
        common[key] = [r for r in dict.fromkeys(gate_reasons) if not r.startswith("no ")]
        declines[key] = {}
        by_gen: dict[Callable, list[str]] = {}
        for op, cands in table.items():
            reasons: list[str] = []
            for _, gen in cands:
                if gen not in by_gen:
                    by_gen[gen] = _reasons(gen, sys.modules[gen.__module__], returns)
                reasons += by_gen[gen]
            declines[key][op] = list(dict.fromkeys(reasons))
    return {"ops": all_ops, "cells": cells, "declines": declines, "common": common}


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render(data: dict | None = None) -> str:
    data = collect() if data is None else data
    lines = [
        "# Supported operators per path",
        "",
        f"Generated from the kernel registries by `{REGENERATE}`; do not edit by hand",
        "(`tests/test_ops_table.py` fails when this file is out of date).",
        "",
        "A cell names the kernel(s) that path tries for the op, most specialised first; `-` means the",
        "path has no kernel for it and the planner places such nodes on the next path (cpu last).",
        "A path with a kernel can still decline one node (a shape, attribute or dtype it does not",
        "handle): the reasons are listed below the table, and `Session.explain()` says which applied.",
        "The cpu column is the NumPy reference (`fallback`); the onnxruntime engine of the cpu path",
        "runs every op onnxruntime has. gles31 and vulkan share one set of compute generators.",
        "",
        "| op | " + " | ".join(COLUMNS) + " |",
        "|---|" + "---|" * len(COLUMNS),
    ]
    for op in data["ops"]:
        row = [", ".join(data["cells"][k].get(op, [])) or "-" for k in COLUMNS]
        lines.append(f"| {op} | " + " | ".join(_cell(c) for c in row) + " |")
    counts = ", ".join(f"{k} {len(data['cells'][k])}" for k in COLUMNS)
    lines += ["", f"Ops with a kernel: {counts} (of {len(data['ops'])} listed).", ""]
    lines += ["## What a path declines within an op it runs", ""]
    for key in COLUMNS[1:]:
        lines += [f"### {key}", ""]
        if data["common"][key]:
            lines.append("Any op: " + "; ".join(f"\"{_cell(r)}\"" for r in data["common"][key]) + ".")
            lines.append("")
        groups: dict[tuple[str, ...], list[str]] = {}
        for op, reasons in data["declines"][key].items():
            if reasons:
                groups.setdefault(tuple(reasons), []).append(op)
        for reasons, ops in sorted(groups.items(), key=lambda kv: sorted(kv[1])[0]):
            lines.append(f"- **{', '.join(sorted(ops))}**: " + "; ".join(f"\"{_cell(r)}\"" for r in reasons))
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def check(path: Path = OUTPUT) -> str | None:
    """None when ``path`` is current, else what to do about it."""
    want = render()
    have = path.read_text() if path.is_file() else ""
    if have == want:
        return None
    return (f"{path.relative_to(ROOT)} is out of date with the kernel registries "
            f"(an op or a decline reason was added or changed); regenerate it with `{REGENERATE}`")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = ap.add_mutually_exclusive_group()
    group.add_argument("--write", action="store_true", help=f"write {OUTPUT.relative_to(ROOT)}")
    group.add_argument("--check", action="store_true", help="exit 1 if the file is out of date")
    args = ap.parse_args(argv)
    if args.write:
        OUTPUT.write_text(render())
        print(f"wrote {OUTPUT.relative_to(ROOT)}")
        return 0
    if args.check:
        problem = check()
        if problem:
            print(problem, file=sys.stderr)
            return 1
        print(f"{OUTPUT.relative_to(ROOT)} is current")
        return 0
    sys.stdout.write(render())
    return 0


if __name__ == "__main__":
    sys.exit(main())
