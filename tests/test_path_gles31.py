"""The gles31 compute path: every kernel against ``fallback.run_node`` on random, awkward shapes
with poisoned output buffers, both precisions; the whole test models against onnxruntime; the
transfer count; ONNX's node tests; fallback behaviour; the program-binary cache."""

from __future__ import annotations

import numpy as np
import pytest

import fallback
import gpubackend
from gpubackend.errors import UnsupportedOperatorError
from gpubackend.graph import Graph, Node
from gpubackend.paths import compute_kernels as ck

TOL = {"fp32": 1e-4, "fp16": 1e-2}


def _rand(rng: np.random.Generator, shape: tuple[int, ...], scale: float = 1.0) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def check(mod, op: str, runtime: dict[str, np.ndarray], consts: dict[str, np.ndarray], inputs: list[str],
          attrs: dict | None = None, precision: str = "fp32", opset: int = 17, expect_kernel: str | None = None,
          rtol: float | None = None) -> dict:
    """Run one node on gles31 (outputs poisoned with NaN first) and compare with fallback."""
    attrs = attrs or {}
    args = [runtime[i] if i in runtime else consts[i] if i else None for i in inputs]
    if precision == "fp16":  # both sides see the same fp16-rounded runtime data
        args = [a.astype(np.float16).astype(np.float32) if a is not None and i in runtime else a
                for a, i in zip(args, inputs)]
        runtime = {k: v.astype(np.float16).astype(np.float32) for k, v in runtime.items()}
    want = fallback.run_node(op, args, attrs, opset)[0]
    node = Node("n", op, list(inputs), ["y"], attrs)
    shapes = {k: v.shape for k, v in runtime.items()} | {"y": want.shape}
    graph = Graph([node], list(runtime), ["y"], dict(consts), shapes=shapes, opset=opset)
    if expect_kernel is not None:
        assert mod.kernel_name(node, graph) == expect_kernel
    got, stats = mod.run_nodes([node], graph, runtime, precision)
    y = got["y"]
    assert y.shape == want.shape
    assert np.isfinite(y).all() or not np.isfinite(want).all(), "unwritten (poisoned) or non-finite output"
    scale = float(np.abs(want).max()) or 1.0
    err = float(np.abs(y - want).max()) / scale
    assert err <= (rtol or TOL[precision]), f"{op} {attrs} {precision}: norm-relative error {err:.3g}"
    assert stats.uploads == len(runtime) and stats.downloads == 1
    return {"err": err, "stats": stats}


CONV_CASES = [
    # (n, cin, h, w, cout, k, stride, dilation, pads, group, act)
    (1, 3, 17, 13, 8, 3, 2, 1, [1, 1, 1, 1], 1, ("Clip", {"min": 0.0, "max": 6.0})),
    (2, 5, 9, 7, 6, 3, 1, 2, [2, 1, 2, 0], 1, ("Relu", {})),
    (1, 6, 8, 8, 10, 3, 1, 1, [0, 0, 0, 0], 2, ("HardSwish", {})),
    (1, 4, 5, 6, 7, 5, 2, 1, [2, 2, 1, 1], 1, ("LeakyRelu", {"alpha": 0.1})),
    (1, 7, 1, 1, 5, 1, 1, 1, [0, 0, 0, 0], 1, ("Sigmoid", {})),
    (1, 9, 6, 5, 3, 2, 2, 1, [0, 0, 0, 0], 1, ("Tanh", {})),
    (1, 2, 7, 9, 9, 3, 3, 1, [1, 1, 1, 1], 1, ("HardSigmoid", {"alpha": 0.3, "beta": 0.4})),
    (1, 8, 6, 6, 16, 3, 1, 1, [1, 1, 1, 1], 4, None),  # grouped (dense block-diagonal)
]


@pytest.mark.parametrize("case", CONV_CASES)
def test_conv(gles31, case):
    n, cin, h, w, cout, k, s, d, pads, group, act = case
    rng = np.random.default_rng(1)
    attrs = {"kernel_shape": [k, k], "strides": [s, s], "dilations": [d, d], "pads": pads, "group": group}
    if act:
        attrs["_act"] = act
    pointwise = (k, s, group, max(pads)) == (1, 1, 1, 0)
    check(gles31, "Conv", {"x": _rand(rng, (n, cin, h, w))},
          {"w": _rand(rng, (cout, cin // group, k, k), 0.3), "b": _rand(rng, (cout,))}, ["x", "w", "b"], attrs,
          expect_kernel="conv1x1" if pointwise else "conv")


@pytest.mark.parametrize("cin,cout,h,w,n,bias", [(3, 5, 7, 9, 1, True), (16, 24, 11, 11, 2, False),
                                                 (13, 4, 1, 1, 1, True)])
def test_conv1x1(gles31, cin, cout, h, w, n, bias):
    rng = np.random.default_rng(2)
    consts = {"w": _rand(rng, (cout, cin, 1, 1), 0.3), "b": _rand(rng, (cout,))}
    check(gles31, "Conv", {"x": _rand(rng, (n, cin, h, w))}, consts, ["x", "w", "b" if bias else ""],
          {"kernel_shape": [1, 1], "_act": ("Relu", {})}, expect_kernel="conv1x1")


@pytest.mark.parametrize("c,h,w,k,s,d,pads,act", [
    (6, 9, 11, 3, 1, 1, [1, 1, 1, 1], ("Clip", {"min": 0.0, "max": 6.0})),
    (5, 8, 7, 3, 2, 1, [1, 1, 1, 1], ("Relu", {})),
    (12, 10, 10, 5, 2, 1, [2, 2, 2, 2], None),
    (3, 9, 9, 3, 1, 2, [2, 2, 2, 2], ("HardSwish", {})),
    (8, 1, 1, 3, 1, 1, [1, 1, 1, 1], None),
])
def test_depthwise(gles31, c, h, w, k, s, d, pads, act):
    rng = np.random.default_rng(3)
    attrs = {"kernel_shape": [k, k], "strides": [s, s], "dilations": [d, d], "pads": pads, "group": c}
    if act:
        attrs["_act"] = act
    check(gles31, "Conv", {"x": _rand(rng, (2, c, h, w))}, {"w": _rand(rng, (c, 1, k, k)), "b": _rand(rng, (c,))},
          ["x", "w", "b"], attrs, expect_kernel="depthwise")


def test_conv_same_upper(gles31):
    rng = np.random.default_rng(4)
    check(gles31, "Conv", {"x": _rand(rng, (1, 3, 10, 7))}, {"w": _rand(rng, (4, 3, 3, 3))}, ["x", "w"],
          {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_UPPER"})


@pytest.mark.parametrize("cin,cout,h,w,k,s,pads,group,opad", [
    (32, 16, 5, 6, 2, 2, [0, 0, 0, 0], 1, [0, 0]),
    (5, 7, 4, 3, 3, 2, [1, 1, 1, 1], 1, [1, 1]),
    (6, 4, 3, 5, 3, 1, [0, 1, 0, 1], 2, [0, 0]),
])
def test_convtranspose(gles31, cin, cout, h, w, k, s, pads, group, opad):
    rng = np.random.default_rng(5)
    attrs = {"kernel_shape": [k, k], "strides": [s, s], "pads": pads, "group": group, "output_padding": opad,
             "_act": ("Relu", {})}
    check(gles31, "ConvTranspose", {"x": _rand(rng, (1, cin, h, w))},
          {"w": _rand(rng, (cin, cout // group, k, k), 0.3), "b": _rand(rng, (cout,))}, ["x", "w", "b"], attrs,
          expect_kernel="convtranspose")


@pytest.mark.parametrize("m,k,n,trans_b,c_shape", [(1, 320, 100, 1, (100,)), (3, 7, 5, 0, (1, 5)), (5, 9, 6, 1, ())])
def test_gemm(gles31, m, k, n, trans_b, c_shape):
    rng = np.random.default_rng(6)
    b = _rand(rng, (n, k) if trans_b else (k, n))
    check(gles31, "Gemm", {"a": _rand(rng, (m, k))}, {"b": b, "c": _rand(rng, c_shape)}, ["a", "b", "c"],
          {"transB": trans_b, "alpha": 0.7, "beta": 1.3}, expect_kernel="gemm")


def test_matmul_constant_b(gles31):
    rng = np.random.default_rng(7)
    check(gles31, "MatMul", {"a": _rand(rng, (2, 5, 9))}, {"b": _rand(rng, (9, 6))}, ["a", "b"],
          {"_act": ("Tanh", {})}, expect_kernel="matmul")


@pytest.mark.parametrize("sa,sb", [((2, 5, 7), (2, 7, 6)), ((3, 4), (4, 9)), ((2, 3, 5), (5, 3))])
def test_matmul_runtime(gles31, sa, sb):
    rng = np.random.default_rng(8)
    check(gles31, "MatMul", {"a": _rand(rng, sa), "b": _rand(rng, sb)}, {}, ["a", "b"])


BINARY_CASES = [
    ("Add", (2, 6, 5, 7), (2, 6, 5, 7), False),
    ("Mul", (1, 10, 6, 5), (1, 10, 1, 1), False),  # squeeze-excite per-channel scale
    ("Mul", (1, 10, 6, 5), (1, 10, 1, 1), True),
    ("Sub", (1, 5, 4, 3), (5, 1, 1), True),
    ("Div", (2, 3, 4, 5), (), True),
    ("Add", (1, 7, 3, 3), (1, 1, 3, 3), False),  # channel broadcast (splat)
    ("Max", (1, 6, 1, 4), (1, 6, 3, 1), False),
    ("Min", (3, 5), (5,), True),
    ("Pow", (2, 3, 4), (2, 3, 4), False),
]


@pytest.mark.parametrize("op,sa,sb,b_const", BINARY_CASES)
def test_binary(gles31, op, sa, sb, b_const):
    rng = np.random.default_rng(9)
    a = _rand(rng, sa)
    b = _rand(rng, sb)
    if op == "Div":
        b = np.where(np.abs(b) < 0.2, 0.5, b).astype(np.float32)
    if op == "Pow":
        a = np.abs(a) + 0.1
    runtime = {"a": a} if b_const else {"a": a, "b": b}
    check(gles31, op, runtime, {"b": b} if b_const else {}, ["a", "b"], expect_kernel="binary")


@pytest.mark.parametrize("op,attrs", [("Relu", {}), ("LeakyRelu", {"alpha": 0.2}), ("HardSigmoid", {}),
                                      ("HardSwish", {}), ("Sigmoid", {}), ("Tanh", {}), ("Clip", {})])
def test_unary(gles31, op, attrs):
    rng = np.random.default_rng(10)
    consts = {"lo": np.array(-0.5, np.float32), "hi": np.array(0.7, np.float32)}
    inputs = ["x", "lo", "hi"] if op == "Clip" else ["x"]
    check(gles31, op, {"x": _rand(rng, (2, 5, 3, 7), 3.0)}, consts, inputs, attrs, expect_kernel="unary")


@pytest.mark.parametrize("op,attrs,shape", [
    ("MaxPool", {"kernel_shape": [2, 2], "strides": [2, 2]}, (1, 5, 8, 9)),
    ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}, (2, 6, 7, 7)),
    ("AveragePool", {"kernel_shape": [3, 3], "strides": [1, 2], "pads": [1, 1, 1, 1]}, (1, 3, 6, 5)),
    ("AveragePool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "count_include_pad": 1},
     (1, 7, 6, 5)),
    ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}, (1, 4, 8, 8)),
    ("AveragePool", {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1}, (1, 4, 7, 7)),
])
def test_pool(gles31, op, attrs, shape):
    rng = np.random.default_rng(11)
    check(gles31, op, {"x": _rand(rng, shape)}, {}, ["x"], attrs, expect_kernel="pool")


@pytest.mark.parametrize("op,shape", [("GlobalAveragePool", (2, 7, 9, 11)), ("GlobalMaxPool", (1, 5, 3, 1)),
                                      ("GlobalAveragePool", (1, 32, 1, 1))])
def test_globalpool(gles31, op, shape):
    rng = np.random.default_rng(12)
    check(gles31, op, {"x": _rand(rng, shape)}, {}, ["x"], expect_kernel="globalpool")


@pytest.mark.parametrize("shapes,axis", [
    ([(1, 3, 4, 5), (1, 6, 4, 5), (1, 1, 4, 5)], 1),
    ([(2, 8, 3, 3), (2, 4, 3, 3)], 1),
    ([(1, 3, 2, 5), (1, 3, 4, 5)], 2),
    ([(1, 5, 2, 3), (1, 5, 2, 1)], -1),
    ([(2, 3), (4, 3)], 0),
    ([(2, 3), (2, 6)], 1),
])
def test_concat(gles31, shapes, axis):
    rng = np.random.default_rng(13)
    runtime = {f"x{i}": _rand(rng, s) for i, s in enumerate(shapes)}
    check(gles31, "Concat", runtime, {}, list(runtime), {"axis": axis}, expect_kernel="concat")


def test_concat_written_in_place(gles31):
    """Producers write straight into the Concat output (no copy) when nothing else reads them."""
    rng = np.random.default_rng(25)
    x = _rand(rng, (1, 5, 6, 7))
    consts = {"w1": _rand(rng, (8, 5, 3, 3)), "w2": _rand(rng, (3, 5, 1, 1)), "w3": _rand(rng, (4, 5, 1, 1))}
    conv3 = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}
    nodes = [Node("c1", "Conv", ["x", "w1"], ["a"], conv3), Node("c3", "Conv", ["x", "w3"], ["c"], {}),
             Node("c2", "Conv", ["x", "w2"], ["b"], {}), Node("cat", "Concat", ["a", "c", "b"], ["y"], {"axis": 1}),
             Node("r", "Relu", ["c"], ["z"])]  # c has a second reader: it keeps its copy
    env = {"x": x, **consts}
    for n in nodes:
        env[n.outputs[0]] = fallback.run_node(n.op_type, [env[i] for i in n.inputs], n.attrs, 17)[0]
    shapes = {k: v.shape for k, v in env.items() if k not in consts}
    graph = Graph(nodes, ["x"], ["y", "z"], consts, shapes=shapes)
    got, stats = gles31.run_nodes(nodes, graph, {"x": x})
    assert stats.dispatches == 5  # 3 convs, 1 copy (c), 1 relu
    for name in ("y", "z"):
        np.testing.assert_allclose(got[name], env[name], rtol=1e-4, atol=1e-4 * np.abs(env[name]).max())


def test_concat_constant_input(gles31):
    rng = np.random.default_rng(14)
    check(gles31, "Concat", {"x": _rand(rng, (1, 3, 2, 2))}, {"c": _rand(rng, (1, 2, 2, 2))}, ["x", "c"], {"axis": 1})


@pytest.mark.parametrize("mode,coord,nearest,scales,sizes", [
    ("linear", "half_pixel", None, [1, 1, 2, 2], None),
    ("linear", "align_corners", None, None, [1, 5, 7, 4]),
    ("linear", "pytorch_half_pixel", None, [1, 1, 0.6, 1.7], None),
    ("linear", "asymmetric", None, [1, 1, 3, 2], None),
    ("nearest", "asymmetric", "floor", [1, 1, 2, 3], None),
    ("nearest", "half_pixel", "round_prefer_floor", None, [1, 5, 11, 3]),
    ("nearest", "tf_half_pixel_for_nn", "round_prefer_ceil", [1, 1, 1.5, 2.5], None),
    ("nearest", "align_corners", "ceil", None, [1, 5, 4, 9]),
])
def test_resize(gles31, mode, coord, nearest, scales, sizes):
    rng = np.random.default_rng(15)
    attrs = {"mode": mode, "coordinate_transformation_mode": coord}
    if nearest:
        attrs["nearest_mode"] = nearest
    consts = {"s": np.array(scales, np.float32)} if scales else {"z": np.array(sizes, np.int64)}
    inputs = ["x", "", "s"] if scales else ["x", "", "", "z"]
    check(gles31, "Resize", {"x": _rand(rng, (1, 5, 6, 5))}, consts, inputs, attrs, expect_kernel="resize")


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_upsample_opset9(gles31, mode):
    rng = np.random.default_rng(23)
    check(gles31, "Upsample", {"x": _rand(rng, (1, 6, 3, 5))}, {"s": np.array([1, 1, 2, 3], np.float32)}, ["x", "s"],
          {"mode": mode}, opset=9, expect_kernel="resize")


def test_runtime_weights_are_packed_at_upload(gles31):
    """ONNX allows weights as graph inputs: they are packed on the host at upload (one upload each)."""
    rng = np.random.default_rng(24)
    runtime = {"x": _rand(rng, (1, 5, 6, 7)), "w": _rand(rng, (6, 5, 3, 3)), "b": _rand(rng, (6,))}
    out = check(gles31, "Conv", runtime, {}, ["x", "w", "b"], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]})
    assert out["stats"].uploads == 3
    gemm = {"a": _rand(rng, (3, 9)), "bm": _rand(rng, (4, 9)), "c": _rand(rng, (4,))}
    check(gles31, "Gemm", gemm, {}, ["a", "bm", "c"], {"transB": 1, "alpha": 0.5})


@pytest.mark.parametrize("op,shape,axis", [("Softmax", (3, 10), -1), ("Softmax", (1, 7, 3, 2), 1),
                                           ("LogSoftmax", (2, 4, 5), -1)])
def test_softmax(gles31, op, shape, axis):
    rng = np.random.default_rng(16)
    check(gles31, op, {"x": _rand(rng, shape, 3.0)}, {}, ["x"], {"axis": axis}, expect_kernel="softmax")


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
def test_pad(gles31, mode):
    rng = np.random.default_rng(17)
    consts = {"p": np.array([0, 0, 2, 1, 0, 0, 1, 3], np.int64), "v": np.array(1.5, np.float32)}
    check(gles31, "Pad", {"x": _rand(rng, (1, 5, 4, 5))}, consts, ["x", "p", "v"], {"mode": mode},
          expect_kernel="pad")


@pytest.mark.parametrize("op,shape,extra,attrs", [
    ("Flatten", (2, 6, 1, 1), None, {"axis": 1}),  # zero-copy
    ("Flatten", (2, 5, 3, 2), None, {"axis": 1}),  # relayout kernel
    ("Reshape", (1, 6, 4, 2), np.array([1, 12, 4], np.int64), {}),
    ("Transpose", (2, 3, 4, 5), None, {"perm": [0, 2, 3, 1]}),
    ("Transpose", (3, 5), None, {}),
    ("Squeeze", (1, 7, 1, 1), np.array([2, 3], np.int64), {}),
    ("Unsqueeze", (1, 7), np.array([2, 3], np.int64), {}),
])
def test_layout(gles31, op, shape, extra, attrs):
    rng = np.random.default_rng(18)
    consts = {"s": extra} if extra is not None else {}
    check(gles31, op, {"x": _rand(rng, shape)}, consts, ["x", "s"] if extra is not None else ["x"], attrs,
          expect_kernel="layout")


FP16_CASES = [
    ("Conv", {"x": (1, 5, 9, 7)}, {"w": (6, 5, 3, 3), "b": (6,)}, {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1],
                                                                   "_act": ("Relu", {})}),
    ("Conv", {"x": (1, 6, 8, 5)}, {"w": (6, 1, 3, 3)}, {"kernel_shape": [3, 3], "group": 6, "strides": [2, 2]}),
    ("Conv", {"x": (1, 7, 4, 4)}, {"w": (9, 7, 1, 1)}, {"kernel_shape": [1, 1]}),
    ("Gemm", {"x": (2, 21)}, {"w": (21, 10)}, {}),
    ("ConvTranspose", {"x": (1, 6, 3, 4)}, {"w": (6, 5, 2, 2)}, {"kernel_shape": [2, 2], "strides": [2, 2]}),
    ("Mul", {"x": (1, 6, 3, 4), "s": (1, 6, 1, 1)}, {}, {}),
    ("Resize", {"x": (1, 5, 3, 4)}, {"": None, "sc": np.array([1, 1, 2, 2], np.float32)}, {"mode": "linear"}),
    ("Concat", {"x": (1, 3, 2, 2), "z": (1, 6, 2, 2)}, {}, {"axis": 1}),
    ("GlobalAveragePool", {"x": (1, 9, 5, 5)}, {}, {}),
    ("Softmax", {"x": (2, 11)}, {}, {}),
]


@pytest.mark.parametrize("op,runtime,consts,attrs", FP16_CASES)
def test_fp16(gles31, op, runtime, consts, attrs):
    rng = np.random.default_rng(19)
    rt = {k: _rand(rng, s) for k, s in runtime.items()}
    cs = {k: (v if isinstance(v, np.ndarray) else _rand(rng, v, 0.3)) for k, v in consts.items() if k}
    inputs = list(runtime) + [k for k in consts]
    check(gles31, op, rt, cs, inputs, attrs, precision="fp16")


def test_declines_with_reasons(gles31):
    rng = np.random.default_rng(20)
    g = Graph([], ["x"], ["y"], {"w": _rand(rng, (4, 3, 3, 3, 3))}, shapes={"x": (1, 3, 5, 5, 5), "y": (1, 4, 3, 3, 3)})
    node = Node("c3d", "Conv", ["x", "w"], ["y"], {"kernel_shape": [3, 3, 3]})
    path = gles31.create()
    why = path.decline(node, g)
    assert why and "rank" in why
    g2 = Graph([], ["x"], ["y"], {}, shapes={"x": (1, 3, 5, 5), "y": (1, 3, 5, 5)})
    assert "no compute kernel" in path.decline(Node("e", "Einsum", ["x"], ["y"]), g2)
    disabled = gles31.create(disabled_kernels=frozenset({"unary"}))
    assert "disabled" in disabled.decline(Node("r", "Relu", ["x"], ["y"]), g2)
    assert gles31.kernel_name(Node("r", "Relu", ["x"], ["y"]), g2) == "unary"


def _vulkan_variants(everything: bool) -> list:
    if everything:
        return ck.variants()
    picked: dict = {}
    for shader, defines in ck.variants():  # each shader with and without FP16, one activation
        d = dict(defines)
        if d.get("ACT", 5) == 5:
            picked.setdefault((shader, "FP16" in d), (shader, defines))
    return list(picked.values())


@pytest.mark.parametrize("everything", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_shaders_compile_for_vulkan(everything):
    import shutil
    import subprocess

    if shutil.which("glslangValidator") is None:
        pytest.skip("glslangValidator not installed")
    for shader, defines in _vulkan_variants(everything):
        src = ck.glsl_source((shader, defines, (8, 8, 1)), "vulkan")
        r = subprocess.run(["glslangValidator", "--stdin", "-S", "comp", "-V", "--target-env", "vulkan1.1",
                            "-o", "/dev/null"], input=src, capture_output=True, text=True)
        assert r.returncode == 0, f"{shader} {defines}: {r.stdout}"


def test_param_blocks_match_shaders():
    for shader, _ in ck.variants():
        layout = ck.param_layout(shader)
        assert layout and len(layout) <= 32, shader  # push constants: 128 bytes guaranteed


def test_pack_roundtrip_and_layout_rules():
    rng = np.random.default_rng(21)
    for shape in [(2, 5, 3, 4), (3, 7), (2, 3, 9), (6,), ()]:
        x = _rand(rng, shape)
        p = ck.pack(x)
        assert p.shape[1] == 4 and p.shape[0] == ck.vec4_count(shape)
        np.testing.assert_array_equal(ck.unpack(p, shape), x)
    assert ck.same_layout((2, 6, 1, 1), (2, 6))
    assert ck.same_layout((1, 7), (1, 7, 1, 1))
    assert not ck.same_layout((1, 3, 2, 2), (1, 12))
    assert not ck.same_layout((1, 3, 4, 5), (3, 4, 5))


# ---- whole models ------------------------------------------------------------------------------
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_mobilenet_v2_like(gles31, precision):
    import models

    model = models.mobilenet_v2_like(size=96)
    feeds = models.random_inputs(model, 0)
    want = models.onnxruntime_outputs(model, feeds)
    sess = gpubackend.Session(model, path="gles31", precision=precision, fallback=False)
    got = sess.run(feeds)
    assert set(sess.placement.values()) == {"gles31"}
    # no CPU-placed node: exactly one upload per graph input and one download per graph output
    assert (sess.stats.uploads, sess.stats.downloads) == (len(sess.input_names), len(sess.output_names))
    for g, w in zip(got, want):
        models.assert_close(g, w, TOL[precision], f"mobilenet_v2_like {precision}")


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_unet_like(gles31, precision):
    import models

    model = models.unet_like(size=64)
    feeds = models.random_inputs(model, 1)
    want = models.onnxruntime_outputs(model, feeds)
    sess = gpubackend.Session(model, path="gles31", precision=precision, fallback=False)
    got = sess.run(feeds)
    assert set(sess.placement.values()) == {"gles31"}
    assert (sess.stats.uploads, sess.stats.downloads) == (1, 1)
    assert sess.stats.dispatches >= len(sess.placement) // 2
    for g, w in zip(got, want):
        models.assert_close(g, w, TOL[precision], f"unet_like {precision}")


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_full_size_models(gles31, precision):
    import models

    for model in (models.mobilenet_v2_like(224), models.unet_like(256)):
        feeds = models.random_inputs(model, 2)
        want = models.onnxruntime_outputs(model, feeds)
        sess = gpubackend.Session(model, path="gles31", precision=precision, fallback=False)
        for g, w in zip(sess.run(feeds), want):
            models.assert_close(g, w, TOL[precision], f"{model.graph.name} {precision}")


def _model_with(op: str, **attrs):
    from onnx import TensorProto, helper

    node = helper.make_node(op, ["x"], ["y"], **attrs)
    graph = helper.make_graph([helper.make_node("Relu", ["x0"], ["x"]), node, helper.make_node("Relu", ["y"], ["z"])],
                              "g", [helper.make_tensor_value_info("x0", TensorProto.FLOAT, [1, 3, 4, 4])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 3, 4, 4])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_fallback_places_unsupported_on_cpu(gles31):
    model = _model_with("Softmax", axis=1)  # opset 11: over C*H*W at once, which no compute kernel does
    model.opset_import[0].version = 11
    x = np.random.default_rng(22).standard_normal((1, 3, 4, 4)).astype(np.float32)
    sess = gpubackend.Session(model, path="gles31", fallback=True)
    got = sess.run({"x0": x})[0]
    ops = {n.name: n.op_type for n in sess._current.graph.nodes}  # noqa: SLF001
    assert {ops.get(n, n): k for n, k in sess.placement.items() if n in ops} == \
        {"Relu": "gles31", "Softmax": "cpu"}
    e = np.exp(np.maximum(x, 0))
    want = np.maximum(e / e.sum(), 0)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert sess.stats.uploads == 2 and sess.stats.downloads == 2  # two GPU segments around the CPU node
    with pytest.raises(UnsupportedOperatorError):
        gpubackend.Session(model, path="gles31", fallback=False)


def test_program_binary_cache(gles31, tmp_path, monkeypatch):
    monkeypatch.setenv("GPUBACKEND_CACHE_DIR", str(tmp_path))
    dev, _ = gles31.device_and_programs()
    cold = gles31.ProgramCache(dev)
    if cold.dir is None:
        pytest.skip(cold.binary_note)
    src = ck.glsl_source(("compute/unary.comp", (("ACT", 5),), (8, 1, 1)), "gles31") + "\n// cache test\n"
    cold.get(src)
    assert cold.stats["compiled"] == 1 and cold.stats["binary_saved"] == 1
    warm = gles31.ProgramCache(dev)
    warm.get(src)
    assert warm.stats["from_binary"] == 1 and warm.stats["compiled"] == 0
    dev._programs.clear()  # noqa: SLF001 - a new process would not have the moderngl cache either


# ---- ONNX backend node tests ---------------------------------------------------------------------
ONNX_INCLUDE = [r"test_conv_with_strides_.*", r"test_basic_conv_.*", r"test_conv_with_autopad_same",
                r"test_convtranspose(_pad|_pads|_output_shape|_kernel_shape|_1d)?", r"test_convtranspose_dilations",
                r"test_gemm_.*", r"test_matmul_.*", r"test_(add|sub|mul|div)(_bcast)?", r"test_relu",
                r"test_sigmoid(_example)?", r"test_tanh(_example)?", r"test_leakyrelu.*", r"test_hardsigmoid.*",
                r"test_hardswish.*", r"test_clip.*", r"test_maxpool_2d_.*", r"test_averagepool_2d_.*",
                r"test_globalaveragepool.*", r"test_globalmaxpool.*", r"test_concat_.*", r"test_softmax_.*",
                r"test_logsoftmax_.*", r"test_resize_(up|down)sample_.*", r"test_flatten_.*", r"test_reshape_.*",
                r"test_transpose_.*", r"test_squeeze.*", r"test_unsqueeze.*", r"test_edge_pad", r"test_reflect_pad",
                r"test_constant_pad"]


def _onnx_cases() -> list[str]:
    try:
        from onnx_nodes import node_cases
    except Exception:  # noqa: BLE001
        return []
    return node_cases(ONNX_INCLUDE)


_ACCEPTED: list[str] = []


@pytest.mark.parametrize("name", _onnx_cases())
def test_onnx_node(gles31, name):
    from onnx_nodes import check_node_case_on_path

    if check_node_case_on_path(name, "gles31"):  # the case's own tolerances
        _ACCEPTED.append(name)


def test_onnx_node_coverage(gles31):
    """Guards against the path silently declining what it used to run (run after the cases)."""
    from onnx_nodes import check_node_case_on_path

    accepted = _ACCEPTED or [n for n in _onnx_cases() if check_node_case_on_path(n, "gles31")]
    assert len(accepted) >= 110, f"only {len(accepted)} ONNX node cases run fully on gles31"
