"""Run-time isolation (SessionOptions.isolation): a driver that crashes (a real SIGSEGV) or hangs
inside the isolated child costs the child, not this process: with fallback the session re-plans
onto the next path and answers correctly; without it the caller gets a DeviceError, in bounded time."""

from __future__ import annotations

import time

import numpy as np
import pytest
from test_kernel_check import X, _conv_relu_model

import gpubackend
from gpubackend.isolation import IsolatedPath
from gpubackend.kernel_check import VerdictStore

# run-time faults strike a session compiled while healthy, so its calls are short: a 10 s
# timeout is far beyond a run, even on a loaded machine
TIMEOUT_S = 10.0
OTHER_GPU = {"vulkan": {"gles31", "gles3", "gles2"}, "gles31": {"vulkan", "gles3", "gles2"}}


@pytest.fixture
def fault_env(monkeypatch: pytest.MonkeyPatch, tmp_path):
    def apply(spec: str) -> None:
        monkeypatch.setenv("GPUBACKEND_CACHE_DIR", str(tmp_path / "cache"))
        monkeypatch.setenv("GPUBACKEND_PROBE_TIMEOUT", "30")
        monkeypatch.setenv("GPUBACKEND_PROBE_CANARIES", "none")
        monkeypatch.setenv("GPUBACKEND_FAULT", spec)
        VerdictStore.forget_memory()
    return apply


@pytest.fixture(scope="module")
def want() -> np.ndarray:
    return gpubackend.Session(_conv_relu_model(), path="cpu", cpu_engine="numpy").run({"x": X})[0]


def _isolated(path: str, fallback: bool = True) -> gpubackend.Session:
    report = gpubackend.probe()
    if not report.usable(path):
        pytest.skip(f"{path} is not usable here: {report.paths[path].reason}")
    # the other GPU paths are left out so that the re-plan goes straight to the cpu
    opts = gpubackend.SessionOptions(isolation=True, isolation_timeout_s=TIMEOUT_S, disabled_paths=OTHER_GPU[path])
    return gpubackend.Session(_conv_relu_model(), path=path, fallback=fallback, options=opts)


def _child_of(sess: gpubackend.Session, path: str):
    inner = sess._path(path)
    inner = getattr(inner, "inner", inner)
    assert isinstance(inner, IsolatedPath)
    return inner._child


def test_an_isolated_session_runs_in_a_child_and_close_ends_it(fault_env, want) -> None:
    fault_env("")
    sess = _isolated("gles31")
    (got,) = sess.run({"x": X})
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    assert set(sess.placement.values()) == {"gles31"}
    child = _child_of(sess, "gles31")
    assert child.proc.poll() is None
    sess.close()
    assert child.proc.poll() is not None


SLOW = pytest.mark.slow  # the same mechanism as a default case; each hang waits out the timeout


@pytest.mark.parametrize(("fault", "fallback"), [("crash@gles31", True), ("crash@gles31", False),
                                                 ("hang@vulkan", True), pytest.param("hang@vulkan", False, marks=SLOW)])
def test_a_driver_crash_or_hang_at_run_time_costs_only_the_child(fault: str, fallback: bool, fault_env,
                                                                  monkeypatch, want) -> None:
    path = fault.split("@")[1]
    fault_env("")
    sess = _isolated(path, fallback)
    (healthy,) = sess.run({"x": X})
    np.testing.assert_allclose(healthy, want, rtol=1e-4, atol=1e-5)
    child = _child_of(sess, path)
    monkeypatch.setenv("GPUBACKEND_FAULT", fault)  # the driver goes bad after the session was built
    t0 = time.perf_counter()
    if fallback:
        (got,) = sess.run({"x": X})
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
        assert set(sess.placement.values()) == {"cpu"}, sess.explain()
        assert "isolated driver process" in sess.explain()
        (again,) = sess.run({"x": X})
        np.testing.assert_array_equal(again, got)
    else:
        with pytest.raises(gpubackend.DeviceError, match=f"{path}.*isolated driver process"):
            sess.run({"x": X})
    waited = time.perf_counter() - t0
    assert waited < TIMEOUT_S + 30, waited
    assert child.proc.poll() is not None  # crashed, or killed after the timeout
    if "crash" in fault:
        assert child.proc.returncode == -11  # a real SIGSEGV, in the child
    sess.close()


@pytest.mark.parametrize(("fault", "fallback"), [("crash@gles31:conv", True),
                                                 pytest.param("crash@gles31:conv", False, marks=SLOW),
                                                 pytest.param("hang@vulkan:conv", True, marks=SLOW),
                                                 pytest.param("hang@vulkan:conv", False, marks=SLOW)])
def test_a_fault_in_one_kernel_costs_only_the_child(fault: str, fallback: bool, fault_env, monkeypatch,
                                                    want) -> None:
    # a kernel-scoped fault strikes when the child builds (or first runs) that kernel; without
    # the first-run check that is the session's compile
    monkeypatch.setenv("GPUBACKEND_KERNEL_CHECK", "0")
    fault_env(fault)
    path = fault.split("@")[1].split(":")[0]
    t0 = time.perf_counter()
    if fallback:
        sess = _isolated(path)
        (got,) = sess.run({"x": X})
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
        assert set(sess.placement.values()) == {"cpu"}, sess.explain()
        assert ("SIGSEGV" if "crash" in fault else "did not answer") in sess.explain()
        sess.close()
    else:
        with pytest.raises(gpubackend.DeviceError, match="SIGSEGV" if "crash" in fault else "did not answer"):
            _isolated(path, fallback=False)
    assert time.perf_counter() - t0 < TIMEOUT_S + 150  # the child's start-up is part of it


def test_a_crash_while_checking_a_kernel_costs_only_the_child(fault_env, want) -> None:
    # with the first-run check on, the crash strikes in the check, while the session is planned
    fault_env("crash@gles31:conv")
    sess = _isolated("gles31")
    (got,) = sess.run({"x": X})
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    assert set(sess.placement.values()) == {"cpu"}, sess.explain()
    assert "SIGSEGV" in sess.explain()
    sess.close()


def test_isolation_options_from_the_environment(monkeypatch) -> None:
    monkeypatch.setenv("GPUBACKEND_ISOLATION", "1")
    monkeypatch.setenv("GPUBACKEND_ISOLATION_TIMEOUT", "2.5")
    opts = gpubackend.SessionOptions().resolved()
    assert opts.isolation is True and opts.isolation_timeout_s == 2.5
    monkeypatch.setenv("GPUBACKEND_ISOLATION_TIMEOUT", "soon")
    with pytest.raises(gpubackend.OptionError, match="GPUBACKEND_ISOLATION_TIMEOUT"):
        gpubackend.SessionOptions().resolved()
    monkeypatch.delenv("GPUBACKEND_ISOLATION_TIMEOUT")
    with pytest.raises(gpubackend.OptionError, match="isolation_timeout_s"):
        gpubackend.SessionOptions(isolation_timeout_s=0).resolved()


def test_an_isolated_path_names_the_kernels_its_child_runs(fault_env) -> None:
    """The first-run kernel check files a verdict under the kernel the child's path object runs
    (gles3's conv_blend depends on the child's context limits), the same name the path gives in
    this process."""
    fault_env("")
    report = gpubackend.probe()
    if not report.usable("gles3"):
        pytest.skip(f"gles3 is not usable here: {report.paths['gles3'].reason}")
    from gpubackend.model import to_graph
    from gpubackend.paths import create_path

    graph = to_graph(_conv_relu_model())
    opts = gpubackend.SessionOptions(isolation=True, isolation_timeout_s=TIMEOUT_S)
    isolated = IsolatedPath("gles3", "fp32", frozenset(), opts)
    local = create_path("gles3", "fp32", frozenset(), opts)
    try:
        for node in graph.nodes:
            assert isolated.kernel_name_for(node, graph) == local.kernel_name_for(node, graph)
    finally:
        isolated.close()
        local.close()
