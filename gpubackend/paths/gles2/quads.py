"""gles2 GEMMs drawn as many quads per draw, each quad with its own weights in varyings.

llvmpipe loads a fragment shader's uniform lane by lane, and each gles2 draw costs tens of
microseconds: a conv drawn once per output channel with its weights in a uniform array pays both
(for a 1x1 conv of 256 channels at 10x10, half its time). Here one draw covers many output
channels: quad q of the draw (``shaders/gles2/quads.vert``) is one output channel's band of the
output texture (or one band of it: Winograd's 16 transformed planes side by side) and its vertex
shader hands the quad's weights to the fragments as varyings. A reduction longer than the
varyings hold runs in chunks, each adding the previous chunk's sums (an RGBA8 fp32 round trip,
exact). Only where the weights fit (``Config.channel_varyings``: llvmpipe), fp32.

Used by Winograd's GEMMs (``winograd.py``) and by 1x1 convolutions (:func:`gen_conv1x1_quads`).
"""

from __future__ import annotations

import numpy as np

from gpubackend import shaders

from ... import ops
from ...graph import Graph, Node
from .kernels import REGISTRY, Config, Decline, Kernel, _Gen, lit
from .layout import Layout, LayoutError

MAX_QUADS = 256  # quads in one draw (the vertex buffer's size)
MAX_CHUNKS = 8  # passes over the reduction
NAME_1X1 = "conv1x1_quads"


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


def quad_products(name: str, node: Node, graph: Graph, cfg: Config, src: str, src_shape: tuple[int, ...], dst: str,
                  dst_shape: tuple[int, ...], prev: str, weights: np.ndarray, bias: np.ndarray | None,
                  act: ops.Activation | None, scratch: dict[str, tuple[int, ...]], c0: int = 0) -> Kernel:
    """dst[m, h, k W + w] = prev[m, h, k W + w] + bias[m] + sum_c weights[m, k, c] src[c0 + c, h, k W + w]
    (``k`` one of the ``bands`` = weights.shape[1] column bands of width W = width / bands; prev and
    bias optional), then ``act``. ``src`` and ``dst`` one image each, one texture row per tensor
    row. One draw per group of output channels, a quad per (channel, band)."""
    m, bands, c = weights.shape
    g = _Gen(node, graph, cfg)
    g.scratch.update(scratch)
    g.act = act
    h, width = dst_shape[2], dst_shape[3]
    try:
        if any(Layout.of(s, 1, cfg.max_size).k != 1 for s in (src_shape, dst_shape)):
            raise Decline("a tensor of the GEMM needs more rows than a texture has")
    except LayoutError as exc:
        raise Decline(str(exc)) from exc
    lanes = c + (bias is not None)
    nv = -(-lanes // 4)
    per_draw = max(1, min(MAX_QUADS, (cfg.max_vertex_uniform_vectors - 8) // nv) // bands)  # output channels
    packed = np.zeros((m, bands, 4 * nv), np.float32)
    packed[:, :, :c] = weights
    if bias is not None:
        packed[:, :, c] = np.asarray(bias, np.float32).reshape(-1, 1)
    draws = [(float(m0 * h), (min(m, m0 + per_draw) - m0) * bands, packed[m0:m0 + per_draw].reshape(-1, 4 * nv))
             for m0 in range(0, m, per_draw)]
    ld = g.load(src)
    start = f"{g.load(prev)}(0.0, c, h, w)" if prev else "0.0"
    if bias is not None:
        start += f" + v_w[{c // 4}].{'xyzw'[c % 4]}"
    terms = " ".join(f"acc += {ld}(0.0, {lit(c0 + ci)}, h, w) * v_w[{ci // 4}].{'xyzw'[ci % 4]};" for ci in range(c))
    body = (f"varying vec4 v_w[{nv}];\n"
            f"float compute(float n, float c, float h, float w) {{ float acc = {start}; {terms} "
            "return activate(acc); }")
    kernel = g.finish(name, body, dst_shape, output=dst)
    kernel.vertex = shaders.source("gles2/quads.vert", "100", {
        "WEIGHT_VARYINGS": nv, "QUADS": per_draw * bands, "QUADS_X": lit(bands), "QUAD_W": lit(width // bands),
        "QUAD_H": lit(h), "TARGET_W": lit(width), "TARGET_H": lit(dst_shape[1] * h)})
    kernel.quads = per_draw * bands
    kernel.quad_draws = draws
    return kernel


def gen_conv1x1_quads(node: Node, graph: Graph, cfg: Config) -> list[Kernel]:
    """A 1x1 convolution (stride 1, no padding, one group, one image) as quad GEMMs: bias in the
    first chunk, the fused activation in the last."""
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
    w = np.asarray(graph.constants[wname], np.float32)
    if (len(xs) != 4 or xs[0] != 1 or w.shape[2:] != (1, 1) or rec.group != 1 or any(rec.pads_begin)
            or any(rec.pads_end) or any(s != 1 for s in rec.strides)):
        raise Decline("not a 1x1 stride-1 unpadded ungrouped convolution of one image")
    c, m = xs[1], ys[1]
    bias = graph.constants[b].astype(np.float32).reshape(-1) if b else None
    parts = chunks(c, chunk_limit(cfg, 1))
    kernels, prev = [], ""
    for i, (c0, c1) in enumerate(parts):
        last = i == len(parts) - 1
        dst = node.outputs[0] if last else f"{node.name}/gemm_part{i}"
        kernels.append(quad_products(NAME_1X1, node, graph, cfg, x, xs, dst, ys, prev, w.reshape(m, 1, c)[:, :, c0:c1],
                                     bias if i == 0 else None, rec.act if last else None,
                                     ({} if last else {dst: ys}) | ({prev: ys} if prev else {}), c0))
        prev = dst
    return kernels


# before the channel-draw kernel (the int8-weight one stays first)
_conv = REGISTRY["Conv"]
_conv.insert([name for name, _ in _conv].index("conv"), (NAME_1X1, gen_conv1x1_quads))
