"""The inference session: load and optimise a model, choose a path (probe-verified), place
every node, compile segments, run."""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import numpy as np
import onnx

from . import isolation, kernel_check, limits, mixed_precision, ops, tuning, worker
from .device_tensor import DeviceTensor, GLTextureTensor
from .errors import DeviceError, GpuBackendError, InputError, ModelError, OptionError, PathUnavailableError
from .graph import Graph, Node
from .model import ModelLike, load_model, to_graph
from .options import SessionOptions, override_free_dimensions
from .paths import GPU_PATH_KEYS, PATH_KEYS, create_path, path_module
from .paths.base import Path, RunStats, Segment
from .paths.cpu import resolve_engine
from .paths.kernel_contract import KernelCache
from .planner import Plan, place, segment_io

T = TypeVar("T")

log = logging.getLogger("gpubackend")

# Compiled variants kept per session (one per input-shape / shape-value signature); the oldest goes.
_MAX_VARIANTS = 16
# An input of at most this many elements that defines shapes is specialised on its value.
SHAPE_VALUE_LIMIT = 64

# (op type, operand index) whose value defines an output's shape, axes or size.
_SHAPE_OPERANDS = {
    "Reshape": (1,), "Expand": (1,), "Tile": (1,), "ConstantOfShape": (0,), "Range": (0, 1, 2),
    "Slice": (1, 2, 3, 4), "Split": (1,), "Squeeze": (1,), "Unsqueeze": (1,), "Pad": (1, 3),
    "Resize": (1, 2, 3), "Upsample": (1,), "TopK": (1,), "OneHot": (1,), "CumSum": (1,), "Trilu": (1,),
    **{op: (1,) for op in ("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
                           "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare")},
}
# Ops through which a shape value is computed from an input (Concat of dims, Cast, arithmetic).
_SHAPE_PLUMBING = {"Cast", "Concat", "Unsqueeze", "Squeeze", "Gather", "Slice", "Reshape", "Identity", "Add",
                   "Sub", "Mul", "Div", "Neg", "Abs", "Max", "Min", "Where", "Equal", "Not", "Flatten"}


def shape_value_inputs(graph: Graph) -> list[str]:
    """Graph inputs whose values (not only shapes) define the shapes or axes of other tensors,
    directly or through shape plumbing: the session specialises on their values."""
    producers = graph.producers()
    found: set[str] = set()
    todo = [n.inputs[i] for n in graph.nodes for i in _SHAPE_OPERANDS.get(n.op_type, ())
            if i < len(n.inputs) and n.inputs[i]]
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen or name in graph.constants:
            continue
        seen.add(name)
        if name in graph.inputs:
            found.add(name)
        elif (node := producers.get(name)) is not None and node.op_type in _SHAPE_PLUMBING:
            todo += [i for i in node.inputs if i]
    return [n for n in graph.inputs if n in found]


# A shape such as (1, 40, 120) or [120, 360] inside a decline reason; explain() groups without it.
_SHAPE_IN_REASON = re.compile(r"[(\[]\d+(?:, *\d+)*,?[)\]]")


def _driver_errors() -> tuple[type[BaseException], ...]:
    try:
        from capability_probe.errors import DriverError
    except ImportError:  # pragma: no cover - the probe package ships with gpubackend
        return ()
    return (DriverError,)


@dataclass
class _Variant:
    """A graph planned and compiled for one set of input shapes."""

    graph: Graph
    plan: Plan
    segments: list[Segment]
    last_use: dict[str, int]  # tensor -> index of the last segment reading it


def _is_subgraph(value: Any) -> bool:
    if isinstance(value, list):
        return any(isinstance(x, onnx.GraphProto) for x in value)
    return isinstance(value, onnx.GraphProto)


def _needed_for(graph: Graph, outputs: list[str]) -> Graph:
    """``graph`` cut down to the nodes that ``outputs`` depend on. Graphs with subgraph
    attributes (If, Loop, Scan) are kept whole: their bodies may read any outer tensor."""
    if any(_is_subgraph(v) for n in graph.nodes for v in n.attrs.values()):
        return graph
    producers = graph.producers()
    needed: set[str] = set()
    stack = list(outputs)
    keep: set[int] = set()
    while stack:
        name = stack.pop()
        if name in needed:
            continue
        needed.add(name)
        node = producers.get(name)
        if node is not None and id(node) not in keep:
            keep.add(id(node))
            stack += [i for i in node.inputs if i]
    nodes = [n for n in graph.nodes if id(n) in keep]
    return replace(graph, nodes=nodes, outputs=[o for o in graph.outputs if o in outputs],
                   fused={k: v for k, v in graph.fused.items() if any(n.name == k for n in nodes)})


class Session:
    """Runs an ONNX model. ``path``: "auto" (the probe's choice; ``GPUBACKEND_PATH`` overrides it),
    or one of "cpu", "gles2", "gles3", "gles31", "vulkan". ``precision``: "fp32" or "fp16"
    (GPU storage precision; the CPU path always computes in fp32), or "fp16-compute" (fp16 storage,
    fp16 arithmetic where verified; see ``gpubackend.paths.fp16_compute``). ``fallback``: nodes the path
    cannot run (or that fail at run time) go to the CPU path; with False they raise instead.
    ``cpu_engine``: what runs CPU segments, "auto" (onnxruntime when installed, else numpy),
    "onnxruntime" or "numpy" (the ``fallback`` kernels, the reference every path is tested against).
    ``options``: a :class:`SessionOptions` with every other knob; keyword arguments given
    explicitly replace its fields.

    Threads: any thread may run a session, and several may share one (runs are serialised per
    session). GPU work runs on the process's GPU thread (:mod:`gpubackend.worker`) unless
    ``options.thread`` keeps it on the creating thread (see :class:`SessionOptions`).
    :meth:`run_async` returns a future.

    ``input_shapes`` (input name -> shape) pins the symbolic dimensions of inputs, so the session
    is specialised and compiled for them at creation; feeds must then have those shapes.

    Every tensor shape is made static for the shapes of the feeds (one compiled variant per
    signature), and small inputs that define shapes (a Reshape's shape, Slice's starts, Resize's
    sizes, reduction axes, ...) are specialised on their values the same way."""

    def __init__(self, model: ModelLike, path: str | None = None, precision: str | None = None,
                 fallback: bool | None = None, *, cpu_engine: str | None = None,
                 options: SessionOptions | None = None, input_shapes: Mapping[str, Any] | None = None):
        t0 = time.perf_counter()
        if options is not None and not isinstance(options, SessionOptions):
            raise OptionError(f"options must be a gpubackend.SessionOptions, not {type(options).__name__}")
        given = {k: v for k, v in (("path", path), ("precision", precision), ("fallback", fallback),
                                   ("cpu_engine", cpu_engine)) if v is not None}
        if "fallback" in given:
            given["fallback"] = bool(given["fallback"])
        if "path" in given and options is not None and options.providers is not None:
            given["providers"] = None  # an explicit path replaces the options' provider list
        self.options = (options or SessionOptions()).with_keywords(**given).resolved()
        opts = self.options
        self.requested_path = "auto" if opts.providers is None and opts.path == "auto" else (
            opts.path if opts.providers is None else ",".join(opts.providers))
        self.precision = opts.precision
        self.fallback = opts.fallback
        self.cpu_engine = resolve_engine(opts.cpu_engine)  # "onnxruntime" or "numpy"
        self._owner = threading.get_ident()
        self._lock = threading.RLock()
        self._async: ThreadPoolExecutor | None = None
        self._proto = override_free_dimensions(load_model(model), opts.free_dimension_overrides)
        self._notes: list[str] = []
        self._fp32_plan = self._read_precision_plan()
        self._base_graph = self._graph(input_shapes)
        integer_layers = ops.quant.integer_sums(self._base_graph)
        if self.precision != "fp32" and integer_layers:
            self._notes.append(f"precision {self.precision} requested: {len(integer_layers)} quantized layers run "
                               "in integer form, whose sums fp16 storage does not hold exactly (integers past "
                               "2048); the session runs in fp32")
            self.precision = "fp32"
        self._report: Any = None
        self._preference: list[str] = []  # GPU paths after self.path that nodes may also use
        self.path = self._choose_path()
        self.thread_mode = self._thread_mode()
        self._tuning_trial = tuning.trial_choices()  # variants a tuning measurement forces on this session
        self._tune_first_use()
        self._paths: dict[str, Path] = {}
        self._reference: Path | None = None
        self._broken: set[str] = set()
        self._variants: dict[tuple, _Variant] = {}
        self.stats = RunStats()
        g = self._base_graph
        self.input_names = list(g.inputs)
        self.output_names = list(g.outputs)
        self._current: _Variant | None = None
        self._shape_value_inputs = shape_value_inputs(g)
        static = {n: g.input_shapes.get(n) for n in g.inputs}
        if not self._shape_value_inputs and all(s is not None and None not in s for s in static.values()):
            key = (tuple(tuple(s) for s in static.values()), (), ())  # type: ignore[union-attr]
            self._current = self._device(self._variant, key, static)
        self.creation_seconds = time.perf_counter() - t0

    def _read_precision_plan(self) -> frozenset[str]:
        """The names of ``options.precision_plan``, checked against the model (OptionError for a
        name no node outputs); empty without a plan or under fp32."""
        if self.options.precision_plan is None:
            return frozenset()
        names, source = mixed_precision.read_plan(self.options.precision_plan)
        mixed_precision.check_plan(names, self._proto)
        if self.precision == "fp32":
            self._notes.append(f"precision plan ({source}, {len(names)} tensors) ignored: precision is fp32")
            return frozenset()
        self._notes.append(f"precision plan ({source}): {len(names)} activations kept fp32 beside the static rule "
                           "(the lines per segment count those that segment stores)")
        return names

    def _graph(self, shapes: Mapping[str, Any] | None, values: Mapping[str, np.ndarray] | None = None) -> Graph:
        g = to_graph(self._proto, shapes, values)
        g.fp32_plan = self._fp32_plan
        return g

    # ---- threads -----------------------------------------------------------------------
    def _thread_mode(self) -> str:
        """"inline" (CPU only: the caller's thread), "worker" (the GPU thread) or "caller"."""
        gpu = [k for k in self.path_order if k != "cpu"]
        if not gpu:
            return "inline"
        mode = self.options.thread
        if mode != "auto" or all(k == "vulkan" for k in gpu):
            return "worker" if mode == "auto" else mode
        owner = worker.gl_owner_thread()
        if owner is None:
            return "caller" if threading.current_thread() is threading.main_thread() else "worker"
        return "worker" if owner == worker.gpu_thread_ident() else "caller"

    def _reachable(self, key: str) -> bool:
        """False for a GL path when this session works on the GPU thread but the process's GL
        context belongs to another thread (a run-time fallback must not pick it)."""
        if key == "vulkan" or key == "cpu" or self.thread_mode != "worker":
            return True
        owner = worker.gl_owner_thread()
        return owner is None or owner == worker.gpu_thread_ident()

    def _device(self, fn: Callable[..., T], *args: Any) -> T:
        """Call ``fn`` where this session's GPU objects live."""
        if self.thread_mode == "worker":
            return worker.call_on_gpu_thread(fn, *args)
        if self.thread_mode == "caller" and threading.get_ident() != self._owner:
            raise GpuBackendError(
                "this session's GPU work stays on the thread that created it (the process's GL context "
                "belongs to that thread); run it there, or create it with "
                "SessionOptions(thread='worker') before anything else uses GL")
        return fn(*args)

    def run_async(self, feeds: Mapping[str, Any], output_names: list[str] | None = None) -> Future:
        """:meth:`run` in the background; returns a ``concurrent.futures.Future`` of its outputs.
        Runs submitted to one session complete in submission order."""
        with self._lock:
            if self._async is None:
                self._async = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gpubackend-run")
            return self._async.submit(self.run, feeds, output_names)

    @property
    def model_proto(self) -> onnx.ModelProto:
        """The model as loaded, with the free-dimension overrides applied."""
        return self._proto

    # ---- path choice -------------------------------------------------------------------
    def _probe(self) -> Any:
        if self._report is None:
            from capability_probe import probe

            self._report = probe()
        return self._report

    def _measured_choice(self, report: Any) -> tuple[str, str] | None:
        """The fastest verified path recorded for this model on this driver by
        ``gpubackend bench --record``, if any (reads a cache file; never benchmarks)."""
        from .bench.choice import measured_choice, measurements_file

        if not measurements_file().is_file():
            return None
        try:
            return measured_choice(self._proto, report, self.precision)
        except Exception as exc:  # a damaged measurement file must not stop the session
            log.warning("ignoring the recorded path measurements: %s", exc)
            return None

    def _usable(self, key: str) -> tuple[bool, str]:
        if key == "cpu":
            return True, ""
        if key in self.options.disabled_paths:
            return False, "disabled by the session options (disabled_paths / GPUBACKEND_DISABLE)"
        try:
            report = self._probe()
        except Exception as exc:  # a broken probe must not take the session down
            return False, f"the capability probe failed: {exc}"
        verdict = report.paths.get(key)
        if verdict is None:
            return False, "not reported by the probe"
        return bool(report.usable(key)), verdict.reason

    def _choose_path(self) -> str:
        preference = self.options.path_preference()
        if preference is None:
            return self._auto_path()
        if self.options.providers is None and os.environ.get("GPUBACKEND_PATH", "").strip() == preference[0]:
            self._notes.append(f"GPUBACKEND_PATH={preference[0]} forced the path")
        usable = []
        for key in preference:
            if key == "cpu":
                usable.append(key)
                continue

            path_module(key)  # raises PathUnavailableError if this path is not built
            ok, why = self._usable(key)
            if ok:
                self._notes.append(f"{key} requested and verified by the probe")
                usable.append(key)
                continue
            msg = f"the {key} path is not usable on this device: {why}"
            if not self.fallback and len(preference) == 1:
                raise PathUnavailableError(msg)
            log.warning("%s; %s", msg, "trying the next provider" if len(preference) > 1 else "running on cpu")
            self._notes.append(msg + ("; trying the next provider" if len(preference) > 1 else "; running on cpu"))
        if not usable:
            if not self.fallback:
                raise PathUnavailableError(f"none of the providers {preference} is usable on this device")
            usable = ["cpu"]
        self._preference = usable[1:]
        return usable[0]

    def _auto_path(self) -> str:
        try:
            report = self._probe()
            if (measured := self._measured_choice(report)) is not None and not self.options.prefer_software:
                chosen, why = measured
                self._notes.append(f"auto: {why}")
            else:
                # the same rule as the probe's table (ProbeReport.preferred_path), so they agree
                chosen = report.preferred_path_for(self.options.prefer_software)
                if self.options.prefer_software:
                    self._notes.append(f"auto: {chosen} is the best verified path (prefer_software / "
                                       "GPUBACKEND_PREFER_SOFTWARE=1 lets software drivers count)")
                else:
                    self._notes.append(f"auto: the probe prefers {chosen}"
                                       + (" (software GPU drivers are not preferred over the CPU;"
                                          " `gpubackend bench --record` can measure them)"
                                          if chosen == "cpu" else ""))
            if chosen in self.options.disabled_paths:
                self._notes.append(f"auto: {chosen} is disabled by the session options; using cpu")
                chosen = "cpu"
            skipped = [f"{k}: {report.paths[k].reason}" for k in GPU_PATH_KEYS[:GPU_PATH_KEYS.index(chosen)]
                       if chosen in GPU_PATH_KEYS and k in report.paths and not report.usable(k)]
            self._notes += [f"auto: skipped {s}" for s in skipped]
        except Exception as exc:
            chosen = "cpu"
            self._notes.append(f"auto: the capability probe failed ({exc}); using cpu")
        return chosen

    def _tune_first_use(self) -> None:
        """Time the kernel variants of the compute paths this session may use, once per driver,
        when no device-wide tuning record exists yet (``options.tune``; gpubackend.bench.tune).
        Isolated sessions generate in their child, which runs the defaults."""
        if self.options.tune == "off" or self.options.isolation or self._report is None:
            return
        from .bench.tune import first_use

        thread = self.thread_mode if self.thread_mode in ("worker", "caller") else "auto"
        for key in self.path_order:
            if key in tuning.TUNABLE_PATHS and self._report.usable(key):
                note = first_use(key, self._report.fingerprint, replace(self.options, thread=thread))
                if note:
                    self._notes.append(note)

    def _path(self, key: str) -> Path:
        if key not in self._paths:
            disabled: frozenset[str] = frozenset()
            if key != "cpu" and self._report is not None and key in self._report.paths:
                disabled = frozenset(self._report.paths[key].disabled_kernels)
                if self._report.paths[key].ieee_lost:
                    self._notes.append(f"{key}: {self._report.paths[key].ieee_lost} on this driver (the probe's "
                                       "NaN/Inf check): NaN or Inf inputs may come back finite")
            precision = self.precision  # create_path turns "fp16-compute" into fp16 storage + arithmetic
            if precision == "fp16-compute":
                from .paths import fp16_compute

                verdict = ((self._report.features.get("paths") or {}).get(key) or {}).get("fp16_compute") \
                    if self._report is not None else None
                self._notes.append(fp16_compute.session_note(key, verdict))
            if key != "cpu" and self.options.isolation:
                path = isolation.IsolatedPath(key, precision, disabled, self.options)
            else:
                path = create_path(key, precision, disabled, self.options)
                kernels = getattr(path, "kernels", None)
                if isinstance(kernels, KernelCache) and self._report is not None:
                    kernels.tuning = tuning.load(key, self._report.fingerprint, self._tuning_trial)
            if key != "cpu" and self.options.kernel_check:
                path = kernel_check.CheckedPath(path, path.kernel_name_for, self._reference_path,
                                                kernel_check.VerdictStore.for_this_driver())
            self._paths[key] = path
        return self._paths[key]

    def _reference_path(self) -> Path:
        """The CPU path on the NumPy reference kernels, for the first-run kernel checks."""
        if self._reference is None:
            self._reference = create_path("cpu", "fp32", frozenset(), replace(self.options, cpu_engine="numpy"))
        return self._reference

    def _candidates(self) -> list[Path]:
        """The paths a node may run on, best first. A path the probe verified but that this
        process cannot create (no GL context here, say) counts as broken: the next path takes
        over with fallback on; without it, PathUnavailableError."""
        while True:
            keys = self._candidate_keys()
            paths: list[Path] = []
            try:
                for key in keys:
                    paths.append(self._path(key))
                return paths
            except _driver_errors() as exc:
                msg = f"the {key} path could not be created in this process: {exc}"
                if not self.fallback or key == "cpu":
                    raise PathUnavailableError(msg) from exc
                log.warning("%s; using the next path", msg)
                self._notes.append(msg)
                self._broken.add(key)

    def _candidate_keys(self) -> list[str]:
        keys = [k for k in [self.path, *self._preference] if k not in self._broken]
        if self.fallback:
            if not any(k != "cpu" for k in keys) and self.path != "cpu":
                # every requested GPU path broke at run time: the next usable path, then cpu
                start = PATH_KEYS.index(self.path) + 1
                keys = [k for k in GPU_PATH_KEYS[start:]
                        if k not in self._broken and self._reachable(k) and self._usable(k)[0]][:1]
            if "cpu" not in keys:
                keys.append("cpu")
        return keys

    def _plan_and_compile(self, g: Graph, nodes: list[Node] | None = None) -> tuple[Plan, list[Segment]]:
        """Place and compile ``nodes`` (all of ``g``'s by default). A GPU path whose driver fails
        here (a program that does not build, no context on this thread) is marked broken and its
        nodes go to the next candidates, cpu last, with a warning; with fallback=False it is a
        PathUnavailableError."""
        while True:
            try:
                plan = place(g, g.nodes if nodes is None else nodes, self._candidates())
                return plan, self._compile(g, plan.segments)
            except _driver_errors() as exc:
                failed = getattr(exc, "path_key", None) or next(
                    (k for k in self._candidate_keys() if k != "cpu"), self.path)
                msg = f"the {failed} path failed while preparing the model: {type(exc).__name__}: {exc}"
                if not self.fallback or failed == "cpu" or failed in self._broken:
                    lost = isinstance(exc, isolation.ContextLost)  # the driver died or hung: a device failure
                    raise (DeviceError if lost else PathUnavailableError)(msg) from exc
                log.warning("%s; its nodes go to the next path", msg)
                self._notes.append(msg + "; its nodes went to the next path")
                self._broken.add(failed)

    # ---- planning ----------------------------------------------------------------------
    def _variant(self, key: tuple, shapes: Mapping[str, Any], outputs: tuple[str, ...] = (),
                 values: Mapping[str, np.ndarray] | None = None) -> _Variant:
        """The graph specialised, planned and compiled for these input shapes (and values of
        shape-defining inputs) and (when not every output is wanted) only the nodes ``outputs``
        need; made once per signature ``key``."""
        if key in self._variants:
            return self._variants[key]
        g = self._base_graph
        if values or any(g.input_shapes.get(n) != tuple(s) for n, s in shapes.items()):
            g = self._graph({n: tuple(s) for n, s in shapes.items()}, values)
        if outputs:
            g = _needed_for(g, list(outputs))
        limits.check(g, self.options.resource_limits())  # before anything is allocated
        plan, segments = self._plan_and_compile(g)
        variant = _Variant(g, plan, segments, {})
        self._index_last_use(variant)
        if len(self._variants) >= _MAX_VARIANTS:  # e.g. a Reshape shape fed with a new value every run
            oldest = next(iter(self._variants))
            for seg in self._variants.pop(oldest).segments:
                seg.close()
        self._variants[key] = variant
        return variant

    def _compile(self, g: Graph, segments: list[tuple[str, list[Node]]]) -> list[Segment]:
        compiled = []
        for (key, nodes), (ins, outs) in zip(segments, segment_io(g, segments)):
            try:
                compiled.append(self._path(key).compile(nodes, g, ins, outs))
            except _driver_errors() as exc:  # the caller falls back (or says so)
                exc.path_key = getattr(exc, "path_key", key)  # type: ignore[attr-defined]
                for seg in compiled:
                    seg.close()
                raise
            except GpuBackendError:
                raise
            except Exception as exc:  # a path's own bug: say which node, as a GpuBackendError
                culprit = self._failing_node(key, nodes, g)
                where = f"node {culprit.name} ({culprit.op_type})" if culprit else \
                    f"a segment of {len(nodes)} node(s) from {nodes[0].name} ({nodes[0].op_type})"
                raise ModelError(f"compiling {where} on {key} failed: {type(exc).__name__}: {exc}") from exc
        return compiled

    def _failing_node(self, key: str, nodes: list[Node], g: Graph) -> Node | None:
        """The first node of a segment that fails to compile on its own (to name it in the error)."""
        for node in nodes:
            ((ins, outs),) = segment_io(g, [(key, [node])])
            try:
                self._path(key).compile([node], g, ins, outs or [o for o in node.outputs if o]).close()
            except Exception:
                return node
        return None

    @staticmethod
    def _index_last_use(variant: _Variant) -> None:
        variant.last_use = {}
        for idx, seg in enumerate(variant.segments):
            for name in seg.inputs:
                variant.last_use[name] = idx

    # ---- running -----------------------------------------------------------------------
    def _check_feeds(self, feeds: Mapping[str, Any]) -> dict[str, np.ndarray]:
        if not isinstance(feeds, Mapping):
            raise InputError(f"feeds must be a dict of input name -> array, not {type(feeds).__name__}")
        g = self._base_graph
        missing = [n for n in g.inputs if n not in feeds]
        unknown = [n for n in feeds if n not in g.inputs]
        if missing or unknown:  # (the message is built only here: formatting dtypes costs ~20 us a run)
            expected = ", ".join(f"{n} ({g.dtypes.get(n, '?')}, {list(g.input_shapes.get(n, ()))})" for n in g.inputs)
            parts = [f"missing input(s) {missing}" if missing else "", f"unknown input(s) {unknown}" if unknown else ""]
            raise InputError(f"{'; '.join(p for p in parts if p)}; the model's inputs are: {expected}")
        out = {}
        for name in g.inputs:
            if isinstance(feeds[name], DeviceTensor):
                out[name] = self._check_device_feed(name, feeds[name])
                continue
            try:
                value = np.asarray(feeds[name])
            except Exception as exc:
                raise InputError(f"input {name!r} cannot be read as an array: {exc}") from exc
            want = g.dtypes.get(name)
            if want is not None and value.dtype != want:
                raise InputError(f"input {name!r} has dtype {value.dtype}, the model expects {want}")
            declared = g.input_shapes.get(name)
            if declared is not None and (len(declared) != value.ndim
                                         or any(d is not None and d != v for d, v in zip(declared, value.shape))):
                shown = ["?" if d is None else d for d in declared]
                raise InputError(f"input {name!r} has shape {list(value.shape)}, the model expects {shown}")
            out[name] = value
        return out

    def _check_device_feed(self, name: str, value: DeviceTensor) -> Any:
        g = self._base_graph
        value._check_open()  # noqa: SLF001
        if name in self._shape_value_inputs:
            raise InputError(f"input {name!r} defines shapes from its values: feed it as a host array, not a "
                             "device tensor")
        want = g.dtypes.get(name)
        if want is not None and want != value.dtype:
            raise InputError(f"input {name!r} is a float32 device tensor, the model expects {want}")
        declared = g.input_shapes.get(name)
        if declared is not None and (len(declared) != len(value.shape)
                                     or any(d is not None and d != v for d, v in zip(declared, value.shape))):
            shown = ["?" if d is None else d for d in declared]
            raise InputError(f"input {name!r} has shape {list(value.shape)}, the model expects {shown}")
        return value

    def input_shape(self, name: str) -> tuple[int | None, ...] | None:
        """The declared (or ``input_shapes``-pinned) shape of input ``name``; None per symbolic dim."""
        shape = self._base_graph.input_shapes.get(name)
        return None if shape is None else tuple(shape)

    def on_device(self, fn: Callable[..., T], *args: Any) -> T:
        """Call ``fn(*args)`` where this session's GPU objects live (its GPU thread, or the thread
        owning its GL context) and return the result: how a caller makes or draws with GL objects
        of the session's context, e.g. a texture for :meth:`tensor_from_gl_texture`."""
        return self._device(fn, *args)

    def gl_context(self) -> Any:
        """The moderngl context this session's GL paths draw with; use it only inside
        :meth:`on_device` (a GL context belongs to one thread)."""
        from .gl.device import GLDevice

        gl = [k for k in self.path_order if k in ("gles2", "gles3", "gles31")]
        if not gl:
            raise GpuBackendError(f"this session runs no GL path (paths: {self.path_order})")
        return self._device(lambda: GLDevice.shared(gl[0]).ctx)

    def tensor_from_gl_texture(self, texture: Any, shape: tuple[int, ...] | str) -> DeviceTensor:
        """A caller's texture (made in :meth:`gl_context`) as a (1, C, H, W) input; ``shape`` may
        be the input's name when its shape is static. A gles3 or gles31 segment reads it with one
        draw or dispatch on the device (see :class:`gpubackend.device_tensor.GLTextureTensor`)."""
        if isinstance(shape, str):
            declared = self._base_graph.input_shapes.get(shape)
            if shape not in self.input_names or declared is None or None in declared:
                raise InputError(f"{shape!r} is not an input of static shape; give the shape")
            shape = tuple(declared)  # type: ignore[arg-type]
        return GLTextureTensor(texture, tuple(shape), self._device)

    def run_resident(self, feeds: Mapping[str, Any], output_names: list[str] | None = None,
                     device_outputs: Mapping[str, DeviceTensor | None] | None = None) -> list[Any]:
        """:meth:`run` with device-resident tensors: a feed may be a :class:`DeviceTensor`, and each
        output named in ``device_outputs`` comes back as a DeviceTensor (written into the given
        one when its path, layout and shape fit, else a new one) when a GPU segment makes it; an
        output made on the CPU comes back as an array. ``self.stats`` counts the transfers."""
        return self._run(feeds, output_names, False, dict(device_outputs or {}))

    def run(self, feeds: Mapping[str, Any], output_names: list[str] | None = None,
            profile: bool = False) -> list[np.ndarray]:
        """Run the model; returns the outputs in model order (or in ``output_names`` order, and
        then only the nodes those outputs need run). ``profile=True`` makes segments record
        per-node seconds in ``self.stats.node_seconds`` (synchronising after each node, so the
        run itself is slower). Note the order: feeds first (onnxruntime's ``run(output_names,
        feeds)`` is :class:`gpubackend.InferenceSession`)."""
        return self._run(feeds, output_names, profile, None)

    def _run(self, feeds: Mapping[str, Any], output_names: list[str] | None, profile: bool,
             device_outputs: dict[str, DeviceTensor | None] | None) -> list[Any]:
        if isinstance(output_names, Mapping) and not isinstance(feeds, Mapping):
            raise InputError("Session.run takes (feeds, output_names) but got the output names first: that is "
                             "onnxruntime's order run(output_names, feeds); call session.run(feeds, output_names) "
                             "or use gpubackend.InferenceSession")
        arrays = self._check_feeds(feeds)
        if device_outputs is None and any(isinstance(v, DeviceTensor) for v in arrays.values()):
            device_outputs = {}  # device feeds: segments copy them on the device; outputs come back as arrays
        names = list(output_names) if output_names is not None else list(self.output_names)
        if isinstance(output_names, str):
            raise InputError(f"output_names must be a list of names, not the string {output_names!r}")
        missing = [n for n in names if n not in self.output_names]
        if missing:
            raise InputError(f"unknown output name(s) {missing}; the model's outputs are {self.output_names}")
        wanted = tuple(dict.fromkeys(names)) if set(names) != set(self.output_names) else ()
        values = {n: arrays[n] for n in self._shape_value_inputs if arrays[n].size <= SHAPE_VALUE_LIMIT}
        key = (tuple(tuple(arrays[n].shape) for n in self.input_names), wanted,
               tuple((n, v.dtype.str, v.tobytes()) for n, v in values.items()))
        with self._lock:
            variant = self._device(self._variant, key, {n: arrays[n].shape for n in self.input_names}, wanted, values)
            self._current = variant
            stats = RunStats(profile=bool(profile))
            env: dict[str, Any] = dict(arrays)
            idx = 0
            while idx < len(variant.segments):
                seg = variant.segments[idx]
                feed = {n: env[n] for n in seg.inputs}
                try:
                    if device_outputs is None:
                        env.update(seg.run(feed, stats) if seg.path == "cpu" else self._device(seg.run, feed, stats))
                    elif seg.path == "cpu":
                        env.update(seg.run({n: v.host(stats) if isinstance(v, DeviceTensor) else v
                                            for n, v in feed.items()}, stats))
                    else:
                        keep = {n: device_outputs[n] for n in seg.outputs if n in device_outputs}
                        made = self._device(seg.run_resident, feed, stats, keep)
                        for value in made.values():
                            if isinstance(value, DeviceTensor):
                                value._call = self._device  # noqa: SLF001 - its objects live where the session's do
                        env.update(made)
                except _driver_errors() as exc:
                    self._device(self._recover, variant, idx, exc)
                    continue
                for name in seg.inputs:
                    if variant.last_use.get(name) == idx and name not in variant.graph.outputs:
                        env.pop(name, None)
                idx += 1
            self.stats = stats
        consts = variant.graph.constants
        if device_outputs is None:
            return [env[n] if n in env else np.array(consts[n]) for n in names]
        return [env[n] if n in env and (n in device_outputs or not isinstance(env[n], DeviceTensor))
                else env[n].host(self.stats) if n in env else np.array(consts[n]) for n in names]

    def _recover(self, variant: _Variant, idx: int, exc: BaseException) -> None:
        """A driver failed mid-run: re-plan the failing path's remaining nodes onto the next path."""
        seg = variant.segments[idx]
        if not self.fallback:
            raise DeviceError(f"the {seg.path} path failed at run time: {exc}") from exc
        log.warning("the %s path failed at run time (%s); re-planning its nodes onto the next path", seg.path, exc)
        self._notes.append(f"{seg.path} failed at run time ({exc}); its nodes were re-planned")
        self._broken.add(seg.path)
        for s in variant.segments[idx:]:
            s.close()
        remaining = [n for s in variant.segments[idx:] for n in s.nodes]
        plan, new_segments = self._plan_and_compile(variant.graph, remaining)
        variant.segments[idx:] = new_segments
        variant.plan.placement.update(plan.placement)
        variant.plan.reasons.update(plan.reasons)
        variant.plan.segments[idx:] = plan.segments
        self._index_last_use(variant)

    # ---- reporting ---------------------------------------------------------------------
    @property
    def placement(self) -> dict[str, str]:
        """Node name -> path key that runs it (fused nodes share their producer's path)."""
        variant = self._current or self._device(self._plan_for_report)
        out = {}
        for name, key in variant.plan.placement.items():
            out[name] = key
            for fused in variant.graph.fused.get(name, []):
                out[fused] = key
        return out

    def _plan_for_report(self) -> _Variant:
        g = self._base_graph
        plan = place(g, g.nodes, self._candidates())
        return _Variant(g, plan, [], {})

    def explain(self, verbose: bool = False) -> str:
        """Which path ran what, and why nodes left the chosen path: grouped by where they went and
        why, with counts per op type; ``verbose=True`` adds one line per node."""
        variant = self._current or self._device(self._plan_for_report)
        lines = [f"requested path: {self.requested_path}; chosen: {self.path}; precision: {self.precision}; "
                 f"fallback: {self.fallback}; cpu engine: {self.cpu_engine}"]
        lines += [f"  {note}" for note in self._notes]
        lines += [f"  {note}" for seg in variant.segments for note in getattr(seg, "notes", ())]
        counts: dict[str, int] = {}
        for key in variant.plan.placement.values():
            counts[key] = counts.get(key, 0) + 1
        lines.append("nodes per path: " + ", ".join(f"{k}={v}" for k, v in sorted(counts.items())))
        lines.append(f"segments: {len(variant.plan.segments)} ("
                     + " -> ".join(f"{self._engine_label(k)}[{len(n)}]" for k, n in variant.plan.segments) + ")")
        weights = [(seg.path, getattr(seg, "weight_bytes", None)) for seg in variant.segments]
        if any(b is not None for _, b in weights):
            lines.append("device weight bytes per segment: "
                         + ", ".join(f"{key}={b}" for key, b in weights if b is not None))
        fell = [(n, r) for n, r in variant.plan.reasons.items() if variant.plan.placement.get(n) != self.path]
        if fell:
            lines.append(f"{len(fell)} node(s) not on {self.path}:")
            ops = {n.name: n.op_type for n in variant.graph.nodes}
            groups: dict[tuple[str, str], dict[str, int]] = {}
            for name, reasons in fell:
                own = [r.split(": ", 1)[1] for r in reasons if r.startswith(self.path + ": ")]
                why = _SHAPE_IN_REASON.sub("(...)", "; ".join(own or reasons))  # one group for all shapes
                group = groups.setdefault((variant.plan.placement.get(name, "?"), why), {})
                group[ops.get(name, "?")] = group.get(ops.get(name, "?"), 0) + 1
            for (dest, why), by_op in sorted(groups.items(), key=lambda kv: -sum(kv[1].values())):
                listed = ", ".join(f"{op} ({k})" for op, k in sorted(by_op.items(), key=lambda kv: -kv[1]))
                lines.append(f"  {self.path} -> {dest}: {sum(by_op.values())} node(s): {listed}: {why}")
        fused = {k: v for k, v in variant.graph.fused.items() if v}
        if fused:
            lines.append("fused: " + ", ".join(f"{k} <- {'+'.join(v)}" for k, v in fused.items()))
        swapped = variant.graph.conv_before_upsample
        if swapped:
            lines.append("1x1 conv moved before the upsampling Resize that fed it (fewer pixels): "
                         + ", ".join(f"{c} before {r}" for c, r in swapped.items()))
        if verbose and fell:
            ops = {n.name: n.op_type for n in variant.graph.nodes}
            lines.append("per node:")
            lines += [f"  {n} ({ops.get(n, '?')}) -> {variant.plan.placement.get(n)}: {'; '.join(r)}" for n, r in fell]
        return "\n".join(lines)

    def _engine_label(self, key: str) -> str:
        return f"cpu:{self.cpu_engine}" if key == "cpu" else key

    @property
    def path_order(self) -> list[str]:
        """The paths nodes may be placed on, best first (cpu last when fallback is on)."""
        keys = [self.path, *self._preference]
        if self.fallback and "cpu" not in keys:
            keys.append("cpu")
        return keys

    @property
    def fallback_nodes(self) -> list[str]:
        return [n for n, k in self.placement.items() if k != self.path]

    def close(self) -> None:
        """Release the session's GPU objects (waits for runs in flight). Safe to call twice."""
        pending, self._async = self._async, None
        if pending is not None:
            pending.shutdown(wait=True)  # outside the lock: the queued runs take it
        with self._lock:
            self._device(self._release)

    def _release(self) -> None:
        for variant in self._variants.values():
            for seg in variant.segments:
                seg.close()
        for path in [*self._paths.values(), *([self._reference] if self._reference is not None else [])]:
            path.close()
        self._variants.clear()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
