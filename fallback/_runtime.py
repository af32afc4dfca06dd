"""What decides how fast the NumPy kernels run: kernel threads, BLAS threads and malloc.

Nothing here runs at import: importing ``fallback`` (or ``gpubackend``) changes no process-wide
setting. The CPU path scopes its BLAS thread count to each run with :func:`blas_threads`
(threadpoolctl restores the previous count afterwards), and :func:`tune_malloc` changes glibc's
allocator only when called (by the user, or by the ``gpubackend`` commands that own their process).

Kernel threads: within :func:`kernel_threads` (the CPU path's numpy engine wraps each run in it,
with one thread per usable core by default) the heavy kernels split their work into contiguous
independent parts (output channels, column bands) run by :func:`parallel` on a small thread pool;
NumPy releases the GIL inside BLAS calls and ufunc loops, so the parts run on separate cores. The
parts compute each output element with the same operations as one thread (GEMMs split by rows or
columns of the output, not along their depth), so results agree within BLAS's rounding (bit for
bit on some CPUs; OpenBLAS's AVX-512 edge kernels sum a part's last columns in another order).
Outside that scope (the reference kernels as tests call them) everything runs on the
calling thread. The pool is made on first use, never at import.

Why one BLAS thread is the CPU path's default inside a run: on a small shared machine a
multi-threaded OpenBLAS can be many times slower than one thread, its threads spinning while they
wait for a core that other processes (or onnxruntime's pool) hold. Measured here under load, a
MobileNetV2-style model took 928 ms with NumPy's default 2 BLAS threads and 56 ms with one.
``SessionOptions.blas_threads`` (or ``GPUBACKEND_BLAS_THREADS``) chooses another count.

On idle cores, though, BLAS's own threads split a GEMM faster than the pool does (they spin, a pool
thread has to be woken), so where the count is left at its default the CPU path times both:
GEMM and split call sites choose their way by timing (:class:`FastestWay`, :func:`matmul`,
:func:`parallel`), and whole runs are timed with and without BLAS's threads allowed
(:func:`allow_blas_threads`), each set for the call or the run only.
"""

from __future__ import annotations

import contextlib
import contextvars
import ctypes
import math
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor, wait

import numpy as np

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


# the BLAS thread count a :func:`blas_threads` block set (None outside one: BLAS left alone)
_blas_count: contextvars.ContextVar[int | None] = contextvars.ContextVar("fallback_blas_count", default=None)
_blas_libs: list | None = None


@contextlib.contextmanager
def blas_threads(n: int | None) -> Iterator[None]:
    """Within the block NumPy's BLAS uses ``n`` threads; the previous count is restored on exit.
    ``None`` (or no threadpoolctl) leaves BLAS alone."""
    global _blas_libs
    ctl = _threadpools() if n else None
    if ctl is None:
        yield
        return
    if _blas_libs is None:
        _blas_libs = list(ctl.select(user_api="blas").lib_controllers)
    token = _blas_count.set(int(n))
    try:
        with ctl.limit(limits=int(n), user_api="blas"):
            yield
    finally:
        _blas_count.reset(token)


@contextlib.contextmanager
def _own_blas_threads(n: int) -> Iterator[None]:
    """Within a run that set one BLAS thread: BLAS's own ``n`` threads for one call, then one again."""
    for lib in _blas_libs or ():
        lib.set_num_threads(n)
    try:
        yield
    finally:
        for lib in _blas_libs or ():
            lib.set_num_threads(1)


def _timing_ways() -> bool:
    """Whether call sites may time their ways here: inside a run that set one BLAS thread."""
    return _blas_count.get() == 1 and bool(_blas_libs)


_blas_threads_allowed: contextvars.ContextVar[bool] = contextvars.ContextVar("fallback_blas_threads_allowed",
                                                                              default=True)


@contextlib.contextmanager
def allow_blas_threads(allowed: bool) -> Iterator[None]:
    """Within the block a GEMM call site may (or may not) take BLAS's own threads (see
    :func:`matmul`). BLAS's threads keep spinning for a while after each call, on a core the
    kernel-thread pool's next parts (or another runtime's threads) may want, a cost no single
    call site's timing sees; so the CPU path times whole runs with and without them
    (:class:`FastestWay` per input shapes) and sets this per run."""
    token = _blas_threads_allowed.set(bool(allowed))
    try:
        yield
    finally:
        _blas_threads_allowed.reset(token)


_kernel_threads: contextvars.ContextVar[int] = contextvars.ContextVar("fallback_kernel_threads", default=1)
_pool: ThreadPoolExecutor | None = None
_pool_pid = 0
_pool_lock = threading.Lock()

# a part smaller than this many element operations (about a millisecond of work) is not worth a
# hand-off to another thread. A hand-off costs far more than its submit and wake-up: while both
# threads run, every one of the part's NumPy calls re-takes the GIL against the other thread. With
# 1 << 18 (the earlier value) selfie made 48 hand-offs per run and spent 16 ms more CPU time than
# one thread (46 against 30 ms; mobilenetv3 46 against 34 ms), and its 2-thread wall time came out
# slower than one thread's; with 1 << 22 it makes none and the CPU time equals one thread's (measured
# under load, interleaved in one process: benchmarks/bench_cpu.py --split-sweep)
MIN_PART_WORK = 1 << 22


def usable_cores() -> int:
    """Cores this process may run on (its affinity mask where the OS has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


@contextlib.contextmanager
def kernel_threads(n: int | None) -> Iterator[None]:
    """Within the block (in this thread or task) kernels split large work over ``n`` threads
    (None or 0: one per usable core); the previous count is restored on exit."""
    token = _kernel_threads.set(max(1, int(n)) if n else usable_cores())
    try:
        yield
    finally:
        _kernel_threads.reset(token)


def current_threads() -> int:
    """The kernel thread count in force here (1 outside :func:`kernel_threads`)."""
    return _kernel_threads.get()


def _executor() -> ThreadPoolExecutor:
    global _pool, _pool_pid
    with _pool_lock:
        # a forked child inherits the pool object but not its threads: it makes its own
        if _pool is None or _pool_pid != os.getpid():
            _pool = ThreadPoolExecutor(max_workers=max(2, usable_cores()), thread_name_prefix="fallback-kernel")
            _pool_pid = os.getpid()
        return _pool


def _run_part(fn: Callable[[int, int], object], start: int, stop: int) -> None:
    _kernel_threads.set(1)  # a part never splits again: the pool's threads never wait on the pool
    fn(start, stop)


# ---- timed choices between interchangeable ways -----------------------------------------

class FastestWay:
    """Which of ``ways`` interchangeable ways to run one call site (a compiled kernel's GEMM or
    split, a whole run of a CPU segment) is fastest here and now, by timing them: each once, then
    the fastest, re-timing the others now and then so a change of load is followed. A way is first
    re-timed after 8 calls; each time it loses again the wait grows by twice the factor it was
    slower (at least doubling, at most 256 calls), so a way that is much slower under load (BLAS's
    threads beside busy processes: 20-80x on a small GEMM) costs little. A re-timed way's fresh
    sample replaces its old time; the way in use keeps a running mean and gives way only to one at
    least 10% faster (timing noise would otherwise flip between two close ones). The first call is
    not timed: it pays for what later calls reuse (plans, buffers, page faults, BLAS's threads)."""

    __slots__ = ("seconds", "current", "calls", "due", "gap", "warm")
    RECHECK_FIRST, RECHECK_MAX, MARGIN = 8, 256, 0.9

    def __init__(self, ways: int) -> None:
        self.seconds: list[float | None] = [None] * ways
        self.current: int | None = None  # the way in use once every way has a time
        self.warm = False
        self._restart()

    def _restart(self) -> None:
        n = len(self.seconds)
        self.calls = 0
        self.gap = [self.RECHECK_FIRST] * n  # calls between re-timings of each way
        self.due = [self.RECHECK_FIRST] * n  # the call count at which each way is re-timed

    def pick(self) -> int:
        if self.current is None:
            return self.seconds.index(None)
        self.calls += 1
        for way, due in enumerate(self.due):
            if way != self.current and self.calls >= due:
                return way
        return self.current

    def record(self, way: int, seconds: float) -> None:
        if not self.warm:
            self.warm = True
            return
        old = self.seconds[way]
        self.seconds[way] = 0.75 * old + 0.25 * seconds if way == self.current and old is not None else seconds
        if None in self.seconds:
            return
        times: list[float] = self.seconds  # type: ignore[assignment]
        fastest = min(range(len(times)), key=times.__getitem__)
        if self.current is None or (fastest != self.current and times[fastest] < self.MARGIN * times[self.current]):
            self.current = fastest
            self._restart()
        elif way != self.current:  # re-timed, and still slower
            slower = times[way] / max(times[self.current], 1e-12)
            self.gap[way] = min(self.RECHECK_MAX, self.gap[way] * max(2, int(2 * slower)))
            self.due[way] = self.calls + self.gap[way]


def parallel(fn: Callable[[int, int], object], count: int, work: int = 0, site: FastestWay | None = None) -> None:
    """``fn(start, stop)`` over ``range(count)`` cut into contiguous parts, one per kernel thread,
    the first on the calling thread. ``work``: element operations of the whole call; parts of
    fewer than ``MIN_PART_WORK`` are merged (a small call runs as ``fn(0, count)``). The parts run
    in copies of the caller's context (its ``np.errstate``), must write disjoint outputs and use
    their own scratch buffers. The first exception of any part is raised after all parts end.

    ``site`` (:func:`split_site`, one per call site), for parts that are mostly GEMMs: inside a run
    that allows BLAS's threads (:func:`allow_blas_threads`) the site also times ``fn(0, count)`` on
    this thread with BLAS's own threads in its GEMMs, and keeps the faster way (see :func:`matmul`
    for why either can win)."""
    parts = min(_kernel_threads.get(), count, max(1, work // MIN_PART_WORK))
    if parts <= 1:
        fn(0, count)
        return
    if site is None or not _timing_ways() or not _blas_threads_allowed.get():
        _split(fn, count, parts)
        return
    way = site.pick()
    start = time.perf_counter()
    if way == SPLIT_BLAS_THREADS:
        with _own_blas_threads(_kernel_threads.get()):
            fn(0, count)
    else:
        _split(fn, count, parts)
    site.record(way, time.perf_counter() - start)


# the ways of a ``parallel`` call site
SPLIT_POOL, SPLIT_BLAS_THREADS = 0, 1


def split_site() -> FastestWay:
    """The :class:`FastestWay` of one call site of :func:`parallel` whose parts are mostly GEMMs."""
    return FastestWay(2)


def _split(fn: Callable[[int, int], object], count: int, parts: int) -> None:
    """``fn`` over ``range(count)`` in ``parts`` contiguous parts on the kernel-thread pool (see
    :func:`parallel`)."""
    bounds = [count * i // parts for i in range(parts + 1)]
    pool = _executor()
    futures = [pool.submit(contextvars.copy_context().run, _run_part, fn, bounds[i], bounds[i + 1])
               for i in range(1, parts)]
    try:
        fn(bounds[0], bounds[1])
        # parts no pool thread has started yet (on a loaded machine the pool may not get a core for
        # milliseconds) run here rather than being waited for: never slower than one thread by more
        # than the hand-off
        for i, f in enumerate(futures, 1):
            if f.cancel():
                fn(bounds[i], bounds[i + 1])
    finally:
        for f in futures:
            f.cancel()
        # (a cancelled future counts as done only once a pool thread has dequeued it: not waited for)
        wait([f for f in futures if not f.cancelled()])
    for f in futures:
        if not f.cancelled():
            f.result()


# the ways of a GEMM call site (``matmul``'s ``site``)
GEMM_ONE_THREAD, GEMM_POOL, GEMM_BLAS_THREADS = 0, 1, 2
def gemm_site() -> FastestWay:
    """The :class:`FastestWay` of one GEMM call site, for :func:`matmul`."""
    return FastestWay(3)


def matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None,
           site: FastestWay | None = None) -> np.ndarray:
    """``np.matmul(a, b, out=out)`` for a (..., M, K) @ (..., K, N) GEMM, split over the kernel
    threads along N (or along M when M is the larger), each part one BLAS call per matrix.

    Given the call site's ``site`` (:func:`gemm_site`), inside a run that set one BLAS thread
    (:func:`blas_threads` (1)), whichever of three ways it has timed fastest: one call on this
    thread, that split over the kernel-thread pool, or one call with BLAS's own threads. Which wins
    depends on the machine and its load. BLAS's threads spin between calls, so on idle cores they
    start at once where a pool thread is woken (tens of microseconds on this VM, and its part then
    runs slower than on the calling thread): on 2 idle vCPUs the GEMMs of YOLOv8n's 3x3 convs took
    0.55-0.65x the pool split's time in BLAS's threads. On busy cores BLAS's threads are much
    slower (each split waits for both to get a core: a whole YOLOv8n run 2.3x slower beside two
    busy processes), where the pool split, whose parts not started yet run on the calling thread,
    holds up. The ways differ only in rounding: a part's edge columns (AVX-512 OpenBLAS)
    and BLAS's threads may sum some blocks in another order (differences of an ulp or a few)."""
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    threads = _kernel_threads.get()
    if threads <= 1 or m * n * k < 2 * MIN_PART_WORK:
        if out is None and m * n >= 1 << 16:
            out = empty(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (m, n), np.result_type(a, b))
        return np.matmul(a, b, out=out)
    if out is None:
        out = empty(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (m, n), np.result_type(a, b))
    timed = site is not None and _timing_ways()
    way = site.pick() if timed else GEMM_POOL  # type: ignore[union-attr]
    if way == GEMM_BLAS_THREADS and not _blas_threads_allowed.get():
        way, timed = GEMM_POOL, False
    start = time.perf_counter()
    if way == GEMM_ONE_THREAD:
        np.matmul(a, b, out=out)
    elif way == GEMM_BLAS_THREADS:
        with _own_blas_threads(threads):
            np.matmul(a, b, out=out)
    else:
        parts = min(threads, max(n, m), max(1, out.size * k // MIN_PART_WORK))
        if n >= m:
            _split(lambda i, j: np.matmul(a, b[..., i:j], out=out[..., i:j]), n, parts)
        else:
            _split(lambda i, j: np.matmul(a[..., i:j, :], b, out=out[..., i:j, :]), m, parts)
    if timed:
        site.record(way, time.perf_counter() - start)  # type: ignore[union-attr]
    return out


def elementwise(fn: Callable[[np.ndarray, np.ndarray | None], np.ndarray], x: np.ndarray,
                out: np.ndarray | None = None) -> np.ndarray:
    """``fn(x, out)`` for an element-wise float function that writes its result into ``out`` (a new
    array when None), split over the kernel threads in contiguous runs of elements."""
    # an activation is a few passes over its elements: 4 operations each is the estimate
    if (_kernel_threads.get() <= 1 or 4 * x.size < 2 * MIN_PART_WORK or x.dtype.kind != "f"
            or not x.flags.c_contiguous or (out is not None and (not out.flags.c_contiguous or out.shape != x.shape
                                                                  or out.dtype != x.dtype))):
        return fn(x, out)
    if out is None:
        out = empty(x.shape, x.dtype)
    xf, of = x.reshape(-1), out.reshape(-1)
    parallel(lambda a, b: fn(xf[a:b], of[a:b]), x.size, 4 * x.size)
    return out


def binary(ufunc: np.ufunc, a: np.ndarray, b: np.ndarray, out: np.ndarray) -> np.ndarray:
    """``ufunc(a, b, out=out)`` (broadcasting into ``out``'s shape), split over the kernel threads
    along the first axis of ``out`` long enough to give every thread a part."""
    threads = _kernel_threads.get()
    axis = next((k for k, d in enumerate(out.shape) if d >= threads), None)
    if threads <= 1 or out.size < 2 * MIN_PART_WORK or axis is None:
        return ufunc(a, b, out=out)
    ops = [v.reshape((1,) * (out.ndim - v.ndim) + v.shape) for v in (a, b)]
    lead = (slice(None),) * axis

    def part(i: int, j: int) -> None:
        cut = lead + (slice(i, j),)
        ufunc(*(v[cut] if v.shape[axis] > 1 else v for v in ops), out=out[cut])

    parallel(part, out.shape[axis], out.size)
    return out


# ---- buffer reuse across runs --------------------------------------------------------------

_buffers: contextvars.ContextVar[BufferPool | None] = contextvars.ContextVar("fallback_buffers", default=None)

# buffers smaller than this come from malloc's heap anyway (no page faults): not pooled
MIN_POOLED_BYTES = 1 << 18


class BufferPool:
    """Large kernel outputs and scratch buffers kept for reuse, within a run and from run to run.

    Each fresh large buffer of a run costs page faults (glibc maps and unmaps big blocks, or trims
    its heap, between runs: selfie 256x256 paid 1,744 faults, about 15% of its CPU time, measured
    under load). A buffer is handed out again only when nothing but the pool refers to it (its
    reference count: no array, view or memoryview of it is alive), so a tensor a caller still holds
    is never overwritten. ``max_bytes`` bounds what the pool keeps."""

    def __init__(self, max_bytes: int = 1 << 28) -> None:
        self._lock = threading.Lock()
        self._by_key: dict[tuple, list[np.ndarray]] = {}
        self._bytes = 0
        self.max_bytes = max_bytes

    def take(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        key = (shape, dtype)
        with self._lock:
            stack = self._by_key.get(key)
            if stack:
                for buf in stack:
                    # the list's reference, the loop variable's and getrefcount's own argument
                    if sys.getrefcount(buf) <= 3:
                        return buf
            buf = np.empty(shape, dtype=dtype)
            if self._bytes + buf.nbytes <= self.max_bytes:
                self._by_key.setdefault(key, []).append(buf)
                self._bytes += buf.nbytes
            return buf

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        """Within the block (and the kernel threads' parts) :func:`empty` draws from this pool."""
        token = _buffers.set(self)
        try:
            yield
        finally:
            _buffers.reset(token)


def empty(shape: tuple[int, ...], dtype: np.dtype | type) -> np.ndarray:
    """``np.empty`` for a kernel's output or scratch buffer: from the active :class:`BufferPool`
    when the buffer is large (a reused buffer holds old values: write every element)."""
    pool = _buffers.get()
    if pool is not None:
        shape = tuple(int(d) for d in shape)
        dtype = np.dtype(dtype)
        if math.prod(shape) * dtype.itemsize >= MIN_POOLED_BYTES:
            return pool.take(shape, dtype)
    return np.empty(shape, dtype=dtype)


def zeros(shape: tuple[int, ...], dtype: np.dtype | type) -> np.ndarray:
    """``np.zeros`` through :func:`empty`."""
    if _buffers.get() is None:
        return np.zeros(shape, dtype=dtype)
    buf = empty(shape, dtype)
    buf.fill(0)
    return buf


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
