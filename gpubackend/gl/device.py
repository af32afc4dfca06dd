"""The one layer through which GL paths talk to the driver. Every compile, allocation, draw or
dispatch and readback goes through here, so fault injection (``GPUBACKEND_FAULT``) hits all GL
paths alike and programs are compiled once per distinct source."""

from __future__ import annotations

import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

import numpy as np

from capability_probe import contexts, faults
from capability_probe.errors import DriverError, ShaderCompileError, ShaderLinkError

from ..ops.elementwise import activation_defines  # noqa: F401 - kept importable from here

# llvmpipe (gallivm) ends all loops of a shader invocation after 65535 back-edges in total (one
# counter over every loop, nested or not) and silently skips the remaining iterations, measured on
# Mesa 22.3: fragment kernels keep each fragment's total loop count under LOOP_BUDGET or decline.
LLVMPIPE_LOOP_LIMIT = 65535
LOOP_BUDGET = 60000


# Compiled programs kept per context and cache (``GPUBACKEND_MAX_PROGRAMS``; 0: no bound). Each holds
# driver memory (llvmpipe: its JIT-compiled code), and a session that generates shaders per shape
# (one per Resize size, say) would otherwise grow the cache for as long as the process lives.
DEFAULT_MAX_PROGRAMS = 256
ENV_MAX_PROGRAMS = "GPUBACKEND_MAX_PROGRAMS"


def max_programs() -> int:
    """The program-cache bound now in force (read from the environment on every call)."""
    text = os.environ.get(ENV_MAX_PROGRAMS, "").strip()
    try:
        return max(0, int(text)) if text else DEFAULT_MAX_PROGRAMS
    except ValueError:
        return DEFAULT_MAX_PROGRAMS


class ProgramLRU:
    """Programs by key, most recently used last, at most :func:`max_programs` of them. The oldest
    leave past the bound; ``on_evict(program)`` then arranges its release, which must wait until
    nothing holds it (see :meth:`GLDevice.release_when_unused`): a live segment keeps the program
    objects it draws with, so eviction never takes a program from under it."""

    def __init__(self, on_evict: Callable[[Any], None]):
        self._items: OrderedDict[Hashable, Any] = OrderedDict()
        self._on_evict = on_evict
        self.evicted = 0

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: Hashable) -> Any | None:
        prog = self._items.get(key)
        if prog is not None:
            self._items.move_to_end(key)
            self._trim()  # the bound may have been lowered since the last put
        return prog

    def put(self, key: Hashable, prog: Any) -> None:
        self._items[key] = prog
        self._items.move_to_end(key)
        self._trim()

    def clear(self) -> None:
        """Drop every entry (each released once unused)."""
        while self._items:
            self._on_evict(self._items.popitem(last=False)[1])

    def _trim(self) -> None:
        bound = max_programs()
        while bound and len(self._items) > bound:
            _, old = self._items.popitem(last=False)
            self.evicted += 1
            self._on_evict(old)


def _numbered(src: str, around: int | None = None) -> str:
    lines = src.splitlines()
    lo, hi = (0, len(lines)) if around is None else (max(0, around - 4), min(len(lines), around + 3))
    return "\n".join(f"{i + 1:4d}| {lines[i]}" for i in range(lo, hi))


class GLDevice:
    """The GL context as seen by one path (``key`` names the path for fault injection).

    Programs are cached by source (the :data:`DEFAULT_MAX_PROGRAMS` most recently used) and
    shared by every segment and session of the path on this thread (:meth:`shared`), so a program
    must carry no per-node state: uniforms, sampler units and bindings are set at each draw or dispatch. Everything
    else a segment makes it frees with :meth:`release` when it closes."""

    def __init__(self, key: str):
        self.key = key
        self.context = contexts.gl_record(key)
        self.ctx = self.context.ctx
        self._programs = ProgramLRU(self._evicted)
        # called with each program leaving the cache, for per-program state a path keeps (gles2's VAOs)
        self.on_program_evicted: list[Callable[[Any], None]] = []
        self.state: dict[str, Any] = {}  # per-context objects a path keeps (gles2's quad, gles31's binaries)

    @classmethod
    def shared(cls, key: str) -> GLDevice:
        """This thread's device for path ``key``, made once per context (it dies with it)."""
        record = contexts.gl_record(key)
        dev = record.devices.get(key)
        if dev is None:
            dev = record.devices[key] = cls(key)
        return dev

    def check_thread(self) -> None:
        """Raise :class:`DriverError` unless called on the thread that owns the context (GL calls
        from another thread would reach that thread's own context, or none)."""
        c = self.context
        if not c.on_owner_thread:
            raise DriverError(f"{self.key}: the GL context belongs to thread {c.thread_name!r}; it was used from "
                              f"thread {threading.current_thread().name!r}")
        if not c.alive:
            raise DriverError(f"{self.key}: the GL context of thread {c.thread_name!r} was destroyed "
                              "(its thread ended)")

    def release(self, *objs: Any) -> None:
        """Release GL objects made through this device (any thread; see ``GLContext.release``)."""
        for obj in objs:
            self.context.release(obj)

    def _evicted(self, prog: Any) -> None:
        for hook in self.on_program_evicted:
            hook(prog)
        self.release_when_unused(prog)

    def release_when_unused(self, obj: Any) -> None:
        """Release the moderngl object ``obj`` once nothing refers to it any more (at once if
        nothing does now)."""
        weakref.finalize(obj, self.context.release, obj.mglo)

    @property
    def cached_programs(self) -> int:
        return len(self._programs)

    def compute(self, src: str) -> Any:
        """A compiled compute shader for ``src`` (cached)."""
        key = ("compute", src)
        prog = self._programs.get(key)
        if prog is None:
            faults.on_compile(self.key, "compute")
            prog = self._checked("compute", src, lambda: self.ctx.compute_shader(src))
            self._programs.put(key, prog)
        return prog

    def program(self, vertex: str, fragment: str) -> Any:
        """A linked vertex+fragment program (cached)."""
        key = ("program", vertex, fragment)
        prog = self._programs.get(key)
        if prog is None:
            faults.on_compile(self.key, "fragment")
            faults.on_compile(self.key, "link")
            build = lambda: self.ctx.program(vertex_shader=vertex, fragment_shader=fragment)  # noqa: E731
            prog = self._checked("fragment", fragment, build)
            self._programs.put(key, prog)
        return prog

    def _checked(self, stage: str, src: str, build: Any) -> Any:
        try:
            return build()
        except Exception as exc:  # moderngl.Error carries the driver's log
            log = str(exc)
            line = None
            for token in log.replace("(", ":").split(":"):
                if token.strip().isdigit():
                    line = int(token.strip())
                    break
            kind = ShaderLinkError if "link" in log.lower() and "compile" not in log.lower() else ShaderCompileError
            raise kind(f"{self.key}: {stage} shader failed to build:\n{log}\n"
                       f"source{f' near line {line}' if line else ''}:\n{_numbered(src, line)}") from exc

    def buffer(self, data: bytes | np.ndarray | None = None, reserve: int = 0) -> Any:
        nbytes = reserve if data is None else (data.nbytes if isinstance(data, np.ndarray) else len(data))
        faults.on_alloc(self.key, nbytes)
        if data is None:
            return self.ctx.buffer(reserve=max(int(reserve), 4))
        return self.ctx.buffer(np.ascontiguousarray(data).tobytes() if isinstance(data, np.ndarray) else data)

    def texture(self, size: tuple[int, int], components: int, data: bytes | None = None, dtype: str = "f1") -> Any:
        itemsize = {"f1": 1, "f2": 2, "f4": 4, "u1": 1, "u2": 2, "u4": 4, "i1": 1, "i2": 2, "i4": 4}[dtype]
        faults.on_alloc(self.key, size[0] * size[1] * components * itemsize)
        return self.ctx.texture(size, components, data, dtype=dtype)

    def write(self, target: Any, data: bytes | np.ndarray) -> None:
        """Host->device copy into an existing buffer or texture. Drivers stage the bytes, so this
        can run out of memory at run time like an allocation."""
        raw = np.ascontiguousarray(data).tobytes() if isinstance(data, np.ndarray) else data
        faults.on_alloc(self.key, len(raw))
        target.write(raw)

    def dispatched(self) -> None:
        """Call before each draw or dispatch."""
        faults.on_dispatch(self.key)

    def readback(self, array: np.ndarray) -> np.ndarray:
        """Pass every array read back from the GPU through here."""
        return faults.on_readback(self.key, array)
