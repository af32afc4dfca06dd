"""Whole test models built with onnx.helper and random weights, shaped like real mobile
networks: a MobileNetV2-style classifier and a small U-Net-style segmenter."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


class _Builder:
    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.count = 0

    def name(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}_{self.count}"

    def const(self, prefix: str, value: np.ndarray) -> str:
        name = self.name(prefix)
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def node(self, op: str, inputs: list[str], n_out: int = 1, **attrs: object) -> str:
        name = self.name(op.lower())
        outs = [f"{name}_out{i}" if i else name + "_out" for i in range(n_out)]
        self.nodes.append(helper.make_node(op, inputs, outs, name=name, **attrs))
        return outs[0]

    def conv(self, x: str, cin: int, cout: int, k: int, stride: int = 1, group: int = 1, bn: bool = True,
             act: str | None = "relu6", dilation: int = 1) -> str:
        fan_in = cin // group * k * k
        w = (self.rng.standard_normal((cout, cin // group, k, k)) * np.sqrt(2.0 / fan_in)).astype(np.float32)
        pad = dilation * (k - 1) // 2
        inputs = [x, self.const("W", w)]
        if not bn:
            inputs.append(self.const("B", (self.rng.standard_normal(cout) * 0.1).astype(np.float32)))
        y = self.node("Conv", inputs, kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4,
                      group=group, dilations=[dilation, dilation])
        if bn:
            params = [self.rng.uniform(0.5, 1.5, cout), self.rng.standard_normal(cout) * 0.1,
                      self.rng.standard_normal(cout) * 0.1, self.rng.uniform(0.5, 1.5, cout)]
            y = self.node("BatchNormalization", [y] + [self.const("bn", p.astype(np.float32)) for p in params],
                          epsilon=1e-5)
        if act == "relu6":
            y = self.node("Clip", [y, self.const("min", np.float32(0.0)), self.const("max", np.float32(6.0))])
        elif act == "relu":
            y = self.node("Relu", [y])
        return y

    def model(self, name: str, inputs: list[onnx.ValueInfoProto],
              outputs: list[onnx.ValueInfoProto]) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, name, inputs, outputs, self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                                  producer_name="gpubackend-tests")
        model.ir_version = 8
        onnx.checker.check_model(model)
        return model


def mobilenet_v2_like(size: int = 224, classes: int = 100, seed: int = 0) -> onnx.ModelProto:
    """Stem conv, inverted residual blocks (1x1 expand, 3x3 depthwise, 1x1 project, residual
    Add, Relu6 as Clip, BatchNormalization), global pool, Gemm classifier."""
    b = _Builder(seed)
    x = b.conv("input", 3, 16, 3, stride=2)
    cin = 16
    for t, c, n, s in [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 2, 2), (6, 64, 2, 2), (6, 96, 1, 1), (6, 160, 1, 2)]:
        for i in range(n):
            stride = s if i == 0 else 1
            hidden = cin * t
            y = b.conv(x, cin, hidden, 1) if t != 1 else x
            y = b.conv(y, hidden, hidden, 3, stride=stride, group=hidden)
            y = b.conv(y, hidden, c, 1, act=None)
            x = b.node("Add", [x, y]) if stride == 1 and cin == c else y
            cin = c
    x = b.conv(x, cin, 320, 1)
    x = b.node("GlobalAveragePool", [x])
    x = b.node("Flatten", [x], axis=1)
    w = (b.rng.standard_normal((classes, 320)) * np.sqrt(1.0 / 320)).astype(np.float32)
    x = b.node("Gemm", [x, b.const("fcW", w), b.const("fcB", np.zeros(classes, np.float32) + 0.01)], transB=1)
    b.nodes.append(helper.make_node("Softmax", [x], ["probs"], name="softmax", axis=1))
    return b.model("mobilenet_v2_like",
                   [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, size, size])],
                   [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [1, classes])])


def unet_like(size: int = 256, seed: int = 1) -> onnx.ModelProto:
    """Encoder (conv, MaxPool), decoder with ConvTranspose and bilinear Resize upsampling, skip
    Concats, squeeze-excite style channel scaling, HardSwish, and a Sigmoid mask head."""
    b = _Builder(seed)
    e1 = b.conv(b.conv("input", 3, 8, 3, act="relu"), 8, 8, 3, act="relu")
    p1 = b.node("MaxPool", [e1], kernel_shape=[2, 2], strides=[2, 2])
    e2 = b.conv(b.conv(p1, 8, 16, 3, act="relu"), 16, 16, 3, act="relu")
    p2 = b.node("MaxPool", [e2], kernel_shape=[2, 2], strides=[2, 2])
    m = b.conv(p2, 16, 32, 3, act=None, bn=False)
    m = b.node("HardSwish", [m])
    se = b.node("GlobalAveragePool", [m])
    se = b.conv(se, 32, 8, 1, act="relu", bn=False)
    se = b.node("Sigmoid", [b.conv(se, 8, 32, 1, act=None, bn=False)])
    m = b.node("Mul", [m, se])
    wt = (b.rng.standard_normal((32, 16, 2, 2)) * 0.25).astype(np.float32)
    bt = (b.rng.standard_normal(16) * 0.1).astype(np.float32)
    u2 = b.node("ConvTranspose", [m, b.const("Wt", wt), b.const("Bt", bt)], kernel_shape=[2, 2], strides=[2, 2])
    d2 = b.conv(b.node("Concat", [u2, e2], axis=1), 32, 16, 3, act="relu")
    scales = b.const("scales", np.array([1, 1, 2, 2], np.float32))
    u1 = b.node("Resize", [d2, "", scales], mode="linear", coordinate_transformation_mode="half_pixel")
    d1 = b.conv(b.node("Concat", [u1, e1], axis=1), 24, 8, 3, act="relu", dilation=2)
    head = b.conv(d1, 8, 1, 1, act=None, bn=False)
    b.nodes.append(helper.make_node("Sigmoid", [head], ["mask"], name="mask_sigmoid"))
    return b.model("unet_like",
                   [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, size, size])],
                   [helper.make_tensor_value_info("mask", TensorProto.FLOAT, [1, 1, size, size])])


def random_inputs(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded uniform inputs in [0, 1) (never zeros) for every graph input of the model."""
    rng = np.random.default_rng(seed)
    inits = {i.name for i in model.graph.initializer}
    feeds = {}
    for inp in model.graph.input:
        if inp.name in inits:
            continue
        shape = [d.dim_value for d in inp.type.tensor_type.shape.dim]
        feeds[inp.name] = (rng.random(shape) + 0.01).astype(np.float32)
    return feeds


def onnxruntime_outputs(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 2
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def assert_same_specials_and_close(got: np.ndarray, want: np.ndarray, tol: float, what: str = "") -> None:
    """NaN where ``want`` has NaN, the same infinities, and the finite rest within ``tol`` by the
    project's measure max |got - want| / max(1, max |want|)."""
    assert np.array_equal(np.isnan(got), np.isnan(want)), f"{what}: NaN positions differ"
    inf = np.isinf(want)
    assert np.array_equal(got[inf], want[inf]), f"{what}: infinities differ"
    fin = np.isfinite(want)
    err = float(np.abs(got[fin] - want[fin]).max(initial=0.0)) / max(1.0, float(np.abs(want[fin]).max(initial=0.0)))
    assert err <= tol, f"{what}: error {err:.3g}"


def assert_close(got: np.ndarray, want: np.ndarray, rtol: float, what: str = "") -> None:
    """Norm-relative closeness with an elementwise bound: |got - want| <= rtol * (|want| + max|want|*rtol)."""
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    assert np.isfinite(got).all(), f"{what}: non-finite values in the result"
    scale = float(np.abs(want).max()) or 1.0
    err = np.abs(got.astype(np.float64) - want)
    bound = rtol * (np.abs(want) + scale * 0.1)
    worst = float((err / (np.abs(want) + scale * 0.1)).max())
    assert (err <= bound).all(), f"{what}: relative error {worst:.3g} exceeds {rtol:g}"
