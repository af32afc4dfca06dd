"""The NumPy CPU kernels (``fallback``) against onnxruntime and ONNX's reference evaluator.

Random non-zero float32 inputs, awkward shapes (channels not a multiple of 4, odd and 1x1 spatial
sizes, batch > 1) and the attribute combinations real exporters emit.
"""

from __future__ import annotations

import itertools

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from gpubackend import fallback
from gpubackend.fallback import FallbackError, apply_activation, run_node, supported_ops

ort = pytest.importorskip("onnxruntime")

RTOL = 1e-5


def rand(*shape: int, seed: int = 0, lo: float = 0.1, hi: float = 1.0) -> np.ndarray:
    """Random float32 values away from zero, with random signs."""
    rng = np.random.default_rng(seed + 7 * len(shape) + sum(shape))
    mag = rng.uniform(lo, hi, size=shape)
    sign = rng.choice([-1.0, 1.0], size=shape)
    return np.asarray(mag * sign, dtype=np.float32)


_DTYPES = {
    np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float64): TensorProto.DOUBLE,
    np.dtype(np.float16): TensorProto.FLOAT16, np.dtype(np.int64): TensorProto.INT64,
    np.dtype(np.int32): TensorProto.INT32, np.dtype(np.int8): TensorProto.INT8,
    np.dtype(np.uint8): TensorProto.UINT8, np.dtype(np.bool_): TensorProto.BOOL,
}


def make_model(op: str, inputs: list[np.ndarray | None], attrs: dict, opset: int, n_out: int = 1) -> onnx.ModelProto:
    names = [f"in{i}" if v is not None else "" for i, v in enumerate(inputs)]
    vis = [helper.make_tensor_value_info(n, _DTYPES[v.dtype], v.shape) for n, v in zip(names, inputs) if n]
    outs = [f"out{i}" for i in range(n_out)]
    node = helper.make_node(op, names, outs, **attrs)
    graph = helper.make_graph([node], "g", vis, [onnx.ValueInfoProto(name=o) for o in outs])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8 if opset <= 17 else 9)


def feeds(inputs: list[np.ndarray | None]) -> dict[str, np.ndarray]:
    return {f"in{i}": v for i, v in enumerate(inputs) if v is not None}


def with_ort(op: str, inputs: list[np.ndarray | None], attrs: dict, opset: int = 17, n_out: int = 1):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(make_model(op, inputs, attrs, opset, n_out).SerializeToString(), so,
                                providers=["CPUExecutionProvider"])
    return sess.run(None, feeds(inputs))


def with_ref(op: str, inputs: list[np.ndarray | None], attrs: dict, opset: int = 17, n_out: int = 1):
    return ReferenceEvaluator(make_model(op, inputs, attrs, opset, n_out)).run(None, feeds(inputs))


def check(op: str, inputs: list[np.ndarray | None], attrs: dict, opset: int = 17, n_out: int = 1,
          oracle=with_ort, rtol: float = RTOL) -> list[np.ndarray]:
    got = run_node(op, list(inputs), dict(attrs, _num_outputs=n_out) if n_out > 1 else dict(attrs), opset)
    exp = oracle(op, inputs, attrs, opset, n_out)
    assert len(got) >= len(exp)
    for g, e in zip(got, exp):
        e = np.asarray(e)
        assert g.shape == e.shape, (g.shape, e.shape)
        assert g.dtype == e.dtype, (g.dtype, e.dtype)
        if e.dtype.kind == "f":
            finite = np.abs(e[np.isfinite(e)])  # an infinite output must not make the bound infinite
            scale = float(finite.max()) if finite.size else 1.0
            np.testing.assert_allclose(g, e, rtol=rtol, atol=rtol * max(scale, 1e-3))
        else:
            np.testing.assert_array_equal(g, e)
    return got


# ----------------------------------------------------------------------------- Conv
CONV_2D = list(itertools.product(
    [1, 3, (2, 3)],                      # kernel
    [1, 2],                              # stride
    [1, 2],                              # dilation
    [0, 1, (0, 1, 2, 1)],                # pads
    ["g1", "dw", "dw2", "g2"],           # grouping
))


@pytest.mark.parametrize("kernel,stride,dil,pads,grouping", CONV_2D)
def test_conv2d(kernel, stride, dil, pads, grouping):
    kh, kw = (kernel, kernel) if isinstance(kernel, int) else kernel
    c, m, group = {"g1": (5, 7, 1), "dw": (6, 6, 6), "dw2": (3, 6, 3), "g2": (6, 10, 2)}[grouping]
    n = 2 if grouping in ("g1", "dw") else 1
    x = rand(n, c, 9, 7, seed=1)
    w = rand(m, c // group, kh, kw, seed=2)
    b = rand(m, seed=3)
    p = [pads] * 4 if isinstance(pads, int) else list(pads)
    attrs = dict(kernel_shape=[kh, kw], strides=[stride, stride], dilations=[dil, dil], pads=p, group=group)
    check("Conv", [x, w, b], attrs)


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER", "VALID"])
@pytest.mark.parametrize("kernel,stride,grouping", list(itertools.product([1, 2, 3], [1, 2, 3], ["g1", "dw"])))
def test_conv_auto_pad(auto_pad, kernel, stride, grouping):
    c, m, group = (3, 5, 1) if grouping == "g1" else (5, 5, 5)
    x = rand(1, c, 8, 11, seed=4)
    w = rand(m, c // group, kernel, kernel, seed=5)
    check("Conv", [x, w], dict(auto_pad=auto_pad, strides=[stride, stride], group=group))


@pytest.mark.parametrize("shape,kernel,stride,pads,group", [
    ((2, 3, 1, 1), (1, 1), 1, 0, 1),           # 1x1 spatial
    ((1, 4, 1, 1), (3, 3), 1, 1, 1),           # 1x1 spatial, padded 3x3
    ((1, 17, 5, 5), (1, 1), 2, 0, 1),          # strided pointwise
    ((1, 24, 13, 13), (1, 1), 1, 0, 3),        # grouped pointwise
    ((2, 7, 15, 4), (3, 3), 2, 1, 7),          # depthwise, non-square
    ((1, 3, 224, 224), (3, 3), 2, 1, 1),       # MobileNet stem
    ((1, 32, 28, 28), (3, 3), 1, 1, 32),       # MobileNet depthwise (gather + batched GEMM)
    ((2, 6, 50, 47), (3, 3), 1, 1, 6),         # depthwise, gather + GEMM
    ((1, 3, 140, 131), (3, 3), 1, 1, 3),       # depthwise on large planes (one band of rows)
    ((2, 3, 150, 131), (3, 3), 1, 1, 3),       # depthwise, batch 2 in two bands of output rows
    ((1, 2, 400, 131), (5, 5), 2, 2, 2),       # strided depthwise in two bands of output rows
    ((1, 3, 5, 5), (5, 5), 1, 0, 1),           # kernel == input
])
def test_conv_shapes(shape, kernel, stride, pads, group):
    m = shape[1] * (2 if group == shape[1] and shape[1] == 3 else 1) if group > 1 else 6
    if group > 1 and group != shape[1]:
        m = 2 * group
    x = rand(*shape, seed=6)
    w = rand(m, shape[1] // group, *kernel, seed=7)
    check("Conv", [x, w, rand(m, seed=8)],
          dict(kernel_shape=list(kernel), strides=[stride] * 2, pads=[pads] * 4, group=group))


@pytest.mark.parametrize("c,m", [(16, 24), (12, 5), (40, 48)])  # phase-plane im2col, shifted GEMMs, shifted
@pytest.mark.parametrize("stride,dil", [(1, 1), (2, 1), (1, 2)])
@pytest.mark.parametrize("full_cols", [False, True], ids=["banded", "full-cols"])
def test_conv_3x3_with_8_or_more_channels(c, m, stride, dil, full_cols, monkeypatch):
    """The algorithms of ungrouped 3x3 convolutions with 8+ input channels (see
    ``fallback.conv._shifted_gemm_pays``; with ``full_cols`` every case as one GEMM on the whole
    column matrix, ``_full_cols_pays``) against onnxruntime, with asymmetric pads and batch 2."""
    from gpubackend.fallback import conv

    monkeypatch.setattr(conv, "_FULL_COLS_BYTES", 1 << 30 if full_cols else 0)
    monkeypatch.setattr(conv, "_FULL_COLS_MIN_CHANNELS", 1)
    x = rand(2, c, 13, 11, seed=9)
    check("Conv", [x, rand(m, c, 3, 3, seed=10), rand(m, seed=11)],
          dict(kernel_shape=[3, 3], strides=[stride] * 2, dilations=[dil] * 2, pads=[1, 2, 0, 1]))


@pytest.mark.parametrize("stride,dil,pads", [(1, 1, [1, 1, 1, 1]), (2, 1, [1, 2, 0, 1]), (1, 2, [2, 1, 2, 0]),
                                             (2, 2, [0, 0, 0, 0])])
def test_conv_shifted_gemms_stacked_taps_match_one_gemm_per_tap(stride, dil, pads, monkeypatch):
    """Shifted-GEMM convolutions with few output channels stack their taps' weights into one GEMM
    per phase plane (``fallback.conv._STACKED_TAPS_MAX_OUT``): the same result as one GEMM per tap
    within rounding, NaN and Inf where it puts them, batch 2."""
    from gpubackend.fallback import conv

    monkeypatch.setattr(conv, "_FULL_COLS_BYTES", 0)
    rng = np.random.default_rng(21)
    x = rng.standard_normal((2, 40, 23, 19)).astype(np.float32)
    x[0, 3, 4, 6], x[1, 5, 8, 2], x[0, 7, 10, 10] = np.nan, np.inf, -np.inf  # even rows and columns: read
    w = rng.standard_normal((12, 40, 3, 3)).astype(np.float32)
    attrs = dict(strides=[stride] * 2, dilations=[dil] * 2, pads=pads)
    stacked = conv.conv_plan(x.shape, x.dtype, w, None, attrs)(x)
    monkeypatch.setattr(conv, "_STACKED_TAPS_MAX_OUT", 0)
    per_tap = conv.conv_plan(x.shape, x.dtype, w, None, attrs)(x)
    assert np.isnan(stacked).any() and np.isinf(stacked).any()
    np.testing.assert_allclose(stacked, per_tap, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("c,m", [(4, 12), (5, 9)])  # bias in the GEMM, bias pass
def test_conv_pointwise_expansion_with_bias(c, m):
    """1x1 convolutions with over twice as many output channels as input channels add their bias
    inside the GEMM (``fallback.conv._pointwise_bias_plan``): against onnxruntime, with the input
    itself left unchanged."""
    x = rand(1, c, 9, 7, seed=17, lo=-1)
    before = x.copy()
    check("Conv", [x, rand(m, c, 1, 1, seed=18, lo=-1), rand(m, seed=19)], dict(kernel_shape=[1, 1]))
    np.testing.assert_array_equal(x, before)


@pytest.mark.parametrize("pads", [[1, 1, 1, 1], [1, 2, 0, 1], [0, 0, 0, 0]], ids=["same", "asymmetric", "valid"])
@pytest.mark.parametrize("bands", [False, True], ids=["one-band", "row-bands"])
def test_conv_3x3_winograd(pads, bands, monkeypatch):
    """3x3 stride-1 convolutions that run as Winograd F(2x2, 3x3) (``fallback.conv._winograd_pays``,
    here also on a small input) against onnxruntime: even and odd output sizes, asymmetric pads,
    batch 2; with ``bands`` one tile row per band, split over two kernel threads."""
    from gpubackend.fallback import _runtime, conv, kernel_threads

    monkeypatch.setattr(conv, "_WINOGRAD_MIN_WORK", 0)
    monkeypatch.setattr(conv, "_FULL_COLS_BYTES", 0)
    if bands:
        monkeypatch.setattr(conv, "_WINOGRAD_BAND_BYTES", 1)
        monkeypatch.setattr(_runtime, "MIN_PART_WORK", 1 << 10)
    assert conv._winograd_pays(32, 40, [3, 3], [1, 1], [1, 1], [13, 11])
    x = rand(2, 32, 13, 11, seed=12, lo=-1)
    with kernel_threads(2):
        check("Conv", [x, rand(40, 32, 3, 3, seed=13, lo=-1), rand(40, seed=14)], dict(kernel_shape=[3, 3], pads=pads))


def test_conv_3x3_winograd_keeps_ieee_infinities(monkeypatch):
    """An infinite input runs without Winograd (whose transforms would turn a tile's other outputs
    into NaN): the outputs that read it are +-inf or NaN as onnxruntime has them, the others finite."""
    from gpubackend.fallback import conv

    monkeypatch.setattr(conv, "_WINOGRAD_MIN_WORK", 0)
    monkeypatch.setattr(conv, "_FULL_COLS_BYTES", 0)
    x = rand(1, 32, 8, 8, seed=15, lo=-1)
    x[0, 3, 0, 0] = np.inf
    x[0, 5, 4, 5] = -np.inf
    got = check("Conv", [x, rand(32, 32, 3, 3, seed=16, lo=-1)], dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1]))[0]
    assert np.isfinite(got[0, :, 3:, :3]).all()


@pytest.mark.parametrize("rank", [1, 3])
@pytest.mark.parametrize("group", [1, 4])
def test_conv_1d_3d(rank, group):
    sp = (11,) if rank == 1 else (5, 6, 4)
    x = rand(2, 4, *sp, seed=9)
    w = rand(8, 4 // group, *([3] * rank), seed=10)
    check("Conv", [x, w, rand(8, seed=11)],
          dict(strides=[2] * rank, pads=[1] * (2 * rank), dilations=[1] * (rank - 1) + [2], group=group))


ACTS = [("Relu", {}), ("Clip", {"min": 0.0, "max": 6.0}), ("LeakyRelu", {"alpha": 0.1}),
        ("HardSigmoid", {"alpha": 0.25, "beta": 0.4}), ("HardSwish", {}), ("Sigmoid", {}), ("Tanh", {})]


def _act_reference(y: np.ndarray, act) -> np.ndarray:
    name, p = act
    if name == "Clip":
        return with_ort("Clip", [y, np.array(p["min"], np.float32), np.array(p["max"], np.float32)], {})[0]
    return with_ort(name, [y], p)[0]


@pytest.mark.parametrize("act", ACTS, ids=[a[0] for a in ACTS])
@pytest.mark.parametrize("op", ["Conv", "ConvTranspose", "Gemm", "MatMul"])
def test_fused_activation(op, act):
    if op == "Conv":
        args, attrs = [rand(1, 6, 7, 7, seed=12) * 4, rand(6, 1, 3, 3, seed=13)], dict(group=6, pads=[1] * 4)
    elif op == "ConvTranspose":
        args, attrs = [rand(1, 3, 5, 5, seed=14) * 4, rand(3, 2, 2, 2, seed=15)], dict(strides=[2, 2])
    elif op == "Gemm":
        args, attrs = [rand(3, 5, seed=16) * 4, rand(4, 5, seed=17), rand(4, seed=18)], dict(transB=1)
    else:
        args, attrs = [rand(2, 3, 5, seed=19) * 4, rand(5, 4, seed=20)], {}
    plain = run_node(op, args, attrs)[0]
    fused = run_node(op, args, dict(attrs, _act=act))[0]
    exp = _act_reference(plain, act)
    assert fused.dtype == np.float32
    np.testing.assert_allclose(fused, exp, rtol=1e-5, atol=1e-6)


def test_apply_activation_in_place_and_none():
    x = rand(4, 5, seed=21)
    assert apply_activation(x, None) is x
    y = x.copy()
    out = apply_activation(y, ("Relu", {}))
    assert out is y and (y >= 0).all()
    ro = x.copy()
    ro.setflags(write=False)
    np.testing.assert_array_equal(apply_activation(ro, ("Clip", {"min": -0.5, "max": 0.5})), np.clip(x, -0.5, 0.5))


# ----------------------------------------------------------------------------- ConvTranspose
# output_padding must be smaller than the stride: invalid combinations are not generated
CONVT = [c for c in itertools.product([2, 3], [1, 2, 3], [1, 2], [0, (1, 0, 0, 2)], [0, 1], [1, 2]) if c[4] < c[1]]


@pytest.mark.parametrize("kernel,stride,dil,pads,outpad,group", CONVT)
def test_conv_transpose(kernel, stride, dil, pads, outpad, group):
    x = rand(2, 4, 5, 6, seed=22)
    w = rand(4, 3, kernel, kernel, seed=23)
    p = [pads] * 4 if isinstance(pads, int) else list(pads)
    check("ConvTranspose", [x, w, rand(3 * group, seed=24)],
          dict(strides=[stride] * 2, dilations=[dil] * 2, pads=p, output_padding=[outpad] * 2, group=group))


@pytest.mark.parametrize("attrs", [
    dict(strides=[3, 2], output_shape=[10, 8]),
    dict(strides=[2, 2], output_shape=[8, 10]),
    dict(strides=[2, 2], auto_pad="SAME_UPPER"),
    dict(strides=[2, 2], auto_pad="SAME_LOWER"),
    dict(strides=[3, 3], auto_pad="VALID"),
])
def test_conv_transpose_output_shape(attrs):
    x = rand(1, 3, 4, 5, seed=25)
    w = rand(3, 2, 3, 3, seed=26)
    oracle = with_ref if attrs.get("auto_pad", "").startswith("SAME") else with_ort
    check("ConvTranspose", [x, w], attrs, oracle=oracle)


def test_conv_transpose_output_shape_with_batch_and_channels():
    x, w = rand(1, 3, 4, 5, seed=25), rand(3, 2, 3, 3, seed=26)
    a = run_node("ConvTranspose", [x, w], dict(strides=[2, 2], output_shape=[1, 2, 10, 12]))[0]
    b = run_node("ConvTranspose", [x, w], dict(strides=[2, 2], output_shape=[10, 12]))[0]
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("rank,group", [(1, 1), (2, 1), (2, 2), (3, 1)])
def test_conv_transpose_non_overlapping_taps(rank, group, monkeypatch):
    """kernel == stride, no pads (a decoder's 2x2 upsampling): each tap's plane is one strided
    copy into the output with the bias added on the way, split over two kernel threads. Against
    onnxruntime with NaN and Inf in the input, into output buffers that start out as NaN (every
    element must be written); the activation fused after it sees the biased sums."""
    from gpubackend.fallback import _runtime, conv, kernel_threads

    sp = {1: (9,), 2: (6, 7), 3: (3, 4, 2)}[rank]
    x = rand(2, 4, *sp, seed=30, lo=-2, hi=2)
    x.reshape(-1)[[3, x.size // 2, -5]] = [np.nan, np.inf, -np.inf]
    w, b = rand(4, 3, *([2] * rank), seed=31, lo=-1), rand(3 * group, seed=32, lo=-1)
    attrs = dict(strides=[2] * rank, group=group)
    monkeypatch.setattr(_runtime, "MIN_PART_WORK", 1)
    monkeypatch.setattr(conv, "empty", lambda shape, dtype: np.full(shape, np.nan, dtype))
    with kernel_threads(2):
        got = run_node("ConvTranspose", [x, w, b], attrs)[0]
        relu = run_node("ConvTranspose", [x, w, b], dict(attrs, _act=("Relu", {})))[0]
    exp = with_ort("ConvTranspose", [x, w, b], attrs)[0]
    assert got.shape == exp.shape and np.isnan(exp).any() and np.isinf(exp).any() and np.isfinite(exp).mean() > 0.5
    np.testing.assert_array_equal(np.isnan(got), np.isnan(exp))
    np.testing.assert_allclose(got, exp, rtol=RTOL, atol=RTOL * float(np.abs(exp[np.isfinite(exp)]).max()))
    np.testing.assert_array_equal(relu, np.where(np.isnan(got), got, np.maximum(got, 0)))


@pytest.mark.parametrize("rank", [1, 3])
def test_conv_transpose_1d_3d(rank):
    sp = (7,) if rank == 1 else (3, 4, 2)
    x = rand(1, 2, *sp, seed=27)
    w = rand(2, 3, *([2] * rank), seed=28)
    check("ConvTranspose", [x, w], dict(strides=[2] * rank, pads=[0] * rank + [1] * rank))


# ----------------------------------------------------------------------------- Gemm / MatMul
@pytest.mark.parametrize("ta,tb", list(itertools.product([0, 1], [0, 1])))
@pytest.mark.parametrize("c_shape", [None, (), (1,), (4,), (3, 1), (3, 4)])
@pytest.mark.parametrize("alpha,beta", [(1.0, 1.0), (0.5, 2.0), (1.0, 0.0)])
def test_gemm(ta, tb, c_shape, alpha, beta):
    a = rand(*((5, 3) if ta else (3, 5)), seed=29)
    b = rand(*((4, 5) if tb else (5, 4)), seed=30)
    c = None if c_shape is None else rand(*c_shape, seed=31) if c_shape else np.array(0.7, np.float32)
    check("Gemm", [a, b] + ([c] if c is not None else []), dict(transA=ta, transB=tb, alpha=alpha, beta=beta))


@pytest.mark.parametrize("sa,sb", [((3, 4), (4, 5)), ((2, 3, 4), (4, 5)), ((2, 1, 3, 4), (5, 4, 2)),
                                   ((4,), (4, 3)), ((2, 3, 4), (4,)), ((4,), (4,)), ((1, 4), (3, 4, 2))])
def test_matmul(sa, sb):
    check("MatMul", [rand(*sa, seed=32), rand(*sb, seed=33)], {})


# ----------------------------------------------------------------------------- element-wise
UNARY = ["Relu", "Sigmoid", "Tanh", "HardSwish", "Exp", "Neg", "Abs", "Erf", "Floor", "Ceil", "Reciprocal"]


@pytest.mark.parametrize("op", UNARY)
def test_unary(op):
    check(op, [rand(2, 3, 5, seed=34) * 3], {}, opset=14)


@pytest.mark.parametrize("op", ["Log", "Sqrt"])
def test_unary_positive(op):
    check(op, [np.abs(rand(3, 7, seed=35))], {}, opset=13)


def test_sigmoid_extremes_stay_finite():
    x = np.array([-200.0, -90.0, -20.0, 0.0, 20.0, 90.0, 200.0], np.float32)
    y = run_node("Sigmoid", [x], {})[0]
    assert y.dtype == np.float32 and np.isfinite(y).all()
    np.testing.assert_allclose(y, 1 / (1 + np.exp(-x.astype(np.float64))), rtol=1e-6, atol=1e-30)


@pytest.mark.parametrize("op,attrs", [("LeakyRelu", {}), ("LeakyRelu", {"alpha": 0.3}), ("LeakyRelu", {"alpha": 1.5}),
                                      ("HardSigmoid", {}), ("HardSigmoid", {"alpha": 0.5, "beta": 0.1})])
def test_unary_attrs(op, attrs):
    check(op, [rand(4, 6, seed=36) * 3], attrs)


@pytest.mark.parametrize("slope_shape", [(1,), (3, 1, 1), (5,), (2, 3, 4, 5)])
def test_prelu(slope_shape):
    check("PRelu", [rand(2, 3, 4, 5, seed=37), rand(*slope_shape, seed=38)], {})


@pytest.mark.parametrize("lo,hi", [(-0.5, 0.5), (None, 0.3), (-0.2, None), (None, None), (0.6, 0.2)])
def test_clip(lo, hi):
    x = rand(3, 4, seed=39)
    inputs = [x, None if lo is None else np.array(lo, np.float32), None if hi is None else np.array(hi, np.float32)]
    while inputs and inputs[-1] is None:
        inputs.pop()
    check("Clip", inputs, {}, opset=13)
    attrs = {k: v for k, v in (("min", lo), ("max", hi)) if v is not None}
    if lo is None or hi is None or lo <= hi:  # onnxruntime rejects min > max in the attribute form
        check("Clip", [x], attrs, opset=6)


def test_clip_int():
    x = np.arange(-5, 5, dtype=np.int32)
    check("Clip", [x, np.array(-2, np.int32), np.array(3, np.int32)], {}, opset=13)


BCAST = [((2, 3, 4), (2, 3, 4)), ((2, 3, 4), (4,)), ((2, 1, 4), (3, 1)), ((), (2, 3)), ((5, 1, 1), (1, 3, 2))]


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Pow"])
@pytest.mark.parametrize("sa,sb", BCAST)
def test_binary(op, sa, sb):
    a, b = rand(*sa, seed=40), rand(*sb, seed=41)
    if op == "Pow":
        a = np.asarray(np.abs(a))
    check(op, [a, b], {}, opset=14)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.int8])
def test_integer_div_truncates(dtype):
    a = np.array([7, -7, 7, -7, 0, 5, -9], dtype)
    b = np.array([2, 2, -2, -2, 3, 5, 4], dtype)
    check("Div", [a, b], {}, opset=14)


def test_pow_int_base():
    check("Pow", [np.array([1, 2, 3, -2], np.int64), np.array([3, 2, 0, 3], np.int64)], {}, opset=15)
    check("Pow", [rand(3, 4, seed=42), np.array(2, np.int64)], {}, opset=15)


def test_legacy_broadcast_axis():
    a, b = rand(2, 3, 4, 5, seed=43), rand(3, 4, seed=44)
    got = run_node("Add", [a, b], {"broadcast": 1, "axis": 1}, opset=6)[0]
    np.testing.assert_allclose(got, a + b[None, :, :, None], rtol=1e-6)


@pytest.mark.parametrize("op", ["Sum", "Max", "Min", "Mean"])
@pytest.mark.parametrize("n", [1, 2, 3])
def test_variadic(op, n):
    shapes = [(3, 4), (4,), (1, 4)][:n]
    check(op, [rand(*s, seed=45 + i) for i, s in enumerate(shapes)], {}, opset=13)


# ----------------------------------------------------------------------------- pooling
# pads must be smaller than the kernel: invalid combinations are not generated
POOL = [c for c in itertools.product([2, 3, (3, 2)], [1, 2], [0, 1, (0, 1, 1, 0)], [0, 1], [1, 2])
        if max([c[2]] if isinstance(c[2], int) else c[2]) < min([c[0]] if isinstance(c[0], int) else c[0])]


@pytest.mark.parametrize("kernel,stride,pads,ceil,dil", POOL)
def test_maxpool(kernel, stride, pads, ceil, dil):
    k = [kernel] * 2 if isinstance(kernel, int) else list(kernel)
    p = [pads] * 4 if isinstance(pads, int) else list(pads)
    x = rand(2, 3, 9, 8, seed=50)
    check("MaxPool", [x], dict(kernel_shape=k, strides=[stride] * 2, pads=p, ceil_mode=ceil, dilations=[dil] * 2),
          opset=12)


@pytest.mark.parametrize("kernel,stride,pads,ceil,include", [
    c for c in itertools.product([2, 3], [1, 2, 3], [0, 1, (1, 0, 0, 1)], [0, 1], [0, 1])
    if max([c[2]] if isinstance(c[2], int) else c[2]) < c[0]])
def test_averagepool(kernel, stride, pads, ceil, include):
    p = [pads] * 4 if isinstance(pads, int) else list(pads)
    x = rand(2, 5, 10, 7, seed=51)
    check("AveragePool", [x], dict(kernel_shape=[kernel] * 2, strides=[stride] * 2, pads=p, ceil_mode=ceil,
                                   count_include_pad=include), opset=19)


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER", "VALID"])
@pytest.mark.parametrize("stride", [1, 2])
def test_pool_auto_pad(op, auto_pad, stride):
    check(op, [rand(1, 3, 7, 6, seed=52)], dict(kernel_shape=[3, 2], strides=[stride] * 2, auto_pad=auto_pad),
          opset=19)


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
@pytest.mark.parametrize("rank", [1, 3])
def test_pool_1d_3d(op, rank):
    sp = (9,) if rank == 1 else (5, 4, 6)
    check(op, [rand(2, 3, *sp, seed=53)], dict(kernel_shape=[2] * rank, strides=[2] * rank, pads=[1] * (2 * rank)),
          opset=19)


@pytest.mark.parametrize("pads,stride", [(0, 1), (1, 2)])
def test_maxpool_indices(pads, stride):
    x = rand(2, 3, 6, 5, seed=54)
    check("MaxPool", [x], dict(kernel_shape=[3, 3], strides=[stride] * 2, pads=[pads] * 4), opset=12, n_out=2)


def test_maxpool_uint8():
    x = (np.arange(2 * 3 * 5 * 5) % 251).astype(np.uint8).reshape(2, 3, 5, 5)
    check("MaxPool", [x], dict(kernel_shape=[2, 2], pads=[1, 1, 1, 1]), opset=12)


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
@pytest.mark.parametrize("shape", [(2, 5, 7, 3), (1, 3, 1, 1), (1, 6, 9), (1, 2, 3, 4, 5)])
def test_global_pool(op, shape):
    check(op, [rand(*shape, seed=55)], {})


# ----------------------------------------------------------------------------- normalisation
@pytest.mark.parametrize("shape", [(2, 5, 4, 3), (3, 7), (1, 3, 6)])
def test_batchnorm(shape):
    c = shape[1]
    args = [rand(*shape, seed=56), rand(c, seed=57), rand(c, seed=58), rand(c, seed=59), np.abs(rand(c, seed=60))]
    check("BatchNormalization", args, dict(epsilon=1e-3), opset=15)
    check("BatchNormalization", args, {}, opset=9)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("axis,opset", [(None, 11), (0, 11), (2, 11), (-1, 11), (None, 13), (0, 13), (1, 13)])
def test_softmax(op, axis, opset):
    attrs = {} if axis is None else {"axis": axis}
    check(op, [rand(2, 3, 4, seed=61) * 5], attrs, opset=opset)


@pytest.mark.parametrize("axes,keep,opset", [(None, 1, 13), ([1], 0, 13), ([0, -1], 1, 13), (None, 0, 18),
                                             ([2], 1, 18), ([-2, 0], 0, 18)])
def test_reduce_mean(axes, keep, opset):
    x = rand(2, 3, 5, seed=62)
    if opset >= 18:
        inputs = [x] if axes is None else [x, np.array(axes, np.int64)]
        check("ReduceMean", inputs, dict(keepdims=keep), opset=opset)
    else:
        check("ReduceMean", [x], dict(keepdims=keep, **({} if axes is None else {"axes": axes})), opset=opset)


def test_reduce_mean_noop():
    x = rand(2, 3, seed=63)
    check("ReduceMean", [x, np.array([], np.int64)], dict(noop_with_empty_axes=1), opset=18)


# ----------------------------------------------------------------------------- Resize / Upsample
RESIZE = [
    dict(mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
    dict(mode="nearest", coordinate_transformation_mode="half_pixel", nearest_mode="round_prefer_floor"),
    dict(mode="nearest", coordinate_transformation_mode="half_pixel", nearest_mode="round_prefer_ceil"),
    dict(mode="nearest", coordinate_transformation_mode="align_corners", nearest_mode="ceil"),
    dict(mode="linear", coordinate_transformation_mode="half_pixel"),
    dict(mode="linear", coordinate_transformation_mode="pytorch_half_pixel"),
    dict(mode="linear", coordinate_transformation_mode="align_corners"),
    dict(mode="linear", coordinate_transformation_mode="asymmetric"),
    dict(mode="cubic", coordinate_transformation_mode="half_pixel"),
    dict(mode="cubic", coordinate_transformation_mode="align_corners", cubic_coeff_a=-0.5, exclude_outside=1),
]


@pytest.mark.parametrize("attrs", RESIZE, ids=lambda a: "-".join(str(v) for v in a.values()))
@pytest.mark.parametrize("how", ["up2", "down", "sizes", "odd"])
def test_resize(attrs, how):
    x = rand(2, 3, 5, 7, seed=64)
    roi = np.array([], np.float32)
    if how == "up2":
        inputs = [x, roi, np.array([1, 1, 2, 2], np.float32)]
    elif how == "down":
        inputs = [x, roi, np.array([1, 1, 0.6, 0.5], np.float32)]
    elif how == "odd":
        inputs = [x, roi, np.array([1, 1, 1.7, 2.3], np.float32)]
    else:
        inputs = [x, roi, None, np.array([2, 3, 8, 4], np.int64)]
    check("Resize", inputs, attrs, opset=13, oracle=with_ref)


@pytest.mark.parametrize("ctm", ["half_pixel", "pytorch_half_pixel"])
def test_resize_linear_x2_in_row_blocks(ctm):
    """Bilinear x2 on inputs large enough to run in several blocks of rows along both axes."""
    x = rand(1, 2, 70, 300, seed=65, lo=-1)
    check("Resize", [x, np.array([], np.float32), np.array([1, 1, 2, 2], np.float32)],
          dict(mode="linear", coordinate_transformation_mode=ctm), opset=13)


@pytest.mark.parametrize("sizes", [((9, 18), (13, 29)), ((9, 18), (13, 26)), ((5, 15), (7, 14)), ((2, 4), (1, 3))],
                         ids=["x2-odd", "x2", "x3-x2", "tiny"])
@pytest.mark.parametrize("ctm", ["half_pixel", "align_corners", "asymmetric", "pytorch_half_pixel"])
def test_bilinear_2d_in_plane_blocks_is_bit_equal_to_any_axes_form(ctm, sizes, monkeypatch):
    """The blocked bilinear resize of the last two axes (several blocks of planes, split over two
    kernel threads) computes the same products in the same order as the form for any two axes (here
    the same data channels-last): equal bit for bit."""
    from gpubackend.fallback import _runtime, kernel_threads, resize

    monkeypatch.setattr(resize, "_BILINEAR_BLOCK_BYTES", 1 << 10)
    monkeypatch.setattr(_runtime, "MIN_PART_WORK", 1 << 10)
    x = rand(2, 6, sizes[0][0], sizes[1][0], seed=70, lo=-1)
    taps = []
    for length, out in sizes:
        idx, w = resize.axis_taps("linear", "round_prefer_floor", ctm, length, out, out / length)
        taps.append(resize.border_linear_taps(idx, w, length))
    with kernel_threads(2):
        got = resize._bilinear_2d(x, (2, 3), tuple(taps), x.dtype)
    ref = resize._bilinear_2d(np.ascontiguousarray(x.transpose(0, 2, 3, 1)), (1, 2), tuple(taps), x.dtype)
    np.testing.assert_array_equal(got, ref.transpose(0, 3, 1, 2))


def test_resize_tf_crop_and_resize():
    x = rand(1, 2, 6, 6, seed=65)
    roi = np.array([0, 0, 0.1, 0.3, 1, 1, 0.9, 1.2], np.float32)
    check("Resize", [x, roi, None, np.array([1, 2, 4, 5], np.int64)],
          dict(mode="linear", coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=2.5),
          opset=13, oracle=with_ref)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_resize_opset10_and_upsample(mode):
    x = rand(1, 2, 3, 4, seed=66)
    scales = np.array([1, 1, 2, 3], np.float32)
    check("Resize", [x, scales], dict(mode=mode), opset=10)
    check("Upsample", [x, scales], dict(mode=mode), opset=9)


def test_upsample_opset7_attribute_scales():
    x = rand(1, 2, 3, 4, seed=69)
    check("Upsample", [x], dict(mode="nearest", scales=[1.0, 1.0, 2.0, 3.0]), opset=7)
    check("Upsample", [x], dict(mode="linear", scales=[1.0, 1.0, 2.0, 2.0]), opset=7)


def test_resize_axes_and_keep_aspect():
    x = rand(1, 2, 4, 6, seed=67)
    check("Resize", [x, None, None, np.array([8, 9], np.int64)],
          dict(mode="nearest", axes=[2, 3], keep_aspect_ratio_policy="not_larger"), opset=19, oracle=with_ref)
    check("Resize", [x, None, np.array([3.0, 1.5], np.float32)], dict(mode="linear", axes=[3, 2]),
          opset=19, oracle=with_ref)


def test_resize_antialias():
    x = rand(1, 1, 12, 10, seed=68)
    check("Resize", [x, None, np.array([1, 1, 0.4, 0.6], np.float32)], dict(mode="linear", antialias=1),
          opset=19, oracle=with_ref)


# ----------------------------------------------------------------------------- shape plumbing
@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
@pytest.mark.parametrize("pads", [[0, 1, 2, 1, 0, 2, 1, 0], [1, 0, 0, 2, 0, 1, 0, 1]])
def test_pad(mode, pads):
    x = rand(2, 3, 4, 5, seed=69)
    check("Pad", [x, np.array(pads, np.int64), np.array(1.5, np.float32)], dict(mode=mode), opset=13)
    check("Pad", [x], dict(mode=mode, pads=pads, value=1.5), opset=2)


def test_pad_axes_and_negative():
    x = rand(3, 4, 5, seed=70)
    check("Pad", [x, np.array([1, -1, 2, 0], np.int64), None, np.array([0, -1], np.int64)], {}, opset=18)


@pytest.mark.parametrize("shape,target,allowzero", [((2, 3, 4), [4, -1], 0), ((2, 3, 4), [0, 12], 0),
                                                    ((2, 3, 4), [0, -1, 2], 0), ((0, 3), [3, 0], 1)])
def test_reshape(shape, target, allowzero):
    x = rand(*shape, seed=71) if 0 not in shape else np.zeros(shape, np.float32)
    check("Reshape", [x, np.array(target, np.int64)], dict(allowzero=allowzero), opset=14)


@pytest.mark.parametrize("axis", [0, 1, 2, -1, 4])
def test_flatten(axis):
    check("Flatten", [rand(2, 3, 4, 5, seed=72)], dict(axis=axis), opset=13)


@pytest.mark.parametrize("perm", [None, [0, 2, 3, 1], [3, 1, 0, 2]])
def test_transpose(perm):
    check("Transpose", [rand(2, 3, 4, 5, seed=73)], {} if perm is None else dict(perm=perm))


@pytest.mark.parametrize("opset", [11, 13])
def test_squeeze_unsqueeze(opset):
    x = rand(1, 3, 1, 4, seed=74)
    if opset < 13:
        check("Squeeze", [x], dict(axes=[0, -2]), opset=opset)
        check("Unsqueeze", [x], dict(axes=[0, 5, -1]), opset=opset)
    else:
        check("Squeeze", [x, np.array([2], np.int64)], {}, opset=opset)
        check("Unsqueeze", [x, np.array([1, -1], np.int64)], {}, opset=opset)
    check("Squeeze", [x], {}, opset=opset)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concat(axis):
    xs = [rand(2, 3, 4, seed=75), rand(2, 3, 4, seed=76)]
    xs[1] = np.concatenate([xs[1]] * 2, axis=axis)
    check("Concat", xs, dict(axis=axis))


@pytest.mark.parametrize("start,end", [(None, None), (1, None), (-1, None), (0, -1), (1, 2), (5, 1)])
def test_shape(start, end):
    attrs = {k: v for k, v in (("start", start), ("end", end)) if v is not None}
    check("Shape", [rand(2, 3, 4, seed=77)], attrs, opset=15)


@pytest.mark.parametrize("axis,idx", [(0, [0, 2]), (1, [[0, -1], [1, 1]]), (-1, 2)])
def test_gather(axis, idx):
    check("Gather", [rand(3, 4, 5, seed=78), np.array(idx, np.int64)], dict(axis=axis))


@pytest.mark.parametrize("starts,ends,axes,steps", [
    ([1], [3], [0], None), ([0, 1], [-1, 1000], None, None), ([-1], [-1000], [1], [-1]),
    ([10], [-10], [2], [-2]), ([0, 0], [2, 3], [-1, 0], [2, 1]),
])
def test_slice(starts, ends, axes, steps):
    x = rand(4, 5, 6, seed=79)
    inputs = [x, np.array(starts, np.int64), np.array(ends, np.int64)]
    if axes is not None or steps is not None:
        inputs.append(np.array(axes if axes is not None else list(range(len(starts))), np.int64))
    if steps is not None:
        inputs.append(np.array(steps, np.int64))
    check("Slice", inputs, {}, opset=13)


def test_slice_opset1():
    x = rand(4, 5, seed=80)
    check("Slice", [x], dict(starts=[1, 0], ends=[3, -1], axes=[0, 1]), opset=1, oracle=with_ort)


@pytest.mark.parametrize("to", [TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.INT32, TensorProto.INT64,
                                TensorProto.UINT8, TensorProto.BOOL])
def test_cast(to):
    check("Cast", [rand(3, 4, seed=81) * 10], dict(to=to), opset=13)


def test_constant_forms():
    t = rand(2, 3, seed=82)
    assert run_node("Constant", [], {"value": t})[0] is not None
    np.testing.assert_array_equal(run_node("Constant", [], {"value": t})[0], t)
    assert run_node("Constant", [], {"value_float": 1.5})[0].dtype == np.float32
    assert run_node("Constant", [], {"value_ints": [1, 2]})[0].tolist() == [1, 2]
    assert run_node("Constant", [], {"value_int": 3})[0].dtype == np.int64
    assert run_node("Constant", [], {"value_floats": [1.0, 2.0]})[0].shape == (2,)
    assert run_node("Constant", [], {"value": numpy_helper.from_array(t)})[0].shape == (2, 3)


@pytest.mark.parametrize("value", [None, np.array([2.5], np.float32), np.array([7], np.int32)])
def test_constant_of_shape(value):
    got = run_node("ConstantOfShape", [np.array([2, 3], np.int64)], {} if value is None else {"value": value})[0]
    exp = np.zeros((2, 3), np.float32) if value is None else np.full((2, 3), value[0], value.dtype)
    assert got.dtype == exp.dtype
    np.testing.assert_array_equal(got, exp)


@pytest.mark.parametrize("opset", [7, 12])
def test_dropout_inference(opset):
    x = rand(3, 4, seed=83)
    y, mask = run_node("Dropout", [x], {"ratio": 0.3} if opset < 12 else {}, opset)
    np.testing.assert_array_equal(y, x)
    assert mask.shape == x.shape and bool(mask.all())


def test_identity_and_size():
    x = rand(2, 3, seed=84)
    assert run_node("Identity", [x], {})[0] is x
    assert int(run_node("Size", [x], {})[0]) == 6


# ----------------------------------------------------------------------------- dtypes, speed paths
def test_float32_stays_float32():
    x, w = rand(1, 8, 9, 9, seed=85), rand(8, 1, 3, 3, seed=86)
    for op, args, attrs in [
        ("Conv", [x, w, rand(8, seed=87)], dict(group=8, pads=[1] * 4)),
        ("Conv", [x, rand(4, 8, 1, 1, seed=88)], {}),
        ("ConvTranspose", [x, rand(8, 2, 2, 2, seed=89)], dict(strides=[2, 2])),
        ("AveragePool", [x], dict(kernel_shape=[3, 3], pads=[1] * 4)),
        ("Resize", [x, None, np.array([1, 1, 2, 2], np.float32)], dict(mode="linear")),
        ("BatchNormalization", [x] + [np.abs(rand(8, seed=90 + i)) for i in range(4)], {}),
        ("Gemm", [rand(2, 3, seed=95), rand(3, 4, seed=96), np.array(1.0, np.float64)], {}),
        ("Add", [x, np.array(1.0, np.float64)], {}),
        ("HardSwish", [x], {}),
        ("Softmax", [x], {}),
    ]:
        assert run_node(op, args, attrs)[0].dtype == np.float32, op


def test_conv_im2col_row_bands(monkeypatch):
    """Large convolutions build their im2col matrix a band of output rows at a time."""
    import gpubackend.fallback.conv as conv_module

    x, w = rand(2, 6, 23, 9, seed=99), rand(4, 3, 3, 2, seed=100)
    attrs = dict(pads=[1, 0, 2, 1], strides=[2, 1], dilations=[1, 2], group=2)
    whole = run_node("Conv", [x, w], attrs)[0]
    monkeypatch.setattr(conv_module, "_COLS_BYTES", 700)
    banded = run_node("Conv", [x, w], attrs)[0]
    np.testing.assert_allclose(banded, whole, rtol=1e-6, atol=1e-6)
    check("Conv", [x, w], attrs)


def test_conv_pointwise_has_no_im2col_copy():
    x = rand(1, 16, 20, 20, seed=97)
    w = rand(8, 16, 1, 1, seed=98)
    y = run_node("Conv", [x, w], {})[0]
    np.testing.assert_allclose(y, np.einsum("mc,chw->mhw", w[:, :, 0, 0], x[0])[None], rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------- errors
@pytest.mark.parametrize("op,inputs,attrs,match", [
    ("NoSuchOp", [], {}, "no CPU kernel for op NoSuchOp"),
    ("Conv", [np.ones((1, 3, 5, 5), np.float32), np.ones((4, 2, 3, 3), np.float32)], {}, "channels"),
    ("Conv", [np.ones((1, 3, 5, 5), np.float32), np.ones((4, 3, 3, 3), np.float32)], {"auto_pad": "SAME"},
     "auto_pad"),
    ("Conv", [np.ones((1, 3, 2, 2), np.float32), np.ones((4, 3, 3, 3), np.float32)], {}, "larger than"),
    ("Conv", [np.ones((1, 3, 5, 5), np.float32)], {}, "missing required input 1"),
    ("MaxPool", [np.ones((1, 3, 5, 5), np.float32)], {}, "kernel_shape"),
    ("Reshape", [np.ones((2, 3), np.float32), np.array([4, 2], np.int64)], {}, "cannot reshape"),
    ("Gather", [np.ones((2, 3), np.float32), np.array([5], np.int64)], {}, "out of range"),
    ("MatMul", [np.ones((2, 3), np.float32), np.ones((4, 2), np.float32)], {}, "inner dimensions"),
    ("Gemm", [np.ones((2, 3), np.float32), np.ones((3, 4), np.float32), np.ones((3,), np.float32)], {}, "C of shape"),
    ("Add", [np.ones((2, 3), np.float32), np.ones((4,), np.float32)], {}, "not broadcastable"),
    ("Concat", [np.ones((2, 3), np.float32), np.ones((3, 3), np.float32)], {"axis": 1}, "differ"),
    ("Squeeze", [np.ones((2, 3), np.float32), np.array([0], np.int64)], {}, "cannot squeeze"),
    ("Transpose", [np.ones((2, 3), np.float32)], {"perm": [0, 0]}, "permutation"),
    ("Resize", [np.ones((1, 1, 2, 2), np.float32), None, np.array([2, 2], np.float32)], {}, "scales"),
    ("Softmax", [np.ones((2, 3), np.float32)], {"axis": 3}, "out of range"),
    ("Cast", [np.ones(3, np.float32)], {"to": 8}, "not supported"),
])
def test_errors(op, inputs, attrs, match):
    with pytest.raises(FallbackError, match=match) as info:
        run_node(op, inputs, attrs, 17)
    assert isinstance(info.value, ValueError)
    if op != "NoSuchOp":
        assert op in str(info.value)


def test_interface():
    ops = supported_ops()
    assert isinstance(ops, frozenset)
    required = {"Conv", "ConvTranspose", "Gemm", "MatMul", "Relu", "Clip", "LeakyRelu", "PRelu", "Sigmoid",
                "HardSigmoid", "HardSwish", "Tanh", "Add", "Sub", "Mul", "Div", "Concat", "Reshape", "Flatten",
                "Transpose", "Squeeze", "Unsqueeze", "MaxPool", "AveragePool", "GlobalAveragePool",
                "GlobalMaxPool", "BatchNormalization", "Softmax", "Resize", "Upsample", "Pad", "ReduceMean",
                "Constant", "Identity", "Shape", "Gather", "Slice", "Cast", "ConstantOfShape", "Dropout", "Exp",
                "Log", "Sqrt", "Neg", "Abs", "Erf", "Pow", "Sum", "Max", "Min", "Mean"}
    assert required <= ops
    assert set(fallback.KERNELS) == set(ops)


# ----------------------------------------------------------------------------- node kernels
NODE_CONV_CASES = [
    # (weight shape, attrs, two input shapes): one per branch of fallback.conv
    ((6, 1, 3, 3), dict(group=6, pads=[1, 1, 1, 1]), [(1, 6, 9, 11), (2, 6, 5, 4)]),  # depthwise, gathered taps
    ((4, 1, 3, 3), dict(group=4, pads=[1, 0, 1, 2]), [(1, 4, 150, 130), (1, 4, 7, 7)]),  # large planes
    ((6, 1, 3), dict(group=3, pads=[1, 1]), [(1, 3, 17), (2, 3, 5)]),  # depthwise rank 3, multiplier 2
    ((8, 4, 1, 1), dict(strides=[2, 2]), [(1, 4, 9, 9), (3, 4, 4, 6)]),  # pointwise
    ((8, 2, 1, 1), dict(group=2), [(1, 4, 5, 5), (2, 4, 3, 1)]),  # grouped pointwise
    ((5, 9, 3, 3), dict(pads=[2, 1, 0, 1], dilations=[2, 1]), [(1, 9, 12, 10), (2, 9, 8, 7)]),  # shifted GEMMs
    ((5, 3, 3, 3), dict(pads=[1, 1, 1, 1], strides=[2, 2]), [(1, 3, 16, 15), (2, 3, 6, 9)]),  # stem
    ((6, 2, 3, 3), dict(group=2, pads=[1, 1, 1, 1]), [(1, 4, 8, 8), (1, 4, 5, 9)]),  # im2col
]


@pytest.mark.parametrize("case", range(len(NODE_CONV_CASES)))
@pytest.mark.parametrize("act", [None, ("HardSwish", {})])
def test_conv_node_kernel_matches_run_node_for_each_input_shape(case: int, act: tuple | None) -> None:
    """A Conv node kernel (weights bound, one plan per input shape) computes what ``run_node`` does, NaN
    and Inf included, for each of two input shapes and again for the first (its cached plan)."""
    wshape, attrs, shapes = NODE_CONV_CASES[case]
    attrs = dict(attrs, _act=act) if act else attrs
    w, b = rand(*wshape, seed=case, lo=-1), rand(wshape[0], seed=50 + case, lo=-1)
    kernel = fallback.node_kernel("Conv", "", [fallback.RUN_TIME, w, b], attrs)
    assert kernel is not fallback.kernel_for("Conv")
    for shape in shapes + shapes[:1]:
        x = rand(*shape, seed=len(shape), lo=-1)
        x.reshape(-1)[[0, x.size // 2]] = [np.nan, np.inf]
        with np.errstate(all="ignore"):
            got = kernel([x, w, b], attrs, 17)[0]
        np.testing.assert_array_equal(got, run_node("Conv", [x, w, b], attrs)[0])


def test_conv_node_kernel_only_for_constant_weights() -> None:
    assert fallback.node_kernel("Conv", "", [fallback.RUN_TIME] * 2, {}) is fallback.kernel_for("Conv")
    w, run_time = rand(4, 3, 3, 3), fallback.RUN_TIME
    assert fallback.node_kernel("Conv", "", [run_time, w, run_time], {}) is fallback.kernel_for("Conv")
    with pytest.raises(FallbackError, match="channels"):
        fallback.node_kernel("Conv", "", [fallback.RUN_TIME, w], {})([rand(1, 2, 5, 5)], {}, 17)


@pytest.mark.parametrize("act", [("HardSwish", {}), ("Sigmoid", {}), ("Clip", {"min": 0.0, "max": 6.0})])
def test_conv_epilogue_in_channel_blocks_matches_one_block(act: tuple, monkeypatch) -> None:
    """The bias + activation epilogue runs per block of channels; one channel per block (and the
    phase-plane paths' strided outputs) give what one block does, NaN and Inf included."""
    import gpubackend.fallback.conv as conv_module

    x = rand(2, 5, 11, 9, seed=3, lo=-2, hi=2)
    x.reshape(-1)[[4, 300, -7]] = [np.nan, np.inf, -np.inf]
    for w, attrs in [(rand(6, 5, 1, 1, seed=4, lo=-1), {}), (rand(6, 5, 3, 3, seed=5, lo=-1), dict(pads=[1] * 4))]:
        args = [x, w, rand(6, seed=6, lo=-1)]
        whole = run_node("Conv", args, dict(attrs, _act=act))[0]
        monkeypatch.setattr(conv_module, "_EPILOGUE_BLOCK_BYTES", 1)
        blocks = run_node("Conv", args, dict(attrs, _act=act))[0]
        monkeypatch.undo()
        np.testing.assert_array_equal(blocks, whole)
        assert np.isnan(whole).any() and whole.flags.c_contiguous


@pytest.mark.parametrize("kernel,stride,dil,pads", [
    ((3, 3), 1, 1, [1, 1, 1, 1]), ((3, 3), 2, 1, [0, 1, 2, 1]), ((5, 5), 2, 1, [2, 2, 2, 2]),
    ((3, 2), 1, 2, [2, 0, 1, 3]), ((3, 3), 3, 1, [0, 0, 0, 0]), ((1, 3), 2, 1, [0, 1, 0, 1]),
])
def test_phase_planes_write_every_element(kernel, stride, dil, pads, monkeypatch) -> None:
    """``phase_planes`` fills only the padding its input copies leave: with buffers that start out as
    NaN (as a reused pool buffer holds old values) every conv branch on phase planes still gives the
    result of zero-initialised ones."""
    from gpubackend.fallback import _spatial

    borders, seen = _spatial._borders, []
    monkeypatch.setattr(_spatial, "_borders", lambda *geometry: seen.append(borders(*geometry)) or seen[-1])
    for (c, m, group), size in itertools.product([(9, 4, 1), (2, 5, 1), (6, 6, 6)], [(13, 11), (130, 126)]):
        x, w = rand(1, c, *size, seed=c), rand(m, c // group, *kernel, seed=m, lo=-1)
        attrs = dict(strides=[stride] * 2, dilations=[dil] * 2, pads=pads, group=group)
        clean = run_node("Conv", [x, w], attrs)[0]
        with monkeypatch.context() as patch:
            patch.setattr(_spatial, "empty", lambda shape, dtype: np.full(shape, np.nan, dtype))
            dirty = run_node("Conv", [x, w], attrs)[0]
        np.testing.assert_array_equal(dirty, clean)
        assert np.isfinite(clean).all()
    # the large padded planes fill only their borders (else this test would check nothing new)
    assert any(seen) or not any(pads)
