"""int8 (QDQ) on the GPU paths (gles3, gles31, vulkan: weights packed four to a 32-bit word; gles2:
four to an RGBA8 texel), Quantize/DequantizeLinear kernels, integer tensors at segment edges;
against ``fallback`` (NumPy engine), within one output quantization step."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import gpubackend
from gpubackend.paths import compute_quant

PATHS = ["gles3", "gles31", "vulkan"]
QDQ_PATHS = ["gles2", *PATHS]  # standalone Quantize/DequantizeLinear kernels


def _qdq_model(op: str, attrs: dict, x_shape: tuple[int, ...], w: np.ndarray, w_scale: np.ndarray,
               w_zp: np.ndarray | None, w_axis: int, bias: np.ndarray | None, y_scale: float = 0.05,
               act: str | None = None) -> onnx.ModelProto:
    """x -> Q -> DQ -> op(DQ(w), bias) [-> act] -> Q (uint8 output): the QDQ pattern of one
    quantized layer as onnxruntime's quantizer writes it."""
    inits = [numpy_helper.from_array(w, "wq"), numpy_helper.from_array(w_scale, "ws"),
             numpy_helper.from_array(np.float32(0.03), "xs"), numpy_helper.from_array(np.uint8(120), "xz"),
             numpy_helper.from_array(np.float32(y_scale), "ys"), numpy_helper.from_array(np.uint8(128), "yz")]
    dq_w = ["wq", "ws"]
    if w_zp is not None:
        inits.append(numpy_helper.from_array(w_zp, "wz"))
        dq_w.append("wz")
    op_inputs = ["xd", "w"]
    if bias is not None:
        inits.append(numpy_helper.from_array(bias, "b"))
        op_inputs.append("b")
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
        helper.make_node("DequantizeLinear", dq_w, ["w"], axis=w_axis),
        helper.make_node(op, op_inputs, ["acc"], **attrs),
    ]
    last = "acc"
    if act:
        nodes.append(helper.make_node(act, ["acc"], ["a"]))
        last = "a"
    nodes.append(helper.make_node("QuantizeLinear", [last, "ys", "yz"], ["y"]))
    g = helper.make_graph(nodes, "q", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
                          [helper.make_tensor_value_info("y", TensorProto.UINT8, None)], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])
    model.ir_version = 9
    return model


def _int8(rng: np.random.Generator, *shape: int) -> np.ndarray:
    w = rng.integers(-128, 128, shape).astype(np.int8)
    w.reshape(-1)[:2] = (-128, 127)  # the extremes unpack with their sign
    return w


def _scales(rng: np.random.Generator, n: int) -> np.ndarray:
    return ((rng.random(n) + 0.5) * 2e-3).astype(np.float32)


def _cases() -> list[tuple[str, str, onnx.ModelProto, tuple[int, ...]]]:
    rng = np.random.default_rng(17)
    out = []

    def add(case: str, kernel: str, op: str, attrs: dict, x_shape: tuple[int, ...], w: np.ndarray,
            w_scale: np.ndarray, w_axis: int = 0, bias: bool = True, w_zp: np.ndarray | None = None,
            act: str | None = None) -> None:
        co = {"ConvTranspose": w.shape[1] * attrs.get("group", 1), "Gemm": w.shape[0] if attrs.get("transB") else
              w.shape[1], "MatMul": w.shape[1]}.get(op, w.shape[0])
        b = (rng.standard_normal(co) * 0.2).astype(np.float32) if bias else None
        out.append((case, kernel, _qdq_model(op, attrs, x_shape, w, w_scale, w_zp, w_axis, b, act=act), x_shape))

    add("conv3x3_stride2_relu", "conv_q8", "Conv", {"pads": [1, 0, 2, 1], "strides": [2, 2]}, (1, 5, 9, 7),
        _int8(rng, 6, 5, 3, 3), _scales(rng, 6), act="Relu")
    add("conv_group2", "conv_q8", "Conv", {"group": 2, "pads": [1, 1, 1, 1]}, (1, 6, 5, 5),
        _int8(rng, 10, 3, 3, 3), _scales(rng, 10))
    add("conv_per_tensor", "conv_q8", "Conv", {"pads": [1, 1, 1, 1]}, (1, 3, 6, 6), _int8(rng, 9, 3, 3, 3),
        _scales(rng, 1), bias=False)
    add("conv1x1", "conv1x1_q8", "Conv", {}, (1, 7, 5, 5), _int8(rng, 10, 7, 1, 1), _scales(rng, 10))
    add("depthwise3x3_s2", "depthwise_q8", "Conv", {"group": 8, "pads": [1, 1, 1, 1], "strides": [2, 2]},
        (1, 8, 9, 9), _int8(rng, 8, 1, 3, 3), _scales(rng, 8))
    add("depthwise5x5", "depthwise_q8", "Conv", {"group": 6, "pads": [2, 2, 2, 2]}, (1, 6, 7, 7),
        _int8(rng, 6, 1, 5, 5), _scales(rng, 6))
    add("convtranspose2x2_s2", "convtranspose_q8", "ConvTranspose", {"strides": [2, 2]}, (1, 6, 4, 5),
        _int8(rng, 6, 5, 2, 2), _scales(rng, 5), w_axis=1)
    add("gemm_transb", "gemm_q8", "Gemm", {"transB": 1}, (3, 20), _int8(rng, 13, 20), _scales(rng, 13) * 10)
    add("matmul", "matmul_q8", "MatMul", {}, (4, 12), _int8(rng, 12, 7), _scales(rng, 7) * 10, w_axis=1,
        bias=False)
    add("conv_uint8_zp128", "conv_q8", "Conv", {"pads": [1, 1, 1, 1]}, (1, 4, 5, 5),
        rng.integers(0, 256, (5, 4, 3, 3)).astype(np.uint8), _scales(rng, 5), w_zp=np.full(5, 128, np.uint8))
    # a zero point that puts q - zp outside int8: the float conv runs it (still exact); gles2 stores
    # q - zp minus one offset per layer as int8 and adds it back (kernels.q8_weight_rows)
    add("conv_uint8_zp10_float_kernel", "conv", "Conv", {"pads": [1, 1, 1, 1]}, (1, 4, 5, 5),
        rng.integers(0, 256, (5, 4, 3, 3)).astype(np.uint8), _scales(rng, 5), w_zp=np.full(5, 10, np.uint8))
    return out


CASES = _cases()


def _feed(shape: tuple[int, ...]) -> np.ndarray:
    return (np.random.default_rng(3).standard_normal(shape) * 2).astype(np.float32)


GLES2_KERNEL = {"conv_uint8_zp10_float_kernel": "conv_q8"}


def _steps(got: np.ndarray, want: np.ndarray) -> int:
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    return int(np.max(np.abs(got.astype(np.int32) - want.astype(np.int32))))


@pytest.mark.parametrize("path", QDQ_PATHS)
@pytest.mark.parametrize("case,kernel,model,x_shape", CASES, ids=[c[0] for c in CASES])
def test_quantized_layer_matches_fallback(path: str, case: str, kernel: str, model: onnx.ModelProto,
                                          x_shape: tuple[int, ...]) -> None:
    if path == "gles2":
        kernel = GLES2_KERNEL.get(case, kernel)
    x = _feed(x_shape)
    ref = gpubackend.Session(model, path="cpu", cpu_engine="numpy")
    want = ref.run({"x": x})[0]
    sess = gpubackend.Session(model, path=path, fallback=False)
    try:
        got = sess.run({"x": x})[0]
        placed = set(sess.placement.values())
        names = _kernel_names(sess, path)
    finally:
        sess.close()
        ref.close()
    assert placed == {path}, placed
    assert kernel in names, names
    assert {"quantize", "dequantize"} <= names, names
    assert _steps(got, want) <= 1
    assert np.mean(got != want) < 0.02  # off-by-one only on near-ties


def _kernel_names(sess: gpubackend.Session, path: str) -> set[str]:
    mod = __import__(f"gpubackend.paths.{path}", fromlist=["kernel_name"])
    graph = sess._current.graph if sess._current is not None else None  # noqa: SLF001
    assert graph is not None
    return {mod.kernel_name(n, graph) for n in graph.nodes}


@pytest.mark.parametrize("path", QDQ_PATHS)
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("int_type,axis", [(TensorProto.INT8, None), (TensorProto.UINT8, 1), (TensorProto.INT8, 1)])
def test_quantize_dequantize_kernels(path: str, precision: str, int_type: int, axis: int | None) -> None:
    """Standalone QuantizeLinear (rounding half to even, saturation, NaN -> 0, Inf -> the limit) and
    DequantizeLinear, per tensor and per channel; the integer tensor is a graph output (read back
    as its integer type) and feeds the DequantizeLinear on the device."""
    c = 6
    np_type = np.int8 if int_type == TensorProto.INT8 else np.uint8
    scale = np.linspace(0.5, 1.5, c).astype(np.float32) if axis is not None else np.float32(0.5)
    zp = (np.arange(c) * 7 % 20).astype(np_type) if axis is not None else np_type(3)
    x = np.random.default_rng(5).standard_normal((2, c, 5, 4)).astype(np.float32) * 40
    x[0, 0, 0, :3] = (np.nan, np.inf, -np.inf)
    x[0, 1, 0, :4] = (0.25, 0.75, -0.25, -0.75)  # exact ties at the per-tensor scale 0.5
    kw = {} if axis is None else {"axis": axis}
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], **kw),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], **kw)]
    g = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
                          [helper.make_tensor_value_info("q", int_type, None),
                           helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(np.asarray(scale), "s"),
                           numpy_helper.from_array(np.asarray(zp), "z")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])
    model.ir_version = 9
    want_q, want_y = gpubackend.Session(model, path="cpu", cpu_engine="numpy").run({"x": x})
    sess = gpubackend.Session(model, path=path, precision=precision, fallback=False)
    got_q, got_y = sess.run({"x": x})
    assert set(sess.placement.values()) == {path}
    sess.close()
    assert got_q.dtype == np_type
    tol = 0 if precision == "fp32" else 1  # fp16 storage rounds x before quantizing
    assert _steps(got_q, want_q) <= tol
    step = float(np.max(scale))
    assert float(np.max(np.abs(got_y - want_y))) <= tol * step + 1e-6


def test_int8_weights_take_a_quarter_of_the_float_bytes() -> None:
    rng = np.random.default_rng(0)
    q = rng.integers(-128, 128, (40, 4)).astype(np.int8)
    packed = compute_quant.pack_int8_words(q)
    assert packed.dtype == np.float32 and packed.shape == (10, 4)
    assert packed.nbytes * 4 == q.astype(np.float32).nbytes
    np.testing.assert_array_equal(compute_quant.unpack_int8_words(packed, 40), q)


def test_bias_in_the_spare_bits_of_7_bit_weights() -> None:
    """``QW`` 3's layout decoded as ``shaders/compute/weights.glsl`` does: the words of the bias run
    as 7-bit weights, every other word as 8-bit, and the bias from bit 7 of the run's bytes."""
    rng = np.random.default_rng(1)
    q = rng.integers(-64, 64, (60, 4)).astype(np.int8)
    q[3, 2] = 64  # a channel reaching both ends keeps 8 bits: the run starts after this word
    bias = rng.integers(-30000, 30000, (3, 4)).astype(np.float32)
    bias[1, 2] = -40000
    words, head = compute_quant.bias_in_spare_bits(compute_quant.pack_int8_words(q), bias)
    bits, (at, blocks) = int(head[0, 3]), head[1, :2].astype(int)
    assert bits == 17 and at == 4 and blocks == 3
    w = words.view(np.uint32).reshape(-1).astype(np.int64)
    lanes = (w[:, None] >> np.arange(0, 32, 8)) & 0xFF
    in_run = ((np.arange(w.size) >= at) & (np.arange(w.size) < at + bits * blocks))[:, None]
    low = np.where(in_run, lanes & 0x7F, lanes)
    dec = np.where(low >= np.where(in_run, 64, 128), low - np.where(in_run, 128, 256), low)
    np.testing.assert_array_equal(dec[:q.shape[0]], q)
    spare = (lanes[at:at + bits * blocks] >> 7).reshape(bits, blocks, 4)
    got = (spare << np.arange(bits)[:, None, None]).sum(axis=0)
    np.testing.assert_array_equal(np.where(got >= 2 ** (bits - 1), got - 2 ** bits, got), bias)
    assert compute_quant.bias_in_spare_bits(compute_quant.pack_int8_words(q[:20]), bias) is None  # too few words


@pytest.mark.parametrize("path", QDQ_PATHS)
def test_canary_int8(path: str) -> None:
    mod = __import__(f"gpubackend.paths.{path}", fromlist=["canary_int8"])
    assert mod.canary_int8("fp32") <= 1e-4


def test_conformance_lists_int8_kernels_under_their_own_names() -> None:
    from gpubackend.conformance.cases import matrix

    kernels = {c.kernel for c in matrix()}
    assert {"conv_q8", "conv1x1_q8", "depthwise_q8", "convtranspose_q8", "gemm_q8", "matmul_q8",
            "quantize"} <= kernels


def test_gles3_int8_weights_in_a_uint_texture(monkeypatch: pytest.MonkeyPatch) -> None:
    """Weight blocks too large for a uniform block: the int8 words go into an RGBA32UI texture."""
    from dataclasses import replace

    from gpubackend.paths import gles3

    real = gles3._limits  # noqa: SLF001
    monkeypatch.setattr(gles3, "_limits", lambda *a, **k: replace(real(*a, **k), max_uniform_block_size=64))
    for case, kernel, model, x_shape in CASES:
        if case not in ("conv3x3_stride2_relu", "depthwise5x5", "gemm_transb"):
            continue
        x = _feed(x_shape)
        want = gpubackend.Session(model, path="cpu", cpu_engine="numpy").run({"x": x})[0]
        sess = gpubackend.Session(model, path="gles3", fallback=False)
        got = sess.run({"x": x})[0]
        seg = sess._current.segments[0]  # noqa: SLF001
        steps = [s for s in seg.steps if s.kernel.name == kernel]
        assert steps and all(s.wtex is not None for s in steps), case
        assert kernel in _kernel_names(sess, "gles3")
        sess.close()
        assert _steps(got, want) <= 1, case


def test_gles3_reports_int8_weight_bytes() -> None:
    """explain() counts the device bytes of the weights; int8 words take a quarter of the floats'."""
    case = next(c for c in CASES if c[0] == "conv1x1")
    sess = gpubackend.Session(case[2], path="gles3", fallback=False)
    seg = sess._current.segments[0] if sess._current else None  # noqa: SLF001
    if seg is None:
        sess.run({"x": _feed(case[3])})
        seg = sess._current.segments[0]  # noqa: SLF001
    assert "device weight bytes per segment: gles3=" in sess.explain()
    (step,) = [s for s in seg.steps if s.kernel.name == "conv1x1_q8"]
    assert step.kernel.weights.dtype == np.uint32
    from gpubackend.paths.gles3 import kernels

    float_kernel = kernels.conv(step.node, sess._current.graph, kernels.Limits())  # noqa: SLF001
    assert float_kernel.weights.dtype == np.float32
    # 3 output slices; 7 inputs padded to 8 weight vectors: as floats 8 vec4 + the bias, as int8
    # 2 uvec4 of words + the bias and the scale
    assert (step.kernel.weights.nbytes, float_kernel.weights.nbytes) == (3 * 4 * 16, 3 * 9 * 16)
    sess.close()
