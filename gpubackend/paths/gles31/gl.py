"""The few raw GL entry points the compute path calls through ctypes on the current context:
dispatch with plain program/buffer ids (so programs loaded from a binary need no moderngl
wrapper) and program binaries (``glGetProgramBinary`` / ``glProgramBinary``)."""

from __future__ import annotations

import ctypes
import ctypes.util
import hashlib
from typing import Any

SHADER_STORAGE_BUFFER = 0x90D2
UNIFORM_BUFFER = 0x8A11
SHADER_STORAGE_BARRIER_BIT = 0x2000
BUFFER_UPDATE_BARRIER_BIT = 0x0200
LINK_STATUS = 0x8B82
PROGRAM_BINARY_LENGTH = 0x8741
NUM_PROGRAM_BINARY_FORMATS = 0x87FE
PROGRAM_BINARY_FORMATS = 0x87FF
PROGRAM_BINARY_RETRIEVABLE_HINT = 0x8257
VENDOR, RENDERER, VERSION = 0x1F00, 0x1F01, 0x1F02
TEXTURE_BUFFER = 0x8C2A
MAX_TEXTURE_BUFFER_SIZE = 0x8C2B
TEXTURE0 = 0x84C0
RGBA32F = 0x8814
RG32UI = 0x823C
TEXTURE_FETCH_BARRIER_BIT = 0x0008

_u, _i, _p = ctypes.c_uint, ctypes.c_int, ctypes.c_void_p
_SIGNATURES: dict[str, tuple[Any, list[Any]]] = {
    "glUseProgram": (None, [_u]),
    "glBindBufferBase": (None, [_u, _u, _u]),
    "glDispatchCompute": (None, [_u, _u, _u]),
    "glMemoryBarrier": (None, [_u]),
    "glCreateProgram": (_u, []),
    "glDeleteProgram": (None, [_u]),
    "glGetProgramiv": (None, [_u, _u, ctypes.POINTER(_i)]),
    "glGetProgramBinary": (None, [_u, _i, ctypes.POINTER(_i), ctypes.POINTER(_u), _p]),
    "glProgramBinary": (None, [_u, _u, _p, _i]),
    "glProgramParameteri": (None, [_u, _u, _i]),
    "glGetIntegerv": (None, [_u, ctypes.POINTER(_i)]),
    "glGetString": (ctypes.c_char_p, [_u]),
    "glGetError": (_u, []),
    "glFinish": (None, []),
    "glGenTextures": (None, [_i, ctypes.POINTER(_u)]),
    "glDeleteTextures": (None, [_i, ctypes.POINTER(_u)]),
    "glBindTexture": (None, [_u, _u]),
    "glActiveTexture": (None, [_u]),
    "glTexBuffer": (None, [_u, _u, _u]),
}


class GL:
    """Function pointers resolved through ``eglGetProcAddress`` (Mesa returns core functions
    too), else from libGLESv2 / libGL."""

    def __init__(self) -> None:
        self._procs: dict[str, Any] = {}
        get_proc = None
        for name in ("libEGL.so.1", ctypes.util.find_library("EGL")):
            if name:
                try:
                    egl = ctypes.CDLL(name)
                    egl.eglGetProcAddress.restype = ctypes.c_void_p
                    egl.eglGetProcAddress.argtypes = [ctypes.c_char_p]
                    get_proc = egl.eglGetProcAddress
                    break
                except OSError:
                    continue
        libs = []
        for name in ("libGLESv2.so.2", "libGL.so.1"):
            try:
                libs.append(ctypes.CDLL(name))
            except OSError:
                pass
        for fn, (res, args) in _SIGNATURES.items():
            addr = get_proc(fn.encode()) if get_proc else None
            if not addr:
                for lib in libs:
                    f = getattr(lib, fn, None)
                    if f is not None:
                        addr = ctypes.cast(f, ctypes.c_void_p).value
                        break
            if addr:
                self._procs[fn] = ctypes.CFUNCTYPE(res, *args)(addr)
        missing = [f for f in ("glUseProgram", "glBindBufferBase", "glDispatchCompute", "glMemoryBarrier")
                   if f not in self._procs]
        if missing:
            raise RuntimeError(f"GL entry points not found: {', '.join(missing)}")
        self.use_program = self._procs["glUseProgram"]
        self.bind_buffer_base = self._procs["glBindBufferBase"]
        self.dispatch_compute = self._procs["glDispatchCompute"]
        self.memory_barrier = self._procs["glMemoryBarrier"]

    def has(self, fn: str) -> bool:
        return fn in self._procs

    def __getattr__(self, fn: str) -> Any:
        try:
            return self._procs[fn]
        except KeyError:
            raise AttributeError(fn) from None

    # ---- buffer textures ----------------------------------------------------------------------
    def max_texture_buffer_texels(self) -> int:
        """GL_MAX_TEXTURE_BUFFER_SIZE, or 0 where the driver has no buffer textures."""
        if not all(self.has(f) for f in ("glTexBuffer", "glGenTextures", "glBindTexture", "glActiveTexture",
                                          "glGetIntegerv", "glGetError")):
            return 0
        n = _i(0)
        self.glGetIntegerv(MAX_TEXTURE_BUFFER_SIZE, ctypes.byref(n))
        self.glGetError()  # clear a GL_INVALID_ENUM where the limit is unknown
        return max(0, n.value)

    def buffer_texture(self, buffer: int, internal_format: int = RGBA32F) -> int:
        """A new buffer texture over the whole of ``buffer`` (no copy: it reads the buffer)."""
        tex = _u(0)
        self.glGenTextures(1, ctypes.byref(tex))
        self.glBindTexture(TEXTURE_BUFFER, tex.value)
        self.glTexBuffer(TEXTURE_BUFFER, internal_format, buffer)
        self.glBindTexture(TEXTURE_BUFFER, 0)
        return int(tex.value)

    def delete_texture(self, tex: int) -> None:
        t = _u(tex)
        self.glDeleteTextures(1, ctypes.byref(t))

    # ---- program binaries ---------------------------------------------------------------------
    def binary_formats(self) -> list[int]:
        if not all(self.has(f) for f in ("glGetProgramBinary", "glProgramBinary", "glGetIntegerv")):
            return []
        n = _i(0)
        self.glGetIntegerv(NUM_PROGRAM_BINARY_FORMATS, ctypes.byref(n))
        if n.value <= 0:
            return []
        arr = (_i * n.value)()
        self.glGetIntegerv(PROGRAM_BINARY_FORMATS, arr)
        return list(arr)

    def fingerprint(self) -> str:
        parts = []
        for what in (VENDOR, RENDERER, VERSION):
            s = self.glGetString(what) if self.has("glGetString") else None
            parts.append(s.decode(errors="replace") if s else "?")
        parts.append(",".join(map(str, self.binary_formats())))
        text = "|".join(parts)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def get_binary(self, program: int) -> tuple[int, bytes] | None:
        length = _i(0)
        self.glGetProgramiv(program, PROGRAM_BINARY_LENGTH, ctypes.byref(length))
        if length.value <= 0:
            return None
        buf = ctypes.create_string_buffer(length.value)
        written, fmt = _i(0), _u(0)
        self.glGetProgramBinary(program, length.value, ctypes.byref(written), ctypes.byref(fmt), buf)
        if written.value <= 0:
            return None
        return fmt.value, buf.raw[:written.value]

    def load_binary(self, fmt: int, data: bytes) -> int | None:
        """A linked program from a binary, or None if the driver rejects it (then it is deleted)."""
        prog = self.glCreateProgram()
        self.glProgramBinary(prog, fmt, data, len(data))
        ok = _i(0)
        self.glGetProgramiv(prog, LINK_STATUS, ctypes.byref(ok))
        if not ok.value:
            self.glDeleteProgram(prog)
            self.glGetError()  # clear a GL_INVALID_ENUM from an unknown format
            return None
        return int(prog)
