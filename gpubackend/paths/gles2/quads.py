"""gles2 GEMMs drawn as many quads per draw, each quad with its own weights in varyings.

llvmpipe loads a fragment shader's uniform lane by lane, and each gles2 draw costs tens of
microseconds: a conv drawn once per output channel with its weights in a uniform array pays both
(for a 1x1 conv of 256 channels at 10x10, half its time). Here one draw covers many output
channels: quad q of the draw (``shaders/gles2/quads.vert``) is one output channel's band of the
output texture (or one band of it: Winograd's 16 transformed planes side by side) and its vertex
shader hands the quad's weights to the fragments as varyings. A reduction longer than the
varyings hold runs in chunks, each adding the previous chunk's sums (an RGBA8 fp32 round trip,
exact). Only where the weights fit (``Config.channel_varyings``: llvmpipe), fp32.

Used by Winograd's GEMMs (``winograd.py``) and by ungrouped convolutions (:func:`gen_conv_quads`).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np

from gpubackend import shaders

from ... import ops
from ...graph import Graph, Node
from .kernels import REGISTRY, Config, Decline, Kernel, _Gen, activation_function, lit
from .layout import Layout, LayoutError

MAX_QUADS = 256  # quads in one draw (the vertex buffer's size)
MAX_POINTS = 64 * MAX_QUADS  # point sprites in one draw (their vertex buffer's size)
MAX_CHUNKS = 12  # passes over the reduction (3x3 stride 2, 128 -> 256 at 20x20: 10 passes, 1.31x the direct kernel)
NAME = "conv_quads"
DEPTHWISE_NAME = "depthwise_quads"  # the depthwise convs gen_conv_quads draws (one record, its own verdict)


def chunk_limit(cfg: Config, bands: int) -> int:
    """Input channels one pass can take: weights (and a bias) in the varyings, and ``bands``
    quads' worth of them in the vertex shader's uniforms."""
    nv = min(cfg.max_varying_vectors - 1, (cfg.max_vertex_uniform_vectors - 8) // bands)
    if nv < 1:
        raise Decline("no room for the weights in the varyings")
    return 4 * nv - 1  # one lane left for the bias


def chunks(c: int, limit: int) -> list[tuple[int, int]]:
    """``[c0, c1)`` ranges of at most ``limit`` input channels, as even as the count allows."""
    n = -(-c // limit)
    if n > MAX_CHUNKS:
        raise Decline(f"{c} input channels need more than {MAX_CHUNKS} passes of {limit}")
    step = -(-c // n)
    return [(c0, min(c, c0 + step)) for c0 in range(0, c, step)]


def one_row_per_row(cfg: Config, *shapes: tuple[int, ...]) -> None:
    """Decline unless each tensor's texture holds one tensor row per texture row (the quads'
    bands are then rectangles)."""
    try:
        if any(Layout.of(s, 1, cfg.max_size).k != 1 for s in shapes):
            raise Decline("a tensor of the GEMM needs more rows than a texture has")
    except LayoutError as exc:
        raise Decline(str(exc)) from exc


def quad_products(name: str, g: _Gen, dst: str, dst_shape: tuple[int, ...], prev: str, weights: np.ndarray,
                  terms: list[tuple[str, str]], bias: np.ndarray | None, decls: str = "", setup: str = "") -> Kernel:
    """dst[m, h, k W + w] = prev[m, h, k W + w] + bias[m] + sum_j weights[m, k, j] term_j (``k``
    one of the ``bands`` = weights.shape[1] column bands of width W = width / bands; prev and
    bias optional), then ``g.act``. ``terms``: (guard, GLSL value) per j, the value counted where
    the guard (if any) holds, both in terms of the fragment's (c, h, w), ``decls`` (global
    declarations) and ``setup``'s locals.
    ``dst`` one image, one texture row per tensor row. One draw per group of output channels,
    a quad per (channel, band)."""
    cfg = g.cfg
    m, bands, c = weights.shape
    one_row_per_row(cfg, dst_shape)
    nv, quads, draws = _draws(weights, bias, dst_shape[2], cfg)
    start = f"{g.load(prev)}(0.0, c, h, w)" if prev else "0.0"
    if bias is not None:
        start += f" + v_w[{c // 4}].{'xyzw'[c % 4]}"
    lines = []
    for j, (guard, value) in enumerate(terms):
        term = f"acc += {value} * v_w[{j // 4}].{'xyzw'[j % 4]};"
        lines.append(f"if ({guard}) {term}" if guard else term)
    body = (f"varying vec4 v_w[{nv}];\n{decls}\n"
            f"float compute(float n, float c, float h, float w) {{ {setup} float acc = {start}; {' '.join(lines)} "
            "return activate(acc); }")
    kernel = g.finish(name, body, dst_shape, output=dst)
    _quad_grid(kernel, nv, quads, bands, dst_shape, draws, cfg.max_point_size)
    return kernel


def _draws(weights: np.ndarray, bias: np.ndarray | None, rows: int, cfg: Config) -> tuple[int, int, list]:
    """(varying vectors, quads per draw, draws) of a quad GEMM pass: ``weights`` (m, bands, n) and
    ``bias`` (m,) or None (the lane after the weights) packed a quad per (channel, band), the quads
    of ``rows`` texture rows per channel."""
    m, bands, n = weights.shape
    nv = -(-(n + (bias is not None)) // 4)
    per_draw = max(1, min(MAX_QUADS, (cfg.max_vertex_uniform_vectors - 8) // nv) // bands)  # output channels
    packed = np.zeros((m, bands, 4 * nv), np.float32)
    packed[:, :, :n] = weights
    if bias is not None:
        packed[:, :, n] = np.asarray(bias, np.float32).reshape(-1, 1)
    draws = [(float(m0 * rows), (min(m, m0 + per_draw) - m0) * bands, packed[m0:m0 + per_draw].reshape(-1, 4 * nv))
             for m0 in range(0, m, per_draw)]
    return nv, per_draw * bands, draws


def point_cover(width: int, height: int, max_side: int) -> tuple[int, int, int] | None:
    """(side, across, down): the point sprites covering a width x height quad, the last column and
    row of them shifted back to end at its edge; the cover whose sprites touch the fewest 4x4
    pixel blocks (llvmpipe shades whole blocks). None where no sprite fits (max_side < 2) or a quad
    needs more than the vertex buffer holds per quad."""
    best = None
    for side in range(min(width, height, max_side), 1, -1):
        across, down = -(-width // side), -(-height // side)
        if across * down * MAX_QUADS > MAX_POINTS:
            break
        blocks = across * down * (side / 4 + 0.75) ** 2  # blocks a sprite at a random offset touches
        if best is None or blocks < best[0]:
            best = (blocks, side, across, down)
    return None if best is None else best[1:]


def _quad_grid(kernel: Kernel, nv: int, quads: int, bands: int, dst_shape: tuple[int, ...], draws: list,
               max_point_size: int, row0: float = 0.0) -> None:
    """Attach the many-quad draws: quads.vert (sizes as uniforms) and its per-step uniforms; point
    sprites where they fit."""
    h, width = dst_shape[2], dst_shape[3]
    cover = point_cover(width // bands, h, max_point_size)
    defines = {"WEIGHT_VARYINGS": nv, "QUADS": quads} | ({"POINTS": 1} if cover else {})
    kernel.vertex = shaders.source("gles2/quads.vert", "100", defines)
    kernel.quads, kernel.quad_draws = quads, draws
    kernel.uniforms.update(u_grid=(float(bands), float(width // bands), float(h), 0.0),
                           u_target=(2.0 / width, 2.0 / (dst_shape[1] * h)), u_row0=(row0,))
    if cover:
        side, across, down = cover
        kernel.quad_points = across * down
        kernel.uniforms["u_points"] = (float(side), float(across), float(across * down), 0.0)
        kernel.variant, kernel.variant_why = "point sprites", f"point size up to {max_point_size}"
    else:
        kernel.variant = "triangles"
        kernel.variant_why = (f"point size up to {max_point_size}" if max_point_size < 2 else
                              f"a {width // bands}x{h} quad needs too many sprites")


@functools.cache
def _gemm_fragment(n: int, nv: int, prev: bool, bias: bool, act: tuple | None, residual: bool = False) -> str:
    """A quad GEMM pass whose operand is the source at the fragment's own texel column and row
    plus an offset (``v_row`` + k H rows for term k): no size or position in the text, so every
    layer with the same term count, flags and activation shares the program (and llvmpipe's JIT of
    it, about 11 ms per texel fetch). ``act``: (op, sorted parameter items) or None (hashable);
    ``residual``: a tensor laid out as the output added after it (the next sampler)."""
    terms = []
    for k in range(n):
        terms.append(f"acc += g2_decode32(texture2D(t0, vec2(x, y0 + {lit(k)} * u_src.z))) "
                     f"* v_w[{k // 4}].{'xyzw'[k % 4]};")
    # samplers in the kernel's input order: the operand, the previous pass's sums, the residual
    roles = ["operand", *(["the previous pass's sums (PREV)"] if prev else []),
             *(["the residual (RESIDUAL)"] if residual else [])]
    start = "g2_decode32(texture2D(t1, fc * u_dst))" if prev else "0.0"
    if bias:
        start += f" + v_w[{n // 4}].{'xyzw'[n % 4]}"
    result = "activate(acc)"
    if residual:
        result += f" + g2_decode32(texture2D(t{len(roles) - 1}, fc * u_dst))"
    body = "\n".join([
        *(f"uniform sampler2D t{i};  // {role}" + (", laid out as the output" if i else "")
          for i, role in enumerate(roles)),
        "uniform vec4 u_src;    // 1 / operand width, 1 / operand height, rows per channel / operand height",
        "uniform vec2 u_dst;    // 1 / output width, 1 / output height",
        f"varying vec4 v_w[{nv}];",
        "varying float v_row;",
        activation_function(None if act is None else (act[0], dict(act[1]))),
        "void main() {",
        "    highp vec2 fc = gl_FragCoord.xy;",
        "    float x = fc.x * u_src.x;",
        "    float y0 = (fc.y + v_row) * u_src.y;",
        f"    float acc = {start};",
        *(f"    {t}" for t in terms),
        f"    gl_FragColor = g2_encode32({result});",
        "}"])
    return shaders.source("gles2/kernel.frag", "100") + "\n" + body + "\n"


def plain_gemm(name: str, cfg: Config, src: str, src_shape: tuple[int, ...], dst: str, dst_shape: tuple[int, ...],
               prev: str, c0: int, weights: np.ndarray, bias: np.ndarray | None,
               act: ops.Activation | None, residual: str = "") -> Kernel:
    """dst[m, h, k W + w] = prev[...] + bias[m] + sum_j weights[m, k, j] src[c0 + j, h, k W + w], then
    ``act``, then + residual[m, h, k W + w] (optional, dst's shape): a quad GEMM pass whose operand
    is at the output's own texel column (``src`` as wide as ``dst``, the same rows per channel),
    with the shared fragment shader of :func:`_gemm_fragment`."""
    one_row_per_row(cfg, src_shape, dst_shape)
    if src_shape[2:] != dst_shape[2:]:
        raise Decline(f"operand {src_shape} and output {dst_shape} differ in rows or width")
    n = weights.shape[2]
    h = dst_shape[2]
    src_w, src_h = Layout.of(src_shape, 1, cfg.max_size).size
    dst_w, dst_h = Layout.of(dst_shape, 1, cfg.max_size).size
    nv, quads, draws = _draws(weights, bias, h, cfg)
    spec = None if act is None else (act.spec[0], tuple(sorted((act.spec[1] or {}).items())))
    fragment = _gemm_fragment(n, nv, bool(prev), bias is not None, spec, bool(residual))
    kernel = Kernel(name, fragment, [src, *([prev] if prev else []), *([residual] if residual else [])],
                    tuple(dst_shape), output=dst, out_pack=1)
    _quad_grid(kernel, nv, quads, weights.shape[1], dst_shape, draws, cfg.max_point_size, float(c0 * h))
    kernel.uniforms.update(u_src=(1.0 / src_w, 1.0 / src_h, h / src_h, 0.0), u_dst=(1.0 / dst_w, 1.0 / dst_h))
    return kernel


class ConvOperands(NamedTuple):
    rec: ops.ConvRecord
    x: str
    xs: tuple[int, ...]
    ys: tuple[int, ...]
    w: np.ndarray
    bias: np.ndarray | None


def conv_operands(node: Node, graph: Graph, cfg: Config) -> ConvOperands:
    """What a quad-GEMM convolution needs, or a Decline: fp32 with the weights in varyings
    (``Config.channel_varyings``), constant float weights and bias, one 2-D image, one group or
    depthwise (a group per input channel, one output channel each)."""
    rec = ops.require(node, graph, ops.ConvRecord)
    x, wname = node.inputs[0], node.inputs[1]
    b = node.inputs[2] if len(node.inputs) > 2 else ""
    g = _Gen(node, graph, cfg)
    g.check_float(x, node.outputs[0], wname, *([b] if b else []))
    xs, ys = g.shape(x), g.shape(node.outputs[0])
    if not cfg.channel_varyings or cfg.pack != 1:
        raise Decline("needs fp32 and the weights in varyings (Config.channel_varyings)")
    if wname not in graph.constants or (b and b not in graph.constants):
        raise Decline("the weights and bias must be constants")
    if len(xs) != 4 or xs[0] != 1 or rec.group not in (1, xs[1]) or (rec.group > 1 and ys[1] != xs[1]):
        raise Decline("not an ungrouped or depthwise 2-D convolution of one image")
    bias = graph.constants[b].astype(np.float32).reshape(-1) if b else None
    return ConvOperands(rec, x, xs, ys, np.asarray(graph.constants[wname], np.float32), bias)


def gen_conv_quads(node: Node, graph: Graph, cfg: Config) -> list[Kernel] | Kernel:
    """An ungrouped or depthwise 2-D convolution of one image (any kernel, stride, dilation,
    padding) as quad GEMMs over (tap, input channel), in passes over slices of the input
    channels: bias in the first pass, the fused activation in the last. Taps that never leave the
    input need no bounds check; a 1x1 unpadded conv runs on the shared GEMM shader
    (:func:`plain_gemm`). A depthwise conv is one pass whose terms are the taps of the quad's own
    channel: one draw for up to 256 channels where the channel draws of ``gen_conv`` take one each
    (and upload each channel's weights)."""
    rec, x, xs, ys, w, bias = conv_operands(node, graph, cfg)
    kh, kw = w.shape[2:]
    (sh, sw), (dh, dw), (pt, pl) = rec.strides, rec.dilations, rec.pads_begin
    c, m = xs[1], ys[1]
    one_row_per_row(cfg, xs)
    ntaps = kh * kw
    depthwise = rec.group > 1
    if depthwise and ntaps > chunk_limit(cfg, 1):
        raise Decline(f"a {kh}x{kw} depthwise kernel has more taps than a pass holds")
    if not depthwise and (kh, kw, sh, sw) == (1, 1, 1, 1) and not any(rec.pads_begin) and not any(rec.pads_end):
        parts = chunks(c, chunk_limit(cfg, 1))
        kernels, prev = [], ""
        for i, (c0, c1) in enumerate(parts):  # a 1x1 conv: passes of the shared GEMM shader
            last = i == len(parts) - 1
            dst = node.outputs[0] if last else f"{node.name}/gemm_part{i}"
            kernels.append(plain_gemm(NAME, cfg, x, xs, dst, ys, prev, c0, w.reshape(m, 1, c)[:, :, c0:c1],
                                      bias if i == 0 else None, rec.act if last else None,
                                      (ops.fused_residual(node) or "") if last else ""))
            prev = dst
        return kernels
    taps = [(t // kw, t % kw) for t in range(kh * kw)]
    setup = []
    guards = []
    for t, (i, j) in enumerate(taps):
        setup.append(f"float ih{t} = h * {lit(sh)} + {lit(i * dh - pt)}; "
                     f"float iw{t} = w * {lit(sw)} + {lit(j * dw - pl)};")
        cond = []
        if -pt + i * dh < 0 or (ys[2] - 1) * sh - pt + i * dh >= xs[2]:
            cond.append(f"ih{t} >= 0.0 && ih{t} < {lit(xs[2])}")
        if -pl + j * dw < 0 or (ys[3] - 1) * sw - pl + j * dw >= xs[3]:
            cond.append(f"iw{t} >= 0.0 && iw{t} < {lit(xs[3])}")
        if cond:
            setup.append(f"bool ok{t} = {' && '.join(cond)};")
        guards.append(f"ok{t}" if cond else "")
    if depthwise:
        k = _Gen(node, graph, cfg)
        k.act = rec.act
        ld = k.load(x)
        terms = [(guards[t], f"{ld}(0.0, c, ih{t}, iw{t})") for t in range(ntaps)]
        return quad_products(DEPTHWISE_NAME, k, node.outputs[0], ys, "", w.reshape(m, 1, ntaps), terms, bias, "",
                             " ".join(setup))
    # passes over slices of the input channels, every tap in each, the slice's first channel a
    # uniform: passes of one size and role share one program (llvmpipe JITs each about 11 ms per
    # texel fetch in it)
    per_pass = chunk_limit(cfg, 1) // ntaps
    if per_pass < 1:
        raise Decline(f"a {kh}x{kw} kernel has more taps than a pass holds")
    parts = chunks(c, per_pass)
    wt = w.reshape(m, c, ntaps)
    kernels, prev = [], ""
    for i, (c0, c1) in enumerate(parts):
        last = i == len(parts) - 1
        dst = node.outputs[0] if last else f"{node.name}/gemm_part{i}"
        k = _Gen(node, graph, cfg)
        k.scratch.update(({} if last else {dst: ys}) | ({prev: ys} if prev else {}))
        k.act = rec.act if last else None
        ld = k.load(x)
        terms = [(guards[t], f"{ld}(0.0, u_c0 + {lit(ci)}, ih{t}, iw{t})")
                 for t in range(ntaps) for ci in range(c1 - c0)]
        weights = wt[:, c0:c1, :].transpose(0, 2, 1).reshape(m, 1, -1)  # taps outermost, as the terms
        kernel = quad_products(NAME, k, dst, ys, prev, weights, terms, bias if i == 0 else None,
                               "uniform float u_c0;", " ".join(setup))
        kernel.uniforms["u_c0"] = (float(c0),)
        kernels.append(kernel)
        prev = dst
    return kernels


# before the channel-draw kernel (the int8-weight one stays first)
_conv = REGISTRY["Conv"]
_conv.insert([name for name, _ in _conv].index("conv"), (NAME, gen_conv_quads))
