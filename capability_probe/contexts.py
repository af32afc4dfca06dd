"""The one place GL and Vulkan contexts are made.

GL: one headless OpenGL ES context per thread, made through EGL with no window system on the
thread's first use, trying in order

1. ``egl-surfaceless-gles``: ``eglGetPlatformDisplayEXT(EGL_PLATFORM_SURFACELESS_MESA)``,
2. ``egl-device-gles``: ``eglQueryDevicesEXT`` + ``EGL_PLATFORM_DEVICE_EXT``,
3. ``egl-default-gles``: ``eglGetDisplay(EGL_DEFAULT_DISPLAY)``,
4. ``moderngl-standalone-gl``: moderngl's own standalone (desktop GL core) context, which also
   compiles ``#version 100`` / ``300 es`` / ``310 es`` sources,

then ``moderngl.create_context()`` attaches to it. ``GPUBACKEND_GL_CONTEXT`` (one of
``surfaceless device default standalone``) forces a single method (tests use it).
``attach_current_gl_context()`` adopts whatever context is current instead (the demo's window).

Threading rule: a context is current on, and belongs to, the thread that made it, so each thread
gets its own (nothing is shared between them: objects made in one are not visible in another).
When a thread ends its context is destroyed on that thread (:class:`GLContext` ``destroy``), so
a thread pool or a worker per session leaves nothing behind. Releasing a GL object from another
thread is queued and done by the owner thread (:meth:`GLContext.release`).

Vulkan: :func:`kompute_manager` makes one ``kp.Manager`` per process, lazily.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
import threading
from typing import Any

from . import faults
from .errors import DriverUnavailable

GL_CONTEXT_ENV = "GPUBACKEND_GL_CONTEXT"
SOFTWARE_THREADS_ENV = "GPUBACKEND_SOFTWARE_THREADS"
LP_THREADS_ENV = "LP_NUM_THREADS"  # read by Mesa's llvmpipe and lavapipe when their screen is made

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
_state: dict[str, Any] = {"egl": None, "last_kind": "", "errors": []}
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
        L.eglDestroyContext.restype = ctypes.c_uint
        L.eglDestroyContext.argtypes = [vp, vp]

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


class GLContext:
    """One thread's GL context: the ``moderngl.Context`` (``ctx``), how it was made (``kind``),
    its owner thread, and what the layers above keep per context (``devices``: the GL paths'
    program caches live there, so they die with the context)."""

    def __init__(self, ctx: Any, kind: str, egl: tuple[Any, int, int] | None = None) -> None:
        self.ctx = ctx
        self.kind = kind
        self.thread = threading.get_ident()
        self.thread_name = threading.current_thread().name
        self.alive = True
        self.devices: dict[str, Any] = {}
        self._egl = egl  # (binding, display, context) when we made the EGL context ourselves
        self._pending: list[Any] = []
        self._pending_lock = threading.Lock()

    @property
    def on_owner_thread(self) -> bool:
        return threading.get_ident() == self.thread

    def release(self, obj: Any) -> None:
        """Release a moderngl object of this context: now on the owner thread, else at the owner's
        next use (GL calls only reach the context current on the calling thread, so releasing it
        here could delete another context's object of the same name). Nothing once destroyed:
        destroying the context freed it."""
        if obj is None or not self.alive:
            return
        if self.on_owner_thread:
            self._drain()
            obj.release()
        else:
            with self._pending_lock:
                self._pending.append(obj)

    def _drain(self) -> None:
        with self._pending_lock:
            pending, self._pending = self._pending, []
        for obj in pending:
            try:
                obj.release()
            except Exception:  # noqa: BLE001 - a failed release must not stop the others
                pass

    def destroy(self) -> None:
        """Free the context and everything made in it. On the owner thread only (EGL cannot
        unbind a context current on another thread); elsewhere it is just marked dead."""
        if not self.alive:
            return
        self.alive = False
        self.devices.clear()
        with self._pending_lock:
            self._pending = []
        if not self.on_owner_thread:
            return
        try:
            self.ctx.release()
        except Exception:  # noqa: BLE001
            pass
        if self._egl is not None:
            egl, dpy, handle = self._egl
            egl.lib.eglMakeCurrent(dpy, EGL_NO_SURFACE, EGL_NO_SURFACE, EGL_NO_CONTEXT)
            egl.lib.eglDestroyContext(dpy, handle)


class _ThreadSlot:
    """Holds a thread's :class:`GLContext` in thread-local storage; CPython drops a thread's
    locals on that thread as it ends, so ``__del__`` destroys the context on its owner."""

    def __init__(self, record: GLContext) -> None:
        self.record = record

    def __del__(self) -> None:
        if sys.is_finalizing():  # interpreter teardown: the driver may already be gone
            return
        try:
            self.record.destroy()
        except Exception:  # noqa: BLE001 - never raise from a finaliser
            pass


_local = threading.local()


def software_driver_threads() -> int | None:
    """The worker threads asked of Mesa's software drivers (llvmpipe, lavapipe) for this
    process: ``LP_NUM_THREADS`` where the user set it; else ``GPUBACKEND_SOFTWARE_THREADS`` (a
    number, or ``off`` to leave Mesa's default of one per CPU); else twice the CPUs this process
    may run on. ``None``: Mesa's own default."""
    if os.environ.get(LP_THREADS_ENV, "").strip():
        return None
    want = os.environ.get(SOFTWARE_THREADS_ENV, "").strip().lower()
    if want in ("off", "0", "no", "false"):
        return None
    if want.isdigit():
        return int(want)
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return 2 * cpus


def configure_software_driver_threads() -> None:
    """Before the process's first GL display or Vulkan instance (Mesa reads ``LP_NUM_THREADS``
    when it makes a software screen, once per process): set ``LP_NUM_THREADS`` to
    :func:`software_driver_threads` unless the user set it. With Mesa 22.3's default of one compute
    worker per CPU, a 2-CPU machine ran the compute paths' dispatches on about one core (process
    CPU time / wall time 1.0) and a process's p50 varied 2x from run to run; with twice as many
    workers they used 1.6-1.8 cores: selfie p50 gles31 60-66 -> 38-43 ms, vulkan 104-111 ->
    65-66 ms, three processes each (docs/performance.md). gles3's fragment pipeline did not change.
    A hardware driver ignores the variable."""
    if _state.get("lp_threads_done"):
        return
    _state["lp_threads_done"] = True
    threads = software_driver_threads()
    if threads is not None:
        os.environ[LP_THREADS_ENV] = str(threads)


def _create_attached_es(method: str) -> GLContext:
    import moderngl  # noqa: F401 - its ImportError is reported as such by gl_record

    configure_software_driver_threads()
    if _state["egl"] is None:
        _state["egl"] = _Egl()
    egl: _Egl = _state["egl"]
    dpy, handle, desc = egl.make_es_context(method)
    try:
        ctx = _attach_moderngl()
    except DriverUnavailable:
        egl.lib.eglMakeCurrent(dpy, EGL_NO_SURFACE, EGL_NO_SURFACE, EGL_NO_CONTEXT)
        egl.lib.eglDestroyContext(dpy, handle)
        raise
    ctx._gpubackend_desc = desc
    return GLContext(ctx, KIND_OF[method], (egl, dpy, handle))


def _attach_moderngl() -> Any:
    """A ``moderngl.Context`` over the context current on this thread. ``init_context`` loads
    through EGL's current context; ``create_context`` detects through GLX once a default context
    exists, which finds nothing on a thread whose context EGL made (measured with moderngl 5.13)."""
    import moderngl

    errors = []
    try:
        moderngl.init_context()
        ctx = moderngl.get_context()
        if ctx.version_code >= 200:
            return ctx
        errors.append(f"moderngl.init_context(): version {ctx.version_code}")
    except Exception as e:  # noqa: BLE001 - every failure becomes one message
        errors.append(f"moderngl.init_context(): {e}")
    try:
        return moderngl.create_context(require=200)
    except Exception as e:  # noqa: BLE001
        errors.append(f"moderngl.create_context(require=200): {e}")
    raise DriverUnavailable("; ".join(errors))


def _create_standalone() -> GLContext:
    import moderngl

    configure_software_driver_threads()
    errors = []
    for kwargs in ({"backend": "egl"}, {}):
        try:
            return GLContext(moderngl.create_standalone_context(**kwargs), KIND_OF["standalone"])
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


def _current() -> GLContext | None:
    slot = getattr(_local, "slot", None)
    if slot is None or not slot.record.alive:
        return None
    return slot.record


def _adopt(record: GLContext) -> GLContext:
    _local.slot = _ThreadSlot(record)
    _state["last_kind"] = record.kind
    return record


def gl_record(path: str | None = None) -> GLContext:
    """The calling thread's GL context record, made on its first use (see :func:`gl_context`)."""
    faults.on_context(path or "gl")
    record = _current()
    if record is not None:
        record._drain()
        return record
    forced = os.environ.get(GL_CONTEXT_ENV, "").strip().lower()
    if forced and forced not in METHODS:
        raise DriverUnavailable(f"{GL_CONTEXT_ENV}={forced!r}: expected one of {', '.join(METHODS)}")
    methods = (forced,) if forced else METHODS
    errors = []
    with _lock:  # EGL display setup and moderngl's module state are process-wide
        for m in methods:
            try:
                record = _create_standalone() if m == "standalone" else _create_attached_es(m)
            except ImportError as e:
                raise DriverUnavailable(f"moderngl not importable: {e}") from e
            except Exception as e:  # noqa: BLE001
                errors.append(f"{m}: {e}")
                continue
            _state["errors"] = errors
            return _adopt(record)
    raise DriverUnavailable("no GL context: " + "; ".join(errors))


def gl_context(path: str | None = None) -> Any:
    """The calling thread's headless GL context (a ``moderngl.Context``), made on first use.

    ``path`` (``"gles2"``, ``"gles3"``, ``"gles31"``) names the tier asking, so that a fault
    injected for that tier (``GPUBACKEND_FAULT``) strikes here; without it only ``KIND@gl``
    faults apply. Raises :class:`DriverUnavailable` when no method works.
    """
    return gl_record(path).ctx


def attach_current_gl_context() -> Any:
    """Adopt the GL context current on this thread (e.g. a glfw window's); later
    :func:`gl_context` calls on this thread return it (the window system keeps owning it)."""
    with _lock:
        try:
            ctx = _attach_moderngl()
        except DriverUnavailable as e:
            raise DriverUnavailable(f"no current GL context to attach to: {e}") from e
        old = _current()
        if old is not None:
            old.destroy()
        return _adopt(GLContext(ctx, "attached")).ctx


def gl_context_thread() -> int | None:
    """Always None: no thread owns GL for the whole process any more (each thread has its own
    context), so a caller may use GL from any thread. Kept for code written for one context."""
    return None


def gl_context_kind() -> str:
    """How this thread's GL context was made (else the last one made in any thread; "" before
    any): one of ``egl-surfaceless-gles egl-device-gles egl-default-gles moderngl-standalone-gl
    attached``."""
    record = _current()
    return record.kind if record is not None else str(_state["last_kind"])


def gl_context_is_es() -> bool:
    """True when this thread's context is OpenGL ES (not desktop GL)."""
    record = _current()
    kind = record.kind if record is not None else _state["last_kind"]
    return kind in ("egl-surfaceless-gles", "egl-device-gles", "egl-default-gles") or (
        record is not None and "OpenGL ES" in str(record.ctx.info.get("GL_VERSION", ""))
    )


def release_gl_context() -> None:
    """Destroy this thread's GL context (tests; a thread's own end does it too); the next
    :func:`gl_context` on this thread makes a new one."""
    record = _current()
    _local.slot = None
    if record is not None:
        record.destroy()


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
        configure_software_driver_threads()
        try:
            mgr = kp.Manager()
        except Exception as e:  # noqa: BLE001
            raise DriverUnavailable(f"kp.Manager() failed (no Vulkan device?): {e}") from e
        _kp_state["mgr"] = mgr
        return mgr
