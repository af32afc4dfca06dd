"""ONNX backend API (``onnx.backend.base.Backend``) over :class:`gpubackend.Session`.

``device`` describes where inputs and outputs live, as in ONNX's runner: only "CPU" (host
memory) is supported, whichever path computes. Choose the path with the ``path`` keyword
(default: "auto", which ``GPUBACKEND_PATH`` can force), or make a backend class bound to one
path with :func:`for_path` for harnesses that only pass ``device``."""

from __future__ import annotations

import logging
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep, Device, DeviceType

from .errors import GpuBackendError, InputError, OptionError
from .session import Session

log = logging.getLogger("gpubackend")


def _close_quietly(session: Session) -> None:
    try:
        session.close()
    except GpuBackendError as exc:  # e.g. collected on a thread that cannot reach its GL context
        log.warning("could not close a backend session: %s", exc)


class GpuBackendRep(BackendRep):
    """A prepared model. Its session is closed by :meth:`close` (or ``with``), or when the
    rep is garbage-collected."""

    def __init__(self, session: Session):
        self.session = session
        self._finalizer = weakref.finalize(self, _close_quietly, session)

    def close(self) -> None:
        self._finalizer()

    def __enter__(self) -> GpuBackendRep:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def run(self, inputs: Any, **kwargs: Any) -> tuple[np.ndarray, ...]:
        names = self.session.input_names
        if isinstance(inputs, dict):
            feeds = dict(inputs)
        else:
            if isinstance(inputs, np.ndarray):
                inputs = [inputs]
            inputs = list(inputs)
            if len(inputs) != len(names):
                raise InputError(f"the model takes {len(names)} input(s) {names}, got {len(inputs)}")
            feeds = dict(zip(names, inputs))
        return tuple(self.session.run(feeds))


class GpuBackend(Backend):
    default_path = "auto"
    default_precision = "fp32"
    default_fallback = True

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return Device(device).type == DeviceType.CPU

    @classmethod
    def prepare(cls, model: Any, device: str = "CPU", **kwargs: Any) -> GpuBackendRep:
        if not cls.supports_device(device):
            raise OptionError(f"gpubackend takes and returns host arrays; device {device!r} is not supported")
        session = Session(model, path=kwargs.get("path", cls.default_path),
                          precision=kwargs.get("precision", cls.default_precision),
                          fallback=kwargs.get("fallback", cls.default_fallback))
        return GpuBackendRep(session)

    @classmethod
    def run_model(cls, model: Any, inputs: Any, device: str = "CPU", **kwargs: Any) -> tuple[np.ndarray, ...]:
        with cls.prepare(model, device, **kwargs) as rep:
            return rep.run(inputs)

    @classmethod
    def run_node(cls, node: onnx.NodeProto, inputs: Sequence[Any], device: str = "CPU",
                 outputs_info: Sequence[tuple[Any, Any]] | None = None, **kwargs: Any) -> tuple[np.ndarray, ...]:
        """Run one node: wraps it in a one-node model (opset from ``opset_version``, default 17)."""
        arrays = [np.asarray(x) for x in inputs]
        in_names = [n for n in node.input]
        graph_inputs = [onnx.helper.make_tensor_value_info(n, onnx.helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
                        for n, a in zip(in_names, arrays) if n]
        opset = kwargs.pop("opset_version", 17)
        opsets = [onnx.helper.make_opsetid("", opset)]
        # Output types come from shape inference on the output-less graph.
        bare = onnx.helper.make_graph([node], "run_node", graph_inputs, [])
        probe = onnx.helper.make_model(bare, opset_imports=opsets)
        try:
            inferred = {vi.name: vi for vi in onnx.shape_inference.infer_shapes(probe).graph.value_info}
        except Exception:
            inferred = {}
        elem = graph_inputs[0].type.tensor_type.elem_type if graph_inputs else onnx.TensorProto.FLOAT
        graph_outputs = [inferred.get(n) or onnx.helper.make_tensor_value_info(n, elem, []) for n in node.output if n]
        graph = onnx.helper.make_graph([node], "run_node", graph_inputs, graph_outputs)
        model = onnx.helper.make_model(graph, opset_imports=opsets)
        with cls.prepare(model, device, **kwargs) as rep:
            return rep.run({n: a for n, a in zip(in_names, arrays) if n})


def for_path(path: str, precision: str = "fp32", fallback: bool = True) -> type[GpuBackend]:
    """A backend class whose sessions use ``path`` (for runners that only pass ``device``)."""
    return type(f"GpuBackend_{path}_{precision}", (GpuBackend,),
                {"default_path": path, "default_precision": precision, "default_fallback": fallback})


prepare = GpuBackend.prepare
run_model = GpuBackend.run_model
run_node = GpuBackend.run_node
supports_device = GpuBackend.supports_device
