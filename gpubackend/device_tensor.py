"""Device-resident tensors: inputs and outputs that stay on a GPU path's device across runs (what
onnxruntime's ``OrtValue`` on a device and ``IOBinding`` give).

A :class:`DeviceTensor` is made by a session run (an output asked for on the device), or from an
existing GL texture (:meth:`gpubackend.Session.tensor_from_gl_texture`). Fed back to a run, a
tensor of the segment's own path is copied device-to-device into the segment's input storage (a
draw, a buffer copy or a Kompute tensor copy), so ``RunStats`` counts no upload or download for
it; a tensor of another device goes through the host and those transfers are counted.

Every method that touches the device runs where the tensor's objects live (the session's GPU
thread, or the thread whose GL context made them): ``call`` is that session's dispatcher.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .errors import GpuBackendError, InputError
from .paths.base import RunStats


def _direct(fn: Callable[..., Any], *args: Any) -> Any:
    return fn(*args)


class DeviceTensor:
    """A float32 tensor of ``shape`` held by the device of ``path`` ("gles3", "gles31", "vulkan",
    or "gl-texture" for a caller's texture). ``numpy()`` copies it to the host; ``texture()``
    gives a GL texture holding it where the path can (see the subclass)."""

    path: str = ""

    def __init__(self, shape: tuple[int, ...], call: Callable[..., Any] | None = None):
        self.shape = tuple(int(d) for d in shape)
        self.dtype = np.dtype(np.float32)
        self._call = call or _direct
        self._closed = False

    # ---- the user's view --------------------------------------------------------------------
    def numpy(self) -> np.ndarray:
        """A host copy (a download; outside any run's statistics)."""
        self._check_open()
        return self._call(self.download, RunStats())

    def texture(self) -> Any:
        """A moderngl texture holding this tensor, where the path has one (see subclasses)."""
        raise GpuBackendError(f"a {self.path} device tensor has no GL texture form")

    def device_name(self) -> str:
        return self.path

    def close(self) -> None:
        """Free the device objects. Safe to call twice."""
        if not self._closed:
            self._closed = True
            self._call(self.release)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(path={self.path!r}, shape={self.shape}{', closed' if self._closed else ''})"

    # ---- for segments (called on the device's thread) ----------------------------------------
    def download(self, stats: RunStats) -> np.ndarray:
        """The tensor as a host array, counted in ``stats`` as downloads."""
        raise NotImplementedError

    def release(self) -> None:  # noqa: B027 - optional
        """Free the device objects (on the device's thread)."""

    def host(self, stats: RunStats) -> np.ndarray:
        """:meth:`download` from any thread (marshalled to the device's thread)."""
        self._check_open()
        return self._call(self.download, stats)

    def _check_open(self) -> None:
        if self._closed:
            raise InputError(f"{self!r} was closed")


class GLTextureTensor(DeviceTensor):
    """A caller's GL texture (a moderngl ``Texture`` of the session's GL context) viewed as a
    (1, C, H, W) tensor, C at most 4 and at most the texture's components: channel ``c`` of
    pixel (x, y) is texel (x, y)'s component ``c`` (8-bit textures read as normalised [0, 1]).
    Row 0 of the tensor is texture row 0 (GL's first row, the bottom of an image as GL draws it)."""

    path = "gl-texture"

    def __init__(self, texture: Any, shape: tuple[int, ...], call: Callable[..., Any] | None = None):
        super().__init__(shape, call)
        n, c, h, w = check_image_shape(self.shape, "a GL texture input")
        if tuple(texture.size) != (w, h):
            raise InputError(f"the texture is {texture.size[0]}x{texture.size[1]} (WxH); the input {list(shape)} "
                             f"needs {w}x{h}")
        if c > texture.components:
            raise InputError(f"the texture has {texture.components} components; the input needs {c} channels")
        self.gl = texture
        self.context: Any = None  # capability_probe.contexts.GLContext of the texture, if known

    def texture(self) -> Any:
        return self.gl

    def download(self, stats: RunStats) -> np.ndarray:
        tex = self.gl
        fbo = tex.ctx.framebuffer(color_attachments=[tex])
        try:
            dtype = "f1" if tex.dtype == "f1" else "f4"
            raw = fbo.read(components=tex.components, dtype=dtype)
        finally:
            fbo.release()
        stats.download(len(raw))
        h, w = self.shape[2], self.shape[3]
        arr = np.frombuffer(raw, np.uint8 if dtype == "f1" else np.float32).reshape(h, w, tex.components)
        arr = arr.astype(np.float32) / 255.0 if dtype == "f1" else arr
        return np.ascontiguousarray(arr[:, :, : self.shape[1]].transpose(2, 0, 1)[None])


def check_image_shape(shape: tuple[int, ...], what: str) -> tuple[int, int, int, int]:
    """``shape`` as (1, C, H, W) with C <= 4 (what one RGBA texture holds), else InputError."""
    if len(shape) != 4 or shape[0] != 1 or not 1 <= shape[1] <= 4:
        raise InputError(f"{what} must have shape (1, C, H, W) with C at most 4 (one RGBA texture); got {list(shape)}")
    return shape  # type: ignore[return-value]


DeviceOutputs = dict[str, "DeviceTensor | None"]

def run_resident_steps(seg: Any, feeds: dict[str, Any], stats: RunStats, device_outputs: dict[str, Any],
                       copy_in: Callable[[Any, str, DeviceTensor], bool],
                       copy_out: Callable[[Any, str, Any], Any]) -> dict[str, Any]:
    """A GL segment's upload / execute / read steps with device tensors: each feed that
    ``copy_in`` places on the device directly skips the upload, and each output named in
    ``device_outputs`` is copied on the device by ``copy_out`` instead of being read back."""
    host: dict[str, np.ndarray] = {}
    for name in seg.inputs:
        value = feeds[name]
        if isinstance(value, DeviceTensor):
            if not copy_in(seg, name, value):
                host[name] = value.host(stats)
        else:
            host[name] = value
    seg._upload(host, stats)  # noqa: SLF001 - the segment's own upload step
    seg._execute(stats)  # noqa: SLF001
    out: dict[str, Any] = {}
    for name in seg.outputs:
        if name in device_outputs:
            out[name] = copy_out(seg, name, device_outputs[name])
        else:
            out[name] = seg._read(name, stats)  # noqa: SLF001
    return out


__all__ = ["DeviceTensor", "GLTextureTensor", "check_image_shape", "run_resident_steps"]
