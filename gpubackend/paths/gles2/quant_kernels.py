"""gles2 kernels for QuantizeLinear and DequantizeLinear on activations, added to
``kernels.REGISTRY`` (the role of ``shaders/gles3/quantize.frag`` and
``shaders/compute/quantize.comp`` on the other paths).

Integer tensors travel in the RGBA8 encoding as floats holding the integer values (exact in fp32,
and in fp16 for 8-bit types), as on the other paths; the segment uploads an integer graph input
as those floats and converts an integer output back to the graph's type when it leaves
(``Gles2Segment``). GLSL ES 1.00 has no ``roundEven``, no ``isnan`` and no bit casts, so
the quantize body rounds half to even with ``floor`` and a parity test (as ``g2_half_bytes`` in
``encoding.glsl``) and finds NaN with the encoding's own ``g2_isnan``. The reference
(``fallback/quant.py``): ``q = x / scale`` (an IEEE float32 division), round half to even, plus the
zero point, saturate; NaN gives 0 (not the zero point), +Inf the top of the range, -Inf the
bottom. Dequantize: ``(x - zero_point) * scale``, the subtraction exact, one float32 rounding."""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

from ... import ops
from ...graph import Graph, Node
from .kernels import REGISTRY, Config, Decline, Kernel, _Gen, gen_conv, gen_conv_transpose, gen_gemm, gen_matmul, lit

# smallest normal float32: the RGBA8 encoding flushes smaller magnitudes to zero
_FLT_MIN = float(np.finfo(np.float32).tiny)


def _check_scales(rec: ops.QuantRecord) -> None:
    s = np.asarray(rec.scale, np.float32)
    if not (np.all(np.isfinite(s)) and np.all(np.abs(s) >= _FLT_MIN)):
        raise Decline("a zero, subnormal or non-finite scale (the RGBA8 encoding flushes subnormals)")


def gen_qdq(node: Node, graph: Graph, cfg: Config) -> Kernel:
    rec = ops.require(node, graph, ops.QuantRecord)
    x, y = node.inputs[0], node.outputs[0]
    if x in graph.constants:
        raise Decline("a constant (folded on the host)")
    if cfg.pack == 2 and rec.int_type.itemsize > 1:
        raise Decline(f"{rec.int_type} values are not exact in fp16 textures")
    _check_scales(rec)
    g = _Gen(node, graph, cfg)
    g.check_float(x if rec.quantize else y)  # the integer side travels as floats holding the integers
    xs = g.shape(x)
    ld = g.load(x)
    if rec.axis is None:
        scale, zp = lit(rec.scale[0]), lit(rec.zero_point[0])
    else:
        ax4 = rec.axis + 4 - len(xs)
        if ax4 < 0 or (ax4 == 0 and len(xs) > 4):
            raise Decline(f"per-axis quantization along axis {rec.axis} of a rank-{len(xs)} tensor")
        # scale and zero point of index i along the axis: row i of a (C, 2) fp32 constant texture
        # (exact: normal floats and small integers survive the encoding bit for bit)
        params = np.stack([np.asarray(rec.scale, np.float32), np.asarray(rec.zero_point, np.float32)], axis=1)
        ldp = g.const(f"{node.name}/gles2_qp", params)
        coord = "nchw"[ax4]
        scale, zp = f"{ldp}(0.0, 0.0, {coord}, 0.0)", f"{ldp}(0.0, 0.0, {coord}, 1.0)"
    lines = ["float compute(float n, float c, float h, float w) {", f"    float v = {ld}(n, c, h, w);"]
    if rec.quantize:
        lines += [
            "    if (g2_isnan(v)) return 0.0;",
            # an IEEE division, as onnxruntime and the reference (not v * (1 / scale)); +-Inf stays
            # +-Inf through floor and saturates below, its NaN fraction failing both tests
            f"    float q = v / {scale};",
            "    float r = floor(q); float d = q - r;",
            "    if (d > 0.5 || (d == 0.5 && r - 2.0 * floor(r * 0.5) == 1.0)) r += 1.0;",
            f"    r += {zp};",
            f"    return r < {lit(rec.lo)} ? {lit(rec.lo)} : (r > {lit(rec.hi)} ? {lit(rec.hi)} : r);"]
    else:
        lines.append(f"    return (v - {zp}) * {scale};")
    lines.append("}")
    kernel = g.finish("quantize" if rec.quantize else "dequantize", "\n".join(lines), xs)
    if (not rec.quantize and rec.axis is None and rec.scale[0] == 1 and rec.zero_point[0] == 0
            and g.layout(x).pack == kernel.out_pack):
        # the integers as floats: what x's texture already holds (ops.quant._zero_point_in_bias)
        kernel.alias = x
    return kernel


def _int8_weights(float_gen: Callable[..., Kernel]) -> Callable[[Node, Graph, Config], Kernel]:
    """The int8-weight candidate of a float generator: for a node whose weight is a folded
    DequantizeLinear of 8-bit integers (``ops.quant.weight_scale``: the integer form's weights at
    scale 1, or a float layer's with its scale per output channel)."""
    def gen(node: Node, graph: Graph, cfg: Config) -> Kernel:
        scale = ops.quant.weight_scale(node, graph)
        if isinstance(scale, str):
            raise Decline(scale)
        return float_gen(node, graph, cfg, qscale=scale)

    return gen


REGISTRY.add("Conv", "conv_q8", _int8_weights(gen_conv), first=True)
REGISTRY.add("ConvTranspose", "convtranspose_q8", _int8_weights(gen_conv_transpose), first=True)
REGISTRY.add("ConvTranspose", "convtranspose_q8",
             _int8_weights(functools.partial(gen_conv_transpose, one_tap=True)), first=True)
REGISTRY.add("Gemm", "gemm_q8", _int8_weights(gen_gemm), first=True)
REGISTRY.add("MatMul", "matmul_q8", _int8_weights(gen_matmul), first=True)
REGISTRY.add("QuantizeLinear", "quantize", gen_qdq)
REGISTRY.add("DequantizeLinear", "dequantize", gen_qdq)

__all__ = ["gen_qdq"]
