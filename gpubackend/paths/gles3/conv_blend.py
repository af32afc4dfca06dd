"""gles3 Conv, Gemm and MatMul with the weights in flat varyings (``conv_blend``), in two passes.

Why: Mesa 22.3's llvmpipe loads a uniform (or a texel at a constant coordinate) lane by lane in a
fragment shader, about 24 instructions for one weight's 8 SIMD multiply-adds, so the weight loads
are a conv fragment's cost (docs/performance.md, sixth session). A *flat varying* costs one
broadcast per batch of fragments. There are few of them (GL_MAX_VARYING_VECTORS: 32 on llvmpipe,
15 guaranteed), so the reduction is cut into chunks, one kernel tap and J input slices each:

1. ``conv_blend`` (``shaders/gles3/conv_blend.vert`` / ``conv_blend.frag``): for each chunk one
   instanced draw; instance g covers tile g of an accumulator A (T output slices per tile, one
   tile per T slices, every output pixel in the tile) and passes the chunk's T x 4J weight vectors
   as flat varyings. Each fragment adds its chunk's products; additive blending (ONE, ONE into
   RGBA32F, EXT_float_blend) sums the chunks. The chunk's J input planes are bound to samplers
   per draw, so the shader never picks a plane at run time.
2. ``conv_blend_out`` (``shaders/gles3/conv_blend_out.frag``): bias, fused activation and the
   output's layout (T need not be the output's plane count).

The sum over the chunks runs in another order than the one-pixel kernel's (fp32 rounding).
Taken for group-1 convolutions and constant-weight Gemm/MatMul with at least
``Limits.conv_blend_min_macs`` multiply-adds per output value and ``conv_blend_min_pixels``
output pixels, where ``Limits.conv_blend`` is on (llvmpipe) and the context has float blending
and the varyings; ``disabled_kernels={"conv_blend"}`` gives the other kernels back."""

from __future__ import annotations

import math

import numpy as np

from gpubackend import shaders

from ... import ops
from ...graph import Graph, Node
from ...ops.elementwise import activation_defines
from .kernels import (
    GLSL_VERSION,
    REGISTRY,
    Kernel,
    Limits,
    _shape,
    _source,
    conv_layouts,
    gemm_operands,
    geometry,
    layout_of,
)
from .layout import TexLayout, plan_layout

MAX_SLICES_PER_CHUNK = 2


def blocking(lim: Limits) -> tuple[int, int] | str:
    """(T output slices, J input slices) per draw that fit the varyings (T x 4J weight vectors,
    the chunk's info and the tile position), the most products per fragment first."""
    best = None
    for t in range(1, lim.planes + 1):
        for j in range(1, MAX_SLICES_PER_CHUNK + 1):
            if 4 * t * j + 2 <= lim.max_varying_vectors and (best is None or t * j > best[0] * best[1]):
                best = (t, j)
    return best or f"{lim.max_varying_vectors} varying vectors hold no chunk"


def declines(node: Node, graph: Graph, lim: Limits) -> str | None:
    """Why ``conv_blend`` does not take ``node`` (None: it does); shapes and attributes only."""
    if not lim.conv_blend:
        return "off on this device (Limits.conv_blend: measured on llvmpipe only)"
    if not lim.float_blend:
        return "no EXT_float_blend: RGBA32F targets cannot be summed by blending"
    tj = blocking(lim)
    if isinstance(tj, str):
        return tj
    ys = _shape(graph, node.outputs[0])
    if node.op_type == "Conv":
        w = graph.constants.get(node.inputs[1]) if len(node.inputs) > 1 else None
        if w is None or w.ndim != 4 or ys is None or len(ys) != 4:
            return "not a 2-D convolution with constant weights and a static output"
        rec = ops.lower(node, graph)
        if isinstance(rec, ops.ConvRecord) and rec.group != 1:
            return "grouped or depthwise convolution"
        macs, pixels = int(w.shape[1] * w.shape[2] * w.shape[3]), ys[0] * ys[2] * ys[3]
    else:
        b = graph.constants.get(node.inputs[1]) if len(node.inputs) > 1 else None
        xs = _shape(graph, node.inputs[0])
        if b is None or xs is None or len(xs) != 2 or ys is None:
            return "not a 2-D product with a constant right operand"
        macs, pixels = int(xs[1]), xs[0]
    if macs < lim.conv_blend_min_macs:
        return f"{macs} multiply-adds per output value: below {lim.conv_blend_min_macs}"
    if pixels < lim.conv_blend_min_pixels:
        return f"{pixels} output pixels (rows): below {lim.conv_blend_min_pixels} a draw per chunk costs more"
    return None


def _kernels(x_name: str, x: TexLayout, out: TexLayout, w: np.ndarray, bias: np.ndarray | None,
             strides: list[int], dil: list[int], pads: list[int], act: ops.Activation | None, rows: bool,
             out_name: str, lim: Limits) -> list[Kernel] | str:
    """The two passes for weights ``w`` [Cout, Cin, KH, KW] over input ``x_name`` (``rows``: a
    Gemm/MatMul, its rows the output pixels)."""
    tj = blocking(lim)
    if isinstance(tj, str):
        return tj
    t, j = tj
    cout, cin, kh, kw = (int(d) for d in w.shape)
    if cin != x.c or cout != out.c:
        return f"weights {list(w.shape)} do not match input channels {x.c} / output channels {out.c}"
    b = np.zeros(cout, np.float32) if bias is None else np.asarray(bias, np.float32).reshape(-1)
    if b.size != cout:
        return f"bias has {b.size} values for {cout} output channels"
    # the accumulator: every output pixel of one image row after another in each tile (a Gemm's
    # rows as a near-square block), T output slices per tile
    pixels = out.n * out.h * out.w
    if rows:
        a_w = math.ceil(math.sqrt(pixels))
        a_h = -(-pixels // a_w)
    else:
        a_w, a_h = out.w, out.n * out.h
    acc = plan_layout((1, out.c, a_h, a_w), t, lim.max_texture_size)
    if isinstance(acc, str):
        return f"the accumulator does not fit: {acc}"
    t = acc.planes  # fewer output slices than T
    j = min(j, x.planes)
    nv = 4 * t * j
    # the chunks: (tap, input slot, planes of that slot), one draw each
    chunks = [(ky, kx, gi, tuple(range(p0, min(p0 + j, x.planes))))
              for ky in range(kh) for kx in range(kw) for gi in range(x.slots) for p0 in range(0, x.planes, j)]
    if len(chunks) * acc.slots * nv > 1024 * lim.max_texture_size:
        return "weights do not fit a texture"
    # wpad[oc, ic, ky, kx] over whole tiles of output slices and whole input slots
    wpad = np.zeros((acc.slots * t * 4, x.slots * x.planes * 4, kh, kw), np.float32)
    wpad[:cout, :cin] = np.asarray(w, np.float32)
    weights = np.zeros((len(chunks), acc.slots, nv, 4), np.float32)
    draws = []
    for c, (ky, kx, gi, planes) in enumerate(chunks):
        ic = [4 * (gi * x.planes + p) + i for p in planes for i in range(4)]
        blk = wpad[:, ic, ky, kx].reshape(acc.slots, t, 4, len(planes), 4)  # (tile, p, lane, j, i)
        full = np.zeros((acc.slots, t, j, 4, 4), np.float32)  # vector (p * J + j) * 4 + i of a tile
        full[:, :, : len(planes)] = blk.transpose(0, 1, 3, 4, 2)
        weights[c] = full.reshape(acc.slots, nv, 4)
        draws.append((planes, c, (ky * dil[0] - pads[0], kx * dil[1] - pads[1], gi, len(planes))))
    # plane i of a chunk with fewer planes reads a stale binding: select zero (its weights are
    # zero, and an Inf there would make NaN)
    terms = [f"vec4 x{i} = mix(vec4(0.0), texelFetch(XJ_{i}, c, 0), bvec4(inside"
             f"{f' && v_info.w > {i}' if i else ''}));" for i in range(j)]
    for p in range(t):
        prods = [f"mat4({', '.join(f'v_w[{((p * j + i) * 4) + k}]' for k in range(4))}) * x{i}" for i in range(j)]
        terms.append(f"o_{p} = {' + '.join(prods)};")
    decls = "\n".join([f"flat in vec4 v_w[{nv}];", *(f"uniform sampler2D XJ_{i};" for i in range(j))])
    defines: dict[str, object] = {"NV": nv, "ROWS": int(rows), "IMG_N": out.n, "IMG_H": out.h,
                                  "A_W": a_w, "A_H": a_h, "SH": strides[0], "SW": strides[1],
                                  "BLEND_TERMS": " ".join(terms)}
    # every size baked in: a uniform read costs a fragment as much as a weight did
    src = _source("conv_blend.frag", acc, {"X": x}, False, defines, decls)
    vs = shaders.source("gles3/conv_blend.vert", GLSL_VERSION,
                        {"NV": nv, "A_W": a_w, "A_H": a_h, "A_COLS": acc.cols, "A_G": acc.slots,
                         "A_TEX_W": acc.size[0], "A_TEX_H": acc.size[1]})
    a_name = f"{out_name}#conv_blend"
    macs = cin * kh * kw
    first = Kernel("conv_blend", src, [("X", x_name)], acc, False, weights=weights.reshape(-1, nv, 4),
                   weight_mode="texture", in_layouts={"X": x}, writes=a_name, flops=2 * pixels * cout * macs,
                   vertex=vs, accumulate=draws, instances=acc.slots, wide=True)
    b_lay = plan_layout((1, cout, 1, 1), lim.planes, lim.max_texture_size)
    assert not isinstance(b_lay, str) and b_lay.planes == out.planes
    uniforms = geometry(out, {"A": acc, "B": b_lay}, lim)
    out_defines = activation_defines(None if act is None else act.spec)
    out_defines["ROWS"] = int(rows)
    src2 = _source("conv_blend_out.frag", out, {"A": acc, "B": b_lay}, False, out_defines, uniforms=uniforms)
    second = Kernel("conv_blend_out", src2, [("A", a_name)], out, False,
                    consts={"B": (b.reshape(1, cout, 1, 1), b_lay)}, in_layouts={"A": acc}, uniforms=uniforms,
                    fp32_consts=True)  # the bias in fp32, as the one-pass kernels' uniforms keep it
    return [first, second]


def conv_blend(node: Node, graph: Graph, lim: Limits) -> list[Kernel] | str:
    operands = conv_layouts(node, graph, lim, declines)
    if isinstance(operands, str):
        return operands
    w, bias, _, rec, x, out = operands
    return _kernels(node.inputs[0], x, out, w, bias, list(rec.strides), list(rec.dilations),
                    list(rec.pads_begin), rec.act, False, node.outputs[0], lim)


def gemm_blend(node: Node, graph: Graph, lim: Limits) -> list[Kernel] | str:
    why = declines(node, graph, lim)
    if why:
        return why
    operands = gemm_operands(node, graph)
    if isinstance(operands, str):
        return operands
    a_name, w, c, ys, rec = operands
    x, out = layout_of(_shape(graph, a_name), lim), layout_of(ys, lim)
    if isinstance(x, str) or isinstance(out, str):
        return x if isinstance(x, str) else str(out)
    return _kernels(a_name, x, out, w, c, [1, 1], [1, 1], [0, 0], rec.act, True, node.outputs[0], lim)


# before every other float kernel of these ops (after the int8-weight ones, quant.register)
for _op, _gen in (("Conv", conv_blend), ("Gemm", gemm_blend), ("MatMul", gemm_blend)):
    _names = [name for name, _ in REGISTRY[_op]]
    _first_float = next(i for i, name in enumerate(_names) if not name.endswith("_q8"))
    REGISTRY[_op].insert(_first_float, ("conv_blend", _gen))
