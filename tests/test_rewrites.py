"""Elementwise tails taken into the producing convolution (gpubackend/rewrites.py): constant
per-channel Mul / Add / Sub / BatchNormalization folded into the weights, the four-node HardSwish
of opset < 14 exporters recognised (then fused into the conv), checked against onnxruntime on the
unrewritten model, NaN and infinities included."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import gpubackend
from gpubackend.model import load_model, to_graph

C = 6


def _tail_model() -> tuple[object, np.ndarray]:
    """PP-OCR's block (Conv, scalar Mul and Add, HardSwish as Add/Clip/Mul/Div, scalar Mul and
    Add, 1x1 Conv) and DBNet's head (ConvTranspose, bias Add, BatchNormalization, Relu); plus tails
    that must not fold: a spatially broadcast Mul, a conv output read twice, a per-channel Add
    before a padded Conv."""
    rng = np.random.default_rng(5)
    f = np.float32

    def const(name: str, v) -> object:
        return numpy_helper.from_array(np.asarray(v, f), name)

    inits = [const("w", rng.standard_normal((C, 3, 3, 3)) * 0.5), const("b", rng.standard_normal(C)),
             const("s", [1.7]), const("t", rng.standard_normal((1, C, 1, 1))), const("three", 3.0),
             const("zero", 0.0), const("six", 6.0), const("s2", [-0.8]), const("t2", [0.25]),
             const("wt", rng.standard_normal((C, 4, 2, 2)) * 0.5), const("bt", rng.standard_normal((1, 4, 1, 1))),
             const("g", rng.uniform(0.5, 1.5, 4)), const("beta", rng.standard_normal(4)),
             const("mean", rng.standard_normal(4)), const("var", rng.uniform(0.5, 2.0, 4)),
             const("w3", rng.standard_normal((C, 3, 1, 1))), const("hw", rng.standard_normal((1, 1, 8, 8))),
             const("w4", rng.standard_normal((C, 3, 1, 1))), const("w5", rng.standard_normal((3, C, 1, 1))),
             const("tx", rng.standard_normal((1, 3, 1, 1)))]
    n = helper.make_node
    nodes = [
        n("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        n("Mul", ["s", "c"], ["m1"], name="lab_mul"), n("Add", ["m1", "t"], ["a1"], name="lab_add"),
        n("Add", ["a1", "three"], ["h1"], name="hs_add"), n("Clip", ["h1", "zero", "six"], ["h2"], name="hs_clip"),
        n("Mul", ["a1", "h2"], ["h3"], name="hs_mul"), n("Div", ["h3", "six"], ["h4"], name="hs_div"),
        n("Mul", ["h4", "s2"], ["m2"], name="lab_mul2"), n("Add", ["m2", "t2"], ["p1"], name="lab_add2"),
        n("Conv", ["p1", "w5"], ["y1"], name="conv_after"),
        n("ConvTranspose", ["h4", "wt"], ["ct"], name="convt", strides=[2, 2]),
        n("Add", ["ct", "bt"], ["ctb"], name="convt_bias"),
        n("BatchNormalization", ["ctb", "g", "beta", "mean", "var"], ["bn"], name="bn", epsilon=1e-3),
        n("Relu", ["bn"], ["y2"], name="relu"),
        n("Conv", ["x", "w3"], ["c3"], name="conv_spatial"), n("Mul", ["c3", "hw"], ["y3"], name="spatial_mul"),
        n("Conv", ["x", "w4"], ["c4"], name="conv_twice"), n("Sub", ["t2", "c4"], ["d4"], name="sub"),
        n("Add", ["d4", "c4"], ["y4"], name="reads_c4_again"),
        n("Add", ["x", "tx"], ["xs"], name="shift_x"), n("Conv", ["xs", "w"], ["y5"], name="padded", pads=[1, 1, 1, 1]),
    ]
    outs = ["y1", "y2", "y3", "y4", "y5"]
    graph = helper.make_graph(nodes, "tails", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs], inits)
    x = rng.standard_normal((1, 3, 8, 8)).astype(f)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12)]), x


def _onnxruntime(model, x: np.ndarray) -> list[np.ndarray]:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    with np.errstate(all="ignore"):
        return sess.run(None, {"x": x})


def test_tails_fold_into_the_convs() -> None:
    model, _ = _tail_model()
    graph = to_graph(load_model(model))
    got = {n.name: (n.op_type, n.attrs.get("_act", (None,))[0]) for n in graph.nodes}
    # the block: one Conv with HardSwish, then the 1x1 Conv that took the Mul and Add after it
    assert got["conv"] == ("Conv", "HardSwish")
    assert sorted(graph.fused["conv_after"]) == ["lab_add2", "lab_mul2"]
    assert sorted(graph.fused["conv"]) == ["hs_div", "lab_add", "lab_mul"]
    assert sorted(graph.fused["hs_div"]) == ["hs_add", "hs_clip", "hs_mul"]
    assert got["convt"] == ("ConvTranspose", "Relu")
    assert sorted(graph.fused["convt"]) == ["bn", "convt_bias", "relu"]
    # a spatially broadcast constant and a conv output read twice stay as they are
    assert got["spatial_mul"] == ("Mul", None) and got["sub"] == ("Sub", None)
    assert "conv_twice" not in graph.fused and "conv_spatial" not in graph.fused and "padded" not in graph.fused
    assert got["shift_x"] == ("Add", None)
    assert len(graph.nodes) == 10


def _check(got: list[np.ndarray], want: list[np.ndarray], tol: float) -> None:
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape
        special = ~np.isfinite(w)
        assert np.array_equal(np.isnan(g), np.isnan(w)), f"output {i}: NaN positions differ"
        assert np.array_equal(g[special & ~np.isnan(w)], w[special & ~np.isnan(w)]), f"output {i}: infinities differ"
        fin = np.isfinite(w)
        err = float(np.abs(g[fin] - w[fin]).max()) / max(1.0, float(np.abs(w[fin]).max()))
        assert err <= tol, f"output {i}: error {err:.3g}"


@pytest.mark.parametrize("path", ["cpu", "gles31", "vulkan"])
def test_folded_tails_match_onnxruntime_with_nan_and_inf(path: str) -> None:
    model, x = _tail_model()
    x[0, :, 0, 0] = np.nan
    x[0, 0, 4, 4] = np.inf
    x[0, 1, 6, 2] = -np.inf
    want = _onnxruntime(model, x)
    kw = {"cpu_engine": "numpy"} if path == "cpu" else {}
    sess = gpubackend.Session(model, path=path, fallback=False, **kw)
    assert set(sess.placement.values()) == {path}
    got = sess.run({"x": x})
    _check(got, want, 1e-4)
    assert all(np.isnan(w).any() for w in want)


def test_onnxruntime_engine_runs_the_rewritten_model_below_opset_14() -> None:
    """The rewrites make a HardSwish node (and fuse it into a Conv) in an opset-12 model, where
    onnxruntime has no HardSwish: the CPU segment handed to onnxruntime spells it out again as
    x * Clip(x + 3, 0, 6) / 6 instead of falling back to the NumPy engine (PP-OCR's detectors
    ran 130 of 258 nodes on numpy on the onnxruntime engine)."""
    model, x = _tail_model()
    x[0, :, 0, 0] = np.nan
    x[0, 0, 4, 4] = np.inf
    want = _onnxruntime(model, x)
    sess = gpubackend.Session(model, path="cpu", cpu_engine="onnxruntime")
    got = sess.run({"x": x})
    assert "runs on numpy" not in sess.explain(), sess.explain()
    _check(got, want, 1e-5)


def _upsample_model() -> tuple[object, np.ndarray]:
    """Upsampling Resizes before 1x1 Convs: two that swap places with their conv (linear by
    scales, nearest by constant sizes) and six that must not (a 3x3 conv, a Resize read twice, an
    activation after the conv, cubic interpolation, a conv whose many output channels would make
    the Resize dearer than the conv saves, a downsampling Resize)."""
    rng = np.random.default_rng(8)
    f = np.float32

    def const(name: str, v, dtype=f) -> object:
        return numpy_helper.from_array(np.asarray(v, dtype), name)

    inits = [const("x2", [1, 1, 2, 2]), const("half", [1, 1, 0.5, 0.5]), const("sizes", [1, 3, 16, 16], np.int64),
             const("w1", rng.standard_normal((5, 3, 1, 1))), const("b1", rng.standard_normal(5)),
             const("w3", rng.standard_normal((4, 3, 3, 3))), const("w64", rng.standard_normal((64, 3, 1, 1)))]
    n = helper.make_node
    lin = {"mode": "linear", "coordinate_transformation_mode": "half_pixel"}
    nodes = [
        n("Resize", ["x", "", "x2"], ["r1"], name="up_linear", **lin),
        n("Conv", ["r1", "w1", "b1"], ["y1"], name="conv_linear"),
        n("Resize", ["x", "", "", "sizes"], ["r2"], name="up_sizes", mode="nearest"),
        n("Conv", ["r2", "w1"], ["y2"], name="conv_sizes"),
        n("Resize", ["x", "", "x2"], ["r3"], name="up_3x3", **lin),
        n("Conv", ["r3", "w3"], ["y3"], name="conv_3x3", pads=[1, 1, 1, 1]),
        n("Resize", ["x", "", "x2"], ["r4"], name="up_twice", **lin),
        n("Conv", ["r4", "w1", "b1"], ["c4"], name="conv_twice"), n("Neg", ["r4"], ["y4b"], name="reads_r4"),
        n("Resize", ["x", "", "x2"], ["r5"], name="up_relu", **lin),
        n("Conv", ["r5", "w1", "b1"], ["c5"], name="conv_relu"), n("Relu", ["c5"], ["y5"], name="relu"),
        n("Resize", ["x", "", "x2"], ["r6"], name="up_cubic", mode="cubic"),
        n("Conv", ["r6", "w1"], ["y6"], name="conv_cubic"),
        n("Resize", ["x", "", "x2"], ["r7"], name="up_wide", **lin),
        n("Conv", ["r7", "w64"], ["y7"], name="conv_wide"),
        n("Resize", ["x", "", "half"], ["r8"], name="down", **lin),
        n("Conv", ["r8", "w1"], ["y8"], name="conv_down"),
    ]
    outs = ["y1", "y2", "y3", "c4", "y4b", "y5", "y6", "y7", "y8"]
    graph = helper.make_graph(nodes, "upsample", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs], inits)
    x = rng.standard_normal((1, 3, 8, 8)).astype(f)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), x


def test_conv_before_upsample_only_where_it_saves_reads() -> None:
    model, _ = _upsample_model()
    graph = to_graph(load_model(model))
    order = [n.name for n in graph.nodes]
    for conv, resize in (("conv_linear", "up_linear"), ("conv_sizes", "up_sizes")):
        assert order.index(conv) < order.index(resize), order
        node = {n.name: n for n in graph.nodes}[conv]
        assert node.inputs[0] == "x" and graph.shapes[node.outputs[0]] == (1, 5, 8, 8)
    sizes = {n.name: n for n in graph.nodes}["up_sizes"].inputs[3]
    assert graph.constants[sizes].tolist() == [1, 5, 16, 16]
    for conv, resize in (("conv_3x3", "up_3x3"), ("conv_twice", "up_twice"), ("conv_relu", "up_relu"),
                         ("conv_cubic", "up_cubic"), ("conv_wide", "up_wide"), ("conv_down", "down")):
        assert order.index(resize) < order.index(conv), conv


@pytest.mark.parametrize("path", ["cpu", "gles2", "gles31", "vulkan"])
def test_conv_before_upsample_matches_onnxruntime_with_nan_and_inf(path: str) -> None:
    model, x = _upsample_model()
    x[0, 0, 2, 3] = np.nan
    x[0, 1, 5, 5] = np.inf
    x[0, 2, 7, 0] = -np.inf
    want = _onnxruntime(model, x)
    kw = {"cpu_engine": "numpy"} if path == "cpu" else {}
    sess = gpubackend.Session(model, path=path, **kw)  # gles2 has no cubic Resize
    swapped = ("conv_linear", "up_linear", "conv_sizes", "up_sizes")
    assert {sess.placement[name] for name in swapped} == {path}
    _check(sess.run({"x": x}), want, 1e-4)
    assert "conv_linear before up_linear, conv_sizes before up_sizes" in sess.explain()
    x = np.random.default_rng(9).standard_normal(x.shape).astype(np.float32)
    _check(sess.run({"x": x}), _onnxruntime(model, x), 1e-5)
