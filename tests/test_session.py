"""The Session, model loading, errors and the ONNX backend API (no GPU needed)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import gpubackend
from gpubackend import backend


def _tiny_model(op: str = "Relu", shape: tuple = (1, 3, 4, 4)) -> onnx.ModelProto:
    node = helper.make_node(op, ["x"], ["y"], name="the_node")
    graph = helper.make_graph([node], "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_run_from_proto_bytes_and_path(tmp_path) -> None:
    model = _tiny_model()
    x = np.random.default_rng(0).standard_normal((1, 3, 4, 4)).astype(np.float32)
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    for source in (model, model.SerializeToString(), str(path), path):
        (y,) = gpubackend.Session(source, path="cpu").run({"x": x})
        np.testing.assert_array_equal(y, np.maximum(x, 0))


@pytest.mark.parametrize("blob", [b"", b"\x00\x01garbage" * 10, bytes(range(256)) * 3])
def test_malformed_model_bytes(blob: bytes) -> None:
    with pytest.raises(gpubackend.ModelError):
        gpubackend.Session(blob, path="cpu")


def test_truncated_model(tmp_path) -> None:
    data = _tiny_model().SerializeToString()
    with pytest.raises(gpubackend.ModelError):
        gpubackend.Session(data[: len(data) // 2], path="cpu")
    with pytest.raises(gpubackend.ModelError, match="not found"):
        gpubackend.Session(tmp_path / "missing.onnx", path="cpu")


def test_unknown_operator_names_op_and_node() -> None:
    node = helper.make_node("FrobnicateXYZ", ["x"], ["y"], name="weird_node", domain="com.example")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])
    with pytest.raises(gpubackend.UnsupportedOperatorError) as info:
        gpubackend.Session(model, path="cpu")
    assert "FrobnicateXYZ" in str(info.value) and "weird_node" in str(info.value)
    assert info.value.nodes[0][:2] == ("weird_node", "FrobnicateXYZ")


def test_wrong_feeds() -> None:
    sess = gpubackend.Session(_tiny_model(), path="cpu")
    good = np.ones((1, 3, 4, 4), np.float32)
    with pytest.raises(gpubackend.InputError, match="missing"):
        sess.run({})
    with pytest.raises(gpubackend.InputError, match="unknown"):
        sess.run({"x": good, "z": good})
    with pytest.raises(gpubackend.InputError, match="dtype"):
        sess.run({"x": good.astype(np.float64)})
    with pytest.raises(gpubackend.InputError, match="shape"):
        sess.run({"x": np.ones((1, 3, 4, 5), np.float32)})
    with pytest.raises(gpubackend.InputError, match="shape"):
        sess.run({"x": np.ones((3, 4, 4), np.float32)})
    with pytest.raises(gpubackend.InputError):
        sess.run([good])  # type: ignore[arg-type]


def test_bad_options() -> None:
    with pytest.raises(gpubackend.OptionError):
        gpubackend.Session(_tiny_model(), path="metal")
    with pytest.raises(gpubackend.OptionError):
        gpubackend.Session(_tiny_model(), path="cpu", precision="int8")


def test_symbolic_batch_and_constant_folding() -> None:
    # y = Reshape(x, Concat(Shape(x)[0:1], [-1])) -- shape plumbing folded once the batch is known
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Slice", ["s", "zero", "one"], ["n"]),
             helper.make_node("Concat", ["n", "minus1"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["y"])]
    inits = [numpy_helper.from_array(np.array([0], np.int64), "zero"),
             numpy_helper.from_array(np.array([1], np.int64), "one"),
             numpy_helper.from_array(np.array([-1], np.int64), "minus1")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 6])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    sess = gpubackend.Session(model, path="cpu")
    for n in (1, 5):
        x = np.arange(n * 6, dtype=np.float32).reshape(n, 2, 3)
        (y,) = sess.run({"x": x})
        np.testing.assert_array_equal(y, x.reshape(n, 6))
    assert [n.op_type for n in sess._current.graph.nodes] == ["Reshape"]


def test_backend_api() -> None:
    model = _tiny_model("Sigmoid")
    assert backend.supports_device("CPU") and not backend.supports_device("CUDA")
    x = np.random.default_rng(1).standard_normal((1, 3, 4, 4)).astype(np.float32)
    rep = backend.prepare(model, device="CPU", path="cpu")
    (y,) = rep.run([x])
    np.testing.assert_allclose(y, 1 / (1 + np.exp(-x)), rtol=1e-6)
    (y2,) = backend.run_model(model, [x], path="cpu")
    np.testing.assert_array_equal(y, y2)
    node = helper.make_node("Add", ["a", "b"], ["c"])
    (c,) = backend.run_node(node, [x, x], path="cpu")
    np.testing.assert_array_equal(c, x + x)
    with pytest.raises(gpubackend.InputError):
        rep.run([x, x])


def test_placement_and_explain() -> None:
    sess = gpubackend.Session(_tiny_model(), path="cpu")
    sess.run({"x": np.ones((1, 3, 4, 4), np.float32)})
    assert sess.placement == {"the_node": "cpu"}
    assert "chosen: cpu" in sess.explain()
    assert sess.stats.transfers == 0


def test_cli_run(tmp_path) -> None:
    model_path = tmp_path / "m.onnx"
    onnx.save(_tiny_model(), model_path)
    x = np.random.default_rng(2).standard_normal((1, 3, 4, 4)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    out = subprocess.run([sys.executable, "-m", "gpubackend", "run", str(model_path),
                          "--input", f"x={tmp_path / 'x.npy'}", "--path", "cpu", "--json",
                          "--output-dir", str(tmp_path / "out")],
                         capture_output=True, text=True, check=True)
    report = json.loads(out.stdout)
    assert report["path"] == "cpu" and report["outputs"][0]["shape"] == [1, 3, 4, 4]
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "y.npy"), np.maximum(x, 0))
    bad = subprocess.run([sys.executable, "-m", "gpubackend", "run", str(tmp_path / "nope.onnx"), "--path", "cpu"],
                         capture_output=True, text=True)
    assert bad.returncode == 1 and "not found" in bad.stderr and "Traceback" not in bad.stderr
    helptext = subprocess.run([sys.executable, "-m", "gpubackend", "run", "--help"], capture_output=True, text=True)
    assert helptext.returncode == 0 and "--input" in helptext.stdout


def test_model_without_output_shape_still_loads() -> None:
    node = helper.make_node("Relu", ["x"], ["y"])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
    (y,) = gpubackend.Session(model, path="cpu").run({"x": x})
    np.testing.assert_array_equal(y, np.maximum(x, 0))
