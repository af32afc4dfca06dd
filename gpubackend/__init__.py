"""gpubackend: ONNX inference on GL ES 2.0/3.0/3.1 and Vulkan shaders, verified per device,
with a pure CPU path for whatever a device cannot run correctly."""

from __future__ import annotations

from typing import Any

from .device_tensor import DeviceTensor
from .errors import (
    DeviceError,
    GpuBackendError,
    InputError,
    ModelError,
    OptionError,
    PathUnavailableError,
    UnsupportedOperatorError,
)
from .onnxruntime_api import (
    InferenceSession,
    IOBinding,
    ModelMetadata,
    NodeArg,
    OrtValue,
    RunOptions,
    get_all_providers,
    get_available_providers,
)
from .options import ExecutionMode, GraphOptimizationLevel, SessionOptions
from .session import Session

__version__ = "0.1.0"


def probe(refresh: bool = False) -> Any:
    """What this machine offers and what was verified (see ``capability_probe.probe``)."""
    from capability_probe import probe as _probe

    return _probe(refresh=refresh)


__all__ = ["Session", "SessionOptions", "InferenceSession", "RunOptions", "NodeArg", "ModelMetadata",
           "IOBinding", "OrtValue", "DeviceTensor",
           "GraphOptimizationLevel", "ExecutionMode", "get_all_providers", "get_available_providers", "probe",
           "GpuBackendError", "ModelError", "UnsupportedOperatorError", "InputError", "PathUnavailableError",
           "DeviceError", "OptionError", "__version__"]
