"""The exceptions gpubackend raises. Every user-facing error is a GpuBackendError."""

from __future__ import annotations


class GpuBackendError(Exception):
    """Base of every error gpubackend raises on purpose."""


class ModelError(GpuBackendError):
    """The model could not be read, parsed, checked or prepared."""


class UnsupportedOperatorError(GpuBackendError):
    """No allowed path can run some nodes. ``nodes`` lists (node name, op type, reasons)."""

    def __init__(self, message: str, nodes: list[tuple[str, str, list[str]]] | None = None):
        super().__init__(message)
        self.nodes = nodes or []


class InputError(GpuBackendError, ValueError):
    """The feeds given to ``run`` do not fit the model (missing name, shape, dtype)."""


class PathUnavailableError(GpuBackendError):
    """A code path was asked for but is not built, not available or not verified here."""


class DeviceError(GpuBackendError):
    """A GPU driver failed while running (context lost, out of memory, ...)."""


class OptionError(GpuBackendError, ValueError):
    """An option given to Session or a command is not one of the accepted values."""


class NodeError(GpuBackendError, ValueError):
    """A node failed at run time on the values it was given (e.g. an index out of range)."""

    def __init__(self, message: str, node: str = "", op_type: str = ""):
        super().__init__(message)
        self.node = node
        self.op_type = op_type


class ResourceLimitError(ModelError):
    """The model, specialised for the given input shapes, would exceed a resource limit (tensor
    size, total memory, work per node); see :mod:`gpubackend.limits`."""

    def __init__(self, message: str, node: str = "", op_type: str = ""):
        super().__init__(message)
        self.node = node
        self.op_type = op_type
