"""An onnxruntime-compatible surface over :class:`gpubackend.Session`, so that code written for
``onnxruntime.InferenceSession`` runs after swapping the import::

    import gpubackend as ort
    sess = ort.InferenceSession("model.onnx", providers=["GLES31ExecutionProvider", "CPUExecutionProvider"])
    (y,) = sess.run(None, {sess.get_inputs()[0].name: x})

Providers are the paths under onnxruntime-style names, best first; each node runs on the first
listed provider that accepts it, and (as in onnxruntime) the CPU takes what none accepts unless
``SessionOptions.fallback`` is off. Provider names gpubackend does not have (CUDA, TensorRT, ...)
are skipped with a warning, as onnxruntime does for providers missing from its build.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

from .device_tensor import DeviceTensor
from .errors import GpuBackendError, OptionError
from .model import ModelLike
from .options import SessionOptions
from .paths import PATH_KEYS
from .session import Session

log = logging.getLogger("gpubackend")

PROVIDER_OF_PATH = {
    "vulkan": "VulkanExecutionProvider",
    "gles31": "GLES31ExecutionProvider",
    "gles3": "GLES3ExecutionProvider",
    "gles2": "GLES2ExecutionProvider",
    "cpu": "CPUExecutionProvider",
}
PATH_OF_PROVIDER = {v: k for k, v in PROVIDER_OF_PATH.items()}


def get_all_providers() -> list[str]:
    """Every provider name gpubackend knows, best first."""
    return [PROVIDER_OF_PATH[k] for k in PATH_KEYS]


def get_available_providers() -> list[str]:
    """The providers whose path the capability probe verified on this machine, best first (CPU last)."""
    from capability_probe import probe

    try:
        report = probe()
        usable = [k for k in PATH_KEYS if k == "cpu" or report.usable(k)]
    except Exception as exc:  # a broken probe leaves the CPU
        log.warning("the capability probe failed (%s); only the CPU provider is available", exc)
        usable = ["cpu"]
    return [PROVIDER_OF_PATH[k] for k in usable]


def _provider_keys(providers: Sequence[Any]) -> list[str]:
    """Path keys for onnxruntime-style provider entries (a name or a (name, options) pair)."""
    if isinstance(providers, str):
        raise OptionError(f"providers must be a list of provider names, not the string {providers!r}")
    keys = []
    for entry in providers:
        name = entry[0] if isinstance(entry, (tuple, list)) and entry else entry
        if not isinstance(name, str):
            raise OptionError(f"a provider must be a name or a (name, options) pair, not {entry!r}")
        key = PATH_OF_PROVIDER.get(name) or (name if name in PATH_KEYS else None)
        if key is None:
            warnings.warn(f"provider {name!r} is not available in gpubackend (it has {get_all_providers()}); "
                          "skipping it", stacklevel=3)
            continue
        if key not in keys:
            keys.append(key)
    return keys


def _type_string(type_proto: onnx.TypeProto) -> str:
    kind = type_proto.WhichOneof("value")
    if kind == "tensor_type":
        elem = type_proto.tensor_type.elem_type
        name = onnx.TensorProto.DataType.Name(elem).lower() if elem else "undefined"
        return f"tensor({name})"
    if kind == "sequence_type":
        return f"seq({_type_string(type_proto.sequence_type.elem_type)})"
    return kind or "undefined"


def _shape(type_proto: onnx.TypeProto) -> list[int | str | None]:
    if type_proto.WhichOneof("value") != "tensor_type" or not type_proto.tensor_type.HasField("shape"):
        return []
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param if d.HasField("dim_param") else None)
            for d in type_proto.tensor_type.shape.dim]


@dataclass
class RunOptions:
    """onnxruntime's per-run options, accepted and ignored (runs are not cancellable and log
    through the ``logging`` module)."""

    log_severity_level: int = 2
    log_verbosity_level: int = 0
    logid: str = ""
    run_tag: str = ""
    terminate: bool = False


@dataclass(frozen=True)
class NodeArg:
    """An input or output as onnxruntime describes it: ``name``, ``type`` ("tensor(float)"),
    ``shape`` (ints, symbolic dimensions as their names, None where unknown)."""

    name: str
    type: str
    shape: list[int | str | None]


@dataclass(frozen=True)
class ModelMetadata:
    producer_name: str
    graph_name: str
    domain: str
    description: str
    graph_description: str
    version: int
    custom_metadata_map: dict[str, str] = field(default_factory=dict)


class InferenceSession:
    """onnxruntime's ``InferenceSession`` on gpubackend's paths. ``path_or_bytes``: a file path,
    serialized bytes or an ``onnx.ModelProto``. ``providers``: names from
    :func:`get_all_providers` (or path keys) in preference order; None: the probe's choice
    ("auto", or ``sess_options.providers`` / ``sess_options.path`` when set).
    ``provider_options`` is accepted and ignored (the paths take no per-provider options)."""

    def __init__(self, path_or_bytes: ModelLike, sess_options: SessionOptions | None = None,
                 providers: Sequence[Any] | None = None, provider_options: Sequence[dict] | None = None,
                 **kwargs: Any):
        if sess_options is not None and not isinstance(sess_options, SessionOptions):
            raise OptionError(f"sess_options must be a gpubackend.SessionOptions, not {type(sess_options).__name__}")
        self._model = path_or_bytes
        self._sess_options = sess_options if sess_options is not None else SessionOptions()
        self._session = self._create(providers)

    def _create(self, providers: Sequence[Any] | None) -> Session:
        options = self._sess_options.copy()
        if providers is not None:
            keys = _provider_keys(providers)
            options.providers = keys or ["cpu"]
        return Session(self._model, options=options)

    # ---- running ----------------------------------------------------------------------
    def run(self, output_names: Sequence[str] | None, input_feed: Mapping[str, Any],
            run_options: Any = None) -> list[np.ndarray]:
        """Outputs ``output_names`` (None: all, in model order) for ``input_feed`` (name -> array).
        Only the nodes the requested outputs need are run. ``run_options`` is accepted and ignored."""
        if isinstance(output_names, Mapping) and not isinstance(input_feed, Mapping):
            raise GpuBackendError("InferenceSession.run takes (output_names, input_feed) as onnxruntime does; "
                                  "the feeds came first (that is gpubackend.Session.run's order)")
        return self._session.run(input_feed, None if output_names is None else list(output_names))

    def run_async(self, output_names: Sequence[str] | None, input_feed: Mapping[str, Any],
                  callback: Callable[[list[np.ndarray] | None, Any, str], None], user_data: Any = None,
                  run_options: Any = None) -> None:
        """onnxruntime's asynchronous run: ``callback(outputs, user_data, error_text)`` is called
        from a worker thread when the run ends (outputs None and the error's text on failure)."""
        future = self._session.run_async(input_feed, None if output_names is None else list(output_names))

        def done(f: Future) -> None:
            exc = f.exception()
            callback(None if exc else f.result(), user_data, f"{type(exc).__name__}: {exc}" if exc else "")

        future.add_done_callback(done)

    # ---- describing -------------------------------------------------------------------
    def _value_infos(self, names: list[str], infos: Sequence[onnx.ValueInfoProto]) -> list[NodeArg]:
        by_name = {vi.name: vi for vi in infos}
        out = []
        for name in names:
            vi = by_name.get(name)
            out.append(NodeArg(name, _type_string(vi.type), _shape(vi.type)) if vi is not None
                       else NodeArg(name, "undefined", []))
        return out

    def get_inputs(self) -> list[NodeArg]:
        g = self._session.model_proto.graph
        return self._value_infos(self._session.input_names, g.input)

    def get_outputs(self) -> list[NodeArg]:
        g = self._session.model_proto.graph
        return self._value_infos(self._session.output_names, g.output)

    def get_overridable_initializers(self) -> list[NodeArg]:
        """Empty: initializers are folded into the graph's constants when the session is made."""
        return []

    def get_modelmeta(self) -> ModelMetadata:
        m = self._session.model_proto
        return ModelMetadata(producer_name=m.producer_name, graph_name=m.graph.name, domain=m.domain,
                             description=m.doc_string, graph_description=m.graph.doc_string,
                             version=m.model_version, custom_metadata_map={p.key: p.value for p in m.metadata_props})

    def get_providers(self) -> list[str]:
        """The providers this session places nodes on, in preference order."""
        return [PROVIDER_OF_PATH[k] for k in self._session.path_order]

    def get_provider_options(self) -> dict[str, dict[str, str]]:
        return {name: {} for name in self.get_providers()}

    def get_session_options(self) -> SessionOptions:
        return self._sess_options

    def set_providers(self, providers: Sequence[Any] | None = None,
                      provider_options: Sequence[dict] | None = None) -> None:
        """Re-create the session on ``providers`` (as onnxruntime does)."""
        new = self._create(providers)
        self._session.close()
        self._session = new

    def end_profiling(self) -> str:
        """No profile file is written (``enable_profiling`` is ignored; use
        ``gpubackend.Session.run(..., profile=True)``); returns an empty file name."""
        return ""

    def io_binding(self) -> IOBinding:
        """An :class:`IOBinding` for device-resident inputs and outputs of this session."""
        return IOBinding(self)

    def run_with_iobinding(self, iobinding: IOBinding, run_options: Any = None) -> None:
        """Run with the inputs and outputs bound in ``iobinding``; its outputs are then in
        ``iobinding.get_outputs()``. ``run_options`` is accepted and ignored."""
        iobinding._run()  # noqa: SLF001

    @property
    def session(self) -> Session:
        """The native :class:`gpubackend.Session` underneath (placement, explain(), stats)."""
        return self._session

    def close(self) -> None:
        self._session.close()

    def __enter__(self) -> InferenceSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_CPU_DEVICES = ("cpu",)


class OrtValue:
    """onnxruntime's ``OrtValue``: a tensor on the CPU (a NumPy array) or on a path's device (a
    :class:`gpubackend.device_tensor.DeviceTensor`: GL textures, a GL storage buffer or a Vulkan
    buffer). ``device_name()`` is "cpu" or the path key."""

    def __init__(self, value: np.ndarray | DeviceTensor):
        self._value = value

    @staticmethod
    def ortvalue_from_numpy(array: Any, device_type: str = "cpu", device_id: int = 0) -> OrtValue:
        """A CPU tensor (a device tensor is made by a run: bind it with ``bind_output(name, "gpu")``)."""
        if str(device_type).lower() not in _CPU_DEVICES:
            raise GpuBackendError(f"device tensors cannot be made from NumPy here (device_type {device_type!r}); "
                                  "bind the array as an input, or bind an output to the device and feed it back")
        return OrtValue(np.ascontiguousarray(array))

    @staticmethod
    def ortvalue_from_shape_and_type(shape: Sequence[int], element_type: Any = np.float32,
                                     device_type: str = "cpu", device_id: int = 0) -> OrtValue:
        return OrtValue.ortvalue_from_numpy(np.zeros(tuple(shape), element_type), device_type, device_id)

    def numpy(self) -> np.ndarray:
        """A host copy (a download for a device tensor)."""
        return self._value.numpy() if isinstance(self._value, DeviceTensor) else self._value

    def shape(self) -> list[int]:
        return list(self._value.shape)

    def data_type(self) -> str:
        return f"tensor({_ONNX_TYPE_NAMES.get(np.dtype(self._value.dtype), str(self._value.dtype))})"

    def element_type(self) -> Any:
        return np.dtype(self._value.dtype).type

    def device_name(self) -> str:
        return self._value.path if isinstance(self._value, DeviceTensor) else "cpu"

    def is_tensor(self) -> bool:
        return True

    def has_value(self) -> bool:
        return True

    @property
    def device_tensor(self) -> DeviceTensor | None:
        """The device tensor (None for a CPU value)."""
        return self._value if isinstance(self._value, DeviceTensor) else None

    def texture(self) -> Any:
        """The GL texture form of a device tensor (see ``DeviceTensor.texture``)."""
        if not isinstance(self._value, DeviceTensor):
            raise GpuBackendError("a CPU OrtValue has no texture")
        return self._value.texture()

    def __repr__(self) -> str:
        return f"OrtValue({self.device_name()}, shape={self.shape()})"


_ONNX_TYPE_NAMES = {np.dtype(np.float32): "float", np.dtype(np.float16): "float16", np.dtype(np.int64): "int64",
                    np.dtype(np.int32): "int32", np.dtype(np.uint8): "uint8", np.dtype(np.int8): "int8",
                    np.dtype(np.bool_): "bool", np.dtype(np.float64): "double"}


class IOBinding:
    """onnxruntime's ``IOBinding``: inputs and outputs bound once, kept on the device across runs.

    ``bind_output(name, "gpu")`` (any device name other than "cpu") keeps that output on the
    device of the path that makes it; the same device tensor is written again by later runs of
    this binding (as a pre-allocated output is in onnxruntime), so feed it back or read it before
    the next run. ``bind_ortvalue_input`` takes a CPU or device OrtValue (a device tensor of the
    segment's own path is copied on the device: no upload), and ``bind_gl_texture_input`` a
    caller's GL texture made in ``session.session.gl_context()``. Raw device pointers
    (``bind_input(..., buffer_ptr)``) have no meaning on GL or Kompute and are refused.
    The session's ``stats`` (``sess.session.stats``) counts the uploads and downloads of the last run."""

    def __init__(self, session: InferenceSession):
        self._session = session
        self._inputs: dict[str, np.ndarray | DeviceTensor] = {}
        self._outputs: dict[str, bool] = {}  # name -> on the device
        self._targets: dict[str, DeviceTensor | None] = {}
        self._results: list[OrtValue] = []

    def bind_cpu_input(self, name: str, arr_on_cpu: Any) -> None:
        self._inputs[name] = np.asarray(arr_on_cpu)

    def bind_input(self, name: str, device_type: str, device_id: int, element_type: Any, shape: Sequence[int],
                   buffer_ptr: int) -> None:
        raise GpuBackendError("bind_input with a raw device pointer is not supported by gpubackend (GL and Kompute "
                              "objects have no pointers); use bind_cpu_input, bind_ortvalue_input or "
                              "bind_gl_texture_input")

    def bind_ortvalue_input(self, name: str, ortvalue: OrtValue) -> None:
        self._inputs[name] = ortvalue._value  # noqa: SLF001

    def bind_gl_texture_input(self, name: str, texture: Any) -> None:
        """Bind a moderngl texture of the session's GL context as input ``name`` (shape
        (1, C<=4, H, W), channel c = component c of texel (x, y); see ``GLTextureTensor``)."""
        self._inputs[name] = self._session.session.tensor_from_gl_texture(texture, name)

    def bind_output(self, name: str, device_type: str = "cpu", device_id: int = 0, element_type: Any = None,
                    shape: Sequence[int] | None = None, buffer_ptr: int | None = None) -> None:
        if buffer_ptr is not None:
            raise GpuBackendError("bind_output with a raw device pointer is not supported by gpubackend; "
                                  "bind the output to a device type and read it with get_outputs()")
        on_device = str(device_type).lower() not in _CPU_DEVICES
        self._outputs[name] = on_device
        self._targets.pop(name, None)

    def bind_ortvalue_output(self, name: str, ortvalue: OrtValue) -> None:
        value = ortvalue._value  # noqa: SLF001
        self._outputs[name] = isinstance(value, DeviceTensor)
        self._targets[name] = value if isinstance(value, DeviceTensor) else None

    def clear_binding_inputs(self) -> None:
        self._inputs.clear()

    def clear_binding_outputs(self) -> None:
        self._outputs.clear()
        self._targets.clear()
        self._results = []

    def synchronize_inputs(self) -> None:
        """Nothing to do: binding copies nothing until the run."""

    def synchronize_outputs(self) -> None:
        """Nothing to do: runs complete before they return."""

    def get_outputs(self) -> list[OrtValue]:
        """The last run's outputs, in the order they were bound."""
        return list(self._results)

    def copy_outputs_to_cpu(self) -> list[np.ndarray]:
        return [v.numpy() for v in self._results]

    def _run(self) -> None:
        names = list(self._outputs) or None
        device = {n: self._targets.get(n) for n, on in self._outputs.items() if on}
        results = self._session.session.run_resident(dict(self._inputs), names, device)
        self._results = [OrtValue(r) for r in results]
        for name, value in zip(names or self._session.session.output_names, results):
            if isinstance(value, DeviceTensor):
                self._targets[name] = value  # written again by the next run
