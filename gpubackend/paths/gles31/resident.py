"""Device-resident inputs and outputs of a gles31 segment (IOBinding): a tensor stays in a shader
storage buffer in the packed layout (:func:`..compute_kernels.pack`) between runs and moves with
``glCopyBufferSubData``; a caller's texture is read into an input buffer by one compute dispatch,
and a (1, C<=4, H, W) tensor becomes a texture through a pixel-unpack buffer copy (its packed
bytes are exactly an RGBA float image). Nothing crosses to the host."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ...device_tensor import DeviceTensor, GLTextureTensor, check_image_shape, run_resident_steps
from .. import compute_kernels as ck
from ..base import RunStats
from . import Gles31Segment
from . import gl as rawgl

_TEXTURE_TO_BUFFER = """#version 310 es
precision highp float;
precision highp int;
precision highp sampler2D;
layout(local_size_x = 8, local_size_y = 8) in;
uniform sampler2D src;
uniform vec4 mask;
uniform ivec2 size;
#if FP16
layout(std430, binding = 0) writeonly buffer Out { uvec2 o[]; };
#else
layout(std430, binding = 0) writeonly buffer Out { vec4 o[]; };
#endif
void main() {
    ivec2 p = ivec2(gl_GlobalInvocationID.xy);
    if (p.x >= size.x || p.y >= size.y) return;
    vec4 v = texelFetch(src, p, 0) * mask;
#if FP16
    o[p.y * size.x + p.x] = uvec2(packHalf2x16(v.xy), packHalf2x16(v.zw));
#else
    o[p.y * size.x + p.x] = v;
#endif
}
"""


class Gles31Tensor(DeviceTensor):
    """A tensor in one shader storage buffer, packed layout, float32 or float16 storage."""

    path = "gles31"

    def __init__(self, device: Any, precision: str, shape: tuple[int, ...], call: Callable[..., Any] | None = None):
        super().__init__(shape, call)
        self.device = device
        self.precision = precision
        self.nbytes = ck.storage_bytes(self.shape, precision)
        self.buffer = device.buffer(reserve=self.nbytes)
        self._texture: Any = None

    def texture(self) -> Any:
        """A W x H RGBA float texture (RGBA16F at fp16) holding a (1, C<=4, H, W) tensor, channel
        c in component c; copied from the buffer on the device at each call."""
        self._check_open()
        return self._call(self._to_texture)

    def _to_texture(self) -> Any:
        _, _, h, w = check_image_shape(self.shape, "a tensor given as a texture")
        dtype = "f2" if self.precision == "fp16" else "f4"
        if self._texture is None:
            self._texture = self.device.texture((w, h), 4, None, dtype=dtype)
        self.device.ctx.memory_barrier()  # shader and copy writes to the buffer are visible to the unpack
        self._texture.write(self.buffer)  # GL_PIXEL_UNPACK_BUFFER: a copy on the device
        return self._texture

    def download(self, stats: RunStats) -> np.ndarray:
        self.device.ctx.memory_barrier()
        dtype = np.float16 if self.precision == "fp16" else np.float32
        raw = self.device.readback(np.frombuffer(self.buffer.read(size=self.nbytes), dtype))
        stats.download(self.nbytes)
        return ck.unpack(raw, self.shape)

    def release(self) -> None:
        self.device.release(self.buffer, self._texture)


def _texture_to_buffer(seg: Gles31Segment, tensor: GLTextureTensor, buf: Any, prec: str) -> None:
    fp16 = prec == "fp16"
    header = f"#version 310 es\n#define FP16 {int(fp16)}\n"
    cs = seg.device.compute(_TEXTURE_TO_BUFFER.replace("#version 310 es\n", header))
    _, c, h, w = tensor.shape
    tensor.gl.use(location=0)
    cs["src"].value = 0
    cs["mask"].value = tuple(1.0 if i < c else 0.0 for i in range(4))
    cs["size"].value = (w, h)
    seg.gl.bind_buffer_base(rawgl.SHADER_STORAGE_BUFFER, 0, buf.glo)
    seg.device.dispatched()
    cs.run(-(-w // 8), -(-h // 8))
    seg.gl.memory_barrier(rawgl.SHADER_STORAGE_BARRIER_BIT | rawgl.BUFFER_UPDATE_BARRIER_BIT
                      | rawgl.TEXTURE_FETCH_BARRIER_BIT)  # TEXX kernels read inputs as textures


def copy_in(seg: Gles31Segment, name: str, tensor: DeviceTensor) -> bool:
    """Write ``tensor`` into the input buffer of ``name`` on the device; False when it cannot be
    done there (another context or precision, an input the kernels read as weights)."""
    buf = seg._input_buffers.get(name)  # noqa: SLF001
    shape = tuple(seg.shapes[name])
    if buf is None or any(n == name for n, *_ in seg._transformed) or tuple(tensor.shape) != shape:  # noqa: SLF001
        return False
    if isinstance(tensor, Gles31Tensor):
        if tensor.device.context is not seg.device.context or tensor.precision != seg.storage_of(name):
            return False
        seg.device.ctx.copy_buffer(buf, tensor.buffer, size=tensor.nbytes)
        return True
    if isinstance(tensor, GLTextureTensor) and tensor.gl.ctx is seg.device.ctx:
        _texture_to_buffer(seg, tensor, buf, seg.storage_of(name))
        return True
    return False


def copy_out(seg: Gles31Segment, name: str, target: DeviceTensor | None) -> Gles31Tensor:
    shape = tuple(seg.shapes[name])
    prec = seg.storage_of(name)
    if not (isinstance(target, Gles31Tensor) and target.precision == prec and target.shape == shape
            and target.device.context is seg.device.context and not target._closed):  # noqa: SLF001
        target = Gles31Tensor(seg.device, prec, shape)
    seg.device.ctx.copy_buffer(target.buffer, seg._output_buffers[name], size=target.nbytes)  # noqa: SLF001
    return target


def run_resident(seg: Gles31Segment, feeds: dict[str, Any], stats: RunStats,
                 device_outputs: dict[str, Any]) -> dict[str, Any]:
    seg.device.check_thread()
    return run_resident_steps(seg, feeds, stats, device_outputs, copy_in, copy_out)
