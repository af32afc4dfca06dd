"""Device-resident inputs and outputs of a gles3 segment (IOBinding): a tensor stays in float
textures in the path's layout (:mod:`.layout`) between runs, and moves between a tensor and a
segment's storage by one full-screen copy draw per pass (nothing crosses to the host)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ...device_tensor import DeviceTensor, GLTextureTensor, run_resident_steps
from ...errors import GpuBackendError
from ...gl.device import GLDevice
from ..base import RunStats
from .kernels import GLSL_VERSION, vertex_source
from .layout import TexLayout, unpack
from .runtime import NEAREST, Gles3Segment, Storage


class Gles3Tensor(DeviceTensor):
    """A tensor in gles3 textures: ``layout.planes`` RGBA float textures (RGBA16F at fp16)."""

    path = "gles3"

    def __init__(self, dev: GLDevice, layout: TexLayout, dtype: str, shape: tuple[int, ...],
                 call: Callable[..., Any] | None = None):
        super().__init__(shape, call)
        self.dev = dev
        self.layout = layout
        self.gl_dtype = dtype
        textures = []
        for _ in range(layout.planes):
            t = dev.texture(layout.size, 4, None, dtype=dtype)
            t.filter = (NEAREST, NEAREST)
            textures.append(t)
        self.storage = Storage(layout, textures, dev.ctx.framebuffer(color_attachments=textures), dtype=dtype)

    def texture(self) -> Any:
        """The texture itself when the tensor is one RGBA image: shape (1, C, H, W) with C <= 4
        (a W x H texture, channel c in component c, the rest 0); valid until the next run that
        writes this tensor."""
        lay = self.layout
        if lay.planes != 1 or lay.tiles != 1:
            raise GpuBackendError(f"a gles3 tensor of shape {list(self.shape)} is stored in {lay.planes} "
                                   f"texture(s) of {lay.tiles} tiles, not one image; only (1, C<=4, H, W) is")
        return self.storage.textures[0]

    def download(self, stats: RunStats) -> np.ndarray:
        lay = self.layout
        planes = []
        for p in range(lay.planes):
            raw = self.storage.fbo.read(components=4, dtype="f4", attachment=p)
            arr = self.dev.readback(np.frombuffer(raw, np.float32).reshape(lay.size[1], lay.size[0], 4))
            stats.download(arr.nbytes)
            planes.append(arr)
        return unpack(planes, lay).reshape(self.shape)

    def release(self) -> None:
        self.dev.release(self.storage.fbo, *self.storage.textures)


def _copy_program(dev: GLDevice, planes: int) -> Any:
    """Plane p of the draw target = texel (x, y) of sampler S<p>, times the channel mask M<p>."""
    decls = "\n".join(f"uniform sampler2D S{p};\nuniform vec4 M{p};\nlayout(location = {p}) out vec4 o_{p};"
                      for p in range(planes))
    body = "\n".join(f"    o_{p} = texelFetch(S{p}, c, 0) * M{p};" for p in range(planes))
    frag = (f"#version {GLSL_VERSION}\nprecision highp float;\nprecision highp int;\nprecision highp sampler2D;\n"
            f"{decls}\nvoid main() {{\n    ivec2 c = ivec2(gl_FragCoord.xy);\n{body}\n}}\n")
    vert = vertex_source()
    return dev.program(vert, frag)


def _copy(dev: GLDevice, sources: list[Any], masks: list[tuple[float, ...]], dst: Storage) -> None:
    """One draw writing every plane of ``dst`` from the textures ``sources`` (same size)."""
    prog = _copy_program(dev, len(sources))
    vaos = dev.state.setdefault("gles3.copy_vaos", {})
    vao = vaos.get(id(prog))
    if vao is None:
        vao = vaos[id(prog)] = dev.ctx.vertex_array(prog, [])
    for p, (tex, mask) in enumerate(zip(sources, masks)):
        tex.use(location=p)
        prog[f"S{p}"].value = p
        prog[f"M{p}"].value = mask
    dst.fbo.use()
    dst.fbo.viewport = (0, 0, *dst.layout.size)
    dev.dispatched()
    vao.render(mode=4, vertices=3)


def _same_context(dev: GLDevice, tensor: DeviceTensor) -> bool:
    if isinstance(tensor, Gles3Tensor):
        return tensor.dev.context is dev.context
    if isinstance(tensor, GLTextureTensor):
        return tensor.gl.ctx is dev.ctx
    return False


def copy_in(seg: Gles3Segment, name: str, tensor: DeviceTensor) -> bool:
    """Write ``tensor`` into the input storage of ``name`` on the device; False if it cannot be
    done there (another context, layout or precision: the caller goes through the host)."""
    lay, st = seg.layouts[name], seg.storage[name]
    if not _same_context(seg.dev, tensor) or tuple(tensor.shape) != tuple(seg.shapes[name]):
        return False
    if isinstance(tensor, Gles3Tensor):
        if tensor.layout != lay:
            return False
        _copy(seg.dev, tensor.storage.textures, [(1.0, 1.0, 1.0, 1.0)] * lay.planes, st)
        return True
    if isinstance(tensor, GLTextureTensor) and lay.planes == 1 and lay.tiles == 1:
        c = tensor.shape[1]
        _copy(seg.dev, [tensor.gl], [tuple(1.0 if i < c else 0.0 for i in range(4))], st)
        return True
    return False


def copy_out(seg: Gles3Segment, name: str, target: DeviceTensor | None) -> Gles3Tensor:
    """The segment output ``name`` copied into ``target`` when it fits, else into a new tensor."""
    lay = seg.layouts[name]
    dtype = seg.storage_dtype.get(name, seg.dtype)  # RGBA32F where a precision plan keeps it
    if not (isinstance(target, Gles3Tensor) and target.layout == lay and target.gl_dtype == dtype
            and target.dev.context is seg.dev.context and not target._closed):
        target = Gles3Tensor(seg.dev, lay, dtype, seg.shapes[name])
    _copy(seg.dev, seg.storage[name].textures, [(1.0, 1.0, 1.0, 1.0)] * lay.planes, target.storage)
    target.shape = tuple(seg.shapes[name])
    return target


def run_resident(seg: Gles3Segment, feeds: dict[str, Any], stats: RunStats,
                 device_outputs: dict[str, Any]) -> dict[str, Any]:
    seg.dev.check_thread()
    return run_resident_steps(seg, feeds, stats, device_outputs, copy_in, copy_out)
