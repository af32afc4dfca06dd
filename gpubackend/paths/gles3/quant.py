"""int8 (QDQ) kernels of the gles3 path, registered into :data:`.kernels.REGISTRY`.

- ``conv_q8``, ``conv1x1_q8``, ``depthwise_q8``, ``convtranspose_q8``, ``gemm_q8``, ``matmul_q8``:
  the float convolution-family kernels for a node whose weight is a folded DequantizeLinear of
  8-bit integers (``graph.dequantized``), with the weights kept as signed 8-bit integers, four to a
  32-bit word and four words to a ``uvec4`` (a quarter of the float weights' bytes), in the same
  uniform block or texture the float weights use. The shader unpacks them, accumulates in fp32
  and applies the per-output-channel scale once, then the bias (``conv_dequant``). They are tried
  before the float candidates; weights that are not exactly ``q * scale[output channel]`` with
  ``q`` in [-128, 127] (e.g. uint8 weights with a zero point other than 128) decline to them.
- ``quantize`` / ``dequantize``: QuantizeLinear and DequantizeLinear on activations
  (``shaders/gles3/quantize.frag``). Integer tensors travel in the float textures holding the
  integer values (exact); the segment converts them to the graph's integer type when they leave.
"""

from __future__ import annotations

import numpy as np

from ... import ops
from ...graph import Graph, Node
from ..kernel_contract import KernelRegistry
from . import kernels as gk
from .layout import to4d

WEIGHT_OPS = ("Conv", "ConvTranspose", "Gemm", "MatMul")
QDQ_OPS = ("QuantizeLinear", "DequantizeLinear")


def float_tensors(node: Node) -> list[str]:
    """The tensors of a QuantizeLinear (its input) or DequantizeLinear (its output) that must be
    float32; the integer side travels as floats holding the integers."""
    return node.inputs[:1] if node.op_type == "QuantizeLinear" else node.outputs[:1]


# ---- int8 weights ------------------------------------------------------------------------------

def pack_weights_q8(blocks: np.ndarray, bias: np.ndarray, scale: np.ndarray, out) -> np.ndarray:
    """(C_out, K) float weights equal to ``q * scale[co]``, the bias and the scale -> uint32
    (G*R, ceil(K/4) + 2, 4) per output slice: weight vector i (4 output channels, lane k in byte
    k) in component i % 4 of uvec4 i // 4, then the bias and the scale as float bits."""
    cout, k = blocks.shape
    divisor = np.where(scale == 0, np.float32(1), scale).astype(np.float32)[:, None]
    q = np.rint(blocks / divisor)
    if np.any(q < -128) or np.any(q > 127) or not np.array_equal(q.astype(np.float32) * divisor, blocks):
        raise ops.Decline("the weights are not int8 multiples of one scale per output channel")
    total = out.slots * out.planes
    kq = -(-k // 4) * 4
    lanes = np.zeros((total * 4, kq), np.int8)
    lanes[:cout, :k] = q
    # (slice, vector i, lane) bytes -> one uint32 per weight vector
    words = np.ascontiguousarray(lanes.reshape(total, 4, kq).transpose(0, 2, 1)).view(np.uint32)
    words = words.reshape(total, kq // 4, 4)
    tail = np.zeros((total * 4, 2), np.float32)
    tail[:cout, 0] = bias
    tail[:cout, 1] = scale
    tail = np.ascontiguousarray(tail.reshape(total, 4, 2).transpose(0, 2, 1)).view(np.uint32)
    return np.concatenate([words, tail], axis=1)


def weight_decls_q8(mode: str, r_out: int, nwords: int) -> str:
    """GLSL: ``wq<p>(i)``, weight vector i of output target p as a vec4 of integers, and
    ``conv_dequant(acc)``, which turns the integer-weight sums into scale * sum + bias."""
    nq = nwords - 2
    unpack = "vec4 q8(uint w) { return vec4(ivec4(uvec4(w) << uvec4(24u, 16u, 8u, 0u)) >> 24); }"
    if mode == "ubo":
        blocks = [f"layout(std140) uniform WB{p} {{ uvec4 W{p}[{nwords}]; }};" for p in range(r_out)]
        word = [f"uvec4 wword{p}(int i) {{ return W{p}[i]; }}" for p in range(r_out)]
    else:
        blocks = ["uniform highp usampler2D WT;"]
        word = [f"""uvec4 wword{p}(int i) {{
    int j = (u_tile.y * R_OUT + {p}) * {nwords} + i;
    return texelFetch(WT, ivec2(j & 1023, j >> 10), 0);
}}""" for p in range(r_out)]
    fns = [f"vec4 wq{p}(int i) {{ return q8(wword{p}(i >> 2)[i & 3]); }}" for p in range(r_out)]
    deq = "\n".join(f"    acc[{p}] = acc[{p}] * uintBitsToFloat(wword{p}({nq + 1})) + uintBitsToFloat(wword{p}({nq}));"
                    for p in range(r_out))
    return "\n".join(blocks + [unpack] + word + fns + [f"void conv_dequant(inout ACC4 acc[R_OUT]) {{\n{deq}\n}}"])


def _weight_candidate(float_gen):
    def gen(node: Node, graph: Graph, lim: gk.Limits) -> gk.Kernel | str:
        scale = ops.quant.weight_scale(node, graph)
        if isinstance(scale, str):
            return scale
        return float_gen(node, graph, lim, qscale=scale)

    return gen


# ---- QuantizeLinear / DequantizeLinear -----------------------------------------------------------

def _bits(values) -> str:
    return ", ".join(f"uintBitsToFloat({int(np.float32(v).view(np.uint32))}u)" for v in values)


def qdq(node: Node, graph: Graph, lim: gk.Limits) -> gk.Kernel | str:
    rec = ops.require(node, graph, ops.QuantRecord)
    x = node.inputs[0]
    if x in graph.constants:
        return "a constant (folded on the host)"
    if lim.fp16 and rec.int_type.itemsize > 1:
        return f"{rec.int_type} values are not exact in fp16 textures"
    xs = gk._shape(graph, x)
    lay = gk.layout_of(xs, lim)
    if isinstance(lay, str):
        return lay
    assert xs is not None
    if rec.axis is not None and rec.axis != (1 if len(xs) >= 2 else 0):
        return f"per-axis quantization along axis {rec.axis} (only the channel axis is supported)"
    if rec.quantize and np.dtype(graph.dtypes.get(x, np.float32)) != np.float32:
        return f"{x!r} is {np.dtype(graph.dtypes[x])}"
    if not rec.quantize and rec.axis is None and rec.scale[0] == 1 and rec.zero_point[0] == 0:
        # the integers as floats: what the texture already holds (ops.quant._zero_point_in_bias)
        return gk.Kernel("dequantize", "", [("X", x)], lay, False, alias=x, in_layouts={"X": lay})
    if rec.axis is None:
        params = (f"#define q_scale(s) vec4({_bits(rec.scale[:1])})\n"
                  f"#define q_zero(s) vec4({float(rec.zero_point[0])!r})")
    else:  # per channel: baked arrays with the exact float bits, one vec4 per slice
        c4 = -(-len(rec.scale) // 4) * 4
        scale = np.ones(c4, np.float32)
        zp = np.zeros(c4, np.float32)
        scale[:len(rec.scale)], zp[:len(rec.scale)] = rec.scale, rec.zero_point
        vecs = ", ".join(f"vec4({_bits(scale[i:i + 4])})" for i in range(0, c4, 4))
        zeros = ", ".join(f"vec4({', '.join(repr(float(v)) for v in zp[i:i + 4])})" for i in range(0, c4, 4))
        params = (f"const vec4 Q_SCALE[{c4 // 4}] = vec4[]({vecs});\n"
                  f"const vec4 Q_ZERO[{c4 // 4}] = vec4[]({zeros});\n"
                  f"vec4 q_scale(int s) {{ return Q_SCALE[min(s, {c4 // 4 - 1})]; }}\n"
                  f"vec4 q_zero(int s) {{ return Q_ZERO[min(s, {c4 // 4 - 1})]; }}")
    defines: dict[str, object] = {"Q_LO": gk._float(rec.lo), "Q_HI": gk._float(rec.hi)}
    if not rec.quantize:
        defines["DEQUANT"] = 1
    src = gk._source("quantize.frag", lay, {"X": lay}, False, defines, params)
    assert to4d(xs) is not None
    return gk.Kernel("quantize" if rec.quantize else "dequantize", src, [("X", x)], lay, False,
                     flops=int(np.prod(xs)), in_layouts={"X": lay})


def register(registry: KernelRegistry) -> None:
    """The int8-weight candidates before the float ones, and the Quantize/DequantizeLinear kernels."""
    floats = {"Conv": gk.conv, "ConvTranspose": gk.conv_transpose, "Gemm": gk.gemm, "MatMul": gk.gemm}
    for op, gen in floats.items():
        name = {"Conv": "conv_q8", "ConvTranspose": "convtranspose_q8", "Gemm": "gemm_q8",
                "MatMul": "matmul_q8"}[op]
        registry.add(op, name, _weight_candidate(gen), first=True)
    registry.add("QuantizeLinear", "quantize", qdq)
    registry.add("DequantizeLinear", "dequantize", qdq)


def weight_bytes(kernels) -> int:
    """Bytes of weights (with biases and scales) the kernels put on the device."""
    return sum(k.weights.nbytes for k in kernels if getattr(k, "weights", None) is not None)


__all__ = ["QDQ_OPS", "WEIGHT_OPS", "float_tensors", "pack_weights_q8", "qdq", "register", "weight_bytes",
           "weight_decls_q8"]
