"""The CPU path. A CPU segment runs on one of two engines:

* ``onnxruntime`` (when installed, the ``gpubackend[cpu]`` extra): the segment's nodes, constants and
  boundary tensors become one standard ONNX model that onnxruntime optimises and runs with its own
  threads; one onnxruntime session per input shape signature.
* ``numpy``: every node through the NumPy kernels of ``fallback``, which stay the reference every
  GPU path is tested against.

``cpu_engine="auto"`` takes onnxruntime when it can be imported, else numpy.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import threading
import time
from typing import Any, NamedTuple

import numpy as np
import onnx
from onnx import helper, numpy_helper

from gpubackend import fallback

from .. import ops
from ..errors import NodeError, OptionError, PathUnavailableError
from ..graph import Graph, Node
from .base import Path, RunStats, Segment
from .segment_services import silu_pairs

log = logging.getLogger("gpubackend")

CPU_ENGINES = ("auto", "onnxruntime", "numpy")


def onnxruntime_version() -> str | None:
    """onnxruntime's version when it is installed, else None (imports it only if present)."""
    if importlib.util.find_spec("onnxruntime") is None:
        return None
    try:
        import onnxruntime
    except Exception:  # a broken install counts as absent
        return None
    return str(onnxruntime.__version__)


def cpu_engine_info() -> dict[str, str | None]:
    """What ``gpubackend probe`` reports: the engine "auto" takes and onnxruntime's version."""
    return {"auto": resolve_engine("auto"), "onnxruntime": onnxruntime_version(), "numpy": np.__version__}


def resolve_engine(engine: str) -> str:
    """The engine ``engine`` ("auto", "onnxruntime" or "numpy") means on this machine."""
    if engine not in CPU_ENGINES:
        raise OptionError(f"cpu_engine must be one of {', '.join(CPU_ENGINES)}, not {engine!r}")
    if engine == "numpy":
        return "numpy"
    if onnxruntime_version() is not None:
        return "onnxruntime"
    if engine == "onnxruntime":
        raise PathUnavailableError("cpu_engine='onnxruntime' needs onnxruntime: pip install 'gpubackend[cpu]'")
    return "numpy"


class _Step(NamedTuple):
    """One node of a compiled NumPy plan (with the nodes fused into it, see ``silu_pairs``)."""

    node: Node
    kernel: Any
    args: tuple[tuple[str | None, Any], ...]  # per input: (tensor name, None) or (None, constant or None)
    outputs: tuple[str, ...]  # the node's outputs, or the fused nodes' last output in place of its first
    release: tuple[str, ...]  # intermediates read for the last time here


# Binary ops the plan may run in place, writing into an operand whose buffer nobody else holds.
_IN_PLACE_UFUNCS = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide}
# Ops whose outputs are always new arrays (never views of an input or a constant).
_FRESH_OUTPUT_OPS = {"Conv", "ConvTranspose", *_IN_PLACE_UFUNCS}


def _in_place(ufunc: Any, target: int, kernel: Any) -> Any:
    """A kernel for a float binary op that writes into operand ``target`` when the result has its
    shape and dtype (e.g. a residual Add into the Conv output it follows: no new buffer, one pass
    fewer); any other case goes to ``kernel``. Only for an operand produced by a fresh-output op
    in the same segment and read by nothing else (see ``NumpySegment``)."""

    def run(inputs: list, attrs: dict, opset: int) -> list:
        a, b = inputs
        t, other = (a, b) if target == 0 else (b, a)
        if (type(a) is np.ndarray and type(b) is np.ndarray and a.dtype == b.dtype and a.dtype.kind == "f"
                and t.flags.writeable and t.flags.c_contiguous and other.ndim <= t.ndim
                and all(o in (1, s) for o, s in zip(reversed(other.shape), reversed(t.shape)))):
            return [fallback.binary(ufunc, a, b, out=t)]
        return kernel(inputs, attrs, opset)

    return run


class NumpySegment(Segment):
    """Runs its nodes through the ``fallback`` kernels as a plan compiled once: kernels looked up,
    constants bound and each intermediate's last use known in advance, and one floating-point
    error state, BLAS thread and kernel thread scope around the whole run instead of one per node.
    Large kernel buffers come from a ``fallback.BufferPool`` kept from run to run (no page faults
    for fresh memory on every run; a buffer is reused only once nothing refers to it). A float
    Add/Sub/Mul/Div whose operand is a fresh intermediate read by nothing else runs in place. A Sigmoid
    and the Mul of its input by its output (SiLU) run as one kernel, fused into the epilogue of the
    Conv that produces their input when nothing else reads the Conv's output."""

    engine = "numpy"

    def __init__(self, nodes: list[Node], graph: Graph, inputs: list[str], outputs: list[str],
                 blas_threads: int | None = None, threads: int = 0):
        super().__init__("cpu", nodes, inputs, outputs)
        # None: one BLAS thread, and BLAS's own threads in the GEMMs of the runs timed faster with
        # them (see run); a count the user set is kept as it is
        self._blas_threads = blas_threads or 1
        self._blas_auto = blas_threads is None
        self._threads = threads
        self._opset = graph.opset
        self._pools: list[fallback.BufferPool] = []  # idle ones; a run takes one (runs may overlap)
        self._pools_lock = threading.Lock()
        self._run_ways: dict[tuple, fallback.FastestWay] = {}  # per input shapes: without, with BLAS threads
        keep = set(outputs) | set(inputs) | set(graph.outputs)
        producers = {o: n.op_type for n in nodes for o in n.outputs if o}
        readers = {name: len(users) for name, users in graph.consumers().items()}
        index_of = {o: idx for idx, n in enumerate(nodes) for o in n.outputs if o}
        # (node, kernel, outputs) per step, in node order; fused nodes have none
        steps: dict[int, tuple[Node, Any, tuple[str, ...]]] = {}
        for idx, node in enumerate(nodes):
            steps.setdefault(idx, (node, None, tuple(node.outputs)))
        for sig, mul in silu_pairs(nodes, self._opset, readers, keep).items():
            y, z = nodes[sig].inputs[0], nodes[mul].outputs[0]
            del steps[mul]
            conv = index_of.get(y)
            fused = None
            if conv is not None and readers.get(y) == 2 and y not in keep and steps[conv][1] is None \
                    and len(nodes[conv].outputs) == 1:
                fused = fallback.node_kernel_then_silu(nodes[conv].op_type, nodes[conv].domain,
                                                       self._constant_args(nodes[conv], graph), nodes[conv].attrs)
            if fused is not None:
                del steps[sig]
                steps[conv] = (nodes[conv], fused, (z,))
            else:
                steps[sig] = (nodes[sig], fallback.silu_kernel, (z,))
        order = sorted(steps)
        last_use: dict[str, int] = {}
        for idx in order:
            for name in steps[idx][0].inputs:
                last_use[name] = idx
        self._plan = [
            _Step(node, kernel or self._kernel(node, graph, producers, readers, keep),
                  tuple((None, None) if not n else (None, graph.constants[n]) if n in graph.constants else (n, None)
                        for n in node.inputs),
                  outs,
                  tuple(dict.fromkeys(n for n in node.inputs if n and last_use.get(n) == idx and n not in keep
                                      and n not in graph.constants)))
            for idx in order for node, kernel, outs in [steps[idx]]]

    @staticmethod
    def _constant_args(node: Node, graph: Graph) -> list:
        """The node's inputs as ``fallback.node_kernel`` takes them: constants, None or ``RUN_TIME``."""
        return [None if not n else graph.constants[n] if n in graph.constants else fallback.RUN_TIME
                for n in node.inputs]

    @staticmethod
    def _kernel(node: Node, graph: Graph, producers: dict[str, str], readers: dict[str, int], keep: set[str]) -> Any:
        """The node's kernel (specialised for its constant inputs, see ``fallback.node_kernel``), or
        its in-place form (see ``_in_place``) when an operand qualifies: produced in this segment by a
        fresh-output op (nodes are in topological order, so before this one), not a segment or graph
        output, and read by no other node of the graph."""
        opset = graph.opset
        kernel = fallback.node_kernel(node.op_type, node.domain, NumpySegment._constant_args(node, graph), node.attrs)
        ufunc = _IN_PLACE_UFUNCS.get(node.op_type)
        if (ufunc is None or node.domain not in ("", "ai.onnx") or opset < 7 or len(node.inputs) != 2
                or node.inputs[0] == node.inputs[1]):
            return kernel
        for target, name in enumerate(node.inputs):
            if producers.get(name) in _FRESH_OUTPUT_OPS and name not in keep and readers.get(name) == 1:
                return _in_place(ufunc, target, kernel)
        return kernel

    @property
    def notes(self) -> list[str]:
        """For explain(): per input shapes, how runs with and without BLAS's threads timed."""
        out = []
        for key, ways in list(self._run_ways.items()):
            if ways.current is None:
                continue
            without, with_ = (f"{t * 1e3:.1f} ms" for t in ways.seconds)  # type: ignore[operator]
            shapes = ", ".join(f"{name} {'x'.join(map(str, shape))}" for name, shape, _ in key if shape is not None)
            out.append(f"cpu (numpy engine, {shapes}): runs timed with BLAS's own threads in the GEMMs {with_}, "
                       f"without {without}: running {'with' if ways.current == 1 else 'without'} them")
        return out

    def run(self, feeds: dict[str, np.ndarray], stats: RunStats) -> dict[str, np.ndarray]:
        with self._pools_lock:
            pool = self._pools.pop() if self._pools else fallback.BufferPool()
        # runs with and without BLAS's own threads in the GEMMs, timed per input shapes (see
        # fallback.allow_blas_threads)
        way = None
        if self._blas_auto and self._threads != 1:
            key = tuple((name, getattr(v, "shape", None), getattr(v, "dtype", None)) for name, v in feeds.items())
            ways = self._run_ways.get(key)
            if ways is None:
                ways = self._run_ways.setdefault(key, fallback.FastestWay(2))
            way = ways.pick()
        start = time.perf_counter()
        with fallback.allow_blas_threads(way == 1):
            result = self._run(feeds, stats, pool)
        if way is not None:
            ways.record(way, time.perf_counter() - start)
        with self._pools_lock:  # not after a failure: a traceback may still hold its buffers
            self._pools.append(pool)
        return result

    def _run(self, feeds: dict[str, np.ndarray], stats: RunStats, pool: fallback.BufferPool) -> dict[str, np.ndarray]:
        env = dict(feeds)
        opset = self._opset
        profile = stats.profile
        with (fallback.blas_threads(self._blas_threads), fallback.kernel_threads(self._threads),
              pool.active(), np.errstate(all="ignore")):
            for node, kernel, args, outs, release in self._plan:
                t0 = time.perf_counter() if profile else 0.0
                try:
                    results = kernel([env[n] if n else c for n, c in args], node.attrs, opset)
                except fallback.KERNEL_ERRORS as exc:
                    raise NodeError(f"node {node.name} ({node.op_type}) failed on the CPU: {node.op_type}: {exc}",
                                    node.name, node.op_type) from exc
                if profile:
                    stats.node_seconds[node.name] = time.perf_counter() - t0
                for name, value in zip(outs, results):
                    if name:
                        env[name] = value if type(value) is np.ndarray else np.asarray(value)
                for name in release:
                    del env[name]
        return {name: env[name] for name in self.outputs}


# ---- the onnxruntime engine ---------------------------------------------------------------

def _attribute(node: Node, name: str, value: Any, opset: int) -> onnx.AttributeProto:
    """A decoded attribute back as an AttributeProto; the type comes from the op's schema so that
    empty lists and ints-vs-floats round-trip exactly."""
    attr_type = None
    try:
        schema = onnx.defs.get_schema(node.op_type, opset, node.domain)
        if name in schema.attributes:
            attr_type = schema.attributes[name].type
    except onnx.defs.SchemaError:
        pass
    if isinstance(value, np.ndarray):
        value = numpy_helper.from_array(value)
    elif isinstance(value, list) and value and isinstance(value[0], np.ndarray):
        value = [numpy_helper.from_array(v) for v in value]
    return helper.make_attribute(name, value, attr_type=attr_type)


def _clip_node(x: str, y: str, name: str, lo: float, hi: float, graph: Graph,
               extra_constants: dict[str, np.ndarray]) -> onnx.NodeProto:
    if graph.opset < 11:
        return helper.make_node("Clip", [x], [y], name=name, min=lo, max=hi)
    bounds = []
    for bound, value in (("min", lo), ("max", hi)):
        bounds.append(f"{name}/{bound}")
        extra_constants[bounds[-1]] = np.array(value, dtype=np.float32)
    return helper.make_node("Clip", [x, *bounds], [y], name=name)


def _hardswish_below_14(x: str, y: str, name: str, graph: Graph,
                        extra_constants: dict[str, np.ndarray]) -> list[onnx.NodeProto]:
    """HardSwish for an opset before 14 (which has no HardSwish op) as the form exporters write and
    ``rewrites.fuse_decomposed_hardswish`` found: x * Clip(x + 3, 0, 6) / 6, the same float
    operations in the same order as the model's own nodes."""
    three, six = f"{name}/three", f"{name}/six"
    extra_constants[three] = np.array(3, dtype=np.float32)
    extra_constants[six] = np.array(6, dtype=np.float32)
    return [helper.make_node("Add", [x, three], [f"{name}/add"], name=f"{name}/add"),
            _clip_node(f"{name}/add", f"{name}/clip", f"{name}/clip", 0.0, 6.0, graph, extra_constants),
            helper.make_node("Mul", [x, f"{name}/clip"], [f"{name}/mul"], name=f"{name}/mul"),
            helper.make_node("Div", [f"{name}/mul", six], [y], name=f"{name}/div")]


def _standard_nodes(node: Node, graph: Graph, extra_constants: dict[str, np.ndarray]) -> list[onnx.NodeProto]:
    """``node`` as standard ONNX of the model's opset: an activation that gpubackend.model fused into
    it (``_act``) becomes its own node again; internal ``_`` attributes are dropped."""
    if node.op_type == "HardSwish" and node.domain in ("", "ai.onnx") and graph.opset < 14:
        return _hardswish_below_14(node.inputs[0], node.outputs[0], node.name, graph, extra_constants)
    attrs = [_attribute(node, k, v, graph.opset) for k, v in node.attrs.items() if not k.startswith("_")]
    act = node.attrs.get("_act")
    outputs = list(node.outputs)
    if act is not None:
        outputs[0] = f"{node.outputs[0]}/before_{act[0]}"
    main = helper.make_node(node.op_type, node.inputs, outputs, name=node.name, domain=node.domain or None)
    main.attribute.extend(attrs)
    if act is None:
        return [main]
    op, params = act
    name = f"{node.name}/{op}"
    if op == "Clip":
        return [main, _clip_node(outputs[0], node.outputs[0], name, float(params["min"]), float(params["max"]),
                                 graph, extra_constants)]
    if op == "HardSwish" and graph.opset < 14:
        return [main, *_hardswish_below_14(outputs[0], node.outputs[0], name, graph, extra_constants)]
    return [main, helper.make_node(op, [outputs[0]], [node.outputs[0]], name=name, **dict(params))]


def subgraph_model(nodes: list[Node], graph: Graph, feeds: dict[str, np.ndarray],
                   outputs: list[str]) -> onnx.ModelProto:
    """One standard ONNX model computing ``outputs`` from ``feeds`` (name -> example array, which gives
    the input types and shapes) with ``nodes`` and the constants they read."""
    extra: dict[str, np.ndarray] = {}
    protos = [p for node in nodes for p in _standard_nodes(node, graph, extra)]
    used = {i for n in nodes for i in n.inputs if i}
    initializers = [numpy_helper.from_array(np.asarray(graph.constants[n]), n)
                    for n in sorted(used) if n in graph.constants and n not in feeds]
    initializers += [numpy_helper.from_array(v, n) for n, v in extra.items()]
    ins = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape))
           for n, a in feeds.items()]
    outs = [helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(np.dtype(graph.dtypes[name])), None)
            if name in graph.dtypes else onnx.ValueInfoProto(name=name) for name in outputs]
    g = helper.make_graph(protos, "gpubackend_cpu_segment", ins, outs, initializer=initializers)
    domains = sorted({n.domain for n in nodes if n.domain not in ("", "ai.onnx")})
    opsets = [helper.make_opsetid("", graph.opset)] + [helper.make_opsetid(d, 1) for d in domains]
    model = helper.make_model(g, opset_imports=opsets, producer_name="gpubackend")
    model.ir_version = min(model.ir_version, _max_ir_version())
    if any(name not in graph.dtypes for name in outputs):
        # onnxruntime needs every graph output typed: ONNX shape inference on the subgraph supplies
        # the types the whole model's inference left open
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
        types = {vi.name: vi.type for vi in list(inferred.graph.value_info) + list(inferred.graph.output)
                 if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type}
        for out in model.graph.output:
            if not out.type.HasField("tensor_type") and out.name in types:
                out.type.tensor_type.elem_type = types[out.name].tensor_type.elem_type
    return model


def _max_ir_version() -> int:
    import onnxruntime

    # onnxruntime names the newest IR version it reads in its ONNX_IR_VERSION build constant on some
    # builds only; IR 10 (onnx 1.16) is read by every onnxruntime this package supports (>= 1.17).
    return int(getattr(onnxruntime.capi._pybind_state, "ONNX_IR_VERSION", 10) or 10)


class OnnxruntimeSegment(Segment):
    """Runs its nodes as one onnxruntime session per input shape signature. If onnxruntime refuses
    the subgraph, that signature runs on the NumPy kernels instead (logged once, kept in ``notes``)."""

    engine = "onnxruntime"

    def __init__(self, nodes: list[Node], graph: Graph, inputs: list[str], outputs: list[str],
                 threads: int = 0, blas_threads: int | None = None, config: dict[str, str] | None = None):
        super().__init__("cpu", nodes, inputs, outputs)
        self._threads = threads
        self._config = dict(config or {})
        self._blas_threads = blas_threads
        self._graph = graph
        self._sessions: dict[tuple, Any] = {}
        self._numpy: NumpySegment | None = None
        self._lock = threading.Lock()
        self.notes: list[str] = []

    def _session(self, feeds: dict[str, np.ndarray]) -> Any:
        key = tuple((feeds[n].shape, feeds[n].dtype) for n in self.inputs)
        sess = self._sessions.get(key)
        if sess is None:
            with self._lock:
                sess = self._sessions.get(key)
                if sess is None:
                    sess = self._sessions[key] = self._build(feeds)
        return sess

    def _ort_session(self, feeds: dict[str, np.ndarray], profile_prefix: str = "") -> Any:
        import onnxruntime

        model = subgraph_model(self.nodes, self._graph, {n: feeds[n] for n in self.inputs}, self.outputs)
        opts = onnxruntime.SessionOptions()
        opts.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.log_severity_level = 3
        opts.intra_op_num_threads = self._threads
        for key, value in self._config.items():
            opts.add_session_config_entry(key, value)
        if profile_prefix:
            opts.enable_profiling = True
            opts.profile_file_prefix = profile_prefix
        # onnxruntime would fold the integer form's requantisation Mul into the Conv's weights
        # (ops.quant.requantize_in_integers), losing the exact integer sums; and it would quantize
        # float weights after a DequantizeLinear again (the load did that where onnxruntime does it
        # on the model as written, ops.quant.quantize_float_weights; the weights here are the
        # folded DequantizeLinear of the model's own int8 weights)
        disabled = ["WeightBiasQuantization"]
        if any(ops.quant.is_requantize(n) for n in self.nodes):
            disabled.append("ConvMulFusion")
        return onnxruntime.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"],
                                            disabled_optimizers=disabled)

    def _build(self, feeds: dict[str, np.ndarray]) -> Any:
        try:
            return self._ort_session(feeds)
        except Exception as exc:  # onnxruntime refuses some graphs the NumPy kernels run
            first = self.nodes[0].name
            msg = (f"onnxruntime cannot run the CPU segment starting at {first} ({len(self.nodes)} nodes): "
                   f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}; it runs on numpy")
            log.warning("%s", msg)
            self.notes.append(msg)
            return False

    def run(self, feeds: dict[str, np.ndarray], stats: RunStats) -> dict[str, np.ndarray]:
        sess = self._session(feeds)
        if sess is False:
            if self._numpy is None:
                self._numpy = NumpySegment(self.nodes, self._graph, self.inputs, self.outputs, self._blas_threads,
                                           self._threads)
            return self._numpy.run(feeds, stats)
        try:
            results = sess.run(self.outputs, {n: feeds[n] for n in self.inputs})
        except Exception as exc:
            raise NodeError(f"onnxruntime failed on the CPU segment starting at {self.nodes[0].name}: {exc}",
                            self.nodes[0].name, self.nodes[0].op_type) from exc
        if stats.profile:
            stats.node_seconds.update(self._profile(feeds))
        return dict(zip(self.outputs, results))

    def _profile(self, feeds: dict[str, np.ndarray]) -> dict[str, float]:
        """Per-node kernel seconds from onnxruntime's profiler: a profiling session runs the subgraph
        twice and the second run counts. onnxruntime's own nodes (fused, or NCHWc layout nodes named
        after a tensor) are charged to the node whose name, or output name, prefixes theirs; others
        (e.g. "ReorderOutput") keep their own name."""
        import json
        import tempfile

        with tempfile.TemporaryDirectory(prefix="gpubackend-ort-profile-") as tmp:
            sess = self._ort_session(feeds, os.path.join(tmp, "ort"))
            ins = {n: feeds[n] for n in self.inputs}
            sess.run(self.outputs, ins)
            sess.run(self.outputs, ins)
            with open(sess.end_profiling()) as fh:
                events = json.load(fh)
        last: dict[str, float] = {}
        for ev in events:  # events come in run order: later runs overwrite earlier ones
            name = str(ev.get("name", ""))
            if ev.get("cat") == "Node" and name.endswith("_kernel_time"):
                last[name[: -len("_kernel_time")]] = ev.get("dur", 0) / 1e6
        owners = {n.name: n.name for n in self.nodes}
        owners.update({o: n.name for n in self.nodes for o in n.outputs if o and o not in owners})
        prefixes = sorted(owners, key=len, reverse=True)
        out: dict[str, float] = {}
        for ort_name, seconds in last.items():
            prefix = next((p for p in prefixes if ort_name == p or ort_name.startswith((p + "/", p + "_"))), None)
            owner = owners[prefix] if prefix is not None else ort_name
            out[owner] = out.get(owner, 0.0) + seconds
        return out


class CpuPath(Path):
    """``engine``: see :func:`resolve_engine`. ``blas_threads``: NumPy BLAS threads during a numpy
    run (None: 1, and BLAS's own threads in the GEMMs of runs timed faster with them, see
    ``NumpySegment.run``); ``ort_threads``: intra-op threads of either engine (0:
    the default, onnxruntime's one per physical core, or for numpy one kernel thread per usable core,
    see ``fallback.kernel_threads``); ``ort_config``: session config entries for the onnxruntime
    engine's sessions (``SessionOptions.add_session_config_entry``)."""

    key = "cpu"

    def __init__(self, precision: str = "fp32", disabled_kernels: frozenset[str] = frozenset(),
                 engine: str = "auto", blas_threads: int | None = None, ort_threads: int = 0,
                 ort_config: dict[str, str] | None = None):
        super().__init__(precision, disabled_kernels)
        self.engine = resolve_engine(engine)
        self.blas_threads = blas_threads
        self.ort_threads = ort_threads
        self.ort_config = dict(ort_config or {})

    def decline(self, node: Node, graph: Graph) -> str | None:
        if node.op_type not in fallback.supported_ops(node.domain):
            where = f" in domain {node.domain!r}" if node.domain not in ("", "ai.onnx") else ""
            return f"no CPU kernel for {node.op_type}{where}"
        return None

    def compile(self, nodes: list[Node], graph: Graph, inputs: list[str], outputs: list[str]) -> Segment:
        if self.engine == "onnxruntime":
            return OnnxruntimeSegment(nodes, graph, inputs, outputs, self.ort_threads, self.blas_threads,
                                      self.ort_config)
        return NumpySegment(nodes, graph, inputs, outputs, self.blas_threads, self.ort_threads)


def create(precision: str = "fp32", disabled_kernels: frozenset[str] = frozenset(), engine: str = "auto",
           blas_threads: int | None = None, ort_threads: int = 0, ort_config: dict[str, str] | None = None) -> CpuPath:
    return CpuPath(precision, disabled_kernels, engine, blas_threads, ort_threads, ort_config)
