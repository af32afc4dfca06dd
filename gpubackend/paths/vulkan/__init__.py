"""The Vulkan path (``vulkan``): the shared compute kernels (``compute_kernels`` records over
``shaders/compute/*.comp``) run as precompiled SPIR-V through Kompute.

A segment is compiled once: every record becomes a kp algorithm (params as push constants, local
size as specialisation constants), weights are uploaded once, and the whole segment -- upload of
the inputs, every dispatch (Kompute puts a shader-write -> shader-read barrier before each), download
of the outputs -- is recorded into one ``kp.Sequence`` that each run replays with ``eval()``.
Tensors stay in device buffers between the segment's nodes in the packed (PHWC4) layout; fp16
storage is ``packHalf2x16`` words in uint32 tensors with fp32 arithmetic.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from typing import Any

import numpy as np

from ... import tuning
from ...graph import Graph, Node
from .. import compute_kernels as ck
from .. import compute_mixed, compute_quant
from ..base import Path, RunStats, Segment
from ..kernel_contract import Generated, KernelCache
from .device import KEY, MAX_PUSH_BYTES, VkDevice, spirv_dir
from .program import BufferSpec, Compiled, Edge, Program, Step, reuse_temps

# Set to "0" to evaluate one sequence per node instead of replaying the recorded segment
# (the comparison the benchmark reports).
RECORD_ENV = "GPUBACKEND_VULKAN_RECORD"


def widened(rec: ck.Record, defines: tuple[tuple[str, int], ...]) -> ck.Record:
    """``rec`` with the defines of a ``loads`` variant (WIDE) when it stores fp32 (an FP16
    kernel keeps its packed-half words)."""
    if not isinstance(rec, ck.Kernel) or dict(rec.defines).get("FP16"):
        return rec
    return dataclasses.replace(rec, defines=tuple(sorted({**dict(rec.defines), **dict(defines)}.items())))


def spv_for(k: ck.Kernel) -> str:
    return spv_for_variant(k.shader, k.defines)


def kernel_name(node: Node, graph: Graph) -> str | None:
    """The short kernel name that would run ``node`` on this path, or None if it declines."""
    got = ck.generate(node, graph, "fp32")
    return None if isinstance(got, str) else got.kernel


def push_words(k: ck.Kernel) -> np.ndarray:
    """The kernel's params as push-constant words: the same bytes GL puts in its std140 uniform
    buffer (``compute_kernels.pack_params``: int32 or float32 bits, typed by the Params block)."""
    return np.frombuffer(ck.pack_params(k), np.uint32).copy()


@functools.cache
def _manifest() -> dict[str, str]:
    from gpubackend.shaders.build_spirv import read_manifest

    return read_manifest()


@functools.cache
def _stale(shader: str, defines: tuple[tuple[str, int], ...]) -> bool:
    from gpubackend.shaders.build_spirv import source_hash

    return _manifest().get(spv_for_variant(shader, defines)) != source_hash(shader, defines)


def spv_for_variant(shader: str, defines: tuple[tuple[str, int], ...]) -> str:
    from gpubackend.shaders.build_spirv import spv_name

    return spv_name(shader, defines)


# Vulkan guarantees storage buffers of at least 2**27 bytes (maxStorageBufferRange); lavapipe
# offers exactly that. A larger tensor would need splitting, which the kernels do not do.
MAX_BUFFER_BYTES = 1 << 27


def _check_shipped(records: list[ck.Record], graph: Graph, precision: str) -> str | None:
    for rec in records:
        if isinstance(rec, ck.Kernel):
            for b in rec.bindings:
                if b.role == "const" and b.data is not None:
                    nbytes = int(np.asarray(b.data).size) * 4
                else:
                    shape = b.shape or graph.shape(b.name)
                    nbytes = ck.storage_bytes(tuple(shape), precision) if shape is not None else 0
                if nbytes > MAX_BUFFER_BYTES:
                    return f"{b.name!r} needs a {nbytes}-byte buffer (maxStorageBufferRange {MAX_BUFFER_BYTES})"
            name = spv_for(rec)
            if not (spirv_dir() / name).is_file():
                return f"SPIR-V variant {name} is not shipped (run `python -m gpubackend.shaders.build_spirv`)"
            if _stale(rec.shader, rec.defines):
                return (f"SPIR-V {name} is out of date with its GLSL source {rec.shader} "
                        "(run `python -m gpubackend.shaders.build_spirv`)")
            nbytes = push_words(rec).nbytes
            if nbytes > MAX_PUSH_BYTES:
                return f"{rec.kernel} needs {nbytes} bytes of push constants (limit {MAX_PUSH_BYTES})"
    return None


class VulkanSegment(Segment):
    def __init__(self, dev: VkDevice, nodes: list[Node], graph: Graph, inputs: list[str], outputs: list[str],
                 records: list[ck.Record], precision: str, record_once: bool = True):
        super().__init__(KEY, nodes, inputs, outputs)
        self.precision = precision
        self.shapes = {n: tuple(int(d) for d in graph.shape(n) or ()) for n in [*inputs, *outputs]}
        self.notes = ck.variant_notes(records)  # which tuning variant each kernel runs, for explain()
        self.kept: set[str] = set()  # tensors held in fp32 under precision="fp16" (compute_mixed)
        self.program = self._lower(graph, records)
        self.compiled = Compiled(dev, self.program, record_once)
        self.dispatch_count = len(self.program.steps)
        # constants on the device (weights, biases, scales), for explain()
        self.weight_bytes = sum(b.data.nbytes for b in self.program.buffers.values()
                                if b.kind == "const" and b.data is not None)

    # ---- records -> plain program ---------------------------------------------------------
    def _spec(self, name: str, shape: tuple[int, ...], kind: str, data: np.ndarray | None = None) -> BufferSpec:
        prec = self.storage_of(name)
        fp16 = prec == "fp16"
        words = ck.storage_bytes(shape, prec) // 4
        return BufferSpec(name, words, np.uint32 if fp16 else np.float32, kind, data)

    def storage_of(self, name: str) -> str:
        """The storage precision of tensor ``name`` here: fp32 where the mixed-precision plan keeps
        it (a planned segment edge included), else the segment's."""
        return compute_mixed.storage(name, self.kept, self.precision)

    def _words(self, packed: np.ndarray, fp32: bool = False) -> np.ndarray:
        """Packed float data as the words a buffer holds (float16 pairs as uint32 for fp16
        storage unless ``fp32``: constants the shaders declare ``vec4`` whatever the precision)."""
        prec = "fp32" if fp32 else self.precision
        return ck.as_storage(packed, prec).reshape(-1).view(np.uint32 if prec == "fp16" else np.float32)

    def _lower(self, graph: Graph, records: list[ck.Record]) -> Program:
        records = compute_quant.fuse_requantize(records, graph, set(self.outputs))
        records = compute_quant.fuse_quantize_dequantize(records, set(self.outputs))
        records = ck.fuse_gates(records, set(self.outputs))  # SiLU into the producing conv's epilogue
        elide = getattr(ck, "elide_concats", None)
        if elide is not None:  # producers write straight into a channel Concat's output
            records = elide(records, set(self.outputs))
        records, self.kept = compute_mixed.plan(records, self.nodes, graph, {*self.inputs, *self.outputs},
                                                self.precision)
        if self.precision == "fp16":
            self.notes.append(compute_mixed.describe(self.nodes, graph, self.kept))
        prog = Program()
        alias: dict[str, str] = {}  # tensor -> buffer holding it
        outs = set(self.outputs)
        scratch = ck.scratch_shapes(records)  # Winograd operands, fp32 copies of a precision plan

        def buf(name: str) -> str:
            return alias.get(name, name)

        # Inputs read in the packed layout get one buffer each; an input fed as weights (a binding
        # with a ``transform``) gets a buffer per such binding, packed by the transform at upload.
        plain = {b.name for r in records if isinstance(r, ck.Kernel) for b in r.bindings
                 if b.role == "in" and getattr(b, "transform", None) is None}
        plain |= {r.src for r in records if isinstance(r, ck.Alias)} | set(self.outputs)
        edges: list[Edge] = []
        for name in self.inputs:
            if name in plain:
                prog.add_buffer(self._spec(name, self.shapes[name], "input"))
                edges.append(Edge(name, name, to_words=lambda x, wide=name in self.kept: self._words(ck.pack(x), wide)))
        for rec in records:
            if isinstance(rec, ck.Alias):
                alias[rec.dst] = buf(rec.src)
                continue
            bindings = []
            for b in rec.bindings:
                if b.role == "const" or (b.role == "in" and b.name in graph.constants):
                    key = b.name if b.role == "const" else f"const:{b.name}"
                    if key not in prog.buffers:
                        packed = b.data if b.role == "const" else ck.pack(np.asarray(graph.constants[b.name]))
                        data = self._words(np.asarray(packed, np.float32), getattr(b, "fp32", False))
                        prog.add_buffer(BufferSpec(key, data.size, data.dtype.type, "const", data))
                    bindings.append(key)
                elif b.role == "in" and getattr(b, "transform", None) is not None:
                    key = f"xform{len(edges)}:{b.name}"

                    def to_words(x: np.ndarray, t=b.transform, fp32=b.fp32) -> np.ndarray:
                        return self._words(np.asarray(t(np.asarray(x, np.float32)), np.float32), fp32)

                    probe = to_words(np.zeros(self.shapes[b.name], np.float32))
                    prog.add_buffer(BufferSpec(key, probe.size, probe.dtype.type, "input"))
                    edges.append(Edge(b.name, key, to_words=to_words))
                    bindings.append(key)
                elif b.role == "in":
                    if buf(b.name) not in prog.buffers:
                        raise ValueError(f"vulkan: {rec.node} reads {b.name!r}, produced by no earlier node")
                    bindings.append(buf(b.name))
                else:
                    shape = tuple(int(d) for d in scratch.get(b.name) or graph.shape(b.name) or ())
                    prog.add_buffer(self._spec(b.name, shape, "output" if b.name in outs else "temp"))
                    bindings.append(b.name)
            push = push_words(rec)
            prog.steps.append(Step(rec.node, spv_for(rec), bindings, push, rec.groups, rec.local_size))
        for name in self.outputs:
            b = buf(name)
            if b not in prog.buffers:
                raise ValueError(f"vulkan: segment output {name!r} is produced by no node of the segment")
            if prog.buffers[b].kind == "temp":
                prog.buffers[b].kind = "output"
        self.words_saved = reuse_temps(prog)
        prog.inputs = edges
        for name in self.outputs:
            shape = self.shapes[name]
            out_dtype = ck.tensor_dtype(graph, name)
            fp16 = self.storage_of(name) == "fp16"  # a planned edge: fp32

            def from_words(w: np.ndarray, shape: tuple[int, ...] = shape, dtype: np.dtype = out_dtype,
                           fp16: bool = fp16) -> np.ndarray:
                return ck.unpack(w.view(np.float16) if fp16 else w, shape, dtype)

            prog.outputs.append(Edge(name, buf(name), from_words=from_words))
        return prog

    # ---- running ---------------------------------------------------------------------------
    def run(self, feeds: dict[str, np.ndarray], stats: RunStats) -> dict[str, np.ndarray]:
        words_in = []
        for edge in self.program.inputs:
            x = np.asarray(feeds[edge.tensor])
            if x.shape != self.shapes[edge.tensor]:
                raise ValueError(f"vulkan: input {edge.tensor!r} has shape {x.shape}, compiled for "
                                 f"{self.shapes[edge.tensor]}")
            assert edge.to_words is not None
            w = edge.to_words(x)
            words_in.append(w)
            stats.upload(w.nbytes)
        self.compiled.dev.staged(sum(w.nbytes for w in words_in))
        words_out = self.compiled.execute(words_in, stats)
        stats.dispatches += self.dispatch_count
        if stats.profile:
            stats.timing = "host"
        out = {}
        for edge, w in zip(self.program.outputs, words_out):
            assert edge.from_words is not None
            stats.download(w.nbytes)
            out[edge.tensor] = self.compiled.dev.readback(edge.from_words(w))
        return out

    def run_resident(self, feeds: dict[str, Any], stats: RunStats, device_outputs: dict[str, Any]) -> dict[str, Any]:
        from .resident import run_resident

        return run_resident(self, feeds, stats, device_outputs)

    def close(self) -> None:
        for seq, _ in self.__dict__.pop("_resident_sequences", {}).values():
            try:
                seq.destroy()
            except Exception:  # noqa: BLE001 - already destroyed
                pass
        self.compiled.close()


class VulkanPath(Path):
    key = KEY

    def __init__(self, precision: str = "fp32", disabled_kernels: frozenset[str] = frozenset()):
        super().__init__(precision, disabled_kernels)
        self.record_once = os.environ.get(RECORD_ENV, "1") != "0"
        self._dev: VkDevice | None = None
        self.kernels = KernelCache(ck.REGISTRY, precision, disabled_kernels, accept=self._shipped)

    @property
    def dev(self) -> VkDevice:
        if self._dev is None:
            self._dev = VkDevice()
        return self._dev

    def _shipped(self, node: Node, generated: Generated, graph: Graph) -> str | Generated:
        """The node's records in the storage form this device reads (tuning unit ``loads``), or
        why their SPIR-V is not shipped."""
        choice = self._loads(node.name)
        records = [widened(r, choice.variant.defines) for r in generated.payload] \
            if choice.variant.defines else generated.payload
        return _check_shipped(records, graph, self.precision) or generated._replace(payload=records)

    def _loads(self, node: str = "") -> tuning.Choice:
        """This device's storage form (tuning unit ``loads``, one choice per driver)."""
        with tuning.active(self.kernels.tuning):
            return tuning.choose("loads", tuning.DEVICE_WIDE, node)

    def decline(self, node: Node, graph: Graph) -> str | None:
        return self.kernels.decline(node, graph)

    def compile(self, nodes: list[Node], graph: Graph, inputs: list[str], outputs: list[str]) -> Segment:
        records: list[ck.Record] = [r for recs in self.kernels.payloads(nodes, graph, KEY) for r in recs]
        seg = VulkanSegment(self.dev, nodes, graph, inputs, outputs, records, self.precision, self.record_once)
        wide = sum(1 for r in records if isinstance(r, ck.Kernel) and dict(r.defines).get("WIDE"))
        if wide:
            loads = self._loads()
            seg.notes.append(f"variant: loads {loads.variant.name} x{wide} ({loads.why})")
        return seg

    def close(self) -> None:
        self.kernels.clear()


def create(precision: str = "fp32", disabled_kernels: frozenset[str] = frozenset()) -> VulkanPath:
    return VulkanPath(precision, disabled_kernels)


# ---- single-node graphs (canary, tests, benchmarks) ---------------------------------------------
def single_node_graph(op_type: str, inputs: list[np.ndarray | None], attrs: dict[str, Any] | None = None,
                      const_inputs: tuple[int, ...] = (1, 2), opset: int = 17) -> tuple[Graph, list[np.ndarray]]:
    """A one-node graph whose inputs at ``const_inputs`` are constants and the rest runtime inputs,
    plus the reference outputs from ``fallback.run_node``."""
    from gpubackend import fallback

    attrs = dict(attrs or {})
    ref = fallback.run_node(op_type, inputs, attrs, opset)
    names = [f"in{i}" if a is not None else "" for i, a in enumerate(inputs)]
    outs = [f"out{i}" for i in range(len(ref))]
    consts = {n: np.asarray(a) for i, (n, a) in enumerate(zip(names, inputs)) if n and i in const_inputs}
    runtime = [n for i, n in enumerate(names) if n and i not in const_inputs]
    shapes = {n: tuple(a.shape) for n, a in zip(names, inputs) if n}
    shapes.update({o: tuple(r.shape) for o, r in zip(outs, ref)})
    dtypes = {n: np.asarray(a).dtype for n, a in zip(names, inputs) if n}
    dtypes.update({o: r.dtype for o, r in zip(outs, ref)})
    node = Node(f"{op_type.lower()}_0", op_type, names, outs, attrs)
    graph = Graph([node], runtime, outs, consts, shapes, dtypes, opset,
                  {n: shapes[n] for n in runtime})
    return graph, ref


def run_graph(path: VulkanPath, graph: Graph, feeds: dict[str, np.ndarray],
              stats: RunStats | None = None) -> list[np.ndarray]:
    """Compile ``graph`` as one segment on ``path`` and run it once."""
    for node in graph.nodes:
        why = path.decline(node, graph)
        if why is not None:
            raise ValueError(f"vulkan declines {node.name} ({node.op_type}): {why}")
    seg = path.compile(graph.nodes, graph, list(graph.inputs), list(graph.outputs))
    try:
        res = seg.run(feeds, stats or RunStats())
    finally:
        seg.close()
    return [res[o] for o in graph.outputs]


def canary(precision: str = "fp32") -> float:
    """Conv, depthwise conv, 1x1 conv and Gemm on small random inputs against ``fallback``;
    returns the max norm-relative error, raises RuntimeError above the precision's tolerance."""
    rng = np.random.default_rng(1234)
    tol = 1e-4 if precision == "fp32" else 1e-2

    def r(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    cases = [
        ("Conv", [r(1, 5, 9, 7), r(6, 5, 3, 3), r(6)],
         {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [2, 1], "_act": ("Relu", {})}),
        ("Conv", [r(2, 8, 6, 5), r(8, 1, 3, 3), r(8)],
         {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "group": 8, "_act": ("Clip", {"min": 0.0, "max": 6.0})}),
        ("Conv", [r(1, 7, 5, 5), r(10, 7, 1, 1), r(10)], {"kernel_shape": [1, 1]}),
        ("Gemm", [r(3, 20), r(13, 20), r(13)], {"transB": 1}),
    ]
    path = create(precision)
    worst = 0.0
    for op, inputs, attrs in cases:
        graph, ref = single_node_graph(op, inputs, attrs)
        got = run_graph(path, graph, {n: inputs[int(n[2:])] for n in graph.inputs})
        for g, w in zip(got, ref):
            if g.shape != w.shape:
                raise RuntimeError(f"vulkan canary {op}: shape {g.shape}, expected {w.shape}")
            err = float(np.linalg.norm((g - w).ravel()) / max(np.linalg.norm(w.ravel()), 1e-30))
            if not np.isfinite(err) or err > tol:
                raise RuntimeError(f"vulkan canary {op} ({precision}): relative error {err:.3g} > {tol}")
            worst = max(worst, err)
    path.close()
    return worst


def canary_int8(precision: str = "fp32") -> float:
    """The int8 kernels (packed int8 weights, Quantize/DequantizeLinear) against ``fallback``."""
    from .. import compute_quant

    path = create(precision)

    def run(nodes: list[Node], graph: Graph, feeds: dict[str, np.ndarray], prec: str) -> dict[str, np.ndarray]:
        return dict(zip(graph.outputs, run_graph(path, graph, feeds)))

    try:
        return compute_quant.canary(run, precision)
    finally:
        path.close()


__all__ = ["VulkanPath", "VulkanSegment", "canary", "canary_int8", "create", "kernel_name", "run_graph",
           "single_node_graph"]
