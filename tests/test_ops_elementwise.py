"""Op cases written once, run on every GPU path and precision against the CPU path (``fallback``).

Elementwise: every entry of the elementwise table (gpubackend/ops/elementwise.py) in one graph per
(path, precision), each op with its own input: random values in the op's domain, an awkward
shape (channels not a multiple of 4) and IEEE specials (NaN, +-Inf, +-1e38, +-0, halves), so NaN and
infinities must come back where the CPU gives them. fp16 inputs are rounded through fp16 first so
both sides see the same data; outputs are compared after the same rounding."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import gpubackend
from gpubackend.ops import elementwise as ew

GPU_PATHS = ["gles31", "vulkan", "gles3", "gles2"]
PRECISIONS = ["fp32", "fp16"]
TOL = {"fp32": 1e-4, "fp16": 1e-2}
SHAPE = (1, 6, 5, 3)  # 6 channels: one full vec4 and a half-empty one
SPECIALS = np.array([np.nan, np.inf, -np.inf, 1e38, -1e38, 0.0, -0.0, 0.5, -0.5, 2.5, -2.5, 1.0], np.float32)
# Non-default parameters, so a parameter that does not reach the kernel fails the comparison.
UNARY_ATTRS = {"Clip": {}, "LeakyRelu": {"alpha": 0.3}, "HardSigmoid": {"alpha": 0.3, "beta": 0.4},
               "Elu": {"alpha": 0.7}, "Celu": {"alpha": 0.8}, "Selu": {"alpha": 1.5, "gamma": 1.2},
               "ThresholdedRelu": {"alpha": 0.4},
               "GeluTanh": {"approximate": "tanh"}}
CLIP_BOUNDS = (-0.6, 0.8)


# GLSL's sin / cos / tan reduce their argument in fp32: only moderate arguments are exact enough
PERIODIC_LIMIT = {"Sin": 1e4, "Cos": 1e4, "Tan": 1e4}


def _input(rng: np.random.Generator, op: ew.Op, shape: tuple[int, ...] = SHAPE) -> np.ndarray:
    lo, hi = (max(op.domain[0], -4.0), min(op.domain[1], 4.0))
    x = rng.uniform(lo, hi, size=shape).astype(np.float32)
    flat = x.reshape(-1)
    idx = rng.choice(flat.size, size=len(SPECIALS), replace=False)
    limit = PERIODIC_LIMIT.get(op.name)
    with np.errstate(invalid="ignore"):  # Inf % 7 is NaN, as wanted
        flat[idx] = SPECIALS if limit is None else np.where(np.abs(SPECIALS) > limit, SPECIALS * 0.25, SPECIALS) % 7
    return x


def _model(nodes: list, inputs: dict[str, np.ndarray], outputs: list[str], inits: list | None = None):
    vis = [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(v.shape)) for n, v in inputs.items()]
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs]
    graph = helper.make_graph(nodes, "elementwise", vis, outs, inits or [])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])


def _round(x: np.ndarray, precision: str) -> np.ndarray:
    with np.errstate(over="ignore"):
        return x.astype(np.float16).astype(np.float32) if precision == "fp16" else x


def _as_stored(x: np.ndarray, path: str, precision: str) -> np.ndarray:
    """The input as the path stores it: fp16 rounding; gles2's RGBA8 encoding also keeps no
    negative zero and no denormals (docs/gles2_encoding.md), so both sides get +0 there."""
    x = _round(x, precision)
    if path == "gles2":
        tiny = np.finfo(np.float16 if precision == "fp16" else np.float32).tiny
        x = np.where(np.abs(x) < tiny, np.float32(0.0), x).astype(np.float32)
    return x


def _compare(name: str, got: np.ndarray, want: np.ndarray, precision: str, x: list[np.ndarray]) -> list[str]:
    """The problems of one output: nonfinite values must match exactly (NaN where NaN, Inf of the
    same sign), finite ones within the precision's tolerance of max(1, max|ref|)."""
    want = _round(want.astype(np.float32), precision)
    if got.shape != want.shape:
        return [f"{name}: shape {got.shape} != {want.shape}"]
    bad = []
    fin = np.isfinite(want)
    wrong_special = ~fin & ~((np.isnan(want) & np.isnan(got)) | (want == got))
    if wrong_special.any():
        i = np.flatnonzero(wrong_special.reshape(-1))[:4]
        ins = [a.reshape(-1)[i] if a.size == want.size else a for a in x]
        bad.append(f"{name}: nonfinite mismatch at {i}: got {got.reshape(-1)[i]}, want {want.reshape(-1)[i]}, "
                   f"inputs {ins}")
    if fin.any():
        scale = max(1.0, float(np.abs(want[fin]).max()))
        with np.errstate(invalid="ignore"):
            diff = np.where(fin, np.abs(got - want), 0.0)
        diff[fin & ~np.isfinite(got)] = np.inf
        err = float(diff.max()) / scale
        if not err <= TOL[precision]:
            i = int(np.argmax(diff))
            ins = [a.reshape(-1)[i] if a.size == want.size else a for a in x]
            bad.append(f"{name}: error {err:.3g} at {i}: got {got.reshape(-1)[i]}, want {want.reshape(-1)[i]}, "
                       f"inputs {ins}")
    return bad


def _run_both(model, feeds: dict[str, np.ndarray], path: str, precision: str) -> tuple[list, list, object]:
    feeds = {k: _as_stored(v, path, precision) for k, v in feeds.items()}
    with np.errstate(all="ignore"):
        want = gpubackend.Session(model, path="cpu").run(feeds)
    sess = gpubackend.Session(model, path=path, precision=precision, fallback=False)
    got = sess.run(feeds)
    return got, want, sess


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("path", GPU_PATHS)
def test_unary_table_ops(path: str, precision: str) -> None:
    rng = np.random.default_rng(1)
    nodes, feeds, outs, inits = [], {}, [], []
    for op in ew.UNARY:
        onnx_op = "Gelu" if op.name == "GeluTanh" else op.name
        x = f"x_{op.name}"
        feeds[x] = _input(rng, op)
        ins = [x]
        if op.name == "Clip":
            inits += [numpy_helper.from_array(np.float32(CLIP_BOUNDS[0]), "clip_lo"),
                      numpy_helper.from_array(np.float32(CLIP_BOUNDS[1]), "clip_hi")]
            ins += ["clip_lo", "clip_hi"]
        nodes.append(helper.make_node(onnx_op, ins, [f"y_{op.name}"], name=op.name, **UNARY_ATTRS.get(op.name, {})))
        outs.append(f"y_{op.name}")
    model = _model(nodes, feeds, outs, inits)
    got, want, sess = _run_both(model, feeds, path, precision)
    feeds = {k: _as_stored(v, path, precision) for k, v in feeds.items()}
    assert set(sess.placement.values()) == {path}
    problems = []
    for op, g, w in zip(ew.UNARY, got, want):
        problems += _compare(op.name, g, w, precision, [feeds[f"x_{op.name}"]])
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("path", GPU_PATHS)
def test_binary_table_ops(path: str, precision: str) -> None:
    """Every binary entry with a runtime operand broadcast along H, and Pow by a constant scalar."""
    rng = np.random.default_rng(2)
    nodes, feeds, outs = [], {}, []
    b_shape = (SHAPE[0], SHAPE[1], 1, SHAPE[3])
    for op in ew.BINARY:
        a, b = f"a_{op.name}", f"b_{op.name}"
        feeds[a] = _input(rng, op)
        bv = _input(rng, op, b_shape)
        if op.name == "Pow":  # integers and halves: negative bases with integer exponents are real
            bv = np.where(np.isfinite(bv), np.round(bv * 2) / 2, bv).astype(np.float32)
        feeds[b] = bv
        nodes.append(helper.make_node(op.name, [a, b], [f"y_{op.name}"], name=op.name))
        outs.append(f"y_{op.name}")
    feeds["a_pow2"] = _input(rng, ew.binary_op("Pow"))
    nodes.append(helper.make_node("Pow", ["a_pow2", "two"], ["y_pow2"], name="pow2"))
    outs.append("y_pow2")
    nodes.append(helper.make_node("Sum", ["a_Add", "b_Add"], ["y_sum"], name="sum"))
    outs.append("y_sum")
    model = _model(nodes, feeds, outs, [numpy_helper.from_array(np.float32(2.0), "two")])
    got, want, sess = _run_both(model, feeds, path, precision)
    feeds = {k: _as_stored(v, path, precision) for k, v in feeds.items()}
    assert set(sess.placement.values()) == {path}
    problems = []
    names = [op.name for op in ew.BINARY] + ["pow2", "sum"]
    args = [(f"a_{n}", f"b_{n}") for n in names[:-2]] + [("a_pow2",), ("a_Add", "b_Add")]
    for name, ins, g, w in zip(names, args, got, want):
        problems += _compare(name, g, w, precision, [feeds[i] for i in ins])
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("path", GPU_PATHS)
def test_fused_activations_keep_nan_and_inf(path: str, precision: str) -> None:
    """Conv 1x1 with each fusable activation fused into it (the loader fuses them), on an input
    holding NaN and infinities: a NaN pixel must stay NaN through every activation."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 3, 4, 5)).astype(np.float32)
    x[0, :, 0, 0] = np.nan
    x[0, 0, 1, 1] = np.inf
    x[0, 1, 2, 2] = -np.inf
    w = np.abs(rng.standard_normal((5, 3, 1, 1))).astype(np.float32) + 0.1
    nodes, outs = [], []
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.float32(-0.5), "lo"),
             numpy_helper.from_array(np.float32(0.7), "hi")]
    for act in ew.FUSABLE:
        nodes.append(helper.make_node("Conv", ["x", "w"], [f"c_{act}"], name=f"conv_{act}"))
        ins = [f"c_{act}"] + (["lo", "hi"] if act == "Clip" else [])
        nodes.append(helper.make_node(act, ins, [f"y_{act}"], name=act, **UNARY_ATTRS.get(act, {})))
        outs.append(f"y_{act}")
    model = _model(nodes, {"x": x}, outs, inits)
    got, want, sess = _run_both(model, {"x": x}, path, precision)
    assert set(sess.placement.values()) == {path}
    problems = []
    for act, g, w_ in zip(ew.FUSABLE, got, want):
        assert np.isnan(w_[0, :, 0, 0]).all()
        problems += _compare(act, g, w_, precision, [x])
    assert not problems, "\n".join(problems)


def test_library_is_generated_from_the_table() -> None:
    """shaders/common/elementwise.glsl is the rendering of the table (regenerate with
    ``python -m shaders.build_spirv``)."""
    assert ew.LIBRARY.read_text() == ew.glsl_library()


def test_every_table_op_renders_in_both_dialects() -> None:
    for op in ew.UNARY:
        assert "activate" not in ew.render_vec4(op, {"x": "x"})
        expr, helpers = ew.render_scalar(op, {"x": "x"}, (0.5, 1.5))
        assert "vec4" not in expr + helpers and "mix(" not in expr + helpers
    for op in ew.BINARY:
        ew.render_scalar(op, {"a": "a", "b": "b"})
    with pytest.raises(ew.ExpressionError):
        ew.render_vec4(ew.Op("Bad", "max(x, 0.0)"), {"x": "x"})  # max is undefined for NaN: not in the form
