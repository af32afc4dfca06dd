"""gles3's index kernels (gpubackend/paths/gles3/index_ops.py) inside whole gles3 segments:
multi-output Split, layout chains as in YOLOv8's box head, programs shared between nodes, NaN
and infinities, rank-5 and very long last axes, and declines that stay declines. Single-op cases
on every path are in test_ops_all_paths.py."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import gpubackend
from gpubackend.errors import GpuBackendError
from gpubackend.paths.gles3 import index_ops
from gpubackend.paths.gles3.layout import MAX_ROW, to4d


def _model(nodes, inputs: dict[str, tuple[int, ...]], outputs: list[str], inits: dict[str, np.ndarray] | None = None,
           opset: int = 17) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
        [numpy_helper.from_array(v, k) for k, v in (inits or {}).items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _compare(model: onnx.ModelProto, feeds: dict[str, np.ndarray], precision: str = "fp32") -> gpubackend.Session:
    """Run on gles3 alone (fallback=False) and on the NumPy reference; one segment, same answers
    (NaN where the reference has NaN)."""
    ref = gpubackend.Session(model, path="cpu", cpu_engine="numpy").run(feeds)
    sess = gpubackend.Session(model, path="gles3", precision=precision, fallback=False)
    got = sess.run(feeds)
    assert set(sess.placement.values()) == {"gles3"}, sess.explain()
    assert "segments: 1" in sess.explain(), sess.explain()
    tol = 1e-4 if precision == "fp32" else 1e-2
    for g, r in zip(got, ref):
        assert g.shape == r.shape
        np.testing.assert_array_equal(np.isnan(g), np.isnan(r))
        finite = np.isfinite(r)
        np.testing.assert_array_equal(g[~finite & ~np.isnan(r)], r[~finite & ~np.isnan(r)])
        err = float(np.abs(g[finite] - r[finite]).max(initial=0)) / max(1.0, float(np.abs(r[finite]).max(initial=0)))
        assert err <= tol, err
    return sess


def test_views_fold_rank5_and_long_rows():
    assert to4d((1, 40, 3, 8, 15)) == (1, 40, 24, 15)
    assert to4d((1, 40, 18710)) == (1, 40, 5, 3742)
    assert to4d((1, 2, 2100)) == (1, 2, 1, 2100)
    assert to4d((1, 3, 4, 18710)) == (1, 3, 4, 18710)  # 4-D keeps H and W (convolutions index them)
    n, c, h, w = to4d((2, 3, MAX_ROW * 7 + 7))
    assert w <= MAX_ROW and h * w == MAX_ROW * 7 + 7


def test_index_map_merges_contiguous_digits():
    assert index_ops.simplify([(2, 12), (3, 4), (4, 1)]) == [(24, 1)]
    assert index_ops.simplify([(1, 99), (3, 0), (5, 1)]) == [(3, 0), (5, 1)]


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_yolo_box_head_chain_is_one_segment(precision):
    """YOLOv8's head: Split along channels, Reshape (1,64,A) -> (1,4,16,A), Transpose, Softmax over
    the bins, a 1x1 Conv, Concat along the anchor axis, Slice of the result."""
    a = 30
    rng = np.random.default_rng(0)
    w = rng.standard_normal((1, 16, 1, 1)).astype(np.float32)
    nodes = [
        helper.make_node("Split", ["x", "sp"], ["box", "cls"], axis=1),
        helper.make_node("Reshape", ["box", "shape"], ["r"]),
        helper.make_node("Transpose", ["r"], ["t"], perm=[0, 2, 1, 3]),
        helper.make_node("Softmax", ["t"], ["s"], axis=1),
        helper.make_node("Conv", ["s", "w"], ["d"]),
        helper.make_node("Reshape", ["d", "shape2"], ["d3"]),
        helper.make_node("Sigmoid", ["cls"], ["c"]),
        helper.make_node("Concat", ["d3", "c"], ["cat"], axis=1),
        helper.make_node("Concat", ["cat", "cat"], ["wide"], axis=2),
        helper.make_node("Slice", ["wide", "st", "en", "ax", "steps"], ["y"]),
    ]
    inits = {"sp": np.array([64, 5], np.int64), "shape": np.array([1, 4, 16, a], np.int64), "w": w,
             "shape2": np.array([1, 4, a], np.int64), "st": np.array([3], np.int64),
             "en": np.array([2 * a - 1], np.int64), "ax": np.array([2], np.int64), "steps": np.array([2], np.int64)}
    model = _model(nodes, {"x": (1, 69, a)}, ["y", "s"], inits)
    x = rng.standard_normal((1, 69, a)).astype(np.float32)
    _compare(model, {"x": x}, precision)


def test_split_outputs_each_feed_their_consumers():
    nodes = [helper.make_node("Split", ["x"], ["a", "b", "c"], axis=2, num_outputs=3),
             helper.make_node("Sub", ["c", "a"], ["d"]), helper.make_node("Mul", ["d", "b"], ["y"])]
    model = _model(nodes, {"x": (2, 5, 9)}, ["y", "b"], opset=18)
    x = np.random.default_rng(1).standard_normal((2, 5, 9)).astype(np.float32)
    sess = _compare(model, {"x": x})
    got_b = sess.run({"x": x})[1]
    np.testing.assert_array_equal(got_b, x[:, :, 3:6])


def test_nodes_sharing_a_program_keep_their_own_inputs():
    """Two Transposes of equal shapes compile to the same shader text, so they share one cached
    program; each draw must bind its own input (the class of the YOLOv8 wrong-answer bug)."""
    nodes = [helper.make_node("Transpose", ["a"], ["ta"], perm=[0, 2, 1]),
             helper.make_node("Transpose", ["b"], ["tb"], perm=[0, 2, 1]),
             helper.make_node("Sub", ["tb", "ta"], ["y"])]
    model = _model(nodes, {"a": (1, 6, 5), "b": (1, 6, 5)}, ["y"])
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((2, 1, 6, 5)).astype(np.float32)
    sess = gpubackend.Session(model, path="gles3", fallback=False)
    np.testing.assert_array_equal(sess.run({"a": a, "b": b})[0], (b - a).transpose(0, 2, 1))


def test_nan_and_infinities_travel():
    x = np.random.default_rng(3).standard_normal((2, 3, 8)).astype(np.float32)
    x[0, 1, 2] = np.nan
    x[1, 0, 5] = np.inf
    x[1, 2, 0] = -np.inf
    nodes = [helper.make_node("ReduceMax", ["x"], ["m"], axes=[2], keepdims=0),
             helper.make_node("ReduceMin", ["x"], ["n"], axes=[2], keepdims=0),
             helper.make_node("Softmax", ["x"], ["s"], axis=2),
             helper.make_node("Transpose", ["x"], ["t"], perm=[2, 0, 1]),
             helper.make_node("ReduceSum", ["x", "ax"], ["r"], keepdims=1)]
    model = _model(nodes, {"x": (2, 3, 8)}, ["m", "n", "s", "t", "r"], {"ax": np.array([0, 1], np.int64)})
    _compare(model, {"x": x})


def test_rank5_attention_reshape_and_long_last_axis():
    """SVTR's attention plumbing (rank-5 Reshape/Transpose, Gather of q/k/v, batched MatMul of two
    runtime tensors) and a classifier over 4200 classes (a row longer than MAX_ROW, folded into two;
    PP-OCRv6's 18710 classes exceed even a 16384-texel texture)."""
    rng = np.random.default_rng(4)
    wv = (rng.standard_normal((5, 4200)) * 0.1).astype(np.float32)
    nodes = [
        helper.make_node("Reshape", ["x", "s5"], ["r5"]),
        helper.make_node("Transpose", ["r5"], ["t5"], perm=[2, 0, 3, 1, 4]),
        helper.make_node("Gather", ["t5", "i0"], ["q"], axis=0),
        helper.make_node("Gather", ["t5", "i1"], ["k"], axis=0),
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["q", "kt"], ["att"]),
        helper.make_node("Softmax", ["att"], ["p"], axis=-1),
        helper.make_node("ReduceMean", ["p"], ["pm"], axes=[1], keepdims=0),
        helper.make_node("MatMul", ["pm", "wv"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["y"], axis=-1),
    ]
    inits = {"s5": np.array([1, 5, 3, 2, 6], np.int64), "i0": np.array(0, np.int64), "i1": np.array(1, np.int64),
             "wv": wv}
    x = rng.standard_normal((1, 5, 36)).astype(np.float32)
    _compare(_model(nodes, {"x": (1, 5, 36)}, ["y"], inits), {"x": x})


def test_reduction_too_long_for_a_fragment_is_declined():
    n = 2_000_000
    model = _model([helper.make_node("ReduceSum", ["x", "ax"], ["y"], keepdims=0)], {"x": (1, n)}, ["y"],
                   {"ax": np.array([1], np.int64)})
    with pytest.raises(GpuBackendError, match="too long for one fragment"):
        gpubackend.Session(model, path="gles3", fallback=False)
    sess = gpubackend.Session(model, path="gles3")  # with fallback: on the CPU, and right
    x = np.ones((1, n), np.float32)
    assert sess.run({"x": x})[0][0] == n


def test_long_reduction_counts_every_render_target_against_the_loop_limit():
    """16 channels are 4 render targets of 4 lanes: each fragment sums 16 rows of 40000, past
    llvmpipe's 65535 loop iterations at 8 steps per iteration (its loops then stop silently: the
    kernel check caught 1.03 off). A longer unrolled step keeps it under the limit."""
    assert index_ops.fragment_loop_edges(4, 1, 40000) > 65535
    model = _model([helper.make_node("ReduceSum", ["x", "ax"], ["y"], keepdims=1)], {"x": (1, 16, 40000)}, ["y"],
                   {"ax": np.array([2], np.int64)})
    x = np.random.default_rng(7).standard_normal((1, 16, 40000)).astype(np.float32)
    _compare(model, {"x": x})


@pytest.mark.parametrize("op,precision", [("Softmax", "fp32"), ("LogSoftmax", "fp32"), ("Softmax", "fp16")])
def test_long_softmax_runs_as_row_passes(op, precision):
    """A classifier head over many classes (PP-OCRv6 rec: (1, 40, 18710), which had failed its
    kernel check on gles3): row max, row sum, then the result; NaN and infinities as in short rows."""
    length = index_ops.LONG_SOFTMAX + 476
    x = np.random.default_rng(8).standard_normal((1, 6, length)).astype(np.float32) * 4
    x[0, 1, 7] = np.nan
    x[0, 2, 9] = np.inf
    x[0, 3, :] = -np.inf
    x[0, 4, 100] = 80.0  # exp would overflow without the row max
    model = _model([helper.make_node(op, ["x"], ["y"], axis=-1)], {"x": (1, 6, length)}, ["y"])
    sess = _compare(model, {"x": x}, precision)
    assert "gles3=1" in sess.explain()


def test_bool_and_index_results_leave_as_their_types():
    """Comparisons (bool), Where on a bool condition and ArgMax/ArgMin (int64, ties and NaN as
    numpy) in one gles3 segment: held as exact floats on the GPU, converted when they leave."""
    x = np.random.default_rng(5).standard_normal((3, 4, 5)).astype(np.float32)
    x[1, 2, 3] = np.nan
    x[0, 0, 1] = x[0, 0, 3] = 9.0
    nodes = [helper.make_node("Greater", ["x", "t"], ["g"]),
             helper.make_node("Where", ["g", "x", "z"], ["w"]),
             helper.make_node("ArgMax", ["w"], ["am"], axis=2, keepdims=0),
             helper.make_node("ArgMin", ["x"], ["an"], axis=2, select_last_index=1),
             helper.make_node("Equal", ["w", "x"], ["eq"])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (3, 4, 5))],
        [helper.make_tensor_value_info("am", TensorProto.INT64, None),
         helper.make_tensor_value_info("an", TensorProto.INT64, None),
         helper.make_tensor_value_info("eq", TensorProto.BOOL, None),
         helper.make_tensor_value_info("g", TensorProto.BOOL, None)],
        [numpy_helper.from_array(np.array([0.5, -0.5, 0.0, 1.0, 2.0], np.float32), "t"),
         numpy_helper.from_array(np.zeros((4, 1), np.float32), "z")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    ref = gpubackend.Session(model, path="cpu", cpu_engine="numpy").run({"x": x})
    sess = gpubackend.Session(model, path="gles3", fallback=False)
    got = sess.run({"x": x})
    assert "segments: 1" in sess.explain(), sess.explain()
    for g, r in zip(got, ref):
        assert g.dtype == r.dtype
        np.testing.assert_array_equal(g, r)
