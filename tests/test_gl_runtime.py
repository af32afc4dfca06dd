"""The GL runtime shared by the GL paths: state on cached (shared) programs, leaks across
sessions, GL contexts per thread."""

from __future__ import annotations

import gc
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import gpubackend

GPU_PATHS = ["gles31", "vulkan", "gles3", "gles2"]
CALLER = gpubackend.SessionOptions(thread="caller")  # GPU work on the creating thread (its own context)


def _two_subs_model(c: np.ndarray) -> object:
    """``s = Sub(C, A)`` (C a constant) then ``t = Sub(B, s)``: two nodes of one kernel and one
    shape whose operands are bound differently (a constant texture on the first operand, then
    two run-time tensors), so a program shared by both must get each node's bindings at its draw."""
    shape = c.shape
    vi = [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(shape)) for n in "AB"]
    nodes = [helper.make_node("Sub", ["C", "A"], ["s"], name="s"),
             helper.make_node("Sub", ["B", "s"], ["t"], name="t")]
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(shape)) for n in ("s", "t")]
    graph = helper.make_graph(nodes, "two_subs", vi, outs, [numpy_helper.from_array(c, "C")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("path", GPU_PATHS)
def test_nodes_sharing_a_program_keep_their_own_bindings(path: str) -> None:
    shape = (1, 4, 5, 6)
    rng = np.random.default_rng(1)
    c = rng.standard_normal(shape).astype(np.float32)
    feeds = {n: rng.standard_normal(shape).astype(np.float32) for n in "AB"}
    sess = gpubackend.Session(_two_subs_model(c), path=path, fallback=False)
    try:
        s, t = sess.run(feeds)
        assert set(sess.placement.values()) == {path}
    finally:
        sess.close()
    tol = 1e-2 if path == "gles2" else 1e-5
    np.testing.assert_allclose(s, c - feeds["A"], rtol=tol, atol=tol)
    np.testing.assert_allclose(t, feeds["B"] - (c - feeds["A"]), rtol=tol, atol=tol)


# ---- leaks: sessions created, run and closed in a loop keep RSS flat ------------------------------

def _small_model() -> object:
    rng = np.random.default_rng(0)
    w = rng.standard_normal((8, 4, 3, 3)).astype(np.float32)
    c = rng.standard_normal((1, 8, 16, 16)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["h"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Sub", ["c", "r"], ["s"]),
             helper.make_node("GlobalAveragePool", ["s"], ["y"])]
    graph = helper.make_graph(nodes, "small", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 1, 1])],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(c, "c")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _cycle_rss(path: str, cycles: int) -> tuple[float, float]:
    """RSS (MB) after a warm-up session and after ``cycles`` more create/run/close cycles."""
    model = _small_model()
    x = {"x": np.random.default_rng(1).standard_normal((1, 4, 16, 16)).astype(np.float32)}
    start = 0.0
    for i in range(cycles + 1):
        sess = gpubackend.Session(model, path=path, fallback=False)
        sess.run(x)
        assert set(sess.placement.values()) == {path}
        sess.close()
        if i == 0:
            gc.collect()
            start = _rss_mb()
    gc.collect()
    return start, _rss_mb()


@pytest.mark.parametrize("path", GPU_PATHS)
def test_sessions_do_not_leak(path: str) -> None:
    """Each gles3 session leaked ~75 MB, each gles2 ~68 MB after close() (programs compiled per
    session and never released): 30 cycles must stay within 15 MB (a leak of this small model
    was ~2 MB per session)."""
    start, end = _cycle_rss(path, 30)
    assert end - start < 15, f"{path}: RSS grew {end - start:.1f} MB over 30 sessions"


@pytest.mark.slow
@pytest.mark.parametrize("path", [*GPU_PATHS, "cpu"])
def test_300_sessions_stay_within_50mb(path: str) -> None:
    start, end = _cycle_rss(path, 300)
    print(f"300 sessions on {path}: RSS {start:.1f} -> {end:.1f} MB ({end - start:+.1f} MB)")
    assert end - start < 50, f"{path}: RSS grew {end - start:.1f} MB over 300 sessions"


# ---- GL contexts per thread -----------------------------------------------------------------------

def _in_thread(fn, name: str = "worker"):
    out: dict[str, object] = {}

    def body() -> None:
        try:
            out["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            out["error"] = exc

    t = threading.Thread(target=body, name=name)
    t.start()
    t.join(timeout=300)
    assert not t.is_alive(), f"{name} did not finish"
    if "error" in out:
        raise out["error"]  # type: ignore[misc]
    return out.get("value")


def _check_two_subs(sess: gpubackend.Session, c: np.ndarray, feeds: dict[str, np.ndarray]) -> None:
    s, t = sess.run(feeds)
    np.testing.assert_allclose(s, c - feeds["A"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(t, feeds["B"] - (c - feeds["A"]), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("path", ["gles31", "gles3"])
def test_two_threads_each_with_their_own_gl_session(path: str) -> None:
    """The second thread's creation raised DriverError (one context per process, owned by the
    first thread); now each thread gets its own context (sessions kept on their creating thread,
    thread="caller"), and both compute right at once."""
    shape = (1, 4, 5, 6)
    rng = np.random.default_rng(2)
    c = rng.standard_normal(shape).astype(np.float32)
    feeds = {n: rng.standard_normal(shape).astype(np.float32) for n in "AB"}
    model = _two_subs_model(c)
    both = threading.Barrier(2, timeout=120)

    def work() -> str:
        sess = gpubackend.Session(model, path=path, fallback=False, options=CALLER)
        try:
            both.wait()  # both sessions exist before either runs
            for _ in range(3):
                _check_two_subs(sess, c, feeds)
            return sess.path
        finally:
            sess.close()

    with ThreadPoolExecutor(2) as pool:
        got = [f.result(timeout=300) for f in [pool.submit(work), pool.submit(work)]]
    assert got == [path, path]


def test_gl_session_from_an_ended_thread_leaves_gl_usable() -> None:
    """A gles31 session made in a worker thread that then exits left the process unable to create
    any gles31 session again (even with fallback=True). The worker's context is destroyed as it
    ends (and with it everything the session held); new sessions work anywhere."""
    shape = (1, 4, 5, 6)
    rng = np.random.default_rng(3)
    c = rng.standard_normal(shape).astype(np.float32)
    feeds = {n: rng.standard_normal(shape).astype(np.float32) for n in "AB"}
    model = _two_subs_model(c)

    def make() -> gpubackend.Session:
        sess = gpubackend.Session(model, path="gles31", fallback=False, options=CALLER)
        _check_two_subs(sess, c, feeds)
        return sess

    orphan = _in_thread(make, "short-lived")
    with pytest.raises(gpubackend.errors.GpuBackendError):
        orphan.run(feeds)  # its context died with its thread: an error, never a wrong answer
    sess = gpubackend.Session(model, path="gles31", fallback=False)
    try:
        _check_two_subs(sess, c, feeds)
        assert sess.path == "gles31"
    finally:
        sess.close()
    _in_thread(lambda: make().close(), "second-worker")


def test_gl_context_per_thread_is_destroyed_when_its_thread_ends() -> None:
    from capability_probe import contexts

    main = contexts.gl_record("gles31")

    def worker() -> contexts.GLContext:
        record = contexts.gl_record("gles31")
        assert record is not main and record.ctx is not main.ctx and record.alive
        assert record.kind == main.kind, "the thread got a different kind of context"  # not a desktop fallback
        return record

    record = _in_thread(worker)
    gc.collect()
    assert not record.alive, "the ended thread's context was not destroyed"
    assert contexts.gl_record("gles31") is main and main.alive


@pytest.mark.parametrize("fallback", [True, False])
def test_gl_context_failure_at_session_creation_is_a_gpubackend_error(monkeypatch, caplog, fallback: bool) -> None:
    """Session(path="gles31") let capability_probe's DriverUnavailable escape when the probe had
    verified the path but no context could be made here: now it falls back to cpu with a warning,
    or with fallback=False raises a GpuBackendError."""
    import capability_probe

    healthy = capability_probe.probe()
    if not healthy.usable("gles31"):
        pytest.fail(f"the probe did not verify gles31: {healthy.paths['gles31'].reason}")
    monkeypatch.setattr(capability_probe, "probe", lambda *a, **k: healthy)  # the verdict from before
    monkeypatch.setenv("GPUBACKEND_FAULT", "absent@gles31")  # the driver now refuses a context
    rng = np.random.default_rng(4)
    c = rng.standard_normal((1, 2, 3, 4)).astype(np.float32)
    feeds = {n: rng.standard_normal(c.shape).astype(np.float32) for n in "AB"}
    if not fallback:
        with pytest.raises(gpubackend.errors.PathUnavailableError, match="gles31.*no gles31 context"):
            gpubackend.Session(_two_subs_model(c), path="gles31", fallback=False, options=CALLER)
        return
    with caplog.at_level("WARNING", logger="gpubackend"):
        sess = gpubackend.Session(_two_subs_model(c), path="gles31", fallback=True, options=CALLER)
    try:
        _check_two_subs(sess, c, feeds)
        assert "gles31" not in set(sess.placement.values())
        assert any("no gles31 context" in r.getMessage() for r in caplog.records), caplog.records
    finally:
        sess.close()
