"""QuantizeLinear / DequantizeLinear on gles2 (``paths/gles2/quant_kernels.py``): GLSL ES 1.00 has
no roundEven, isnan or bit casts, so rounding half to even, NaN and the IEEE division are checked
here on the values that tell them apart, bit for bit against the ``fallback`` reference, with every
output texture poisoned with NaN first. Then the int8-weight kernels (``conv_q8`` ... ``matmul_q8``:
raw int8 bytes four to an RGBA8 texel, ``kernels.q8_weight_rows``) on weights whose words are NaN
and Inf bit patterns, against ``fallback`` and the float kernels' weight bytes. The model-level
cases (``test_quant_gpu.py``, ``test_quant_models.py``, ``test_quant_integer.py``) run gles2
alongside the other paths."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import gpubackend

ONNX_TYPE = {np.int8: TensorProto.INT8, np.uint8: TensorProto.UINT8}


@pytest.fixture(autouse=True)
def _poison(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUBACKEND_POISON", "1")  # every tensor a segment writes starts as NaN


def _model(nodes: list, x_name: str, x_type: int, x_shape: tuple[int, ...], outputs: list[tuple[str, int]],
           inits: dict[str, np.ndarray]) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info(x_name, x_type, list(x_shape))],
                          [helper.make_tensor_value_info(n, t, None) for n, t in outputs],
                          [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])
    model.ir_version = 9
    return model


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray], precision: str = "fp32"
         ) -> tuple[list[np.ndarray], list[np.ndarray]]:
    want = gpubackend.Session(model, path="cpu", cpu_engine="numpy").run(feeds)
    sess = gpubackend.Session(model, path="gles2", precision=precision, fallback=False)
    try:
        got = sess.run(feeds)
        assert set(sess.placement.values()) == {"gles2"}
        assert "segments: 1 (" in sess.explain()
    finally:
        sess.close()
    return got, want


def _awkward_input(rng: np.random.Generator, shape: tuple[int, ...], scale: np.ndarray, axis: int | None,
                   lo: int, hi: int, zp: np.ndarray) -> np.ndarray:
    """Random values, plus along the last axis: exact ties (k + 0.5) * scale for k of both
    parities and signs, values far past both ends of the range, NaN, +-Inf, -0 and a subnormal."""
    x = (rng.standard_normal(shape) * 60 * float(np.max(scale))).astype(np.float32)
    s = np.broadcast_to(np.asarray(scale, np.float32).reshape(
        [-1 if d == axis else 1 for d in range(len(shape))]) if axis is not None else np.float32(scale), shape)
    w = shape[-1]
    ks = np.array([-3.5, -2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, 10.5, 11.5], np.float32)
    lead = tuple(0 for _ in shape[:-1])
    for j, k in enumerate(ks[:w]):
        idx = lead + (j,)
        x[idx] = np.float32(k) * s[idx]  # exact when k * s is: checked against the reference anyway
    for j, v in enumerate([np.nan, np.inf, -np.inf, -0.0, 1e-40, 3e9, -3e9][:w]):
        idx = tuple(1 if d == 0 and shape[0] > 1 else (min(1, shape[d] - 1) if d < len(shape) - 1 else j)
                    for d in range(len(shape)))
        x[idx] = np.float32(v)
    return x


CASES = [  # (int type, x shape, axis or None (per tensor))
    (np.uint8, (2, 5, 3, 7), None),
    (np.int8, (2, 5, 3, 7), 1),  # per channel, 5 channels (not a multiple of 4)
    (np.uint8, (1, 7, 4, 9), 1),
    (np.int8, (3, 4, 10), 2),  # per axis along the last axis of a 3-D tensor
    (np.uint8, (6, 9), 0),  # per axis along the first axis of a 2-D tensor
    (np.int8, (2, 3, 5, 8), 2),  # per axis along H
]


@pytest.mark.parametrize("int_type,shape,axis", CASES, ids=[f"{t.__name__}-{'x'.join(map(str, s))}-axis{a}"
                                                            for t, s, a in CASES])
def test_quantize_dequantize_bit_exact(int_type: type, shape: tuple[int, ...], axis: int | None) -> None:
    """Q then DQ, both integer and float results graph outputs: rounding half to even at exact
    ties, saturation at both ends, NaN -> 0, +-Inf -> the range's ends, bit for bit."""
    rng = np.random.default_rng(11)
    info = np.iinfo(int_type)
    if axis is None:
        scale = np.float32(0.0371)
        zp = np.asarray(int_type(7))
    else:
        n = shape[axis]
        scale = (rng.random(n) * 0.05 + 0.01).astype(np.float32)
        zp = rng.integers(info.min // 2, info.max // 2, n).astype(int_type)
    x = _awkward_input(rng, shape, scale, axis, info.min, info.max, zp)
    kw = {} if axis is None else {"axis": axis}
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], **kw),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], **kw)]
    model = _model(nodes, "x", TensorProto.FLOAT, shape, [("q", ONNX_TYPE[int_type]), ("y", TensorProto.FLOAT)],
                   {"s": scale, "z": zp})
    (got_q, got_y), (want_q, want_y) = _run(model, {"x": x})
    assert got_q.dtype == np.dtype(int_type) and got_y.dtype == np.float32
    np.testing.assert_array_equal(got_q, want_q)
    np.testing.assert_array_equal(got_y.view(np.uint32), want_y.view(np.uint32))
    # the input did reach both ends, zero from NaN, and ties rounded both ways
    assert want_q.min() == info.min and want_q.max() == info.max


def test_quantize_divides_as_ieee_not_by_the_reciprocal() -> None:
    """x / scale correctly rounded (onnxruntime, the reference) against x * (1 / scale): values
    whose quotient lands right beside a .5 tie round to different integers under the two."""
    scale = np.float32(0.1)
    k = np.arange(-120, 120, dtype=np.float32) + np.float32(0.5)
    cand = (k * scale).astype(np.float32)
    # neighbours of each tie product too: the quotient of one of them is the tie or just beside it
    x = np.concatenate([np.nextafter(cand, -np.inf), cand, np.nextafter(cand, np.inf)]).astype(np.float32)
    ieee = np.rint(x / scale)
    recip = np.rint(x * (np.float32(1) / scale))
    assert np.count_nonzero(ieee != recip) >= 5, "the data must tell the two apart"
    x = np.pad(x, (0, (-x.size) % 8)).reshape(1, 1, -1, 8)
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"])]
    model = _model(nodes, "x", TensorProto.FLOAT, x.shape, [("q", TensorProto.INT8)],
                   {"s": scale, "z": np.int8(0)})
    (got,), (want,) = _run(model, {"x": x})
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("int_type", [np.uint8, np.int8])
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_integer_graph_input_and_output(int_type: type, precision: str) -> None:
    """An integer graph input is uploaded as the floats of its values and dequantized on the device
    (per channel, 6 channels); a QuantizeLinear output leaves in the graph's integer type."""
    info = np.iinfo(int_type)
    rng = np.random.default_rng(2)
    shape = (1, 6, 5, 3)
    q = rng.integers(info.min, info.max + 1, shape).astype(int_type)
    q.reshape(-1)[:2] = (info.min, info.max)
    scale = np.linspace(0.02, 0.3, 6).astype(np.float32)
    zp = np.arange(6).astype(int_type)
    nodes = [helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], axis=1),
             helper.make_node("Relu", ["y"], ["r"]),
             helper.make_node("QuantizeLinear", ["r", "s2", "z2"], ["q2"])]
    model = _model(nodes, "q", ONNX_TYPE[int_type], shape, [("y", TensorProto.FLOAT), ("q2", ONNX_TYPE[int_type])],
                   {"s": scale, "z": zp, "s2": np.float32(0.05), "z2": int_type(0)})
    (got_y, got_q), (want_y, want_q) = _run(model, {"q": q}, precision)
    assert got_q.dtype == np.dtype(int_type)
    if precision == "fp32":
        np.testing.assert_array_equal(got_y, want_y)
        np.testing.assert_array_equal(got_q, want_q)
    else:  # fp16 storage rounds the dequantized floats: at most one step after requantizing
        np.testing.assert_allclose(got_y, want_y, rtol=1e-3, atol=0)
        assert int(np.max(np.abs(got_q.astype(np.int32) - want_q.astype(np.int32)))) <= 1


def test_declines_with_a_reason() -> None:
    """What the gles2 kernels do not run, and why (int16 in fp16 textures, a subnormal scale)."""
    from gpubackend.graph import Graph, Node
    from gpubackend.paths.gles2 import kernels

    def reason(scale: np.ndarray, zp: np.ndarray, precision: str) -> str:
        node = Node("q", "QuantizeLinear", ["x", "s", "z"], ["y"])
        graph = Graph([node], ["x"], ["y"], {"s": scale, "z": zp}, {"x": (1, 4, 2, 2), "y": (1, 4, 2, 2)},
                      {"x": np.dtype(np.float32), "y": zp.dtype}, 19)
        got = kernels.generate(node, graph, kernels.Config(precision))
        assert isinstance(got, str), got
        return got

    assert "not exact in fp16" in reason(np.float32(0.5), np.int16(0), "fp16")
    assert "subnormal" in reason(np.float32(1e-40), np.uint8(0), "fp32")


def test_dequantize_of_the_integers_is_no_draw() -> None:
    """DequantizeLinear(x, 1, 0) (the integer form's read of integers, ops.quant._zero_point_in_bias)
    gives what x's texture already holds: the segment reads that texture instead of drawing a copy,
    also where the result leaves the segment; a copy is drawn only where x is an uploaded input
    and the result a segment output (read back from a render target)."""
    rng = np.random.default_rng(8)
    x = (rng.standard_normal((1, 5, 6, 7)) * 3).astype(np.float32)
    one, zero = np.float32(1), np.uint8(0)
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "one", "zero"], ["d"]),
             helper.make_node("Mul", ["d", "m"], ["y"])]
    model = _model(nodes, "x", TensorProto.FLOAT, x.shape, [("y", TensorProto.FLOAT), ("d", TensorProto.FLOAT)],
                   {"s": np.float32(0.05), "z": np.uint8(120), "one": one, "zero": zero, "m": np.float32(0.37)})
    want = gpubackend.Session(model, path="cpu", cpu_engine="numpy").run({"x": x})
    sess = gpubackend.Session(model, path="gles2", fallback=False)
    try:
        got = sess.run({"x": x})
        seg = sess._current.segments[0]  # noqa: SLF001
        assert [s.kernel.name for s in seg.steps] == ["quantize", "binary"]
        assert sess.stats.dispatches == 2
    finally:
        sess.close()
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)

    q = rng.integers(0, 256, (1, 3, 4, 5)).astype(np.uint8)
    model = _model([helper.make_node("DequantizeLinear", ["q", "one", "zero"], ["d"])], "q", TensorProto.UINT8,
                   q.shape, [("d", TensorProto.FLOAT)], {"one": one, "zero": zero})
    (got_d,), (want_d,) = _run(model, {"q": q})
    np.testing.assert_array_equal(got_d, want_d)


# ---- int8-weight kernels (conv_q8, conv1x1_q8, depthwise_q8, convtranspose_q8, gemm_q8, matmul_q8) ----
Q8_OPS = ("Conv", "ConvTranspose", "Gemm", "MatMul")


def _extreme_int8(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Random int8 weights whose first words are the bit patterns a float decode would break: -128,
    127, four -1 (0xFFFFFFFF, a NaN as float32 bits), (0, 0, -128, 127) (+Inf), (0, 0, -128, -1) (-Inf)."""
    w = rng.integers(-128, 128, shape).astype(np.int8)
    head = [-128, 127, -128, 127, -1, -1, -1, -1, 0, 0, -128, 127, 0, 0, -128, -1]
    w.reshape(-1)[:len(head)] = head
    return w


def _weight_layer(op: str, attrs: dict, x_shape: tuple[int, ...], wq: np.ndarray, w_axis: int, co: int,
                  per_tensor: bool = False, w_zp: np.ndarray | None = None) -> onnx.ModelProto:
    """x -> op(DequantizeLinear(wq, scale[, zp]), float bias) -> y: a float-form layer with int8 weights."""
    rng = np.random.default_rng(5)
    scale = np.float32(3e-3) if per_tensor else ((rng.random(wq.shape[w_axis]) + 0.5) * 4e-3).astype(np.float32)
    inits = {"wq": wq, "ws": scale, "b": (rng.standard_normal(co) * 0.3).astype(np.float32)}
    dq = ["wq", "ws"]
    if w_zp is not None:
        inits["wz"] = w_zp
        dq.append("wz")
    kw = {} if per_tensor else {"axis": w_axis}
    nodes = [helper.make_node("DequantizeLinear", dq, ["w"], **kw),
             helper.make_node(op, ["x", "w"] + (["b"] if op != "MatMul" else []), ["y"], **attrs)]
    return _model(nodes, "x", TensorProto.FLOAT, x_shape, [("y", TensorProto.FLOAT)], inits)


Q8_CASES = [  # (id, kernel, op, attrs, x shape, weights shape, weight scale axis, output channels, extra)
    ("conv3x3_pads_stride2", "conv_q8", "Conv", {"pads": [1, 0, 2, 1], "strides": [2, 2]}, (1, 5, 9, 7),
     (6, 5, 3, 3), 0, 6, {}),
    ("conv3x3_cin8_dilated", "conv_q8", "Conv", {"pads": [2, 2, 2, 2], "dilations": [2, 2]}, (1, 8, 6, 6),
     (4, 8, 3, 3), 0, 4, {}),
    ("conv_group2_cin3", "conv_q8", "Conv", {"group": 2, "pads": [1, 1, 1, 1]}, (1, 6, 5, 5), (10, 3, 3, 3), 0, 10,
     {}),
    ("conv1d", "conv_q8", "Conv", {"pads": [1, 1]}, (1, 6, 11), (5, 6, 3), 0, 5, {}),
    ("conv1x1_cin13_per_tensor", "conv1x1_q8", "Conv", {}, (1, 13, 4, 5), (7, 13, 1, 1), 0, 7,
     {"per_tensor": True}),
    ("conv1x1_uint8_zp128", "conv1x1_q8", "Conv", {}, (1, 9, 4, 5), (6, 9, 1, 1), 0, 6, {"uint8": 128}),
    ("conv3x3_uint8_zp10_per_tensor", "conv_q8", "Conv", {"pads": [1, 1, 1, 1]}, (1, 5, 6, 5), (4, 5, 3, 3), 0, 4,
     {"uint8": 10, "per_tensor": True}),
    ("depthwise3x3_uint8_zp10", "depthwise_q8", "Conv", {"group": 6, "pads": [1, 1, 1, 1]}, (1, 6, 5, 5),
     (6, 1, 3, 3), 0, 6, {"uint8": 10, "per_tensor": True}),
    ("depthwise3x3_stride2", "depthwise_q8", "Conv", {"group": 8, "pads": [1, 1, 1, 1], "strides": [2, 2]},
     (1, 8, 9, 9), (8, 1, 3, 3), 0, 8, {}),
    ("depthwise5x5", "depthwise_q8", "Conv", {"group": 6, "pads": [2, 2, 2, 2]}, (1, 6, 7, 7), (6, 1, 5, 5), 0, 6,
     {}),
    ("convtranspose2x2_stride2", "convtranspose_q8", "ConvTranspose", {"strides": [2, 2]}, (1, 6, 4, 5),
     (6, 5, 2, 2), 1, 5, {}),
    ("convtranspose3x3_stride2_group2", "convtranspose_q8", "ConvTranspose",
     {"strides": [2, 2], "pads": [1, 1, 1, 1], "group": 2}, (1, 6, 4, 5), (6, 2, 3, 3), 1, 4, {}),
    ("gemm_transb_k21", "gemm_q8", "Gemm", {"transB": 1}, (3, 21), (13, 21), 0, 13, {}),
    ("gemm_k40_alpha", "gemm_q8", "Gemm", {"alpha": 0.5}, (2, 40), (40, 9), 1, 9, {}),
    ("matmul_batched", "matmul_q8", "MatMul", {}, (2, 3, 4, 10), (10, 7), 1, 7, {}),
]


@pytest.mark.parametrize("case,kernel,op,attrs,x_shape,w_shape,w_axis,co,extra", Q8_CASES,
                         ids=[c[0] for c in Q8_CASES])
def test_int8_weight_kernels_match_fallback(monkeypatch: pytest.MonkeyPatch, case: str, kernel: str, op: str,
                                            attrs: dict, x_shape: tuple[int, ...], w_shape: tuple[int, ...],
                                            w_axis: int, co: int, extra: dict) -> None:
    """The int8 kernel runs (its name), its output matches ``fallback`` (the float weights ``q *
    scale``; the kernel applies the scale once to the integer-weight sum, so to float rounding)
    with every output poisoned first, and its weight texture is about a quarter of the float one's."""
    from gpubackend.paths.gles2 import kernels

    rng = np.random.default_rng(abs(hash(case)) % 2**32)
    if extra.get("uint8"):  # uint8 weights: q - 128 is int8; q - 10 is stored minus an offset
        wq = rng.integers(0, 256, w_shape).astype(np.uint8)
        zp = np.full(1 if extra.get("per_tensor") else w_shape[w_axis], extra["uint8"], np.uint8)
        zp = zp.reshape(()) if extra.get("per_tensor") else zp
        wq.reshape(-1)[:2] = (0, 255)
    else:
        wq, zp = _extreme_int8(rng, w_shape), None
    model = _weight_layer(op, attrs, x_shape, wq, w_axis, co, extra.get("per_tensor", False), zp)
    x = (rng.standard_normal(x_shape) * 2).astype(np.float32)

    def run() -> tuple[np.ndarray, list[str], int]:
        sess = gpubackend.Session(model, path="gles2", fallback=False)
        try:
            got = sess.run({"x": x})[0]
            seg = sess._current.segments[0]  # noqa: SLF001
            return got, [s.kernel.name for s in seg.steps], seg.weight_bytes
        finally:
            sess.close()

    want = gpubackend.Session(model, path="cpu", cpu_engine="numpy").run({"x": x})[0]
    got, names, q8_bytes = run()
    assert names == [kernel]
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-6 * max(1.0, float(np.max(np.abs(want)))))
    for op_type in Q8_OPS:  # the float kernels alone: 4 bytes a weight
        monkeypatch.setitem(kernels.REGISTRY, op_type, [c for c in kernels.REGISTRY[op_type]
                                                        if not c[0].endswith("_q8")])
    float_got, float_names, float_bytes = run()
    assert not any(n.endswith("_q8") for n in float_names)
    np.testing.assert_allclose(float_got, want, rtol=0, atol=2e-6 * max(1.0, float(np.max(np.abs(want)))))
    weights = int(np.prod(w_shape))
    # int8: a byte a weight (each group padded to whole texels) and 4-8 bytes per output channel
    assert q8_bytes <= weights + 3 * weights // 4 + 8 * co + 3 * co * 4 + 64, (q8_bytes, weights)
    assert q8_bytes < float_bytes


def test_integer_form_layer_on_int8_weights_is_exact() -> None:
    """A quantized layer in onnxruntime's integer form (DequantizeLinear -> Conv with int32 bias ->
    QuantizeLinear, ``ops.quant.requantize_in_integers``): conv_q8 sums exact integers, so the
    quantized output equals ``fallback``'s bit for bit, extreme weights included."""
    rng = np.random.default_rng(23)
    wq = _extreme_int8(rng, (8, 6, 3, 3))
    ws = ((rng.random(8) + 0.5) * 4e-3).astype(np.float32)
    xs, xz = np.float32(0.03), np.uint8(120)
    bias_scale = (xs * ws).astype(np.float32)
    inits = {"wq": wq, "ws": ws, "bq": rng.integers(-3000, 3000, 8).astype(np.int32), "bs": bias_scale,
             "xs": xs, "xz": xz, "ys": np.float32(0.05), "yz": np.uint8(128)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             helper.make_node("DequantizeLinear", ["wq", "ws"], ["w"], axis=0),
             helper.make_node("DequantizeLinear", ["bq", "bs"], ["b"], axis=0),
             helper.make_node("Conv", ["xd", "w", "b"], ["acc"], pads=[1, 1, 1, 1]),
             helper.make_node("QuantizeLinear", ["acc", "ys", "yz"], ["y"])]
    model = _model(nodes, "x", TensorProto.FLOAT, (1, 6, 9, 8), [("y", TensorProto.UINT8)], inits)
    x = (rng.standard_normal((1, 6, 9, 8)) * 2).astype(np.float32)
    want = gpubackend.Session(model, path="cpu", cpu_engine="numpy").run({"x": x})[0]
    sess = gpubackend.Session(model, path="gles2", fallback=False)
    try:
        got = sess.run({"x": x})[0]
        names = [s.kernel.name for s in sess._current.segments[0].steps]  # noqa: SLF001
    finally:
        sess.close()
    assert "conv_q8" in names, names
    assert want.min() < 128 < want.max()
    np.testing.assert_array_equal(got, want)


def test_int8_weight_rows_layout() -> None:
    """Bias and scale texels first, then each group's int8 weights as raw bytes, padded to whole
    texels; weights that are not int8 multiples of one scale per channel decline."""
    from gpubackend.paths.compute_quant import unpack_int8_words
    from gpubackend.paths.gles2.kernels import Decline, q8_weight_rows

    q = np.arange(-60, 60, dtype=np.int64).reshape(4, 5, 6) % 256 - 128
    scale = np.array([1, 0.5, 0.25, 2], np.float32)
    bias = np.array([1.5, -2, 3, 1e6], np.float32)
    rows, offset = q8_weight_rows((q * scale[:, None, None]).astype(np.float32), scale, [bias, scale])
    assert rows.dtype == np.float32 and rows.shape == (4, 2 + 5 * 2) and offset == 0
    np.testing.assert_array_equal(rows[:, 0], bias)
    np.testing.assert_array_equal(rows[:, 1], scale)
    lanes = unpack_int8_words(np.ascontiguousarray(rows[:, 2:]), 4 * 5 * 2).reshape(4, 5, 8)
    np.testing.assert_array_equal(lanes[:, :, :6], q)
    assert not lanes[:, :, 6:].any()
    # 8-bit integers past int8 (uint8 weights with zero point 10): stored minus an offset
    rows, offset = q8_weight_rows(np.array([[[-10, 245, 0, 100]]], np.float32), np.ones(1, np.float32), [])
    assert offset == 118
    np.testing.assert_array_equal(unpack_int8_words(rows, 1).reshape(-1).astype(int) + offset, [-10, 245, 0, 100])
    with pytest.raises(Decline):  # not integer multiples of the scale
        q8_weight_rows(np.full((1, 1, 4), 0.3, np.float32), np.ones(1, np.float32), [])
    with pytest.raises(Decline):  # more than 256 integers
        q8_weight_rows(np.array([[[-200, 100]]], np.float32), np.ones(1, np.float32), [])


@pytest.mark.parametrize("case", ["conv1x1_cin13_per_tensor", "depthwise5x5", "gemm_transb_k21"])
def test_int8_weight_kernels_under_fp16_storage(case: str) -> None:
    """fp16 activations (two to a texel; odd widths end in a padding half) with int8 weights: the
    fp32 weight head and the int8 texels read as under fp32; only the storage rounds."""
    _, kernel, op, attrs, x_shape, w_shape, w_axis, co, extra = next(c for c in Q8_CASES if c[0] == case)
    rng = np.random.default_rng(31)
    model = _weight_layer(op, attrs, x_shape, _extreme_int8(rng, w_shape), w_axis, co, extra.get("per_tensor", False))
    x = (rng.standard_normal(x_shape) * 2).astype(np.float32)
    want = gpubackend.Session(model, path="cpu", cpu_engine="numpy").run({"x": x})[0]
    sess = gpubackend.Session(model, path="gles2", precision="fp16", fallback=False)
    try:
        got = sess.run({"x": x})[0]
        assert [s.kernel.name for s in sess._current.segments[0].steps] == [kernel]  # noqa: SLF001
    finally:
        sess.close()
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-3 * max(1.0, float(np.max(np.abs(want)))))
