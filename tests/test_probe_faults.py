"""Fault injection through the probe: every kind x every GPU path.

Each kind runs in two probes, each faulting half of the GPU paths, so the other half shows the
fault does not leak; the test process itself survives crashes and hangs (they happen in the
probe's child). Verification uses the basic round trips only (``GPUBACKEND_PROBE_CANARIES=none``)
to keep the matrix fast; the round trips call the same fault hooks as the paths' kernels.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

import capability_probe as cp
from capability_probe import runner
from capability_probe.faults import GPU_PATHS, KINDS
from capability_probe.testing import assert_fault_reported, fault_plan, probe_with_faults

HANG_TIMEOUT_S = 6.0


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fault-cache")


def test_plan_covers_every_pair() -> None:
    pairs = {(spec.split("@")[0], p) for spec, group in fault_plan() for p in group}
    assert pairs == {(k, p) for k in KINDS for p in GPU_PATHS}


@pytest.mark.parametrize("spec,group", fault_plan(), ids=[s for s, _ in fault_plan()])
def test_fault_matrix(spec: str, group: list[str], cache_dir: Path) -> None:
    kind = spec.split("@")[0]
    timeout = HANG_TIMEOUT_S if kind == "hang" else 60.0
    t = time.perf_counter()
    rep = probe_with_faults(spec, timeout_s=timeout, cache_dir=cache_dir, canaries="none")
    elapsed = time.perf_counter() - t
    assert not rep.cached
    for p in group:
        assert_fault_reported(rep, kind, p)
    for p in GPU_PATHS:
        if p not in group:
            assert rep.usable(p), f"{spec} leaked into {p}: {rep.paths[p].reason}"
    assert rep.preferred_path == "cpu" and rep.usable("cpu")
    if kind == "hang":
        assert elapsed < HANG_TIMEOUT_S + 10, f"a hang took {elapsed:.1f} s to end"
    print(f"{spec}: " + "; ".join(f"{p}: {rep.paths[p].reason}" for p in group) + f" ({elapsed:.1f} s)")


def test_gl_alias_faults_every_gl_tier(cache_dir: Path) -> None:
    rep = probe_with_faults("compile@gl", cache_dir=cache_dir, canaries="none")
    for p in ("gles31", "gles3", "gles2"):
        assert_fault_reported(rep, "compile", p)
    assert rep.usable("vulkan")


def test_faulted_verdict_never_served_to_a_healthy_run(cache_dir: Path) -> None:
    bad = probe_with_faults("wrong@gles31", cache_dir=cache_dir, canaries="none")
    assert not bad.usable("gles31")
    with_cache = probe_with_faults("", cache_dir=cache_dir, canaries="none")  # refresh=True inside
    assert with_cache.usable("gles31")
    from capability_probe.testing import fault_env

    with fault_env("", cache_dir=cache_dir, canaries="none"):
        assert cp.probe().usable("gles31")  # cached healthy verdict
    with fault_env("wrong@gles31", cache_dir=cache_dir, canaries="none"):
        assert not cp.probe().usable("gles31")  # cached faulted verdict, its own key


# ---- a timed-out probe is not a final verdict --------------------------------------------------

RETRY_RE = r"timed out: no answer within the probe timeout \((?P<limit>[\d.]+) s\).*\(retry at \d{4}-\d\d-\d\d "


def _only_gles2(monkeypatch: pytest.MonkeyPatch, cache: Path, timeout_s: float) -> None:
    monkeypatch.setenv("GPUBACKEND_CACHE_DIR", str(cache))
    monkeypatch.setenv("GPUBACKEND_DISABLE", "vulkan,gles31,gles3")
    monkeypatch.setenv("GPUBACKEND_PROBE_CANARIES", "none")
    monkeypatch.setenv("GPUBACKEND_PROBE_TIMEOUT", str(timeout_s))
    runner.clear_memo()


def test_hang_verdict_says_when_it_is_retried_and_is_cached_until_then(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _only_gles2(monkeypatch, tmp_path, 3.0)
    monkeypatch.setenv("GPUBACKEND_FAULT", "hang@gles2")
    monkeypatch.delenv(runner.RETRY_ENV, raising=False)
    before = time.time()
    rep = cp.probe()
    v = rep.paths["gles2"]
    assert not rep.usable("gles2") and re.search(RETRY_RE, v.reason), v.reason
    wait = runner.DEFAULT_RETRY_S
    assert v.retry_at is not None and before + wait <= v.retry_at <= time.time() + wait
    runner.clear_memo()  # a new process: the disk cache serves the timed-out verdict until its retry time
    t = time.perf_counter()
    again = cp.probe()
    assert again.cached and again.paths["gles2"].reason == v.reason and time.perf_counter() - t < 2.0
    # once due, only the timed-out job runs again, with twice the limit; hanging again pushes it later
    runner.clear_memo()
    from capability_probe import cache as probe_cache

    key, _ = probe_cache.cheap_key(runner.canaries())
    raw = probe_cache.load(key)
    raw["jobs"]["gles2"]["retry_at"] = time.time() - 1  # as if the wait had passed
    probe_cache.store(key, raw)
    third = cp.probe()
    m = re.search(RETRY_RE, third.paths["gles2"].reason)
    assert not third.cached and m and float(m.group("limit")) == 3.0 * runner.RETRY_TIMEOUT_FACTOR, \
        third.paths["gles2"].reason
    assert probe_cache.load(key)["jobs"]["gles2"]["timeout_attempts"] == 2
    assert third.paths["gles2"].retry_at >= time.time() + 2 * runner.DEFAULT_RETRY_S - 60


def test_busy_device_gets_its_gpu_back_on_the_retry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A context that answers after 5 s (a phone busy at first start) misses a 4 s probe; the retry,
    with twice the limit, verifies the path and the cache then holds the good verdict."""
    _only_gles2(monkeypatch, tmp_path, 4.0)
    monkeypatch.setenv("GPUBACKEND_FAULT", "hang@gles2")
    monkeypatch.setenv("GPUBACKEND_FAULT_HANG_S", "5")
    monkeypatch.setenv(runner.RETRY_ENV, "0")
    first = cp.probe()
    assert not first.usable("gles2") and re.search(RETRY_RE, first.paths["gles2"].reason), first.paths["gles2"].reason
    second = cp.probe()  # the retry is due at once (GPUBACKEND_PROBE_RETRY_S=0)
    assert second.usable("gles2") and not second.cached, second.paths["gles2"].reason
    assert second.paths["gles2"].retry_at is None
    runner.clear_memo()
    assert cp.probe().cached and cp.probe().usable("gles2")


def test_retry_wait_doubles_per_timeout_up_to_a_day(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(runner.RETRY_ENV, "100")
    raw = {"jobs": {"gles2": {"timed_out": True, "reason": "timed out"}, "gles3": {"verified": True}}}
    runner.stamp_timeouts(raw, {"gles2": 2}, now=1000.0)
    assert raw["jobs"]["gles2"]["retry_at"] == 1000.0 + 400 and raw["jobs"]["gles2"]["timeout_attempts"] == 3
    assert "retry_at" not in raw["jobs"]["gles3"]
    runner.stamp_timeouts(raw, {"gles2": 40}, now=0.0)
    assert raw["jobs"]["gles2"]["retry_at"] == runner.MAX_RETRY_S


# ---- NaN/Inf survival ----------------------------------------------------------------------------

def test_a_driver_that_loses_nan_on_gles2_is_reported_and_the_session_says_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As NVIDIA's gles2 did: every finite value right, NaN read back as 0. The path stays verified
    (see gpubackend.ieee_check for why) and the loss is named in the probe's table and explain()."""
    import numpy as np

    import gpubackend

    _only_gles2(monkeypatch, tmp_path, 400.0)
    monkeypatch.setenv("GPUBACKEND_PROBE_CANARIES", "fp32")  # the NaN check runs after the canaries
    monkeypatch.setenv("GPUBACKEND_FAULT", "nanloss@gles2")
    rep = cp.probe()
    v = rep.paths["gles2"]
    assert rep.usable("gles2") and v.ieee_lost == "NaN and Inf not preserved", v.reason
    assert "gles2: NaN and Inf not preserved" in v.reason and "NaN and Inf not preserved" in rep.table()
    relu = gpubackend.Session(_relu_model(), path="gles2", fallback=False)
    assert "gles2: NaN and Inf not preserved on this driver" in relu.explain()
    x = np.array([np.nan, 1.0, -1.0, np.inf], np.float32).reshape(1, 1, 1, 4)
    assert not np.isnan(relu.run({"x": x})[0]).any()  # what the note warns about
    # this machine's gles2 (Mesa) keeps them: checked, nothing reported
    monkeypatch.delenv("GPUBACKEND_FAULT")
    runner.clear_memo()
    healthy = cp.probe()
    assert healthy.paths["gles2"].ieee_lost is None
    assert healthy.features["paths"]["gles2"]["ieee"] == "NaN and Inf preserved", healthy.features["paths"]["gles2"]


def _relu_model():
    from onnx import TensorProto, helper

    node = helper.make_node("Relu", ["x"], ["y"], name="relu")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 1, 4])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
