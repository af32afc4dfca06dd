"""Driver faults seen from a Session: the probe marks the faulty path unusable, ``auto`` takes the
next verified path, results stay right, the caller survives; faults that strike after the
session was built re-plan the affected nodes and finish the run correctly."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from models import assert_close, random_inputs, unet_like
from onnx import TensorProto, helper, numpy_helper

import gpubackend
from capability_probe.testing import KINDS, assert_fault_reported


@pytest.fixture(scope="module")
def model_and_reference():
    model = unet_like(size=32)
    feeds = random_inputs(model, seed=5)
    (want,) = gpubackend.Session(model, path="cpu", cpu_engine="numpy").run(feeds)
    return model, feeds, want


@pytest.fixture
def fault_env(monkeypatch: pytest.MonkeyPatch, tmp_path):
    def apply(spec: str) -> None:
        monkeypatch.setenv("GPUBACKEND_CACHE_DIR", str(tmp_path / "cache"))
        monkeypatch.setenv("GPUBACKEND_PROBE_TIMEOUT", "10")
        monkeypatch.setenv("GPUBACKEND_PROBE_CANARIES", "none")
        monkeypatch.setenv("GPUBACKEND_PREFER_SOFTWARE", "1")
        monkeypatch.setenv("GPUBACKEND_FAULT", spec)
    return apply


@pytest.mark.parametrize("kind", KINDS)
def test_auto_skips_faulty_paths(kind: str, fault_env, model_and_reference) -> None:
    model, feeds, want = model_and_reference
    fault_env(f"{kind}@vulkan,{kind}@gles31")
    copies = {k: v.copy() for k, v in feeds.items()}
    sess = gpubackend.Session(model, path="auto")
    assert sess.path == "gles3", sess.explain()
    report = gpubackend.probe()
    for faulty in ("vulkan", "gles31"):
        assert_fault_reported(report, kind, faulty)
    (got,) = sess.run(feeds)
    assert_close(got, want, 1e-4, f"auto with {kind} faults")
    assert "gles3" in sess.placement.values()
    for k in feeds:
        np.testing.assert_array_equal(feeds[k], copies[k])


@pytest.mark.parametrize("kind", ["lost", "oom"])
@pytest.mark.parametrize("path", ["gles31", "gles3", "gles2", "vulkan"])
def test_runtime_fault_replans(kind: str, path: str, fault_env, model_and_reference, monkeypatch, caplog) -> None:
    model, feeds, want = model_and_reference
    fault_env("")
    if not gpubackend.probe().usable(path):
        pytest.skip(f"{path} is not usable on this machine: {gpubackend.probe().paths[path].reason}")
    sess = gpubackend.Session(model, path=path)
    (healthy,) = sess.run(feeds)
    assert_close(healthy, want, 1e-4, f"{path} before the fault")
    monkeypatch.setenv("GPUBACKEND_FAULT", f"{kind}@{path}")
    copies = {k: v.copy() for k, v in feeds.items()}
    with caplog.at_level(logging.WARNING, logger="gpubackend"):
        (got,) = sess.run(feeds)
        (again,) = sess.run(feeds)
    assert_close(got, want, 1e-4, f"{path} after {kind}")
    np.testing.assert_array_equal(got, again)
    assert path not in sess.placement.values(), sess.explain()
    assert len([r for r in caplog.records if "failed at run time" in r.getMessage()]) == 1
    for k in feeds:
        np.testing.assert_array_equal(feeds[k], copies[k])


def test_runtime_fault_without_fallback_raises(fault_env, monkeypatch) -> None:
    fault_env("")
    if not gpubackend.probe().usable("gles31"):
        pytest.skip("gles31 is not usable on this machine")
    rng = np.random.default_rng(0)
    w = rng.standard_normal((8, 3, 3, 3)).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1], name="conv")
    graph = helper.make_graph([node], "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 8])],
                              [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    strict = gpubackend.Session(model, path="gles31", fallback=False)
    x = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
    strict.run({"x": x})
    monkeypatch.setenv("GPUBACKEND_FAULT", "lost@gles31")
    with pytest.raises(gpubackend.DeviceError, match="gles31"):
        strict.run({"x": x})


def test_explicit_faulty_path_falls_back_or_raises(fault_env, model_and_reference) -> None:
    model, feeds, want = model_and_reference
    fault_env("crash@gles3")
    sess = gpubackend.Session(model, path="gles3")  # the probe saw the crash: run on cpu instead
    assert sess.path == "cpu" and "gles3" in sess.explain()
    (got,) = sess.run(feeds)
    assert_close(got, want, 1e-4, "gles3 crash fallback")
    with pytest.raises(gpubackend.PathUnavailableError, match="gles3"):
        gpubackend.Session(model, path="gles3", fallback=False)
