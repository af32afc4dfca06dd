"""The code paths, best first. Each lives in its own module exposing
``create(precision, disabled_kernels) -> Path`` and (GPU paths) ``canary(precision) -> float``."""

from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING

from ..errors import PathUnavailableError
from .base import Path, RunStats, Segment

if TYPE_CHECKING:
    from ..options import SessionOptions

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


def create_path(key: str, precision: str = "fp32", disabled_kernels: frozenset[str] = frozenset(),
                options: SessionOptions | None = None) -> Path:
    """A path object; ``options`` (resolved) carries the path-specific knobs. ``precision``
    "fp16-compute" is fp16 storage with ``path.arithmetic = "fp16"``."""
    module = path_module(key)
    arithmetic = "fp32"
    if precision == "fp16-compute":
        from .fp16_compute import STORAGE

        precision, arithmetic = STORAGE, "fp16"
    if key == "cpu" and options is not None:
        path = module.create(precision=precision, disabled_kernels=disabled_kernels, engine=options.cpu_engine,
                             blas_threads=options.blas_threads, ort_threads=options.intra_op_num_threads,
                             ort_config=dict(options.config_entries))
    elif key == "gles3" and options is not None and options.gles3_render_targets is not None:
        path = module.create(precision=precision, disabled_kernels=disabled_kernels,
                             targets=options.gles3_render_targets)
    else:
        path = module.create(precision=precision, disabled_kernels=disabled_kernels)
    path.arithmetic = arithmetic
    if key == "vulkan" and options is not None:
        path.record_once = options.vulkan_record_once
    if key != "cpu" and os.environ.get("GPUBACKEND_FAULT"):  # test-only: kernel-filtered faults
        from capability_probe import faults

        faults.scope_segments(path, getattr(module, "kernel_name", None))
    return path


__all__ = ["PATH_KEYS", "GPU_PATH_KEYS", "Path", "RunStats", "Segment", "create_path", "path_module"]
