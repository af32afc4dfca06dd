"""Cases written once and run on every GPU path against the CPU path."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import gpubackend

GPU_PATHS = ["gles31", "vulkan", "gles3", "gles2"]


@pytest.mark.parametrize("path", GPU_PATHS)
@pytest.mark.parametrize("lo,hi", [(-0.5, 0.5), (1.0, 0.5)])
def test_fused_clip_matches_cpu_even_when_min_exceeds_max(path: str, lo: float, hi: float) -> None:
    """Conv + Clip fused into one kernel; with min > max ONNX (np.clip) gives max everywhere, which
    GLSL's clamp() leaves undefined, so the shared activation snippet must not use it."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Clip", ["c", "lo", "hi"], ["y"])]
    graph = helper.make_graph(nodes, "conv_clip", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.float32(lo), "lo"),
                               numpy_helper.from_array(np.float32(hi), "hi")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
    (want,) = gpubackend.Session(model, path="cpu", cpu_engine="numpy").run({"x": x})
    sess = gpubackend.Session(model, path=path, fallback=False)
    (got,) = sess.run({"x": x})
    assert set(sess.placement.values()) == {path}
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("path", GPU_PATHS)
@pytest.mark.parametrize("op", ["GlobalAveragePool", "ReduceMean"])
def test_mean_of_a_large_plane_keeps_fp32_precision(path: str, op: str) -> None:
    """PP-OCRv6 det's first squeeze-excite mean over 120x160 was its largest single error step
    (whole model 1.1e-4 off onnxruntime on gles31/vulkan, 1.6e-4 on gles2): a running sum of 19200
    addends of 0.1 drifts (measured: 4.2e-5 with four running sums on gles31/vulkan, 1.7e-4 with one
    in gles2's ReduceMean; onnxruntime itself 2.3e-5); sums by block or by row stay under 1.5e-6."""
    shape = (1, 4, 120, 160)
    x = np.full(shape, 0.1, np.float32)
    node = (helper.make_node(op, ["x"], ["y"]) if op == "GlobalAveragePool" else
            helper.make_node(op, ["x", "axes"], ["y"], keepdims=1))
    graph = helper.make_graph([node], "mean", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 1, 1])],
                              [numpy_helper.from_array(np.array([2, 3], np.int64), "axes")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    sess = gpubackend.Session(model, path=path, fallback=False)
    (got,) = sess.run({"x": x})
    assert set(sess.placement.values()) == {path}
    want = x.astype(np.float64).mean(axis=(2, 3), keepdims=True)
    assert float(np.abs(got - want).max() / np.abs(want).max()) < 1e-5
