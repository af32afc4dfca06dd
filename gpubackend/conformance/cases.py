"""The case matrix: single-node (and a few Conv+activation) ONNX models over a fixed, seeded set of
shapes and values chosen to break drivers, plus ONNX's own backend node tests.

A :class:`Case` is cheap to list; its model, inputs and expected outputs are built on demand, per
precision (for ``fp16`` the inputs and weights are rounded through half precision first, so the
reference sees the very values the path stores). Seeds derive from the case name, so a case builds
the same data whatever else was selected. Expected outputs come from ``fallback.run_node`` run
node by node over the unoptimised model (for ONNX node tests: the outputs shipped with the test).
"""

from __future__ import annotations

import itertools
import re
import warnings
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from gpubackend import fallback

from ..model import decode_attribute

OPSET = 17
VALUE_CLASSES = ("normal", "large", "tiny", "mixed", "nonfinite")


@dataclass
class CaseData:
    """A built case: the model and one or more (feeds, expected outputs) runs."""

    model: onnx.ModelProto
    runs: list[tuple[dict[str, np.ndarray], list[np.ndarray]]]
    tolerance: tuple[float, float] | None = None  # (rtol, atol) floor: an ONNX node test's own tolerance
    atol_mult: float = 1.0  # long reductions: atol grows by sqrt(K / 4096) for a reduction over K > 4096


@dataclass(frozen=True)
class Case:
    """One conformance case. ``kernel`` is the kernel family it targets (the path's own kernel
    name is asked at run time); ``tags`` hold ``quick``, ``nonfinite``, ``limit`` (sizes near the
    driver's limits), ``fused``, ``onnx``, ``model`` (a whole zoo model, ``--full`` only: run through a
    Session with fallback, so the nodes the path declines run on the CPU)."""

    name: str
    kernel: str
    op: str
    tags: frozenset[str]
    builder: Callable[[str], CaseData] = field(repr=False, compare=False)

    @property
    def quick(self) -> bool:
        return "quick" in self.tags

    def build(self, precision: str) -> CaseData:
        return self.builder(precision)


# ---- values --------------------------------------------------------------------------------

def _seed(name: str) -> int:
    return zlib.crc32(name.encode())


def _values(rng: np.random.Generator, shape: tuple[int, ...], cls: str, precision: str) -> np.ndarray:
    """Data of one value class. Magnitudes for fp16 stay inside its range (65504)."""
    half = precision == "fp16"
    u = rng.uniform(-1.0, 1.0, shape)
    if cls == "large":
        x = u * (1e2 if half else 1e4)
    elif cls == "tiny":
        x = u * (1e-3 if half else 1e-20)
    elif cls == "mixed":
        lo, hi = (-2, 2) if half else (-3, 3)
        x = np.sign(u + 1e-9) * 10.0 ** rng.uniform(lo, hi, shape)
    else:  # normal and nonfinite (specials are added afterwards)
        x = u
    return x.astype(np.float32)


def _add_specials(rng: np.random.Generator, x: np.ndarray, specials: tuple[float, ...]) -> np.ndarray:
    """Sprinkle NaN / +Inf / -Inf over about 1 in 8 elements (at least one of each)."""
    x = x.copy()
    flat = x.reshape(-1)
    n = max(len(specials), flat.size // 8)
    idx = rng.choice(flat.size, size=min(n, flat.size), replace=False)
    for i, j in enumerate(idx):
        flat[j] = specials[i % len(specials)]
    return x


def _round(x: np.ndarray, precision: str) -> np.ndarray:
    if precision == "fp16" and x.dtype == np.float32:
        with np.errstate(over="ignore"):
            return x.astype(np.float16).astype(np.float32)
    return x


# ---- building models -----------------------------------------------------------------------

# An input spec: (name, role, shape or literal array). Roles: "data" (a feed of the case's value
# class), "feed" (a normal-valued feed), "weight" (an initializer), "bias", "pos" (a feed away from
# zero, for divisors), "const" (a literal initializer given as an array).
Spec = tuple[str, str, Any]


def reference(nodes: list[onnx.NodeProto], env: dict[str, np.ndarray], opset: int = OPSET) -> dict[str, np.ndarray]:
    """Run ``nodes`` in order with ``fallback.run_node``; returns every tensor computed."""
    env = dict(env)
    for node in nodes:
        attrs = {a.name: decode_attribute(a) for a in node.attribute}
        attrs["_num_outputs"] = len(node.output)
        args = [env[i] if i else None for i in node.input]
        outs = fallback.run_node(node.op_type, args, attrs, opset)
        for name, value in zip(node.output, outs):
            if name:
                env[name] = np.asarray(value)
    return env


def _tensor_type(arr: np.ndarray) -> int:
    return helper.np_dtype_to_tensor_dtype(arr.dtype)


def make_case_data(nodes: list[onnx.NodeProto], feeds: dict[str, np.ndarray], consts: dict[str, np.ndarray],
                   outputs: list[str], name: str) -> CaseData:
    """An ONNX model of ``nodes`` with ``consts`` as initializers, and its reference outputs."""
    env = reference(nodes, {**feeds, **consts})
    expected = [env[o] for o in outputs]
    graph = helper.make_graph(
        nodes, re.sub(r"[^A-Za-z0-9_]", "_", name),
        [helper.make_tensor_value_info(k, _tensor_type(v), list(v.shape)) for k, v in feeds.items()],
        [helper.make_tensor_value_info(o, _tensor_type(e), list(e.shape)) for o, e in zip(outputs, expected)],
        [numpy_helper.from_array(v, k) for k, v in consts.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="gpubackend-conformance")
    model.ir_version = min(model.ir_version, 8)
    return CaseData(model, [(feeds, expected)])


def _node_builder(name: str, op: str, specs: list[Spec], attrs: dict[str, Any], cls: str,
                  act: tuple[str, dict[str, Any], list[Spec]] | None, n_outputs: int,
                  reduce: int = 0) -> Callable[[str], CaseData]:
    def build(precision: str) -> CaseData:
        rng = np.random.default_rng(_seed(name))
        feeds: dict[str, np.ndarray] = {}
        consts: dict[str, np.ndarray] = {}
        first_data = True
        for in_name, role, shape in specs:
            if role == "-":  # an absent optional input
                continue
            if role == "const":
                arr = np.asarray(shape)
                consts[in_name] = _round(arr, precision) if arr.dtype == np.float32 else arr
                continue
            shape = tuple(shape)
            if role == "data":
                x = _values(rng, shape, cls, precision)
                if cls == "nonfinite" and first_data:
                    specials = attrs_specials.get(op, (np.nan, np.inf, -np.inf))
                    x = _add_specials(rng, x, specials)
                first_data = False
            elif role == "pos":
                x = (rng.uniform(0.5, 2.0, shape) * np.where(rng.random(shape) < 0.5, -1, 1)).astype(np.float32)
            elif role == "weight":
                x = rng.uniform(-1.0, 1.0, shape).astype(np.float32)
            elif role == "bias":
                x = rng.uniform(-0.5, 0.5, shape).astype(np.float32)
            else:  # "feed"
                x = rng.uniform(-1.0, 1.0, shape).astype(np.float32)
            x = _round(x, precision)
            (consts if role in ("weight", "bias") else feeds)[in_name] = x
        outs = [f"y{i}" if n_outputs > 1 else "y" for i in range(n_outputs)]
        main_out = outs
        nodes = []
        if act is not None:
            main_out = ["t"]
        nodes.append(helper.make_node(op, [s[0] if s[0] != "-" else "" for s in specs], main_out, name="n0", **attrs))
        if act is not None:
            act_op, act_attrs, act_specs = act
            for in_name, _, arr in act_specs:
                consts[in_name] = np.asarray(arr)
            nodes.append(helper.make_node(act_op, ["t"] + [s[0] for s in act_specs], ["y"], name="n1", **act_attrs))
        data = make_case_data(nodes, feeds, consts, outs, name)
        data.atol_mult = max(1.0, float(np.sqrt(reduce / 4096.0)))
        return data

    return build


# ops whose non-finite cases must avoid NaN (GLSL leaves max/min/clamp of NaN undefined)
attrs_specials: dict[str, tuple[float, ...]] = {
    "Relu": (np.inf, -np.inf),
    "Clip": (np.inf, -np.inf),
    "MaxPool": (np.inf, -np.inf),
}


class _Matrix:
    """Collects cases; names must be unique."""

    def __init__(self) -> None:
        self.cases: dict[str, Case] = {}

    def add(self, name: str, kernel: str, op: str, specs: list[Spec], attrs: dict[str, Any] | None = None, *,
            quick: bool = False, cls: str = "normal", act: tuple[str, dict[str, Any], list[Spec]] | None = None,
            tags: tuple[str, ...] = (), n_outputs: int = 1, reduce: int = 0) -> None:
        full = f"{kernel}/{'limit_' if 'limit' in tags else ''}{name}" + ("" if cls == "normal" else f"/{cls}")
        if full in self.cases:
            return
        t = set(tags)
        if quick:
            t.add("quick")
        if cls == "nonfinite":
            t.add("nonfinite")
        if act is not None:
            t.add("fused")
        self.cases[full] = Case(full, kernel, op, frozenset(t),
                                _node_builder(full, op, specs, attrs or {}, cls, act, n_outputs, reduce))

    def add_graph(self, name: str, kernel: str, op: str, builder: Callable[[str], CaseData], *,
                  quick: bool = False, tags: tuple[str, ...] = ()) -> None:
        """A case of several nodes (one segment) built by ``builder(precision)``."""
        full = f"{kernel}/{name}"
        if full not in self.cases:
            t = set(tags) | ({"quick"} if quick else set())
            self.cases[full] = Case(full, kernel, op, frozenset(t), builder)


# ---- the matrix ----------------------------------------------------------------------------

def _out_size(size: int, k: int, s: int, d: int, pads: int) -> int:
    return (size + pads - (d * (k - 1) + 1)) // s + 1


def _pads_attr(kind: str, kh: int, kw: int) -> tuple[dict[str, Any], tuple[int, int], str]:
    """(attributes, (total pad h, total pad w), label) for a padding kind."""
    if kind == "p0":
        return {}, (0, 0), "p0"
    if kind == "p1":
        return {"pads": [1, 1, 1, 1]}, (2, 2), "p1"
    if kind == "asym":
        return {"pads": [0, 1, kh // 2 + 1, 0]}, (kh // 2 + 1, 1), "p0110"
    return {"auto_pad": "SAME_UPPER"}, (kh - 1, kw - 1), "same"


_CONV_SHAPES = [(1, 3, 8, 7, 7), (2, 5, 13, 9, 6), (1, 8, 5, 11, 11), (1, 13, 16, 6, 9), (2, 16, 3, 5, 5),
                (1, 1, 4, 1, 1), (1, 4, 7, 12, 10)]
_GROUP_SHAPES = [(1, 6, 10, 8, 8), (2, 4, 6, 7, 9), (1, 10, 14, 6, 5), (1, 2, 2, 1, 1)]


def _conv(m: _Matrix, kernel: str, b: int, cin: int, cout: int, h: int, w: int, k: tuple[int, int],
          s: int, d: int, pad: str, g: int, *, quick: bool = False, cls: str = "normal", bias: bool = True,
          act: tuple[str, dict[str, Any], list[Spec]] | None = None, label: str = "") -> None:
    kh, kw = k
    attrs, (ph, pw), plabel = _pads_attr(pad, kh, kw)
    # keep the output at least 1x1
    if pad != "same":
        while _out_size(h, kh, s, d, ph) < 1:
            h += 1
        while _out_size(w, kw, s, d, pw) < 1:
            w += 1
    attrs = dict(attrs, kernel_shape=[kh, kw], strides=[s, s], dilations=[d, d], group=g)
    specs: list[Spec] = [("x", "data", (b, cin, h, w)), ("w", "weight", (cout, cin // g, kh, kw))]
    if bias:
        specs.append(("b", "bias", (cout,)))
    name = (f"k{kh}x{kw}_s{s}_d{d}_{plabel}_g{g}{'' if bias else '_nobias'}/b{b}_c{cin}to{cout}_{h}x{w}"
            + (f"/{label}" if label else ""))
    m.add(name, kernel, "Conv", specs, attrs, quick=quick, cls=cls, act=act)


_ACTS: dict[str, tuple[str, dict[str, Any], list[Spec]]] = {
    "relu": ("Relu", {}, []),
    "relu6": ("Clip", {}, [("cmin", "const", np.array(0.0, np.float32)), ("cmax", "const", np.array(6.0, np.float32))]),
    "hardswish": ("HardSwish", {}, []),
    "sigmoid": ("Sigmoid", {}, []),
    "leakyrelu": ("LeakyRelu", {"alpha": 0.1}, []),
    "tanh": ("Tanh", {}, []),
    "hardsigmoid": ("HardSigmoid", {"alpha": 0.2, "beta": 0.5}, []),
}


def _conv_cases(m: _Matrix, full: bool) -> None:
    # general convolution: quick picks (small channel counts: software drivers compile slowly)
    _conv(m, "conv", 1, 3, 8, 7, 7, (3, 3), 1, 1, "p1", 1, quick=True)
    _conv(m, "conv", 2, 5, 6, 9, 6, (3, 3), 2, 1, "p1", 1, quick=True)
    _conv(m, "conv", 1, 8, 5, 11, 11, (3, 3), 1, 2, "p1", 1, quick=True)
    _conv(m, "conv", 1, 3, 5, 9, 8, (5, 5), 2, 1, "asym", 1, quick=True)
    _conv(m, "conv", 1, 6, 10, 8, 8, (3, 3), 1, 1, "p1", 2, quick=True)
    _conv(m, "conv", 1, 1, 4, 1, 1, (3, 3), 1, 1, "p1", 1, quick=True)
    _conv(m, "conv", 2, 4, 7, 12, 10, (3, 3), 2, 1, "same", 1, quick=True, bias=False)
    _conv(m, "conv", 2, 5, 13, 9, 6, (3, 3), 2, 1, "p1", 1)
    _conv(m, "conv", 1, 13, 16, 6, 9, (5, 5), 2, 1, "asym", 1)
    for cls in ("large", "tiny", "mixed"):
        _conv(m, "conv", 1, 5, 6, 9, 6, (3, 3), 1, 1, "p1", 1, quick=cls == "mixed", cls=cls)
        _conv(m, "conv", 1, 5, 13, 9, 6, (3, 3), 1, 1, "p1", 1, cls=cls)
    _conv(m, "conv", 1, 5, 6, 6, 7, (3, 3), 1, 1, "p1", 1, quick=True, cls="nonfinite")
    # Winograd F(2x2, 3x3) where a GPU path has it (enough channels and pixels); its transforms mix
    # a patch's inputs, so the IEEE specials of the direct sum are checked too
    for cls in ("normal", "nonfinite"):
        _conv(m, "conv", 1, 32, 32, 12, 12, (3, 3), 1, 1, "p1", 1, quick=True, cls=cls, label="winograd")
    # conv1x1
    for i, (b, c, o, h, w) in enumerate([(1, 3, 8, 7, 7), (2, 13, 5, 9, 6), (1, 5, 3, 1, 1), (1, 32, 16, 16, 16),
                                         (1, 4, 4, 3, 5)]):
        _conv(m, "conv1x1", b, c, o, h, w, (1, 1), 1, 1, "p0", 1, quick=i < 3)
    _conv(m, "conv1x1", 1, 5, 7, 9, 9, (1, 1), 2, 1, "p0", 1)
    for cls in ("large", "tiny", "mixed"):
        _conv(m, "conv1x1", 1, 13, 5, 6, 7, (1, 1), 1, 1, "p0", 1, cls=cls)
    # depthwise (group == channels), also with a channel multiplier
    for i, (b, c, h, w, k, s, d, pad) in enumerate([
            (1, 8, 9, 9, 3, 1, 1, "p1"), (2, 5, 12, 7, 3, 2, 1, "p1"), (1, 13, 11, 11, 3, 1, 2, "p1"),
            (1, 3, 1, 1, 3, 1, 1, "p1"), (1, 16, 10, 10, 5, 2, 1, "same"), (1, 7, 8, 6, 3, 1, 1, "p0")]):
        _conv(m, "depthwise", b, c, c, h, w, (k, k), s, d, pad, c, quick=i < 3)
    _conv(m, "depthwise", 1, 5, 10, 7, 7, (3, 3), 1, 1, "p1", 5, label="mult2")
    for cls in ("large", "tiny", "mixed"):
        _conv(m, "depthwise", 1, 13, 13, 7, 8, (3, 3), 1, 1, "p1", 13, cls=cls)
    # Conv + activation (fused by the loader into one node)
    _conv(m, "conv", 1, 5, 8, 8, 8, (3, 3), 1, 1, "p1", 1, quick=True, act=_ACTS["relu"], label="relu")
    _conv(m, "depthwise", 1, 13, 13, 7, 7, (3, 3), 2, 1, "p1", 13, quick=True, act=_ACTS["relu6"], label="relu6")
    _conv(m, "conv1x1", 1, 13, 6, 5, 5, (1, 1), 1, 1, "p0", 1, quick=True, act=_ACTS["hardswish"], label="hardswish")
    for a in ("sigmoid", "leakyrelu", "tanh", "hardsigmoid"):
        _conv(m, "conv", 1, 5, 6, 6, 6, (3, 3), 1, 1, "p1", 1, act=_ACTS[a], label=a)
    if full:  # every stride / dilation / padding / group combination
        for n, (k, s, d, pad, g) in enumerate(itertools.product(
                [(3, 3), (5, 5), (2, 3)], [1, 2], [1, 2], ["p0", "p1", "asym", "same"], [1, 2])):
            shapes = _GROUP_SHAPES if g == 2 else _CONV_SHAPES
            b, c, o, h, w = shapes[n % len(shapes)]
            _conv(m, "conv", b, c, o, h, w, k, s, d, pad, g)
        for n, (s, d, pad) in enumerate(itertools.product([1, 2], [1, 2], ["p0", "p1", "asym", "same"])):
            b, c, _, h, w = _CONV_SHAPES[n % len(_CONV_SHAPES)]
            _conv(m, "depthwise", b, c, c, h + 2, w + 2, (3, 3), s, d, pad, c)


def _convtranspose_cases(m: _Matrix, full: bool) -> None:
    configs = [  # (b, cin, cout, h, w, k, s, pads, output_padding, quick)
        (1, 8, 4, 5, 5, 2, 2, [0, 0, 0, 0], [0, 0], True),
        (2, 5, 3, 4, 6, 3, 2, [1, 1, 1, 1], [1, 1], True),
        (1, 3, 5, 6, 6, 3, 1, [1, 1, 1, 1], [0, 0], False),
        (1, 13, 6, 3, 4, 4, 2, [1, 1, 1, 1], [0, 0], False),
        (1, 4, 4, 1, 1, 3, 2, [0, 0, 0, 0], [0, 0], False),
    ]
    for b, ci, co, h, w, k, s, pads, op_, quick in configs:
        attrs = {"kernel_shape": [k, k], "strides": [s, s], "pads": pads, "output_padding": op_}
        specs: list[Spec] = [("x", "data", (b, ci, h, w)), ("w", "weight", (ci, co, k, k)), ("b", "bias", (co,))]
        name = f"k{k}_s{s}_p{''.join(map(str, pads))}_op{''.join(map(str, op_))}/b{b}_c{ci}to{co}_{h}x{w}"
        m.add(name, "convtranspose", "ConvTranspose", specs, attrs, quick=quick)
    m.add("k2_s2_p0000/b1_c6to3_4x4/relu", "convtranspose", "ConvTranspose",
          [("x", "data", (1, 6, 4, 4)), ("w", "weight", (6, 3, 2, 2)), ("b", "bias", (3,))],
          {"kernel_shape": [2, 2], "strides": [2, 2]}, act=_ACTS["relu"])
    m.add("k3_s2_p1111_op11/b1_c5to3_4x4", "convtranspose", "ConvTranspose",
          [("x", "data", (1, 5, 4, 4)), ("w", "weight", (5, 3, 3, 3)), ("b", "bias", (3,))],
          {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "output_padding": [1, 1]}, cls="mixed")
    if full:
        m.add("k3_s2_g2/b1_c4to6_5x5", "convtranspose", "ConvTranspose",
              [("x", "data", (1, 4, 5, 5)), ("w", "weight", (4, 3, 3, 3))],
              {"kernel_shape": [3, 3], "strides": [2, 2], "group": 2})
        m.add("k3_s1_d2/b1_c3to5_6x6", "convtranspose", "ConvTranspose",
              [("x", "data", (1, 3, 6, 6)), ("w", "weight", (3, 5, 3, 3))],
              {"kernel_shape": [3, 3], "dilations": [2, 2]})


def _linalg_cases(m: _Matrix, full: bool) -> None:
    for i, (mm, k, n, tb) in enumerate([(1, 13, 7, 0), (4, 24, 9, 1), (5, 64, 33, 1), (2, 300, 10, 1), (3, 1, 5, 0),
                                        (8, 33, 17, 0)]):
        m.add(f"m{mm}_k{k}_n{n}_tb{tb}", "gemm", "Gemm",
              [("a", "data", (mm, k)), ("w", "weight", (n, k) if tb else (k, n)), ("c", "bias", (n,))],
              {"transB": tb}, quick=i < 2)
    m.add("m4_k9_n6_alpha_beta_cMN", "gemm", "Gemm",
          [("a", "data", (4, 9)), ("w", "weight", (9, 6)), ("c", "bias", (4, 6))], {"alpha": 0.5, "beta": 2.0})
    m.add("m3_k7_n5_transA", "gemm", "Gemm", [("a", "data", (7, 3)), ("w", "weight", (7, 5))], {"transA": 1})
    m.add("m2_k16_n8/relu", "gemm", "Gemm", [("a", "data", (2, 16)), ("w", "weight", (16, 8)), ("c", "bias", (8,))],
          {}, act=_ACTS["relu"])
    for cls in ("large", "tiny", "mixed"):
        m.add("m5_k64_n33_tb1", "gemm", "Gemm",
              [("a", "data", (5, 64)), ("w", "weight", (33, 64)), ("c", "bias", (33,))], {"transB": 1}, cls=cls)
    # MatMul: constant and runtime right-hand sides, batched
    m.add("a2x13_w13x7", "matmul", "MatMul", [("a", "data", (2, 13)), ("w", "weight", (13, 7))], quick=True)
    m.add("a2x5x13_b13x7_runtime", "matmul", "MatMul", [("a", "data", (2, 5, 13)), ("b", "feed", (13, 7))], quick=True)
    m.add("a3x4x6_b3x6x5_runtime", "matmul", "MatMul", [("a", "data", (3, 4, 6)), ("b", "feed", (3, 6, 5))])
    m.add("a1x2x9x16_w16x3", "matmul", "MatMul", [("a", "data", (1, 2, 9, 16)), ("w", "weight", (16, 3))])
    m.add("a7x1_w1x9", "matmul", "MatMul", [("a", "data", (7, 1)), ("w", "weight", (1, 9))])
    for cls in ("large", "mixed"):
        m.add("a4x33_w33x9", "matmul", "MatMul", [("a", "data", (4, 33)), ("w", "weight", (33, 9))], cls=cls)


def _elementwise_cases(m: _Matrix, full: bool) -> None:
    shapes = [((2, 5, 7, 7), (1, 5, 1, 1)), ((1, 13, 6, 6), (1, 13, 6, 6)), ((1, 3, 1, 1), (1, 3, 4, 5)),
              ((2, 6, 5, 3), ()), ((1, 8, 3, 9), (9,))]
    for op in ("Add", "Sub", "Mul", "Div"):
        for i, (a, b) in enumerate(shapes):
            label = f"{'x'.join(map(str, a)) or 'scalar'}_{'x'.join(map(str, b)) or 'scalar'}"
            second: Spec = ("b", "pos" if op == "Div" else "feed", b)
            m.add(f"{op.lower()}/{label}", "binary", op, [("a", "data", a), second],
                  quick=(i == 0) or (op == "Add" and i < 3))
        m.add(f"{op.lower()}/const_1x5x1x1", "binary", op,
              [("a", "data", (2, 5, 4, 4)),
               ("c", "const", np.linspace(0.5, 1.5, 5, dtype=np.float32).reshape(1, 5, 1, 1))])
    for cls in ("large", "tiny", "mixed"):
        m.add("add/2x5x7x7_1x5x1x1", "binary", "Add", [("a", "data", (2, 5, 7, 7)), ("b", "feed", (1, 5, 1, 1))],
              cls=cls)
        m.add("mul/1x13x6x6_1x13x6x6", "binary", "Mul", [("a", "data", (1, 13, 6, 6)), ("b", "feed", (1, 13, 6, 6))],
              cls=cls)
    m.add("add/1x5x4x4_1x5x4x4", "binary", "Add", [("a", "data", (1, 5, 4, 4)), ("b", "feed", (1, 5, 4, 4))],
          cls="nonfinite", quick=True)
    m.add("mul/1x5x4x4_1x5x1x1", "binary", "Mul", [("a", "data", (1, 5, 4, 4)), ("b", "feed", (1, 5, 1, 1))],
          cls="nonfinite")
    unary: list[tuple[str, dict[str, Any], list[Spec]]] = [
        ("Relu", {}, []), ("Sigmoid", {}, []), ("Tanh", {}, []), ("HardSwish", {}, []),
        ("HardSigmoid", {"alpha": 0.2, "beta": 0.5}, []), ("LeakyRelu", {"alpha": 0.1}, []),
        ("Clip", {}, [("lo", "const", np.array(-0.5, np.float32)), ("hi", "const", np.array(0.75, np.float32))]),
        ("Exp", {}, []), ("Abs", {}, []), ("Neg", {}, []), ("Elu", {"alpha": 1.0}, []), ("Softplus", {}, []),
    ]
    quick_unary = {"Relu", "Sigmoid", "Tanh", "HardSwish", "Clip", "LeakyRelu"}
    for i, (op, attrs, extra) in enumerate(unary):
        shape = [(1, 13, 5, 7), (2, 3, 4, 4), (1, 5, 1, 1)][i % 3]
        m.add(f"{op.lower()}/{'x'.join(map(str, shape))}", "unary", op, [("x", "data", shape)] + extra, attrs,
              quick=op in quick_unary)
    for cls in ("large", "tiny", "mixed"):
        m.add("sigmoid/2x5x6x6", "unary", "Sigmoid", [("x", "data", (2, 5, 6, 6))], cls=cls)
        m.add("tanh/2x5x6x6", "unary", "Tanh", [("x", "data", (2, 5, 6, 6))], cls=cls)
        m.add("hardswish/2x5x6x6", "unary", "HardSwish", [("x", "data", (2, 5, 6, 6))], cls=cls)
    m.add("relu/1x5x4x4", "unary", "Relu", [("x", "data", (1, 5, 4, 4))], cls="nonfinite", quick=True)
    m.add("sigmoid/1x5x4x4", "unary", "Sigmoid", [("x", "data", (1, 5, 4, 4))], cls="nonfinite")


def _pool_cases(m: _Matrix, full: bool) -> None:
    configs = [  # op, shape, k, s, pads, extra, quick
        ("MaxPool", (1, 5, 9, 9), 3, 2, [1, 1, 1, 1], {}, True),
        ("AveragePool", (2, 13, 8, 8), 2, 2, [0, 0, 0, 0], {}, True),
        ("AveragePool", (1, 5, 7, 7), 3, 1, [1, 1, 1, 1], {"count_include_pad": 1}, True),
        ("AveragePool", (1, 5, 7, 7), 3, 1, [1, 1, 1, 1], {}, False),
        ("MaxPool", (1, 3, 7, 6), 2, 2, [0, 0, 0, 0], {"ceil_mode": 1}, False),
        ("AveragePool", (1, 3, 7, 6), 3, 2, [0, 0, 0, 0], {"ceil_mode": 1}, False),
        ("MaxPool", (2, 8, 5, 5), 3, 1, [0, 0, 0, 0], {"dilations": [2, 2]}, False),
        ("MaxPool", (1, 4, 1, 1), 1, 1, [0, 0, 0, 0], {}, False),
    ]
    for op, shape, k, s, pads, extra, quick in configs:
        attrs = dict({"kernel_shape": [k, k], "strides": [s, s], "pads": pads}, **extra)
        tag = "".join(f"_{a}{''.join(map(str, v)) if isinstance(v, list) else v}" for a, v in extra.items())
        m.add(f"{op.lower()}/k{k}_s{s}_p{''.join(map(str, pads))}{tag}/{'x'.join(map(str, shape))}", "pool", op,
              [("x", "data", shape)], attrs, quick=quick)
    m.add("averagepool/k3_s2/2x5x9x9", "pool", "AveragePool", [("x", "data", (2, 5, 9, 9))],
          {"kernel_shape": [3, 3], "strides": [2, 2]}, cls="large")
    m.add("maxpool/k3_s1_p1111/1x5x6x6", "pool", "MaxPool", [("x", "data", (1, 5, 6, 6))],
          {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, cls="nonfinite")
    for i, (op, shape) in enumerate([("GlobalAveragePool", (1, 13, 7, 9)), ("GlobalMaxPool", (2, 5, 6, 6)),
                                     ("GlobalAveragePool", (2, 32, 16, 16)), ("GlobalAveragePool", (1, 3, 1, 1)),
                                     ("GlobalMaxPool", (1, 17, 11, 3))]):
        m.add(f"{op.lower()}/{'x'.join(map(str, shape))}", "globalpool", op, [("x", "data", shape)], quick=i < 2)
    for cls in ("large", "mixed"):
        m.add("globalaveragepool/1x13x9x9", "globalpool", "GlobalAveragePool", [("x", "data", (1, 13, 9, 9))], cls=cls)
    m.add("reducemean_hw/1x13x7x9", "globalpool", "ReduceMean", [("x", "data", (1, 13, 7, 9))],
          {"axes": [2, 3], "keepdims": 1})


def _tensor_cases(m: _Matrix, full: bool) -> None:
    f32 = np.float32
    resize = [  # label, shape, scales or sizes, attrs, quick
        ("linear_half_pixel_x2", (1, 5, 6, 7), ("scales", [1, 1, 2, 2]),
         {"mode": "linear", "coordinate_transformation_mode": "half_pixel"}, True),
        ("nearest_asym_floor_x2", (2, 3, 4, 5), ("scales", [1, 1, 2, 2]),
         {"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}, True),
        ("linear_align_corners_to13x5", (1, 13, 7, 9), ("sizes", [1, 13, 13, 5]),
         {"mode": "linear", "coordinate_transformation_mode": "align_corners"}, False),
        ("linear_half_pixel_down", (1, 4, 9, 9), ("sizes", [1, 4, 4, 5]),
         {"mode": "linear", "coordinate_transformation_mode": "half_pixel"}, False),
        ("nearest_round_prefer_floor_x3", (1, 5, 3, 3), ("scales", [1, 1, 3, 3]),
         {"mode": "nearest", "coordinate_transformation_mode": "half_pixel", "nearest_mode": "round_prefer_floor"},
         False),
        ("cubic_x2", (1, 3, 5, 5), ("scales", [1, 1, 2, 2]), {"mode": "cubic"}, False),
    ]
    for label, shape, (kind, vals), attrs, quick in resize:
        if kind == "scales":
            specs: list[Spec] = [("x", "data", shape), ("-", "-", None), ("scales", "const", np.array(vals, f32))]
        else:
            specs = [("x", "data", shape), ("-", "-", None), ("-", "-", None),
                     ("sizes", "const", np.array(vals, np.int64))]
        m.add(f"{label}/{'x'.join(map(str, shape))}", "resize", "Resize", specs, attrs, quick=quick)
    concat_sets = [([(1, 3, 4, 4), (1, 5, 4, 4), (1, 8, 4, 4)], 1), ([(2, 5, 3, 3), (2, 7, 3, 3)], 1),
                   ([(1, 5, 3, 4), (1, 5, 2, 4)], 2), ([(1, 3, 2, 5), (1, 3, 2, 1)], 3),
                   ([(1, 13, 1, 1), (1, 3, 1, 1)], 1)]
    for i, (shapes, axis) in enumerate(concat_sets):
        specs = [(f"x{j}", "data", s) for j, s in enumerate(shapes)]
        label = "_".join("x".join(map(str, s)) for s in shapes)
        m.add(f"axis{axis}/{label}", "concat", "Concat", specs, {"axis": axis}, quick=i < 2)
    m.add("axis1_const/1x5x4x4_1x3x4x4", "concat", "Concat",
          [("x0", "data", (1, 5, 4, 4)), ("c", "const", np.linspace(-1, 1, 48, dtype=f32).reshape(1, 3, 4, 4))],
          {"axis": 1})
    for i, (shape, axis) in enumerate([((2, 13, 5, 5), 1), ((3, 1000), -1), ((1, 5, 7), 2), ((4, 1), -1)]):
        m.add(f"axis{axis}/{'x'.join(map(str, shape))}", "softmax", "Softmax", [("x", "data", shape)], {"axis": axis},
              quick=i < 2)
    for cls in ("large", "mixed"):
        m.add("axis1/2x13x5x5", "softmax", "Softmax", [("x", "data", (2, 13, 5, 5))], {"axis": 1}, cls=cls)
    pads = [("constant_0_0_1_2_0_0_2_1", (1, 5, 4, 6), [0, 0, 1, 2, 0, 0, 2, 1], "constant", True),
            ("reflect_1111", (2, 3, 5, 5), [0, 0, 1, 1, 0, 0, 1, 1], "reflect", True),
            ("edge_0203", (1, 13, 3, 4), [0, 0, 0, 2, 0, 0, 0, 3], "edge", False),
            ("constant_channels", (1, 5, 3, 3), [0, 1, 0, 0, 0, 2, 0, 0], "constant", False)]
    for label, shape, p, mode, quick in pads:
        m.add(f"{label}/{'x'.join(map(str, shape))}", "pad", "Pad",
              [("x", "data", shape), ("pads", "const", np.array(p, np.int64))], {"mode": mode}, quick=quick)
    m.add("transpose_nhwc/2x5x3x4", "layout", "Transpose", [("x", "data", (2, 5, 3, 4))], {"perm": [0, 2, 3, 1]},
          quick=True)
    m.add("transpose_nchw/1x3x4x5", "layout", "Transpose", [("x", "data", (1, 3, 4, 5))], {"perm": [0, 3, 1, 2]})
    m.add("reshape/2x6x4x4_to_2x96", "layout", "Reshape",
          [("x", "data", (2, 6, 4, 4)), ("shape", "const", np.array([2, -1], np.int64))], quick=True)
    m.add("flatten/2x5x3x3", "layout", "Flatten", [("x", "data", (2, 5, 3, 3))], {"axis": 1})


def _large_cases(m: _Matrix, limits: dict[str, Any]) -> None:
    """Sizes near the limits the probe read (``--full`` only)."""
    gl = limits.get("gl") or {}
    vk = limits.get("vulkan") or {}
    tex = int(gl.get("max_texture_size") or vk.get("maxImageDimension2D") or 4096)
    groups = gl.get("max_compute_work_group_count") or [65535]
    wg = int(groups[0] if isinstance(groups, (list, tuple)) else groups)
    ubo = int(gl.get("max_uniform_block_size") or vk.get("maxUniformBufferRange") or 16384)
    t = ("limit",)
    m.add(f"relu_width{tex}/1x5x2x{tex}", "unary", "Relu", [("x", "data", (1, 5, 2, tex))], tags=t)
    m.add(f"relu_width{tex + 1}/1x3x1x{tex + 1}", "unary", "Relu", [("x", "data", (1, 3, 1, tex + 1))], tags=t)
    n = min(wg * 64 + 13, 1 << 24)
    m.add(f"add_{n}/1x{n}", "binary", "Add", [("a", "data", (1, n)), ("b", "feed", (1, n))], tags=t)
    c = 8
    while 9 * c * c * 4 <= ubo:
        c *= 2
    m.add(f"weights_over_ubo_{9 * c * c * 4}B/1x{c}x16x16", "conv", "Conv",
          [("x", "data", (1, c, 16, 16)), ("w", "weight", (c, c, 3, 3)), ("b", "bias", (c,))],
          {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, tags=t)
    m.add("input_256x256/1x3x256x256_s2", "conv", "Conv",
          [("x", "data", (1, 3, 256, 256)), ("w", "weight", (16, 3, 3, 3)), ("b", "bias", (16,))],
          {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}, act=_ACTS["hardswish"], tags=t)
    m.add("c96_128x128/1x96x128x128", "depthwise", "Conv",
          [("x", "data", (1, 96, 128, 128)), ("w", "weight", (96, 1, 3, 3)), ("b", "bias", (96,))],
          {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "group": 96}, tags=t)
    m.add("k4096/m2_n64", "gemm", "Gemm", [("a", "data", (2, 4096)), ("w", "weight", (4096, 64)), ("c", "bias", (64,))],
          tags=t, reduce=4096)
    m.add("256x256x256", "matmul", "MatMul", [("a", "data", (1, 256, 256)), ("w", "weight", (256, 256))], tags=t)
    m.add("axis-1/2x10000", "softmax", "Softmax", [("x", "data", (2, 10000))], {"axis": -1}, tags=t, reduce=10000)
    m.add("globalaveragepool/1x16x512x512", "globalpool", "GlobalAveragePool", [("x", "data", (1, 16, 512, 512))],
          tags=t, reduce=512 * 512)
    m.add("axis1_9_inputs/9x1x3x8x8", "concat", "Concat", [(f"x{j}", "data", (1, 3, 8, 8)) for j in range(9)],
          {"axis": 1}, tags=t)
    m.add("linear_x2/1x8x256x256", "resize", "Resize",
          [("x", "data", (1, 8, 128, 128)), ("-", "-", None), ("scales", "const", np.array([1, 1, 2, 2], np.float32))],
          {"mode": "linear"}, tags=t)


def _chain_builder(name: str, nodes: list[onnx.NodeProto], feeds: dict[str, tuple[int, ...]],
                   consts: dict[str, tuple[int, ...]], outputs: list[str]) -> Callable[[str], CaseData]:
    """A builder for a fixed chain of nodes: normal-valued feeds, uniform constants."""
    def build(precision: str) -> CaseData:
        rng = np.random.default_rng(_seed(name))
        f = {k: _round(_values(rng, s, "normal", precision), precision) for k, s in feeds.items()}
        c = {k: _round(rng.uniform(-1.0, 1.0, s).astype(np.float32), precision) for k, s in consts.items()}
        return make_case_data(nodes, f, c, outputs, name)

    return build


def _shared_program_cases(m: _Matrix) -> None:
    """Two nodes of one kernel and one shape in one segment whose operands are bound differently
    (a constant on one side, then run-time tensors on both). Paths cache programs by source, so
    both nodes share one program: per-node state (sampler units, uniforms, bindings) set on it at
    compile time instead of at each draw gives the first node the second one's bindings (gles3
    computed ``s = Sub(c, a)`` as ``a - c``, the YOLOv8 box decoding)."""
    shape = (1, 5, 6, 7)
    nodes = [helper.make_node("Sub", ["c", "a"], ["s"], name="s"), helper.make_node("Sub", ["b", "s"], ["y"], name="y")]
    m.add_graph("shared_program/sub_const_first_then_tensors/1x5x6x7", "binary", "Sub",
                _chain_builder("binary/shared_program/sub_const_first", nodes, {"a": shape, "b": shape},
                               {"c": shape}, ["s", "y"]), quick=True)
    nodes = [helper.make_node("Sub", ["a", "c"], ["s"], name="s"), helper.make_node("Sub", ["d", "s"], ["y"], name="y")]
    m.add_graph("shared_program/sub_const_second_then_const_first/1x5x6x7", "binary", "Sub",
                _chain_builder("binary/shared_program/sub_const_sides", nodes, {"a": shape},
                               {"c": shape, "d": shape}, ["s", "y"]))
    attrs = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["h"], name="h", **attrs),
             helper.make_node("Conv", ["h", "w2", "b2"], ["y"], name="y", **attrs)]
    m.add_graph("shared_program/two_convs_same_shape/1x6x7x7", "conv", "Conv",
                _chain_builder("conv/shared_program/two_convs", nodes, {"x": (1, 6, 7, 7)},
                               {"w1": (6, 6, 3, 3), "b1": (6,), "w2": (6, 6, 3, 3), "b2": (6,)}, ["h", "y"]),
                quick=True)


# One real model per family (tag "model", --full only): the whole model through a Session on the path,
# nodes the path declines on the CPU, against onnxruntime on the zoo's realistic input (reduced size).
ZOO_FAMILIES = {"ocr_detection": "ppocr_v4_det", "ocr_recognition": "ppocr_v6_rec", "ocr_direction": "ppocr_cls",
                "object_detection": "yolov8n_nudenet", "classification": "mobilenetv3_orientation",
                "face": "mtcnn_onet", "segmentation": "selfie_segmentation"}
# max|got - ref| / max(1, max|ref|) over a whole model, as tests/test_zoo.py holds it
MODEL_TOLERANCE = {"fp32": (0.0, 1e-4), "fp16": (0.0, 2e-2)}


def _zoo_builder(model_name: str) -> Callable[[str], CaseData]:
    def build(precision: str) -> CaseData:
        from ..zoo import BY_NAME, fetch
        from ..zoo.check import reference
        from ..zoo.inputs import make_input

        model = BY_NAME[model_name]
        feeds = make_input(model, small=True)
        return CaseData(onnx.load(str(fetch(model_name))), [(feeds, reference(model, feeds))],
                        tolerance=MODEL_TOLERANCE[precision])

    return build


def _zoo_cases(m: _Matrix) -> None:
    for family, name in ZOO_FAMILIES.items():
        m.add_graph(f"{family}/{name}", "model", name, _zoo_builder(name), tags=("model",))


def matrix(full: bool = False, limits: dict[str, Any] | None = None) -> list[Case]:
    """Every generated case (``full``: also the exhaustive combinations and the large sizes)."""
    m = _Matrix()
    _conv_cases(m, full)
    _convtranspose_cases(m, full)
    _linalg_cases(m, full)
    _elementwise_cases(m, full)
    _pool_cases(m, full)
    _tensor_cases(m, full)
    _shared_program_cases(m)
    from . import quant_cases  # int8 layers under the int8 kernels' names (it builds on this module)

    quant_cases.add(m, full)
    if full:
        _large_cases(m, limits or {})
        _zoo_cases(m)
    return list(m.cases.values())


# ---- ONNX backend node tests ---------------------------------------------------------------

# Op types of the node tests the suite includes (a path runs those it accepts).
NODE_TEST_OPS_QUICK = frozenset({"Conv", "Relu", "Add", "Mul", "Gemm", "MatMul", "Sigmoid", "AveragePool", "MaxPool",
                                 "GlobalAveragePool", "Concat", "Softmax", "HardSwish"})
NODE_TEST_OPS_FULL = NODE_TEST_OPS_QUICK | frozenset({
    "ConvTranspose", "Sub", "Div", "Tanh", "HardSigmoid", "LeakyRelu", "Clip", "Exp", "Abs", "Neg", "Elu",
    "Softplus", "GlobalMaxPool", "Resize", "Pad", "Transpose", "Reshape", "Flatten", "ReduceMean"})


# Node tests left out, with the reason (the project documents these as not implemented anywhere).
NODE_TEST_EXCLUDE = {
    r"test_maxpool_with_argmax_.*": "MaxPool's Indices output is not implemented",
    r"test_(maxpool|averagepool)_3d_.*": "3-D pooling is not implemented",
}


@cache
def _node_tests() -> dict[str, Any]:
    import onnx.backend.test.loader as loader

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {c.name: c for c in loader.load_model_tests(kind="node")}


def node_test_cases(full: bool = False) -> list[Case]:
    """ONNX node tests whose nodes are all of the included op types (expanded variants left out)."""
    ops = NODE_TEST_OPS_FULL if full else NODE_TEST_OPS_QUICK
    out = []
    for name, tc in sorted(_node_tests().items()):
        if name.endswith("_expanded") or "_expanded_" in name or tc.model is None or not tc.data_sets:
            continue
        if any(re.fullmatch(p, name) for p in NODE_TEST_EXCLUDE):
            continue
        node_ops = {n.op_type for n in tc.model.graph.node}
        if not node_ops or not node_ops <= ops or any(n.domain not in ("", "ai.onnx") for n in tc.model.graph.node):
            continue
        op = tc.model.graph.node[0].op_type
        tags = {"onnx", "quick"} if not full or op in NODE_TEST_OPS_QUICK else {"onnx"}
        out.append(Case(f"onnx/{name}", "onnx", op, frozenset(tags), _node_test_builder(name)))
    return out


def _node_test_builder(name: str) -> Callable[[str], CaseData]:
    def build(precision: str) -> CaseData:
        tc = _node_tests()[name]
        inputs = [i.name for i in tc.model.graph.input
                  if i.name not in {t.name for t in tc.model.graph.initializer}]
        consts = {t.name: numpy_helper.to_array(t) for t in tc.model.graph.initializer}
        runs = []
        for ins, outs in tc.data_sets:
            feeds = {k: np.asarray(v) for k, v in zip(inputs, ins)}
            expected = [np.asarray(o) for o in outs]
            rounded = {k: _round(v, precision) for k, v in feeds.items()}
            if any(not np.array_equal(rounded[k], feeds[k], equal_nan=True) for k in feeds):
                # fp16 storage changes these inputs: compare with the reference on the stored values
                env = reference(list(tc.model.graph.node), {**consts, **rounded}, _opset_of(tc.model))
                feeds, expected = rounded, [env[o.name] for o in tc.model.graph.output]
            runs.append((feeds, expected))
        return CaseData(tc.model, runs, (float(tc.rtol), float(tc.atol)))

    return build


def _opset_of(model: onnx.ModelProto) -> int:
    return next((int(o.version) for o in model.opset_import if o.domain in ("", "ai.onnx")), OPSET)


def all_cases(full: bool = False, limits: dict[str, Any] | None = None, node_tests: bool = True) -> list[Case]:
    """The suite's cases: ``full=False`` is the ``--quick`` set."""
    cases = matrix(full, limits)
    if not full:
        cases = [c for c in cases if c.quick]
    if node_tests:
        cases += node_test_cases(full)
    return cases


def select(cases: list[Case], pattern: str | None) -> list[Case]:
    """``-k PATTERN``: a case-insensitive substring, or a glob when it has ``*``, ``?`` or ``[``;
    several patterns separated by commas match any of them."""
    if not pattern:
        return cases
    import fnmatch

    pats = [p.strip().lower() for p in pattern.split(",") if p.strip()]

    def hit(name: str) -> bool:
        n = name.lower()
        return any(fnmatch.fnmatchcase(n, p if p.startswith("*") else "*" + p + "*") if any(ch in p for ch in "*?[")
                   else p in n for p in pats)

    return [c for c in cases if hit(c.name)]


__all__ = ["Case", "CaseData", "all_cases", "make_case_data", "matrix", "node_test_cases",
           "reference", "select", "OPSET", "VALUE_CLASSES"]
