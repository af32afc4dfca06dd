"""gles2 3x3 stride-1 convolution as Winograd F(2x2, 3x3), in three draws of RGBA8 fp32 tensors.

A gles2 multiply-add costs a texel fetch and an RGBA8 decode (on llvmpipe about 90% of the
direct kernel's time): Winograd cuts them from 9 C per output to 4 C plus the transforms' share:

1. V = B^T d B of each 4x4 input patch (one per 2x2 output tile): the scratch tensor V (1, C,
   tiles_h, 16 tiles_w), entry k = 4 i + j of the transform as column band k (so that one texture
   row holds one tensor row: no index division per fetch); each value is 4 fetches (the nonzeros
   of a row of B^T, squared).
2. M[k, o] = U[k, o, :] . V[k, :] (U = G g G^T, made on the host), M laid out as V: quad GEMMs
   (``quads.py``), a quad per (output channel o, band k) carrying U[k, o, :] in varyings: C
   fetches and no weight loads per value.
3. ``winograd_out``: Y = A^T M A (9 fetches per output), bias, the fused activation. An output
   whose sum is not finite (an infinite or NaN input in its window, or an overflow) is recomputed
   as the direct sum, so IEEE specials come out as the direct kernel gives them: the transforms
   mix a patch's inputs and would turn +-Inf into NaN.

The transforms are written from the nonzeros of the rows of B^T and A^T. F(4x4, 3x3) was
tried (1.2-1.34x on 40x40 layers, YOLOv8n 1.02x) and dropped: ten times F(2x2)'s rounding error
(docs/performance.md, eighteenth session). Only where the weights fit the varyings
(``Config.channel_varyings``, llvmpipe), fp32, one image.
"""

from __future__ import annotations

import numpy as np

from ... import ops
from ...graph import Graph, Node
from ..compute_kernels import WINOGRAD_G  # F(2, 3)'s weight transform
from .kernels import REGISTRY, Config, Decline, Kernel, _Gen, conv_weight_rows, lit
from .quads import NAME as QUADS_NAME
from .quads import chunk_limit, chunks, conv_operands, one_row_per_row, plain_gemm

# fewer channels or pixels: the extra passes and per-fragment work cost more than the fetches saved
# (16 -> 16 channels at 80x80 ran 0.73x as fast as the quad-GEMM conv, 32 -> 32 at 40x40 1.15x faster)
MIN_CHANNELS = 32
MIN_PIXELS = 64
NAME = "conv_winograd"


# Y = A^T [(G g G^T) * (B^T d B)] A over a 4x4 input patch per 2x2 output tile
TILE = 2  # outputs per tile side
PATCH = TILE + 2  # inputs per patch side
B_T = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], np.float64)
A_T = np.array([[1, 1, 1, 0], [0, 1, -1, -1]], np.float64)


def _rows(t: np.ndarray) -> list[list[tuple[int, float]]]:
    """Each row's (column, coefficient) nonzeros (every row of B^T has two, of A^T three)."""
    return [[(j, float(v)) for j, v in enumerate(r) if v] for r in t]


def gen_conv_winograd(node: Node, graph: Graph, cfg: Config) -> list[Kernel]:
    rec, x, xs, ys, w, bias = conv_operands(node, graph, cfg)
    if w.shape[2:] != (3, 3) or list(rec.strides) != [1, 1] or list(rec.dilations) != [1, 1] or rec.group != 1:
        raise Decline("Winograd: not an ungrouped 3x3 stride-1 undilated convolution")
    if not np.isfinite(w).all():
        raise Decline("Winograd: weights that are not all finite would spread NaN through the transforms")
    c, m = xs[1], ys[1]
    if min(c, m) < MIN_CHANNELS or ys[2] * ys[3] < MIN_PIXELS:
        raise Decline(f"Winograd: {c} -> {m} channels at {ys[2]}x{ys[3]} is too small to pay")
    bands = PATCH * PATCH
    parts = chunks(c, chunk_limit(cfg, bands))
    th, tw = -(-ys[2] // TILE), -(-ys[3] // TILE)
    v_name = f"{node.name}/winograd_v"
    v_shape, m_shape = (1, c, th, bands * tw), (1, m, th, bands * tw)
    one_row_per_row(cfg, v_shape)
    pt, pl = rec.pads_begin
    u = np.einsum("ai,mcij,bj->mabc", WINOGRAD_G, w.astype(np.float64), WINOGRAD_G).reshape(m, bands, c)
    bias = np.zeros(m, np.float32) if bias is None else bias
    kernels = [_transform_in(node, graph, cfg, x, v_name, v_shape, xs, pt, pl)]
    m_name = ""
    for i, (c0, c1) in enumerate(parts):
        prev, m_name = m_name, f"{node.name}/winograd_m{i}"
        kernels.append(plain_gemm(NAME, cfg, v_name, v_shape, m_name, m_shape, prev, c0, u[:, :, c0:c1], None, None))
    kernels.append(_transform_out(node, graph, cfg, rec, x, m_name, m_shape, xs, ys, pt, pl, w, bias))
    return kernels


def _sel(v: str, table: list[float]) -> str:
    """``table[v]`` for v in 0 .. len(table) - 1 (at most 4; v a float), branch-free."""
    if len(set(table)) == 1:
        return lit(table[0])
    n = len(table)
    keys = ", ".join(lit(i) for i in range(n))
    return f"dot(vec{n}(equal(vec{n}({v}), vec{n}({keys}))), vec{n}({', '.join(lit(t) for t in table)}))"


def _pick(var: str, rows: list[list[tuple[int, float]]], prefix: str) -> list[str]:
    """GLSL locals ``{prefix}p{i}`` / ``{prefix}s{i}``: the i-th (column, coefficient) of row ``var``."""
    return [f"float {prefix}p{i} = {_sel(var, [r[i][0] for r in rows])}; "
            f"float {prefix}s{i} = {_sel(var, [r[i][1] for r in rows])};" for i in range(len(rows[0]))]


def _transform_in(node: Node, graph: Graph, cfg: Config, x: str, v_name: str, v_shape: tuple[int, ...],
                  xs: tuple[int, ...], pt: int, pl: int) -> Kernel:
    """V[c, ty, k tw + tx] = (B^T d B)[i, j] for k = 4 i + j: row i of B^T's nonzeros pick the
    patch rows, row j's the columns."""
    g = _Gen(node, graph, cfg)
    g.scratch[v_name] = v_shape
    ld = g.load(x)
    a, rows = PATCH, _rows(B_T)
    n = len(rows[0])
    tw = v_shape[3] // (a * a)
    body = ["float compute(float n, float c, float h, float w) {",
            f"    float k = g2_idiv(w, {lit(tw)}); w -= k * {lit(tw)};",
            f"    float i = g2_idiv(k, {lit(a)}); float j = k - {lit(a)} * i;",
            *("    " + line for line in _pick("i", rows, "r") + _pick("j", rows, "q")),
            "    float z = 0.0;"]
    for r in range(n):
        body.append(f"    float y{r} = {lit(TILE)} * h + rp{r} - {lit(pt)}; "
                    f"bool oy{r} = y{r} >= 0.0 && y{r} < {lit(xs[2])};")
        body.append(f"    float x{r} = {lit(TILE)} * w + qp{r} - {lit(pl)}; "
                    f"bool ox{r} = x{r} >= 0.0 && x{r} < {lit(xs[3])};")
    for r in range(n):
        row = " + ".join(f"qs{q} * (oy{r} && ox{q} ? {ld}(0.0, c, y{r}, x{q}) : 0.0)" for q in range(n))
        body.append(f"    z += rs{r} * ({row});")
    body += ["    return z;", "}"]
    return g.finish(NAME, "\n".join(body), v_shape, output=v_name)


def _transform_out(node: Node, graph: Graph, cfg: Config, rec: ops.ConvRecord, x: str, m_name: str,
                   m_shape: tuple[int, ...], xs: tuple[int, ...], ys: tuple[int, ...], pt: int, pl: int,
                   w: np.ndarray, bias: np.ndarray) -> Kernel:
    """Y[o, oy, ox] = (A^T M A)[p, q] + bias, p = oy % 2, q = ox % 2 (entry k = 4 i + j of the tile
    in column k tw + tx of M), row p of A^T's nonzeros picking the entries' rows, row q's their
    columns. Not finite: the direct sum (a loop over the input channels, every tap inside)."""
    g = _Gen(node, graph, cfg)
    g.act = rec.act
    g.scratch[m_name] = m_shape
    lm = g.load(m_name)
    lx = g.load(x)
    a, rows, mt = PATCH, _rows(A_T), TILE
    n = len(rows[0])
    c, tw = xs[1], m_shape[3] // (a * a)
    lw = g.const(node.name + "/gles2_winograd_wb", conv_weight_rows(w, bias))
    taps = []
    for t in range(9):
        kh, kw = divmod(t, 3)
        taps.append(f"if (h + {lit(kh - pt)} >= 0.0 && h + {lit(kh - pt)} < {lit(xs[2])} && "
                    f"w + {lit(kw - pl)} >= 0.0 && w + {lit(kw - pl)} < {lit(xs[3])}) "
                    f"acc += {lx}(0.0, ci, h + {lit(kh - pt)}, w + {lit(kw - pl)}) * {lw}(0.0, c, {lit(t)}, ci);")
    body = ["float compute(float n, float c, float h, float w) {",
            f"    float ty = floor(h * {lit(1 / mt)}); float p = h - {lit(mt)} * ty;",
            f"    float tx = floor(w * {lit(1 / mt)}); float q = w - {lit(mt)} * tx;",
            *("    " + line for line in _pick("p", rows, "r") + _pick("q", rows, "s")),
            "    float z = 0.0;"]
    for r in range(n):
        row = " + ".join(f"ss{q} * {lm}(0.0, c, ty, ({lit(a)} * rp{r} + sp{q}) * {lit(tw)} + tx)" for q in range(n))
        body.append(f"    z += rs{r} * ({row});")
    body += [f"    float bias = {lw}(0.0, c, 0.0, {lit(c)});",
             "    if (g2_isnan(z) || abs(z) > 3.40282347e38) {",
             "        float acc = 0.0;",
             f"        for (int i = 0; i < {c}; i++) {{ float ci = float(i); {' '.join(taps)} }}",
             "        z = acc;",
             "    }",
             "    return activate(z + bias);",
             "}"]
    return g.finish(NAME, "\n".join(body), ys, loops=c + 1)


# before the quad GEMM and channel-draw kernels, after the int8-weight one (quant_kernels puts it first)
_conv = REGISTRY["Conv"]
_conv.insert([name for name, _ in _conv].index(QUADS_NAME), (NAME, gen_conv_winograd))
