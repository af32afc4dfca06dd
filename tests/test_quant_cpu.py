"""Quantized models on the CPU path's NumPy kernels: ONNX's own node tests for the quantized
operators, and whole models quantized by onnxruntime's own tool (QDQ and QOperator, per-channel
int8 weights, calibrated on a photo) compared with onnxruntime's int8 result."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx_nodes import node_cases, run_node_case

import gpubackend

INCLUDE = [r"test_quantizelinear(_.*)?", r"test_dequantizelinear(_.*)?", r"test_dynamicquantizelinear(_.*)?",
           r"test_qlinearconv", r"test_qlinearmatmul_.*", r"test_convinteger_.*", r"test_matmulinteger"]
EXCLUDE = {
    r".*_expanded": "function-body expansions exercise other operators, not the one under test",
    r".*_(e4m3fn|e5m2|float4e2m1)(_.*)?": "float8 / float4 element types are not supported",
    r".*_(u?int4|u?int2)": "4-bit and 2-bit element types are not supported",
}
CASES = node_cases(INCLUDE, EXCLUDE)


def test_case_selection() -> None:
    assert len(CASES) >= 20, CASES


@pytest.mark.parametrize("name", CASES)
def test_onnx_node(name: str) -> None:
    run_node_case(name, "cpu")


def _photo(size: int = 32) -> np.ndarray:
    from skimage import data, transform

    img = transform.resize(data.astronaut(), (size, size), anti_aliasing=True).astype(np.float32)
    return img.transpose(2, 0, 1)[None]


def _float_model(rng: np.random.Generator) -> onnx.ModelProto:
    """A small CNN with the ops quantisation cares about: Conv+Relu, a residual Add, Mul,
    GlobalAveragePool, Concat, a Sigmoid and a MatMul head."""
    def w(name: str, shape: tuple[int, ...], scale: float = 0.3) -> onnx.TensorProto:
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)

    inits = [w("w1", (8, 3, 3, 3)), w("b1", (8,), 0.1), w("w2", (8, 8, 3, 3), 0.15), w("b2", (8,), 0.1),
             w("w3", (8, 8, 1, 1)), w("head", (16, 5)), w("scale", (1, 8, 1, 1), 0.5)]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("Add", ["r1", "r2"], ["s"]),
        helper.make_node("Mul", ["s", "scale"], ["m"]),
        helper.make_node("Conv", ["m", "w3"], ["c3"]),
        helper.make_node("Sigmoid", ["c3"], ["g"]),
        helper.make_node("GlobalAveragePool", ["g"], ["p1"]),
        helper.make_node("GlobalAveragePool", ["m"], ["p2"]),
        helper.make_node("Concat", ["p1", "p2"], ["cat"], axis=1),
        helper.make_node("Flatten", ["cat"], ["f"]),
        helper.make_node("MatMul", ["f", "head"], ["y"]),
    ]
    g = helper.make_graph(nodes, "qnet", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 32, 32])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


@pytest.fixture(scope="module")
def quantized(tmp_path_factory: pytest.TempPathFactory) -> dict[str, onnx.ModelProto]:
    ort_quant = pytest.importorskip("onnxruntime.quantization", reason="onnxruntime is a test dependency")
    rng = np.random.default_rng(7)
    d = tmp_path_factory.mktemp("quant")
    src = d / "float.onnx"
    onnx.save(_float_model(rng), src)
    photo = _photo()

    class Reader(ort_quant.CalibrationDataReader):
        def __init__(self) -> None:
            crops = [photo, photo[:, :, ::-1].copy(), np.ascontiguousarray(photo[:, :, :, ::-1])]
            self.it = iter({"x": c} for c in crops)

        def get_next(self):  # noqa: ANN201 - onnxruntime's interface
            return next(self.it, None)

    out = {}
    for fmt in ("QDQ", "QOperator"):
        dst = d / f"{fmt}.onnx"
        ort_quant.quantize_static(str(src), str(dst), Reader(), quant_format=getattr(ort_quant.QuantFormat, fmt),
                                  per_channel=True, weight_type=ort_quant.QuantType.QInt8,
                                  activation_type=ort_quant.QuantType.QUInt8,
                                  # 7-bit weights, as onnxruntime advises for x86 without VNNI: its u8s8
                                  # kernels there saturate int16 pair sums (VPMADDUBSW) and then differ
                                  # from ONNX's exact integer result by tens of steps
                                  reduce_range=True)
        out[fmt] = onnx.load(str(dst))
    out["float"] = onnx.load(str(src))
    return out


@pytest.mark.parametrize("engine", ["numpy", "onnxruntime"])
@pytest.mark.parametrize("fmt", ["QDQ", "QOperator"])
def test_quantized_model_matches_onnxruntime_int8(quantized: dict[str, onnx.ModelProto], fmt: str,
                                                  engine: str) -> None:
    import onnxruntime as ort

    model = quantized[fmt]
    ops = {n.op_type for n in model.graph.node}
    assert ops & {"QLinearConv", "QuantizeLinear"}, ops
    x = _photo()
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # the model as written
    want = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0]
    float_ref = ort.InferenceSession(quantized["float"].SerializeToString(),
                                     providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    sess = gpubackend.Session(model, path="cpu", fallback=False, cpu_engine=engine)
    try:
        got = sess.run({"x": x})[0]
    finally:
        sess.close()
    # the output is float (dequantised): one output quantisation step is the tolerance
    step = _output_step(model)
    err = float(np.max(np.abs(got - want)))
    assert err <= step * 1.001, f"{fmt}: max |diff| {err:.3g} vs one output step {step:.3g}"
    noise = float(np.max(np.abs(want - float_ref)))
    print(f"{fmt} on {engine}: max |diff| vs onnxruntime int8 {err:.3g} ({err / step:.2f} steps); "
          f"int8 vs float model {noise:.3g}")


def _output_step(model: onnx.ModelProto) -> float:
    """The scale of the last quantisation before the graph output."""
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    producers = {o: n for n in model.graph.node for o in n.output}
    name = model.graph.output[0].name
    seen = 0
    while name in producers and seen < 50:
        n = producers[name]
        if n.op_type in ("DequantizeLinear", "QuantizeLinear"):
            return float(np.max(inits[n.input[1]]))
        if n.op_type.startswith("QLinear"):
            return float(np.max(inits[n.input[-2 if n.op_type != "QLinearConcat" else 0]]))
        name = n.input[0]
        seen += 1
    raise AssertionError("no quantisation found before the output")
