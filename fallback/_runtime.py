"""Opt-in process-level knobs that decide how fast the NumPy kernels run: BLAS threads and malloc.

Nothing here runs at import: importing ``fallback`` (or ``gpubackend``) changes no process-wide
setting. The CPU path scopes its BLAS thread count to each run with :func:`blas_threads`
(threadpoolctl restores the previous count afterwards), and :func:`tune_malloc` changes glibc's
allocator only when called (by the user, or by the ``gpubackend`` commands that own their process).

Why one BLAS thread is the CPU path's default inside a run: on a small shared machine a
multi-threaded OpenBLAS can be many times slower than one thread, its threads spinning while they
wait for a core that other processes (or onnxruntime's pool) hold. Measured here under load, a
MobileNetV2-style model took 928 ms with NumPy's default 2 BLAS threads and 56 ms with one.
``SessionOptions.blas_threads`` (or ``GPUBACKEND_BLAS_THREADS``) chooses another count.
"""

from __future__ import annotations

import contextlib
import ctypes
import sys
import threading
from collections.abc import Iterator

_controller = None
_controller_lock = threading.Lock()


def _threadpools():  # -> threadpoolctl.ThreadpoolController | None
    """One controller for the process: building it scans the loaded libraries (milliseconds)."""
    global _controller
    with _controller_lock:
        if _controller is None:
            try:
                from threadpoolctl import ThreadpoolController
            except ImportError:  # optional at run time: without it BLAS threads are left alone
                _controller = False
            else:
                _controller = ThreadpoolController()
        return _controller or None


def get_blas_threads() -> int | None:
    """Threads NumPy's BLAS uses now, or None when threadpoolctl cannot see a BLAS library."""
    ctl = _threadpools()
    if ctl is None:
        return None
    blas = ctl.select(user_api="blas")
    return max((int(lib.num_threads) for lib in blas.lib_controllers), default=None)


@contextlib.contextmanager
def blas_threads(n: int | None) -> Iterator[None]:
    """Within the block NumPy's BLAS uses ``n`` threads; the previous count is restored on exit.
    ``None`` (or no threadpoolctl) leaves BLAS alone."""
    ctl = _threadpools() if n else None
    if ctl is None:
        yield
        return
    with ctl.limit(limits=int(n), user_api="blas"):
        yield


# glibc mallopt parameters
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_malloc_tuned = False


def tune_malloc() -> bool:
    """Keep freed buffers in the heap instead of returning them to the OS (glibc only). Opt-in:
    call it once at start-up if the process is yours. Importing or running gpubackend never calls
    it; only its own commands ``gpubackend run|bench|conformance``, which own their process, do.

    By default glibc serves every allocation above a (dynamic) threshold with a fresh mmap and gives
    the memory back on free, so each kernel's multi-megabyte temporaries and outputs page-fault on
    first touch on every call. On this VM that alone made a MobileNet stem convolution 4x slower
    (840 faults per call). Raising the mmap and trim thresholds lets the heap recycle those buffers,
    which is what onnxruntime's arena allocator achieves. Process-wide, irreversible and idempotent;
    returns whether it took effect.
    """
    global _malloc_tuned
    if _malloc_tuned:
        return True
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        ok = libc.mallopt(_M_MMAP_THRESHOLD, 32 << 20) == 1
        ok = libc.mallopt(_M_TRIM_THRESHOLD, 256 << 20) == 1 and ok
    except (OSError, AttributeError):
        return False
    _malloc_tuned = ok
    return ok
