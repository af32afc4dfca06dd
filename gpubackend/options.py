"""Session options: every knob a session reads, in one object.

:class:`SessionOptions` holds the native options (path preference, precision, fallback, CPU
engine, free-dimension overrides) and the tuning knobs that used to exist only as environment
variables. The environment still wins where a variable is set (``GPUBACKEND_PATH`` only when the
path is "auto"), so a deployment can override an application's choice without editing it:
:meth:`SessionOptions.resolved` applies it. The onnxruntime-compatible fields
(``intra_op_num_threads``, ``graph_optimization_level``, ...) live on the same class so that
``gpubackend.SessionOptions`` can stand in for ``onnxruntime.SessionOptions``; the docstring of
each says whether it is honoured or why it is ignored.
"""

from __future__ import annotations

import copy
import enum
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

import onnx

from .errors import OptionError
from .limits import DEFAULT_MAX_NODE_MACS, DEFAULT_MAX_TENSOR_ELEMENTS, DEFAULT_MAX_TOTAL_BYTES, ResourceLimits
from .paths import GPU_PATH_KEYS, PATH_KEYS
from .paths.cpu import CPU_ENGINES

PRECISIONS = ("fp32", "fp16", "fp16-compute")
THREAD_MODES = ("auto", "worker", "caller")
TUNE_MODES = ("auto", "off")

# Environment variables that override a field, and how their text becomes the field's value.
ENV_PATH = "GPUBACKEND_PATH"
ENV_PREFER_SOFTWARE = "GPUBACKEND_PREFER_SOFTWARE"
ENV_VULKAN_RECORD = "GPUBACKEND_VULKAN_RECORD"
ENV_GLES3_TARGETS = "GPUBACKEND_GLES3_TARGETS"
ENV_BLAS_THREADS = "GPUBACKEND_BLAS_THREADS"
ENV_DISABLE = "GPUBACKEND_DISABLE"
ENV_CPU_ENGINE = "GPUBACKEND_CPU_ENGINE"
ENV_THREAD = "GPUBACKEND_SESSION_THREAD"
ENV_KERNEL_CHECK = "GPUBACKEND_KERNEL_CHECK"
ENV_ISOLATION = "GPUBACKEND_ISOLATION"
ENV_ISOLATION_TIMEOUT = "GPUBACKEND_ISOLATION_TIMEOUT"
ENV_TUNE = "GPUBACKEND_TUNE"


class GraphOptimizationLevel(enum.IntEnum):
    """onnxruntime's levels, accepted for compatibility. gpubackend always folds constants and
    fuses activations (its kernels are written for the fused graph), so every level runs the
    same graph."""

    ORT_DISABLE_ALL = 0
    ORT_ENABLE_BASIC = 1
    ORT_ENABLE_EXTENDED = 2
    ORT_ENABLE_ALL = 99


class ExecutionMode(enum.IntEnum):
    """onnxruntime's modes, accepted for compatibility: nodes run in order either way (a GPU
    path queues its work on one device; parallel CPU branches would compete for BLAS threads)."""

    ORT_SEQUENTIAL = 0
    ORT_PARALLEL = 1


def _flag(text: str) -> bool:
    return text.strip().lower() not in ("", "0", "false", "no", "off")


@dataclass
class SessionOptions:
    """Options for :class:`gpubackend.Session` and :class:`gpubackend.InferenceSession`.

    Native fields:

    - ``path``: "auto" (the probe's choice) or one path key; ``GPUBACKEND_PATH`` overrides "auto".
    - ``providers``: path keys in preference order; each node runs on the first that accepts it
      (the CPU is appended when ``fallback`` is on). Overrides ``path`` when set.
    - ``precision``: "fp32" or "fp16" GPU storage; "fp16-compute": fp16 storage and fp16
      arithmetic where the probe verified the device has it (``gpubackend.paths.fp16_compute``;
      today it runs as fp32 arithmetic everywhere, and ``explain()`` says so).
    - ``precision_plan``: under fp16, activations kept fp32 beside the static small-tensor rule
      (:mod:`gpubackend.mixed_precision`): a list of tensor names (node outputs of the model), or
      the path of a JSON plan written by ``gpubackend calibrate-fp16``. A name that is no node
      output of the model is an OptionError; under fp32 the plan changes nothing.
    - ``fallback``: unsupported or failing nodes run on the CPU (False: raise instead).
    - ``cpu_engine``: the CPU path's engine: "auto" (onnxruntime when installed, else numpy),
      "onnxruntime" or "numpy" (the ``fallback`` kernels); ``GPUBACKEND_CPU_ENGINE`` overrides it.
    - ``free_dimension_overrides``: symbolic input dimension name -> size, fixed before planning.
    - ``disabled_paths``: paths to treat as absent for this session (``GPUBACKEND_DISABLE``, which
      the probe also reads, adds to them).
    - ``prefer_software``: let "auto" pick a verified software GPU driver (llvmpipe, lavapipe)
      over the CPU (``GPUBACKEND_PREFER_SOFTWARE=1``).
    - ``gles3_render_targets``: render targets per gles3 pass (None: the path's default; capped
      by the driver's GL_MAX_DRAW_BUFFERS; ``GPUBACKEND_GLES3_TARGETS``).
    - ``vulkan_record_once``: record each Vulkan segment's command buffer once and replay it
      (``GPUBACKEND_VULKAN_RECORD=0`` records every run).
    - ``blas_threads``: NumPy BLAS threads while the numpy CPU engine runs (None: 1, except in the
      GEMMs of runs that the engine has timed faster with BLAS's own threads; set for the duration
      of each run and restored after, never process-wide; ``GPUBACKEND_BLAS_THREADS``).
    - ``thread``: where the session's GPU work runs (``GPUBACKEND_SESSION_THREAD``). "worker": on
      the process's GPU thread (:mod:`gpubackend.worker`), so any thread may create, run and share
      the session. "caller": on the thread that created the session (runs from other threads
      raise). "auto": "worker", except for a GL session created while the GL context belongs to
      the creating thread, or created on the main thread before any GL context exists, which
      stays "caller" (the GL context is process-wide and bound to one thread, so code that uses
      GL directly on the main thread keeps working).
    - ``max_tensor_elements``, ``max_total_bytes``, ``max_node_macs``: resource limits checked on the
      specialised graph before anything is allocated (:mod:`gpubackend.limits`; 0 disables one;
      ``GPUBACKEND_MAX_TENSOR_ELEMENTS``, ``GPUBACKEND_MAX_TOTAL_BYTES``, ``GPUBACKEND_MAX_NODE_MACS``).
    - ``kernel_check``: check each GPU kernel against the CPU the first time it is used on this
      driver, and move its nodes off the GPU if it disagrees (:mod:`gpubackend.kernel_check`;
      verdicts are cached per driver; ``GPUBACKEND_KERNEL_CHECK=0`` turns it off).
    - ``isolation``: run the session's GPU work in a child process, so a driver that crashes or
      hangs at run time costs a re-plan onto the next path (or a DeviceError with ``fallback``
      off), not the caller's process (:mod:`gpubackend.isolation`; ``GPUBACKEND_ISOLATION=1``).
    - ``isolation_timeout_s``: with ``isolation``, seconds a GPU call (compile or run) may take
      before the child counts as hung and is killed (``GPUBACKEND_ISOLATION_TIMEOUT``).
    - ``tune``: "auto": the first session that creates a compute path (vulkan, gles31) on a
      driver with no device-wide tuning record times a few variants of each tunable kernel on
      representative layers (a few seconds, once per driver and CPU) and caches the fastest
      (:mod:`gpubackend.tuning`); "off": never measure (records already cached, from an earlier
      first use or ``gpubackend tune``, still count; without one the device class's default
      runs). ``GPUBACKEND_TUNE=off`` turns it off for every session.

    onnxruntime-compatible fields (so ``onnxruntime.SessionOptions`` code runs unchanged):
    ``intra_op_num_threads`` (honoured: onnxruntime's threads for the onnxruntime CPU engine, and
    the threads the numpy engine's kernels split their work over; 0 = default, one per core),
    ``inter_op_num_threads``, ``execution_mode`` (ignored: nodes run in order),
    ``graph_optimization_level`` (ignored: the graph is always folded and fused),
    ``log_severity_level``/``log_verbosity_level``/``logid`` (ignored: gpubackend logs through
    the ``logging`` module, logger "gpubackend"), ``enable_profiling``/``profile_file_prefix``
    (ignored: use ``Session.run(..., profile=True)``), ``optimized_model_filepath`` (ignored: the
    optimised graph is not an ONNX model), ``enable_cpu_mem_arena``/``enable_mem_pattern``/
    ``enable_mem_reuse``/``use_deterministic_compute`` (ignored: gpubackend's kernels are
    deterministic and allocate per segment).
    """

    path: str = "auto"
    providers: Sequence[str] | None = None
    precision: str = "fp32"
    precision_plan: str | os.PathLike | Sequence[str] | None = None
    fallback: bool = True
    cpu_engine: str = "auto"
    free_dimension_overrides: dict[str, int] = field(default_factory=dict)
    disabled_paths: frozenset[str] = frozenset()
    prefer_software: bool = False
    gles3_render_targets: int | None = None
    vulkan_record_once: bool = True
    blas_threads: int | None = None
    thread: str = "auto"
    max_tensor_elements: int = DEFAULT_MAX_TENSOR_ELEMENTS
    max_total_bytes: int = DEFAULT_MAX_TOTAL_BYTES
    max_node_macs: int = DEFAULT_MAX_NODE_MACS
    kernel_check: bool = True
    isolation: bool = False
    isolation_timeout_s: float = 60.0
    tune: str = "auto"
    # onnxruntime-compatible fields (see the class docstring)
    intra_op_num_threads: int = 0
    inter_op_num_threads: int = 0
    execution_mode: ExecutionMode = ExecutionMode.ORT_SEQUENTIAL
    graph_optimization_level: GraphOptimizationLevel = GraphOptimizationLevel.ORT_ENABLE_ALL
    log_severity_level: int = 2
    log_verbosity_level: int = 0
    logid: str = ""
    enable_profiling: bool = False
    profile_file_prefix: str = "onnxruntime_profile_"
    optimized_model_filepath: str = ""
    enable_cpu_mem_arena: bool = True
    enable_mem_pattern: bool = True
    enable_mem_reuse: bool = True
    use_deterministic_compute: bool = False
    config_entries: dict[str, str] = field(default_factory=dict)

    # ---- onnxruntime's methods --------------------------------------------------------
    def add_free_dimension_override_by_name(self, dim_name: str, dim_value: int) -> None:
        """Fix the symbolic dimension ``dim_name`` of the model's inputs to ``dim_value``."""
        self.free_dimension_overrides[str(dim_name)] = int(dim_value)

    def add_session_config_entry(self, key: str, value: str) -> None:
        """Stored for :meth:`get_session_config_entry` and handed to the onnxruntime CPU engine's
        sessions (e.g. ``session.intra_op.allow_spinning``); the other paths read none of them."""
        self.config_entries[str(key)] = str(value)

    def get_session_config_entry(self, key: str) -> str:
        if key not in self.config_entries:
            raise OptionError(f"session config entry {key!r} is not set")
        return self.config_entries[key]

    def register_custom_ops_library(self, library_path: str) -> None:
        raise OptionError("gpubackend cannot load onnxruntime custom-op libraries "
                          f"({library_path!r}): its kernels are shaders generated per path")

    # ---- checking and resolving -------------------------------------------------------
    def copy(self) -> SessionOptions:
        return copy.deepcopy(self)

    def validate(self) -> None:
        """Raise OptionError naming the first field whose value is not allowed."""
        if self.path != "auto" and self.path not in PATH_KEYS:
            raise OptionError(f"path must be 'auto' or one of {', '.join(PATH_KEYS)}, not {self.path!r}")
        if self.providers is not None:
            if isinstance(self.providers, str) or not self.providers:
                raise OptionError(f"providers must be a non-empty list of path keys, not {self.providers!r}")
            bad = [p for p in self.providers if p not in PATH_KEYS]
            if bad:
                raise OptionError(f"providers {bad} are not path keys ({', '.join(PATH_KEYS)})")
        if self.precision not in PRECISIONS:
            raise OptionError(f"precision must be one of {PRECISIONS}, not {self.precision!r}")
        plan = self.precision_plan
        if plan is not None and not isinstance(plan, (str, os.PathLike)) and (
                not isinstance(plan, Sequence) or not all(isinstance(n, str) for n in plan)):
            raise OptionError(f"precision_plan must be a JSON plan's path or a list of tensor names, not {plan!r}")
        if self.cpu_engine not in CPU_ENGINES:
            raise OptionError(f"cpu_engine must be one of {CPU_ENGINES}, not {self.cpu_engine!r}")
        if self.thread not in THREAD_MODES:
            raise OptionError(f"thread must be one of {THREAD_MODES}, not {self.thread!r}")
        if self.tune not in TUNE_MODES:
            raise OptionError(f"tune must be one of {TUNE_MODES}, not {self.tune!r}")
        bad = [p for p in self.disabled_paths if p not in PATH_KEYS or p == "cpu"]
        if bad:
            raise OptionError(f"disabled_paths {sorted(bad)} are not GPU path keys")
        for name, value in self.free_dimension_overrides.items():
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise OptionError(f"free dimension override {name!r} must be a positive int, not {value!r}")
        if self.gles3_render_targets is not None and not 1 <= self.gles3_render_targets <= 8:
            raise OptionError(f"gles3_render_targets must be 1..8, not {self.gles3_render_targets!r}")
        for name in ("max_tensor_elements", "max_total_bytes", "max_node_macs"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise OptionError(f"{name} must be an int >= 0 (0: no limit), not {value!r}")
        for name in ("blas_threads",):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise OptionError(f"{name} must be a positive int or None, not {value!r}")
        timeout = self.isolation_timeout_s
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
            raise OptionError(f"isolation_timeout_s must be a number of seconds > 0, not {timeout!r}")
        if not isinstance(self.intra_op_num_threads, int) or self.intra_op_num_threads < 0:
            raise OptionError(f"intra_op_num_threads must be an int >= 0, not {self.intra_op_num_threads!r}")

    def resolved(self, environ: Mapping[str, str] | None = None) -> SessionOptions:
        """A validated copy with the environment's overrides applied."""
        env = os.environ if environ is None else environ
        out = self.copy()
        if out.path == "auto" and out.providers is None and env.get(ENV_PATH, "").strip():
            forced = env[ENV_PATH].strip()
            if forced != "auto" and forced not in PATH_KEYS:
                raise OptionError(f"{ENV_PATH}={forced!r} is not one of {', '.join(PATH_KEYS)}")
            out.path = forced
        if env.get(ENV_PREFER_SOFTWARE, "").strip():
            out.prefer_software = _flag(env[ENV_PREFER_SOFTWARE])
        if env.get(ENV_VULKAN_RECORD, "").strip():
            out.vulkan_record_once = _flag(env[ENV_VULKAN_RECORD])
        if env.get(ENV_GLES3_TARGETS, "").strip():
            out.gles3_render_targets = _env_int(env, ENV_GLES3_TARGETS)
        if env.get(ENV_BLAS_THREADS, "").strip():
            out.blas_threads = _env_int(env, ENV_BLAS_THREADS)
        if env.get(ENV_CPU_ENGINE, "").strip():
            out.cpu_engine = env[ENV_CPU_ENGINE].strip()
        if env.get(ENV_THREAD, "").strip():
            out.thread = env[ENV_THREAD].strip()
        if env.get(ENV_KERNEL_CHECK, "").strip():
            out.kernel_check = _flag(env[ENV_KERNEL_CHECK])
        if env.get(ENV_TUNE, "").strip():
            out.tune = env[ENV_TUNE].strip().lower()
        if env.get(ENV_ISOLATION, "").strip():
            out.isolation = _flag(env[ENV_ISOLATION])
        if env.get(ENV_ISOLATION_TIMEOUT, "").strip():
            try:
                out.isolation_timeout_s = float(env[ENV_ISOLATION_TIMEOUT].strip())
            except ValueError as exc:
                raise OptionError(f"{ENV_ISOLATION_TIMEOUT}={env[ENV_ISOLATION_TIMEOUT]!r} is not a number") from exc
        for name in ("max_tensor_elements", "max_total_bytes", "max_node_macs"):
            var = f"GPUBACKEND_{name.upper()}"
            if env.get(var, "").strip():
                setattr(out, name, _env_int(env, var))
        if env.get(ENV_DISABLE, "").strip():
            extra = {p.strip() for p in env[ENV_DISABLE].split(",") if p.strip() in GPU_PATH_KEYS}
            out.disabled_paths = frozenset(out.disabled_paths) | extra
        out.disabled_paths = frozenset(out.disabled_paths)
        out.validate()
        return out

    def resource_limits(self) -> ResourceLimits:
        return ResourceLimits(self.max_tensor_elements, self.max_total_bytes, self.max_node_macs)

    def path_preference(self) -> list[str] | None:
        """The explicit path order (``providers``, or ``[path]``), or None for "auto"."""
        if self.providers is not None:
            return list(self.providers)
        return None if self.path == "auto" else [self.path]

    def with_keywords(self, **keywords: Any) -> SessionOptions:
        """A copy with the given fields replaced (unknown names raise OptionError)."""
        known = {f.name for f in fields(self)}
        unknown = sorted(set(keywords) - known)
        if unknown:
            raise OptionError(f"unknown session option(s) {unknown}")
        return replace(self.copy(), **keywords)


def _env_int(env: Mapping[str, str], name: str) -> int:
    try:
        return int(env[name].strip())
    except ValueError as exc:
        raise OptionError(f"{name}={env[name]!r} is not an integer") from exc


def override_free_dimensions(proto: onnx.ModelProto, overrides: Mapping[str, int]) -> onnx.ModelProto:
    """A copy of ``proto`` whose inputs (and outputs and value_info, which share the names) have
    the named symbolic dimensions fixed.
    Raises OptionError for a name no input dimension carries (a typo would otherwise pass silently)."""
    if not overrides:
        return proto
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    used: set[str] = set()
    for kind, infos in (("input", out.graph.input), ("other", out.graph.output), ("other", out.graph.value_info)):
        for value_info in infos:
            for dim in value_info.type.tensor_type.shape.dim:
                if dim.HasField("dim_param") and dim.dim_param in overrides:
                    if kind == "input":
                        used.add(dim.dim_param)
                    dim.dim_value = int(overrides[dim.dim_param])
    unused = sorted(set(overrides) - used)
    if unused:
        names = sorted({d.dim_param for vi in proto.graph.input for d in vi.type.tensor_type.shape.dim
                        if d.HasField("dim_param")})
        raise OptionError(f"free dimension override(s) {unused} name no input dimension; "
                          f"the model's symbolic dimensions are {names}")
    return out
