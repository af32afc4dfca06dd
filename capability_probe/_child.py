"""The probe's verification child: ``python -m capability_probe._child`` < config JSON.

It loads the drivers so the caller never has to. Each job (``gl-detect``, ``vulkan-detect`` and
one per GPU path) runs in its own forked worker with the shared deadline, so a SIGSEGV, abort or
hang in one driver costs only that job. The answer is one line ``@@GPUBACKEND_PROBE_RESULT@@ {json}``
on stdout.
"""

from __future__ import annotations

import importlib
import json
import math
import os
import select
import signal
import sys
import time
import traceback
from typing import Any

RESULT_MARK = "@@GPUBACKEND_PROBE_RESULT@@ "
CANARY_TOL = {"fp32": 1e-3, "fp16": 5e-2}
TOL_ENV = "GPUBACKEND_CANARY_TOL"
CANARIES_ENV = "GPUBACKEND_PROBE_CANARIES"  # all (fp32 + fp16, default) | fp32 | none (round trips only)
IEEE_CHECK = "gpubackend.ieee_check:lost_values"  # run after a path's canaries pass


def _exc(e: BaseException) -> str:
    msg = str(e).strip().splitlines()
    first = " ".join(msg[:3])[:400] if msg else ""
    return f"{type(e).__name__}: {first}"


def _tolerance(precision: str) -> float:
    env = os.environ.get(TOL_ENV)
    if env and precision == "fp32":
        try:
            return float(env)
        except ValueError:
            pass
    return CANARY_TOL[precision]


def _load_canary(entry: str) -> Any:
    """The canary callable, or None when its module/function does not exist (yet)."""
    mod_name, _, fn_name = entry.partition(":")
    try:
        mod = importlib.import_module(mod_name)
    except ModuleNotFoundError as e:
        missing = e.name or ""
        if missing and (mod_name == missing or mod_name.startswith(missing + ".")):
            return None
        raise
    return getattr(mod, fn_name, None)


def job_gl_detect() -> dict[str, Any]:
    from . import contexts, detect

    contexts.gl_context()
    out = detect.detect_gl()
    out["ok"] = True
    return out


def job_vulkan_detect() -> dict[str, Any]:
    from . import detect

    out = detect.detect_vulkan()
    out["ok"] = True
    return out


def job_path(path: str, canaries: list[str]) -> dict[str, Any]:
    """Context -> tier requirements -> basic round trip -> canaries, stopping at the first failure."""
    from . import contexts, detect, roundtrip
    from .errors import DriverUnavailable

    res: dict[str, Any] = {"path": path, "available": False, "verified": False, "timings": {}}
    t = time.perf_counter()
    try:
        if path == "vulkan":
            mgr = contexts.kompute_manager(path)
            props = mgr.get_device_properties()
            name = str(props.get("device_name", ""))
            res["fingerprint"] = {"renderer": name}
            res["software"] = detect.is_software(name)
        else:
            ctx = contexts.gl_context(path)
            res["fingerprint"] = detect.gl_fingerprint(ctx)
            res["software"] = detect.is_software(res["fingerprint"]["renderer"])
            roundtrip._require(ctx, path)
    except DriverUnavailable as e:
        res["reason"] = f"unavailable: {_exc(e)}"
        return res
    except Exception as e:  # noqa: BLE001
        res["reason"] = f"unavailable: context creation failed: {_exc(e)}"
        return res
    res["available"] = True
    res["timings"]["context_s"] = time.perf_counter() - t
    t = time.perf_counter()
    try:
        res["features"] = {"roundtrip": roundtrip.run(path)}
    except Exception as e:  # noqa: BLE001
        res["reason"] = f"round trip failed: {_exc(e)}"
        return res
    res["timings"]["roundtrip_s"] = time.perf_counter() - t
    ran, skipped, worst = [], [], None
    mode = os.environ.get(CANARIES_ENV, "all").strip().lower() or "all"
    if mode in ("none", "0", "off", "no"):
        canaries = []
    for entry in canaries:
        t = time.perf_counter()
        try:
            fn = _load_canary(entry)
        except Exception as e:  # noqa: BLE001 - the canary's module is broken
            res["reason"] = f"canary {entry} failed to import: {_exc(e)}"
            return res
        if fn is None:
            skipped.append(entry)
            continue
        try:
            err = float(fn("fp32"))
        except Exception as e:  # noqa: BLE001
            res["reason"] = f"canary {entry} failed: {_exc(e)}"
            res["canary_traceback"] = traceback.format_exc()[-2000:]
            return res
        res["timings"][f"canary {entry}"] = time.perf_counter() - t
        if not math.isfinite(err) or err > _tolerance("fp32"):
            res["canary_error"] = err
            res["reason"] = (f"canary {entry}: wrong results, max relative error {err:.3g} "
                             f"> {_tolerance('fp32'):g}" + (" (NaN)" if math.isnan(err) else ""))
            return res
        worst = err if worst is None else max(worst, err)
        ran.append(entry)
        # fp16 is optional: a failure disables the feature, not the path
        if mode == "fp32":
            continue
        try:
            err16 = float(fn("fp16"))
            ok16 = math.isfinite(err16) and err16 <= _tolerance("fp16")
            res["features"].setdefault("fp16", {})[entry] = err16
            if not ok16:
                res.setdefault("disabled_kernels", [])
                if "fp16" not in res["disabled_kernels"]:
                    res["disabled_kernels"].append("fp16")
        except Exception as e:  # noqa: BLE001
            res["features"].setdefault("fp16", {})[entry] = f"unsupported: {_exc(e)}"
    if ran and mode != "fp32":  # like the IEEE check: only where the canaries ran (off means round trips only)
        res["features"]["fp16_compute"] = _fp16_compute(path)
    res["canary_error"] = worst
    res["verified"] = True
    if ran:
        res["reason"] = f"verified: round trip exact, canary max rel error {worst:.2g}"
    elif mode in ("none", "0", "off", "no"):
        res["reason"] = f"verified by its basic round trip (canaries off: {CANARIES_ENV}={mode})"
    else:
        res["reason"] = "verified by its basic round trip (no canary registered yet)"
    if ran:
        _check_ieee(path, res)
    if res["software"]:
        res["reason"] += "; software renderer (auto prefers cpu)"
    return res


def _check_ieee(path: str, res: dict[str, Any]) -> None:
    """NaN/Inf survival on ``path`` (``gpubackend.ieee_check``): a loss is reported, not fatal."""
    t = time.perf_counter()
    try:
        check = _load_canary(IEEE_CHECK)
        if check is None:
            return
        lost = check(path)
    except Exception as e:  # noqa: BLE001 - an unchecked path is not a failed one
        res["features"]["ieee"] = f"not checked: {_exc(e)}"
        return
    res["timings"]["ieee_s"] = time.perf_counter() - t
    res["features"]["ieee"] = lost or "NaN and Inf preserved"
    if lost:
        res["ieee_lost"] = lost
        res["reason"] += f"; {path}: {lost}"


def _fp16_compute(path: str) -> str:
    """Whether ``path`` has real fp16 arithmetic (``precision="fp16-compute"``), in words."""
    try:
        from gpubackend.paths import fp16_compute
    except ImportError:
        return "not checked: gpubackend is not importable"
    try:
        return fp16_compute.check(path)
    except Exception as e:  # noqa: BLE001 - an fp16 check failure disables only fp16 arithmetic
        return f"not available: the check failed ({_exc(e)}); runs as fp32 arithmetic"


def _run_job(name: str, config: dict[str, Any]) -> dict[str, Any]:
    if name == "gl-detect":
        return job_gl_detect()
    if name == "vulkan-detect":
        return job_vulkan_detect()
    return job_path(name, config.get("canaries", {}).get(name, []))


def _worker(name: str, config: dict[str, Any], wfd: int) -> None:
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a crashing driver dumps no core
    except Exception:  # noqa: BLE001
        pass
    t = time.perf_counter()
    try:
        out = _run_job(name, config)
    except BaseException as e:  # noqa: BLE001
        out = {"ok": False, "reason": f"{name} failed: {_exc(e)}", "traceback": traceback.format_exc()[-2000:]}
    out["elapsed_s"] = time.perf_counter() - t
    data = json.dumps(out, default=str).encode()
    with os.fdopen(wfd, "wb") as f:
        f.write(data)
    os._exit(0)


def _signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


def run(config: dict[str, Any]) -> dict[str, Any]:
    """Fork one worker per job, collect answers until the deadline, kill the rest."""
    t0 = time.perf_counter()
    timeout = float(config.get("timeout_s", 60.0))
    paths = list(config.get("paths", []))
    jobs = []
    if any(p in ("gles31", "gles3", "gles2") for p in paths):
        jobs.append("gl-detect")
    if "vulkan" in paths:
        jobs.append("vulkan-detect")
    jobs.extend(paths)
    if config.get("jobs") is not None:  # a retry of the jobs that timed out before
        jobs = [j for j in config["jobs"] if j in jobs]
    # import the heavy pure-Python parts once, before forking; no driver is loaded here
    import numpy  # noqa: F401

    try:
        import moderngl  # noqa: F401
    except Exception:  # noqa: BLE001
        pass
    # the canaries' top-level packages (e.g. gpubackend: onnx, fallback) once, not per worker;
    # the canary modules themselves are imported in the workers, where a crash costs one verdict
    canaries_off = os.environ.get(CANARIES_ENV, "").strip().lower() in ("none", "0", "off", "no")
    for entries in ([] if canaries_off else config.get("canaries", {}).values()):
        for entry in entries:
            top = entry.split(":", 1)[0].split(".", 1)[0]
            if top and top not in sys.modules:
                try:
                    importlib.import_module(top)
                except BaseException:  # noqa: BLE001 - reported by the worker that needs it
                    pass
    running: dict[int, tuple[str, int, bytearray]] = {}  # rfd -> (name, pid, buffer)
    for name in jobs:
        rfd, wfd = os.pipe()
        pid = os.fork()
        if pid == 0:  # worker
            os.close(rfd)
            for other_fd in list(running):
                try:
                    os.close(other_fd)
                except OSError:
                    pass
            _worker(name, config, wfd)
        os.close(wfd)
        running[rfd] = (name, pid, bytearray())
    deadline = t0 + timeout
    results: dict[str, Any] = {}
    finished: list[tuple[str, int, bytearray]] = []
    while running:
        left = deadline - time.perf_counter()
        if left <= 0:
            break
        ready, _, _ = select.select(list(running), [], [], min(left, 0.5))
        for fd in ready:
            chunk = os.read(fd, 1 << 16)
            if chunk:
                running[fd][2].extend(chunk)
            else:
                os.close(fd)
                finished.append(running.pop(fd))
    for fd, (name, pid, _buf) in running.items():  # overdue: a hang
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(pid, 0)
        os.close(fd)
        results[name] = {"ok": False, "available": False, "verified": False, "timed_out": True,
                         "timeout_s": timeout,
                         "reason": f"timed out: no answer within the probe timeout ({timeout:g} s), worker killed"}
    for name, pid, buf in finished:
        _, status = os.waitpid(pid, 0)
        if os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
            results[name] = {"ok": False, "available": False, "verified": False, "crashed": _signal_name(sig),
                             "reason": f"crash: the driver killed its process with {_signal_name(sig)}"}
            continue
        try:
            results[name] = json.loads(bytes(buf).decode())
        except (ValueError, UnicodeDecodeError):
            code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else -1
            results[name] = {"ok": False, "available": False, "verified": False,
                             "reason": f"crash: worker exited with status {code} and no answer"}
    return {"jobs": results, "child_elapsed_s": time.perf_counter() - t0}


def main() -> int:
    config = json.loads(sys.stdin.read() or "{}")
    # a driver printing to stdout must not corrupt the answer: keep a private copy of fd 1
    out_fd = os.dup(1)
    os.dup2(2, 1)
    result = run(config)
    with os.fdopen(out_fd, "w") as out:
        out.write("\n" + RESULT_MARK + json.dumps(result, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
