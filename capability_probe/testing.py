"""Helpers for fault-injection tests (the probe's own and the session-level ones).

    from capability_probe.testing import probe_with_faults, assert_fault_reported
    rep = probe_with_faults("crash@gles31", timeout_s=20, cache_dir=tmp_path)
    assert_fault_reported(rep, "crash", "gles31")
    assert rep.usable("gles3")

``fault_env`` is a context manager that sets ``GPUBACKEND_FAULT`` (and optionally the cache dir,
probe timeout and ``GPUBACKEND_DISABLE``) and restores the environment and the probe's in-memory
memo afterwards, so a faulted verdict never leaks into later tests.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from pathlib import Path

from . import runner
from .faults import GPU_PATHS, KINDS
from .report import ProbeReport

# What a verdict's reason says for each fault kind (regex, case-insensitive).
REASON_PATTERNS = {
    "absent": r"unavailable|absent",
    "compile": r"compile",
    "link": r"link",
    "wrong": r"wrong",
    "nan": r"nan",
    "crash": r"crash|SIGSEGV",
    "hang": r"hang|timeout|timed out",
    "oom": r"out of (device )?memory|OutOfMemory|oom",
    "lost": r"lost",
}
# Kinds that strike while a session runs (at dispatch / allocation) rather than only at build:
# the session-level tests re-plan the affected nodes onto the next path for these.
RUNTIME_KINDS = ("lost", "oom")
# Kinds whose effect is a wrong answer rather than an exception: only verification catches them.
SILENT_KINDS = ("wrong", "nan")
# Kinds that kill or block the process running the driver: only the probe's child survives them.
FATAL_KINDS = ("crash", "hang")

# Does the fault leave the path *available* (context made) in the probe's verdict?
AVAILABLE_AFTER = {"absent": False, "crash": False, "hang": False}


@contextlib.contextmanager
def fault_env(spec: str = "", cache_dir: str | os.PathLike[str] | None = None, timeout_s: float | None = None,
              disable: str | None = None, canaries: str | None = None) -> Iterator[None]:
    """Set the fault/probe environment for the duration of a ``with`` block.

    ``canaries``: ``"all"``, ``"fp32"`` or ``"none"`` (basic round trips only: fast) for
    ``GPUBACKEND_PROBE_CANARIES``; None leaves it as it is.
    """
    new = {"GPUBACKEND_FAULT": spec}
    if canaries is not None:
        new["GPUBACKEND_PROBE_CANARIES"] = canaries
    if cache_dir is not None:
        new["GPUBACKEND_CACHE_DIR"] = str(cache_dir)
    if timeout_s is not None:
        new[runner.TIMEOUT_ENV] = str(timeout_s)
    if disable is not None:
        new[runner.DISABLE_ENV] = disable
    old = {k: os.environ.get(k) for k in new}
    os.environ.update(new)
    runner.clear_memo()
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        runner.clear_memo()


def probe_with_faults(spec: str, timeout_s: float | None = None, cache_dir: str | os.PathLike[str] | None = None,
                      disable: str | None = None, canaries: str | None = None) -> ProbeReport:
    """``probe(refresh=True)`` with ``GPUBACKEND_FAULT=spec``; the environment is restored after."""
    with fault_env(spec, cache_dir=cache_dir, timeout_s=timeout_s, disable=disable, canaries=canaries):
        return runner.probe(refresh=True)


def fault_reported(report: ProbeReport, kind: str, path: str) -> tuple[bool, str]:
    """(does ``report`` show ``path`` unusable with a reason naming ``kind``?, why not)."""
    v = report.paths[path]
    if report.usable(path):
        return False, f"{path} still usable under {kind}: {v.reason}"
    if not re.search(REASON_PATTERNS[kind], v.reason, re.IGNORECASE):
        return False, f"{path} reason does not name {kind}: {v.reason!r}"
    if kind in AVAILABLE_AFTER and v.available != AVAILABLE_AFTER[kind]:
        return False, f"{path} available={v.available} under {kind}: {v.reason}"
    if report.preferred_path == path:
        return False, f"{path} still preferred under {kind}"
    return True, ""


def assert_fault_reported(report: ProbeReport, kind: str, path: str) -> None:
    ok, why = fault_reported(report, kind, path)
    assert ok, why


def fault_plan(kinds: tuple[str, ...] = KINDS, paths: tuple[str, ...] = GPU_PATHS) -> list[tuple[str, list[str]]]:
    """Batches covering every (kind, path) pair: per kind, two probes, each faulting half the paths
    so the other half shows the faults don't leak. Returns [(spec, faulted paths)]."""
    half = (list(paths[::2]), list(paths[1::2]))
    plan = []
    for kind in kinds:
        for group in half:
            if group:
                plan.append((",".join(f"{kind}@{p}" for p in group), group))
    return plan


def run_fault_matrix(cache_dir: str | os.PathLike[str], kinds: tuple[str, ...] = KINDS,
                     paths: tuple[str, ...] = GPU_PATHS, timeout_s: float = 30.0,
                     hang_timeout_s: float = 8.0, canaries: str | None = "none") -> dict[tuple[str, str], str]:
    """Run :func:`fault_plan`; returns {(kind, path): outcome string} where outcome starts with
    "ok" when the faulted path was reported unusable with the fault named and the unfaulted
    paths of the same batch stayed usable. ``canaries="none"`` (default) verifies by the basic
    round trips only, which keeps the matrix fast; pass ``"all"`` to include the paths' canaries."""
    with fault_env("", cache_dir=Path(cache_dir), canaries=canaries):
        healthy = runner.probe(refresh=False)
    out: dict[tuple[str, str], str] = {}
    for spec, group in fault_plan(kinds, paths):
        kind = spec.split("@", 1)[0]
        t = hang_timeout_s if kind == "hang" else timeout_s
        rep = probe_with_faults(spec, timeout_s=t, cache_dir=Path(cache_dir), canaries=canaries)
        for p in group:
            ok, why = fault_reported(rep, kind, p)
            out[(kind, p)] = ("ok: " if ok else "FAIL: ") + (rep.paths[p].reason if ok else why)
        for p in paths:
            if p not in group and healthy.usable(p) and not rep.usable(p):
                for g in group:
                    out[(kind, g)] = f"FAIL: {spec} also broke {p}: {rep.paths[p].reason}"
    return out
