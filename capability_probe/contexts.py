"""The one place GL and Vulkan contexts are made.

GL: a process-wide shared headless OpenGL ES context made through EGL with no window system,
trying in order

1. ``egl-surfaceless-gles``: ``eglGetPlatformDisplayEXT(EGL_PLATFORM_SURFACELESS_MESA)``,
2. ``egl-device-gles``: ``eglQueryDevicesEXT`` + ``EGL_PLATFORM_DEVICE_EXT``,
3. ``egl-default-gles``: ``eglGetDisplay(EGL_DEFAULT_DISPLAY)``,
4. ``moderngl-standalone-gl``: moderngl's own standalone (desktop GL core) context, which also
   compiles ``#version 100`` / ``300 es`` / ``310 es`` sources,

then ``moderngl.create_context()`` attaches to it. ``GPUBACKEND_GL_CONTEXT`` (one of
``surfaceless device default standalone``) forces a single method (tests use it).
``attach_current_gl_context()`` adopts whatever context is current instead (the demo's window).

Threading rule: a context belongs to the thread that made it. Calling :func:`gl_context` from
another thread raises :class:`DriverError` naming both threads; run GL work on the owner thread.

Vulkan: :func:`kompute_manager` makes one ``kp.Manager`` per process, lazily.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading
from typing import Any

from . import faults
from .errors import DriverError, DriverUnavailable

GL_CONTEXT_ENV = "GPUBACKEND_GL_CONTEXT"

EGL_DEFAULT_DISPLAY = 0
EGL_NO_CONTEXT = 0
EGL_NO_SURFACE = 0
EGL_NONE = 0x3038
EGL_RENDERABLE_TYPE = 0x3040
EGL_SURFACE_TYPE = 0x3033
EGL_OPENGL_ES2_BIT = 0x0004
EGL_OPENGL_ES3_BIT = 0x0040
EGL_OPENGL_ES_API = 0x30A0
EGL_CONTEXT_MAJOR_VERSION = 0x3098
EGL_CONTEXT_MINOR_VERSION = 0x30FB
EGL_PLATFORM_SURFACELESS_MESA = 0x31DD
EGL_PLATFORM_DEVICE_EXT = 0x313F
EGL_VENDOR = 0x3053
EGL_VERSION = 0x3054
EGL_EXTENSIONS = 0x3055
EGL_CLIENT_APIS = 0x308D

_lock = threading.RLock()
_state: dict[str, Any] = {"ctx": None, "kind": "", "thread": None, "thread_name": "", "egl": None}
_kp_state: dict[str, Any] = {"mgr": None, "error": None}


class _Egl:
    """Minimal ctypes binding to libEGL: just what a surfaceless/device/default context needs."""

    def __init__(self) -> None:
        name = None
        for cand in ("libEGL.so.1", ctypes.util.find_library("EGL"), "libEGL.so"):
            if not cand:
                continue
            try:
                self.lib = ctypes.CDLL(cand)
                name = cand
                break
            except OSError:
                continue
        if name is None:
            raise DriverUnavailable("libEGL not found (install libegl1 libegl-mesa0)")
        self.libname = name
        L = self.lib
        vp = ctypes.c_void_p
        L.eglGetProcAddress.restype = vp
        L.eglGetProcAddress.argtypes = [ctypes.c_char_p]
        L.eglGetDisplay.restype = vp
        L.eglGetDisplay.argtypes = [vp]
        L.eglInitialize.restype = ctypes.c_uint
        L.eglInitialize.argtypes = [vp, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int)]
        L.eglBindAPI.restype = ctypes.c_uint
        L.eglBindAPI.argtypes = [ctypes.c_uint]
        L.eglChooseConfig.restype = ctypes.c_uint
        L.eglChooseConfig.argtypes = [vp, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(vp), ctypes.c_int,
                                      ctypes.POINTER(ctypes.c_int)]
        L.eglCreateContext.restype = vp
        L.eglCreateContext.argtypes = [vp, vp, vp, ctypes.POINTER(ctypes.c_int)]
        L.eglMakeCurrent.restype = ctypes.c_uint
        L.eglMakeCurrent.argtypes = [vp, vp, vp, vp]
        L.eglQueryString.restype = ctypes.c_char_p
        L.eglQueryString.argtypes = [vp, ctypes.c_int]
        L.eglGetError.restype = ctypes.c_int
        L.eglGetError.argtypes = []
        L.eglTerminate.restype = ctypes.c_uint
        L.eglTerminate.argtypes = [vp]

    def proc(self, name: str, restype: Any, argtypes: list[Any]) -> Any:
        addr = self.lib.eglGetProcAddress(name.encode())
        if not addr:
            return None
        return ctypes.CFUNCTYPE(restype, *argtypes)(addr)

    def client_extensions(self) -> str:
        s = self.lib.eglQueryString(None, EGL_EXTENSIONS)
        return s.decode() if s else ""

    def query(self, dpy: int, what: int) -> str:
        s = self.lib.eglQueryString(dpy, what)
        return s.decode(errors="replace") if s else ""

    def err(self) -> str:
        return hex(self.lib.eglGetError())

    def display(self, method: str) -> int:
        vp = ctypes.c_void_p
        if method == "default":
            dpy = self.lib.eglGetDisplay(EGL_DEFAULT_DISPLAY)
            if not dpy:
                raise DriverUnavailable(f"eglGetDisplay(EGL_DEFAULT_DISPLAY) failed ({self.err()})")
            return dpy
        exts = self.client_extensions()
        get_platform_display = self.proc("eglGetPlatformDisplayEXT", vp, [ctypes.c_uint, vp, vp])
        if get_platform_display is None:
            raise DriverUnavailable("EGL has no eglGetPlatformDisplayEXT")
        if method == "surfaceless":
            if "EGL_MESA_platform_surfaceless" not in exts:
                raise DriverUnavailable("EGL_MESA_platform_surfaceless not offered")
            dpy = get_platform_display(EGL_PLATFORM_SURFACELESS_MESA, None, None)
        elif method == "device":
            if "EGL_EXT_platform_device" not in exts:
                raise DriverUnavailable("EGL_EXT_platform_device not offered")
            query_devices = self.proc("eglQueryDevicesEXT", ctypes.c_uint,
                                      [ctypes.c_int, ctypes.POINTER(vp), ctypes.POINTER(ctypes.c_int)])
            if query_devices is None:
                raise DriverUnavailable("EGL has no eglQueryDevicesEXT")
            devs = (vp * 16)()
            n = ctypes.c_int(0)
            if not query_devices(16, devs, ctypes.byref(n)) or n.value == 0:
                raise DriverUnavailable(f"eglQueryDevicesEXT found no device ({self.err()})")
            dpy = None
            for i in range(n.value):  # first device that initialises
                dpy = get_platform_display(EGL_PLATFORM_DEVICE_EXT, devs[i], None)
                if dpy and self.lib.eglInitialize(dpy, None, None):
                    break
        else:
            raise ValueError(method)
        if not dpy:
            raise DriverUnavailable(f"eglGetPlatformDisplayEXT({method}) failed ({self.err()})")
        return dpy

    def make_es_context(self, method: str) -> tuple[int, int, str]:
        """Create and make current an ES 3.x (or 2.0) context with no surface; returns (dpy, ctx, desc)."""
        vp = ctypes.c_void_p
        dpy = self.display(method)
        major, minor = ctypes.c_int(0), ctypes.c_int(0)
        if not self.lib.eglInitialize(dpy, ctypes.byref(major), ctypes.byref(minor)):
            raise DriverUnavailable(f"eglInitialize({method}) failed ({self.err()})")
        if not self.lib.eglBindAPI(EGL_OPENGL_ES_API):
            raise DriverUnavailable(f"eglBindAPI(EGL_OPENGL_ES_API) failed ({self.err()})")
        dpy_exts = self.query(dpy, EGL_EXTENSIONS)
        last = ""
        for bit, versions in ((EGL_OPENGL_ES3_BIT, ((3, 2), (3, 1), (3, 0))), (EGL_OPENGL_ES2_BIT, ((2, 0),))):
            cfg = vp(None)
            if "EGL_KHR_no_config_context" not in dpy_exts or method == "default":
                attrs = (ctypes.c_int * 3)(EGL_RENDERABLE_TYPE, bit, EGL_NONE)
                n = ctypes.c_int(0)
                if not self.lib.eglChooseConfig(dpy, attrs, ctypes.byref(cfg), 1, ctypes.byref(n)) or n.value < 1:
                    last = f"eglChooseConfig found no ES config ({self.err()})"
                    continue
            for vmaj, vmin in versions:
                attrs = (ctypes.c_int * 5)(EGL_CONTEXT_MAJOR_VERSION, vmaj, EGL_CONTEXT_MINOR_VERSION, vmin, EGL_NONE)
                ctx = self.lib.eglCreateContext(dpy, cfg, EGL_NO_CONTEXT, attrs)
                if not ctx:
                    last = f"eglCreateContext(ES {vmaj}.{vmin}) failed ({self.err()})"
                    continue
                if not self.lib.eglMakeCurrent(dpy, EGL_NO_SURFACE, EGL_NO_SURFACE, ctx):
                    last = f"eglMakeCurrent without surface failed ({self.err()})"
                    continue
                desc = f"EGL {major.value}.{minor.value} {self.query(dpy, EGL_VENDOR)}, asked ES {vmaj}.{vmin}"
                return dpy, ctx, desc
        raise DriverUnavailable(last or "no ES context")


def _check_thread() -> None:
    owner = _state["thread"]
    if owner is not None and owner != threading.get_ident():
        raise DriverError(
            f"the GL context belongs to thread {_state['thread_name']!r} (id {owner}) that created it; "
            f"it was used from thread {threading.current_thread().name!r}. GL contexts are bound to one "
            "thread: create and run sessions on GL paths from that thread, or use path='cpu'/'vulkan' here."
        )


def _create_attached_es(method: str) -> Any:
    import moderngl

    if _state["egl"] is None:
        _state["egl"] = _Egl()
    egl: _Egl = _state["egl"]
    _dpy, _ctx, desc = egl.make_es_context(method)
    errors = []
    for kwargs in ({"require": 200}, {"require": 200, "backend": "egl"}):
        try:
            ctx = moderngl.create_context(**kwargs)
            ctx._gpubackend_desc = desc  # type: ignore[attr-defined]
            return ctx
        except Exception as e:  # noqa: BLE001 - every failure becomes one message
            errors.append(f"moderngl.create_context({kwargs}): {e}")
    raise DriverUnavailable("; ".join(errors))


def _create_standalone() -> Any:
    import moderngl

    errors = []
    for kwargs in ({"backend": "egl"}, {}):
        try:
            return moderngl.create_standalone_context(**kwargs)
        except Exception as e:  # noqa: BLE001
            errors.append(f"create_standalone_context({kwargs}): {e}")
    raise DriverUnavailable("; ".join(errors))


METHODS = ("surfaceless", "device", "default", "standalone")
KIND_OF = {
    "surfaceless": "egl-surfaceless-gles",
    "device": "egl-device-gles",
    "default": "egl-default-gles",
    "standalone": "moderngl-standalone-gl",
}


def gl_context(path: str | None = None) -> Any:
    """The process-wide shared headless GL context (a ``moderngl.Context``), made on first use.

    ``path`` (``"gles2"``, ``"gles3"``, ``"gles31"``) names the tier asking, so that a fault
    injected for that tier (``GPUBACKEND_FAULT``) strikes here; without it only ``KIND@gl``
    faults apply. Raises :class:`DriverUnavailable` when no method works and
    :class:`DriverError` when called from a thread other than the creator.
    """
    faults.on_context(path or "gl")
    with _lock:
        if _state["ctx"] is not None:
            _check_thread()
            return _state["ctx"]
        forced = os.environ.get(GL_CONTEXT_ENV, "").strip().lower()
        if forced and forced not in METHODS:
            raise DriverUnavailable(f"{GL_CONTEXT_ENV}={forced!r}: expected one of {', '.join(METHODS)}")
        methods = (forced,) if forced else METHODS
        errors = []
        for m in methods:
            try:
                ctx = _create_standalone() if m == "standalone" else _create_attached_es(m)
            except ImportError as e:
                raise DriverUnavailable(f"moderngl not importable: {e}") from e
            except Exception as e:  # noqa: BLE001
                errors.append(f"{m}: {e}")
                continue
            _state.update(ctx=ctx, kind=KIND_OF[m], thread=threading.get_ident(),
                          thread_name=threading.current_thread().name)
            _state["errors"] = errors
            return ctx
        raise DriverUnavailable("no GL context: " + "; ".join(errors))


def attach_current_gl_context() -> Any:
    """Adopt the GL context current on this thread (e.g. a glfw window's); later
    :func:`gl_context` calls return it. Its thread becomes the owner."""
    import moderngl

    with _lock:
        try:
            ctx = moderngl.create_context(require=200)
        except Exception as e:  # noqa: BLE001
            raise DriverUnavailable(f"no current GL context to attach to: {e}") from e
        _state.update(ctx=ctx, kind="attached", thread=threading.get_ident(),
                      thread_name=threading.current_thread().name)
        return ctx


def gl_context_thread() -> int | None:
    """The ident of the thread that owns the shared GL context (None before there is one)."""
    return _state["thread"]


def gl_context_kind() -> str:
    """How the current shared GL context was made ("" before any): one of
    ``egl-surfaceless-gles egl-device-gles egl-default-gles moderngl-standalone-gl attached``."""
    return str(_state["kind"])


def gl_context_is_es() -> bool:
    """True when the shared context is OpenGL ES (not desktop GL)."""
    return _state["kind"] in ("egl-surfaceless-gles", "egl-device-gles", "egl-default-gles") or (
        _state["ctx"] is not None and "OpenGL ES" in str(_state["ctx"].info.get("GL_VERSION", ""))
    )


def release_gl_context() -> None:
    """Forget the shared GL context (tests); the next :func:`gl_context` makes a new one."""
    with _lock:
        ctx = _state["ctx"]
        _state.update(ctx=None, kind="", thread=None, thread_name="")
        if ctx is not None:
            try:
                ctx.release()
            except Exception:  # noqa: BLE001
                pass


def kompute_manager(path: str = "vulkan") -> Any:
    """The process-wide ``kp.Manager`` (device 0), made on first use.

    Raises :class:`DriverUnavailable` when ``kp`` is not importable or no Vulkan device exists.
    Calls ``faults.on_context("vulkan")``.
    """
    faults.on_context(path)
    with _lock:
        if _kp_state["mgr"] is not None:
            return _kp_state["mgr"]
        try:
            import kp
        except Exception as e:  # noqa: BLE001
            raise DriverUnavailable(f"kp not importable: {e}") from e
        try:
            mgr = kp.Manager()
        except Exception as e:  # noqa: BLE001
            raise DriverUnavailable(f"kp.Manager() failed (no Vulkan device?): {e}") from e
        _kp_state["mgr"] = mgr
        return mgr
