"""gles3 Conv with several output pixels per fragment (``conv_px``), in two passes.

Why: llvmpipe (Mesa 22.3) loads a uniform-block weight lane by lane even at a constant index (8
scalar loads, a bounds check and the inserts: about 24 instructions for one weight's 8 SIMD
multiply-adds; ``tools/jit_dump.py`` counts them), so the weight loads, not the multiply-adds, are
a conv kernel's cost. A fragment that computes R pixels of one output slice uses each weight it
loads R times. A fragment still writes one texel per render target at its own position, so

1. ``conv_px`` (``shaders/gles3/conv_px.frag``) writes an internal tensor Q of R * S slices (S:
   the output's slices) at 1/R of the output's width: render target q of slot s holds slice s at
   output pixel R * x + q;
2. ``conv_px_unpack`` (``shaders/gles3/conv_px_unpack.frag``) moves every pixel to its place in
   the output's layout (a copy, no arithmetic).

Taken for group-1 convolutions with at least ``Limits.conv_px_min_pixels`` output pixels per plane
and ``Limits.conv_px_min_macs`` multiply-adds per output value (below those the extra pass costs
more than the loads it saves); the one-pixel-per-fragment
kernel (``conv`` / ``conv1x1``) takes the rest, and ``disabled_kernels={"conv_px"}`` gives it back."""

from __future__ import annotations

import numpy as np

from ... import ops
from ...graph import Graph, Node
from ...ops.elementwise import activation_defines
from .kernels import (
    REGISTRY,
    Kernel,
    Limits,
    _pack_weights,
    _record,
    _shape,
    _source,
    conv_layouts,
    geometry,
)
from .layout import TexLayout, plan_layout


def _taps_code(x: TexLayout, pixels: int, slices: int, unrolled: bool, kh: int, kw: int,
               always_inside: bool) -> str:
    """conv_all(n, oy, ox0, acc) (every tap and input slice written out: constant weight
    indices) or conv_tap(n, oy, ox0, ky, kx, acc) (one tap, loops over the input slots): each
    weight matrix is loaded once and multiplied with the input texel of each of the ``pixels``
    pixels; target ``sx * pixels + q`` sums output slice ``sx`` of the fragment at pixel ``q``."""
    qs, sxs = range(pixels), range(slices)
    sel = "{}" if always_inside else "mix(vec4(0.0), {}, bvec4(in{}))"

    def slice_step(plane: int | str, slot: int | str, b: str) -> list[str]:
        lines = [f"    v{q} = " + sel.format(f"X_plane({plane}, n, {slot}, iy, ix{q})", q) + ";" for q in qs]
        for sx in sxs:
            lines.append("    m = mat4(" + ", ".join(f"W{sx * pixels}[{b} + {j}]" for j in range(4)) + ");")
            lines += [f"    acc[{sx * pixels + q}] += m * v{q};" for q in qs]
        return lines

    decl = ["    int iy;", *(f"    int ix{q}; bool in{q};" for q in qs), "    mat4 m;",
            "    vec4 " + ", ".join(f"v{q}" for q in qs) + ";"]

    def taps(ky: str, kx: str) -> list[str]:
        return [f"    in{q} = tap(oy, ox0 + {q}, {ky}, {kx}, iy, ix{q});" for q in qs]

    if unrolled:
        lines = ["void conv_all(int n, int oy, int ox0, inout ACC4 acc[R_OUT]) {", *decl]
        for ky in range(kh):
            for kx in range(kw):
                lines += taps(str(ky), str(kx))
                for si in range(x.slices):
                    lines += slice_step(si % x.planes, si // x.planes, str(((ky * kw + kx) * x.slices + si) * 4))
        return "\n".join(lines + ["}"])
    lines = ["void conv_tap(int n, int oy, int ox0, int ky, int kx, inout ACC4 acc[R_OUT]) {", *decl,
             *taps("ky", "kx"), f"    int k = ky * {kw} + kx;"]
    # as kernels._conv_code: a last slot with every plane in use joins the loop
    tail = x.slices - (x.slots - 1) * x.planes
    looped = 0 if x.slots == 1 else x.slots if tail == x.planes else x.slots - 1
    if looped:
        lines.append(f"    for (int gi = 0; gi < {looped}; ++gi) {{")
        lines.append(f"    int b = (k * {x.slices} + gi * {x.planes}) * 4;")
        for pi in range(x.planes):
            lines += slice_step(pi, "gi", f"b + {pi * 4}")
        lines.append("    }")
    if looped < x.slots:
        lines.append(f"    {{\n    int b = (k * {x.slices} + {(x.slots - 1) * x.planes}) * 4;")
        for pi in range(tail):
            lines += slice_step(pi, x.slots - 1, f"b + {pi * 4}")
        lines.append("    }")
    return "\n".join(lines + ["}"])


def declines(node: Node, graph: Graph, lim: Limits) -> str | None:
    """Why ``conv_px`` does not take ``node`` (None: it does); shapes and attributes only."""
    if lim.conv_px_pixels < 2 or lim.planes % lim.conv_px_pixels:
        return f"{lim.conv_px_pixels} pixels per fragment with {lim.planes} render targets"
    w = graph.constants.get(node.inputs[1]) if len(node.inputs) > 1 else None
    ys = _shape(graph, node.outputs[0])
    if w is None or w.ndim != 4 or ys is None or len(ys) != 4:
        return "not a 2-D convolution with constant weights and a static output"
    rec = _record(node, graph, ops.ConvRecord)
    if isinstance(rec, str):
        return rec
    if rec.group != 1:
        return "grouped or depthwise convolution"
    if w.shape[1] * w.shape[2] * w.shape[3] < lim.conv_px_min_macs:
        return f"{w.shape[1] * w.shape[2] * w.shape[3]} multiply-adds per output value: below {lim.conv_px_min_macs}"
    if ys[2] * ys[3] < lim.conv_px_min_pixels:
        return (f"{ys[2]}x{ys[3]} output pixels per plane: below {lim.conv_px_min_pixels} the extra draws "
                f"cost more than the weight loads saved")
    return None


def conv_px(node: Node, graph: Graph, lim: Limits) -> list[Kernel] | str:
    operands = conv_layouts(node, graph, lim, declines)
    if isinstance(operands, str):
        return operands
    w, bias, ys, rec, x, out = operands
    pixels = lim.conv_px_pixels
    slices = lim.planes // pixels  # output slices per fragment
    groups = -(-out.slices // slices)
    q_lay = plan_layout((out.n, 4 * lim.planes * groups, out.h, -(-out.w // pixels)), lim.planes,
                        lim.max_texture_size)
    if isinstance(q_lay, str):
        return f"the pixel groups do not fit: {q_lay}"
    assert q_lay.planes == lim.planes and q_lay.slots == groups
    cout, cin = out.c, x.c
    kh, kw = int(w.shape[2]), int(w.shape[3])
    k = kh * kw
    b = np.zeros(cout, np.float32) if bias is None else np.asarray(bias, np.float32).reshape(-1)
    if b.size != cout:
        return f"bias has {b.size} values for {cout} output channels"
    full = np.zeros((cout, k, x.slices * 4), np.float32)  # as kernels._conv_kernel's dense blocks
    full[:, :, :cin] = np.asarray(w, np.float32).reshape(cout, cin, k).transpose(0, 2, 1)
    packed = _pack_weights(full.reshape(cout, -1), b, out)
    nw = packed.shape[1]
    if nw * 16 > lim.max_uniform_block_size:
        return f"{nw} weight vectors per output slice exceed a uniform block"
    per_slice = np.zeros((groups * slices, nw, 4), np.float32)
    per_slice[: out.slices] = packed[: out.slices]
    # The runtime binds block p of tile (n, g) to entry g * R + p: target p's output slice,
    # g * slices + p // pixels; the shader reads blocks 0, pixels, 2 * pixels, ...
    weights = np.ascontiguousarray(np.repeat(per_slice, pixels, axis=0))
    strides, dil, pads = list(rec.strides), list(rec.dilations), list(rec.pads_begin)
    unrolled = lim.baked and k * x.slices * lim.planes <= lim.unroll_matvecs
    always_inside = not any(pads) and (out.h - 1) * strides[0] + (kh - 1) * dil[0] < x.h and \
        (out.w - 1) * strides[1] + (kw - 1) * dil[1] < x.w and out.w % pixels == 0
    init = " ".join(f"acc[{p}] = W{p - p % pixels}[{nw - 1}];" for p in range(lim.planes))
    blocks = "\n".join(f"layout(std140) uniform WB{p} {{ vec4 W{p}[{nw}]; }};" for p in range(0, lim.planes, pixels))
    decls = "\n".join([blocks, f"void conv_init(out ACC4 acc[R_OUT]) {{ {init} }}",
                       "bool tap(int oy, int ox, int ky, int kx, out int iy, out int ix);",
                       _taps_code(x, pixels, slices, unrolled, kh, kw, always_inside)])
    defines = activation_defines(None if rec.act is None else rec.act.spec)
    defines["PX"] = pixels
    if unrolled:
        defines["CONV_UNROLLED"] = True
    uniforms = geometry(q_lay, {"X": x}, lim)
    consts = {"KH": kh, "KW": kw, "SH": strides[0], "SW": strides[1], "DH": dil[0], "DW": dil[1],
              "PT": pads[0], "PL": pads[1]}
    for key, value in consts.items():  # as kernels._conv_kernel
        if not lim.baked or (lim.shared and key not in ("KH", "KW")):
            uniforms[key] = value
        else:
            defines[key] = value
    src = _source("conv_px.frag", q_lay, {"X": x}, True, defines, decls, uniforms)
    q_name = f"{node.outputs[0]}#conv_px"
    first = Kernel("conv_px", src, [("X", node.inputs[0])], q_lay, True, weights=weights, weight_mode="ubo",
                   in_layouts={"X": x}, uniforms=uniforms, writes=q_name,
                   flops=2 * out.n * out.h * out.w * cout * k * cin)
    un_uniforms = geometry(out, {"X": q_lay}, lim)
    un_src = _source("conv_px_unpack.frag", out, {"X": q_lay}, False, {"PX": pixels, "SX": slices},
                     uniforms=un_uniforms)
    second = Kernel("conv_px_unpack", un_src, [("X", q_name)], out, False, in_layouts={"X": q_lay},
                    uniforms=un_uniforms)
    return [first, second]


# before the one-pixel float kernel, after the int8-weight one (quant.register)
_float_conv = [name for name, _ in REGISTRY["Conv"]].index("conv")
REGISTRY["Conv"].insert(_float_conv, ("conv_px", conv_px))
