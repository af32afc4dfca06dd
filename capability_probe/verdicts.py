"""Per-kernel verdicts recorded by the conformance suite, merged into later probe reports.

``write_kernel_verdicts(path, failed_kernels, report_meta)`` stores, under the driver fingerprint
of ``report_meta`` (a :class:`ProbeReport`, its ``to_dict()``, or its ``fingerprint`` dict), the
kernels that failed on ``path``. Later probes whose fingerprint for that API matches add those
names to ``PathVerdict.disabled_kernels``. The file is ``<cache dir>/kernel_verdicts.json``.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any

from .cache import atomic_write_json, cache_dir
from .report import GPU_PATH_KEYS, ProbeReport

FILE_NAME = "kernel_verdicts.json"
_ID_FIELDS = {"gl": ("vendor", "renderer", "version", "driver_version"),
              "vulkan": ("vendor", "renderer", "device_type", "api_version", "driver_version", "driver_info")}


def api_of(path: str) -> str:
    return "vulkan" if path == "vulkan" else "gl"


def fingerprint_id(fp: dict[str, Any], api: str) -> str:
    """A stable id for one API's driver fingerprint ("" when unknown). A software renderer's
    fingerprint carries the host CPU (``cpu``), which then keys the id too; a hardware GPU's id
    is what it was before the CPU was recorded."""
    sub = fp.get(api) or {}
    if not sub:
        return ""
    ident = "|".join(str(sub.get(k, "")) for k in _ID_FIELDS[api])
    if sub.get("cpu"):
        ident += f"|cpu={sub['cpu']}"
    return hashlib.sha256(ident.encode()).hexdigest()[:16]


def _fingerprint_of(report_meta: Any) -> dict[str, Any]:
    if isinstance(report_meta, ProbeReport):
        return report_meta.fingerprint
    if isinstance(report_meta, dict):
        if "fingerprint" in report_meta and isinstance(report_meta["fingerprint"], dict):
            return report_meta["fingerprint"]
        return report_meta
    raise TypeError("report_meta must be a ProbeReport, its to_dict() or its fingerprint dict")


def verdicts_file() -> Path:
    return cache_dir() / FILE_NAME


def _valid_driver(rec: Any) -> bool:
    if not isinstance(rec, dict) or not isinstance(rec.get("paths", {}), dict):
        return False
    for entry in rec.get("paths", {}).values():
        kernels = entry.get("failed_kernels") if isinstance(entry, dict) else None
        if not isinstance(kernels, list) or not all(isinstance(k, str) for k in kernels):
            return False
    return True


def load() -> dict[str, Any]:
    """The stored verdicts; missing, corrupt or malformed parts are dropped (never raises)."""
    try:
        with open(verdicts_file(), encoding="utf-8") as f:
            d = json.load(f)
    except (OSError, ValueError):
        return {"drivers": {}}
    drivers = d.get("drivers") if isinstance(d, dict) else None
    if not isinstance(drivers, dict):
        return {"drivers": {}}
    return {**d, "drivers": {k: v for k, v in drivers.items() if _valid_driver(v)}}


def write_kernel_verdicts(path: str, failed_kernels: list[str], report_meta: Any) -> Path:
    """Record that ``failed_kernels`` failed on ``path`` with this driver (replaces the old list).

    An empty list clears the record. Returns the file written.
    """
    if path not in GPU_PATH_KEYS:
        raise ValueError(f"unknown GPU path {path!r}")
    fp = _fingerprint_of(report_meta)
    api = api_of(path)
    fid = fingerprint_id(fp, api)
    if not fid:
        raise ValueError(f"report_meta has no {api} fingerprint to key the verdict on")
    data = load()
    drv = data["drivers"].setdefault(fid, {"api": api, "fingerprint": fp.get(api, {}), "paths": {}})
    drv["paths"][path] = {"failed_kernels": sorted(set(failed_kernels)), "time": time.time()}
    atomic_write_json(verdicts_file(), data)
    return verdicts_file()


def failed_kernels(path: str, fingerprint: dict[str, Any]) -> list[str]:
    """Kernels recorded as failing on ``path`` for this driver fingerprint."""
    fid = fingerprint_id(fingerprint, api_of(path))
    if not fid:
        return []
    rec = load()["drivers"].get(fid, {}).get("paths", {}).get(path, {})
    return list(rec.get("failed_kernels", []))


def apply(report: ProbeReport) -> None:
    """Merge recorded kernel failures into ``report.paths[*].disabled_kernels``."""
    for p in GPU_PATH_KEYS:
        v = report.paths.get(p)
        if v is None:
            continue
        for k in failed_kernels(p, report.fingerprint):
            if k not in v.disabled_kernels:
                v.disabled_kernels.append(k)
