"""Parent side of the probe: cache lookup, the verification child, post-processing.

The verification (contexts, detection, round trips, canaries) never runs in the caller's process:
``python -m capability_probe._child`` gets a JSON config on stdin and forks one worker per job
(``gl-detect``, ``vulkan-detect`` and one per GPU path), each with the same deadline, so a crash
or hang costs only that job's verdict. The child answers with one JSON line.

A job that timed out is not a final verdict (a device busy at first start looks the same as a
driver that hangs): it is cached with a ``retry_at`` time, and the first probe after it re-runs
only the timed-out jobs, with twice the timeout. The wait before a retry starts at
``GPUBACKEND_PROBE_RETRY_S`` (600 s) and doubles after each further timeout, up to a day, so a
driver that really hangs costs one bounded probe now and then, not the GPU for good.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from typing import Any

from . import blocklist, cache, detect, verdicts
from .report import GPU_PATH_KEYS, PATH_KEYS, PathVerdict, ProbeReport

TIMEOUT_ENV = "GPUBACKEND_PROBE_TIMEOUT"
DISABLE_ENV = "GPUBACKEND_DISABLE"
DEFAULT_TIMEOUT_S = 60.0
RETRY_ENV = "GPUBACKEND_PROBE_RETRY_S"
DEFAULT_RETRY_S = 600.0
MAX_RETRY_S = 86400.0
RETRY_TIMEOUT_FACTOR = 2.0  # a retried job gets this many times the probe timeout
RESULT_MARK = "@@GPUBACKEND_PROBE_RESULT@@ "
CHILD_ENV = "GPUBACKEND_PROBE_CHILD"  # set in the probe's child: probe() there must not recurse

# A path module without ``canary_int8`` (no int8 kernels) skips that entry.
_CANARIES: dict[str, list[str]] = {p: [f"gpubackend.paths.{p}:canary", f"gpubackend.paths.{p}:canary_int8"]
                                   for p in GPU_PATH_KEYS}
_DEFAULT_CANARIES = {p: list(v) for p, v in _CANARIES.items()}
_memo: dict[str, tuple[ProbeReport, float | None]] = {}  # key -> (report, when a timed-out job is due)
_lock = threading.Lock()


def register_canary(path: str, entry_point: str) -> None:
    """Register ``"module:function"`` as a canary for ``path``.

    The function has the signature ``canary(precision: str = "fp32") -> float`` and returns the max
    relative error of a few of the path's real kernels against ``fallback``; it raises on failure.
    It runs in the probe's child process after the path's basic round trip. The default table
    holds ``gpubackend.paths.<path>:canary`` for every GPU path (skipped when not importable).
    """
    if path not in GPU_PATH_KEYS:
        raise ValueError(f"unknown path {path!r}; expected one of {', '.join(GPU_PATH_KEYS)}")
    mod, sep, fn = entry_point.partition(":")
    if not sep or not mod or not fn:
        raise ValueError(f"canary entry point must be 'module:function', got {entry_point!r}")
    with _lock:
        if entry_point not in _CANARIES[path]:
            _CANARIES[path].append(entry_point)
            _memo.clear()


def unregister_canary(path: str, entry_point: str) -> None:
    """Remove a registered canary (tests)."""
    with _lock:
        if entry_point in _CANARIES.get(path, []):
            _CANARIES[path].remove(entry_point)
            _memo.clear()


def canaries() -> dict[str, list[str]]:
    """The registered canaries, per path."""
    return {p: list(v) for p, v in _CANARIES.items()}


def disabled_paths() -> list[str]:
    """Paths named in ``GPUBACKEND_DISABLE`` (unknown names ignored; ``cpu`` can't be disabled)."""
    raw = os.environ.get(DISABLE_ENV, "")
    names = [s.strip().lower() for s in raw.split(",") if s.strip()]
    out: list[str] = []
    for n in names:
        if n == "gl":
            out.extend(["gles31", "gles3", "gles2"])
        elif n in GPU_PATH_KEYS:
            out.append(n)
    return [p for p in GPU_PATH_KEYS if p in out]


def probe_timeout() -> float:
    try:
        return max(1.0, float(os.environ.get(TIMEOUT_ENV, DEFAULT_TIMEOUT_S)))
    except ValueError:
        return DEFAULT_TIMEOUT_S


def retry_delay_s() -> float:
    """The wait before a timed-out job is probed again (``GPUBACKEND_PROBE_RETRY_S``, >= 0)."""
    try:
        return max(0.0, float(os.environ.get(RETRY_ENV, DEFAULT_RETRY_S)))
    except ValueError:
        return DEFAULT_RETRY_S


def _utc(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))


def stamp_timeouts(raw: dict[str, Any], attempts_before: dict[str, int], now: float) -> None:
    """Give every timed-out job of ``raw`` its attempt count and ``retry_at`` time, and say so in
    its reason ("timed out ... (retry at ...)")."""
    for name, job in raw.get("jobs", {}).items():
        if not (isinstance(job, dict) and job.get("timed_out")):
            continue
        attempt = attempts_before.get(name, 0) + 1
        job["timeout_attempts"] = attempt
        job["retry_at"] = now + min(MAX_RETRY_S, retry_delay_s() * 2 ** (attempt - 1))
        job["reason"] = f"{job.get('reason', 'timed out')} (retry at {_utc(job['retry_at'])})"


def _timed_out(raw: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {n: j for n, j in raw.get("jobs", {}).items() if isinstance(j, dict) and j.get("timed_out")}


def next_retry_at(raw: dict[str, Any]) -> float | None:
    """When the earliest timed-out job of ``raw`` is due again (None: nothing timed out)."""
    times = [float(j.get("retry_at", 0.0)) for j in _timed_out(raw).values()]
    return min(times) if times else None


def retry_timed_out(raw: dict[str, Any], now: float) -> dict[str, Any]:
    """Re-run the jobs of ``raw`` whose retry is due, with a longer limit; their new results
    replace the old ones (a job that times out again gets a later ``retry_at``)."""
    due = {n: j for n, j in _timed_out(raw).items() if float(j.get("retry_at", 0.0)) <= now}
    if not due:
        return raw
    limit = probe_timeout() * RETRY_TIMEOUT_FACTOR
    fresh = run_child(canaries(), list(raw.get("disabled", [])), limit, jobs=sorted(due))
    out = {**raw, "jobs": dict(raw.get("jobs", {}))}
    attempts = {n: int(j.get("timeout_attempts", 1)) for n, j in due.items()}
    for name, old in due.items():
        new = fresh.get("jobs", {}).get(name)
        if not isinstance(new, dict):  # the retry child failed as a whole: still timed out
            new = {**old, "reason": str(old.get("reason", "timed out")).split(" (retry at")[0]}
        out["jobs"][name] = new
    stamp_timeouts({"jobs": {n: out["jobs"][n] for n in due}}, attempts, now)
    return out


def probe(refresh: bool = False) -> ProbeReport:
    """What this machine offers and what was verified.

    Cached in memory and on disk (see :mod:`capability_probe.cache`); ``refresh=True`` re-runs the
    verification child and rewrites the cache. Never raises for a driver problem: a path that fails
    is reported unusable with the reason. Jobs that timed out are re-run once their ``retry_at``
    has passed (see the module's docstring).
    """
    t0 = time.perf_counter()
    if os.environ.get(CHILD_ENV):
        return _inside_child_report()
    key, _material = cache.cheap_key(canaries())
    with _lock:
        memo = _memo.get(key)
        if not refresh and memo is not None and (memo[1] is None or time.time() < memo[1]):
            rep = ProbeReport.from_dict(memo[0].to_dict())
            rep.cached = True
            rep.elapsed_s = time.perf_counter() - t0
            return rep
    raw = None if refresh else cache.load(key)
    cached = raw is not None
    if raw is not None and (due := next_retry_at(raw)) is not None and due <= time.time():
        raw = retry_timed_out(raw, time.time())
        cached = False
        cache.store(key, raw)
    if raw is None:
        raw = run_child(canaries(), disabled_paths(), probe_timeout())
        stamp_timeouts(raw, {}, time.time())
        raw["probe_time_s"] = time.perf_counter() - t0
        if raw.get("cacheable", True):
            cache.store(key, raw)
    rep = build_report(raw)
    rep.cached = cached
    rep.elapsed_s = time.perf_counter() - t0
    if cached:
        rep.notes.append(f"cached verdict (the uncached probe took {raw.get('probe_time_s', 0.0):.2f} s)")
    with _lock:
        _memo[key] = (rep, next_retry_at(raw))
    return ProbeReport.from_dict(rep.to_dict())


def _inside_child_report() -> ProbeReport:
    """probe() called by a canary inside the probe child (e.g. through a Session): no recursion.
    Every path is taken as usable so a canary can run its own path; flagged software so that
    ``auto`` there picks ``cpu``."""
    why = "inside the probe's own child: not probed recursively"
    paths = {p: PathVerdict(p, available=True, verified=True, software=True, reason=why) for p in GPU_PATH_KEYS}
    paths["cpu"] = PathVerdict("cpu", available=True, verified=True, reason="NumPy reference kernels (always)")
    rep = ProbeReport(paths=paths, notes=[why])
    rep.mark_preferred()
    return rep


def clear_memo() -> None:
    """Forget in-memory reports (the disk cache stays)."""
    with _lock:
        _memo.clear()


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env[CHILD_ENV] = "1"
    for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env.setdefault(k, "1")
    # the child must import this very package, also when run from a source checkout
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def run_child(canary_table: dict[str, list[str]], disabled: list[str], timeout_s: float,
              jobs: list[str] | None = None) -> dict[str, Any]:
    """Run the verification child and return its raw JSON result (never raises). ``jobs`` limits
    it to those job names (``gl-detect``, ``vulkan-detect``, path keys); default all."""
    paths = [p for p in GPU_PATH_KEYS if p not in disabled]
    if jobs is not None:
        gl_detect = "gl-detect" in jobs
        vk_detect = "vulkan-detect" in jobs
        paths = [p for p in paths if p in jobs or (gl_detect and p != "vulkan") or (vk_detect and p == "vulkan")]
    config: dict[str, Any] = {"paths": paths, "canaries": {p: canary_table.get(p, []) for p in paths},
                              "timeout_s": timeout_s, "jobs": jobs}
    raw: dict[str, Any] = {"jobs": {}, "disabled": disabled, "timeout_s": timeout_s}
    if not paths:
        return raw
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "capability_probe._child"],
            input=json.dumps(config), capture_output=True, text=True,
            timeout=timeout_s + 15.0, env=_child_env(),
        )
    except subprocess.TimeoutExpired:
        raw["child_error"] = f"probe child gave no answer within {timeout_s + 15.0:.0f} s (killed)"
        raw["cacheable"] = False
        return raw
    except OSError as e:
        raw["child_error"] = f"could not start the probe child: {e}"
        raw["cacheable"] = False
        return raw
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(RESULT_MARK):
            try:
                result = json.loads(line[len(RESULT_MARK):])
                raw.update(result)
                return raw
            except json.JSONDecodeError:
                break
    raw["child_error"] = (f"probe child exited with {proc.returncode} and no result; "
                          f"stderr: {proc.stderr.strip()[-600:]}")
    raw["cacheable"] = False
    return raw


def build_report(raw: dict[str, Any]) -> ProbeReport:
    """Raw child result -> ProbeReport, with DISABLE, blocklist and kernel verdicts applied."""
    jobs: dict[str, Any] = raw.get("jobs", {})
    paths: dict[str, PathVerdict] = {}
    disabled = set(raw.get("disabled", []))
    child_error = raw.get("child_error")
    for p in GPU_PATH_KEYS:
        if p in disabled:
            paths[p] = PathVerdict(p, available=False, verified=False, reason=f"disabled by {DISABLE_ENV}")
            continue
        j = jobs.get(p)
        if j is None:
            paths[p] = PathVerdict(p, reason=child_error or "not probed")
            continue
        paths[p] = PathVerdict(
            p,
            available=bool(j.get("available")),
            verified=bool(j.get("verified")),
            software=bool(j.get("software")),
            reason=str(j.get("reason", "")),
            canary_error=j.get("canary_error"),
            disabled_kernels=list(j.get("disabled_kernels", [])),
            retry_at=j.get("retry_at"),
            ieee_lost=j.get("ieee_lost"),
        )
    paths["cpu"] = PathVerdict("cpu", available=True, verified=True, reason="NumPy reference kernels (always)")
    fingerprint: dict[str, Any] = {"package": cache.package_version()}
    limits: dict[str, Any] = {}
    features: dict[str, Any] = {}
    extensions: dict[str, list[str]] = {}
    for api in ("gl", "vulkan"):
        det = jobs.get(f"{api}-detect") or {}
        fp = dict(det.get("fingerprint") or {})
        if not fp:  # fall back on what a tier job saw
            for p in (("gles31", "gles3", "gles2") if api == "gl" else ("vulkan",)):
                if (jobs.get(p) or {}).get("fingerprint"):
                    fp = dict(jobs[p]["fingerprint"])
                    break
        if det.get("reason") and not det.get("ok"):
            fp.setdefault("error", det["reason"])
        if fp and (detect.is_software(str(fp.get("renderer", ""))) or fp.get("device_type") == "CPU"):
            fp["cpu"] = cache.host_cpu()  # a software renderer is as fast (and as right) as the CPU it runs on
        if fp:
            fingerprint[api] = fp
        if det.get("limits"):
            limits[api] = det["limits"]
        if det.get("features"):
            features[api] = det["features"]
        if det.get("extensions"):
            extensions[api] = det["extensions"]
    for p in GPU_PATH_KEYS:  # per-tier feature results (fp16 canary etc.) and where the time went
        j = jobs.get(p) or {}
        tf = dict(j.get("features") or {})
        if j.get("timings") or j.get("elapsed_s"):
            tf["timings_s"] = {**{k: round(float(v), 4) for k, v in (j.get("timings") or {}).items()},
                               "total": round(float(j.get("elapsed_s", 0.0)), 4)}
        if tf:
            features.setdefault("paths", {})[p] = tf
    if "child_elapsed_s" in raw:
        features["probe_child_s"] = round(float(raw["child_elapsed_s"]), 4)
    rep = ProbeReport(paths=paths, fingerprint=fingerprint, limits=limits, features=features,
                      extensions=extensions, elapsed_s=0.0, cached=False)
    if child_error:
        rep.notes.append(child_error)
    try:
        blocklist.apply(rep)
    except Exception as e:  # noqa: BLE001 - a bad user blocklist must not break probing
        rep.notes.append(f"blocklist not applied: {e}")
    try:
        verdicts.apply(rep)
    except Exception as e:  # noqa: BLE001
        rep.notes.append(f"kernel verdicts not applied: {e}")
    rep.mark_preferred()
    return rep


__all__ = ["PATH_KEYS", "probe", "register_canary", "canaries", "build_report", "run_child"]
