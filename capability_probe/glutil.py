"""Small checked wrappers around moderngl for the probe (and for any GL path that wants them):
shader builds that raise :class:`ShaderCompileError` / :class:`ShaderLinkError` with the stage,
the source lines around the error and the driver log, after calling the fault hooks.
"""

from __future__ import annotations

import ctypes
import re
from typing import Any

from . import faults
from .errors import DriverError, ShaderCompileError, ShaderLinkError, format_compile_error

_STAGE_OF = {"vertex_shader": "vertex", "fragment_shader": "fragment", "compute_shader": "compute"}


def _wrap(e: Exception, path: str, sources: dict[str, str]) -> DriverError:
    msg = str(e)
    low = msg.lower()
    stage = next((s for k, s in _STAGE_OF.items() if k in low), "")
    if stage and "link" not in low.split("\n", 1)[0]:
        return ShaderCompileError(f"[{path}] " + format_compile_error(stage, sources.get(stage, ""), msg),
                                  stage=stage, source=sources.get(stage, ""), log=msg)
    if "link" in low:
        return ShaderLinkError(f"[{path}] program failed to link: {msg}", log=msg)
    return ShaderCompileError(f"[{path}] shader build failed: {msg}", log=msg)


def build_program(ctx: Any, path: str, vertex: str, fragment: str, **kwargs: Any) -> Any:
    """``ctx.program(...)`` with fault hooks and typed errors."""
    faults.on_compile(path, "vertex")
    faults.on_compile(path, "fragment")
    faults.on_compile(path, "link")
    try:
        return ctx.program(vertex_shader=vertex, fragment_shader=fragment, **kwargs)
    except Exception as e:  # noqa: BLE001 - moderngl.Error and friends
        raise _wrap(e, path, {"vertex": vertex, "fragment": fragment}) from e


def build_compute(ctx: Any, path: str, source: str) -> Any:
    """``ctx.compute_shader(source)`` with fault hooks and typed errors."""
    faults.on_compile(path, "compute")
    faults.on_compile(path, "link")
    try:
        return ctx.compute_shader(source)
    except Exception as e:  # noqa: BLE001
        raise _wrap(e, path, {"compute": source}) from e


class GLQuery:
    """Direct ``glGetIntegerv``-family queries through ctypes, for limits moderngl's ``info`` lacks
    (compute and storage limits, shader precision). Needs the context current on this thread."""

    def __init__(self) -> None:
        self._get_proc = None
        for lib, fn in (("libEGL.so.1", "eglGetProcAddress"), ("libGL.so.1", "glXGetProcAddressARB")):
            try:
                f = getattr(ctypes.CDLL(lib), fn)
                f.restype = ctypes.c_void_p
                f.argtypes = [ctypes.c_char_p]
                self._get_proc = f
                break
            except (OSError, AttributeError):
                continue
        if self._get_proc is None:
            raise DriverError("no GL function loader (libEGL / libGL)")
        self.glGetError = self._fn("glGetError", ctypes.c_uint, [])
        self.glGetIntegerv = self._fn("glGetIntegerv", None, [ctypes.c_uint, ctypes.POINTER(ctypes.c_int)])
        self.glGetInteger64v = self._fn("glGetInteger64v", None, [ctypes.c_uint, ctypes.POINTER(ctypes.c_int64)])
        self.glGetIntegeri_v = self._fn("glGetIntegeri_v", None,
                                        [ctypes.c_uint, ctypes.c_uint, ctypes.POINTER(ctypes.c_int)])
        self.glGetString = self._fn("glGetString", ctypes.c_char_p, [ctypes.c_uint])
        self.glGetFloatv = self._fn("glGetFloatv", None, [ctypes.c_uint, ctypes.POINTER(ctypes.c_float)])
        self.glGetShaderPrecisionFormat = self._fn(
            "glGetShaderPrecisionFormat", None,
            [ctypes.c_uint, ctypes.c_uint, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int)])

    def _fn(self, name: str, restype: Any, argtypes: list[Any]) -> Any:
        addr = self._get_proc(name.encode())
        return ctypes.CFUNCTYPE(restype, *argtypes)(addr) if addr else None

    def _clear(self) -> None:
        if self.glGetError:
            for _ in range(16):
                if self.glGetError() == 0:
                    break

    def integer(self, pname: int) -> int | None:
        if not self.glGetIntegerv:
            return None
        self._clear()
        v = (ctypes.c_int * 4)(-1, -1, -1, -1)
        self.glGetIntegerv(pname, v)
        return None if (self.glGetError and self.glGetError() != 0) else int(v[0])

    def floats(self, pname: int, n: int) -> list[float] | None:
        if not self.glGetFloatv:
            return None
        self._clear()
        v = (ctypes.c_float * 16)(*([float("nan")] * 16))
        self.glGetFloatv(pname, v)
        return None if (self.glGetError and self.glGetError() != 0) else [float(x) for x in v[:n]]

    def integer64(self, pname: int) -> int | None:
        if not self.glGetInteger64v:
            return self.integer(pname)
        self._clear()
        v = (ctypes.c_int64 * 4)(-1, -1, -1, -1)
        self.glGetInteger64v(pname, v)
        return None if (self.glGetError and self.glGetError() != 0) else int(v[0])

    def indexed(self, pname: int, n: int = 3) -> list[int] | None:
        if not self.glGetIntegeri_v:
            return None
        self._clear()
        out = []
        for i in range(n):
            v = ctypes.c_int(-1)
            self.glGetIntegeri_v(pname, i, ctypes.byref(v))
            out.append(int(v.value))
        return None if (self.glGetError and self.glGetError() != 0) else out

    def string(self, pname: int) -> str:
        if not self.glGetString:
            return ""
        s = self.glGetString(pname)
        self._clear()
        return s.decode(errors="replace") if s else ""

    def precision(self, shader_type: int, precision_type: int) -> tuple[list[int], int] | None:
        if not self.glGetShaderPrecisionFormat:
            return None
        self._clear()
        rng = (ctypes.c_int * 2)(0, 0)
        prec = ctypes.c_int(0)
        self.glGetShaderPrecisionFormat(shader_type, precision_type, rng, ctypes.byref(prec))
        if self.glGetError and self.glGetError() != 0:
            return None
        return [int(rng[0]), int(rng[1])], int(prec.value)


def parse_gl_version(version: str) -> tuple[bool, tuple[int, int], str, str]:
    """``"OpenGL ES 3.2 Mesa 22.3.6"`` -> (is_es, (3, 2), driver "Mesa", driver version "22.3.6")."""
    is_es = "OpenGL ES" in version
    m = re.search(r"(\d+)\.(\d+)", version)
    api = (int(m.group(1)), int(m.group(2))) if m else (0, 0)
    rest = version[m.end():] if m else version
    dm = re.search(r"([A-Za-z][\w\-]*)\s+(\d+(?:\.\d+)+)", rest)
    if dm:
        return is_es, api, dm.group(1), dm.group(2)
    vm = re.search(r"(\d+(?:\.\d+)+)", rest)
    return is_es, api, "", vm.group(1) if vm else ""
