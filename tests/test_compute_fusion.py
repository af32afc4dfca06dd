"""SiLU written as two nodes (Sigmoid, then Mul of its input by its output) fused into the epilogue
of the conv / gemm / depthwise / ConvTranspose kernel that produces its input on the compute paths
(compute_kernels.fuse_gates, GATE in shaders/compute/epilogue.glsl), and into the Conv kernels of
gles2 and gles3 (``segment_services.fuse_silu``: a gated Sigmoid), checked against onnxruntime
with NaN and infinities, and by the dispatch count."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from models import assert_same_specials_and_close
from onnx import TensorProto, helper, numpy_helper

import gpubackend


def _silu_model(names: tuple[str, ...]) -> object:
    rng = np.random.default_rng(7)

    def const(name: str, shape: tuple[int, ...]) -> object:
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.5).astype(np.float32), name)

    n = helper.make_node
    nodes, outs = [], []
    producers = {  # name -> (op, weight shape, attributes): 3x3 conv, 1x1 (gemm), depthwise, ConvTranspose
        "k3": ("Conv", (8, 4, 3, 3), {"pads": [1, 1, 1, 1]}), "k1": ("Conv", (6, 4, 1, 1), {}),
        "dw": ("Conv", (4, 1, 3, 3), {"pads": [1, 1, 1, 1], "group": 4}),
        "ct": ("ConvTranspose", (4, 5, 2, 2), {"strides": [2, 2]})}
    inits = []
    for name in names:
        op, wshape, attrs = producers[name]
        inits += [const(f"w_{name}", wshape), const(f"b_{name}", (wshape[1] if op == "ConvTranspose" else wshape[0],))]
        nodes += [n(op, ["x", f"w_{name}", f"b_{name}"], [f"t_{name}"], name=name, **attrs),
                  n("Sigmoid", [f"t_{name}"], [f"s_{name}"], name=f"sig_{name}"),
                  n("Mul", [f"t_{name}", f"s_{name}"] if name != "k1" else [f"s_{name}", f"t_{name}"], [f"y_{name}"],
                    name=f"mul_{name}")]
        outs.append(f"y_{name}")
    # not fused: the conv output is also read by another node
    inits += [const("w_kept", (4, 4, 1, 1))]
    nodes += [n("Conv", ["x", "w_kept"], ["t_kept"], name="kept"),
              n("Sigmoid", ["t_kept"], ["s_kept"], name="sig_kept"),
              n("Mul", ["t_kept", "s_kept"], ["m_kept"], name="mul_kept"),
              n("Add", ["m_kept", "t_kept"], ["y_kept"], name="add_kept")]
    outs.append("y_kept")
    graph = helper.make_graph(nodes, "silu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 6, 7])],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


# YOLOv8's producers (3x3 and 1x1 convs) by default; depthwise and ConvTranspose as well under -m slow
# (each GATE variant is a shader compile, seconds cold)
PRODUCERS = [pytest.param(("k3", "k1"), id="conv"),
             pytest.param(("k3", "k1", "dw", "ct"), id="all", marks=pytest.mark.slow)]


@pytest.mark.parametrize("names", PRODUCERS)
@pytest.mark.parametrize("path", ["gles2", "gles3", "gles31", "vulkan"])
def test_silu_fuses_into_the_producer_and_keeps_nan_and_inf(path: str, names: tuple[str, ...],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    model = _silu_model(names)
    x = np.random.default_rng(8).standard_normal((1, 4, 6, 7)).astype(np.float32)
    x[0, :, 0, 0] = np.nan
    x[0, 0, 3, 3] = np.inf
    x[0, 1, 5, 1] = -np.inf
    x[0, 2, 2, 5] = 1e30  # sums past float32's range: Inf and -Inf into the SiLU
    with np.errstate(all="ignore"):
        want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    sess = gpubackend.Session(model, path=path, fallback=False)
    assert set(sess.placement.values()) == {path}
    got = sess.run({"x": x})
    if path in ("gles2", "gles3"):  # a conv may draw several times: two draws fewer per fused pair
        import importlib

        monkeypatch.setattr(importlib.import_module(f"gpubackend.paths.{path}"), "fuse_silu",
                            lambda nodes, payloads, *args: (nodes, payloads))
        with gpubackend.Session(model, path=path, fallback=False) as unfused:
            np.testing.assert_allclose(unfused.run({"x": x})[-1], got[-1], rtol=0, atol=0)
            fused = [name for name in names if name != "ct"]  # into their Conv kernels only
            assert sess.stats.dispatches == unfused.stats.dispatches - 2 * len(fused)
    else:  # one dispatch per fused producer, four for the kept chain (conv, Sigmoid, Mul, Add)
        assert sess.stats.dispatches == len(names) + 4
    for name, g, w in zip([*names, "kept"], got, want):
        assert_same_specials_and_close(g, w, 1e-4, name)
    assert all(np.isnan(w).any() for w in want)
