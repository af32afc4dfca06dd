"""Bool and int64 tensors on the compute paths (gles31, vulkan), held as exact floats
(``paths/compute_exact.py``): ArgMax / ArgMin, comparisons, logic ops, Where and Cast chained in one
segment with ``fallback=False`` against the NumPy reference, NaN included, in fp32 and fp16; and the
declines where an integer could pass the exact range."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import gpubackend
from gpubackend.errors import UnsupportedOperatorError

PATHS = ["gles31", "vulkan"]


def _model(nodes: list, inputs: list, outputs: list, inits: list | None = None) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "exact", inputs, outputs, initializer=inits or [])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def _chain() -> onnx.ModelProto:
    """ArgMax / ArgMin (int64) -> Cast to float; comparisons (bool) with broadcasting -> Or / Not /
    Xor -> Where of float tensors; Cast float -> bool -> float."""
    f = TensorProto.FLOAT
    nodes = [
        helper.make_node("ArgMax", ["x"], ["amax"], axis=1, keepdims=1),
        helper.make_node("ArgMin", ["x"], ["amin"], axis=2, keepdims=0, select_last_index=1),
        helper.make_node("Cast", ["amax"], ["amax_f"], to=f),
        helper.make_node("Less", ["x", "row"], ["lt"]),
        helper.make_node("Equal", ["x", "row"], ["eq"]),
        helper.make_node("Or", ["lt", "eq"], ["le"]),
        helper.make_node("Not", ["le"], ["gt"]),
        helper.make_node("Xor", ["gt", "flag"], ["sel"]),
        helper.make_node("Where", ["sel", "x", "amax_f"], ["picked"]),
        helper.make_node("Cast", ["picked"], ["nonzero"], to=TensorProto.BOOL),
        helper.make_node("Cast", ["nonzero"], ["nonzero_f"], to=f),
    ]
    inputs = [helper.make_tensor_value_info("x", f, [2, 5, 6]), helper.make_tensor_value_info("row", f, [6]),
              helper.make_tensor_value_info("flag", TensorProto.BOOL, [2, 1, 1])]
    outputs = [helper.make_tensor_value_info("amax", TensorProto.INT64, None),
               helper.make_tensor_value_info("amin", TensorProto.INT64, None),
               helper.make_tensor_value_info("le", TensorProto.BOOL, None),
               helper.make_tensor_value_info("picked", f, None),
               helper.make_tensor_value_info("nonzero_f", f, None)]
    return _model(nodes, inputs, outputs)


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("path", PATHS)
def test_bool_and_index_chain_matches_numpy(path: str, precision: str) -> None:
    rng = np.random.default_rng(3)
    x = np.round(rng.standard_normal((2, 5, 6)) * 4).astype(np.float32) / 4  # exact in fp16, with ties
    x[0, 2, 3] = np.nan
    x[1, :, 0] = 0.0
    row = np.round(rng.standard_normal(6) * 4).astype(np.float32) / 4
    row[4] = np.nan
    feeds = {"x": x, "row": row, "flag": np.array([True, False]).reshape(2, 1, 1)}
    model = _chain()
    want = gpubackend.Session(model, path="cpu", cpu_engine="numpy").run(feeds)
    sess = gpubackend.Session(model, path=path, precision=precision, fallback=False)
    got = sess.run(feeds)
    assert set(sess.placement.values()) == {path}
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w)


def _declines(model: onnx.ModelProto, path: str, precision: str = "fp32") -> str:
    with pytest.raises(UnsupportedOperatorError) as err:
        gpubackend.Session(model, path=path, precision=precision, fallback=False)
    return str(err.value)


@pytest.mark.parametrize("path", PATHS)
def test_integers_past_the_exact_range_decline(path: str) -> None:
    i64, b = TensorProto.INT64, TensorProto.BOOL
    where = _model([helper.make_node("Where", ["c", "a", "b"], ["y"])],
                   [helper.make_tensor_value_info("c", b, [3]), helper.make_tensor_value_info("a", i64, [3]),
                    helper.make_tensor_value_info("b", i64, [3])], [helper.make_tensor_value_info("y", i64, [3])])
    assert "known only at run time" in _declines(where, path)
    big = _model([helper.make_node("Where", ["c", "a", "k"], ["y"])],
                 [helper.make_tensor_value_info("c", b, [3]), helper.make_tensor_value_info("a", i64, [3])],
                 [helper.make_tensor_value_info("y", i64, [3])],
                 [helper.make_tensor("k", i64, [3], [1, 2, 1 << 30])])
    assert "not exact" in _declines(big, path)
    to_int = _model([helper.make_node("Cast", ["x"], ["y"], to=i64)],
                    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                    [helper.make_tensor_value_info("y", i64, [3])])
    assert "float32 to int64" in _declines(to_int, path)


@pytest.mark.parametrize("path", PATHS)
def test_argmax_over_a_long_axis_declines_only_in_fp16(path: str) -> None:
    model = _model([helper.make_node("ArgMax", ["x"], ["y"], axis=1, keepdims=0)],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3000])],
                   [helper.make_tensor_value_info("y", TensorProto.INT64, [2])])
    assert "indices past 2048" in _declines(model, path, "fp16")
    x = np.zeros((2, 3000), np.float32)
    x[0, 2999], x[1, 2100] = 1.0, 2.0
    got = gpubackend.Session(model, path=path, fallback=False).run({"x": x})[0]
    np.testing.assert_array_equal(got, [2999, 2100])
