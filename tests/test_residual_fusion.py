"""A residual Add after a Conv fused into the conv's last draw on gles2 (``segment_services.
fuse_residual_adds``, ``ops.residual_into``; added after the conv's activation in ``_Gen.finish`` and
in the quad GEMMs' shared shader), checked against onnxruntime with NaN and infinities, against the
same session without the fusion bit for bit, and by the draw count; where the pattern does not hold
(a broadcast Add, a conv output read twice, fp16 storage) nothing is fused."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from models import assert_same_specials_and_close
from onnx import TensorProto, helper, numpy_helper

import gpubackend

X_SHAPE, WIDE_SHAPE = (1, 32, 12, 11), (1, 130, 6, 5)
# name -> (input, weight shape, attributes, SiLU after the conv, residual first in the Add); each
# block's Add reads its conv's output and its input
BLOCKS = {
    "1x1": ("x", (32, 32, 1, 1), {}, False, False),  # the quad GEMMs' shared shader, one pass
    "1x1-two-passes": ("wide", (130, 130, 1, 1), {}, False, True),  # a previous pass and the residual
    "3x3-winograd": ("x", (32, 32, 3, 3), {"pads": [1, 1, 1, 1]}, False, False),
    "3x3-dilated-quads": ("x", (32, 32, 3, 3), {"pads": [2, 2, 2, 2], "dilations": [2, 2]}, False, False),
    "depthwise": ("x", (32, 1, 3, 3), {"pads": [1, 1, 1, 1], "group": 32}, False, False),
    "silu-bottleneck": ("x", (32, 32, 3, 3), {"pads": [1, 1, 1, 1]}, True, True),  # YOLOv8's x + SiLU(conv)
}


def _model() -> object:
    rng = np.random.default_rng(5)
    n = helper.make_node
    nodes, inits, outs = [], [], []
    for name, (src, wshape, attrs, silu, first) in BLOCKS.items():
        inits += [numpy_helper.from_array((rng.standard_normal(wshape) * 0.2).astype(np.float32), f"w_{name}"),
                  numpy_helper.from_array(rng.standard_normal(wshape[0]).astype(np.float32), f"b_{name}")]
        nodes.append(n("Conv", [src, f"w_{name}", f"b_{name}"], [f"c_{name}"], name=name, **attrs))
        y = f"c_{name}"
        if silu:
            nodes += [n("Sigmoid", [y], [f"s_{name}"]), n("Mul", [y, f"s_{name}"], [f"m_{name}"])]
            y = f"m_{name}"
        nodes.append(n("Add", [src, y] if first else [y, src], [f"y_{name}"], name=f"add_{name}"))
        outs.append(f"y_{name}")
    # not fused: a broadcast Add (a per-channel constant), and a conv output that is also a graph output
    inits += [numpy_helper.from_array(np.ones((32, 32, 1, 1), np.float32), "w_kept"),
              numpy_helper.from_array(np.full((1, 32, 1, 1), 0.5, np.float32), "bias_kept")]
    nodes += [n("Conv", ["x", "w_kept"], ["c_kept"], name="kept"),
              n("Add", ["c_kept", "bias_kept"], ["y_broadcast"], name="add_broadcast"),
              n("Add", ["c_kept", "x"], ["y_kept"], name="add_kept")]
    outs += ["y_broadcast", "y_kept", "c_kept"]
    graph = helper.make_graph(
        nodes, "residual",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(X_SHAPE)),
         helper.make_tensor_value_info("wide", TensorProto.FLOAT, list(WIDE_SHAPE))],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _feeds() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(6)
    x = rng.standard_normal(X_SHAPE).astype(np.float32)
    wide = rng.standard_normal(WIDE_SHAPE).astype(np.float32)
    x[0, 0, 0, 0], x[0, 3, 5, 4], x[0, 7, 11, 10], x[0, 9, 6, 2] = np.nan, np.inf, -np.inf, 1e30
    wide[0, 0, 1, 1], wide[0, 129, 5, 4] = np.inf, np.nan
    return {"x": x, "wide": wide}


def _unfused(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpubackend.paths import gles2

    monkeypatch.setattr(gles2, "fuse_residual_adds", lambda nodes, payloads, *args: (nodes, payloads))


def test_residual_adds_fuse_into_the_conv_and_keep_nan_and_inf(monkeypatch: pytest.MonkeyPatch) -> None:
    model, feeds = _model(), _feeds()
    with np.errstate(all="ignore"):
        want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    sess = gpubackend.Session(model, path="gles2", fallback=False)
    assert set(sess.placement.values()) == {"gles2"}
    got = sess.run(feeds)
    kernels = {st.node.name: st.kernel.name for v in sess._variants.values() for seg in v.segments
               for st in seg.steps}
    assert {"1x1", "3x3-winograd", "depthwise", "3x3-dilated-quads"} <= set(kernels)
    assert kernels["3x3-winograd"] == "conv_winograd" and kernels["depthwise"] == "depthwise_quads"
    assert kernels["3x3-dilated-quads"] == kernels["1x1"] == "conv_quads"
    assert not any(name.startswith("add_") and name != "add_broadcast" and name != "add_kept" for name in kernels)
    assert "add_broadcast" in kernels and "add_kept" in kernels  # not fused
    assert f"fused into conv draws: 1 SiLU (Sigmoid and Mul), {len(BLOCKS)} residual Add" in sess.explain()
    for name, g, w in zip([*BLOCKS, "broadcast", "kept", "conv_kept"], got, want):
        assert_same_specials_and_close(g, w, 1e-5, name)
    _unfused(monkeypatch)
    with gpubackend.Session(model, path="gles2", fallback=False) as unfused:
        again = unfused.run(feeds)
        for g, u in zip(got, again):
            np.testing.assert_array_equal(g, u)  # the same sums, one draw fewer per fused Add
        assert sess.stats.dispatches == unfused.stats.dispatches - len(BLOCKS)


def test_no_residual_fusion_with_fp16_storage(monkeypatch: pytest.MonkeyPatch) -> None:
    model, feeds = _model(), _feeds()
    sess = gpubackend.Session(model, path="gles2", precision="fp16", fallback=False)
    got = sess.run(feeds)
    _unfused(monkeypatch)
    with gpubackend.Session(model, path="gles2", precision="fp16", fallback=False) as unfused:
        again = unfused.run(feeds)
        assert sess.stats.dispatches == unfused.stats.dispatches
    for g, u in zip(got, again):
        np.testing.assert_array_equal(g, u)


def test_residual_fuses_into_the_channel_kernels_of_a_batched_conv1d() -> None:
    """A Conv the quad GEMMs do not take (1-D, two images: gen_conv's kernel) with a fused Relu and
    a residual Add after it: one draw, onnxruntime's answer, NaN and Inf included."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((6, 6, 3)).astype(np.float32), "w")
    n = helper.make_node
    graph = helper.make_graph(
        [n("Conv", ["x", "w"], ["c"], pads=[1, 1]), n("Relu", ["c"], ["r"]), n("Add", ["r", "x"], ["y"])], "conv1d",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6, 17])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 6, 17])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = rng.standard_normal((2, 6, 17)).astype(np.float32)
    x[0, 1, 3], x[1, 4, 16] = np.nan, -np.inf
    with np.errstate(all="ignore"):
        want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    with gpubackend.Session(model, path="gles2", fallback=False) as sess:
        got = sess.run({"x": x})
        assert sess.stats.dispatches == 1
    assert_same_specials_and_close(got[0], want[0], 1e-5, "conv1d")
