"""Models a runtime must refuse (or run exactly as written) rather than reinterpret: issue 18's
"accepts what it should refuse" reproducers, each on the CPU path and one GPU path."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import gpubackend
from gpubackend.errors import ModelError, UnsupportedOperatorError

PATHS = ["cpu", "gles31"]
X = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])


def _model(nodes, inits=(), opset: int = 17, extra_opsets=()) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", [X], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset), *extra_opsets])


def _w(dtype) -> onnx.TensorProto:
    return numpy_helper.from_array(np.ones((2, 2, 1, 1), dtype), "w")


@pytest.mark.parametrize("path", PATHS)
def test_activation_in_a_foreign_domain_is_not_fused_or_run_as_standard(path: str) -> None:
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]),
             helper.make_node("Relu", ["c"], ["y"], domain="com.evil")]
    model = _model(nodes, [_w(np.float32)], extra_opsets=[helper.make_opsetid("com.evil", 1)])
    with pytest.raises(UnsupportedOperatorError, match="com.evil"):
        gpubackend.Session(model, path=path)


@pytest.mark.parametrize("dtype", [np.int32, np.float16, np.float64, np.bool_])
def test_weights_of_the_wrong_type_are_refused(dtype) -> None:
    model = _model([helper.make_node("Conv", ["x", "w"], ["y"])], [_w(dtype)])
    with pytest.raises(ModelError, match="type"):
        gpubackend.Session(model, path="cpu")


def test_opset_newer_than_onnx_is_refused() -> None:
    model = _model([helper.make_node("Relu", ["x"], ["y"])], opset=999)
    with pytest.raises(ModelError, match="opset 999"):
        gpubackend.Session(model, path="cpu")


@pytest.mark.parametrize("path", PATHS)
def test_duplicate_node_names_run(path: str) -> None:
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="same"),
             helper.make_node("Neg", ["a"], ["b"], name="same"),
             helper.make_node("Relu", ["b"], ["y"], name="same")]
    x = np.linspace(-2, 2, 32, dtype=np.float32).reshape(1, 2, 4, 4)
    sess = gpubackend.Session(_model(nodes), path=path)
    try:
        np.testing.assert_array_equal(sess.run({"x": x})[0], np.maximum(-np.maximum(x, 0), 0))
        assert len(sess.placement) == 3
    finally:
        sess.close()


def test_external_data_needs_a_model_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    w = numpy_helper.from_array(np.full((2, 2, 1, 1), 0.5, np.float32), "w")
    model = _model([helper.make_node("Conv", ["x", "w"], ["y"])], [w])
    folder = tmp_path / "model"
    folder.mkdir()
    onnx.save(model, folder / "m.onnx", save_as_external_data=True, all_tensors_to_one_file=True,
              location="weights.bin", size_threshold=0)
    x = np.ones((1, 2, 4, 4), np.float32)
    sess = gpubackend.Session(str(folder / "m.onnx"), path="cpu")  # from its path: the data is found beside it
    np.testing.assert_allclose(sess.run({"x": x})[0], np.ones((1, 2, 4, 4)))
    sess.close()
    raw = onnx.load(folder / "m.onnx", load_external_data=False)
    planted = tmp_path / "cwd"
    planted.mkdir()
    (planted / "weights.bin").write_bytes(np.full(4, 99.0, np.float32).tobytes())  # a stranger's file
    monkeypatch.chdir(planted)
    for given in (raw, raw.SerializeToString()):
        with pytest.raises(ModelError, match="external file"):
            gpubackend.Session(given, path="cpu")
    assert os.getcwd() == str(planted)



@pytest.mark.parametrize("dtype", [np.float16, np.float64])
def test_an_input_type_outside_the_op_schema_is_refused(dtype) -> None:
    # Resize's scales are tensor(float) in every opset; onnx's strict type inference does not flag
    # a float16 or double one (no type variable to disagree on) and onnxruntime refuses the model
    scales = numpy_helper.from_array(np.array([1, 1, 2, 2], dtype), "scales")
    model = _model([helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="nearest")], [scales])
    with pytest.raises(ModelError, match=r"Resize.*'scales' is tensor\((float16|double)\).*allows tensor\(float\)"):
        gpubackend.Session(model, path="cpu")


def test_types_the_op_schema_allows_load() -> None:
    # variadic inputs (Concat, Sum) and float scales pass the schema check
    nodes = [helper.make_node("Concat", ["x", "x", "x"], ["c"], axis=1),
             helper.make_node("Sum", ["c", "c", "c"], ["s"]),
             helper.make_node("Resize", ["s", "", "scales"], ["y"], mode="nearest")]
    scales = numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")
    sess = gpubackend.Session(_model(nodes, [scales]), path="cpu")
    x = np.arange(32, dtype=np.float32).reshape(1, 2, 4, 4)
    (y,) = sess.run({"x": x})
    assert y.shape == (1, 6, 8, 8)
    np.testing.assert_array_equal(y[:, :2, ::2, ::2], 3 * x)


def test_an_element_type_no_onnx_type_has_is_a_model_error() -> None:
    # found by the fuzzer (a flipped byte): element type 80 made the schema check raise ValueError
    w = _w(np.float32)
    w.data_type = 80
    with pytest.raises(ModelError):
        gpubackend.Session(_model([helper.make_node("Conv", ["x", "w"], ["y"])], [w]), path="cpu")
