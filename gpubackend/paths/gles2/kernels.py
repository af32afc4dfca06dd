"""Per-shape GLSL ES 1.00 fragment kernels of the gles2 path, as pure generators.

A generator returns a :class:`Kernel` (the fragment shader, the tensors it samples in sampler
order, the constant tensors it needs uploaded) or raises :class:`Decline` with the reason; they are
registered in :data:`REGISTRY` and run by the shared contract (``paths/kernel_contract.py``, through
:func:`generate`). Nothing here touches GL. Every kernel body defines
``float compute(float n, float c, float h, float w)``: the output element at 4-D coordinates
(see ``layout.py``); ``main`` finds those coordinates from ``gl_FragCoord`` and encodes."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from gpubackend import shaders

from ... import mixed_precision, ops
from ...gl.device import LLVMPIPE_LOOP_LIMIT, LOOP_BUDGET
from ...graph import Graph, Node
from ...ops import elementwise as ew
from ..kernel_contract import Generated, KernelRecord, KernelRegistry
from ..kernel_contract import generate as _generate
from .layout import Layout, LayoutError, dims4

CHANNEL_DRAW_MIN_PIXELS = 1024
# ... or, with more than one input channel per group, this many multiply-adds per draw (pixels x
# taps x Cin/group): the looped weight-texture read is what the uniforms save. Under load, 1x1
# 128->128 at 16x16 ran 1.4x faster, 32->32 at 16x16 2.2x, 320->320 at 7x7 1.2x; a depthwise 3x3
# at 16x16 (no loop, 2304 per draw) ran 1.7x slower and at 32x32 no faster.
CHANNEL_DRAW_MIN_MACS = 8192
# input channels per loop iteration of a 1x1 conv with uniform weights: under load, CPU time of
# 1x1 16->16 at 128x128 -23%, 64->64 at 64x64 -9%, 128->128 at 16x16 -9% (8 or 16: no better)
CHANNEL_LOOP_STEP = 4
# a KxK conv with uniform weights loops once over the input channels with all taps inside, rather
# than once per tap: under load, CPU time of 3x3 32->32 at 64x64 -24%, 16->32 at 8x8 -15%, same
# compile time (it is a flag for A/B runs)
CHANNEL_TAPS_INNER = True
UNROLL = 8  # long inner loops (GEMM / MatMul K, global pooling rows) take this many steps per iteration


Decline = ops.Decline  # one decline type for every path (gpubackend.ops)


@dataclass(frozen=True)
class Config:
    precision: str = "fp32"
    max_size: int = 4096  # GL_MAX_TEXTURE_SIZE
    max_units: int = 8  # GL_MAX_TEXTURE_IMAGE_UNITS
    max_uniform_vectors: int = 16  # GL_MAX_FRAGMENT_UNIFORM_VECTORS
    # Conv weights in a uniform array, one draw per output channel (see ``channel_weights``),
    # where an output channel has at least this many pixels (None: never); smaller ones read
    # their weights from an RGBA8 texture in one draw. Under load on llvmpipe, 1x1 96->24 at
    # 56x56 ran 1.6x faster with channel draws, a depthwise 3x3 at 20x20 4x slower (each draw
    # and uniform upload costs about as much as a few thousand multiply-adds).
    channel_draw_min_pixels: int | None = CHANNEL_DRAW_MIN_PIXELS
    channel_draw_min_macs: int = CHANNEL_DRAW_MIN_MACS
    # channel draws (fp32) with the weights in varyings instead of the uniform array, where
    # the weights and the bias fit GL_MAX_VARYING_VECTORS: llvmpipe loads a uniform lane by lane
    # in a fragment shader (~24 instructions per weight) and hands over a varying whose value is
    # the same at every vertex as a cheap interpolation. On for llvmpipe, where it was measured.
    channel_varyings: bool = False
    max_varying_vectors: int = 8
    max_vertex_uniform_vectors: int = 128  # GL_MAX_VERTEX_UNIFORM_VECTORS (quads.vert's weights)
    # GL_ALIASED_POINT_SIZE_RANGE's largest side: the many-quad draws cover each quad with point
    # sprites of at most this side (below 2: two triangles per quad)
    max_point_size: int = 0

    @property
    def pack(self) -> int:
        """The path's activation format: elements per texel (1: fp32, 2: fp16)."""
        return 2 if self.precision == "fp16" else 1

    def pack_of(self, name: str, graph: Graph) -> int:
        """The elements per texel of activation ``name`` (not a constant: those are always fp32).
        Under fp16 a node output that the mixed-precision policy keeps (``keeps_fp32``: at most
        SMALL_TENSOR_ELEMENTS floats) is stored fp32, wherever it is: the generators that write
        or read it and the segment that uploads or reads it back ask this same question (a kept
        tensor between a gles2 and a cpu segment travels as fp32). Graph outputs keep the path's
        format, as every path's segment edges do; graph inputs too unless the precision plan
        names them (``mixed_precision.planned_inputs``)."""
        if self.pack == 1 or name in graph.constants:
            return 1
        if name in graph.inputs:
            return 1 if name in mixed_precision.planned_inputs(graph) else self.pack
        if name not in graph.outputs and mixed_precision.keeps_fp32(name, graph):
            return 1
        return self.pack


@dataclass
class Kernel(KernelRecord):
    name: str  # short stable kernel name ("conv1x1", "depthwise", ...)
    fragment: str
    inputs: list[str]  # tensors sampled, sampler i = inputs[i]
    out_shape: tuple[int, ...]
    consts: dict[str, np.ndarray] = field(default_factory=dict)  # extra tensors made here, always fp32
    # loop iterations (each loop's steps plus one exit per entry) one fragment takes in total;
    # llvmpipe silently stops every loop of an invocation past LLVMPIPE_LOOP_LIMIT of them
    iterations: int = 0
    # (channels, count): the ``u_w`` uniform float array of each output channel. Set: the kernel is
    # drawn once per (n, c) over that channel's rows of the output (layout rows k == 1), with
    # u_w set to row c before each draw.
    channel_uniforms: np.ndarray | None = None
    # the vertex shader, where it is not the plain quad: weights in varyings (Config.channel_varyings),
    # its uniform ``u_wv`` (vec4s) set to row c of channel_uniforms before each draw
    vertex: str = ""
    output: str = ""  # the node output this draw writes ("": the first; Split draws once per output)
    out_pack: int = 1  # elements per texel of the output texture (Config.pack_of of the output)
    # a tensor whose texture already holds this kernel's output (DequantizeLinear(x, 1, 0): the
    # integers as floats): the segment reads that texture and skips the draw where it can
    alias: str = ""
    # many-quad draws (gles2/quads.py, shaders/gles2/quads.vert): (first texture row, quads, the
    # quads' weights, a row each) per draw, at most ``quads`` quads each (u_w holds ``quads`` rows)
    quad_draws: list[tuple[float, int, np.ndarray]] | None = None
    quads: int = 0
    quad_points: int = 0  # point sprites per quad (quads.vert's POINTS), 0: two triangles per quad
    uniforms: dict[str, tuple[float, ...]] = field(default_factory=dict)  # set before the step's draws
    # which form of the kernel this is and why, for explain() (the many-quad draws' geometry)
    variant: str = ""
    variant_why: str = ""

    @property
    def kernel_name(self) -> str:
        return self.name


def unrolled(n: int, body: Callable[[str], str], u: int = UNROLL) -> tuple[str, int]:
    """GLSL running the statements ``body(k)`` for k = 0 .. n-1 (``k`` a float expression): a loop
    of n // u steps doing ``u`` copies each, then the n % u tail copies unrolled. Returns the code
    and the loop iterations it takes (steps + 1 exit; 0 when fully unrolled)."""
    steps = n // u
    parts = []
    if steps > 1:
        copies = " ".join(f"{{ {body(f'(k0 + {lit(j)})' if j else 'k0')} }}" for j in range(u))
        parts.append(f"for (int i = 0; i < {steps * u}; i += {u}) {{ float k0 = float(i); {copies} }}")
        start, iters = steps * u, steps + 1
    else:
        start, iters = 0, 0
    parts += [f"{{ {body(lit(k))} }}" for k in range(start, n)]
    return " ".join(parts), iters


def lit(v: float) -> str:
    """A GLSL ES 1.00 float literal for the float32 value of ``v``."""
    v = float(np.float32(v))
    if math.isnan(v):
        return "g2_nan()"
    if math.isinf(v):
        return "g2_inf()" if v > 0 else "(-g2_inf())"
    if v.is_integer() and abs(v) < 1e15:
        return f"{v:.1f}"
    return repr(v)


class _Gen:
    """Collects the samplers and loaders one kernel needs."""

    def __init__(self, node: Node, graph: Graph, cfg: Config):
        self.node, self.graph, self.cfg = node, graph, cfg
        self.inputs: list[str] = []
        self.consts: dict[str, np.ndarray] = {}
        self.loaders: list[str] = []
        self.act: ops.Activation | None = None  # set by the generator from the node's record
        self.scratch: dict[str, tuple[int, ...]] = {}  # tensors a generator names itself: their shapes

    # ---- tensors ------------------------------------------------------------------------
    def shape(self, name: str) -> tuple[int, ...]:
        if name in self.scratch:
            return self.scratch[name]
        s = self.graph.shape(name)
        if s is None:
            raise Decline(f"the shape of {name!r} is not known statically")
        return tuple(int(d) for d in s)

    def layout(self, name: str) -> Layout:
        const = name in self.graph.constants or name in self.consts
        shape = self.consts[name].shape if name in self.consts else self.shape(name)
        try:
            return Layout.of(tuple(shape), 1 if const else self.cfg.pack_of(name, self.graph), self.cfg.max_size)
        except LayoutError as exc:
            raise Decline(str(exc)) from exc

    def check_float(self, *names: str) -> None:
        for name in names:
            if name in self.graph.constants:
                dt = self.graph.constants[name].dtype
            else:
                dt = self.graph.dtypes.get(name, np.dtype(np.float32))
            if np.dtype(dt) != np.float32:
                raise Decline(f"{name!r} is {np.dtype(dt)}; gles2 stores float32 only")

    def const(self, name: str, array: np.ndarray) -> str:
        self.consts[name] = np.ascontiguousarray(array, dtype=np.float32)
        return self.load(name)

    def raw_copies(self, *names: str, output: str = "") -> bool:
        """Whether ``output`` (default the node's first) and every tensor of ``names`` are fp32
        textures, so that a kernel that only moves elements can copy texels (``finish(raw=True)``)."""
        out = output or self.node.outputs[0]
        return self.cfg.pack_of(out, self.graph) == 1 and all(self.layout(n).pack == 1 for n in names)

    def gather(self, x: str, coords: list[str], out_shape: tuple[int, ...], output: str = "") -> Kernel:
        """The ``layout`` kernel whose output element (n, c, h, w) is ``x`` at ``coords`` (GLSL in
        those four): a copy of the texel where both are fp32 (:meth:`raw_copies`)."""
        raw = self.raw_copies(x, output=output)
        body = (f"{'vec4' if raw else 'float'} compute(float n, float c, float h, float w) "
                f"{{ return {self.load(x, raw=raw)}({', '.join(coords)}); }}")
        return self.finish("layout", body, out_shape, output=output, raw=raw)

    def load(self, name: str, raw: bool = False) -> str:
        """The GLSL function ``float ldI(n, c, h, w)`` reading tensor ``name``; ``raw``: ``vec4
        txI(n, c, h, w)``, the texel as sampled, undecoded (a constant of raw bytes, such as the
        int8 weights of :func:`q8_weight_rows`)."""
        if name in self.inputs:
            return f"{'tx' if raw else 'ld'}{self.inputs.index(name)}"
        i = len(self.inputs)
        if i >= self.cfg.max_units:
            raise Decline(f"needs more than {self.cfg.max_units} textures (GL_MAX_TEXTURE_IMAGE_UNITS)")
        self.inputs.append(name)
        L = self.layout(name)
        _, C, H, _ = L.d4
        tw, th = L.size
        head = f"vec4 tx{i}" if raw else f"float ld{i}"
        lines = [f"uniform sampler2D t{i};", f"{head}(float n, float c, float h, float w) {{",
                 f"    float r = (n * {lit(C)} + c) * {lit(H)} + h;",
                 "    float wt = floor(w * 0.5);" if L.pack == 2 else "    float wt = w;"]
        if L.k == 1:
            lines.append("    float y = r; float x = wt;")
        else:
            lines.append(f"    float y = g2_idiv(r, {lit(L.k)}); float x = (r - y * {lit(L.k)}) * {lit(L.wt)} + wt;")
        lines.append(f"    vec4 t = texture2D(t{i}, vec2((x + 0.5) * {lit(1.0 / tw)}, (y + 0.5) * {lit(1.0 / th)}));")
        if raw:
            self.loaders.append("\n".join([*lines, "    return t;", "}"]))
            return f"tx{i}"
        if L.pack == 2:
            lines.append("    vec4 b = g2_bytes(t);")
            lines.append("    return g2_half(w - 2.0 * wt < 0.5 ? b.rg : b.ba);")
        else:
            lines.append("    return g2_decode32(t);")
        lines.append("}")
        if L.pack == 2 and L.k == 1:
            # both halves of the texel holding the even element w (fp16 pair kernels)
            lines += [f"vec2 ldp{i}(float n, float c, float h, float w) {{",
                      f"    float r = (n * {lit(C)} + c) * {lit(H)} + h;",
                      f"    return g2_decode16(texture2D(t{i}, vec2((w * 0.5 + 0.5) * {lit(1.0 / tw)}, "
                      f"(r + 0.5) * {lit(1.0 / th)})));", "}"]
        self.loaders.append("\n".join(lines))
        return f"ld{i}"

    def bcast(self, name: str, out4: tuple[int, ...]) -> str:
        """A call reading ``name`` broadcast to the 4-D output coordinates (n, c, h, w)."""
        s = self.shape(name)
        ys = self.shape(self.node.outputs[0])
        if len(s) > len(ys):
            raise Decline(f"{name!r} has more dimensions than the output")
        if len(ys) > 4 and s != ys and math.prod(s) != 1:
            raise Decline("broadcasting over more than 4 dimensions")
        s4 = dims4(s)
        coords = [v if s4[d] == out4[d] else "0.0" for d, v in enumerate("nchw")]
        for d in range(4):
            if s4[d] not in (1, out4[d]):
                raise Decline(f"{name!r} of shape {s} does not broadcast to {out4}")
        if math.prod(s) == 1 and name in self.graph.constants:
            return lit(float(self.graph.constants[name].reshape(-1)[0]))
        return f"{self.load(name)}({', '.join(coords)})"

    # ---- assembly -----------------------------------------------------------------------
    def finish(self, name: str, body: str, out_shape: tuple[int, ...], extra_defines: dict | None = None,
               pair: str | None = None, loops: int = 0, pair_loops: int = 0, output: str = "",
               raw: bool = False) -> Kernel:
        """``body`` defines compute(); ``raw``: ``vec4 compute(n, c, h, w)`` returns the output
        element's texel as sampled from an fp32 input (a raw loader, :meth:`load`), written as it is
        (a copy of the bytes: no decode or encode); ``pair`` optionally defines ``vec2 compute2(n, c, h, w)``
        for the elements w and w+1 together (fp16 mode). ``loops`` / ``pair_loops``: the loop
        iterations one call of compute() / compute2() takes (see ``Kernel.iterations``).
        ``output``: the tensor written (default the node's first output), whose
        :meth:`Config.pack_of` is the output texture's format."""
        out_pack = self.cfg.pack_of(output or self.node.outputs[0], self.graph)
        residual = ops.fused_residual(self.node) if output in ("", self.node.outputs[0]) else None
        if residual:  # a residual Add fused into this node (segment_services.fuse_residual_adds)
            if out_pack != 1 or pair is not None or raw or self.cfg.pack_of(residual, self.graph) != 1:
                raise Decline("a fused residual Add needs fp32 storage")
            ld_r = self.load(residual)
            body = (body.replace("float compute(", "float compute_unfused(", 1) +
                    f"\nfloat compute(float n, float c, float h, float w) {{ "
                    f"return compute_unfused(n, c, h, w) + {ld_r}(n, c, h, w); }}")
        try:
            L = Layout.of(out_shape, out_pack, self.cfg.max_size)
        except LayoutError as exc:
            raise Decline(str(exc)) from exc
        _, C, H, W = L.d4
        if L.pack == 1:
            iterations = loops
        elif pair is not None:
            iterations = pair_loops
        else:  # main's 2-trip loop calls compute() once per element of the texel
            iterations = (2 if W > 1 else 1) * loops + 3
        if iterations > LOOP_BUDGET:
            raise Decline(f"{iterations} loop iterations per fragment is too many "
                          f"(llvmpipe silently stops loops after {LLVMPIPE_LOOP_LIMIT}; budget {LOOP_BUDGET})")
        defines: dict[str, object] = dict(extra_defines or {})
        # gl_FragCoord is mediump in GLSL ES 1.00: copy it to highp before any arithmetic, or a
        # driver that lowers mediump to fp16 (Mesa does) loses the texel index beyond 1024.
        main = ["void main() {", "    highp vec2 fc = gl_FragCoord.xy;", "    vec2 p = floor(fc);"]
        if L.k == 1:
            main.append("    float r = p.y; float wt = p.x;")
        else:
            main.append(f"    float q = g2_idiv(p.x, {lit(L.wt)});")
            main.append(f"    float r = p.y * {lit(L.k)} + q; float wt = p.x - q * {lit(L.wt)};")
        main.append(f"    float q1 = g2_idiv(r, {lit(H)}); float h = r - q1 * {lit(H)};")
        main.append(f"    float n = g2_idiv(q1, {lit(C)}); float c = q1 - n * {lit(C)};")
        if L.pack == 1:
            main.append("    gl_FragColor = g2_encode32(compute(n, c, h, wt));")
        elif pair is not None:
            main.append("    vec2 v = compute2(n, c, h, 2.0 * wt);")
            main.append("    gl_FragColor = g2_encode16(v.x, v.y);")
        else:
            # a 2-trip loop, not two calls: the compiler keeps one copy of compute() (two inlined
            # copies made llvmpipe's JIT take minutes on 3x3 convolutions)
            guard = f"if (w0 + float(j) < {lit(W)}) " if W % 2 else ""
            main += ["    float w0 = 2.0 * wt; vec2 v = vec2(0.0);",
                     f"    for (int j = 0; j < 2; j++) {{ float r = 0.0; {guard}r = compute(n, c, h, w0 + float(j)); "
                     "if (j == 0) v.x = r; else v.y = r; }",
                     "    gl_FragColor = g2_encode16(v.x, v.y);"]
        if raw:
            if L.pack != 1 or self.act is not None:
                raise ValueError("a raw copy writes fp32 texels without an activation")
            main[-1] = "    gl_FragColor = compute(n, c, h, wt);"
        main.append("}")
        act = activation_function(None if self.act is None else self.act.spec)
        parts = [*self.loaders, act, body, *([pair] if pair and L.pack == 2 else []),
                 "\n".join(main)]
        src = shaders.source("gles2/kernel.frag", "100", defines) + "\n" + "\n".join(parts) + "\n"
        return Kernel(name, src, list(self.inputs), tuple(out_shape), dict(self.consts), iterations,
                      output=output, out_pack=L.pack)


# ---- generators ---------------------------------------------------------------------------


def _spatial(gen: _Gen, x: str, y: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    xs, ys = gen.shape(x), gen.shape(y)
    if len(xs) not in (3, 4):
        raise Decline(f"only 1-D and 2-D {gen.node.op_type} (input rank {len(xs)})")
    return xs, ys


def gen_conv(node: Node, graph: Graph, cfg: Config, qscale: np.ndarray | None = None) -> Kernel:
    """Conv; ``qscale``: the int8-weight kernel (``conv_q8``, ``conv1x1_q8``, ``depthwise_q8``),
    the weights being ``q * qscale[output channel]`` (:func:`q8_weight_rows`)."""
    g = _Gen(node, graph, cfg)
    x, wname = node.inputs[0], node.inputs[1]
    b = node.inputs[2] if len(node.inputs) > 2 else ""
    g.check_float(x, node.outputs[0], wname, *([b] if b else []))
    xs, ys = _spatial(g, x, node.outputs[0])
    dynamic = wname not in graph.constants or bool(b and b not in graph.constants)
    if dynamic and qscale is not None:
        raise Decline("int8 weights need constant weights and bias")
    W = graph.constants[wname].astype(np.float32) if wname in graph.constants else np.zeros(g.shape(wname), np.float32)
    nd = len(xs) - 2
    if dynamic and nd != 2:
        raise Decline("weights computed at run time: only 2-D Conv")
    if nd == 1:  # 1-D conv as 2-D with H = 1
        xs, ys, W = (xs[0], xs[1], 1, xs[2]), (ys[0], ys[1], 1, ys[2]), W[:, :, None, :]
    k = list(W.shape[2:])
    rec = ops.require(node, graph, ops.ConvRecord)
    g.act = rec.act
    s, dl, p = list(rec.strides), list(rec.dilations), list(rec.pads_begin)
    if nd == 1:
        s, dl, p = [1] + s, [1] + dl, [0] + p
    group = rec.group
    cout, cing = W.shape[0], W.shape[1]
    coutg = cout // group
    taps = k[0] * k[1]
    per_channel = None if dynamic or nd != 2 or qscale is not None else channel_weights(
        W, graph.constants[b] if b else None, cfg, ys, cfg.pack_of(node.outputs[0], graph))
    # weights in varyings: a channel draw of fp32 tensors whose weights and bias fit them
    varyings = per_channel is not None and cfg.channel_varyings and cfg.pack == 1 \
        and -(-per_channel.shape[1] // 4) <= cfg.max_varying_vectors - 1
    q8: _Q8Rows | None = None
    if qscale is not None:  # one row per output channel: bias (and scale), then int8 weights per tap
        bias = graph.constants[b].astype(np.float32).reshape(-1) if b else np.zeros(cout, np.float32)
        # a depthwise conv packs its taps four to a texel; others each tap's input channels
        lanes = W.reshape(cout, 1, taps * cing) if cing == 1 else W.reshape(cout, cing, taps).transpose(0, 2, 1)
        q8 = _Q8Rows.of(g, node.name, lanes, qscale, bias)
        bias_expr = "0.0"
    elif dynamic:  # weights (and bias) read from their own textures as they are
        lw = g.load(wname)
        bias_expr = f"{g.load(b)}(0.0, 0.0, 0.0, c)" if b else "0.0"

        def wexpr(kh: int, kw: int, ci: str) -> str:
            return f"{lw}(c, {ci}, {lit(kh)}, {lit(kw)})"
    elif varyings:  # v_w of channel c: tap t's input channels, then the bias, four to a vector
        bias_expr = _varying_weight(per_channel.shape[1] - 1)
    elif per_channel is not None:  # u_w of channel c: tap t's input channels, then the bias
        bias_expr = f"u_w[{per_channel.shape[1] - 1}]"
    else:
        bias = graph.constants[b].astype(np.float32).reshape(-1) if b else None
        lw = g.const(node.name + "/gles2_wb", conv_weight_rows(W, bias))
        bias_expr = f"{lw}(0.0, c, 0.0, {lit(cing)})"

        def wexpr(kh: int, kw: int, ci: str) -> str:
            return f"{lw}(0.0, c, {lit(kh * k[1] + kw)}, {ci})"
    ld_x = g.load(x)
    if nd == 1:  # a 3-D tensor (N, C, W) is 4-D (1, N, C, W) in the layout: remap
        g.loaders.append(f"float ldx(float n, float c, float h, float w) {{ return {ld_x}(0.0, n, c, w); }}")
        ld_x = "ldx"
    ih_lo, iw_lo = -p[0], -p[1]
    ih_hi = (ys[2] - 1) * s[0] - p[0] + (k[0] - 1) * dl[0]
    iw_hi = (ys[3] - 1) * s[1] - p[1] + (k[1] - 1) * dl[1]
    check_h = ih_lo < 0 or ih_hi >= xs[2]
    check_w = iw_lo < 0 or iw_hi >= xs[3]
    grp = "0.0" if group == 1 else f"g2_idiv(c, {lit(coutg)})"
    fname = "conv2d" if nd == 1 else "compute"
    loops = taps * (cing + 1)
    lines = [f"float {fname}(float n, float c, float h, float w) {{",
             f"    float cb = {grp} * {lit(cing)};",
             f"    float acc = {bias_expr};"]
    for kh in range(k[0]):
        lines.append(f"    float ih{kh} = h * {lit(s[0])} + {lit(kh * dl[0] - p[0])};")
    for kw in range(k[1]):
        lines.append(f"    float iw{kw} = w * {lit(s[1])} + {lit(kw * dl[1] - p[1])};")

    def in_bounds(kh: int, kw: int) -> list[str]:
        return ([f"ih{kh} >= 0.0 && ih{kh} < {lit(xs[2])}"] if check_h else []) + \
            ([f"iw{kw} >= 0.0 && iw{kw} < {lit(xs[3])}"] if check_w else [])

    tap_list = [(kh, kw) for kh in range(k[0]) for kw in range(k[1])]
    if q8 is not None and cing == 1:  # depthwise: every tap's weight from ceil(taps / 4) texels
        lines += [f"    vec4 q{j} = {q8.texel(0, j)};" for j in range(q8.texels)]
        for t, (kh, kw) in enumerate(tap_list):
            term = f"acc += {ld_x}(n, cb, ih{kh}, iw{kw}) * q{t // 4}.{'xyzw'[t % 4]};"
            cond = in_bounds(kh, kw)
            lines.append(f"    if ({' && '.join(cond)}) {term}" if cond else f"    {term}")
        tap_list, loops = [], 0
    elif q8 is not None and taps > 1 and CHANNEL_TAPS_INNER:
        # one loop over the input channel texels with every tap inside (as the uniform-weights
        # kernel below): a tap's texel j is its input channels 4j .. 4j+3
        groups = []
        for t, (kh, kw) in enumerate(tap_list):
            cond = in_bounds(kh, kw)
            if cond:
                lines.append(f"    bool ok{t} = {' && '.join(cond)};")
            groups.append((t, lambda ci, kh=kh, kw=kw: f"{ld_x}(n, cb + {ci}, ih{kh}, iw{kw})",
                           f"ok{t}" if cond else ""))
        lines.append(f"    {q8.dot_loop_groups(groups, cing)}")
        tap_list, loops = [], cing // 4 + 1
    elif q8 is not None:
        loops = taps * (cing // 4 + 1)
    if varyings:  # written out: every weight index a constant (a varying array needs one)
        for t, (kh, kw) in enumerate(tap_list):
            terms = " ".join(f"acc += {ld_x}(n, cb + {lit(ci)}, ih{kh}, iw{kw}) * {_varying_weight(t * cing + ci)};"
                             for ci in range(cing))
            cond = in_bounds(kh, kw)
            lines.append(f"    if ({' && '.join(cond)}) {{ {terms} }}" if cond else f"    {terms}")
        tap_list = []
    elif per_channel is not None and taps > 1 and cing > 1 and CHANNEL_TAPS_INNER:
        # one loop over the input channels with every tap inside: as many texture reads in the
        # source (compile time) as one loop per tap, a ninth of the loop steps for a 3x3
        terms = []
        for t, (kh, kw) in enumerate(tap_list):
            term = f"acc += {ld_x}(n, cb + ci, ih{kh}, iw{kw}) * u_w[{t * cing} + i];"
            cond = in_bounds(kh, kw)
            if cond:
                lines.append(f"    bool ok{t} = {' && '.join(cond)};")
                term = f"if (ok{t}) {term}"
            terms.append(term)
        lines.append(f"    for (int i = 0; i < {cing}; i++) {{ float ci = float(i); {' '.join(terms)} }}")
        tap_list = []
    for kh, kw in tap_list:  # a loop over the input channels per tap
        if q8 is not None:
            inner = q8.dot_loop(kh * k[1] + kw, cing, lambda ci, kh=kh, kw=kw: f"{ld_x}(n, cb + {ci}, ih{kh}, iw{kw})")
        elif per_channel is not None:
            inner = _channel_loop(cing, (kh * k[1] + kw) * cing,
                                  lambda ci, kh=kh, kw=kw: f"{ld_x}(n, cb + {ci}, ih{kh}, iw{kw})",
                                  CHANNEL_LOOP_STEP if taps == 1 else 1)
        else:
            inner = (f"for (int i = 0; i < {cing}; i++) {{ float ci = float(i); "
                     f"acc += {ld_x}(n, cb + ci, ih{kh}, iw{kw}) * {wexpr(kh, kw, 'ci')}; }}")
        cond = in_bounds(kh, kw)
        lines.append(f"    if ({' && '.join(cond)}) {{ {inner} }}" if cond else f"    {inner}")
    lines += [f"    return activate({'acc' if q8 is None else q8.epilogue('acc')});", "}"]
    if nd == 1:
        lines.append("float compute(float n, float c, float h, float w) { return conv2d(c, h, 0.0, w); }")
    name = "depthwise" if group == cout == xs[1] and cing == 1 else (
        "conv1x1" if taps == 1 and s == [1, 1] and not any(p) else "conv")
    pair = None
    if q8 is not None:
        name += "_q8"
    elif name == "conv1x1" and g.layout(x).pack == 2 and g.layout(x).k == 1 and nd == 2:
        # fp16: the two elements of a texel share every weight read
        if per_channel is not None:
            body = _channel_loop(cing, 0, lambda ci: f"ldp{ld_x[2:]}(n, cb + {ci}, h, w)", CHANNEL_LOOP_STEP)
        else:
            body = (f"for (int i = 0; i < {cing}; i++) {{ float ci = float(i); "
                    f"acc += ldp{ld_x[2:]}(n, cb + ci, h, w) * {wexpr(0, 0, 'ci')}; }}")
        pair = "\n".join([
            "vec2 compute2(float n, float c, float h, float w) {",
            f"    float cb = {grp} * {lit(cing)};",
            f"    vec2 acc = vec2({bias_expr});",
            f"    {body}",
            "    return vec2(activate(acc.x), activate(acc.y));", "}"])
    vertex = ""
    if varyings:
        nv = -(-per_channel.shape[1] // 4)
        lines.insert(0, f"varying vec4 v_w[{nv}];")
        per_channel = np.pad(per_channel, ((0, 0), (0, 4 * nv - per_channel.shape[1])))
        vertex = shaders.source("gles2/quad.vert", "100", {"WEIGHT_VARYINGS": nv})
        loops = 0
    elif per_channel is not None:
        lines.insert(0, f"uniform float u_w[{per_channel.shape[1]}];")
    kernel = g.finish(name, "\n".join(lines), ys if nd == 2 else graph.shape(node.outputs[0]), pair=pair,
                      loops=loops, pair_loops=cing + 1)
    kernel.channel_uniforms = per_channel
    kernel.vertex = vertex
    return kernel


def conv_weight_rows(w: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    """Conv weights (Cout, Cin/g, KH, KW) as the texture (1, Cout, KH*KW, Cin/g + 1): a row per
    (output channel, tap), the bias (or 0) in the last column of tap 0's row."""
    cout, cing = w.shape[:2]
    taps = int(np.prod(w.shape[2:]))
    wb = np.zeros((1, cout, taps, cing + 1), np.float32)
    wb[0, :, :, :cing] = np.asarray(w, np.float32).reshape(cout, cing, taps).transpose(0, 2, 1)
    if bias is not None:
        wb[0, :, 0, cing] = np.asarray(bias, np.float32).reshape(-1)
    return wb


def _varying_weight(k: int) -> str:
    """Weight k of a channel draw's varyings (four to a vector)."""
    return f"v_w[{k // 4}].{'xyzw'[k % 4]}"


def channel_weights(w: np.ndarray, bias: np.ndarray | None, cfg: Config, out_shape: tuple[int, ...],
                    pack: int | None = None) -> np.ndarray | None:
    """The per-output-channel uniform arrays of a Conv with constant weights ``w`` (Cout, Cin/g,
    KH, KW), or None where the texture-weights kernel runs instead (an output channel smaller than
    ``channel_draw_min_pixels``, unless it has several input channels per group and
    ``channel_draw_min_macs``): one draw per channel needs
    each channel's rows to be one band of the output texture (k == 1) and its weights to fit
    GL_MAX_FRAGMENT_UNIFORM_VECTORS (a float array element takes a vector; a few are left to the
    driver). Element t*Cin/g + ci is input channel ci of tap t; the last one is the bias. Weights
    in uniforms are read as they are: no texture fetch and no RGBA8 decode per multiply-add."""
    cout, cing = int(w.shape[0]), int(w.shape[1])
    taps = int(np.prod(w.shape[2:]))
    count = taps * cing + 1
    least = cfg.channel_draw_min_pixels
    pixels = int(np.prod(out_shape[2:]))
    if least is None or count > cfg.max_uniform_vectors - 8:
        return None
    if pixels < least and (cing == 1 or pixels * (count - 1) < cfg.channel_draw_min_macs):
        return None
    try:
        if Layout.of(out_shape, cfg.pack if pack is None else pack, cfg.max_size).k != 1:
            return None
    except LayoutError:
        return None  # finish() declines with the reason
    out = np.zeros((cout, count), np.float32)
    out[:, :-1] = np.asarray(w, np.float32).reshape(cout, cing, taps).transpose(0, 2, 1).reshape(cout, -1)
    if bias is not None:
        out[:, -1] = np.asarray(bias, np.float32).reshape(-1)
    return out


def q8_weight_rows(weights: np.ndarray, scale: np.ndarray, head: list[np.ndarray]) -> tuple[np.ndarray, int]:
    """The weight texture of an int8-weight kernel and its offset: ``weights`` (Cout, groups,
    lanes), floats equal to ``q * scale[output channel]`` with integers ``q`` spanning at most 256
    values, as one row per output channel: the ``head`` values (float32, one texel each, e.g. the
    bias), then each group's ``q - offset`` as raw int8 bytes, four to a texel (lane j of texel i
    in byte j), the group padded with zeros to whole texels. ``offset`` is 0 where ``q`` is int8,
    else the one integer that brings it there (a zero point that leaves ``q - zero_point``
    outside int8: uint8 weights with zero point 10, a weight quantized over [min(w, 0), max(w, 0)]);
    the shader adds it back. Returned as the float32 view of those bytes, shape (Cout, texels): a
    quarter of the float weights' bytes. Declines where the weights are not such integers."""
    from ..compute_quant import pack_int8_words

    cout, groups, lanes = weights.shape
    divisor = np.where(scale == 0, np.float32(1), scale).astype(np.float32)[:, None, None]
    q = np.rint(weights / divisor)
    if not np.array_equal((q * divisor).astype(np.float32), weights) or q.max() - q.min() > 255:
        raise Decline("the weights are not 8-bit integer multiples of one scale per output channel")
    offset = int(q.min()) + 128 if q.min() < -128 else max(int(q.max()) - 127, 0)
    padded = np.zeros((cout, groups, -(-lanes // 4) * 4), np.int8)
    padded[:, :, :lanes] = q - offset
    words = pack_int8_words(padded.reshape(-1, 4)).reshape(-1)[:padded.size // 4].reshape(cout, -1)
    return np.concatenate([np.asarray(h, np.float32).reshape(cout, 1) for h in head] + [words], axis=1), offset


@dataclass(frozen=True)
class _Q8Rows:
    """An int8-weight kernel's weight texture (:func:`q8_weight_rows`) and the GLSL reading it:
    texel ``texel(group, i)`` of output channel ``c`` as a vec4 of integers (``g2_int8``), the
    bias in the first texel of the row, and the scale per output channel in the second (a literal
    where every channel has the same one; nothing where that is 1, as in the integer form)."""

    tx: str  # the raw texel loader (``_Gen.load(name, raw=True)``)
    texels: int  # weight texels per group
    head: int  # texels before the weights: the bias, and the scale where it varies
    scale: str  # a GLSL literal, "" for 1, or "per channel"
    bias: bool  # whether the row starts with the bias (Gemm keeps its C apart)
    row: str  # the GLSL expression of the output channel
    offset: int  # added to every stored integer (q8_weight_rows)

    @staticmethod
    def of(g: _Gen, node: str, weights: np.ndarray, scale: np.ndarray, bias: np.ndarray | None,
           row: str = "c") -> _Q8Rows:
        scale = np.asarray(scale, np.float32)
        head = [] if bias is None else [bias]
        if np.all(scale == scale[0]):
            scale_expr = "" if scale[0] == 1 else lit(scale[0])
        else:
            head.append(scale)
            scale_expr = "per channel"
        rows, offset = q8_weight_rows(weights, scale, head)
        g.consts[node + "/gles2_q8"] = rows
        return _Q8Rows(g.load(node + "/gles2_q8", raw=True), -(-weights.shape[2] // 4), len(head),
                       scale_expr, bias is not None, row, offset)

    def texel(self, group: int | str, i: int | str) -> str:
        """The vec4 of integers in weight texel ``i`` of ``group`` (ints or GLSL float expressions)."""
        if isinstance(group, int) and isinstance(i, int):
            col = lit(self.head + group * self.texels + i)
        else:
            col = f"{lit(self.head)} + {group if isinstance(group, str) else lit(group)} * {lit(self.texels)} + {i}"
        ints = f"g2_int8({self.tx}(0.0, 0.0, {self.row}, {col}))"
        return f"({ints} + {lit(self.offset)})" if self.offset else ints

    def dot_loop(self, group: int | str, lanes: int, load: Callable[[str], str]) -> str:
        """``acc += load(j) * weight j`` for lanes j = 0 .. lanes-1 of ``group``: a loop over the
        whole texels, four products per texel read, then the last, partial one (its padding lanes
        are not read: past the end lies another tensor's row, maybe an infinity; they meet 0.0,
        and their weight is 0 plus the offset)."""
        return self.dot_loop_groups([(group, load, "")], lanes)

    def dot_loop_groups(self, groups: list[tuple[int | str, Callable[[str], str], str]], lanes: int) -> str:
        """:meth:`dot_loop` over several groups (a KxK conv's taps) in one loop over the texels,
        each group's products under its GLSL condition ("" for none)."""
        full, rest = divmod(lanes, 4)

        def four(load: Callable[[str], str], first: str, count: int) -> str:
            xs = [load(f"({first} + {lit(j)})" if j else first) for j in range(count)] + ["0.0"] * (4 - count)
            return f"vec4({', '.join(xs)})"

        def terms(first: str, count: int, texel: str) -> str:
            return " ".join(f"{f'if ({cond}) ' if cond else ''}acc += dot({four(load, first, count)}, "
                            f"{self.texel(group, texel)});" for group, load, cond in groups)

        code = ""
        if full:
            code = f"for (int i = 0; i < {full}; i++) {{ float j = float(i); {terms('j * 4.0', 4, 'j')} }}"
        if rest:
            code += f" {terms(lit(4 * full), rest, lit(full))}"
        return code.strip()

    def epilogue(self, acc: str) -> str:
        """The sum of integer-weight products as the layer's output: times the scale, plus the bias."""
        if self.scale == "per channel":
            scaled = f"{acc} * g2_decode32({self.tx}(0.0, 0.0, {self.row}, {lit(self.head - 1)}))"
        else:
            scaled = f"{acc} * {self.scale}" if self.scale else acc
        return f"{scaled} + g2_decode32({self.tx}(0.0, 0.0, {self.row}, 0.0))" if self.bias else scaled


def _channel_loop(cing: int, first: int, load: Callable[[str], str], step: int = 1) -> str:
    """``acc += load(ci) * u_w[first + ci]`` over input channels 0..cing-1 in order (the loop
    index in the array index: a GLSL ES 1.00 constant-index-expression), ``step`` of them per
    iteration and the remainder after the loop. Four per iteration (CHANNEL_LOOP_STEP) pays on
    1x1 convs; on a 3x3 conv it multiplies llvmpipe's compile time (15 s for one 16-channel
    kernel), so those keep one."""
    steps = cing // step * step if step > 1 else cing
    macs = " ".join(f"acc += {load(f'(ci + {lit(j)})' if j else 'ci')} * u_w[{first} + i + {j}];"
                    for j in range(step))
    code = f"for (int i = 0; i < {steps}; i += {step}) {{ float ci = float(i); {macs} }}" if steps else ""
    tail = " ".join(f"acc += {load(lit(k))} * u_w[{first + k}];" for k in range(steps, cing))
    return f"{code} {tail}".strip()


def gen_conv_transpose(node: Node, graph: Graph, cfg: Config, one_tap: bool = False,
                       qscale: np.ndarray | None = None) -> Kernel:
    """The gather form: every output pixel tries all KH x KW taps and keeps those that land on
    an input pixel. ``one_tap``: only for taps that tile the output without overlap (strides ==
    kernel_shape, dilation 1: 2x2 stride 2, the usual upsampling), where each output pixel takes
    exactly one tap, h + pad = ih * KH + kh, and reads only that one. ``qscale``: the int8-weight
    kernel ``convtranspose_q8`` (either form), the weights being ``q * qscale[output channel]``."""
    g = _Gen(node, graph, cfg)
    x, wname = node.inputs[0], node.inputs[1]
    b = node.inputs[2] if len(node.inputs) > 2 else ""
    g.check_float(x, node.outputs[0], wname, *([b] if b else []))
    dynamic = wname not in graph.constants or bool(b and b not in graph.constants)
    if dynamic and qscale is not None:
        raise Decline("int8 weights need constant weights and bias")
    xs, ys = _spatial(g, x, node.outputs[0])
    if len(xs) != 4:
        raise Decline("only 2-D ConvTranspose")
    W = graph.constants[wname].astype(np.float32) if wname in graph.constants else np.zeros(g.shape(wname), np.float32)
    rec = ops.require(node, graph, ops.ConvRecord)
    g.act = rec.act
    group = rec.group
    cin, coutg, KH, KW = W.shape
    cout, cing = coutg * group, cin // group
    s, dl, pads = list(rec.strides), list(rec.dilations), list(rec.pads_begin)
    if one_tap and (s != [KH, KW] or dl != [1, 1]):
        raise Decline(f"taps overlap (strides {s}, kernel {[KH, KW]}, dilations {dl}): the gather form runs")
    taps = KH * KW
    grp = "0.0" if group == 1 else f"g2_idiv(c, {lit(coutg)})"
    q8: _Q8Rows | None = None
    # kh, kw: GLSL float expressions (literals, or the tap a fragment computed)
    if qscale is not None:  # a row per output channel: bias (and scale), then each tap's weights
        lanes = np.concatenate([W[gi * cing:(gi + 1) * cing].reshape(cing, coutg, taps).transpose(1, 2, 0)
                                for gi in range(group)])  # (cout, taps, cing)
        bias = graph.constants[b].astype(np.float32).reshape(-1) if b else np.zeros(cout, np.float32)
        q8 = _Q8Rows.of(g, node.name, lanes, qscale, bias)
        bias_expr = "0.0"
    elif dynamic:  # W (Cin, Cout/group, KH, KW) read from its own texture
        lw = g.load(wname)
        bias_expr = f"{g.load(b)}(0.0, 0.0, 0.0, c)" if b else "0.0"

        def wexpr(kh: str, kw: str) -> str:
            return f"{lw}(cb + ci, c - {grp} * {lit(coutg)}, {kh}, {kw})"
    else:
        bias = graph.constants[b].astype(np.float32).reshape(-1) if b else np.zeros(cout, np.float32)
        wb = np.zeros((1, cout, taps, cing + 1), np.float32)
        # wb[co, tap, ci_local] = W[g*cing + ci_local, co % coutg, kh, kw]
        for gi in range(group):
            blk = W[gi * cing:(gi + 1) * cing]  # (cing, coutg, KH, KW)
            wb[0, gi * coutg:(gi + 1) * coutg, :, :cing] = blk.reshape(cing, coutg, taps).transpose(1, 2, 0)
        wb[0, :, 0, cing] = bias
        lw = g.const(node.name + "/gles2_wb", wb)
        bias_expr = f"{lw}(0.0, c, 0.0, {lit(cing)})"

        def wexpr(kh: str, kw: str) -> str:
            return f"{lw}(0.0, c, {kh} * {lit(KW)} + {kw}, ci)"
    ld_x = g.load(x)
    lines = ["float compute(float n, float c, float h, float w) {",
             f"    float cb = {grp} * {lit(cing)};",
             f"    float acc = {bias_expr};"]

    def mac(ih: str, iw: str, kh: str, kw: str, tap: int | str) -> str:
        """The sum over the input channels of tap (kh, kw) (``tap``: its index, for int8 weights)."""
        if q8 is not None:
            return q8.dot_loop(tap, cing, lambda ci: f"{ld_x}(n, cb + {ci}, {ih}, {iw})")
        return (f"for (int i = 0; i < {cing}; i++) {{ float ci = float(i); "
                f"acc += {ld_x}(n, cb + ci, {ih}, {iw}) * {wexpr(kh, kw)}; }}")

    result = "acc" if q8 is None else q8.epilogue("acc")
    loops_per_tap = cing + 1 if q8 is None else cing // 4 + 1
    if one_tap:
        for v, ax in (("h", 0), ("w", 1)):
            lines.append(f"    float t{v} = {v} + {lit(pads[ax])};")
            lines.append(f"    float i{v} = g2_idiv(t{v}, {lit(s[ax])}); float k{v} = t{v} - i{v} * {lit(s[ax])};")
        tap_sum = mac("ih", "iw", "kh", "kw", f"(kh * {lit(KW)} + kw)")
        lines.append(f"    if (ih < {lit(xs[2])} && iw < {lit(xs[3])}) {{ {tap_sum} }}")
        lines += [f"    return activate({result});", "}"]
        return g.finish("convtranspose_tap" if q8 is None else "convtranspose_q8", "\n".join(lines), ys,
                        loops=loops_per_tap)

    def axis(v: str, coord: str, kk: int, ax: int, size: int) -> None:
        lines.append(f"    float t{v}{kk} = {coord} + {lit(pads[ax] - kk * dl[ax])};")
        if s[ax] == 1:
            lines.append(f"    float i{v}{kk} = t{v}{kk};")
            lines.append(f"    bool ok{v}{kk} = t{v}{kk} >= 0.0 && t{v}{kk} < {lit(size)};")
        else:
            lines.append(f"    float i{v}{kk} = floor((t{v}{kk} + 0.5) / {lit(s[ax])});")
            lines.append(f"    bool ok{v}{kk} = t{v}{kk} >= 0.0 && i{v}{kk} < {lit(size)} && "
                         f"abs(t{v}{kk} - i{v}{kk} * {lit(s[ax])}) < 0.5;")

    for kh in range(KH):
        axis("h", "h", kh, 0, xs[2])
    for kw in range(KW):
        axis("w", "w", kw, 1, xs[3])
    for kh in range(KH):
        for kw in range(KW):
            tap_sum = mac(f"ih{kh}", f"iw{kw}", lit(kh), lit(kw), kh * KW + kw)
            lines.append(f"    if (okh{kh} && okw{kw}) {{ {tap_sum} }}")
    lines += [f"    return activate({result});", "}"]
    return g.finish("convtranspose" if q8 is None else "convtranspose_q8", "\n".join(lines), ys,
                    loops=taps * loops_per_tap)


def _q8_matrix(g: _Gen, node: Node, b: str, trans_b: bool, qscale: np.ndarray | None) -> _Q8Rows:
    """The int8 rows of a constant (K, N) (``trans_b``: (N, K)) weight matrix, one per output column w."""
    if qscale is None or b not in g.graph.constants:
        raise Decline("int8 weights need a constant weight matrix")
    B = g.graph.constants[b].astype(np.float32)
    rows = B if trans_b else B.T
    return _Q8Rows.of(g, node.name, rows.reshape(rows.shape[0], 1, rows.shape[1]), qscale, None, row="w")


def gen_gemm(node: Node, graph: Graph, cfg: Config, qscale: np.ndarray | None = None) -> Kernel:
    """Gemm; ``qscale``: the int8-weight kernel ``gemm_q8``, B being ``q * qscale[output column] /
    alpha`` (``ops.quant.weight_scale`` folds alpha into the scale)."""
    g = _Gen(node, graph, cfg)
    a, b = node.inputs[0], node.inputs[1]
    c = node.inputs[2] if len(node.inputs) > 2 else ""
    g.check_float(a, b, node.outputs[0], *([c] if c else []))
    ys = g.shape(node.outputs[0])
    rec = ops.require(node, graph, ops.GemmRecord)
    g.act = rec.act
    ta, tb, alpha, beta = rec.trans_a, rec.trans_b, rec.alpha, rec.beta
    K = g.shape(a)[0 if ta else 1]
    la = g.load(a)
    ea = f"{la}(0.0, 0.0, kk, h)" if ta else f"{la}(0.0, 0.0, h, kk)"
    if qscale is not None:
        # the weights' own scale (weight_scale folds alpha in), alpha after it as the float kernel
        # applies it; weights that are not q times that scale decline to the float kernel
        q8 = _q8_matrix(g, node, b, tb, (qscale / np.float32(alpha)).astype(np.float32))
        code, loops = q8.dot_loop(0, K, lambda kk: ea.replace("kk", kk)), K // 4 + 1
        scaling = f"acc = {q8.epilogue('acc')};" + (f" acc *= {lit(alpha)};" if alpha != 1 else "")
    else:
        lb = g.load(b)
        eb = f"{lb}(0.0, 0.0, w, kk)" if tb else f"{lb}(0.0, 0.0, kk, w)"
        code, loops = unrolled(K, lambda kk: f"acc += {ea.replace('kk', kk)} * {eb.replace('kk', kk)};")
        scaling = f"acc *= {lit(alpha)};"
    lines = ["float compute(float n, float c, float h, float w) {", "    float acc = 0.0;",
             f"    {code}", f"    {scaling}"]
    if c and beta != 0.0:
        lines.append(f"    acc += {lit(beta)} * {g.bcast(c, dims4(ys))};")
    lines += ["    return activate(acc);", "}"]
    return g.finish("gemm" if qscale is None else "gemm_q8", "\n".join(lines), ys, loops=loops)


def gen_matmul(node: Node, graph: Graph, cfg: Config, qscale: np.ndarray | None = None) -> Kernel:
    """MatMul; ``qscale``: the int8-weight kernel ``matmul_q8`` for a constant rank-2 B equal to
    ``q * qscale[output column]``."""
    g = _Gen(node, graph, cfg)
    a, b = node.inputs[0], node.inputs[1]
    g.check_float(a, b, node.outputs[0])
    sa, sb, ys = g.shape(a), g.shape(b), g.shape(node.outputs[0])
    g.act = ops.require(node, graph, ops.MatMulRecord).act
    if len(sa) < 2 or len(sb) < 2 or len(ys) > 4:
        raise Decline("MatMul with 1-D operands or more than 4 dimensions")
    K = sa[-1]
    y4 = dims4(ys)
    a4, b4 = dims4(sa), dims4(sb)
    an = "n" if a4[0] == y4[0] else "0.0"
    ac = "c" if a4[1] == y4[1] else "0.0"
    bn = "n" if b4[0] == y4[0] else "0.0"
    bc = "c" if b4[1] == y4[1] else "0.0"
    la = g.load(a)
    if qscale is not None:
        if len(sb) != 2:
            raise Decline("int8 weights need a rank-2 weight matrix")
        q8 = _q8_matrix(g, node, b, False, qscale)
        code, loops = q8.dot_loop(0, K, lambda kk: f"{la}({an}, {ac}, h, {kk})"), K // 4 + 1
        result = q8.epilogue("acc")
    else:
        lb = g.load(b)
        code, loops = unrolled(K, lambda kk: f"acc += {la}({an}, {ac}, h, {kk}) * {lb}({bn}, {bc}, {kk}, w);")
        result = "acc"
    lines = ["float compute(float n, float c, float h, float w) {", "    float acc = 0.0;",
             f"    {code}", f"    return activate({result});", "}"]
    return g.finish("matmul" if qscale is None else "matmul_q8", "\n".join(lines), ys, loops=loops)


def activation_function(act: tuple[str, dict] | None) -> str:
    """``float activate(float x)`` for a fused activation ``(op, params)`` (identity for None),
    rendered from the elementwise table, with the helper functions it needs; a gated one
    (``gate`` in the params, ``ops.silu_into``) is ``x * act(x)``, the product the unfused Mul
    node computes."""
    if act is None:
        return "float activate(float x) { return x; }"
    p = ew.unary_params(act[0], act[1] or {})
    expr, helpers = ew.render_scalar(ew.unary_op(act[0]), {"x": "x"}, p)
    if (act[1] or {}).get("gate"):
        expr = f"x * ({expr})"
    return f"{helpers}\nfloat activate(float x) {{ return {expr}; }}"


def nan_keeping(op_type: str, acc: str, v: str) -> tuple[str, str]:
    """``acc = op(acc, v)`` for ``op_type`` Max or Min as the table renders it (a NaN operand wins,
    as in NumPy; GLSL's max()/min() may drop it), and the helper functions it needs."""
    expr, helpers = ew.render_scalar(ew.binary_op(op_type), {"a": acc, "b": v})
    return f"{acc} = {expr};", helpers


_NARY = {"Sum": "Add", "Mean": "Add", "Max": "Max", "Min": "Min"}  # folded pairwise; Mean divides after


def gen_elementwise(node: Node, graph: Graph, cfg: Config) -> Kernel:
    g = _Gen(node, graph, cfg)
    op = node.op_type
    ins = [i for i in node.inputs if i]
    ys = g.shape(node.outputs[0])
    g.check_float(*ins, node.outputs[0])
    y4 = dims4(ys)
    head = "float compute(float n, float c, float h, float w) {"
    bkey = _NARY.get(op) or ew.binary_key(op)
    if bkey is not None:
        if op not in _NARY and len(ins) != 2:
            raise Decline(f"{op} needs two inputs")
        vals = [g.bcast(i, y4) for i in ins]
        expr, helpers = ew.render_scalar(ew.binary_op(bkey), {"a": "a", "b": "b"})
        steps = [f"float a = {vals[0]}; float b = 0.0;"] + [f"b = {v}; a = {expr};" for v in vals[1:]]
        result = f"a / {lit(len(ins))}" if op == "Mean" else "a"
        return g.finish("binary", f"{helpers}\n{head} {' '.join(steps)} return {result}; }}", ys)
    x = g.bcast(ins[0], y4)
    if op == "Identity":
        return g.finish("unary", f"{head} return {x}; }}", ys)
    names = {"x": "x"}
    resolved = ew.resolve_unary(node, graph)
    if isinstance(resolved, str):
        if op != "Clip":
            raise Decline(resolved)
        # a bound computed at run time: read it per element (opset 11+ bounds are inputs 1, 2)
        resolved = ("Clip", -math.inf, math.inf)
        for idx, pname in ((1, "P0"), (2, "P1")):
            if len(node.inputs) > idx and node.inputs[idx]:
                names[pname] = g.bcast(node.inputs[idx], y4)
    key, p0, p1 = resolved
    expr, helpers = ew.render_scalar(ew.unary_op(key), names, (p0, p1))
    return g.finish("unary", f"{helpers}\n{head} float x = {x}; return {expr}; }}", ys)


# planes of at least this many pixels reduce in two draws (fp32): row sums, then their sum. One
# fragment per channel leaves llvmpipe's threads idle on few channels (16 at 128x128: 2.2 ms)
GLOBAL_POOL_ROWS_FIRST = 256


def gen_global_pool(node: Node, graph: Graph, cfg: Config) -> Kernel | list[Kernel]:
    """Global average / max pooling: each row reduced on its own first (so long rows lose less to
    rounding), then the rows; on large fp32 planes the row results go through a scratch tensor
    (two draws, the same operations in the same order)."""
    g = _Gen(node, graph, cfg)
    x = node.inputs[0]
    g.check_float(x, node.outputs[0])
    xs = g.shape(x)
    if len(xs) != 4:
        raise Decline("only 2-D global pooling")
    N, C, H, W = dims4(xs)
    avg = node.op_type == "GlobalAveragePool"
    init = "0.0" if avg else "-g2_inf()"
    acc, helpers = ("acc += v;", "") if avg else nan_keeping("Max", "acc", "v")
    ys = g.shape(node.outputs[0])
    mean = f" / {lit(H * W)}" if avg else ""

    def row_code(ld: str, row: str, width: int) -> tuple[str, int]:
        code, inner = unrolled(width, lambda j: f"float v = {ld}(n, c, {row}, {j}); {acc}")
        if avg:
            code = "float racc = 0.0; " + code.replace("acc += v;", "racc += v;") + " acc += racc;"
        return code, inner

    def body(code: str, result: str) -> str:
        return "\n".join([helpers, "float compute(float n, float c, float h, float w) {",
                          f"    float acc = {init};", f"    {code}", f"    return {result};", "}"])

    if cfg.pack == 1 and H > 1 and H * W >= GLOBAL_POOL_ROWS_FIRST:
        # row i's result at (n, c, 0, i): a channel's rows side by side fill llvmpipe's 4x4 blocks
        rows_name, rows_shape = f"{node.name}/pool_rows", (N, C, 1, H)
        g.scratch[rows_name] = rows_shape
        code, inner = row_code(g.load(x), "w", W)
        first = g.finish("globalpool", body(code, "acc"), rows_shape, loops=inner + 1, output=rows_name)
        g2 = _Gen(node, graph, cfg)
        g2.scratch[rows_name] = rows_shape
        lr = g2.load(rows_name)
        code, inner = unrolled(H, lambda j: f"float v = {lr}(n, c, 0.0, {j}); {acc}")
        return [first, g2.finish("globalpool", body(code, f"acc{mean}"), ys, loops=inner + 1)]
    code, inner = row_code(g.load(x), "y", W)
    return g.finish("globalpool", body(f"for (int i = 0; i < {H}; i++) {{ float y = float(i); {code} }}",
                                       f"acc{mean}"), ys, loops=H * (inner + 1) + 1)


def gen_pool(node: Node, graph: Graph, cfg: Config) -> Kernel:
    g = _Gen(node, graph, cfg)
    x = node.inputs[0]
    if len([o for o in node.outputs if o]) > 1:
        raise Decline("MaxPool indices output not supported")
    g.check_float(x, node.outputs[0])
    xs, ys = _spatial(g, x, node.outputs[0])
    if len(xs) != 4:
        raise Decline("only 2-D pooling")
    rec = ops.require(node, graph, ops.PoolRecord)
    if tuple(ys[2:]) != rec.out_spatial:
        raise Decline(f"the graph's output shape {ys} does not match the pooling attributes' {rec.out_spatial}")
    k, s, dl, p = list(rec.kernel), list(rec.strides), list(rec.dilations), list(rec.pads_begin)
    avg = node.op_type == "AveragePool"
    include_pad = avg and rec.count_include_pad
    if include_pad and (rec.ceil_mode or rec.auto_pad != "NOTSET"):
        raise Decline("count_include_pad with ceil_mode or auto_pad not supported")
    pads_full = list(rec.pads)
    ld = g.load(x)
    take_max, helpers = nan_keeping("Max", "acc", "v")
    lines = [helpers, "float compute(float n, float c, float h, float w) {",
             f"    float acc = {'0.0' if avg else '-g2_inf()'}; float cnt = 0.0;"]
    for kh in range(k[0]):
        for kw in range(k[1]):
            ih = f"(h * {lit(s[0])} + {lit(kh * dl[0] - p[0])})"
            iw = f"(w * {lit(s[1])} + {lit(kw * dl[1] - p[1])})"
            cond = f"{ih} >= 0.0 && {ih} < {lit(xs[2])} && {iw} >= 0.0 && {iw} < {lit(xs[3])}"
            upd = f"float v = {ld}(n, c, {ih}, {iw}); " + ("acc += v; cnt += 1.0;" if avg else take_max)
            lines.append(f"    if ({cond}) {{ {upd} }}")
    if include_pad:
        # the window clipped to the padded input (pads counted, the ceil_mode overhang not)
        hi_h, hi_w = xs[2] + pads_full[2], xs[3] + pads_full[3]
        lines.append(f"    float hs = h * {lit(s[0])} - {lit(p[0])}; float ws = w * {lit(s[1])} - {lit(p[1])};")
        lines.append(f"    cnt = (min(hs + {lit((k[0] - 1) * dl[0] + 1)}, {lit(hi_h)}) - hs) * "
                     f"(min(ws + {lit((k[1] - 1) * dl[1] + 1)}, {lit(hi_w)}) - ws);")
    lines += [f"    return {'acc / cnt' if avg else 'acc'};", "}"]
    return g.finish("pool", "\n".join(lines), ys)


def _coord_in(mode: str, out_c: str, scale: float, in_len: int, out_len: int, roi: tuple[float, float]) -> str:
    # ONNX measures the output length as scale * in_len, not the rounded-down out_len: with a
    # non-integer product (scales 0.6 on 4 -> 2.4) align_corners divides by 1.4, not by 1
    out_w = scale * in_len
    if mode == "half_pixel":
        return f"(({out_c} + 0.5) / {lit(scale)} - 0.5)"
    if mode == "pytorch_half_pixel":
        return "-0.5" if out_w == 1 else f"(({out_c} + 0.5) / {lit(scale)} - 0.5)"
    if mode == "align_corners":
        return "0.0" if out_w == 1 else f"({out_c} * {lit((in_len - 1) / (out_w - 1))})"
    if mode == "asymmetric":
        return f"({out_c} / {lit(scale)})"
    if mode == "half_pixel_symmetric":
        adj = out_len / (scale * in_len)
        off = in_len / 2.0 * (1 - adj)
        return f"({lit(off)} + ({out_c} + 0.5) / {lit(scale)} - 0.5)"
    if mode == "tf_crop_and_resize":
        r0, r1 = roi
        if out_len > 1:
            return f"({lit(r0 * (in_len - 1))} + {out_c} * {lit((r1 - r0) * (in_len - 1) / (out_len - 1))})"
        return lit(0.5 * (r0 + r1) * (in_len - 1))
    raise Decline(f"coordinate_transformation_mode {mode!r} not supported")


def gen_resize(node: Node, graph: Graph, cfg: Config) -> Kernel:
    g = _Gen(node, graph, cfg)
    x = node.inputs[0]
    g.check_float(x, node.outputs[0])
    xs, ys = g.shape(x), g.shape(node.outputs[0])
    if len(xs) != 4 or xs[:2] != ys[:2]:
        raise Decline("Resize only over the last two axes of a 4-D tensor")
    rec = ops.require(node, graph, ops.ResizeRecord)
    mode, ctm, nearest = rec.mode, rec.coordinate_mode, rec.nearest_mode
    if rec.antialias or rec.axes is not None or rec.keep_aspect_ratio_policy != "stretch":
        raise Decline("Resize antialias / axes / keep_aspect_ratio_policy not supported")
    if mode not in ("nearest", "linear"):
        raise Decline(f"Resize mode {mode!r} not supported")
    if ctm == "tf_crop_and_resize":
        raise Decline("tf_crop_and_resize (extrapolation) not supported")
    scales = rec.scales
    roi = np.array([0, 0, 0, 0, 1, 1, 1, 1], np.float64)
    ld = g.load(x)
    H, W = xs[2], xs[3]
    cy = _coord_in(ctm, "h", float(scales[2]), H, ys[2], (roi[2], roi[6]))
    cx = _coord_in(ctm, "w", float(scales[3]), W, ys[3], (roi[3], roi[7]))
    lines = ["float compute(float n, float c, float h, float w) {", f"    float fy = {cy}; float fx = {cx};"]
    if mode == "nearest":
        rnd = {"round_prefer_floor": "ceil({v} - 0.5)", "round_prefer_ceil": "floor({v} + 0.5)",
               "floor": "floor({v})", "ceil": "ceil({v})"}.get(nearest)
        if rnd is None:
            raise Decline(f"nearest_mode {nearest!r} not supported")
        lines.append(f"    float iy = clamp({rnd.format(v='fy')}, 0.0, {lit(H - 1)});")
        lines.append(f"    float ix = clamp({rnd.format(v='fx')}, 0.0, {lit(W - 1)});")
        lines.append(f"    return {ld}(n, c, iy, ix);")
    else:
        # onnxruntime's bilinear form (as gles3's resize.frag and the compute paths' taps): the
        # coordinate clamped first (0.5 and 0.5 on one repeated pixel at the end) and the four
        # products (wx * wy) * x summed in its order, so a quantized model's ties round as there
        lines += [f"    fy = clamp(fy, 0.0, {lit(H - 1)}); fx = clamp(fx, 0.0, {lit(W - 1)});",
                  f"    float y0 = min(floor(fy), {lit(H - 1)}); float x0 = min(floor(fx), {lit(W - 1)});",
                  f"    float y1 = min(y0 + 1.0, {lit(H - 1)}); float x1 = min(x0 + 1.0, {lit(W - 1)});",
                  "    float dy1 = y0 == y1 ? 0.5 : fy - y0; float dy2 = y0 == y1 ? 0.5 : y1 - fy;",
                  "    float dx1 = x0 == x1 ? 0.5 : fx - x0; float dx2 = x0 == x1 ? 0.5 : x1 - fx;",
                  f"    float r = (dx2 * dy2) * {ld}(n, c, y0, x0);",
                  f"    r += (dx1 * dy2) * {ld}(n, c, y0, x1);",
                  f"    r += (dx2 * dy1) * {ld}(n, c, y1, x0);",
                  f"    r += (dx1 * dy1) * {ld}(n, c, y1, x1);",
                  "    return r;"]
    lines.append("}")
    return g.finish("resize", "\n".join(lines), ys)


def gen_concat(node: Node, graph: Graph, cfg: Config) -> Kernel:
    g = _Gen(node, graph, cfg)
    ins = [i for i in node.inputs if i]
    g.check_float(*ins, node.outputs[0])
    ys = g.shape(node.outputs[0])
    if len(ys) > 4:
        raise Decline("Concat of more than 4 dimensions")
    ax = ops.require(node, graph, ops.AxisRecord).axis + 4 - len(ys)
    coord = "nchw"[ax]
    raw = g.raw_copies(*ins)  # fp32: copy the texels
    lines = [f"{'vec4' if raw else 'float'} compute(float n, float c, float h, float w) {{"]
    off = 0
    for i, name in enumerate(ins):
        size = dims4(g.shape(name))[ax]
        if size == 0:
            continue
        ld = g.load(name, raw=raw)
        args = ", ".join(f"{v} - {lit(off)}" if v == coord else v for v in "nchw")
        last = i == len(ins) - 1
        cond = "" if last else f"if ({coord} < {lit(off + size)}) "
        lines.append(f"    {cond}return {ld}({args});")
        off += size
    lines.append("}")
    return g.finish("concat", "\n".join(lines), ys, raw=raw)


def gen_softmax(node: Node, graph: Graph, cfg: Config) -> Kernel:
    g = _Gen(node, graph, cfg)
    x = node.inputs[0]
    g.check_float(x, node.outputs[0])
    xs = g.shape(x)
    if len(xs) > 4:
        raise Decline("Softmax of more than 4 dimensions")
    ax = ops.require(node, graph, ops.AxisRecord).axis
    if graph.opset < 13 and ax != len(xs) - 1:
        raise Decline("Softmax before opset 13 over a non-last axis")
    ax4 = ax + 4 - len(xs)
    L = dims4(xs)[ax4]
    ld = g.load(x)
    coord = "nchw"[ax4]
    args = ", ".join("j" if v == coord else v for v in "nchw")
    log = node.op_type == "LogSoftmax"
    lines = ["float compute(float n, float c, float h, float w) {", "    float m = -g2_inf(); float s = 0.0;",
             f"    for (int i = 0; i < {L}; i++) {{ float j = float(i); m = max(m, {ld}({args})); }}",
             f"    for (int i = 0; i < {L}; i++) {{ float j = float(i); s += exp({ld}({args}) - m); }}",
             f"    float v = {ld}(n, c, h, w) - m;",
             f"    return {'v - log(s)' if log else 'exp(v) / s'};", "}"]
    return g.finish("softmax", "\n".join(lines), xs, loops=2 * (L + 1))


def _linear_to_coords(dims: tuple[int, int, int, int], lin: str) -> list[str]:
    """GLSL statements splitting the C-order index ``lin`` into a0..a3 for 4-D ``dims``."""
    n, c, h, w = dims
    return [f"    float q0 = g2_idiv({lin}, {lit(w)}); float a3 = {lin} - q0 * {lit(w)};",
            f"    float q1 = g2_idiv(q0, {lit(h)}); float a2 = q0 - q1 * {lit(h)};",
            f"    float a0 = g2_idiv(q1, {lit(c)}); float a1 = q1 - a0 * {lit(c)};"]


def gen_reshape(node: Node, graph: Graph, cfg: Config) -> Kernel:
    """Reshape, Flatten, Squeeze, Unsqueeze: same elements in the same order, new shape."""
    g = _Gen(node, graph, cfg)
    x = node.inputs[0]
    g.check_float(x, node.outputs[0])
    xs, ys = g.shape(x), g.shape(node.outputs[0])
    raw = g.raw_copies(x)  # fp32: copy the texels
    ld = g.load(x, raw=raw)
    ret = "vec4" if raw else "float"
    y4, x4 = dims4(ys), dims4(xs)
    if x4[3] == y4[3]:
        # same last dimension: only the row index is re-split
        lines = [f"{ret} compute(float n, float c, float h, float w) {{",
                 f"    float lin = (n * {lit(y4[1])} + c) * {lit(y4[2])} + h;",
                 f"    float q1 = g2_idiv(lin, {lit(x4[2])}); float a2 = lin - q1 * {lit(x4[2])};",
                 f"    float a0 = g2_idiv(q1, {lit(x4[1])}); float a1 = q1 - a0 * {lit(x4[1])};",
                 f"    return {ld}(a0, a1, a2, w);", "}"]
    else:
        lines = [f"{ret} compute(float n, float c, float h, float w) {{",
                 f"    float lin = ((n * {lit(y4[1])} + c) * {lit(y4[2])} + h) * {lit(y4[3])} + w;",
                 *_linear_to_coords(x4, "lin"), f"    return {ld}(a0, a1, a2, a3);", "}"]
    return g.finish("layout", "\n".join(lines), ys, raw=raw)


def gen_transpose(node: Node, graph: Graph, cfg: Config) -> Kernel:
    g = _Gen(node, graph, cfg)
    x = node.inputs[0]
    g.check_float(x, node.outputs[0])
    xs, ys = g.shape(x), g.shape(node.outputs[0])
    r = len(xs)
    if r > 4:
        raise Decline("Transpose of more than 4 dimensions")
    perm = list(ops.require(node, graph, ops.TransposeRecord).perm)
    off = 4 - r
    out_coord = ["n", "c", "h", "w"][off:]
    src = ["0.0"] * off + [""] * r
    for i, pi in enumerate(perm):  # output axis i is input axis perm[i]
        src[off + pi] = out_coord[i]
    return g.gather(x, src, ys)


def gen_pad(node: Node, graph: Graph, cfg: Config) -> Kernel:
    g = _Gen(node, graph, cfg)
    x = node.inputs[0]
    g.check_float(x, node.outputs[0])
    xs, ys = g.shape(x), g.shape(node.outputs[0])
    if len(xs) > 4:
        raise Decline("Pad of more than 4 dimensions")
    rec = ops.require(node, graph, ops.PadRecord)
    mode, pads, value = rec.mode, list(rec.pads), rec.value
    if mode not in ("constant", "edge", "reflect"):
        raise Decline(f"Pad mode {mode!r} not supported")
    r = len(xs)
    off = 4 - r
    begin = [0] * off + pads[:r]
    x4 = dims4(xs)
    ld = g.load(x)
    lines = ["float compute(float n, float c, float h, float w) {"]
    names = []
    for d, v in enumerate("nchw"):
        e = f"(({v}) - {lit(begin[d])})"
        names.append(f"s_{v}")
        if mode == "edge":
            lines.append(f"    float s_{v} = clamp({e}, 0.0, {lit(x4[d] - 1)});")
        elif mode == "reflect":
            period = max(2 * (x4[d] - 1), 1)
            lines.append(f"    float s_{v} = abs({e}); s_{v} = s_{v} - {lit(period)} * floor(s_{v} / {lit(period)}); "
                         f"s_{v} = s_{v} > {lit(x4[d] - 1)} ? {lit(period)} - s_{v} : s_{v};")
        else:
            lines.append(f"    float s_{v} = {e};")
            lines.append(f"    if (s_{v} < 0.0 || s_{v} >= {lit(x4[d])}) return {lit(value)};")
    lines += [f"    return {ld}({', '.join(names)});", "}"]
    return g.finish("pad", "\n".join(lines), ys)


def gen_reduce(node: Node, graph: Graph, cfg: Config) -> Kernel:
    g = _Gen(node, graph, cfg)
    x = node.inputs[0]
    g.check_float(x, node.outputs[0])
    xs, ys = g.shape(x), g.shape(node.outputs[0])
    if len(xs) > 4:
        raise Decline("reduction of more than 4 dimensions")
    rec = ops.require(node, graph, ops.ReduceRecord)
    if rec.noop:
        raise Decline("noop_with_empty_axes")
    r = len(xs)
    axes = [a + 4 - r for a in rec.axes]
    keep = rec.keepdims
    x4 = dims4(xs)
    kept = [d for d in range(4 - r, 4) if d not in axes]
    # output coordinates (in output 4-D) map to the kept input axes in order
    out_rank = len(ys)
    out_coords = ["n", "c", "h", "w"][4 - out_rank:] if out_rank else []
    src = {d: "0.0" for d in range(4)}
    if keep:
        for d in kept:
            src[d] = "nchw"[d]
    else:
        for d, v in zip(kept, out_coords):
            src[d] = v
    op = node.op_type
    init = {"ReduceMax": "-g2_inf()", "ReduceMin": "g2_inf()", "ReduceProd": "1.0"}.get(op, "0.0")
    nan_upd, helpers = nan_keeping("Min" if op == "ReduceMin" else "Max", "acc", "v")
    upd = {"ReduceMax": nan_upd, "ReduceMin": nan_upd, "ReduceProd": "acc *= v;",
           "ReduceSumSquare": "acc += v * v;", "ReduceL2": "acc += v * v;", "ReduceL1": "acc += abs(v);",
           "ReduceLogSumExp": "acc += exp(v);"}.get(op, "acc += v;")
    fin = {"ReduceMean": f"acc / {lit(math.prod(x4[a] for a in axes))}", "ReduceL2": "sqrt(acc)",
           "ReduceLogSumExp": "log(acc)", "ReduceLogSum": "log(acc)"}.get(op, "acc")
    # sums over several axes: each pass of the innermost loop sums on its own first (a running sum
    # of a 120x160 plane lost enough of fp32 to be PP-OCRv6 det's largest single error step)
    rows = upd.startswith("acc +=") and len(axes) > 1
    ld = g.load(x)
    lines = [helpers, "float compute(float n, float c, float h, float w) {", f"    float acc = {init};"]
    args = []
    for d in range(4):
        args.append(f"float(j{d})" if d in axes else src[d])
    indent = "    "
    for d in axes:
        if rows and d == axes[-1]:
            lines.append(f"{indent}float racc = 0.0;")
        lines.append(f"{indent}for (int j{d} = 0; j{d} < {x4[d]}; j{d}++) {{")
        indent += "    "
    lines.append(f"{indent}float v = {ld}({', '.join(args)}); {upd.replace('acc', 'racc') if rows else upd}")
    for d in reversed(axes):
        indent = indent[:-4]
        lines.append(f"{indent}}}")
        if rows and d == axes[-1]:
            lines.append(f"{indent}acc += racc;")
    lines += [f"    return {fin};", "}"]
    loops, trips = 0, 1
    for d in axes:  # nested: every entry of a loop takes its steps plus an exit
        loops += trips * (x4[d] + 1)
        trips *= x4[d]
    return g.finish("reduce", "\n".join(lines), ys, loops=loops)


def _check(node: Node, graph: Graph) -> str | None:
    if not node.outputs or not node.outputs[0]:
        return "no output"
    if any(node.outputs[1:]) and node.op_type != "Split":
        return "optional extra outputs not supported"
    return None


_REDUCE_OPS = ("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceSumSquare", "ReduceL1",
               "ReduceL2", "ReduceLogSumExp", "ReduceLogSum")
# Candidates per op type: (kernel name, generator(node, graph, cfg)); a generator serving several
# kernels (conv: conv1x1 / depthwise / conv) names the one it made in its Kernel.
REGISTRY = KernelRegistry("gles2", {
    "Conv": [("conv", gen_conv)],
    "ConvTranspose": [("convtranspose_tap", functools.partial(gen_conv_transpose, one_tap=True)),
                      ("convtranspose", gen_conv_transpose)],
    "Gemm": [("gemm", gen_gemm)], "MatMul": [("matmul", gen_matmul)],
    "GlobalAveragePool": [("globalpool", gen_global_pool)], "GlobalMaxPool": [("globalpool", gen_global_pool)],
    "AveragePool": [("pool", gen_pool)], "MaxPool": [("pool", gen_pool)],
    "Resize": [("resize", gen_resize)], "Upsample": [("resize", gen_resize)],
    "Concat": [("concat", gen_concat)], "Softmax": [("softmax", gen_softmax)], "LogSoftmax": [("softmax", gen_softmax)],
    **{op: [("layout", gen_reshape)] for op in ("Reshape", "Flatten", "Squeeze", "Unsqueeze")},
    "Transpose": [("layout", gen_transpose)], "Pad": [("pad", gen_pad)],
    **{op: [("reduce", gen_reduce)] for op in _REDUCE_OPS},
    **{op: [("binary", gen_elementwise)] for op in (*_NARY, *ew.BINARY_OP_TYPES)},
    **{op: [("unary", gen_elementwise)] for op in (*ew.UNARY_OP_TYPES, "Identity")},
}, check=_check)


def generate(node: Node, graph: Graph, cfg: Config) -> Generated | str:
    """The kernel for ``node`` (:func:`.kernel_contract.generate` over :data:`REGISTRY`) or the
    reason there is none."""
    return _generate(REGISTRY, node, graph, cfg)
