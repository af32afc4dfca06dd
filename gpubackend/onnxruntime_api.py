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

    def io_binding(self) -> Any:
        raise GpuBackendError("IOBinding (device-resident inputs and outputs) is not implemented in gpubackend yet")

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
