"""gles2 3x3 stride-1 convolution as Winograd F(2x2, 3x3), in three draws of RGBA8 fp32 tensors.

A gles2 multiply-add costs a texel fetch and an RGBA8 decode (on llvmpipe about 90% of the
direct kernel's time): Winograd cuts them from 9 C per output to 4 C plus the transforms' share:

1. V = B^T d B of each 4x4 input patch (one per 2x2 output tile): the scratch tensor V (1, C,
   tiles_h, 16 tiles_w), entry k = 4a + b of the transform as column band k (so that one texture
   row holds one tensor row: no index division per fetch); each value is 4 fetches.
2. M[k, m] = U[k, m, :] . V[k, :] (U = G g G^T, made on the host), M laid out as V: quad GEMMs
   (``quads.py``), a quad per (output channel m, band k) carrying U[k, m, :] in varyings: C
   fetches and no weight loads per value.
3. ``winograd_out``: Y = A^T M A (9 fetches per output), bias, the fused activation. An output
   whose sum is not finite (an infinite or NaN input in its window, or an overflow) is recomputed
   as the direct sum, so IEEE specials come out as the direct kernel gives them: the transforms
   mix a patch's inputs and would turn +-Inf into NaN.

Only where the weights fit the varyings (``Config.channel_varyings``, llvmpipe), fp32, one image.
"""

from __future__ import annotations

import numpy as np

from ... import ops
from ...graph import Graph, Node
from ..compute_kernels import WINOGRAD_G  # F(2, 3)'s weight transform; B^T and A^T are adds below
from .kernels import REGISTRY, Config, Decline, Kernel, _Gen, conv_weight_rows, lit
from .quads import NAME as QUADS_NAME
from .quads import chunk_limit, chunks, conv_operands, one_row_per_row, plain_gemm

# fewer channels or pixels: the extra passes and per-fragment work cost more than the fetches saved
# (16 -> 16 channels at 80x80 ran 0.73x as fast as the quad-GEMM conv, 32 -> 32 at 40x40 1.15x faster)
MIN_CHANNELS = 32
MIN_PIXELS = 64
NAME = "conv_winograd"


def gen_conv_winograd(node: Node, graph: Graph, cfg: Config) -> list[Kernel]:
    rec, x, xs, ys, w, bias = conv_operands(node, graph, cfg)
    if w.shape[2:] != (3, 3) or list(rec.strides) != [1, 1] or list(rec.dilations) != [1, 1]:
        raise Decline("Winograd: not a 3x3 stride-1 undilated convolution")
    if not np.isfinite(w).all():
        raise Decline("Winograd: weights that are not all finite would spread NaN through the transforms")
    c, m = xs[1], ys[1]
    if min(c, m) < MIN_CHANNELS or ys[2] * ys[3] < MIN_PIXELS:
        raise Decline(f"Winograd: {c} -> {m} channels at {ys[2]}x{ys[3]} is too small to pay")
    parts = chunks(c, chunk_limit(cfg, 16))
    th, tw = -(-ys[2] // 2), -(-ys[3] // 2)
    v_name = f"{node.name}/winograd_v"
    v_shape, m_shape = (1, c, th, 16 * tw), (1, m, th, 16 * tw)
    one_row_per_row(cfg, v_shape)
    pt, pl = rec.pads_begin
    u = np.einsum("ai,mcij,bj->mabc", WINOGRAD_G, w.astype(np.float64), WINOGRAD_G).reshape(m, 16, c)
    bias = np.zeros(m, np.float32) if bias is None else bias
    kernels = [_transform_in(node, graph, cfg, x, v_name, v_shape, xs, pt, pl)]
    m_name = ""
    for i, (c0, c1) in enumerate(parts):
        prev, m_name = m_name, f"{node.name}/winograd_m{i}"
        kernels.append(plain_gemm(NAME, cfg, v_name, v_shape, m_name, m_shape, prev, c0, u[:, :, c0:c1], None, None))
    kernels.append(_transform_out(node, graph, cfg, rec, x, m_name, m_shape, xs, ys, pt, pl, w, bias))
    return kernels


def _sel(v: str, table: tuple[float, float, float, float]) -> str:
    """``table[v]`` for v in 0..3 (a float), branch-free."""
    return (f"dot(vec4(equal(vec4({v}), vec4(0.0, 1.0, 2.0, 3.0))), "
            f"vec4({', '.join(lit(t) for t in table)}))")


def _transform_in(node: Node, graph: Graph, cfg: Config, x: str, v_name: str, v_shape: tuple[int, ...],
                  xs: tuple[int, ...], pt: int, pl: int) -> Kernel:
    """V[c, ty, k tw + tx] = (B^T d B)[a, b] for k = 4a + b: row a of B^T combines patch rows
    (0, 2) as d0 - d2, (1, 2) as d1 + d2, (2, 1) as d2 - d1, (1, 3) as d1 - d3; then the columns."""
    g = _Gen(node, graph, cfg)
    g.scratch[v_name] = v_shape
    ld = g.load(x)
    body = [
        "float compute(float n, float c, float h, float w) {",
        f"    float k = g2_idiv(w, {lit(v_shape[3] // 16)}); w -= k * {lit(v_shape[3] // 16)};",
        "    float a = floor(k * 0.25); float b = k - 4.0 * a;",
        f"    float r1 = {_sel('a', (0, 1, 2, 1))}; float r2 = {_sel('a', (2, 2, 1, 3))};",
        f"    float sa = {_sel('a', (-1, 1, -1, -1))};",
        f"    float s1 = {_sel('b', (0, 1, 2, 1))}; float s2 = {_sel('b', (2, 2, 1, 3))};",
        f"    float sb = {_sel('b', (-1, 1, -1, -1))};",
        f"    float y1 = 2.0 * h + r1 - {lit(pt)}; float y2 = 2.0 * h + r2 - {lit(pt)};",
        f"    float x1 = 2.0 * w + s1 - {lit(pl)}; float x2 = 2.0 * w + s2 - {lit(pl)};",
        f"    bool oy1 = y1 >= 0.0 && y1 < {lit(xs[2])}; bool oy2 = y2 >= 0.0 && y2 < {lit(xs[2])};",
        f"    bool ox1 = x1 >= 0.0 && x1 < {lit(xs[3])}; bool ox2 = x2 >= 0.0 && x2 < {lit(xs[3])};",
        f"    float d11 = oy1 && ox1 ? {ld}(0.0, c, y1, x1) : 0.0;",
        f"    float d21 = oy2 && ox1 ? {ld}(0.0, c, y2, x1) : 0.0;",
        f"    float d12 = oy1 && ox2 ? {ld}(0.0, c, y1, x2) : 0.0;",
        f"    float d22 = oy2 && ox2 ? {ld}(0.0, c, y2, x2) : 0.0;",
        "    return (d11 + sa * d21) + sb * (d12 + sa * d22);",
        "}"]
    return g.finish(NAME, "\n".join(body), v_shape, output=v_name)


def _transform_out(node: Node, graph: Graph, cfg: Config, rec: ops.ConvRecord, x: str, m_name: str,
                   m_shape: tuple[int, ...], xs: tuple[int, ...], ys: tuple[int, ...], pt: int, pl: int,
                   w: np.ndarray, bias: np.ndarray) -> Kernel:
    """Y[m, oy, ox] = (A^T M A)[p, q] + bias, p = oy % 2, q = ox % 2 (entry k of the tile in
    column k tw + tx of M): row p of A^T sums entries
    (0, 1, 2) as m0 + m1 + m2 and (1, 2, 3) as m1 - m2 - m3; then the columns. Not finite: the
    direct sum (a loop over the input channels, every tap inside)."""
    g = _Gen(node, graph, cfg)
    g.act = rec.act
    g.scratch[m_name] = m_shape
    lm = g.load(m_name)
    lx = g.load(x)
    c, tw = xs[1], m_shape[3] // 16
    lw = g.const(node.name + "/gles2_winograd_wb", conv_weight_rows(w, bias))
    taps = []
    for t in range(9):
        kh, kw = divmod(t, 3)
        taps.append(f"if (h + {lit(kh - pt)} >= 0.0 && h + {lit(kh - pt)} < {lit(xs[2])} && "
                    f"w + {lit(kw - pl)} >= 0.0 && w + {lit(kw - pl)} < {lit(xs[3])}) "
                    f"acc += {lx}(0.0, ci, h + {lit(kh - pt)}, w + {lit(kw - pl)}) * {lw}(0.0, c, {lit(t)}, ci);")
    body = [
        "float compute(float n, float c, float h, float w) {",
        "    float ty = floor(h * 0.5); float p = h - 2.0 * ty;",
        "    float tx = floor(w * 0.5); float q = w - 2.0 * tx;",
        "    float sp = p < 0.5 ? 1.0 : -1.0; float sq = q < 0.5 ? 1.0 : -1.0;",
        "    float z = 0.0;",
        "    for (int i = 0; i < 3; i++) {",
        f"        float col = (4.0 * (p + float(i)) + q) * {lit(tw)} + tx;",
        f"        float s = ({lm}(0.0, c, ty, col) + sq * {lm}(0.0, c, ty, col + {lit(tw)})) "
        f"+ sq * {lm}(0.0, c, ty, col + {lit(2 * tw)});",
        "        z = i == 0 ? s : z + sp * s;",
        "    }",
        f"    float bias = {lw}(0.0, c, 0.0, {lit(c)});",
        "    if (g2_isnan(z) || abs(z) > 3.40282347e38) {",
        "        float acc = 0.0;",
        f"        for (int i = 0; i < {c}; i++) {{ float ci = float(i); {' '.join(taps)} }}",
        "        z = acc;",
        "    }",
        "    return activate(z + bias);",
        "}"]
    return g.finish(NAME, "\n".join(body), ys, loops=4 + c + 1)


# before the quad GEMM and channel-draw kernels, after the int8-weight one (quant_kernels puts it first)
_conv = REGISTRY["Conv"]
_conv.insert([name for name, _ in _conv].index(QUADS_NAME), (NAME, gen_conv_winograd))
