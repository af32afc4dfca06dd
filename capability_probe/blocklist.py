"""Driver blocklist: data files that disable a tier or a named feature for matching drivers.

Two files are read and concatenated: the shipped ``capability_probe/blocklist.json`` and a user
file (``$GPUBACKEND_BLOCKLIST``, else ``<cache dir>/blocklist.json``). Format::

    {"version": 1, "entries": [
      {"id": "example",                       # shown in the reason
       "api": "gl",                           # "gl" or "vulkan"; absent: tried against both
       "vendor": "Qualcomm",                  # regexes, searched case-insensitively; absent = any
       "renderer": "Adreno.*5[0-9]{2}",       #   (GL renderer / Vulkan deviceName)
       "driver": "Mesa",                      #   (driver name/info)
       "driver_version": ">=22.0,<22.3.7",    # version specifiers, comma = and; absent = any
       "api_version": "<3.2",
       "device_type": "CPU",                  # Vulkan device type substring (optional)
       "disable": ["gles31", "fp16", "gles3:depthwise", "vulkan:gemm"],
       "reason": "compute shaders return zeros on this driver"}
    ]}

``disable`` items: a path key (the whole tier: reported unverified, reason "blocklisted: ..."),
``PATH:KERNEL`` (that kernel declines on that path: added to ``disabled_kernels``), or a bare
feature/kernel name such as ``fp16`` or ``conv`` (added to ``disabled_kernels`` of every path of
the entry's API).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version

from .cache import cache_dir
from .report import GPU_PATH_KEYS, ProbeReport

USER_ENV = "GPUBACKEND_BLOCKLIST"
SHIPPED = Path(__file__).with_name("blocklist.json")
API_PATHS = {"gl": ("gles31", "gles3", "gles2"), "vulkan": ("vulkan",)}


def parse_version(text: str) -> tuple[int, ...]:
    """First dotted number in ``text`` -> tuple of ints ("OpenGL ES 3.2 Mesa 22.3.6" -> (3, 2))."""
    m = re.search(r"\d+(?:\.\d+)*", str(text))
    return tuple(int(x) for x in m.group(0).split(".")) if m else ()


def version_matches(version: str, spec: str) -> bool:
    """``version_matches("22.3.6", ">=22,<22.3.7")`` -> True: PEP 440 specifiers (``packaging``),
    comma = and, with a bare version or ``=`` meaning ``==``. An empty spec matches anything; an
    unknown version, or a spec that is not valid, matches no non-empty spec."""
    if not spec or not str(spec).strip():
        return True
    v = parse_version(version)
    if not v:
        return False
    parts = []
    for part in str(spec).split(","):
        part = part.strip()
        if not part:
            continue
        if part[0].isdigit():
            part = "==" + part
        elif part.startswith("=") and not part.startswith("=="):
            part = "=" + part
        parts.append(part)
    try:
        return Version(".".join(map(str, v))) in SpecifierSet(",".join(parts))
    except InvalidSpecifier:
        return False


def _re(pattern: str | None, text: str) -> bool:
    if not pattern:
        return True
    return re.search(pattern, text or "", re.IGNORECASE) is not None


def entry_matches(entry: dict[str, Any], fp: dict[str, Any]) -> bool:
    """Does one blocklist entry match one API's fingerprint (``report.fingerprint["gl"|"vulkan"]``)?"""
    if not fp:
        return False
    return (
        _re(entry.get("vendor"), str(fp.get("vendor", "")))
        and _re(entry.get("renderer"), str(fp.get("renderer", "")))
        and _re(entry.get("driver"), f"{fp.get('driver', '')} {fp.get('driver_info', '')}")
        and (not entry.get("device_type") or
             str(entry["device_type"]).lower() in str(fp.get("device_type", "")).lower())
        and (not entry.get("driver_version") or version_matches(str(fp.get("driver_version", "")),
                                                                entry["driver_version"]))
        and (not entry.get("api_version") or version_matches(str(fp.get("api_version", "")), entry["api_version"]))
    )


def user_file() -> Path:
    env = os.environ.get(USER_ENV)
    return Path(env).expanduser() if env else cache_dir() / "blocklist.json"


def load_entries(path: Path) -> list[dict[str, Any]]:
    """Entries of one blocklist file; a missing file is empty, a malformed one raises ValueError."""
    if not path.is_file():
        return []
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"blocklist {path}: {e}") from e
    entries = data.get("entries", []) if isinstance(data, dict) else data
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise ValueError(f"blocklist {path}: 'entries' must be a list of objects")
    for e in entries:
        e.setdefault("_source", str(path))
    return entries


def all_entries() -> tuple[list[dict[str, Any]], list[str]]:
    """(entries of the shipped and the user file, problems found loading them)."""
    out: list[dict[str, Any]] = []
    problems: list[str] = []
    for p in (SHIPPED, user_file()):
        try:
            out.extend(load_entries(p))
        except ValueError as e:
            problems.append(str(e))
    return out, problems


def matches(fingerprint: dict[str, Any], entries: list[dict[str, Any]] | None = None) -> list[tuple[str, dict]]:
    """Every (api, entry) whose entry matches ``fingerprint`` (a report's fingerprint dict)."""
    if entries is None:
        entries, _ = all_entries()
    hits = []
    for e in entries:
        apis = [e["api"]] if e.get("api") in API_PATHS else list(API_PATHS)
        for api in apis:
            if entry_matches(e, fingerprint.get(api) or {}):
                hits.append((api, e))
    return hits


def apply(report: ProbeReport, entries: list[dict[str, Any]] | None = None) -> None:
    """Disable tiers / features of ``report`` in place for every matching entry."""
    problems: list[str] = []
    if entries is None:
        entries, problems = all_entries()
    report.notes.extend(f"blocklist ignored: {p}" for p in problems)
    for api, e in matches(report.fingerprint, entries):
        reason = str(e.get("reason", "no reason given"))
        label = e.get("id") or e.get("_source", "blocklist")
        for item in e.get("disable", []):
            item = str(item).strip()
            path, sep, kernel = item.partition(":")
            if not sep:
                if item in GPU_PATH_KEYS:
                    path, kernel = item, ""
                else:
                    path, kernel = "", item
            targets = [path] if path else list(API_PATHS[api])
            if path == "gl":
                targets = list(API_PATHS["gl"])
            for t in targets:
                v = report.paths.get(t)
                if v is None:
                    continue
                if not kernel:
                    if v.verified or v.available:
                        v.verified = False
                        v.reason = f"blocklisted ({label}): {reason}"
                elif kernel not in v.disabled_kernels:
                    v.disabled_kernels.append(kernel)
                    report.notes.append(f"{t}:{kernel} disabled by blocklist ({label}): {reason}")
