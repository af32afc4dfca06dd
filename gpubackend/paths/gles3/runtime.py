"""The gles3 segment: textures, programs, weight buffers and draws for a run of gles3 nodes.
Everything is allocated at compile time (textures shared by liveness); a run uploads the
segment's inputs, draws every kernel and reads back only the segment's outputs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import moderngl
import numpy as np

from ... import mixed_precision
from ...errors import ModelError
from ...gl.device import GLDevice
from ...graph import Graph, Node
from ..base import RunStats, Segment
from ..segment_services import plan_storage, run_steps
from .kernels import Kernel, Limits, vertex_source
from .layout import TexLayout, pack, unpack

NEAREST = 0x2600  # GL_NEAREST: float textures are not filterable on every ES 3.0 device


@dataclass(eq=False)
class Storage:
    """The textures (one per plane) holding one tensor, and the framebuffer drawing into them."""

    layout: TexLayout
    textures: list[Any]
    fbo: Any = None
    dtype: str = "f4"  # "f4" (RGBA32F) or "f2" (RGBA16F)


@dataclass
class Step:
    node: Node
    kernel: Kernel
    program: Any = None
    vao: Any = None
    inputs: list[Storage] = field(default_factory=list)
    out: Storage | None = None
    ubo: Any = None
    ubo_stride: int = 0
    wtex: Any = None
    # This node's uniform values (sampler units included) and uniform-block bindings. A program
    # is shared by every node with the same source (the device caches it), so these are applied
    # at each of this node's draws, never once at compile time: the last node set up would win.
    uniforms: dict[str, Any] = field(default_factory=dict)
    blocks: dict[str, int] = field(default_factory=dict)


class Gles3Segment(Segment):
    def __init__(self, dev: GLDevice, lim: Limits, dtype: str, kernels: dict[str, Kernel], nodes: list[Node],
                 graph: Graph, inputs: list[str], outputs: list[str], fp32: frozenset[str] = frozenset()):
        """``fp32``: tensors held in RGBA32F although ``dtype`` is "f2" (the mixed-precision
        policy; the segment's outputs and its inputs other than the graph's keep ``dtype``)."""
        super().__init__("gles3", nodes, inputs, outputs)
        self.dev = dev
        self.lim = lim
        self.dtype = dtype  # "f4" or "f2"
        self.poison: float | None = None  # tests: fill each output with this before its draw
        self.shapes = {n: tuple(int(d) for d in graph.shape(n) or ()) for n in inputs + outputs}
        # bool / int64 results (comparisons, ArgMax) travel as exact floats and leave as their type
        self.out_types = {n: np.dtype(graph.dtypes[n]) for n in outputs
                          if graph.dtypes.get(n) is not None and np.dtype(graph.dtypes[n]) != np.float32}
        self._owned: list[Storage] = []
        self._vaos: dict[int, Any] = {}
        self._consts: list[Storage] = []
        self._closed = False
        self.weight_bytes = 0  # weights, biases and scales on the device (uniform buffers, textures), for explain()
        self.storage: dict[str, Storage] = {}
        self.node_of: dict[str, str] = {}  # step name -> graph node name where they differ (several-kernel nodes)
        self.layouts: dict[str, TexLayout] = {}  # a shared Storage holds different layouts over time
        vs = vertex_source()

        # Liveness and texture reuse (segment_services): an alias's output lives in its source's
        # storage; storages of the same size and plane count are shared by tensors whose
        # lifetimes do not overlap.
        root: dict[str, str] = {}
        for name in inputs:
            self.layouts[name] = kernels_layout_for_input(kernels, nodes, name)
        for node in nodes:
            k = kernels[node.name]
            if k.alias:
                root[node.outputs[0]] = root.get(k.alias, k.alias)
            self.layouts[node.outputs[0]] = k.out
        owned = set(inputs) | {n.outputs[0] for n in nodes}
        edges = mixed_precision.planned_edges(graph, [*inputs, *outputs])  # uploaded / read back as fp32
        wide = {n for n in fp32 if dtype == "f2" and (n in edges or (n not in inputs and n not in outputs))}
        wide |= {node.outputs[0] for node in nodes if kernels[node.name].wide}
        self.storage_dtype = {name: "f4" if name in wide else dtype for name in owned}
        slot_of, _ = plan_storage(
            [[root.get(n, n) for n in [*node.inputs, node.outputs[0]]] for node in nodes],
            lambda name: (self.layouts[name].size, self.layouts[name].planes, self.storage_dtype[name]),
            managed=lambda name: name in owned, preloaded=inputs, keep=[root.get(o, o) for o in outputs])
        slots: dict[int, Storage] = {}
        for name in [*inputs, *(n.outputs[0] for n in nodes)]:
            slot = slot_of[root.get(name, name)]
            if slot not in slots:
                slots[slot] = self._new_storage(self.layouts[name], self.storage_dtype[root.get(name, name)])
            self.storage[name] = slots[slot]
        self.steps: list[Step] = []
        for node in nodes:
            k = kernels[node.name]
            step = Step(node, k)
            step.inputs = [self.storage[name] for _, name in k.inputs]
            if not k.alias:
                step.program = dev.program(k.vertex or vs, k.fragment)
                self._setup(step, k)
            step.out = self.storage[node.outputs[0]]
            self.steps.append(step)
        self._draws = [step for step in self.steps if step.program is not None]

    # ---- allocation ----------------------------------------------------------------------------
    def _new_storage(self, lay: TexLayout, dtype: str | None = None) -> Storage:
        dtype = dtype or self.dtype
        texs = []
        for _ in range(lay.planes):
            t = self.dev.texture(lay.size, 4, None, dtype=dtype)
            t.filter = (NEAREST, NEAREST)
            texs.append(t)
        st = Storage(lay, texs, dtype=dtype)
        st.fbo = self.dev.ctx.framebuffer(color_attachments=texs)
        self._owned.append(st)
        return st

    def _setup(self, step: Step, k: Kernel) -> None:
        prog = step.program
        unit = 0
        members = set(prog)
        uniforms = step.uniforms
        for (prefix, _), st in zip(k.inputs, step.inputs):
            for p in range(len(st.textures)):
                if f"{prefix}_{p}" in members:
                    uniforms[f"{prefix}_{p}"] = unit + p
            unit += len(st.textures)
        const_dtype = "f4" if k.fp32_consts else self.dtype
        for prefix, (data, lay) in k.consts.items():
            st = Storage(lay, [])
            for plane in pack(data, lay, np.float16 if const_dtype == "f2" else np.float32):
                t = self.dev.texture(lay.size, 4, plane.tobytes(), dtype=const_dtype)
                t.filter = (NEAREST, NEAREST)
                st.textures.append(t)
            self._consts.append(st)
            step.inputs.append(st)
            for p in range(lay.planes):
                if f"{prefix}_{p}" in members:
                    uniforms[f"{prefix}_{p}"] = unit + p
            unit += lay.planes
        if k.weights is not None:
            total, nw, _ = k.weights.shape
            if k.weight_mode == "ubo":
                align = max(16, self.lim.ubo_alignment)
                stride = -(-nw * 16 // align) * align
                buf = np.zeros((total, stride // 16, 4), k.weights.dtype)  # float32, or uint32 int8 words
                buf[:, :nw] = k.weights
                step.ubo = self.dev.buffer(buf)
                self.weight_bytes += buf.nbytes
                step.ubo_stride = stride
                for p in range(k.out.planes):
                    if f"WB{p}" in members:
                        step.blocks[f"WB{p}"] = p
            else:
                flat = k.weights.reshape(-1, 4)
                rows = -(-flat.shape[0] // 1024)
                data = np.zeros((rows * 1024, 4), k.weights.dtype)
                data[: flat.shape[0]] = flat
                step.wtex = self.dev.texture((1024, rows), 4, data.tobytes(),
                                             dtype="u4" if k.weights.dtype == np.uint32 else "f4")
                step.wtex.filter = (NEAREST, NEAREST)
                self.weight_bytes += data.nbytes
                if "WT" in members:
                    uniforms["WT"] = unit
                unit += 1
        if unit > self.lim.max_texture_units:
            raise ValueError(f"{step.node.name}: {unit} textures exceed {self.lim.max_texture_units} units")
        for name, value in k.uniforms.items():
            if name in members:
                uniforms[name] = value
        per_draw = {"u_tile"}
        if k.accumulate:  # the chunk's input planes go to units 0.. at each draw (_accumulate)
            uniforms.update((f"XJ_{i}", i) for i in range(len(k.accumulate[0][0])) if f"XJ_{i}" in members)
            per_draw |= {"u_c", "u_info"}
        if "u_half16" in members:  # round to nearest before an RGBA16F target (kernels.HALF_STORE)
            uniforms["u_half16"] = int(self.storage[step.node.outputs[0]].dtype == "f2")
        # Every uniform of a shared program must get this node's value at its draw, or it would
        # keep the value of whichever node drew last with the program.
        unset = [m for m in members
                 if isinstance(prog[m], moderngl.Uniform) and m not in uniforms and m not in per_draw]
        if unset:
            raise ModelError(f"{step.node.name} ({step.node.op_type}): gles3 kernel {k.name!r} leaves "
                                   f"uniforms {sorted(unset)} unset")
        key = id(prog)
        if key not in self._vaos:
            self._vaos[key] = self.dev.ctx.vertex_array(prog, [])
        step.vao = self._vaos[key]

    # ---- running -------------------------------------------------------------------------------
    def run(self, feeds: dict[str, np.ndarray], stats: RunStats) -> dict[str, np.ndarray]:
        self.dev.check_thread()
        self._upload(feeds, stats)
        self._execute(stats)
        return {name: self._read(name, stats) for name in self.outputs}

    def run_resident(self, feeds: dict[str, Any], stats: RunStats, device_outputs: dict[str, Any]) -> dict[str, Any]:
        from .resident import run_resident

        return run_resident(self, feeds, stats, device_outputs)

    def _upload(self, feeds: dict[str, np.ndarray], stats: RunStats) -> None:
        """Host arrays into the input textures (the inputs named in ``feeds``)."""
        for name in self.inputs:
            if name not in feeds:
                continue
            st, lay = self.storage[name], self.layouts[name]
            np_dtype = np.float16 if st.dtype == "f2" else np.float32
            x = np.asarray(feeds[name], np.float32).reshape(lay.n, lay.c, lay.h, lay.w)
            for tex, plane in zip(st.textures, pack(x, lay, np_dtype)):
                self.dev.write(tex, plane)
                stats.upload(plane.nbytes)

    def _execute(self, stats: RunStats) -> None:
        run_steps(self._draws, lambda step: self._draw(step, stats), stats,
                  self.dev.ctx.finish, lambda step: self.node_of.get(step.node.name, step.node.name))

    def _read(self, name: str, stats: RunStats) -> np.ndarray:
        st, lay = self.storage[name], self.layouts[name]
        planes = []
        for p in range(lay.planes):
            raw = st.fbo.read(components=4, dtype="f4", attachment=p)
            arr = self.dev.readback(np.frombuffer(raw, np.float32).reshape(lay.size[1], lay.size[0], 4))
            stats.download(arr.nbytes)
            planes.append(arr)
        out = unpack(planes, lay).reshape(self.shapes[name])
        return out.astype(self.out_types[name]) if name in self.out_types else out

    def _draw(self, step: Step, stats: RunStats) -> None:
        k, prog, out = step.kernel, step.program, step.out
        assert out is not None
        unit = 0
        for st in step.inputs:
            for tex in st.textures:
                tex.use(location=unit)
                unit += 1
        if step.wtex is not None:
            step.wtex.use(location=unit)
        for name, value in step.uniforms.items():
            prog[name].value = value
        for name, binding in step.blocks.items():
            prog[name].binding = binding
        fbo = out.fbo
        fbo.use()
        lay = k.out
        if self.poison is not None:
            fbo.viewport = (0, 0, *lay.size)
            fbo.clear(*(self.poison,) * 4)
        if k.accumulate:
            self._accumulate(step, stats)
            return
        if not k.tiled:
            fbo.viewport = (0, 0, *lay.size)
            self.dev.dispatched()
            step.vao.render(mode=4, vertices=3)
            stats.dispatches += 1
            return
        tile = prog["u_tile"]
        nw = k.weights.shape[1] if k.weights is not None else 0
        for g in range(lay.slots):
            if step.ubo is not None:
                for p in range(lay.planes):
                    step.ubo.bind_to_uniform_block(p, offset=(g * lay.planes + p) * step.ubo_stride, size=nw * 16)
            for n in range(lay.n):
                x0, y0 = lay.tile_origin(n, g)
                tile.value = (n, g, x0, y0)
                fbo.viewport = (x0, y0, lay.w, lay.h)
                self.dev.dispatched()
                step.vao.render(mode=4, vertices=3)
                stats.dispatches += 1

    def _accumulate(self, step: Step, stats: RunStats) -> None:
        """conv_blend's first pass: zero the targets, then one instanced draw per chunk with
        additive blending (the fbo is bound, the inputs and weights are)."""
        k, prog, ctx = step.kernel, step.program, self.dev.ctx
        assert step.out is not None
        fbo = step.out.fbo
        fbo.viewport = (0, 0, *k.out.size)
        fbo.clear(0.0, 0.0, 0.0, 0.0)
        x = step.inputs[0]
        c_uniform, info = prog["u_c"], prog["u_info"]
        ctx.enable(moderngl.BLEND)
        try:
            ctx.blend_func = moderngl.ONE, moderngl.ONE
            ctx.blend_equation = moderngl.FUNC_ADD
            bound: tuple[int, ...] = ()
            for planes, chunk, chunk_info in k.accumulate:
                if planes != bound:  # consecutive chunks of one slot half share their planes
                    for unit, plane in enumerate(planes):
                        x.textures[plane].use(location=unit)
                    bound = planes
                c_uniform.value = chunk
                info.value = chunk_info
                self.dev.dispatched()
                step.vao.render(mode=moderngl.TRIANGLE_STRIP, vertices=4, instances=k.instances)
                stats.dispatches += 1
        finally:
            ctx.disable(moderngl.BLEND)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        release = self.dev.release
        release(*self._vaos.values())
        for st in self._owned + self._consts:
            release(st.fbo, *st.textures)
        for step in self.steps:
            release(step.ubo, step.wtex)
        self._vaos.clear()


def kernels_layout_for_input(kernels: dict[str, Kernel], nodes: list[Node], name: str) -> TexLayout:
    """The layout a segment input is uploaded in: the one its first reader expects."""
    for node in nodes:
        k = kernels[node.name]
        for prefix, tname in k.inputs:
            if tname == name:
                return _input_layout(k, prefix)
    raise KeyError(name)


def _input_layout(k: Kernel, prefix: str) -> TexLayout:
    return k.in_layouts[prefix]
