"""The NumPy kernels split over threads (``fallback.kernel_threads``) give the single-thread results
within fp32 rounding.

Each case picks shapes that reach one branch of ``fallback.conv`` and makes it split into several
parts; NaN and Inf in the input must land where the single-thread run puts them.
"""

from __future__ import annotations

import threading
import time
import warnings

import numpy as np
import pytest

from gpubackend import fallback
from gpubackend.fallback import _runtime

CONV_CASES = {
    # name: (input shape, weight shape, attrs)
    "depthwise_gemm": ((1, 24, 40, 40), (24, 1, 3, 3), dict(group=24, pads=[1, 1, 1, 1])),
    "depthwise_gemm_stride2_mult2": ((2, 8, 33, 31), (16, 1, 5, 5), dict(group=8, pads=[2, 2, 2, 2], strides=[2, 2])),
    "depthwise_large_planes": ((1, 4, 140, 130), (4, 1, 3, 3), dict(group=4, pads=[1, 1, 1, 1])),
    "pointwise_split_columns": ((1, 16, 48, 48), (32, 16, 1, 1), {}),
    "pointwise_split_rows": ((2, 64, 5, 5), (96, 64, 1, 1), dict(strides=[1, 1])),
    "pointwise_strided_grouped": ((1, 16, 30, 30), (8, 8, 1, 1), dict(group=2, strides=[2, 2])),
    "shifted_gemm": ((2, 12, 70, 66), (10, 12, 3, 3), dict(pads=[1, 2, 1, 0], dilations=[2, 1])),
    "phase_columns_stem": ((1, 3, 96, 90), (8, 3, 3, 3), dict(pads=[1, 1, 1, 1], strides=[2, 2])),
    "full_columns_stem": ((1, 3, 96, 90), (8, 3, 3, 3), dict(pads=[1, 1, 1, 1], strides=[2, 2])),
    "full_columns_32_to_40": ((2, 32, 20, 18), (40, 32, 3, 3), dict(pads=[1, 0, 1, 2], dilations=[1, 2])),
    "phase_columns_16_to_24": ((2, 16, 60, 52), (24, 16, 3, 3), dict(pads=[1, 2, 0, 1], dilations=[1, 2])),
    "im2col_bands_grouped": ((1, 8, 150, 150), (8, 4, 3, 3), dict(group=2, pads=[1, 1, 1, 1])),
    "im2col_rank3": ((2, 6, 500), (4, 6, 5), dict(pads=[2, 2])),
}


def _assert_same(many: np.ndarray, one: np.ndarray) -> None:
    """Equal within fp32 rounding, max |many - one| / max(1, max |one|) under 1e-5 (GEMMs of other
    widths may round differently: OpenBLAS's AVX-512 kernels put 1.6e-5 between two 288-term sums
    of outputs up to 60), NaN and Inf in the same places."""
    scale = max(1.0, float(np.max(np.abs(one[np.isfinite(one)]), initial=0.0)))
    np.testing.assert_allclose(many, one, rtol=0, atol=1e-5 * scale)


def _run_both(op: str, inputs: list, attrs: dict) -> tuple[np.ndarray, np.ndarray]:
    one = fallback.run_node(op, inputs, attrs, 17)[0]
    with fallback.kernel_threads(3):
        many = fallback.run_node(op, inputs, attrs, 17)[0]
    return one, many


@pytest.mark.parametrize("case", sorted(CONV_CASES))
@pytest.mark.parametrize("act", [None, ("Clip", {"min": 0.0, "max": 6.0}), ("HardSwish", {})])
def test_conv_threads_match_one_thread(case: str, act: tuple | None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_runtime, "MIN_PART_WORK", 1)  # split even the small test shapes
    if not case.startswith("full_columns"):
        from gpubackend.fallback import conv

        monkeypatch.setattr(conv, "_FULL_COLS_BYTES", 0)
    xs, ws, attrs = CONV_CASES[case]
    rng = np.random.default_rng(7)
    x = rng.standard_normal(xs).astype(np.float32)
    x.reshape(-1)[[3, 1000, -5]] = [np.nan, np.inf, -np.inf]
    w = rng.standard_normal(ws).astype(np.float32)
    b = rng.standard_normal(ws[0]).astype(np.float32)
    attrs = dict(attrs, _act=act) if act else attrs
    one, many = _run_both("Conv", [x, w, b], attrs)
    assert one.flags.c_contiguous and many.flags.c_contiguous
    _assert_same(many, one)


def test_conv_transpose_threads_match_one_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_runtime, "MIN_PART_WORK", 1)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 6, 9, 11)).astype(np.float32)
    w = rng.standard_normal((6, 4, 3, 3)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    one, many = _run_both("ConvTranspose", [x, w, b], dict(strides=[2, 2], pads=[1, 1, 1, 1],
                                                            _act=("Relu", {})))
    _assert_same(many, one)


def test_parts_cover_the_range_once_and_raise_the_first_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_runtime, "MIN_PART_WORK", 1)
    seen = np.zeros(101, dtype=np.int64)
    parts, names = [], set()
    worker_ran = threading.Event()

    def fill(a: int, b: int) -> None:
        if a == 0:  # the caller's own part: wait until a pool thread has run one
            worker_ran.wait(30)
        else:
            worker_ran.set()
        seen[a:b] += 1
        parts.append((a, b))
        names.add(threading.current_thread().name)

    with fallback.kernel_threads(4):
        _runtime.parallel(fill, 101, work=10**9)
    assert (seen == 1).all() and len(parts) == 4 and len(names) >= 2

    def boom(a: int, b: int) -> None:
        if a > 0:
            raise ValueError(f"part {a}")

    with fallback.kernel_threads(2), pytest.raises(ValueError, match="part"):
        _runtime.parallel(boom, 10, work=10**9)


def test_parts_see_the_callers_errstate_and_outside_the_scope_nothing_splits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_runtime, "MIN_PART_WORK", 1)
    x = np.zeros(64, dtype=np.float32)

    def divide(a: int, b: int) -> None:
        np.divide(x[a:b], x[a:b], out=x[a:b])  # 0/0: warns unless errstate says ignore

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with fallback.kernel_threads(2), np.errstate(all="ignore"):
            _runtime.parallel(divide, 64, work=10**9)
    assert np.isnan(x).all()
    calls = []
    _runtime.parallel(lambda a, b: calls.append((a, b)), 64, work=10**9)
    assert calls == [(0, 64)]


@pytest.mark.parametrize("op,attrs", [("Relu", {}), ("Sigmoid", {}), ("HardSwish", {}), ("Tanh", {}),
                                      ("LeakyRelu", {"alpha": 0.1}), ("HardSigmoid", {}), ("Clip", {})])
def test_activations_threads_match_one_thread(op: str, attrs: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_runtime, "MIN_PART_WORK", 1)
    x = np.random.default_rng(1).standard_normal((1, 5, 7, 9)).astype(np.float32) * 10
    x.reshape(-1)[[0, 7, 100]] = [np.nan, np.inf, -np.inf]
    inputs = [x, np.float32(-1.0), np.float32(2.5)] if op == "Clip" else [x]
    one, many = _run_both(op, inputs, attrs)
    np.testing.assert_array_equal(many, one)


@pytest.mark.parametrize("shapes", [((2, 6, 5, 4), (2, 6, 5, 4)), ((1, 6, 5, 4), (6, 1, 1)), ((3, 1, 4), (5, 1)),
                                    ((1, 8, 1, 1), (1, 8, 3, 3))])
@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
def test_binary_threads_match_one_thread(op: str, shapes: tuple, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_runtime, "MIN_PART_WORK", 1)
    monkeypatch.setattr(fallback.elementwise, "_THREADED_BINARY_MIN", 1)
    rng = np.random.default_rng(2)
    a, b = (rng.standard_normal(s).astype(np.float32) for s in shapes)
    b.reshape(-1)[0] = 0.0
    one, many = _run_both(op, [a, b], {})
    np.testing.assert_array_equal(many, one)
    out = np.empty_like(one)
    with fallback.kernel_threads(3), np.errstate(all="ignore"):
        fallback.binary(getattr(np, {"Add": "add", "Sub": "subtract", "Mul": "multiply", "Div": "divide"}[op]),
                        a, b, out)
    np.testing.assert_array_equal(out, one)


def test_resize_linear_x2_threads_match_one_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_runtime, "MIN_PART_WORK", 1)
    x = np.random.default_rng(4).standard_normal((1, 5, 6, 7)).astype(np.float32)
    x[0, 1, 2, 3] = np.nan
    scales = np.array([1, 1, 2, 2], np.float32)
    one, many = _run_both("Resize", [x, None, scales], dict(mode="linear",
                                                           coordinate_transformation_mode="half_pixel"))
    np.testing.assert_array_equal(many, one)


def test_buffer_pool_reuses_only_buffers_nothing_refers_to() -> None:
    pool = fallback.BufferPool()
    shape, dt = (4, 1 << 16), np.dtype(np.float32)
    with pool.active():
        a = _runtime.empty(shape, dt)
        view = a[1:]
        assert _runtime.empty(shape, dt) is not a  # a is alive
        del a
        b = _runtime.empty(shape, dt)
        assert not np.shares_memory(b, view)  # a view keeps its base alive
        del view, b
        c = _runtime.empty(shape, dt)  # now the first buffer is free again
        d = _runtime.empty(shape, dt)
        assert not np.shares_memory(c, d)
        small = _runtime.empty((4,), dt)
        assert _runtime.empty((4,), dt) is not small  # small buffers are not pooled
    assert _runtime.empty(shape, dt) is not c  # outside the block: plain np.empty


def test_numpy_engine_never_overwrites_outputs_a_caller_holds() -> None:
    import models  # tests/models.py

    import gpubackend

    model = models.unet_like(size=256)  # its 256 KiB output is a pooled buffer
    sess = gpubackend.Session(model, path="cpu", cpu_engine="numpy")
    rng = np.random.default_rng(5)
    feeds = [{"input": rng.random((1, 3, 256, 256), dtype=np.float32)} for _ in range(3)]
    held = [sess.run(f)[0] for f in feeds]  # the pool must not hand these buffers out again
    fresh = [gpubackend.Session(model, path="cpu", cpu_engine="numpy").run(f)[0] for f in feeds]
    for got, want in zip(held, fresh):
        np.testing.assert_array_equal(got, want)
    assert not np.shares_memory(held[0], held[1]) and not np.shares_memory(held[1], held[2])


def test_parts_no_pool_thread_starts_run_on_the_caller(monkeypatch: pytest.MonkeyPatch) -> None:
    """A busy pool (a loaded machine) must not stall a kernel: unstarted parts run on the caller."""
    from concurrent.futures import ThreadPoolExecutor

    monkeypatch.setattr(_runtime, "MIN_PART_WORK", 1)
    busy = ThreadPoolExecutor(max_workers=1)
    release = threading.Event()
    busy.submit(release.wait, 30)  # the pool's only thread is taken
    monkeypatch.setattr(_runtime, "_executor", lambda: busy)
    seen = np.zeros(40, dtype=np.int64)
    t0 = time.monotonic()
    try:
        with fallback.kernel_threads(4):
            _runtime.parallel(lambda a, b: seen.__setitem__(slice(a, b), seen[a:b] + 1), 40, work=10**9)
        waited = time.monotonic() - t0  # without running them here: 30 s, until the busy thread frees
    finally:
        release.set()
        busy.shutdown()
    assert (seen == 1).all() and waited < 10


def test_fastest_way_times_each_then_keeps_the_fastest_and_retimes_the_others() -> None:
    way = _runtime.FastestWay(3)
    times = {0: 3.0, 1: 1.0, 2: 2.0}
    way.record(way.pick(), 100.0)  # the first call is not timed (it builds what the others reuse)
    assert way.seconds == [None, None, None]
    first = []
    for _ in range(3):  # each way once, in order
        w = way.pick()
        first.append(w)
        way.record(w, times[w])
    assert first == [0, 1, 2] and way.current == 1
    picks = []
    for _ in range(60):
        w = way.pick()
        picks.append(w)
        way.record(w, times[w])
    # each re-timed after 8 calls, then after 8 x 2 x (times slower) more: 2 after 32, 0 after 48
    assert [(i + 1, w) for i, w in enumerate(picks) if w != 1] == [(8, 0), (9, 2), (41, 2), (56, 0)]
    # a re-timed way now 20% faster takes over; one only 5% faster (timing noise) does not
    way = _runtime.FastestWay(2)
    for w, t in ((0, 50.0), (0, 1.0), (1, 1.3)):
        way.record(w, t)
    way.record(1, 0.96)
    assert way.current == 0
    way.record(1, 0.8)
    assert way.current == 1


@pytest.mark.parametrize("shape", [(64, 300, 200), (200, 300, 64)], ids=["split-columns", "split-rows"])
def test_gemm_ways_agree_and_leave_blas_at_one_thread(shape: tuple, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each way of a GEMM call site (one thread, the pool split, BLAS's threads) gives the
    one-thread product (within rounding: a part's edge columns or BLAS's thread split may sum in
    another order), NaN and Inf where it puts them, and BLAS is back at the run's one thread after
    every call."""
    monkeypatch.setattr(_runtime, "MIN_PART_WORK", 1 << 10)
    m, k, n = shape
    rng = np.random.default_rng(5)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    b[3, 7], b[10, 9] = np.nan, np.inf
    with fallback.blas_threads(1):  # BLAS's own threads may round differently (AVX-512 OpenBLAS does)
        one = np.matmul(a, b)
    site = _runtime.gemm_site()
    got = {}
    with fallback.blas_threads(1), fallback.kernel_threads(2):
        _runtime.matmul(a, b, site=site)  # not timed
        for _ in range(3):
            way = site.seconds.index(None)
            got[way] = _runtime.matmul(a, b, site=site).copy()
            assert site.seconds[way] is not None
            assert fallback.get_blas_threads() in (None, 1)
    assert site.current in (0, 1, 2)
    np.testing.assert_array_equal(got[_runtime.GEMM_ONE_THREAD], one)
    _assert_same(got[_runtime.GEMM_POOL], one)  # OpenBLAS's edge kernels sum a part's last columns in another order
    _assert_same(got[_runtime.GEMM_BLAS_THREADS], one)


def test_split_site_times_the_pool_and_blas_threads_and_covers_each_part_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A ``parallel`` call site with a :func:`split_site`, inside a run allowing BLAS's threads, runs
    once split over the pool and once whole on the caller (BLAS's threads in its GEMMs), then the
    faster; every index exactly once each call, BLAS back at one thread after each. Outside
    :func:`allow_blas_threads` (False) it always splits."""
    monkeypatch.setattr(_runtime, "MIN_PART_WORK", 1)
    seen = np.zeros(40, dtype=np.int64)
    calls: list[tuple[int, int]] = []

    def part(a: int, b: int) -> None:
        calls.append((a, b))
        seen[a:b] += 1

    site = _runtime.split_site()
    with fallback.blas_threads(1), fallback.kernel_threads(2):
        for _ in range(4):  # split (not timed), split, whole, then the faster
            _runtime.parallel(part, 40, 10**6, site)
            assert fallback.get_blas_threads() in (None, 1)
        assert (seen == 4).all() and None not in site.seconds and site.current in (0, 1)
        assert sorted(calls[:2]) == sorted(calls[2:4]) == [(0, 20), (20, 40)] and calls[4] == (0, 40)
        calls.clear()
        with fallback.allow_blas_threads(False):
            _runtime.parallel(part, 40, 10**6, site)
        assert sorted(calls) == [(0, 20), (20, 40)]


def test_banded_conv_plans_agree_either_way(monkeypatch: pytest.MonkeyPatch) -> None:
    """The banded conv algorithms (shifted GEMMs, phase-plane columns, Winograd) give the
    one-thread result whichever way their split site takes (within rounding: BLAS's threads),
    NaN and Inf where one thread puts them."""
    from gpubackend.fallback import conv

    monkeypatch.setattr(_runtime, "MIN_PART_WORK", 1)
    monkeypatch.setattr(conv, "_FULL_COLS_BYTES", 0)
    monkeypatch.setattr(conv, "_WINOGRAD_MIN_WORK", 0)
    rng = np.random.default_rng(4)
    for c, m, dil in ((12, 10, 2), (16, 24, 1), (32, 40, 1)):  # shifted, phase columns, Winograd
        x = rng.standard_normal((1, c, 30, 26)).astype(np.float32)
        x.reshape(-1)[[5, 700]] = [np.nan, np.inf]
        w = rng.standard_normal((m, c, 3, 3)).astype(np.float32)
        attrs = dict(pads=[1, 1, 1, 1], dilations=[dil, dil])
        one = fallback.run_node("Conv", [x, w], attrs, 17)[0]
        sites: list = []

        def made(sites: list = sites) -> _runtime.FastestWay:
            sites.append(_runtime.split_site())
            return sites[-1]

        monkeypatch.setattr(conv, "split_site", made)
        with fallback.blas_threads(1), fallback.kernel_threads(2):
            plan = conv.conv_plan(x.shape, x.dtype, w, None, attrs)
            for _ in range(4):  # the pool (not timed, then timed), BLAS's threads, then the faster
                _assert_same(plan(x), one)
        assert any(None not in site.seconds for site in sites)  # (a non-finite input skips Winograd)
