"""Best-effort control of the BLAS thread count NumPy's GEMMs use.

On a small shared machine a multi-threaded OpenBLAS can be many times slower than one thread (its
threads wait for a core that other processes hold), so callers may want to pin it. Nothing here runs
at import time; the caller decides.
"""

from __future__ import annotations

import ctypes
import glob
import os

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
