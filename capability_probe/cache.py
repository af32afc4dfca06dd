"""Verdict cache: where it lives, its cheap key, and safe load/store.

The key must be cheap to compute and must not load a GPU driver in the calling process (a driver
that crashes at load must cost a verdict, not the caller). So it hashes, without loading them:

* paths, sizes and mtimes of the driver files: libEGL/libGLES/libGL/libvulkan/libgbm/libgallium in
  the library directories (``LD_LIBRARY_PATH`` first), the Mesa ``dri/*_dri.so`` modules, the
  glvnd EGL vendor JSONs and Vulkan ICD JSONs (and the libraries those name);
* the environment variables that change which driver loads (``MESA_*``, ``LIBGL_*``,
  ``GALLIUM_DRIVER``, ``VK_ICD_FILENAMES``, ``VK_DRIVER_FILES``, ``__EGL_VENDOR_LIBRARY_*``,
  ``EGL_PLATFORM``, ``GPUBACKEND_GL_CONTEXT``);
* the package version, the Python version, the ``kp`` and ``moderngl`` files;
* the host CPU's model name (:func:`host_cpu`): a software renderer's code generation, speed and
  even results follow the CPU, so a cache directory shared by two machines keeps a verdict each;
* the sources that the verification runs (``capability_probe``, ``gpubackend/paths``,
  ``gpubackend/ieee_check.py``, ``shaders``, ``fallback``), so a changed kernel or canary is
  verified again;
* the registered canaries and ``GPUBACKEND_FAULT`` / ``GPUBACKEND_DISABLE``, so a test with a
  fault never sees a healthy cached verdict and vice versa.

The driver's own fingerprint (vendor, renderer, versions) is computed in the child and stored in
the cached report; the blocklist and recorded kernel verdicts are applied after loading, on every
call, so editing them needs no refresh.
"""

from __future__ import annotations

import fnmatch
import functools
import glob
import hashlib
import importlib.util
import json
import os
import platform
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

CACHE_ENV = "GPUBACKEND_CACHE_DIR"
ENV_KEYS_PREFIXES = ("MESA_", "LIBGL_", "GALLIUM_", "VK_", "__EGL_VENDOR", "__GLX_VENDOR", "EGL_", "LP_",
                     "GPUBACKEND_GL_CONTEXT", "GPUBACKEND_FAULT", "GPUBACKEND_DISABLE", "GPUBACKEND_PROBE_CANARIES",
                     "GPUBACKEND_CANARY_TOL", "LD_LIBRARY_PATH")
_LIB_PATTERNS = ("libEGL*.so*", "libGLES*.so*", "libGL.so*", "libGLX*.so*", "libOpenGL.so*", "libvulkan*.so*",
                 "libgbm.so*", "libgallium*.so*", "libglapi.so*", "libLLVM*.so*", "dri/*_dri.so")
_JSON_DIRS = ("/usr/share/glvnd/egl_vendor.d", "/etc/glvnd/egl_vendor.d", "/usr/share/vulkan/icd.d",
              "/etc/vulkan/icd.d", "/usr/local/share/vulkan/icd.d", "~/.local/share/vulkan/icd.d")


def cache_dir() -> Path:
    """``$GPUBACKEND_CACHE_DIR``, else ``$XDG_CACHE_HOME/gpubackend``, else ``~/.cache/gpubackend``."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "gpubackend"


@functools.lru_cache(maxsize=1)
def package_version() -> str:
    """The installed ``gpubackend`` version (read once per process)."""
    mod = sys.modules.get("gpubackend")
    if mod is not None and isinstance(getattr(mod, "__version__", None), str):
        return str(mod.__version__)
    try:
        from importlib.metadata import version

        return version("gpubackend")
    except Exception:  # noqa: BLE001 - not installed: source checkout
        return "0+unknown"


@functools.lru_cache(maxsize=1)
def host_cpu() -> str:
    """The host CPU's model name: ``model name`` of /proc/cpuinfo (Linux), else
    ``platform.processor()``, else the machine type ("" when none is known)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, sep, value = line.partition(":")
                if sep and key.strip() == "model name" and value.strip():
                    return " ".join(value.split())
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _lib_dirs() -> list[str]:
    dirs = [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") if d]
    multiarch = getattr(sys.implementation, "_multiarch", "")
    for d in (f"/usr/lib/{multiarch}" if multiarch else "", "/usr/lib64", "/usr/lib", "/usr/local/lib",
              "/lib/" + multiarch if multiarch else ""):
        if d and d not in dirs and os.path.isdir(d):
            dirs.append(d)
    return dirs


def _stat(path: str) -> str:
    try:
        st = os.stat(path)
        return f"{path}:{st.st_size}:{int(st.st_mtime)}"
    except OSError:
        return f"{path}:missing"


def driver_files() -> list[str]:
    """The driver files whose identity keys the cache (cheap: stat only)."""
    files: list[str] = []
    top = [p for p in _LIB_PATTERNS if "/" not in p]
    for d in _lib_dirs():
        try:
            names = sorted(os.listdir(d))  # one listing per directory, then pattern matching
        except OSError:
            continue
        rx = re.compile("|".join(fnmatch.translate(p) for p in top))
        files.extend(os.path.join(d, n) for n in names if n.startswith("lib") and rx.match(n))
        for pat in _LIB_PATTERNS:
            if "/" in pat:
                files.extend(sorted(glob.glob(os.path.join(d, pat))))
    for d in _JSON_DIRS:
        for j in sorted(glob.glob(os.path.join(os.path.expanduser(d), "*.json"))):
            files.append(j)
            try:  # the ICD library an ICD json names
                with open(j, encoding="utf-8") as f:
                    lib = json.load(f).get("ICD", {}).get("library_path", "")
                if lib and os.path.isabs(lib):
                    files.append(lib)
            except Exception:  # noqa: BLE001
                pass
    return files


def _module_file(name: str) -> str:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return f"{name}:absent"
    if spec is None:
        return f"{name}:absent"
    return _stat(spec.origin) if spec.origin else name


def _source_trees() -> list[str]:
    here = Path(__file__).resolve().parent
    roots = [here]
    for pkg, sub in (("gpubackend", "paths"), ("gpubackend.shaders", ""), ("gpubackend.fallback", "")):
        try:
            spec = importlib.util.find_spec(pkg)
        except (ImportError, ValueError):
            spec = None
        if spec is not None and spec.submodule_search_locations:
            for loc in spec.submodule_search_locations:
                roots.append(Path(loc) / sub if sub else Path(loc))
    out = []
    try:  # the probe's NaN/Inf check, beside the paths
        spec = importlib.util.find_spec("gpubackend.ieee_check")
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.origin:
        out.append(_stat(spec.origin))
    for r in roots:
        if not r.is_dir():
            continue
        for dirpath, dirnames, filenames in os.walk(r):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            for fn in sorted(filenames):
                if fn.endswith((".py", ".glsl", ".comp", ".frag", ".vert", ".spv", ".h", ".json")) and \
                        fn != "blocklist.json":
                    out.append(_stat(os.path.join(dirpath, fn)))
    return out


def cheap_key(canaries: dict[str, list[str]], extra: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
    """(hex key, the material it hashes). Never loads a GPU driver."""
    env = {k: v for k, v in sorted(os.environ.items()) if k.startswith(ENV_KEYS_PREFIXES)}
    material: dict[str, Any] = {
        "schema": 1,
        "package": package_version(),
        "python": sys.version.split()[0],
        "cpu": host_cpu(),
        "env": env,
        "drivers": [_stat(f) for f in driver_files()],
        "modules": [_module_file(m) for m in ("kp", "moderngl", "glcontext", "numpy")],
        "sources": _source_trees(),
        "canaries": {k: list(v) for k, v in sorted(canaries.items())},
        "extra": extra or {},
    }
    blob = json.dumps(material, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:24], material


def report_file(key: str) -> Path:
    return cache_dir() / f"probe-{key}.json"


def ensure_dir(path: Path) -> Path:
    """Create ``path`` (and parents) private to this user (0700). Raises OSError when it cannot."""
    missing = []
    p = path
    while not p.exists() and p != p.parent:
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        d.mkdir(mode=0o700, exist_ok=True)
    return path


def _digest(blob: bytes) -> str:
    return hashlib.sha256(blob).hexdigest()


def _canonical(data: Any) -> bytes:
    return json.dumps(data, sort_keys=True, default=str).encode()


def report_problem(key: str, entry: Any) -> str | None:
    """Why a cached probe entry cannot be trusted, or None. Checks that the entry names ``key``,
    that its content hash matches, and that every probed path's verdict has the right types
    (a hand-edited ``verified: "yes"`` or ``jobs: {}`` must not silently change the verdict)."""
    if not isinstance(entry, dict) or entry.get("key") != key:
        return "entry does not carry this key"
    report = entry.get("report")
    if not isinstance(report, dict):
        return "no report"
    if entry.get("sha256") != _digest(_canonical(report)):
        return "content hash does not match"
    jobs = report.get("jobs")
    if not isinstance(jobs, dict):
        return "jobs is not a mapping"
    disabled = report.get("disabled", [])
    if not isinstance(disabled, list):
        return "disabled is not a list"
    from .report import GPU_PATH_KEYS

    for p in GPU_PATH_KEYS:
        if p in disabled:
            continue
        j = jobs.get(p)
        if not isinstance(j, dict):
            return f"no verdict for {p}"
        for field in ("available", "verified", "software"):
            if field in j and not isinstance(j[field], bool):
                return f"{p}.{field} is not a boolean"
        if not isinstance(j.get("reason", ""), str):
            return f"{p}.reason is not a string"
        err = j.get("canary_error")
        if err is not None and (isinstance(err, bool) or not isinstance(err, (int, float))):
            return f"{p}.canary_error is not a number"
        if not isinstance(j.get("ieee_lost") or "", str):
            return f"{p}.ieee_lost is not a string"
        kernels = j.get("disabled_kernels", [])
        if not isinstance(kernels, list) or not all(isinstance(k, str) for k in kernels):
            return f"{p}.disabled_kernels is not a list of names"
    for name, j in jobs.items():
        if not isinstance(j, dict):
            return f"job {name!r} is not a mapping"
        retry_at = j.get("retry_at")
        if retry_at is not None and (isinstance(retry_at, bool) or not isinstance(retry_at, (int, float))):
            return f"{name}.retry_at is not a time"
        if j.get("timed_out") and retry_at is None:
            return f"{name} timed out without a retry time"
    return None


def load(key: str) -> dict[str, Any] | None:
    """The cached raw report for ``key``, or None when missing, unreadable, tampered with or
    malformed (the caller re-probes and rewrites it)."""
    try:
        with open(report_file(key), encoding="utf-8") as f:
            entry = json.load(f)
    except FileNotFoundError:
        return None
    except Exception:  # noqa: BLE001 - unreadable or corrupt: ignored, rewritten by the caller
        return None
    if report_problem(key, entry) is not None:
        return None
    return entry["report"]


def atomic_write_bytes(path: Path, blob: bytes) -> None:
    """Write ``blob`` to ``path`` through a fresh temporary file in the same directory (created
    with O_EXCL and O_NOFOLLOW under a random name, so a planted file or symlink is never written
    through) and ``os.replace``, so readers never see half a file."""
    ensure_dir(path.parent)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=str(path.parent))
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(blob)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def atomic_write_json(path: Path, data: Any) -> None:
    """Write JSON atomically (see :func:`atomic_write_bytes`)."""
    atomic_write_bytes(path, json.dumps(data, indent=1, default=str).encode())


def store(key: str, report: dict[str, Any]) -> bool:
    """Store a raw report with its key and content hash; False (never an exception) when the
    cache dir is not writable."""
    try:
        atomic_write_json(report_file(key), {"key": key, "sha256": _digest(_canonical(report)), "report": report})
        return True
    except (OSError, TypeError, ValueError):
        return False


_BLOB_MAGIC = b"GPUBACKEND-BLOB1\n"


def write_blob(path: Path, key: str, payload: bytes) -> bool:
    """Store ``payload`` under ``path`` with ``key`` and its SHA-256 inside the file, so a file
    copied or renamed onto another entry's name is recognised as foreign by :func:`read_blob`.
    False (never an exception) when the cache cannot be written."""
    header = json.dumps({"key": key, "sha256": _digest(payload), "size": len(payload)}).encode()
    try:
        atomic_write_bytes(path, _BLOB_MAGIC + header + b"\n" + payload)
        return True
    except OSError:
        return False


def read_blob(path: Path, key: str) -> bytes | None:
    """The payload stored by :func:`write_blob` under ``key``; None when the file is missing,
    truncated, altered, or belongs to another key (such a file is removed so it is rewritten)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    payload = None
    if data.startswith(_BLOB_MAGIC):
        head, sep, rest = data[len(_BLOB_MAGIC):].partition(b"\n")
        try:
            meta = json.loads(head) if sep else None
        except ValueError:
            meta = None
        if (isinstance(meta, dict) and meta.get("key") == key and meta.get("size") == len(rest)
                and meta.get("sha256") == _digest(rest)):
            payload = rest
    if payload is None:
        try:
            path.unlink()
        except OSError:
            pass
    return payload
