"""Max pooling keeps NaN and -Inf as NumPy and onnxruntime do (GLSL's max() may drop a NaN operand:
a NaN pixel vanished from MaxPool/GlobalMaxPool on the compute paths, found by gpubackend.fuzz, and
from gles2's generated pooling and ReduceMax/ReduceMin)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import gpubackend
from gpubackend import fallback

PATHS = ["gles2", "gles3", "gles31", "vulkan"]


def _model(node) -> object:
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 6, 5, 7])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _input() -> np.ndarray:
    x = np.random.default_rng(3).standard_normal((1, 6, 5, 7)).astype(np.float32)
    x[0, 0, 1, 2] = np.nan       # one NaN in a window
    x[0, 1] = -np.inf            # a whole channel of -Inf
    x[0, 4, 4, 6] = np.inf
    x[0, 5, :, :] = np.nan       # a whole channel of NaN
    return x


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("op", ["MaxPool", "GlobalMaxPool"])
def test_max_pooling_keeps_nan_and_inf(path: str, op: str) -> None:
    attrs = {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]} if op == "MaxPool" else {}
    node = helper.make_node(op, ["x"], ["y"], **attrs)
    x = _input()
    want = fallback.run_node(op, [x], attrs)[0]
    assert np.isnan(want).any() and np.isneginf(want).any() and np.isposinf(want).any()
    with gpubackend.Session(_model(node), path=path, fallback=False) as sess:
        got = sess.run({"x": x})[0]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(got[~np.isnan(want)], want[~np.isnan(want)])


@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin"])
def test_gles2_max_min_reductions_keep_nan(op: str) -> None:
    node = helper.make_node(op, ["x"], ["y"], axes=[2, 3], keepdims=1)
    x = _input()
    x[0, 2, 3, 3] = -np.inf if op == "ReduceMax" else np.inf
    want = fallback.run_node(op, [x], {"axes": [2, 3], "keepdims": 1})[0]
    assert np.isnan(want).any()
    with gpubackend.Session(_model(node), path="gles2", fallback=False) as sess:
        got = sess.run({"x": x})[0]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(got[~np.isnan(want)], want[~np.isnan(want)])
