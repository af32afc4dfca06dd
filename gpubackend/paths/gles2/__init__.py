"""The OpenGL ES 2.0 path: every tensor in RGBA8 textures (one float32, or two float16, per
texel: docs/gles2_encoding.md), every node one draw of a per-shape generated GLSL ES 1.00
fragment shader over its output texture (``kernels.py``). Tensors stay in textures between
the nodes of a segment; only the segment's inputs are uploaded and its outputs read back.

Only ES 2.0 facilities are used by this module: RGBA / UNSIGNED_BYTE textures with nearest
filtering and CLAMP_TO_EDGE, a framebuffer with one colour attachment, ``#version 100``
programs, ``glDrawArrays`` and ``glReadPixels`` (RGBA / UNSIGNED_BYTE)."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from capability_probe.errors import DriverUnavailable
from gpubackend import shaders

from ... import mixed_precision, tuning
from ...graph import Graph, Node
from ..base import Path, RunStats, Segment
from ..kernel_contract import KernelCache
from ..segment_services import fuse_residual_adds, fuse_silu, plan_storage, run_steps
from . import quads, quant_kernels, slice_norm_kernels, winograd  # noqa: F401  (add to REGISTRY)
from .kernels import CHANNEL_DRAW_MIN_PIXELS, REGISTRY, Config, Kernel, generate
from .layout import Layout

KEY = "gles2"
GL_FRAGMENT_SHADER = 0x8B30
GL_HIGH_FLOAT = 0x8DF2
GL_TRIANGLES = 0x0004
GL_POINTS = 0x0000
GL_ALIASED_POINT_SIZE_RANGE = 0x846D


def fragment_highp(ctx: Any) -> tuple[bool, str]:
    """Whether fragment shaders have highp float with a 24-bit significand, and what was seen."""
    try:
        from capability_probe.glutil import GLQuery

        got = GLQuery().precision(GL_FRAGMENT_SHADER, GL_HIGH_FLOAT)
    except Exception as exc:  # noqa: BLE001 - no query: the #error in kernel.frag still guards
        return True, f"glGetShaderPrecisionFormat unavailable ({exc})"
    if got is None:
        return True, "glGetShaderPrecisionFormat gave no answer"
    rng, prec = got
    desc = f"fragment highp float: range {rng}, precision {prec} bits"
    return prec >= 23 and rng[0] >= 126 and rng[1] >= 127, desc


def point_size_limit() -> int:
    """The largest point sprite side (GL_ALIASED_POINT_SIZE_RANGE), 0 where the query fails."""
    try:
        from capability_probe.glutil import GLQuery

        got = GLQuery().floats(GL_ALIASED_POINT_SIZE_RANGE, 2)
    except Exception:  # noqa: BLE001 - no query: the many-quad draws keep their triangles
        return 0
    return int(got[1]) if got and got[1] == got[1] else 0


class Runtime:
    """The GL side shared by every segment of one path: device, limits, program cache."""

    def __init__(self, device: Any):
        self.dev = device
        ctx = device.ctx
        ok, desc = fragment_highp(ctx)
        if not ok:
            raise DriverUnavailable(f"gles2 needs highp float in fragment shaders; {desc}")
        self.highp = desc
        info = ctx.info
        self.max_size = int(info.get("GL_MAX_TEXTURE_SIZE", 2048) or 2048)
        self.max_units = int(info.get("GL_MAX_TEXTURE_IMAGE_UNITS", 8) or 8)
        self.max_uniform_vectors = int(info.get("GL_MAX_FRAGMENT_UNIFORM_VECTORS", 16) or 16)
        self.max_varying_vectors = int(info.get("GL_MAX_VARYING_VECTORS", 8) or 8)
        self.max_vertex_uniform_vectors = int(info.get("GL_MAX_VERTEX_UNIFORM_VECTORS", 128) or 128)
        self.max_point_size = point_size_limit()
        self.channel_varyings = tuning.device_class({"renderer": info.get("GL_RENDERER", "")}) == "llvmpipe"
        self.vertex = shaders.source("gles2/quad.vert", "100")
        # The quad and the VAOs (one per cached program) live as long as the context, like the
        # programs, when the device keeps per-context state (a GLDevice does).
        shared = getattr(device, "state", None)
        quad = shared.get("gles2.quad") if shared is not None else None
        if quad is None:
            quad = (device.buffer(np.array([-1, -1, 3, -1, -1, 3], dtype="f4")), {})
            if shared is not None:
                shared["gles2.quad"] = quad
                device.on_program_evicted.append(functools.partial(_forget_vao, device, quad[1]))
        self.vbo, self._vaos = quad
        self._buffers: dict[str, Any] = shared if shared is not None else {}

    def quads_vbo(self, points: bool) -> Any:
        """The vertices of shaders/gles2/quads.vert: quads.MAX_QUADS unit quads, (corner x, corner y,
        quad k) per vertex, or (points) the point sprites' numbers 0 .. quads.MAX_POINTS - 1: one
        buffer each per context, like the quad."""
        key = "gles2.points" if points else "gles2.quads"
        if key not in self._buffers:
            if points:
                data = np.arange(quads.MAX_POINTS, dtype=np.float32)
            else:
                corners = np.array([[0, 0], [1, 0], [0, 1], [0, 1], [1, 0], [1, 1]], np.float32)
                data = np.concatenate([np.hstack([corners, np.full((6, 1), q, np.float32)])
                                       for q in range(quads.MAX_QUADS)])
            self._buffers[key] = self.dev.buffer(data)
        return self._buffers[key]

    def config(self, precision: str, channel_draw_min_pixels: int | None = CHANNEL_DRAW_MIN_PIXELS) -> Config:
        return Config(precision, self.max_size, self.max_units, self.max_uniform_vectors, channel_draw_min_pixels,
                      channel_varyings=self.channel_varyings, max_varying_vectors=self.max_varying_vectors,
                      max_vertex_uniform_vectors=self.max_vertex_uniform_vectors,
                      max_point_size=self.max_point_size)

    def program(self, kernel: Kernel) -> tuple[Any, Any]:
        prog = self.dev.program(kernel.vertex or self.vertex, kernel.fragment)
        if id(prog) not in self._vaos:
            # Safe to set once on a shared program: sampler ti is unit i for every kernel with this
            # source (each step binds its i-th input to unit i at its draw); nothing per node here.
            for i in range(len(kernel.inputs)):
                if f"t{i}" in prog:
                    prog[f"t{i}"].value = i
            if kernel.quad_points:
                self._vaos[id(prog)] = self.dev.ctx.vertex_array(prog, [(self.quads_vbo(True), "1f", "a_point")])
            elif kernel.quad_draws is not None:
                self._vaos[id(prog)] = self.dev.ctx.vertex_array(prog, [(self.quads_vbo(False), "3f", "a_quad")])
            else:
                self._vaos[id(prog)] = self.dev.ctx.vertex_array(prog, [(self.vbo, "2f", "a_pos")])
        return prog, self._vaos[id(prog)]

    def texture(self, layout: Layout, data: bytes | None = None) -> Any:
        import moderngl

        tex = self.dev.texture(layout.size, 4, data, dtype="f1")
        tex.filter = (moderngl.NEAREST, moderngl.NEAREST)
        tex.repeat_x = tex.repeat_y = False  # CLAMP_TO_EDGE
        return tex


def _forget_vao(device: Any, vaos: dict[int, Any], prog: Any) -> None:
    """A program left the device's cache: its VAO goes too (released once no segment uses it)."""
    vao = vaos.pop(id(prog), None)
    if vao is not None:
        device.release_when_unused(vao)


class _Step:
    __slots__ = ("node", "kernel", "prog", "vao", "inputs", "fbo", "out", "bands", "quad_draws")

    def __init__(self, node: Node, kernel: Kernel, prog: Any, vao: Any, inputs: list[Any], fbo: Any, out: str,
                 layout: Layout):
        self.node, self.kernel, self.prog, self.vao, self.inputs, self.fbo, self.out = \
            node, kernel, prog, vao, inputs, fbo, out
        # per-channel kernels: (viewport, u_w bytes) of each draw, the rows of one (n, c)
        self.bands: list[tuple[tuple[int, int, int, int], bytes]] = []
        # many-quad kernels: (first row, quads, u_w bytes: the draw's weights, zeros past its quads)
        self.quad_draws = []
        for first, count, u in kernel.quad_draws or ():
            full = np.zeros((kernel.quads, u.shape[1]), np.float32)
            full[:len(u)] = u
            self.quad_draws.append((first, count, full.tobytes()))
        if kernel.channel_uniforms is not None:
            n, c, h, _ = layout.d4
            width = layout.size[0]
            rows = [np.ascontiguousarray(u).tobytes() for u in kernel.channel_uniforms]
            self.bands = [((0, (i * c + ch) * h, width, h), rows[ch]) for i in range(n) for ch in range(c)]


# the Conv kernels whose activate() applies a gated activation (SiLU fused: fuse_silu)
GATE_KERNELS = frozenset({"conv", "conv1x1", "depthwise", "conv_winograd", "conv_quads", "depthwise_quads"})


class Gles2Segment(Segment):
    def __init__(self, path: Gles2Path, nodes: list[Node], graph: Graph, inputs: list[str], outputs: list[str]):
        super().__init__(KEY, nodes, inputs, outputs)
        rt = path.runtime
        self._rt = rt
        cfg = path.kernels.context  # the generators' Config: the same format for every tensor
        self.poison = path.poison
        # integer outputs (a QuantizeLinear's) are read back as floats holding the integers and
        # leave in the graph's type; integer inputs are uploaded as those floats
        self.out_types = {n: np.dtype(graph.dtypes[n]) for n in outputs
                          if graph.dtypes.get(n) is not None and np.dtype(graph.dtypes[n]) != np.float32}
        self.layouts: dict[str, Layout] = {}
        self.textures: dict[str, Any] = {}
        self.fbos: dict[str, Any] = {}
        self._owned: list[Any] = []
        # one draw per kernel: a node's payload is a Kernel, or a list of them (Split: one per output)
        steps, payloads = fuse_silu(nodes, path.kernels.payloads(nodes, graph, KEY), graph, outputs, path.kernels,
                                    GATE_KERNELS)
        silu_pairs = (len(nodes) - len(steps)) // 2
        # a residual Add after a conv: added in the conv's last draw (fp32; _Gen.finish, plain_gemm)
        steps, payloads = fuse_residual_adds(steps, payloads, graph, outputs, path.kernels, GATE_KERNELS)
        residual_adds = len(nodes) - 2 * silu_pairs - len(steps)
        every: list[tuple[Node, Kernel, str]] = [
            (node, k, k.output or node.outputs[0]) for node, payload in zip(steps, payloads)
            for k in (payload if isinstance(payload, list) else [payload])]
        # a kernel whose output is already in its input's texture (Kernel.alias) is no draw: its
        # readers read the owner's texture; not where the owner is an uploaded input and the alias
        # a segment output (outputs are read back from a render target)
        owner: dict[str, str] = {}
        draws: list[tuple[Node, Kernel, str]] = []
        for node, k, out in every:
            src = owner.get(k.alias, k.alias)
            if k.alias and not (out in outputs and src in inputs):
                owner[out] = src
            else:
                draws.append((node, k, out))
        self.aliases = owner
        # explain(): Winograd's tile and the many-quad draws' geometry, per kernel
        self.notes = tuning.explain_lines([(k.name, k.variant, k.variant_why) for _, k, _ in every if k.variant])
        if silu_pairs or residual_adds:
            self.notes.append(f"fused into conv draws: {silu_pairs} SiLU (Sigmoid and Mul), "
                              f"{residual_adds} residual Add")
        # Under fp16 a tensor the mixed-precision policy keeps is one fp32 per texel (pack 1), at
        # a segment edge inside the graph too: uploaded and read back as float32 (Config.pack_of,
        # which the generators asked when they wrote the loaders and the output encoding)
        for name in inputs:
            self.layouts[name] = Layout.of(graph.shape(name), cfg.pack_of(name, graph),  # type: ignore[arg-type]
                                           cfg.max_size)
            self.textures[name] = self._own(rt.texture(self.layouts[name]))
        for _, k, out in every:
            self.layouts[out] = Layout.of(k.out_shape, k.out_pack, cfg.max_size)
        # Render targets shared by tensors whose lifetimes do not overlap (segment_services); the
        # uploaded inputs keep their own textures.
        produced = {out for _, _, out in draws}
        slot_of, _ = plan_storage([[*(owner.get(i, i) for i in k.inputs), out] for _, k, out in draws],
                                  lambda name: self.layouts[name].size, managed=produced.__contains__,
                                  keep=[owner.get(o, o) for o in outputs])
        targets: dict[int, tuple[Any, Any]] = {}
        self.steps: list[_Step] = []
        # constants the segment holds for explain(): weight textures (4 bytes a texel) and the
        # per-channel uniform weights it sets before each draw
        self.weight_bytes = 0
        for node, k, out in draws:
            texs = []
            if k.channel_uniforms is not None:
                self.weight_bytes += k.channel_uniforms.nbytes
            self.weight_bytes += sum(u.nbytes for _, _, u in k.quad_draws or ())
            for name in (owner.get(i, i) for i in k.inputs):
                if name not in self.textures:  # a constant: uploaded once, fp32
                    arr = k.consts[name] if name in k.consts else graph.constants[name]
                    lay = Layout.of(tuple(arr.shape), 1, cfg.max_size)
                    self.layouts[name] = lay
                    self.textures[name] = self._own(rt.texture(lay, lay.to_bytes(arr)))
                    self.weight_bytes += 4 * lay.size[0] * lay.size[1]
                texs.append(self.textures[name])
            slot = slot_of[out]
            if slot not in targets:
                tex = self._own(rt.texture(self.layouts[out]))
                targets[slot] = (tex, self._own(rt.dev.ctx.framebuffer(color_attachments=[tex])))
            self.textures[out], self.fbos[out] = targets[slot]
            prog, vao = rt.program(k)
            self.steps.append(_Step(node, k, prog, vao, texs, self.fbos[out], out, self.layouts[out]))
        for name, src in owner.items():
            self.textures[name] = self.textures[src]
            if src in self.fbos:
                self.fbos[name] = self.fbos[src]
        if cfg.pack == 2:
            wanted = {**mixed_precision.planned_inputs(graph), **mixed_precision.fp32_tensors(nodes, graph)}
            kept = {n: why for n, why in wanted.items() if n in self.layouts and self.layouts[n].pack == 1}
            self.notes = [mixed_precision.describe(nodes, graph, kept)]

    def _own(self, obj: Any) -> Any:
        self._owned.append(obj)
        return obj

    @property
    def draws(self) -> int:
        return sum(len(step.quad_draws) or len(step.bands) or 1 for step in self.steps)

    def run(self, feeds: dict[str, np.ndarray], stats: RunStats) -> dict[str, np.ndarray]:
        import moderngl

        rt = self._rt
        rt.dev.check_thread()
        ctx = rt.dev.ctx
        ctx.disable(moderngl.BLEND | moderngl.DEPTH_TEST | moderngl.CULL_FACE)
        for name in self.inputs:
            lay = self.layouts[name]
            rt.dev.write(self.textures[name], lay.to_bytes(np.asarray(feeds[name], dtype=np.float32)))
            stats.upload(lay.nbytes)
        run_steps(self.steps, lambda step: self._draw(step, rt, stats), stats, ctx.finish,
                  lambda step: step.node.name)
        out = {}
        for name in self.outputs:
            lay = self.layouts[name]
            data = self.fbos[name].read(components=4, dtype="f1")
            got = rt.dev.readback(lay.from_bytes(data))
            out[name] = got.astype(self.out_types[name]) if name in self.out_types else got
            stats.download(lay.nbytes)
        return out

    def _draw(self, step: _Step, rt: Runtime, stats: RunStats) -> None:
        step.fbo.use()
        if self.poison:
            step.fbo.clear(1.0, 1.0, 1.0, 1.0)  # 0xFF bytes: NaN in both encodings
        for unit, tex in enumerate(step.inputs):
            tex.use(location=unit)
        if step.quad_draws:
            for name, value in step.kernel.uniforms.items():
                if name in step.prog:
                    step.prog[name].value = value if len(value) > 1 else value[0]
            weights, first_row = step.prog["u_w"], step.prog["u_first"]
            for first, count, data in step.quad_draws:
                weights.write(data)
                first_row.value = first
                rt.dev.dispatched()
                if step.kernel.quad_points:
                    step.vao.render(GL_POINTS, vertices=step.kernel.quad_points * count)
                else:
                    step.vao.render(GL_TRIANGLES, vertices=6 * count)
                stats.dispatches += 1
            return
        if step.bands:
            weights = step.prog["u_wv" if step.kernel.vertex else "u_w"]
            full = step.fbo.viewport  # the framebuffer keeps it: put back for its next user
            try:
                for viewport, data in step.bands:
                    weights.write(data)
                    step.fbo.viewport = viewport
                    rt.dev.dispatched()
                    step.vao.render(GL_TRIANGLES, vertices=3)
                    stats.dispatches += 1
            finally:
                step.fbo.viewport = full
            return
        rt.dev.dispatched()
        step.vao.render(GL_TRIANGLES, vertices=3)
        stats.dispatches += 1

    def close(self) -> None:
        self._rt.dev.release(*self._owned)
        self._owned = []


class Gles2Path(Path):
    key = KEY

    def __init__(self, precision: str = "fp32", disabled_kernels: frozenset[str] = frozenset(), device: Any = None,
                 channel_draw_min_pixels: int | None = CHANNEL_DRAW_MIN_PIXELS):
        super().__init__(precision, disabled_kernels)
        if precision not in ("fp32", "fp16"):
            raise ValueError(f"precision must be fp32 or fp16, not {precision!r}")
        self._device = device
        self._runtime: Runtime | None = None
        # the Config needs the GL context's limits: made at the first generation
        self.kernels = KernelCache(REGISTRY, lambda: self.runtime.config(self.precision, channel_draw_min_pixels),
                                   disabled_kernels,
                                   lazy_context=True)

    @property
    def runtime(self) -> Runtime:
        if self._runtime is None:
            if self._device is None:
                from ...gl.device import GLDevice

                self._device = GLDevice.shared(KEY)
            self._runtime = Runtime(self._device)
        return self._runtime

    def decline(self, node: Node, graph: Graph) -> str | None:
        return self.kernels.decline(node, graph)

    def kernel_name_for(self, node: Node, graph: Graph) -> str | None:
        """The kernel this path object runs ``node`` with: its Config's limits decide (the quad
        GEMMs and Winograd need the weights in varyings, which only some drivers have)."""
        hit = self.kernels.get(node, graph)
        return None if isinstance(hit, str) else hit.kernel

    def compile(self, nodes: list[Node], graph: Graph, inputs: list[str], outputs: list[str]) -> Gles2Segment:
        return Gles2Segment(self, nodes, graph, inputs, outputs)


def create(precision: str = "fp32", disabled_kernels: frozenset[str] = frozenset(), device: Any = None,
           channel_draw_min_pixels: int | None = CHANNEL_DRAW_MIN_PIXELS) -> Gles2Path:
    return Gles2Path(precision, disabled_kernels, device, channel_draw_min_pixels)


def kernel_name(node: Node, graph: Graph) -> str | None:
    """The kernel that would run ``node`` (None if gles2 declines it); needs no GL context."""
    got = generate(node, graph, Config("fp32", 16384, 16))
    return None if isinstance(got, str) else got.kernel


def canary(precision: str = "fp32") -> float:
    """Run a conv, a depthwise conv and a GEMM on small random inputs against ``fallback``;
    return the max relative error, raise if it is beyond the precision's tolerance."""
    from ._canary import run_canary

    return run_canary(precision)


def canary_int8(precision: str = "fp32") -> float:
    """The int8 kernels (``conv_q8``: int8 weights as raw bytes in an RGBA8 texture, and
    Quantize/DequantizeLinear) against ``fallback``; raises if the conv did not run as ``conv_q8``
    or its quantized output is more than one step away."""
    from ..compute_quant import canary as int8_canary

    def run(nodes: list[Node], graph: Graph, feeds: dict[str, np.ndarray], prec: str) -> dict[str, np.ndarray]:
        path = Gles2Path(prec)
        path.poison = True
        seg = path.compile(nodes, graph, list(feeds), graph.outputs)
        try:
            return seg.run(feeds, RunStats())
        finally:
            seg.close()

    return int8_canary(run, precision, kernel_name)


__all__ = ["Gles2Path", "Gles2Segment", "Runtime", "create", "canary", "canary_int8", "kernel_name",
           "fragment_highp"]
