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
