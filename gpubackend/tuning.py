"""Per-device kernel tuning: which variant of a kernel (register blocking, workgroup size) runs.

A kernel generator that has variants asks :func:`choose` with its tuning unit (``"conv"``,
``"gemm"``, ...) and the node's *shape class* (a coarse bucket of its geometry, so one measurement
serves similar layers). The answer comes, in this order, from

1. :func:`forced` (the tests that run every variant), or :func:`trial` for the sessions created
   in its block (``gpubackend tune`` and the first-use measurement while they measure);
2. the tuning record of this driver for the node's shape class (``tuning.json`` beside the probe
   verdicts in the cache dir), keyed by (driver fingerprint id, path, unit, shape class), written
   by ``gpubackend tune MODEL``;
3. the driver's device-wide record of the unit (shape class :data:`DEVICE_WIDE`), measured once
   on a few representative kernels when a session first creates the path on this driver
   (:mod:`gpubackend.bench.tune`, ``first_use``; ``SessionOptions.tune`` / ``GPUBACKEND_TUNE=off``
   turn the measuring off);
4. the unit's default for the device class (``llvmpipe``/``lavapipe``/... or ``gpu``).

Each record carries its own SHA-256; a record that does not verify, or names a variant that no
longer exists, is ignored with a warning (the default runs instead); the file is written
atomically with the probe cache's helpers.

The variants of a unit are registered here with :func:`register` by the module whose generator
uses them (``paths/compute_kernels.py``), so the tests can run every one of them: the tuning can
only pick a registered (tested) variant.

Which table a generator sees: the path hands its :class:`Table` to its ``KernelCache``, which
makes it :func:`active` while it generates (a context variable, so threads do not mix tables).
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime
import json
import logging
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from filelock import FileLock

log = logging.getLogger(__name__)

TUNING_FILE = "tuning.json"
# The shape class of a device-wide record: measured on representative kernels at first use, it
# serves every layer whose shape class has no record of its own. A unit that declares shape
# *kinds* (gemm: "rows<=16") gets one more per kind, "* rows<=16", for the layers of that kind.
DEVICE_WIDE = "*"
# 2 (eleventh session): the Vulkan 64-bit loads changed which blocking wins on lavapipe; a file
# of an older version holds measurements of older kernels and is dropped (first use measures again).
# 3 (thirteenth session): on lavapipe the 3x3 strip kernels and the 8-pixel blockings with a fused
# activation got 1.3-2x faster (written-out taps, UNROLL), which changes which variant wins.
FORMAT_VERSION = 3
SOFTWARE_RENDERERS = ("llvmpipe", "lavapipe", "softpipe", "swiftshader")
# The paths whose kernels read a tuning table (the compute paths, through compute_kernels).
TUNABLE_PATHS = ("vulkan", "gles31")


def device_wide_class(kind: str = "") -> str:
    """The shape class of the device-wide record of a shape kind ("" : every other layer)."""
    return f"{DEVICE_WIDE} {kind}" if kind else DEVICE_WIDE


class TuningWarning(UserWarning):
    """A tuning record or file that could not be trusted was ignored."""


@dataclass(frozen=True)
class Variant:
    """One variant of a kernel: the compile-time ``defines`` it adds and its workgroup size
    along x (``local``)."""

    name: str
    defines: tuple[tuple[str, int], ...]
    local: int = 64

    def define(self, key: str) -> int:
        return dict(self.defines)[key]


@dataclass(frozen=True)
class Unit:
    variants: tuple[Variant, ...]
    defaults: Mapping[str, str]  # device class ("gpu", "llvmpipe", ...; "*" for any) -> variant name
    # device class ("*" for any) -> the variants the first-use measurement times (a few: each
    # costs a compile of a second or so on a software driver); the class default is always one
    first_use: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # shape class -> its kind ("" for most): layers whose best variant differs by kind on the
    # devices measured (a gemm of one row wants other blocking than one of thousands)
    kind_of: Callable[[str], str] = lambda shape_class: ""
    # the tunable paths whose kernels ask for this unit (Vulkan-only storage forms: "loads")
    paths: tuple[str, ...] = TUNABLE_PATHS

    def variant(self, name: str) -> Variant | None:
        return next((v for v in self.variants if v.name == name), None)

    def default_for(self, device_class: str) -> Variant:
        name = self.defaults.get(device_class) or self.defaults["*"]
        got = self.variant(name)
        assert got is not None, name
        return got

    def first_use_for(self, device_class: str) -> tuple[Variant, ...]:
        """The variants to time at first use on this device class, its default first."""
        default = self.default_for(device_class)
        names = self.first_use.get(device_class) or self.first_use.get("*") or ()
        return (default, *(v for n in names if (v := self.variant(n)) is not None and v != default))


_UNITS: dict[str, Unit] = {}
# The modules that register units when imported (a path's kernel module): imported on demand, so
# ``gpubackend tune`` and the tests see every unit before any path was created.
REGISTRANTS = ["gpubackend.paths.compute_kernels"]


def _registered() -> dict[str, Unit]:
    import importlib

    for name in REGISTRANTS:
        importlib.import_module(name)
    return _UNITS


def register(unit: str, variants: list[Variant], defaults: Mapping[str, str],
             first_use: Mapping[str, Sequence[str]] | None = None,
             kind_of: Callable[[str], str] | None = None, paths: Sequence[str] = TUNABLE_PATHS) -> None:
    """Declare the variants of ``unit``, its default per device class (``"*"`` required), the
    variants the first-use measurement times per device class (besides the default), the
    shape kind of a shape class that gets a device-wide record of its own (``kind_of``), and the
    paths that ask for it."""
    names = [v.name for v in variants]
    timed = {n for group in (first_use or {}).values() for n in group}
    if len(set(names)) != len(names) or "*" not in defaults or not set(defaults.values()) <= set(names) \
            or not timed <= set(names):
        raise ValueError(f"tuning unit {unit!r}: bad variants {names}, defaults {dict(defaults)} "
                         f"or first-use variants {sorted(timed - set(names))}")
    _UNITS[unit] = Unit(tuple(variants), dict(defaults), {k: tuple(v) for k, v in (first_use or {}).items()},
                        kind_of or (lambda shape_class: ""), tuple(paths))


def units() -> dict[str, Unit]:
    """Every registered unit (name -> :class:`Unit`)."""
    return dict(_registered())


def variants(unit: str) -> tuple[Variant, ...]:
    return _registered()[unit].variants


def bucket(n: int) -> int:
    """``n`` rounded up to a power of two: the granularity of a shape class."""
    p = 1
    while p < n:
        p *= 2
    return p


def device_class(fingerprint: Mapping[str, Any] | None) -> str:
    """``llvmpipe``/``lavapipe``/... for a software renderer, ``gpu`` otherwise, ``unknown``
    without a fingerprint (one API's part of the probe's fingerprint)."""
    if not fingerprint:
        return "unknown"
    text = f"{fingerprint.get('renderer', '')} {fingerprint.get('driver', '')}".lower()
    if "llvmpipe" in text and str(fingerprint.get("source", "")) == "vulkaninfo":
        return "lavapipe"  # Mesa's Vulkan driver reports the llvmpipe renderer name
    for name in SOFTWARE_RENDERERS:
        if name in text:
            return name
    return "gpu"


@dataclass(frozen=True)
class Choice:
    variant: Variant
    why: str  # "tuned 2026-11-24", "measured at first use 2026-11-28", "default for llvmpipe", "forced"
    # chosen for this very shape class (forced, or a `gpubackend tune` record), not a default or
    # a device-wide record: a generator keeps it as it is
    exact: bool = False


def _digest(record: Mapping[str, Any]) -> str:
    from capability_probe.cache import _canonical, _digest

    return _digest(_canonical({k: v for k, v in record.items() if k != "sha256"}))


def record_key(path: str, unit: str, shape_class: str) -> str:
    return f"{path}|{unit}|{shape_class}"


@dataclass
class Table:
    """The tuning of one path on one driver: its verified records and the device class;
    ``forced``: unit -> variant for the sessions of a measurement (:func:`trial`)."""

    path: str = ""
    fingerprint_id: str = ""
    device_class: str = "unknown"
    records: dict[str, dict[str, Any]] = field(default_factory=dict)
    forced: Mapping[str, str] = field(default_factory=dict)

    def choose(self, unit: str, shape_class: str) -> Choice:
        u = _UNITS[unit]
        forced_name = _FORCED.get(unit) or self.forced.get(unit)
        if forced_name is not None:
            v = u.variant(forced_name)
            if v is None:
                raise ValueError(f"tuning unit {unit!r} has no variant {forced_name!r}")
            return Choice(v, "forced", exact=True)
        kind = "" if shape_class.startswith(DEVICE_WIDE) else u.kind_of(shape_class)
        for cls in dict.fromkeys((shape_class, device_wide_class(kind), DEVICE_WIDE)):
            key = record_key(self.path, unit, cls)
            rec = self.records.get(key)
            if rec is None:
                continue
            v = u.variant(str(rec.get("variant")))
            if v is not None:
                when = str(rec.get("when", ""))[:10]
                if cls.startswith(DEVICE_WIDE):
                    return Choice(v, f"measured at first use {when}")
                return Choice(v, f"tuned {when}", exact=True)
            warnings.warn(f"tuning record {key} names variant {rec.get('variant')!r}, which no longer exists; "
                          "using the default", TuningWarning, stacklevel=2)
            del self.records[key]
        known = self.device_class != "unknown"
        return Choice(u.default_for(self.device_class), f"default for {self.device_class}" if known else "default")

    def first_use_pending(self) -> list[str]:
        """The units the first-use measurement would time: those with variants to compare on
        this device class and no usable device-wide record yet."""
        pending = []
        for unit, spec in _registered().items():
            rec = self.records.get(record_key(self.path, unit, DEVICE_WIDE))
            if len(spec.first_use_for(self.device_class)) > 1 and (
                    rec is None or spec.variant(str(rec.get("variant"))) is None):
                pending.append(unit)
        return pending


# ---- which table a generator sees --------------------------------------------------------------
_ACTIVE: contextvars.ContextVar[Table | None] = contextvars.ContextVar("gpubackend_tuning", default=None)
_TRIAL: contextvars.ContextVar[tuple[tuple[str, str], ...]] = contextvars.ContextVar("gpubackend_tuning_trial",
                                                                                    default=())
_FORCED: dict[str, str] = {}
_SEEN: list[list[tuple[str, str, str, str]]] = []
_LOCK = threading.Lock()


@contextlib.contextmanager
def active(table: Table | None) -> Iterator[None]:
    """Make ``table`` the one :func:`choose` reads in this thread (``None``: defaults)."""
    token = _ACTIVE.set(table)
    try:
        yield
    finally:
        _ACTIVE.reset(token)


@contextlib.contextmanager
def forced(**choices: str) -> Iterator[None]:
    """Process-wide: every generator of unit ``k`` uses variant ``v`` for ``k=v`` (for tests and
    ``gpubackend tune``; paths created meanwhile cache what they generated)."""
    with _LOCK:
        for unit, name in choices.items():
            if unit not in _registered() or _UNITS[unit].variant(name) is None:
                raise ValueError(f"no tuning variant {unit}={name}")
        saved = dict(_FORCED)
        _FORCED.update(choices)
    try:
        yield
    finally:
        with _LOCK:
            _FORCED.clear()
            _FORCED.update(saved)


@contextlib.contextmanager
def trial(**choices: str) -> Iterator[None]:
    """Sessions created in this block by this thread (and only they, wherever their GPU work
    runs) use variant ``v`` of unit ``k`` for ``k=v``: how a measurement times one variant
    while other threads' sessions keep their tuning."""
    for unit, name in choices.items():
        if unit not in _registered() or _UNITS[unit].variant(name) is None:
            raise ValueError(f"no tuning variant {unit}={name}")
    token = _TRIAL.set(tuple({**dict(_TRIAL.get()), **choices}.items()))
    try:
        yield
    finally:
        _TRIAL.reset(token)


def trial_choices() -> dict[str, str]:
    """The :func:`trial` choices in force in this thread (a session reads them at creation)."""
    return dict(_TRIAL.get())


@contextlib.contextmanager
def recording() -> Iterator[list[tuple[str, str, str, str]]]:
    """Collects (node, unit, shape class, variant) of every :func:`choose` made meanwhile."""
    seen: list[tuple[str, str, str, str]] = []
    with _LOCK:
        _SEEN.append(seen)
    try:
        yield seen
    finally:
        with _LOCK:
            _SEEN.remove(seen)


def choose(unit: str, shape_class: str, node: str = "") -> Choice:
    """The variant of ``unit`` for a node of ``shape_class`` under the active table."""
    table = _ACTIVE.get() or Table()
    got = table.choose(unit, shape_class)
    if _SEEN:
        with _LOCK:
            for seen in _SEEN:
                seen.append((node, unit, shape_class, got.variant.name))
    return got


# ---- the store ------------------------------------------------------------------------------------
def tuning_file() -> Path:
    from capability_probe.cache import cache_dir

    return cache_dir() / TUNING_FILE


_FILE_LOCKS: dict[str, FileLock] = {}


def file_lock(timeout: float = -1) -> FileLock:
    """The inter-process lock of the tuning file (held while a record is written, and by a
    first-use measurement from its check to its record). Re-entrant within a thread."""
    path = tuning_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    with _LOCK:
        lock = _FILE_LOCKS.get(str(path))
        if lock is None:
            lock = _FILE_LOCKS[str(path)] = FileLock(f"{path}.lock")
    lock.timeout = timeout
    return lock


def _read_file() -> dict[str, Any]:
    path = tuning_file()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {"version": FORMAT_VERSION, "drivers": {}}
    except (OSError, ValueError) as exc:
        warnings.warn(f"tuning file {path} is unreadable ({exc}); ignored (defaults are used, "
                      "`gpubackend tune` rewrites it)", TuningWarning, stacklevel=3)
        return {"version": FORMAT_VERSION, "drivers": {}}
    if isinstance(data, dict) and isinstance(data.get("version"), int) and 0 < data["version"] < FORMAT_VERSION:
        log.info("tuning file %s measured older kernels (version %s); measuring again", path, data["version"])
        return {"version": FORMAT_VERSION, "drivers": {}}
    if not isinstance(data, dict) or data.get("version") != FORMAT_VERSION or not isinstance(data.get("drivers"), dict):
        warnings.warn(f"tuning file {path} has an unknown layout; ignored", TuningWarning, stacklevel=3)
        return {"version": FORMAT_VERSION, "drivers": {}}
    return data


def _valid(key: str, rec: Any) -> str | None:
    if not isinstance(rec, dict):
        return "not a mapping"
    if rec.get("sha256") != _digest(rec):
        return "content hash does not match"
    if not isinstance(rec.get("variant"), str) or not isinstance(rec.get("seconds", {}), dict):
        return "malformed"
    return None


def load(path: str, fingerprint: Mapping[str, Any] | None, forced: Mapping[str, str] | None = None) -> Table:
    """The :class:`Table` of ``path`` for the driver with this ``fingerprint`` (the probe
    report's, every API): its verified records; a bad record is left out with a warning.
    ``forced``: unit -> variant this table runs whatever the records say (:func:`trial`)."""
    from capability_probe.verdicts import api_of, fingerprint_id

    fp = dict(fingerprint or {})
    fid = fingerprint_id(fp, api_of(path))
    table = Table(path, fid, device_class(fp.get(api_of(path))), forced=dict(forced or {}))
    if not fid:
        return table
    driver = _read_file()["drivers"].get(fid)
    records = driver.get("records", {}) if isinstance(driver, dict) else {}
    for key, rec in (records.items() if isinstance(records, dict) else ()):
        if not isinstance(key, str) or not key.startswith(path + "|"):
            continue
        why = _valid(key, rec)
        if why is not None:
            warnings.warn(f"tuning record {key!r} in {tuning_file()} ignored: {why}", TuningWarning, stacklevel=2)
            continue
        table.records[key] = rec
    return table


def store(table: Table, unit: str, shape_class: str, variant: str, seconds: Mapping[str, float],
          note: str = "") -> dict[str, Any]:
    """Record (and write) that ``variant`` is the best of ``unit`` for ``shape_class`` on this
    table's path and driver; ``seconds``: the measured median per variant."""
    from capability_probe.cache import atomic_write_json

    if not table.fingerprint_id:
        raise ValueError(f"no driver fingerprint for {table.path}: nothing to key a tuning record on")
    if _registered()[unit].variant(variant) is None:
        raise ValueError(f"tuning unit {unit!r} has no variant {variant!r}")
    rec: dict[str, Any] = {"variant": variant, "seconds": {k: float(v) for k, v in seconds.items()},
                           "when": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                           "note": note}
    rec["sha256"] = _digest(rec)
    key = record_key(table.path, unit, shape_class)
    with file_lock(), _LOCK:  # another process may be writing a record of its own
        data = _read_file()
        drv = data["drivers"].setdefault(table.fingerprint_id, {})
        if not isinstance(drv, dict) or not isinstance(drv.get("records"), dict):
            drv = data["drivers"][table.fingerprint_id] = {"records": {}}
        drv["device_class"] = table.device_class
        drv["records"][key] = rec
        atomic_write_json(tuning_file(), data)
    table.records[key] = rec
    return rec


def device_wide_lines(fingerprint: Mapping[str, Any] | None) -> list[str]:
    """What layers without a record of their own run on each tunable path of this driver:
    one line per path (``gpubackend probe`` prints them)."""
    lines = []
    for path in TUNABLE_PATHS:
        table = load(path, fingerprint)
        if not table.fingerprint_id:
            continue
        picks = []
        for unit in sorted(u for u, spec in _registered().items() if path in spec.paths):
            general = table.choose(unit, DEVICE_WIDE)
            picks.append(f"{unit} {general.variant.name} ({general.why})")
            prefix = record_key(path, unit, device_wide_class("?"))[:-1]
            for kind in sorted(k[len(prefix):] for k in table.records if k.startswith(prefix)):
                chosen = table.choose(unit, device_wide_class(kind))
                picks.append(f"{unit} [{kind}] {chosen.variant.name} ({chosen.why})")
        lines.append(f"kernel variants on {path}: " + ", ".join(picks))
    return lines


def explain_lines(chosen: list[tuple[str, str, str]]) -> list[str]:
    """One line per (kernel, variant, why) with its count: what ``explain()`` shows."""
    counts: dict[tuple[str, str, str], int] = {}
    for item in chosen:
        counts[item] = counts.get(item, 0) + 1
    return [f"variant: {kernel} {variant} x{n} ({why})" for (kernel, variant, why), n in sorted(counts.items())]


__all__ = ["DEVICE_WIDE", "TUNABLE_PATHS", "Choice", "Table", "TuningWarning", "Unit", "Variant", "active", "bucket",
           "choose", "device_class", "device_wide_class", "device_wide_lines", "explain_lines", "file_lock",
           "forced", "load", "record_key", "recording", "register", "store", "trial", "trial_choices",
           "tuning_file", "units", "variants"]
