"""The OpenGL ES 3.1 compute path (``gles31``): the kernels of :mod:`..compute_kernels` as
compute shaders on SSBOs, one small std140 uniform buffer of parameters per dispatch, tensors
kept on the GPU in the channel-packed layout between nodes (packing/unpacking on the host at a
segment's edges only).

Programs are compiled once per distinct source per process and their binaries persisted in
``$GPUBACKEND_CACHE_DIR/programs/<driver fingerprint>/`` when the driver offers program binary
formats (Mesa offers none when its own shader cache is disabled; ``ProgramCache.binary_note``
says so). On llvmpipe a binary only skips GLSL -> NIR; the LLVM JIT runs at a program's first
dispatch and is what Mesa's own disk cache saves. Every driver call goes through
:class:`gpubackend.gl.device.GLDevice` (fault hooks) or the raw entry points of :mod:`.gl` right
after the matching hook.

Layout operations (Reshape, Flatten, Squeeze, Unsqueeze, Identity) are zero-copy aliases when
the packed bytes are identical (e.g. Flatten of N,C,1,1), else a gather kernel (``relayout``),
as is Transpose; rank > 4 is declined (the planner puts those on the CPU)."""

from __future__ import annotations

import hashlib
import time
import weakref
from dataclasses import replace
from pathlib import Path as FsPath
from typing import Any

import numpy as np

from capability_probe import cache, faults

from ...graph import Graph, Node
from .. import compute_kernels as ck
from .. import compute_mixed, compute_quant, fp16_compute
from ..base import Path, RunStats, Segment
from ..kernel_contract import KernelCache
from ..segment_services import plan_storage, poison_words, run_steps, time_steps
from . import gl as rawgl

KEY = "gles31"


class GLProgram:
    """A program id as segments hold it (usable wherever an int is, through ``__index__``); it
    keeps alive what owns the GL program (the compiled moderngl shader, or :class:`_LoadedProgram`),
    so an entry evicted from the cache stays valid while a segment uses it."""

    __slots__ = ("glo", "owner", "__weakref__")

    def __init__(self, glo: int, owner: Any):
        self.glo, self.owner = int(glo), owner

    def __index__(self) -> int:
        return self.glo

    __int__ = __index__


class _LoadedProgram:
    """A program made from a binary (no moderngl object): released with ``glDeleteProgram``."""

    def __init__(self, gl: Any, glo: int):
        self.gl, self.glo = gl, glo

    def release(self) -> None:
        if self.glo:
            self.gl.glDeleteProgram(self.glo)
            self.glo = 0


class ProgramCache:
    """Compiled programs by source text for one context (the ``max_programs()`` most recently
    used); binaries persisted on disk."""

    def __init__(self, device: Any):
        from ...gl.device import ProgramLRU

        self.device = device
        self.gl = rawgl.GL()
        # a compiled program's moderngl shader sits in the device's own cache too, which
        # releases it once unused; a loaded binary is this cache's to release
        self.programs = ProgramLRU(self._release_loaded_when_unused)
        self.stats = {"compiled": 0, "from_binary": 0, "binary_saved": 0}
        self.binary_note = ""
        self.dir: FsPath | None = None
        self.max_texture_buffer_texels = self.gl.max_texture_buffer_texels()  # TEXW kernels
        formats = self.gl.binary_formats()
        if not formats:
            self.binary_note = "the driver offers no GL_PROGRAM_BINARY_FORMATS: program binaries are not persisted"
            return
        try:
            self.dir = cache.ensure_dir(cache.cache_dir() / "programs" / self.gl.fingerprint())
        except OSError as exc:
            self.dir = None
            self.binary_note = f"program binary cache unavailable: {exc}"

    def _release_loaded_when_unused(self, prog: GLProgram) -> None:
        if isinstance(prog.owner, _LoadedProgram):
            weakref.finalize(prog, self.device.context.release, prog.owner)

    def get(self, src: str) -> GLProgram:
        prog = self.programs.get(src)
        if prog is not None:
            return prog
        digest = hashlib.sha256(src.encode()).hexdigest()
        path = self.dir / f"{digest[:32]}.bin" if self.dir is not None else None
        data = cache.read_blob(path, digest) if path is not None else None
        if data is not None:
            faults.on_compile(KEY, "compute")
            if len(data) > 4:
                loaded = self.gl.load_binary(int.from_bytes(data[:4], "little"), data[4:])
                if loaded is not None:
                    self.stats["from_binary"] += 1
                    prog = GLProgram(loaded, _LoadedProgram(self.gl, loaded))
                    self.programs.put(src, prog)
                    return prog
        cs = self.device.compute(src)  # fault hook + readable compile errors
        prog = GLProgram(cs.glo, cs)
        self.stats["compiled"] += 1
        if path is not None:
            got = self.gl.get_binary(prog.glo)
            if got is not None and cache.write_blob(path, digest, got[0].to_bytes(4, "little") + got[1]):
                self.stats["binary_saved"] += 1
        self.programs.put(src, prog)
        return prog


def device_and_programs() -> tuple[Any, ProgramCache]:
    """This thread's GLDevice of this path and its program cache (one per context, dying with it)."""
    from ...gl.device import GLDevice

    dev = GLDevice.shared(KEY)
    programs = dev.state.get("gles31.programs")
    if programs is None:
        programs = dev.state["gles31.programs"] = ProgramCache(dev)
    return dev, programs


class _BufferTexture:
    """A buffer texture over a buffer a TEXW / TEXX kernel reads, released with ``glDeleteTextures``."""

    def __init__(self, gl: Any, buffer: int, internal_format: int):
        self.gl, self.glo = gl, gl.buffer_texture(buffer, internal_format)

    def release(self) -> None:
        if self.glo:
            self.gl.delete_texture(self.glo)
            self.glo = 0


# Kernels that read a binding through a buffer texture (compute/weights.glsl, input_x.glsl):
# define -> the binding, which is also its texture unit. Float weights are always fp32 vec4s;
# int8 weights (QW) ignore TEXW.
TEXTURE_BINDINGS = {"TEXW": 1, "TEXX": 0, "TEXT": 2}  # TEXT: resize.comp's tap table


class _Dispatch:
    __slots__ = ("program", "buffers", "ubo", "groups", "kernel", "node", "textures")

    def __init__(self, program: GLProgram, buffers: list[Any], ubo: Any, groups: tuple[int, int, int], kernel: str,
                 node: str, textures: tuple[tuple[int, int], ...] = ()):
        self.program, self.buffers, self.ubo, self.groups = program, buffers, ubo, groups
        self.kernel, self.node, self.textures = kernel, node, textures  # (unit, texture)


_BARRIER = rawgl.SHADER_STORAGE_BARRIER_BIT | rawgl.BUFFER_UPDATE_BARRIER_BIT | rawgl.TEXTURE_FETCH_BARRIER_BIT


def _node_of(d: _Dispatch) -> str:
    return d.node


class Gles31Segment(Segment):
    def __init__(self, nodes: list[Node], graph: Graph, inputs: list[str], outputs: list[str],
                 records: list[ck.Record], precision: str, device: Any, programs: ProgramCache,
                 poison: bool = False):
        super().__init__(KEY, nodes, inputs, outputs)
        self.precision = precision
        self.device = device
        self.gl = programs.gl
        self.shapes = {n: tuple(graph.shape(n) or ()) for n in set(inputs) | set(outputs)}
        self.dtypes = {n: ck.tensor_dtype(graph, n) for n in outputs}
        self._owned: list[Any] = []
        self.notes = ck.variant_notes(records)  # which tuning variant each kernel runs, for explain()
        t0 = time.perf_counter()
        self._build(graph, records, programs, poison)
        self.compile_seconds = time.perf_counter() - t0

    # ---- compile -------------------------------------------------------------------------------
    def _alloc(self, nbytes: int, data: np.ndarray | None = None) -> Any:
        buf = self.device.buffer(data) if data is not None else self.device.buffer(reserve=nbytes)
        self._owned.append(buf)
        return buf

    def _build(self, graph: Graph, records: list[ck.Record], programs: ProgramCache, poison: bool) -> None:
        prec = self.precision
        records = compute_quant.fuse_requantize(records, graph, set(self.outputs))
        records = compute_quant.fuse_quantize_dequantize(records, set(self.outputs))
        records = ck.fuse_gates(records, set(self.outputs))
        records = ck.elide_concats(records, set(self.outputs))
        records, kept = compute_mixed.plan(records, self.nodes, graph, {*self.inputs, *self.outputs}, prec)
        self._kept = kept
        if prec == "fp16":
            self.notes.append(compute_mixed.describe(self.nodes, graph, kept))
        root: dict[str, str] = {}  # tensor -> the tensor whose buffer it uses
        for r in records:
            if isinstance(r, ck.Alias):
                root[r.dst] = root.get(r.src, r.src)

        def rt(name: str) -> str:
            return root.get(name, name)

        # Inputs fed as weights (a transform packs them at upload) get their own buffers; an input
        # read only that way is not uploaded in the plain packed layout as well.
        plain: set[str] = set()
        self._transformed: list[tuple[str, Any, Any, int]] = []
        for r in records:
            if isinstance(r, ck.Alias):
                plain.add(r.src)
            else:
                plain.update(b.name for b in r.bindings if b.role == "in" and b.transform is None)
        transformed_buf: dict[int, Any] = {}
        for r in records:
            if isinstance(r, ck.Kernel):
                for b in r.bindings:
                    if b.transform is not None and id(b) not in transformed_buf:
                        probe = b.transform(np.zeros(graph.shape(b.name) or (), np.float32))
                        data = ck.as_storage(probe, "fp32" if b.fp32 else prec)
                        buf = self._alloc(data.nbytes)
                        transformed_buf[id(b)] = buf
                        self._transformed.append((b.name, b.transform, buf, 1 if b.fp32 else 0))
        self._plain_inputs = [n for n in self.inputs if n in plain]

        size: dict[str, int] = {}
        scratch = ck.scratch_shapes(records)

        def size_of(name: str) -> int:
            if name not in size:
                shape = scratch.get(name) or graph.shape(name)
                if shape is None:
                    raise ValueError(f"gles31: no static shape for {name!r}")
                size[name] = ck.storage_bytes(tuple(shape), self.storage_of(name))
            return size[name]

        for r in records:  # an alias's view may be larger than its root's (never, but be safe)
            if isinstance(r, ck.Alias):
                size[rt(r.dst)] = max(size_of(rt(r.dst)), size_of(r.dst))

        # Buffer reuse (segment_services): aliases share their root's storage; a storage takes the
        # smallest free buffer that fits once every reader of the one before has run.
        steps = [[rt(r.src), rt(r.dst)] if isinstance(r, ck.Alias) else
                 [rt(b.name) for b in r.bindings if b.role != "const" and b.transform is None] for r in records]
        slot_of, slot_bytes = plan_storage(steps, size_of,
                                           managed=lambda name: name not in graph.constants,
                                           preloaded=[rt(n) for n in self._plain_inputs],
                                           keep=[rt(n) for n in self.outputs], fits=int.__ge__)
        slot_bufs = [self._alloc(nbytes) for nbytes in slot_bytes]
        if poison:  # tests: every storage starts as NaN, so an element no kernel wrote shows up
            for buf, nbytes in zip(slot_bufs, slot_bytes):
                buf.write(poison_words(nbytes, prec).tobytes())
        buffers: dict[str, Any] = {name: slot_bufs[slot] for name, slot in slot_of.items()}
        # Graph constants read as runtime tensors (e.g. a constant MatMul operand) are uploaded once.
        self.weight_bytes = 0  # constants on the device (weights, biases, scales), for explain()
        for r in records:
            if isinstance(r, ck.Kernel):
                for b in r.bindings:
                    if b.role == "in" and b.name in graph.constants and b.name not in buffers:
                        buffers[b.name] = self._alloc(0, ck.as_storage(ck.pack(graph.constants[b.name]), prec))
                        self.weight_bytes += buffers[b.name].size
        self._input_buffers = {n: buffers[rt(n)] for n in self._plain_inputs}
        self.dispatches: list[_Dispatch] = []
        self.kernel_counts: dict[str, int] = {}
        for r in records:
            if isinstance(r, ck.Alias):
                self.kernel_counts["layout(alias)"] = self.kernel_counts.get("layout(alias)", 0) + 1
                continue
            bound = []
            for b in r.bindings:
                if b.role == "const":
                    bound.append(self._alloc(0, ck.as_storage(b.data, "fp32" if b.fp32 else prec)))
                    self.weight_bytes += bound[-1].size
                elif b.transform is not None:
                    bound.append(transformed_buf[id(b)])
                else:
                    bound.append(buffers[rt(b.name)] if b.name not in graph.constants else buffers[b.name])
            ubo = self._alloc(0, np.frombuffer(ck.pack_params(r), np.uint8))
            textures = []
            for define, binding in TEXTURE_BINDINGS.items():
                if not dict(r.defines).get(define) or (define == "TEXW" and dict(r.defines).get("QW")):
                    continue  # int8 weights (QW) stay a storage buffer; their input may be a texture
                fmt = rawgl.RG32UI if define == "TEXX" and dict(r.defines).get("FP16") else rawgl.RGBA32F
                texels = bound[binding].size // (8 if fmt == rawgl.RG32UI else 16)
                if texels <= programs.max_texture_buffer_texels:
                    tex = _BufferTexture(self.gl, bound[binding].glo, fmt)
                    self._owned.append(tex)
                    textures.append((binding, tex.glo))
                else:  # no buffer textures, or too large a buffer for one: the storage-buffer form
                    r = replace(r, defines=tuple(d for d in r.defines if d[0] != define))
                    self.notes.append(f"{r.node}: {r.kernel} {r.variant} reads binding {binding} as a storage buffer "
                                      f"(over GL_MAX_TEXTURE_BUFFER_SIZE {programs.max_texture_buffer_texels})")
            prog = programs.get(ck.glsl_source(r, "gles31"))
            self.dispatches.append(_Dispatch(prog, [b.glo for b in bound], ubo.glo, r.groups, r.kernel, r.node,
                                             tuple(textures)))
            self.kernel_counts[r.kernel] = self.kernel_counts.get(r.kernel, 0) + 1
        self._output_buffers = {n: buffers[rt(n)] for n in self.outputs}

    # ---- run -----------------------------------------------------------------------------------
    def run(self, feeds: dict[str, np.ndarray], stats: RunStats) -> dict[str, np.ndarray]:
        self.device.check_thread()
        self._upload(feeds, stats)
        self._execute(stats)
        return {name: self._read(name, stats) for name in self.outputs}

    def run_resident(self, feeds: dict[str, Any], stats: RunStats, device_outputs: dict[str, Any]) -> dict[str, Any]:
        from .resident import run_resident

        return run_resident(self, feeds, stats, device_outputs)

    def _upload(self, feeds: dict[str, np.ndarray], stats: RunStats) -> None:
        """Host arrays into the input buffers (the inputs named in ``feeds``)."""
        prec = self.precision
        for name in self._plain_inputs:
            if name in feeds:
                data = ck.as_storage(ck.pack(feeds[name]), self.storage_of(name))
                self.device.write(self._input_buffers[name], data)
                stats.upload(data.nbytes)
        for name, transform, buf, fp32 in self._transformed:
            if name in feeds:
                data = ck.as_storage(transform(feeds[name]), "fp32" if fp32 else prec)
                self.device.write(buf, data)
                stats.upload(data.nbytes)

    def _execute(self, stats: RunStats) -> None:
        run_steps(self.dispatches, lambda d: self._dispatch(d, stats), stats, self.gl.glFinish, _node_of)

    def storage_of(self, name: str) -> str:
        """The storage precision of tensor ``name`` here: fp32 where the mixed-precision plan keeps
        it (a planned segment edge included), else the segment's."""
        return compute_mixed.storage(name, self._kept, self.precision)

    def _read(self, name: str, stats: RunStats) -> np.ndarray:
        shape = self.shapes[name]
        prec = self.storage_of(name)
        nbytes = ck.storage_bytes(shape, prec)
        dtype = np.float16 if prec == "fp16" else np.float32
        raw = self.device.readback(np.frombuffer(self._output_buffers[name].read(size=nbytes), dtype))
        stats.download(nbytes)
        return ck.unpack(raw, shape, self.dtypes.get(name, np.float32))

    def _dispatch(self, d: _Dispatch, stats: RunStats) -> None:
        g = self.gl
        self.device.dispatched()
        g.use_program(d.program)
        for i, glo in enumerate(d.buffers):
            g.bind_buffer_base(rawgl.SHADER_STORAGE_BUFFER, i, glo)
        g.bind_buffer_base(rawgl.UNIFORM_BUFFER, 0, d.ubo)
        for unit, tex in d.textures:
            g.glActiveTexture(rawgl.TEXTURE0 + unit)
            g.glBindTexture(rawgl.TEXTURE_BUFFER, tex)
        g.dispatch_compute(*d.groups)
        g.memory_barrier(_BARRIER)
        stats.dispatches += 1

    def profile(self, feeds: dict[str, np.ndarray], repeat: int = 1) -> list[tuple[str, str, float]]:
        """(node, kernel, median seconds) per dispatch, each timed to completion (glFinish)."""
        self.run(feeds, RunStats())
        stats = RunStats()
        secs = time_steps(self.dispatches, lambda d: self._dispatch(d, stats), self.gl.glFinish, repeat)
        return [(d.node, d.kernel, t) for d, t in zip(self.dispatches, secs)]

    def close(self) -> None:
        self.device.release(*self._owned)
        self._owned = []


class Gles31Path(Path):
    key = KEY

    def __init__(self, precision: str = "fp32", disabled_kernels: frozenset[str] = frozenset()):
        super().__init__(precision, disabled_kernels)
        # decline() generates the records (weights packed once); compile() reuses them
        self.kernels = KernelCache(ck.REGISTRY, precision, disabled_kernels)

    def decline(self, node: Node, graph: Graph) -> str | None:
        return self.kernels.decline(node, graph)

    def compile(self, nodes: list[Node], graph: Graph, inputs: list[str], outputs: list[str]) -> Segment:
        records: list[ck.Record] = [r for recs in self.kernels.payloads(nodes, graph, KEY) for r in recs]
        if self.arithmetic == "fp16":
            records = [fp16_compute.mediump_record(r) for r in records]
        device, programs = device_and_programs()
        seg = Gles31Segment(nodes, graph, inputs, outputs, records, self.precision, device, programs, self.poison)
        self.kernels.forget(nodes)  # packed weights now live on the GPU
        return seg

    def close(self) -> None:
        self.kernels.clear()


def create(precision: str = "fp32", disabled_kernels: frozenset[str] = frozenset()) -> Gles31Path:
    return Gles31Path(precision, disabled_kernels)


def kernel_name(node: Node, graph: Graph) -> str | None:
    """The kernel that would run ``node`` on this path, or None if it declines."""
    got = ck.generate(node, graph)
    return None if isinstance(got, str) else got.kernel


def run_nodes(nodes: list[Node], graph: Graph, feeds: dict[str, np.ndarray], precision: str = "fp32",
              poison: bool = True) -> tuple[dict[str, np.ndarray], RunStats]:
    """Compile ``nodes`` as one segment and run it once (tests, canary, benchmarks). With
    ``poison`` every intermediate/output buffer starts as NaN, so an unwritten element shows up."""
    path = create(precision)
    path.poison = poison
    produced = {o for n in nodes for o in n.outputs if o}
    inputs = [i for n in nodes for i in n.inputs if i and i not in produced and i not in graph.constants]
    inputs = list(dict.fromkeys(inputs))
    seg = path.compile(nodes, graph, inputs, list(graph.outputs))
    stats = RunStats()
    try:
        return seg.run(feeds, stats), stats
    finally:
        seg.close()


def canary(precision: str = "fp32") -> float:
    """Runs conv (3x3, stride 2, fused Relu6), depthwise and GEMM on small random inputs against
    ``fallback.run_node``; returns the max relative error, raises if it is too large."""
    from gpubackend import fallback

    rng = np.random.default_rng(1234)
    x = rng.standard_normal((1, 5, 9, 11)).astype(np.float32)
    consts = {
        "w1": rng.standard_normal((6, 5, 3, 3)).astype(np.float32) * 0.3,
        "b1": rng.standard_normal(6).astype(np.float32),
        "w2": rng.standard_normal((6, 1, 3, 3)).astype(np.float32),
        "b2": rng.standard_normal(6).astype(np.float32),
        "w3": rng.standard_normal((6 * 5 * 6, 7)).astype(np.float32) * 0.1,
        "b3": rng.standard_normal(7).astype(np.float32),
        "shape": np.array([1, -1], np.int64),
    }
    nodes = [
        Node("conv", "Conv", ["x", "w1", "b1"], ["c1"],
             {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1],
              "_act": ("Clip", {"min": 0.0, "max": 6.0})}),
        Node("dw", "Conv", ["c1", "w2", "b2"], ["c2"], {"kernel_shape": [3, 3], "group": 6, "pads": [1, 1, 1, 1]}),
        Node("flat", "Reshape", ["c2", "shape"], ["f"], {}),
        Node("gemm", "Gemm", ["f", "w3", "b3"], ["y"], {}),
    ]
    shapes = {"x": x.shape, "c1": (1, 6, 5, 6), "c2": (1, 6, 5, 6), "f": (1, 180), "y": (1, 7)}
    graph = Graph(nodes, ["x"], ["c1", "c2", "y"], consts, shapes=shapes, opset=17)
    got, _ = run_nodes(nodes, graph, {"x": x}, precision)
    env = {"x": x, **consts}
    worst = 0.0
    for n in nodes:
        env[n.outputs[0]] = fallback.run_node(n.op_type, [env[i] for i in n.inputs], n.attrs, 17)[0]
    for name in ("c1", "c2", "y"):
        ref = env[name]
        err = float(np.max(np.abs(got[name] - ref)) / (np.max(np.abs(ref)) + 1e-6))
        worst = max(worst, err if np.isfinite(err) else float("inf"))
    tol = 2e-2 if precision == "fp16" else 1e-4
    if not worst <= tol:
        raise AssertionError(f"gles31 canary ({precision}): max relative error {worst:.3g} > {tol}")
    return worst


def canary_int8(precision: str = "fp32") -> float:
    """The int8 kernels (packed int8 weights, Quantize/DequantizeLinear) against ``fallback``."""

    return compute_quant.canary(lambda nodes, graph, feeds, prec: run_nodes(nodes, graph, feeds, prec)[0], precision)


__all__ = ["Gles31Path", "Gles31Segment", "ProgramCache", "canary", "canary_int8", "create", "kernel_name",
           "run_nodes"]
