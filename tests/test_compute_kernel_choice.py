"""Which compute shader a node gets (the specialised kernels of issue 16 must be the ones that run;
their results are checked in tests/test_ops.py and tests/test_tuning.py)."""

from __future__ import annotations

import numpy as np
import pytest

from gpubackend.graph import Graph, Node
from gpubackend.paths import compute_kernels as ck


def _convtranspose(kernel: list[int], strides: list[int], pads: list[int]) -> tuple[Node, Graph]:
    w = np.zeros((8, 4) + tuple(kernel), np.float32)
    oh = (6 - 1) * strides[0] + kernel[0] - pads[0] - pads[2]
    ow = (7 - 1) * strides[1] + kernel[1] - pads[1] - pads[3]
    node = Node("ct", "ConvTranspose", ["x", "w"], ["y"], {"kernel_shape": kernel, "strides": strides, "pads": pads})
    shapes = {"x": (1, 8, 6, 7), "w": w.shape, "y": (1, 4, oh, ow)}
    graph = Graph([node], ["x"], ["y"], {"w": w}, shapes, {}, 17, {"x": (1, 8, 6, 7)})
    return node, graph


def test_convtranspose_with_kernel_equal_to_stride_runs_the_taps_kernel() -> None:
    taps, generic = ("convtranspose", "compute/convtranspose_tap.comp"), ("convtranspose", "compute/convtranspose.comp")
    for kernel, strides, pads, want in [([2, 2], [2, 2], [0, 0, 0, 0], taps), ([3, 2], [3, 2], [0, 0, 0, 0], taps),
                                        ([3, 3], [2, 2], [0, 0, 0, 0], generic),
                                        ([2, 2], [2, 2], [1, 1, 1, 1], generic)]:
        got = ck.generate(*_convtranspose(kernel, strides, pads))
        assert not isinstance(got, str), got
        assert (got.kernel, got.payload[0].shader) == want, (kernel, strides, pads)


def _binary_graph(op: str, sa: tuple[int, ...], sb: tuple[int, ...]) -> tuple[Node, Graph]:
    y = tuple(np.broadcast_shapes(sa, sb))
    node = Node("bin", op, ["a", "b"], ["y"])
    graph = Graph([node], ["a", "b"], ["y"], {}, {"a": sa, "b": sb, "y": y}, {}, 17, {"a": sa, "b": sb})
    return node, graph


def test_binary_ops_index_flat_or_per_channel_where_the_layouts_allow() -> None:
    """FLAT (no index arithmetic) only where both operands have the output's packed layout and
    no lane is padding; CHAN where one operand is a vector per channel of one image."""
    for sa, sb, want in [((1, 8, 5, 7), (1, 8, 5, 7), {"FLAT": 1}), ((2, 3, 4), (2, 3, 4), {"FLAT": 1}),
                         ((1, 6, 5, 7), (1, 6, 5, 7), {}),  # 6 channels: padded lanes need tail_zero
                         ((1, 8, 5, 7), (1, 8, 1, 1), {"CHAN": 1}), ((1, 6, 5, 7), (1, 6, 1, 1), {"CHAN": 1}),
                         ((1, 8, 1, 1), (1, 8, 5, 7), {"CHAN": 2}),
                         ((2, 8, 5, 7), (2, 8, 1, 1), {}),  # a gate per image: general indexing
                         ((1, 8, 5, 7), (1, 1, 5, 7), {}), ((1, 8, 1, 7), (1, 8, 5, 7), {})]:
        got = ck.generate(*_binary_graph("Mul", sa, sb))
        assert not isinstance(got, str), got
        (rec,) = got.payload
        index = {k: v for k, v in rec.defines if k in ("FLAT", "CHAN")}
        assert index == want, (sa, sb, rec.defines)


@pytest.mark.parametrize("path", ["gles31", "vulkan"])
def test_flat_and_per_channel_binary_ops_keep_ieee_specials(path: str) -> None:
    shape = [1, 8, 3, 5]
    rng = np.random.default_rng(3)
    for b_shape in ([1, 8, 3, 5], [1, 8, 1, 1]):  # FLAT, CHAN
        a = rng.standard_normal(shape).astype(np.float32)
        b = rng.standard_normal(b_shape).astype(np.float32)
        a.flat[:6] = [0.0, 1.0, -1.0, np.inf, np.nan, -np.inf]
        b.flat[:6] = [0.0, 0.0, 0.0, np.inf, 1.0, 2.0]
        for op in ("Add", "Div", "Mul"):
            _check_binary(path, op, a, b)


def _check_binary(path: str, op: str, a: np.ndarray, b: np.ndarray) -> None:
    from onnx import TensorProto, helper

    import gpubackend

    with np.errstate(all="ignore"):
        ref = {"Add": a + b, "Div": a / b, "Mul": a * b}[op]
    for first, second, want in (("a", "b", ref), ("b", "a", None)):
        graph = helper.make_graph([helper.make_node(op, [first, second], ["y"])], "g",
                                  [helper.make_tensor_value_info("a", TensorProto.FLOAT, a.shape),
                                   helper.make_tensor_value_info("b", TensorProto.FLOAT, b.shape)],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, ref.shape)])
        if want is None:
            with np.errstate(all="ignore"):
                want = {"Add": b + a, "Div": b / a, "Mul": b * a}[op]
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        sess = gpubackend.Session(model.SerializeToString(), path=path, fallback=False)
        (got,) = sess.run({"a": a, "b": b})
        np.testing.assert_array_equal(got, want, err_msg=f"{op}({first}, {second}) {a.shape} {b.shape} on {path}")
        sess.close()


def test_untuned_blocking_narrows_to_the_output_blocks_a_layer_has() -> None:
    from gpubackend import tuning

    for unit, default in (("conv", "bx4cb4tex"), ("gemm", "px4cb4sg")):
        v = tuning.units()[unit].variant(default)
        assert v is not None
        assert ck.narrowed(unit, v, 4) is v and ck.narrowed(unit, v, 8) is v
        for co4 in (1, 2, 3, 6):
            got = dict(ck.narrowed(unit, v, co4).defines)
            assert -(-co4 // got["CB"]) * got["CB"] - co4 < -(-co4 // 4) * 4 - co4, (unit, co4, got)
        assert ("TEXX", 1) in ck.narrowed("conv", tuning.units()["conv"].variant("bx4cb4tex"), 2).defines
    with tuning.forced(conv="bx4cb4"):  # a forced (or tuned) variant is kept as it is
        w = np.zeros((8, 8, 3, 3), np.float32)
        conv = Node("c", "Conv", ["x", "w"], ["y"], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]})
        g = Graph([conv], ["x"], ["y"], {"w": w}, {"x": (1, 8, 5, 7), "w": w.shape, "y": (1, 8, 5, 7)}, {}, 17,
                  {"x": (1, 8, 5, 7)})
        got = ck.generate(conv, g)
        assert not isinstance(got, str) and got.payload[0].variant == "bx4cb4"


@pytest.mark.parametrize("path", ["gles31", "vulkan"])
def test_flat_unary_ops_keep_ieee_specials(path: str) -> None:
    from onnx import TensorProto, helper

    import gpubackend
    from gpubackend import fallback

    x = np.random.default_rng(5).standard_normal((1, 8, 3, 5)).astype(np.float32) * 4
    x.flat[:5] = [np.nan, np.inf, -np.inf, 0.0, -0.0]
    for op in ("Relu", "Sigmoid", "Tanh", "Abs"):
        graph = helper.make_graph([helper.make_node(op, ["x"], ["y"])], "g",
                                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, x.shape)])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        with gpubackend.Session(model.SerializeToString(), path=path, fallback=False) as sess:
            (got,) = sess.run({"x": x})
        want = fallback.run_node(op, [x], {}, 17)[0]
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=f"{op} on {path}")
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=f"{op} on {path}")


# ---- Resize taps: one entry per axis where the shader's coordinate arithmetic is exact ----------
_RESIZE_GEOMETRIES = [  # (input shape, scales, coordinate mode, per-axis entries expected)
    ((1, 5, 6, 5), [1, 1, 2, 2], "half_pixel", True), ((1, 3, 7, 9), [1, 1, 4, 2], "asymmetric", True),
    ((1, 4, 8, 6), [1, 1, 0.5, 0.5], "half_pixel", True), ((2, 6, 3, 5), [1, 1, 2, 8], "pytorch_half_pixel", True),
    ((1, 4, 6, 6), [1, 1, 1.5, 1.5], "half_pixel", False), ((1, 4, 5, 7), [1, 1, 2, 2], "align_corners", False)]


def _resize_model(shape: tuple[int, ...], scales: list[float], coord: str, mode: str = "linear"):
    from onnx import TensorProto, helper, numpy_helper

    node = helper.make_node("Resize", ["x", "", "s"], ["y"], mode=mode, coordinate_transformation_mode=coord)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.array(scales, np.float32), "s")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("shape,scales,coord,per_axis", _RESIZE_GEOMETRIES)
def test_linear_resize_taps_per_axis_only_where_exact(shape, scales, coord, per_axis) -> None:
    """A linear Resize whose every tap the shader computes exactly from (o + a) * s - b (float32
    steps checked exact on the host) ships one (a, s, b) entry per axis instead of a table entry
    per output row and column: a 2x upsample's 16 bytes at any size; other scales keep the table."""
    from gpubackend.paths.vulkan import single_node_graph

    graph, _ = single_node_graph("Resize", [np.zeros(shape, np.float32), None, np.array(scales, np.float32)],
                                 {"mode": "linear", "coordinate_transformation_mode": coord}, (2,))
    got = ck.generate(graph.nodes[0], graph)
    assert not isinstance(got, str), got
    (rec,) = got.payload
    params, (taps,) = dict(rec.params), [b.data for b in rec.bindings if b.role == "const"]
    assert (params["tw"] == 0) == per_axis, params
    if per_axis:
        same = shape[2] == shape[3] and scales[2] == scales[3]
        assert taps.shape == ((1, 4) if same else (2, 4)) and params["tcol"] == (0 if same else 1)


@pytest.mark.parametrize("path", ["gles31", "vulkan"])
def test_linear_resize_taps_per_axis_give_the_table_bit_for_bit(path: str, monkeypatch) -> None:
    """The per-axis coordinate form and the host tap table give the same floats bit for bit on
    the device (and the reference's values)."""
    import gpubackend
    from gpubackend import fallback

    rng = np.random.default_rng(11)
    for shape, scales, coord, per_axis in _RESIZE_GEOMETRIES:
        if not per_axis:
            continue
        x = rng.standard_normal(shape).astype(np.float32)
        model = _resize_model(shape, scales, coord).SerializeToString()
        got = []
        for affine in (ck._affine_taps, lambda *a: None):
            monkeypatch.setattr(ck, "_affine_taps", affine)
            with gpubackend.Session(model, path=path, fallback=False) as sess:
                got.append(sess.run({"x": x})[0])
        np.testing.assert_array_equal(got[0], got[1], err_msg=f"{shape} {scales} {coord} on {path}")
        want = fallback.run_node("Resize", [x, None, np.array(scales, np.float32)],
                                 {"mode": "linear", "coordinate_transformation_mode": coord}, 17)[0]
        np.testing.assert_allclose(got[0], want, rtol=1e-6, atol=1e-6, err_msg=f"{shape} {scales} {coord} on {path}")


# (input shape, scales, coordinate mode, mode): upsamples by 2, 4, 1.5 and 1.25 (odd output sizes
# too), each of which takes resize.comp's 2x2 output blocks; a downsample, which does not
_BLOCK_GEOMETRIES = [((1, 5, 6, 5), [1, 1, 2, 2], "half_pixel", "linear"),
                     ((1, 3, 7, 9), [1, 1, 4, 2], "asymmetric", "linear"),
                     ((1, 4, 6, 6), [1, 1, 1.5, 1.5], "half_pixel", "linear"),
                     ((2, 6, 4, 7), [1, 1, 1.25, 1.5], "align_corners", "linear"),
                     ((1, 5, 5, 7), [1, 1, 2, 3], "pytorch_half_pixel", "linear"),
                     ((1, 4, 5, 7), [1, 1, 2, 2], "asymmetric", "nearest"),
                     ((1, 4, 5, 7), [1, 1, 1.5, 2.5], "half_pixel", "nearest"),
                     ((1, 4, 8, 6), [1, 1, 0.5, 0.5], "half_pixel", "linear")]


@pytest.mark.parametrize("path", ["gles31", "vulkan"])
def test_upsample_in_2x2_blocks_gives_the_same_bits(path: str, monkeypatch) -> None:
    """An upsample runs as 2x2 output blocks per invocation from one 3x3 source window (BLOCK2,
    9 loads instead of 16); it gives the one-output kernel's floats bit for bit, and a downsample
    keeps the one-output kernel."""
    import gpubackend
    from gpubackend import fallback
    from gpubackend.paths.vulkan import single_node_graph

    rng = np.random.default_rng(12)
    in_window = ck._pairs_in_window
    for shape, scales, coord, mode in _BLOCK_GEOMETRIES:
        monkeypatch.setattr(ck, "_pairs_in_window", in_window)
        attrs = {"mode": mode, "coordinate_transformation_mode": coord}
        graph, _ = single_node_graph("Resize", [np.zeros(shape, np.float32), None, np.array(scales, np.float32)],
                                     attrs, (2,))
        (rec,) = ck.generate(graph.nodes[0], graph).payload
        assert ("BLOCK2" in dict(rec.defines)) == (min(scales) >= 1), (shape, scales, coord, mode)
        x = rng.standard_normal(shape).astype(np.float32)
        model = _resize_model(shape, scales, coord, mode).SerializeToString()
        got = []
        for window in (in_window, lambda *a: False):
            monkeypatch.setattr(ck, "_pairs_in_window", window)
            with gpubackend.Session(model, path=path, fallback=False) as sess:
                got.append(sess.run({"x": x})[0])
        np.testing.assert_array_equal(got[0], got[1], err_msg=f"{shape} {scales} {coord} {mode} on {path}")
        want = fallback.run_node("Resize", [x, None, np.array(scales, np.float32)], attrs, 17)[0]
        np.testing.assert_allclose(got[0], want, rtol=1e-6, atol=1e-6, err_msg=f"{shape} {scales} {coord} {mode}")


@pytest.mark.parametrize("path", ["gles31", "vulkan"])
def test_winograd_conv_keeps_ieee_specials(path: str) -> None:
    """A Winograd layer's transforms mix the 16 inputs of a patch: an infinite input must still give
    +-Inf (not NaN) where the direct sum does, and NaN only where it does. Specials at a corner, on
    a border, inside a tile and at both parities, with a fused ReLU and a concat-free output."""
    from onnx import TensorProto, helper, numpy_helper

    import gpubackend
    from tests.models import onnxruntime_outputs

    rng = np.random.default_rng(5)
    ci, co, size = 16, 64, 12  # Winograd untuned (co >= 64), 144 output pixels
    w = (rng.standard_normal((co, ci, 3, 3)) * 0.2).astype(np.float32)
    w[3, :, 1, 1] = 0.0  # output channel 3 multiplies the centre tap by zero: Inf * 0 is NaN there
    b = rng.standard_normal(co).astype(np.float32)
    x = rng.standard_normal((1, ci, size, size)).astype(np.float32)
    for c, yy, xx, v in [(0, 0, 0, np.inf), (1, 5, 0, -np.inf), (2, 6, 7, np.inf), (5, 7, 6, -np.inf),
                         (7, 11, 11, np.nan), (9, 3, 9, np.inf), (9, 3, 10, -np.inf)]:
        x[0, c, yy, xx] = v
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Relu", ["c"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, co, size, size])],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    (want,) = onnxruntime_outputs(model, {"x": x})
    sess = gpubackend.Session(model.SerializeToString(), path=path, fallback=False)
    try:
        assert "conv_winograd" in sess.explain(), sess.explain()
        (got,) = sess.run({"x": x})
    finally:
        sess.close()
    assert np.isinf(want).any() and np.isnan(want).any()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.where(np.isinf(want), want, 0), np.where(np.isinf(got), got, 0))
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-4, atol=1e-4 * max(1.0, np.abs(want[finite]).max()))
