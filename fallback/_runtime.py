"""Process-level knobs that decide how fast NumPy kernels run: BLAS threads and malloc behaviour.

On a small shared machine a multi-threaded OpenBLAS can be many times slower than one thread: its
threads spin and wait for a core that other processes (or onnxruntime's own pool) hold. Measured
here under load, a MobileNetV2-style model took 928 ms with NumPy's default 2 BLAS threads and 56 ms
with one. ``default_blas_threads()`` therefore pins one thread unless the user chose otherwise
(``GPUBACKEND_BLAS_THREADS``, or OpenBLAS's own ``OPENBLAS_NUM_THREADS`` / ``OMP_NUM_THREADS``).
"""

from __future__ import annotations

import ctypes
import glob
import os
import sys

import numpy as np

_SETTERS = ("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads", "openblas_set_num_threads64_",
            "openblas_set_num_threads")
_GETTERS = ("scipy_openblas_get_num_threads64_", "scipy_openblas_get_num_threads", "openblas_get_num_threads64_",
            "openblas_get_num_threads")
_lib: ctypes.CDLL | None | bool = None


def _openblas() -> ctypes.CDLL | None:
    global _lib
    if _lib is None:
        _lib = False
        base = os.path.dirname(os.path.dirname(np.__file__))
        for pattern in ("numpy.libs/libscipy_openblas*.so*", "numpy.libs/libopenblas*.so*", "numpy/.dylibs/*openblas*"):
            for path in glob.glob(os.path.join(base, pattern)):
                try:
                    _lib = ctypes.CDLL(path)
                    break
                except OSError:
                    continue
            if _lib:
                break
    return _lib or None


def get_blas_threads() -> int | None:
    """Threads NumPy's bundled OpenBLAS uses, or None when it cannot be found."""
    lib = _openblas()
    if lib is None:
        return None
    for name in _GETTERS:
        fn = getattr(lib, name, None)
        if fn is not None:
            return int(fn())
    return None


def set_blas_threads(n: int) -> int | None:
    """Set NumPy's OpenBLAS thread count; returns the previous count, or None if not possible."""
    lib = _openblas()
    if lib is None:
        return None
    prev = get_blas_threads()
    for name in _SETTERS:
        fn = getattr(lib, name, None)
        if fn is not None:
            fn(int(max(1, n)))
            return prev
    return None


# glibc mallopt parameters
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_malloc_tuned: bool | None = None


def tune_malloc() -> bool:
    """Keep freed buffers in the heap instead of returning them to the OS (glibc only).

    By default glibc serves every allocation above a (dynamic) threshold with a fresh mmap and gives
    the memory back on free, so each kernel's multi-megabyte temporaries and outputs page-fault on
    first touch on every call. On this VM that alone made a MobileNet stem convolution 4x slower
    (840 faults per call). Raising the mmap and trim thresholds lets the heap recycle those buffers,
    which is what onnxruntime's arena allocator achieves. Process-wide and idempotent; returns
    whether it took effect. ``GPUBACKEND_MALLOC_TUNING=0`` in the environment disables it.
    """
    global _malloc_tuned
    if _malloc_tuned is not None:
        return _malloc_tuned
    _malloc_tuned = False
    if os.environ.get("GPUBACKEND_MALLOC_TUNING", "1") == "0" or not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        ok = libc.mallopt(_M_MMAP_THRESHOLD, 32 << 20) == 1
        ok = libc.mallopt(_M_TRIM_THRESHOLD, 256 << 20) == 1 and ok
    except (OSError, AttributeError):
        return False
    _malloc_tuned = ok
    return ok


def default_blas_threads() -> int | None:
    """Apply the package's BLAS threading policy (see the module docstring); returns the count set."""
    env = os.environ.get("GPUBACKEND_BLAS_THREADS", "").strip()
    if env:
        try:
            n = int(env)
        except ValueError:
            return None
        set_blas_threads(n)
        return n
    if os.environ.get("OPENBLAS_NUM_THREADS") or os.environ.get("OMP_NUM_THREADS"):
        return None
    set_blas_threads(1)
    return 1
