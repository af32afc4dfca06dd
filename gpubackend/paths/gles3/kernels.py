"""gles3 kernel generators: pure functions from a node (and the graph's shapes and constants) to a
:class:`Kernel` record, or a string saying why the node is declined, registered in
:data:`REGISTRY` and run by the shared contract (``paths/kernel_contract.py``). No GL calls here;
the runtime (:mod:`.runtime`) allocates, binds and draws.

Each kernel is one fragment shader (``shaders/gles3/<op>.frag`` plus a generated preamble of
shape constants, texture accessors and the unrolled inner steps) drawn over the output planes."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from gpubackend import shaders

from ... import ops
from ...gl.device import LLVMPIPE_LOOP_LIMIT, LOOP_BUDGET
from ...graph import Graph, Node
from ...ops import elementwise as ew
from ...ops.elementwise import activation_defines
from ..kernel_contract import Generated, KernelRecord, KernelRegistry, generate, non_float32
from .layout import TexLayout, plan_layout, to4d

GLSL_VERSION = "300 es"
MAX_LOOP = 1 << 16  # refuse shaders whose per-fragment loop would be absurdly long


@dataclass(frozen=True)
class Limits:
    """What the context allows (plain data, read once from ``ctx.info``) and the path's knobs."""

    max_texture_size: int = 4096
    max_draw_buffers: int = 4
    max_uniform_block_size: int = 16384
    max_fragment_uniform_blocks: int = 12
    max_texture_units: int = 16
    ubo_alignment: int = 256
    targets: int = 4  # render targets per pass (measured; see benchmarks/bench_gles3.py)
    baked: bool = True  # conv attributes (kernel size, strides, pads) as constants (True) or uniforms
    # Tensor sizes and scalar operands as uniforms, so nodes of one kind that differ only in them
    # share one program: llvmpipe compiles each distinct program at its first draw, which is
    # most of a model's first run. False bakes them in as literals (A/B comparisons).
    shared: bool = True
    fp16: bool = False  # feature maps in RGBA16F textures (precision "fp16")
    # conv: largest fully unrolled body, in 4x4 matrix-vector products (taps x input slices x
    # targets). Unrolled, every weight index is a constant, which llvmpipe loads once per SIMD
    # batch instead of gathering per fragment; past this the JIT time grows fast.
    unroll_matvecs: int = 128
    # conv family: outputs whose tiles have at most this many pixels (a Gemm/MatMul's [M, N] is
    # M x slots tiles of 1 pixel) are drawn in one draw over the whole texture, each fragment
    # finding its own slot and reading its weights from a texture, instead of one draw per tile
    # (M x slots draws of one pixel each: 16384 for a 512^3 MatMul). 0: always one draw per tile.
    one_draw_tile_pixels: int = 1
    # conv_px (group-1 Conv, several output pixels per fragment, two passes, see conv_px.py): the
    # pixels per fragment (a divisor of the render targets: the rest of them are output slices),
    # the smallest output plane in pixels and the fewest multiply-adds per output value
    # (kernel taps x input channels) it takes: below those the extra pass costs more than the
    # weight loads it saves (selfie's 16-channel convs ran slower).
    conv_px_pixels: int = 2
    conv_px_min_pixels: int = 1024
    conv_px_min_macs: int = 128
    # conv_blend (group-1 Conv, Gemm, MatMul: weights in flat varyings, sums by additive blending,
    # see conv_blend.py): needs EXT_float_blend and varyings for T x 4 x J weight vectors. On by
    # default on llvmpipe, where it was measured; below the fewest multiply-adds per output value
    # the second pass costs more than the weight loads saved.
    float_blend: bool = False
    max_varying_vectors: int = 15
    conv_blend: bool = False
    conv_blend_min_macs: int = 16
    conv_blend_min_pixels: int = 16  # output pixels (a Gemm's rows): a 1-row Gemm ran 5x slower

    @property
    def planes(self) -> int:
        return max(1, min(self.targets, self.max_draw_buffers))


@dataclass
class Kernel(KernelRecord):
    name: str  # short stable kernel name (``disabled_kernels``)
    fragment: str  # complete GLSL ES 3.00 source
    inputs: list[tuple[str, str]]  # (shader prefix, tensor name): runtime tensors read
    out: TexLayout
    tiled: bool  # one draw per output tile (weights indexed by uniforms) or one draw overall
    consts: dict[str, tuple[np.ndarray, TexLayout]] = field(default_factory=dict)  # prefix -> data
    weights: np.ndarray | None = None  # (slices, NW, 4) float32: per output slice weight block
    weight_mode: str = ""  # "ubo": block p bound to slice g*R+p; "texture": sampler WT
    uniforms: dict[str, int | float] = field(default_factory=dict)  # set at each draw (see Limits.shared)
    alias: str = ""  # output is a view of this input (no draw)
    in_layouts: dict[str, TexLayout] = field(default_factory=dict)  # prefix -> layout of each input
    flops: int = 0
    # A pass of a several-pass node writes this tensor of its own instead of one of the node's
    # outputs (a later pass of the same node reads it): ConvTranspose by taps.
    writes: str = ""
    # conv_blend's first pass (conv_blend.py): its own vertex shader, the targets cleared to zero,
    # then one instanced draw per entry (input planes bound to samplers XJ_0.., u_c, u_info) with
    # additive blending; ``wide``: the tensor it writes is RGBA32F even in an fp16 segment.
    vertex: str = ""
    accumulate: list[tuple[tuple[int, ...], int, tuple[int, int, int, int]]] = field(default_factory=list)
    instances: int = 0
    wide: bool = False
    fp32_consts: bool = False  # ``consts`` in RGBA32F in an fp16 segment too (conv_blend's bias)

    @property
    def kernel_name(self) -> str:
        return self.name


def layout_of(shape: tuple[int, ...] | None, lim: Limits) -> TexLayout | str:
    if shape is None:
        return "shape not static"
    s4 = to4d(shape)
    if s4 is None:
        return f"rank {len(shape)} > 4"
    return plan_layout(s4, lim.planes, lim.max_texture_size)


def _float(v: float) -> str:
    v = float(v)
    if math.isnan(v):
        return "(0.0/0.0)"
    if math.isinf(v):
        return "3.402823e38" if v > 0 else "-3.402823e38"
    return repr(v) if ("e" in repr(v) or "." in repr(v)) else repr(v) + ".0"


# ---- preamble pieces ---------------------------------------------------------------------------

# a / b for 0 <= a < 2^20 and b > 0 without an integer division, which llvmpipe runs lane by lane
# when b is not a literal (a 1x1 conv ran 30% slower): the float quotient is within one of the
# exact one, and the remainder corrects it.
UDIV = """int udiv(int a, int b) {
    highp float fa = float(a);  // highp under FP16_COMPUTE too: a quotient, not data
    highp float fb = float(b);
    int q = int(fa / fb);
    int r = a - q * b;
    return q + int(r >= b) - int(r < 0);
}"""


def _input_decls(prefix: str, lay: TexLayout, uniform: bool = False) -> str:
    r = lay.planes
    samplers = "\n".join(f"uniform sampler2D {prefix}_{p};" for p in range(r))
    chain = " ".join(f"if (p == {p}) return texelFetch({prefix}_{p}, c, 0);" for p in range(r - 1))
    row = f"udiv(t, {prefix}_COLS)" if uniform else f"t / {prefix}_COLS"
    return f"""{samplers}
ivec2 {prefix}_xy(int n, int g, int y, int x) {{
    int t = n * {prefix}_G + g;
    int ty = {row};
    return ivec2((t - ty * {prefix}_COLS) * {prefix}_W + x, ty * {prefix}_H + y);
}}
vec4 {prefix}_plane(int p, int n, int g, int y, int x) {{
    ivec2 c = {prefix}_xy(n, g, y, x);
    {chain} return texelFetch({prefix}_{r - 1}, c, 0);
}}
vec4 {prefix}_get(int n, int s, int y, int x) {{
    int g = s / {prefix}_R;
    return {prefix}_plane(s - g * {prefix}_R, n, g, y, x);
}}"""


def geometry(out: TexLayout, inputs: dict[str, TexLayout], lim: Limits) -> dict[str, int | float]:
    """The sizes of the output (``O_*``) and input layouts that :func:`_source` declares as
    uniforms when ``lim.shared`` (plane counts stay literals: they shape the code), else none."""
    if not lim.shared:
        return {}
    values: dict[str, int | float] = {}
    for prefix, lay in [("O", out), *inputs.items()]:
        values.update((k, v) for k, v in lay.defines(prefix).items() if k != f"{prefix}_R")
    return values


# llvmpipe converts a fragment output to an RGBA16F target by truncation (toward zero), a biased
# 1-ulp error that compounds layer after layer (PP-OCRv6 det at 64x96: 9.9e-2 on gles3 fp16
# against an 8.5e-3 storage floor); packHalf2x16 rounds to nearest even, and a value it returns
# is stored exactly. The runtime sets u_half16 per draw from the target's format.
HALF_STORE = """uniform int u_half16;
vec4 half_store(vec4 v) {
    if (u_half16 == 0) return v;
    return vec4(unpackHalf2x16(packHalf2x16(v.xy)), unpackHalf2x16(packHalf2x16(v.zw)));
}"""


def _source(body: str, out: TexLayout, inputs: dict[str, TexLayout], tiled: bool,
            defines: dict[str, object] | None = None, decls: str = "",
            uniforms: dict[str, int | float] | None = None) -> str:
    """``#version 300 es``, defines, header, generated declarations, then ``shaders/gles3/<body>``.
    Names in ``uniforms`` are declared as uniforms (int or float by their value's type) instead
    of defines; the kernel carries the same dict and the runtime sets it at each draw."""
    uniforms = uniforms or {}
    d: dict[str, object] = {"R_OUT": out.planes, "TILED": int(tiled)}
    d.update(out.defines("O"))
    for prefix, lay in inputs.items():
        d.update(lay.defines(prefix))
    d.update(defines or {})
    for k in uniforms:
        d.pop(k, None)
    parts = [shaders.read("gles3/header.glsl")]
    # highp under FP16_COMPUTE too: a scalar operand keeps the value the literal had
    parts += [f"uniform {'highp float' if isinstance(v, float) else 'int'} {k};" for k, v in uniforms.items()]
    if tiled:
        parts.append("uniform ivec4 u_tile;  // n, g, x0, y0 of the output tile this draw covers")
    parts += [f"layout(location = {p}) out vec4 o_{p};" for p in range(out.planes)]
    parts.append(HALF_STORE)
    stores = " ".join(f"o_{p} = half_store(finish(r[{p}], g * R_OUT + {p}));" for p in range(out.planes))
    parts.append(f"#define STORE_OUTPUTS {stores}")
    if any(f"{prefix}_COLS" in uniforms for prefix in inputs):
        parts.append(UDIV)
    parts += [_input_decls(prefix, lay, f"{prefix}_COLS" in uniforms) for prefix, lay in inputs.items()]
    if decls:
        parts.append(decls)
    return shaders.source(f"gles3/{body}", GLSL_VERSION, d, "\n".join(parts))


def vertex_source() -> str:
    return shaders.source("gles3/fullscreen.vert", GLSL_VERSION)


# ---- helpers -----------------------------------------------------------------------------------

def _shape(graph: Graph, name: str) -> tuple[int, ...] | None:
    s = graph.shape(name)
    return None if s is None else tuple(int(d) for d in s)


def _record(node: Node, graph: Graph, kind: type):
    """The op layer's record of ``node``, or the reason it cannot be resolved statically."""
    rec = ops.lower(node, graph)
    if isinstance(rec, str) or rec is None:
        return rec or f"no record for {node.op_type}"
    return rec if isinstance(rec, kind) else f"no {kind.__name__} for {node.op_type}"


def _const(graph: Graph, node: Node, i: int) -> np.ndarray | None:
    if i >= len(node.inputs) or not node.inputs[i]:
        return None
    return graph.constants.get(node.inputs[i])


# ---- convolution family --------------------------------------------------------------------------

def _weight_mode(nw: int, lim: Limits) -> str:
    return "ubo" if nw * 16 <= lim.max_uniform_block_size and lim.planes <= lim.max_fragment_uniform_blocks \
        else "texture"


def _wv(mode: str, p: int, idx: str) -> str:
    if mode.endswith("_q8"):  # int8 weights: quant.weight_decls_q8 defines wq<p>()
        return f"wq{p}({idx})"
    return f"W{p}[{idx}]" if mode == "ubo" else f"wtex(g, {p}, {idx})"


def _weight_decls(mode: str, r_out: int, nw: int) -> str:
    if mode == "ubo":
        return "\n".join(f"layout(std140) uniform WB{p} {{ vec4 W{p}[{nw}]; }};" for p in range(r_out))
    return f"""uniform sampler2D WT;
vec4 wtex(int g, int p, int i) {{
    int j = (g * R_OUT + p) * {nw} + i;
    return texelFetch(WT, ivec2(j & 1023, j >> 10), 0);
}}"""


def _conv_code(kind: str, x: TexLayout, out: TexLayout, mode: str, nw: int, cig: int = 0, cog: int = 0,
               unrolled: bool = False, kh: int = 1, kw: int = 1, always_inside: bool = False) -> str:
    """conv_init(g, acc) and conv_pixel(n, g, iy, ix, k, acc), unrolled over output targets (and
    input planes) so every weight index depends on uniforms and loop counters only."""
    r = out.planes
    # int8 weights start from zero; conv_dequant() applies scale and bias after the sum
    init = "\n".join(f"    acc[{p}] = " + ("vec4(0.0)" if mode.endswith("_q8") else _wv(mode, p, str(nw - 1))) + ";"
                     for p in range(r))
    lines = [f"void conv_init(int g, out ACC4 acc[R_OUT]) {{\n{init}\n}}",
             "void conv_pixel(int n, int g, int iy, int ix, int k, bool inside, inout ACC4 acc[R_OUT]) {"]
    if kind == "dense":
        def step(pi: int, gi: str) -> list[str]:
            out_l = [f"        v = mix(vec4(0.0), X_plane({pi}, n, {gi}, iy, ix), bvec4(inside));"]
            for p in range(r):
                cols = ", ".join(_wv(mode, p, f"b + {pi * 4 + j}") for j in range(4))
                out_l.append(f"        acc[{p}] += mat4({cols}) * v;")
            return out_l
        lines.append("    vec4 v;")
        # A last slot with every plane in use joins the loop: the same arithmetic in the same
        # order, and one copy of the body less for llvmpipe's JIT, whose compile time grows with
        # the code (a second copy doubled a conv shader's cold compile).
        tail = x.slices - (x.slots - 1) * x.planes
        looped = 0 if x.slots == 1 else x.slots if tail == x.planes else x.slots - 1
        if looped:
            lines.append(f"    for (int gi = 0; gi < {looped}; ++gi) {{")
            lines.append(f"        int b = (k * {x.slices} + gi * {x.planes}) * 4;")
            for pi in range(x.planes):
                lines += step(pi, "gi")
            lines.append("    }")
        if looped < x.slots:
            lines.append("    {")
            lines.append(f"        int b = (k * {x.slices} + {(x.slots - 1) * x.planes}) * 4;")
            for pi in range(tail):
                lines += step(pi, str(x.slots - 1))
            lines.append("    }")
    elif kind == "depthwise":
        for p in range(r):
            lines.append(f"    acc[{p}] += {_wv(mode, p, 'k')} * "
                         f"mix(vec4(0.0), X_plane({p}, n, g, iy, ix), bvec4(inside));")
    else:  # grouped: lane by lane, each output channel reads the channels of its own group
        lines.append(f"    for (int icg = 0; icg < {cig}; ++icg) {{")
        lines.append("        vec4 w;\n        int ic;\n        vec4 v;")
        for p in range(r):
            lines.append(f"        w = {_wv(mode, p, f'k * {cig} + icg')};")
            for lane in range(4):
                lines.append(f"        ic = min((g * R_OUT + {p}) * 4 + {lane}, O_C - 1) / {cog} * {cig} + icg;")
                lines.append("        v = mix(vec4(0.0), X_get(n, ic / 4, iy, ix), bvec4(inside));")
                lines.append(f"        acc[{p}][{lane}] += w[{lane}] * v[ic - (ic / 4) * 4];")
        lines.append("    }")
    lines.append("}")
    if unrolled and kind != "grouped":
        lines += _conv_all(kind, x, out, mode, kh, kw, always_inside)
    return "\n".join(lines)


def _conv_all(kind: str, x: TexLayout, out: TexLayout, mode: str, kh: int, kw: int, always_inside: bool) -> list[str]:
    """conv_all(n, g, oy, ox, acc): every tap, input slice and target written out, so every
    weight index is a constant."""
    r = out.planes
    lines = ["bool tap(int oy, int ox, int ky, int kx, out int iy, out int ix);",
             "void conv_all(int n, int g, int oy, int ox, inout ACC4 acc[R_OUT]) {",
             "    int iy, ix;", "    bool inside;", "    vec4 v;"]
    for ky in range(kh):
        for kx in range(kw):
            k = ky * kw + kx
            lines.append(f"    inside = tap(oy, ox, {ky}, {kx}, iy, ix);")
            sel = ("{}" if always_inside else "mix(vec4(0.0), {}, bvec4(inside))").format
            if kind == "depthwise":
                for p in range(r):
                    lines.append(f"    acc[{p}] += {_wv(mode, p, str(k))} * {sel(f'X_plane({p}, n, g, iy, ix)')};")
                continue
            for si in range(x.slices):
                lines.append(f"    v = {sel(f'X_plane({si % x.planes}, n, {si // x.planes}, iy, ix)')};")
                b = (k * x.slices + si) * 4
                for p in range(r):
                    cols = ", ".join(_wv(mode, p, str(b + j)) for j in range(4))
                    lines.append(f"    acc[{p}] += mat4({cols}) * v;")
    lines.append("}")
    return lines


def _pack_weights(blocks: np.ndarray, bias: np.ndarray, out: TexLayout) -> np.ndarray:
    """(C_out, NW-1) per-output-channel weights + bias -> (G*R, NW, 4) per output slice."""
    cout, nwm1 = blocks.shape
    total = out.slots * out.planes
    arr = np.zeros((total * 4, nwm1 + 1), np.float32)
    arr[:cout, :nwm1] = blocks
    arr[:cout, nwm1] = bias
    return np.ascontiguousarray(arr.reshape(total, 4, nwm1 + 1).transpose(0, 2, 1))


def _conv_kernel(node: Node, graph: Graph, lim: Limits, x_name: str, w: np.ndarray, bias: np.ndarray | None,
                 out_shape: tuple[int, ...], strides: list[int], dil: list[int], pads: list[int], group: int,
                 transpose: bool, act: ops.Activation | None, name: str,
                 qscale: np.ndarray | None = None, out_layout: TexLayout | None = None) -> Kernel | str:
    """One convolution-family kernel; with ``qscale`` (the weights' dequantisation scale per
    output channel) the weights are kept as int8, four to a 32-bit word (:mod:`.quant`).
    ``out_layout`` replaces the output's own layout (a pass writing a tensor of its own)."""
    xs = _shape(graph, x_name)
    x = layout_of(xs, lim)
    if isinstance(x, str):
        return x
    out = out_layout or layout_of(out_shape, lim)
    if isinstance(out, str):
        return out
    cout, cin = out.c, x.c
    kh, kw = int(w.shape[2]), int(w.shape[3])
    k = kh * kw
    if bias is None:
        bias = np.zeros(cout, np.float32)
    bias = np.asarray(bias, np.float32).reshape(-1)
    if bias.size != cout:
        return f"bias has {bias.size} values for {cout} output channels"
    if transpose:
        if group != 1:
            return "grouped ConvTranspose not supported"
        kind = "dense"
        wt = np.asarray(w, np.float32).transpose(1, 0, 2, 3)  # [Cout, Cin, kh, kw]
    elif group == 1:
        kind = "dense"
        wt = np.asarray(w, np.float32)
    elif group == cin and cout == cin and w.shape[1] == 1:
        kind = "depthwise"
        wt = np.asarray(w, np.float32)
    else:
        kind = "grouped"
        wt = np.asarray(w, np.float32)
    if kind == "dense":
        # block[co, (k, si, j)]: weight of input channel 4*si+j at kernel position k
        full = np.zeros((cout, k, x.slices * 4), np.float32)
        full[:, :, :cin] = wt.reshape(cout, cin, k).transpose(0, 2, 1)
        blocks = full.reshape(cout, -1)
        cig = cog = 0
    elif kind == "depthwise":
        blocks = wt.reshape(cout, k)
        cig = cog = 1
    else:
        cig, cog = cin // group, cout // group
        blocks = wt.reshape(cout, cig, k).transpose(0, 2, 1).reshape(cout, k * cig)
    nw = blocks.shape[1] + 1
    one_draw = qscale is None and out.tiles > 1 and out.h * out.w <= lim.one_draw_tile_pixels
    if qscale is not None:
        from . import quant

        weights = quant.pack_weights_q8(blocks, bias, qscale, out)
        mode = _weight_mode(weights.shape[1], lim)
        access = mode + "_q8"
        weight_decls = quant.weight_decls_q8(mode, out.planes, weights.shape[1])
    else:
        weights = _pack_weights(blocks, bias, out)
        mode = access = "texture" if one_draw else _weight_mode(nw, lim)
        weight_decls = _weight_decls(mode, out.planes, nw)
    if kind == "depthwise" and (x.planes != out.planes or x.slots != out.slots):
        return "depthwise input/output layouts differ"
    loop = (x.slices * 4 if kind != "grouped" else cig * 16) * k
    if loop > MAX_LOOP * 16:
        return f"{loop} multiply-adds per output pixel is too long for one fragment"
    if mode == "texture" and weights.size // 4 > 1024 * lim.max_texture_size:
        return "weights do not fit a texture"
    consts = {"KH": kh, "KW": kw, "SH": strides[0], "SW": strides[1], "DH": dil[0], "DW": dil[1],
              "PT": pads[0], "PL": pads[1]}
    # Unrolled: constant weight indices (uniform loads); capped so the shader stays compilable.
    unrolled = lim.baked and kind != "grouped" and mode == "ubo" and \
        k * (x.slices if kind == "dense" else 1) * out.planes <= lim.unroll_matvecs
    # every tap inside the input (no padding, window within bounds): no select needed
    always_inside = not transpose and not any(pads) and \
        (out.h - 1) * strides[0] + (kh - 1) * dil[0] < x.h and (out.w - 1) * strides[1] + (kw - 1) * dil[1] < x.w
    decls = weight_decls + "\n" + _conv_code(kind, x, out, access, nw, cig, cog, unrolled, kh, kw, always_inside)
    defines = activation_defines(None if act is None else act.spec)
    if qscale is not None:
        defines["QW"] = 1
    if unrolled:
        defines["CONV_UNROLLED"] = True
    uniforms = geometry(out, {"X": x}, lim)
    for key, value in consts.items():
        # the kernel size shapes the unrolled body; strides, dilations and pads only tap()'s arithmetic
        if not lim.baked or (lim.shared and key not in ("KH", "KW")):
            uniforms[key] = value
        else:
            defines[key] = value
    src = _source("convtranspose.frag" if transpose else "conv.frag", out, {"X": x}, not one_draw,
                  defines, decls, uniforms)
    flops = 2 * out.n * out.h * out.w * cout * k * (cin // group if not transpose else cin)
    if transpose:
        flops //= strides[0] * strides[1]
    return Kernel(name, src, [("X", x_name)], out, not one_draw, weights=weights, weight_mode=mode,
                  in_layouts={"X": x}, uniforms=uniforms, flops=flops)


def _conv_operands(node: Node, graph: Graph, what: str):
    """Constant weights and bias, static shapes, kernel size, strides and dilations of a 2-D
    Conv / ConvTranspose, or the reason this path cannot take it."""
    w = _const(graph, node, 1)
    if w is None:
        return "weights are not constant"
    if w.ndim != 4:
        return f"{w.ndim - 2}-D {what} (only 2-D)"
    bias = _const(graph, node, 2)
    if len(node.inputs) > 2 and node.inputs[2] and bias is None:
        return "bias is not constant"
    rec = _record(node, graph, ops.ConvRecord)
    if isinstance(rec, str):
        return rec
    ys = _shape(graph, node.outputs[0])
    if ys is None:
        return "shape not static"
    return w, bias, ys, rec


def conv_layouts(node: Node, graph: Graph, lim: Limits,
                 declines: Callable[[Node, Graph, Limits], str | None] | None = None):
    """:func:`_conv_operands` of a 2-D Conv and its input and output layouts: (weights, bias,
    output shape, record, input layout, output layout), or the reason this path (or a kernel's
    ``declines(node, graph, lim)`` first) does not take it."""
    why = declines(node, graph, lim) if declines else None
    if why:
        return why
    operands = _conv_operands(node, graph, "convolution")
    if isinstance(operands, str):
        return operands
    w, bias, ys, rec = operands
    x, out = layout_of(_shape(graph, node.inputs[0]), lim), layout_of(ys, lim)
    if isinstance(x, str) or isinstance(out, str):
        return x if isinstance(x, str) else str(out)
    return w, bias, ys, rec, x, out


def conv(node: Node, graph: Graph, lim: Limits, qscale: np.ndarray | None = None) -> Kernel | str:
    operands = _conv_operands(node, graph, "convolution")
    if isinstance(operands, str):
        return operands
    w, bias, ys, rec = operands
    name = conv_kind(node, graph)
    return _conv_kernel(node, graph, lim, node.inputs[0], w, bias, ys, list(rec.strides), list(rec.dilations),
                        list(rec.pads_begin), rec.group, False, rec.act,
                        name if qscale is None else name + "_q8", qscale)


def conv_transpose(node: Node, graph: Graph, lim: Limits, qscale: np.ndarray | None = None) -> Kernel | str:
    operands = _conv_operands(node, graph, "ConvTranspose")
    if isinstance(operands, str):
        return operands
    w, bias, ys, rec = operands
    return _conv_kernel(node, graph, lim, node.inputs[0], w, bias, ys, list(rec.strides), list(rec.dilations),
                        list(rec.pads_begin), rec.group, True, rec.act,
                        "convtranspose" if qscale is None else "convtranspose_q8", qscale)


def conv_transpose_taps(node: Node, graph: Graph, lim: Limits) -> list[Kernel] | str:
    """ConvTranspose in two passes that compute only the taps each output pixel uses (the gather
    form evaluates all KH x KW taps per pixel and keeps 1 in SH x SW of them):

    1. ``convtranspose_taps``: a 1x1 convolution at the input's resolution writing, for every tap
       (ky, kx) and output slice s, the product plane Q[tap * O_G * R + s] = W[:, s, ky, kx] . x
       (its own tensor, planes as the output's, so the output's plane p reads Q's plane p);
    2. ``convtranspose_sum`` (``shaders/gles3/convtranspose_sum.frag``): each output pixel adds
       the products of its own stride phase's taps, then the bias and the fused activation."""
    operands = _conv_operands(node, graph, "ConvTranspose")
    if isinstance(operands, str):
        return operands
    w, bias, ys, rec = operands
    kh, kw = int(w.shape[2]), int(w.shape[3])
    (sh, sw), (pt, pl) = rec.strides, rec.pads_begin
    if rec.group != 1:
        return "grouped ConvTranspose not supported"
    if tuple(rec.dilations) != (1, 1):
        return "dilated ConvTranspose (the gather form only)"
    if sh * sw == 1:
        return "stride 1: every tap of the gather form is used"
    if min(pt, pl) < 0:
        return "negative pads"
    xs = _shape(graph, node.inputs[0])
    out = layout_of(ys, lim)
    if isinstance(out, str) or xs is None or len(xs) != 4:
        return out if isinstance(out, str) else "input shape not static 4-D"
    cin, cout = int(w.shape[0]), int(w.shape[1])
    per_tap = out.slots * out.planes * 4  # Q channels per tap: the output's slices, padded to whole slots
    q_channels = kh * kw * per_tap
    q_shape = (xs[0], q_channels, xs[2], xs[3])
    q_lay = plan_layout(q_shape, out.planes, lim.max_texture_size)
    if isinstance(q_lay, str):
        return f"the tap products do not fit: {q_lay}"
    w1 = np.zeros((kh * kw, per_tap, cin), np.float32)
    w1[:, :cout, :] = np.asarray(w, np.float32).reshape(cin, cout, kh * kw).transpose(2, 1, 0)
    q_name = f"{node.outputs[0]}#convtranspose_taps"
    taps = _conv_kernel(node, graph, lim, node.inputs[0], w1.reshape(q_channels, cin, 1, 1), None, q_shape,
                        [1, 1], [1, 1], [0, 0, 0, 0], 1, False, None, "convtranspose_taps", out_layout=q_lay)
    if isinstance(taps, str):
        return taps
    taps.writes = q_name
    b = np.zeros(cout, np.float32) if bias is None else np.asarray(bias, np.float32).reshape(-1)
    if b.size != cout:
        return f"bias has {b.size} values for {cout} output channels"
    weights = _pack_weights(np.zeros((cout, 0), np.float32), b, out)  # (slices, 1, 4): the bias
    init = " ".join(f"acc[{p}] = W{p}[0];" for p in range(out.planes))
    decls = _weight_decls("ubo", out.planes, 1) + f"\nvoid ct_bias(out ACC4 acc[R_OUT]) {{ {init} }}"
    consts = {"KH": kh, "KW": kw, "SH": sh, "SW": sw, "PT": pt, "PL": pl, "TH": -(-kh // sh), "TW": -(-kw // sw)}
    defines = activation_defines(None if rec.act is None else rec.act.spec)
    uniforms: dict[str, int | float] = {} if lim.baked else dict(consts)
    if lim.baked:
        defines.update(consts)
    src = _source("convtranspose_sum.frag", out, {"X": q_lay}, True, defines, decls, uniforms)
    total = Kernel("convtranspose_sum", src, [("X", q_name)], out, True, weights=weights, weight_mode="ubo",
                   in_layouts={"X": q_lay}, uniforms=uniforms,
                   flops=out.n * out.h * out.w * cout * consts["TH"] * consts["TW"])
    return [taps, total]


def gemm_operands(node: Node, graph: Graph):
    """Gemm / MatMul with a constant right operand as a 1x1 convolution of the [M, K] input:
    (input name, weights [N, K, 1, 1], per-column bias or None, output shape, record), or the
    reason this path cannot take it."""
    a_name = node.inputs[0]
    b = _const(graph, node, 1)
    if a_name in graph.constants:
        return "left operand is constant"
    if b is None:
        return "right operand is not constant"
    xs = _shape(graph, a_name)
    if xs is None or len(xs) != 2 or b.ndim != 2:
        return f"only 2-D x 2-D products (got {xs} x {list(b.shape)})"
    c = None
    rec = _record(node, graph, ops.GemmRecord if node.op_type == "Gemm" else ops.MatMulRecord)
    if isinstance(rec, str):
        return rec
    if isinstance(rec, ops.GemmRecord):
        if rec.trans_a:
            return "transA not supported"
        if rec.trans_b:
            b = b.T
        alpha, beta = rec.alpha, rec.beta
        b = b * alpha
        c = _const(graph, node, 2)
        if len(node.inputs) > 2 and node.inputs[2] and c is None:
            return "C is not constant"
        if c is not None:
            if c.size not in (1, b.shape[1]) or (c.ndim == 2 and c.shape[0] != 1):
                return f"C of shape {list(c.shape)} is not a per-column bias"
            c = np.broadcast_to(c.reshape(-1) * beta, (b.shape[1],))
    k, nout = b.shape
    if xs[1] != k:
        return f"inner dimensions differ ({xs[1]} vs {k})"
    w = np.ascontiguousarray(b.T.reshape(nout, k, 1, 1), np.float32)
    return a_name, w, c, (xs[0], nout), rec


def gemm(node: Node, graph: Graph, lim: Limits, qscale: np.ndarray | None = None) -> Kernel | str:
    """Gemm / MatMul with a constant right operand: a 1x1 convolution of the [M, K] input."""
    operands = gemm_operands(node, graph)
    if isinstance(operands, str):
        return operands
    a_name, w, c, ys, rec = operands
    name = ("gemm" if node.op_type == "Gemm" else "matmul") + ("_q8" if qscale is not None else "")
    return _conv_kernel(node, graph, lim, a_name, w, c, ys, [1, 1], [1, 1], [0, 0, 0, 0], 1, False,
                        rec.act, name, qscale)


# ---- elementwise -------------------------------------------------------------------------------

def binary(node: Node, graph: Graph, lim: Limits) -> Kernel | str:
    if len(node.inputs) != 2:
        return f"{node.op_type} with {len(node.inputs)} inputs (only 2)"
    ys = _shape(graph, node.outputs[0])
    out = layout_of(ys, lim)
    if isinstance(out, str):
        return out
    assert ys is not None
    o4 = to4d(ys)
    assert o4 is not None
    inputs: dict[str, TexLayout] = {}
    tensors: list[tuple[str, str]] = []
    consts: dict[str, tuple[np.ndarray, TexLayout]] = {}
    key = ew.binary_key(node.op_type)
    if key is None:
        return f"{node.op_type} is not a binary table op"
    defines: dict[str, object] = {"BOP": ew.BOP_CODES[key]}
    scalars: dict[str, int | float] = {}
    if all(n in graph.constants for n in node.inputs):
        return "all inputs are constant"
    for prefix, name in zip("AB", node.inputs):
        s = _shape(graph, name)
        if s is None:
            return "shape not static"
        if len(s) > len(ys):
            return "operand rank above output rank"
        aligned = (1,) * (len(ys) - len(s)) + s
        a4 = to4d(aligned)
        assert a4 is not None
        if any(ad not in (1, od) for ad, od in zip(a4, o4)):
            return f"shapes {s} and {ys} do not broadcast in the NCHW view"
        value = graph.constants.get(name)
        if value is not None and value.size == 1:
            scalar = float(np.float32(value.reshape(-1)[0]))
            if lim.shared:
                scalars[f"{prefix}_K"] = scalar
                defines[f"{prefix}_LOAD(n, g, p, y, x)"] = f"vec4({prefix}_K)"
            else:
                defines[f"{prefix}_LOAD(n, g, p, y, x)"] = f"vec4({ew.glsl_float(scalar, True)})"
            continue
        lay = plan_layout(a4, lim.planes, lim.max_texture_size)
        if isinstance(lay, str):
            return lay
        if value is not None:
            consts[prefix] = (np.asarray(value, np.float32).reshape(a4), lay)
        else:
            if to4d(s) != a4:
                return f"operand {name!r} of shape {s} is stored in another NCHW view than the output {ys}"
            tensors.append((prefix, name))
        inputs[prefix] = lay
        if a4 == o4 and lay == out:
            defines[f"{prefix}_LOAD(n, g, p, y, x)"] = f"{prefix}_plane(p, n, g, y, x)"
        else:
            nn = "0" if a4[0] == 1 else "(n)"
            yy = "0" if a4[2] == 1 else "(y)"
            xx = "0" if a4[3] == 1 else "(x)"
            if a4[1] == 1 and o4[1] > 1:
                expr = f"{prefix}_get({nn}, 0, {yy}, {xx}).xxxx"
            else:
                expr = f"{prefix}_get({nn}, (g) * R_OUT + (p), {yy}, {xx})"
            defines[f"{prefix}_LOAD(n, g, p, y, x)"] = expr
    uniforms = geometry(out, inputs, lim) | scalars
    src = _source("binary.frag", out, inputs, False, defines, uniforms=uniforms)
    return Kernel("binary", src, tensors, out, False, consts=consts, flops=int(np.prod(ys)), in_layouts=inputs,
                  uniforms=uniforms)


def unary(node: Node, graph: Graph, lim: Limits) -> Kernel | str:
    xs = _shape(graph, node.inputs[0])
    x = layout_of(xs, lim)
    if isinstance(x, str):
        return x
    resolved = ew.resolve_unary(node, graph)
    if isinstance(resolved, str):
        return resolved
    key, p0, p1 = resolved
    defines: dict[str, object] = ew.unary_defines(key, p0, p1)
    uniforms = geometry(x, {"X": x}, lim)
    if lim.shared:  # the op's parameters (Clip bounds, alphas) as uniforms too
        uniforms |= {"u_act_p0": float(np.float32(p0)), "u_act_p1": float(np.float32(p1))}
        defines |= {"ACT_P0": "u_act_p0", "ACT_P1": "u_act_p1"}
    src = _source("unary.frag", x, {"X": x}, False, defines, uniforms=uniforms)
    return Kernel("unary", src, [("X", node.inputs[0])], x, False, flops=int(np.prod(xs or (1,))),
                  in_layouts={"X": x}, uniforms=uniforms)


# ---- pooling, resize, concat, softmax, pad -----------------------------------------------------

def pool(node: Node, graph: Graph, lim: Limits) -> Kernel | str:
    if len([o for o in node.outputs if o]) > 1:
        return "MaxPool Indices output not supported"
    xs, ys = _shape(graph, node.inputs[0]), _shape(graph, node.outputs[0])
    if xs is None or ys is None:
        return "shape not static"
    if len(xs) != 4:
        return f"{len(xs) - 2}-D pooling (only 2-D)"
    x, out = layout_of(xs, lim), layout_of(ys, lim)
    if isinstance(x, str) or isinstance(out, str):
        return x if isinstance(x, str) else str(out)
    rec = _record(node, graph, ops.PoolRecord)
    if isinstance(rec, str):
        return rec
    if len(rec.kernel) != 2:
        return "kernel_shape is not 2-D"
    if tuple(ys[2:]) != rec.out_spatial:
        return f"the graph's output shape {ys} does not match the pooling attributes' {rec.out_spatial}"
    k, s, d = rec.kernel, rec.strides, rec.dilations
    pads = rec.pads
    is_max = node.op_type == "MaxPool"
    if not is_max and rec.count_include_pad and rec.auto_pad.startswith("SAME"):
        return "count_include_pad with auto_pad SAME"
    defines = {"POOL_MAX": int(is_max), "COUNT_PAD": int(rec.count_include_pad),
               "KH": k[0], "KW": k[1], "SH": s[0], "SW": s[1], "DH": d[0], "DW": d[1],
               "PT": pads[0], "PL": pads[1], "PB": pads[2], "PR": pads[3]}
    uniforms = geometry(out, {"X": x}, lim)
    src = _source("pool.frag", out, {"X": x}, False, defines, uniforms=uniforms)
    return Kernel("pool", src, [("X", node.inputs[0])], out, False, flops=int(np.prod(ys)) * k[0] * k[1],
                  in_layouts={"X": x}, uniforms=uniforms)


GP_K = 8  # globalpool: columns per unrolled step of the row loop


def global_pool_back_edges(h: int, w: int) -> int:
    """Loop back-edges one globalpool fragment takes (see ``LLVMPIPE_LOOP_LIMIT``): per row, the
    row loop's step plus the unrolled column steps, the tail columns and the two loop exits."""
    return h * (w // GP_K + w % GP_K + 2) + 1


def _global_pool_defines(planes: int, is_max: bool) -> dict[str, object]:
    ps = range(planes)
    init = "vec4(uintBitsToFloat(0xff800000u))" if is_max else "vec4(0.0)"  # -Inf
    add = (lambda p: f"row{p} = ew_fmax(row{p}, texelFetch(X_{p}, c, 0));") if is_max else \
        (lambda p: f"row{p} += texelFetch(X_{p}, c, 0);")
    return {
        "POOL_MAX": int(is_max), "GP_K": GP_K,
        "GP_INIT": " ".join(f"vec4 acc{p} = {init};" for p in ps),
        # Average: per-row partial sums (less rounding than one running sum over H x W).
        "GP_ROW": " ".join(f"vec4 row{p} = {'acc' + str(p) if is_max else 'vec4(0.0)'};" for p in ps),
        "GP_ADD(dx)": "{ ivec2 c = base + ivec2(x + (dx), y); " + " ".join(add(p) for p in ps) + " }",
        "GP_ADD_K": " ".join(f"GP_ADD({k})" for k in range(GP_K)),
        "GP_ROW_END": " ".join(f"acc{p} = row{p};" if is_max else f"acc{p} += row{p};" for p in ps),
        "GP_OUT": " ".join(f"r[{p}] = acc{p};" if is_max else f"r[{p}] = acc{p} / float(X_H * X_W);" for p in ps),
    }


def global_pool(node: Node, graph: Graph, lim: Limits) -> Kernel | str:
    xs, ys = _shape(graph, node.inputs[0]), _shape(graph, node.outputs[0])
    if xs is None or ys is None:
        return "shape not static"
    if node.op_type == "ReduceMean":
        red = _record(node, graph, ops.ReduceRecord)
        if isinstance(red, str):
            return red
        if len(xs) != 4 or red.axes != (2, 3) or not red.keepdims:
            return "ReduceMean only over H and W of a 4-D tensor with keepdims"
    if len(xs) != 4:
        return "global pooling of a tensor that is not 4-D"
    x, out = layout_of(xs, lim), layout_of(ys, lim)
    if isinstance(x, str) or isinstance(out, str):
        return x if isinstance(x, str) else str(out)
    if x.planes != out.planes:
        return f"input in {x.planes} planes, output in {out.planes}"
    is_max = node.op_type == "GlobalMaxPool"
    edges = global_pool_back_edges(x.h, x.w)
    if edges > LOOP_BUDGET:
        return (f"{x.h}x{x.w} positions per fragment is too many ({edges} loop iterations; "
                f"llvmpipe stops loops after {LLVMPIPE_LOOP_LIMIT})")
    uniforms = geometry(out, {"X": x}, lim)
    src = _source("globalpool.frag", out, {"X": x}, False, _global_pool_defines(out.planes, is_max),
                  uniforms=uniforms)
    return Kernel("globalpool", src, [("X", node.inputs[0])], out, False, flops=int(np.prod(xs)),
                  in_layouts={"X": x}, uniforms=uniforms)


def resize(node: Node, graph: Graph, lim: Limits) -> Kernel | str:
    xs, ys = _shape(graph, node.inputs[0]), _shape(graph, node.outputs[0])
    if xs is None or ys is None:
        return "shape not static"
    if len(xs) != 4 or xs[:2] != ys[:2]:
        return "resizing only H and W of a 4-D tensor"
    rec = _record(node, graph, ops.ResizeRecord)
    if isinstance(rec, str):
        return rec
    if rec.antialias:
        return "antialias not supported"
    if rec.axes is not None:
        return "axes not supported"
    mode, ct, nm, scales = rec.mode, rec.coordinate_mode, rec.nearest_mode, list(rec.scales)
    if mode not in ("nearest", "linear"):
        return f"mode {mode} not supported"
    cts = {"half_pixel": 0, "pytorch_half_pixel": 1, "align_corners": 2, "asymmetric": 3,
           "tf_half_pixel_for_nn": 4}
    if ct not in cts:
        return f"coordinate_transformation_mode {ct} not supported"
    nms = {"round_prefer_floor": 0, "round_prefer_ceil": 1, "floor": 2, "ceil": 3}
    if nm not in nms:
        return f"nearest_mode {nm} not supported"
    if len(scales) != 4 or scales[0] != 1 or scales[1] != 1:
        return "scales on N or C"
    x, out = layout_of(xs, lim), layout_of(ys, lim)
    if isinstance(x, str) or isinstance(out, str):
        return x if isinstance(x, str) else str(out)
    defines = {"RESIZE_LINEAR": int(mode != "nearest"), "COORD_MODE": cts[ct], "NEAREST_MODE": nms[nm],
               "SCALE_Y": _float(float(np.float32(scales[2]))), "SCALE_X": _float(float(np.float32(scales[3])))}
    uniforms = geometry(out, {"X": x}, lim)
    src = _source("resize.frag", out, {"X": x}, False, defines, uniforms=uniforms)
    return Kernel("resize", src, [("X", node.inputs[0])], out, False, flops=int(np.prod(ys)) * 8,
                  in_layouts={"X": x}, uniforms=uniforms)


def concat(node: Node, graph: Graph, lim: Limits) -> Kernel | str:
    ys = _shape(graph, node.outputs[0])
    out = layout_of(ys, lim)
    if isinstance(out, str):
        return out
    assert ys is not None
    rec = _record(node, graph, ops.AxisRecord)
    if isinstance(rec, str):
        return rec
    axis = rec.axis
    if axis != 1 or len(ys) < 2:
        return f"Concat along axis {axis} (only channels, axis 1)"
    inputs: dict[str, TexLayout] = {}
    tensors: list[tuple[str, str]] = []
    consts: dict[str, tuple[np.ndarray, TexLayout]] = {}
    offsets = []
    off = 0
    units = 0
    for i, name in enumerate(node.inputs):
        s = _shape(graph, name)
        lay = layout_of(s, lim)
        if isinstance(lay, str):
            return lay
        prefix = f"X{i}"
        inputs[prefix] = lay
        units += lay.planes
        if name in graph.constants:
            consts[prefix] = (np.asarray(graph.constants[name], np.float32).reshape(to4d(s)), lay)  # type: ignore[arg-type]
        else:
            tensors.append((prefix, name))
        offsets.append(off)
        off += lay.c
    if units > lim.max_texture_units:
        return f"{units} input textures exceed the {lim.max_texture_units} texture units"
    aligned = all(o % 4 == 0 for o in offsets)
    uniforms = geometry(out, inputs, lim)
    # where input i starts: in slices (aligned) or channels; uniforms when shared
    starts = [o // 4 if aligned else o for o in offsets]
    start = [str(v) for v in starts]
    if lim.shared:
        start = [f"CAT_{i}" for i in range(len(starts))]
        uniforms |= {f"CAT_{i}": v for i, v in enumerate(starts) if i}
    parts = []
    if aligned:
        parts.append("vec4 concat_slice(int n, int s, int y, int x) {")
        for i in range(len(offsets) - 1, 0, -1):
            parts.append(f"    if (s >= {start[i]}) return X{i}_get(n, s - {start[i]}, y, x);")
        parts.append("    return X0_get(n, s, y, x);\n}")
    else:
        parts.append("float concat_lane(int n, int c, int y, int x) {")
        for i in range(len(offsets) - 1, -1, -1):
            cond = f"if (c >= {start[i]}) " if i else ""
            first = start[i] if i else "0"
            parts.append(f"    {cond}{{ int k = c - {first}; return X{i}_get(n, k / 4, y, x)[k - (k / 4) * 4]; }}")
        parts.append("}")
    src = _source("concat.frag", out, inputs, False, {"CONCAT_ALIGNED": int(aligned)}, "\n".join(parts),
                  uniforms=uniforms)
    return Kernel("concat", src, tensors, out, False, consts=consts, in_layouts=inputs, uniforms=uniforms)


# Softmax axes at least this long run as index_ops' three passes (row max, row sum, result): one
# kernel recomputing both for every output element reads the axis twice per element, and past
# ~16k elements (4 render targets) a fragment's loops run over llvmpipe's limit.
LONG_SOFTMAX = 1024


def softmax(node: Node, graph: Graph, lim: Limits) -> Kernel | str:
    xs = _shape(graph, node.inputs[0])
    x = layout_of(xs, lim)
    if isinstance(x, str):
        return x
    assert xs is not None
    rec = _record(node, graph, ops.AxisRecord)
    if isinstance(rec, str):
        return rec
    axis = rec.axis
    if axis != 1 or len(xs) < 2:
        return f"Softmax along axis {axis} (only the channel axis 1)"
    if graph.opset < 13 and int(np.prod(xs[2:])) != 1:
        return "opset < 13 Softmax over flattened C*H*W"
    if x.c >= LONG_SOFTMAX:
        return f"{x.c} channels: every fragment would read them all twice per slice (index kernel's passes)"
    uniforms = geometry(x, {"X": x}, lim)
    src = _source("softmax.frag", x, {"X": x}, False, uniforms=uniforms)
    return Kernel("softmax", src, [("X", node.inputs[0])], x, False, flops=int(np.prod(xs)) * 3 * x.c,
                  in_layouts={"X": x}, uniforms=uniforms)


def pad(node: Node, graph: Graph, lim: Limits) -> Kernel | str:
    xs, ys = _shape(graph, node.inputs[0]), _shape(graph, node.outputs[0])
    if xs is None or ys is None or len(xs) != 4:
        return "Pad only of static 4-D tensors"
    rec = _record(node, graph, ops.PadRecord)
    if isinstance(rec, str):
        return rec
    pads, value, mode = list(rec.pads), rec.value, rec.mode
    if len(pads) != 8 or any(pads[i] for i in (0, 1, 4, 5)):
        return "Pad only over H and W"
    modes = {"constant": 0, "reflect": 1, "edge": 2}
    if mode not in modes:
        return f"mode {mode} not supported"
    if mode == "reflect" and (max(pads[2], pads[6]) >= xs[2] or max(pads[3], pads[7]) >= xs[3]):
        return "reflect pad wider than the input"
    x, out = layout_of(xs, lim), layout_of(ys, lim)
    if isinstance(x, str) or isinstance(out, str):
        return x if isinstance(x, str) else str(out)
    defines = {"PAD_MODE": modes[mode], "PAD_VALUE": _float(value), "PT": pads[2], "PL": pads[3]}
    uniforms = geometry(out, {"X": x}, lim)
    src = _source("pad.frag", out, {"X": x}, False, defines, uniforms=uniforms)
    return Kernel("pad", src, [("X", node.inputs[0])], out, False, in_layouts={"X": x}, uniforms=uniforms)


_ALIAS_OPS = ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout")


def alias(node: Node, graph: Graph, lim: Limits) -> Kernel | str:
    if node.op_type == "Dropout" and len([o for o in node.outputs if o]) > 1:
        return "Dropout mask output not supported"
    if any(i and i not in graph.constants for i in node.inputs[1:]):
        return f"{node.op_type}'s shape/axes input arrives at run time"
    xs, ys = _shape(graph, node.inputs[0]), _shape(graph, node.outputs[0])
    if xs is None or ys is None:
        return "shape not static"
    if to4d(xs) is None or to4d(xs) != to4d(ys):
        return f"{xs} -> {ys} changes the texture layout"
    out = layout_of(ys, lim)
    if isinstance(out, str):
        return out
    return Kernel("layout", "", [("X", node.inputs[0])], out, False, alias=node.inputs[0], in_layouts={"X": out})


def _check(node: Node, graph: Graph) -> str | None:
    if not node.inputs or not node.inputs[0]:
        return "no data input"
    bad = _check_float(graph, quant.float_tensors(node) if node.op_type in quant.QDQ_OPS else _float_checked(node))
    if bad:
        return bad
    if node.inputs[0] in graph.constants and node.op_type not in ("Concat", "Sum", "Mean", "Max", "Min",
                                                                  *ew.BINARY_OP_TYPES):
        return "data input is constant"
    return None


def single_output(node: Node, generated: Generated, graph: Graph) -> str | None:
    """The path's last word on a generated kernel: a node with several outputs runs only as one
    kernel per output (a list: Split)."""
    if not isinstance(generated.payload, list) and len([o for o in node.outputs if o]) != 1:
        return "more than one output"
    return None


def _check_float(graph: Graph, names: list[str]) -> str | None:
    return non_float32(graph, names, "gles3 textures hold float32 only")


# Candidates per op type: (kernel name, generator(node, graph, limits)). The Conv generator names
# its kernel conv1x1, depthwise or conv (:func:`kernel_name`).
REGISTRY = KernelRegistry("gles3", {
    "Conv": [("conv", conv)],
    "ConvTranspose": [("convtranspose_taps", conv_transpose_taps), ("convtranspose", conv_transpose)],
    "Gemm": [("gemm", gemm)], "MatMul": [("matmul", gemm)],
    **{op: [("binary", binary)] for op in ew.BINARY_OP_TYPES},
    **{op: [("unary", unary)] for op in ew.UNARY_OP_TYPES},
    "MaxPool": [("pool", pool)], "AveragePool": [("pool", pool)],
    **{op: [("globalpool", global_pool)] for op in ("GlobalAveragePool", "GlobalMaxPool", "ReduceMean")},
    "Resize": [("resize", resize)], "Upsample": [("resize", resize)],
    "Concat": [("concat", concat)],
    "Softmax": [("softmax", softmax)],
    "Pad": [("pad", pad)],
    **{op: [("layout", alias)] for op in _ALIAS_OPS},
}, check=_check)


def conv_kind(node: Node, graph: Graph) -> str:
    """conv1x1, depthwise or conv: the float Conv kernel's name for ``node``."""
    w = graph.constants.get(node.inputs[1]) if len(node.inputs) > 1 else None
    rec = ops.lower(node, graph)
    group = rec.group if isinstance(rec, ops.ConvRecord) else 1
    if w is not None and w.ndim == 4 and group > 1:
        return "depthwise" if w.shape[1] == 1 and w.shape[0] == group else "conv"
    if w is not None and w.ndim == 4 and w.shape[2] == w.shape[3] == 1:
        return "conv1x1"
    return "conv"


def kernel_name(node: Node, graph: Graph, lim: Limits | None = None) -> str | None:
    """The short kernel name this path would use for ``node`` with ``lim`` (default: a context
    that has only what ES 3.0 guarantees) (None: no kernel)."""
    op = node.op_type
    lim = lim or Limits()
    # int8 weights (or the float kernel if those decline); ConvTranspose by taps where it applies,
    # else the gather form; conv_blend and conv_px where they take the node (a list of passes:
    # named by the first)
    if (op in quant.WEIGHT_OPS and node.inputs[1:2] and node.inputs[1] in graph.dequantized) \
            or op == "ConvTranspose" or (op == "Conv" and conv_px.declines(node, graph, lim) is None) \
            or (op in ("Conv", "Gemm", "MatMul") and conv_blend.declines(node, graph, lim) is None):
        got = generate(REGISTRY, node, graph, lim)
        if not isinstance(got, str):
            return (got.payload[0] if isinstance(got.payload, list) else got.payload).name
    if op == "Conv":
        return conv_kind(node, graph)
    # float weights: neither the int8-weight kernel nor conv_blend (both taken above if they apply)
    names = [name for name, _ in REGISTRY.get(op) or () if not name.endswith("_q8") and name != "conv_blend"]
    return names[0] if names else None


def build(node: Node, graph: Graph, lim: Limits) -> Kernel | list[Kernel] | str:
    """The kernel for ``node`` (one per output for Split) or the reason this path declines it.
    The specialised generators of this module go first; the general index kernels of
    :mod:`.index_ops` take what they decline."""
    got = generate(REGISTRY, node, graph, lim)
    return got if isinstance(got, str) else got.payload


# The general index kernels (Transpose, Slice, Split, Gather, Reduce*, normalisations, ...) are
# candidates after the specialised ones; index_ops builds on this module, so it registers last.
from .index_ops import GENERATORS as _INDEX_GENERATORS  # noqa: E402
from .index_ops import float_checked as _float_checked  # noqa: E402

for _op, (_name, _gen) in _INDEX_GENERATORS.items():
    REGISTRY.add(_op, _name, _gen)

# int8 (QDQ) candidates: int8-weight convolutions before the float ones, Quantize/DequantizeLinear.
from . import quant  # noqa: E402

quant.register(REGISTRY)

# Conv with several output pixels per fragment, before the one-pixel kernels; then Conv, Gemm and
# MatMul with the weights in flat varyings, before every other float kernel of those ops.
from . import conv_blend, conv_px  # noqa: E402, F401
