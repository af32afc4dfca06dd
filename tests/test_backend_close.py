"""The ONNX backend API closes the sessions it creates; "auto", the probe's table and the demo's
session agree on the path under GPUBACKEND_PREFER_SOFTWARE."""

from __future__ import annotations

import gc

import numpy as np
import pytest
from onnx import TensorProto, helper

import gpubackend
from gpubackend import backend
from gpubackend.session import Session


def _relu_model():
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "r",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture
def closes(monkeypatch) -> list[Session]:
    closed: list[Session] = []
    real = Session.close

    def counting_close(self: Session) -> None:
        closed.append(self)
        real(self)

    monkeypatch.setattr(Session, "close", counting_close)
    return closed


def test_run_model_and_run_node_close_their_sessions(closes: list[Session]) -> None:
    x = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
    (y,) = backend.run_model(_relu_model(), [x], path="cpu")
    np.testing.assert_array_equal(y, np.maximum(x, 0))
    assert len(closes) == 1
    (y,) = backend.run_node(helper.make_node("Neg", ["a"], ["b"]), [x], path="cpu")
    np.testing.assert_array_equal(y, -x)
    assert len(closes) == 2


def test_prepared_rep_closes_once(closes: list[Session]) -> None:
    with backend.prepare(_relu_model(), path="cpu") as rep:
        rep.run([np.zeros((2, 3), np.float32)])
    rep.close()
    assert len(closes) == 1
    rep = backend.prepare(_relu_model(), path="cpu")
    del rep
    gc.collect()
    assert len(closes) == 2
    with pytest.raises(gpubackend.GpuBackendError):
        backend.prepare(_relu_model(), device="CUDA")


@pytest.mark.parametrize("prefer", ["1", ""])
def test_auto_agrees_with_probe_table(prefer: str, monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("GPUBACKEND_PREFER_SOFTWARE", prefer)
    monkeypatch.delenv("GPUBACKEND_PATH", raising=False)
    from gpubackend.bench import choice

    # no recorded measurements (another test's `bench --record` may have written some): auto then
    # follows the probe alone, which is what this compares
    monkeypatch.setattr(choice, "measurements_file", lambda: tmp_path / "bench" / choice.FILE_NAME)
    report = gpubackend.probe()
    sess = gpubackend.Session(_relu_model())  # the demo's pipeline makes its session the same way
    keys = set(report.paths) | {"cpu"}
    rows = [line.split() for line in report.table().splitlines()[2:] if line.split()[:1] and line.split()[0] in keys]
    table_preferred = [r[0] for r in rows if r[3] == "yes"]
    assert report.preferred_path == sess.path
    assert f"preferred path: {sess.path}" in report.table()
    assert table_preferred == [sess.path]
    if prefer:
        assert sess.path == report.usable_paths()[0]
