"""The code paths, best first. Each lives in its own module exposing
``create(precision, disabled_kernels) -> Path`` and (GPU paths) ``canary(precision) -> float``."""

from __future__ import annotations

import importlib
import os

from ..errors import PathUnavailableError
from .base import Path, RunStats, Segment

PATH_KEYS = ("vulkan", "gles31", "gles3", "gles2", "cpu")
GPU_PATH_KEYS = PATH_KEYS[:-1]


def path_module(key: str):
    if key not in PATH_KEYS:
        raise PathUnavailableError(f"unknown path {key!r}; choose one of {', '.join(PATH_KEYS)} or 'auto'")
    try:
        return importlib.import_module(f"{__name__}.{key}")
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.startswith(f"{__name__}.{key}"):
            raise PathUnavailableError(f"the {key} path is not built in this version of gpubackend") from exc
        raise


def create_path(key: str, precision: str = "fp32", disabled_kernels: frozenset[str] = frozenset()) -> Path:
    module = path_module(key)
    path = module.create(precision=precision, disabled_kernels=disabled_kernels)
    if key != "cpu" and os.environ.get("GPUBACKEND_FAULT"):  # test-only: kernel-filtered faults
        from capability_probe import faults

        faults.scope_segments(path, getattr(module, "kernel_name", None))
    return path


__all__ = ["PATH_KEYS", "GPU_PATH_KEYS", "Path", "RunStats", "Segment", "create_path", "path_module"]
