"""The GL runtime shared by the GL paths: state on cached (shared) programs, leaks across
sessions, GL contexts per thread."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import gpubackend

GPU_PATHS = ["gles31", "vulkan", "gles3", "gles2"]


def _two_subs_model(c: np.ndarray) -> object:
    """``s = Sub(C, A)`` (C a constant) then ``t = Sub(B, s)``: two nodes of one kernel and one
    shape whose operands are bound differently (a constant texture on the first operand, then
    two run-time tensors), so a program shared by both must get each node's bindings at its draw."""
    shape = c.shape
    vi = [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(shape)) for n in "AB"]
    nodes = [helper.make_node("Sub", ["C", "A"], ["s"], name="s"),
             helper.make_node("Sub", ["B", "s"], ["t"], name="t")]
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(shape)) for n in ("s", "t")]
    graph = helper.make_graph(nodes, "two_subs", vi, outs, [numpy_helper.from_array(c, "C")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("path", GPU_PATHS)
def test_nodes_sharing_a_program_keep_their_own_bindings(path: str) -> None:
    shape = (1, 4, 5, 6)
    rng = np.random.default_rng(1)
    c = rng.standard_normal(shape).astype(np.float32)
    feeds = {n: rng.standard_normal(shape).astype(np.float32) for n in "AB"}
    sess = gpubackend.Session(_two_subs_model(c), path=path, fallback=False)
    try:
        s, t = sess.run(feeds)
        assert set(sess.placement.values()) == {path}
    finally:
        sess.close()
    tol = 1e-2 if path == "gles2" else 1e-5
    np.testing.assert_allclose(s, c - feeds["A"], rtol=tol, atol=tol)
    np.testing.assert_allclose(t, feeds["B"] - (c - feeds["A"]), rtol=tol, atol=tol)
