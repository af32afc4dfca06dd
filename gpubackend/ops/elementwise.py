"""The one table of elementwise math: unary ops (fused activations among them) and binary ops,
each written once as a small expression in a neutral form, and the renderers that turn it into
GLSL for every GPU path.

Neutral form: a Python-syntax expression over the inputs (``x`` for a unary op, ``a`` and ``b``
for a binary one), the op's parameters ``P0`` / ``P1`` (its ONNX attributes, see :class:`Op`),
float literals, ``+ - * /``, GLSL built-ins that GLSL ES 1.00 has for float and vec4 alike
(:data:`BUILTINS`), the helpers of :data:`HELPERS` (written in the same form), and these
primitives:

- ``lt le gt ge eq ne (u, v)``: a per-component comparison (a boolean, only for ``sel``);
- ``sel(c, u, v)``: per component ``c ? u : v`` (a true select: a NaN in the branch not taken
  does not leak, unlike ``mix`` with a float weight);
- ``isnan(u)`` (boolean), ``nan()``, ``inf()``.

NaN and infinities: GLSL leaves ``max``, ``min``, ``clamp``, ``sign``, ``log`` of a negative
number and ``sqrt`` of a negative number undefined, and llvmpipe's ``max(NaN, 0)`` is 0. Entries
therefore clamp with ``sel`` on a comparison that is false for NaN (``sel(lt(x, 0.0), 0.0, x)``
keeps a NaN ``x``), guard the domains of ``log`` and ``sqrt``, and take parameters as real IEEE
values (Clip's absent bound is a real infinity).

Renderers: :func:`render_vec4` (GLSL ES 3.00 fragment, GLSL ES 3.10 and Vulkan 450 compute: every
value a ``vec4``), :func:`render_scalar` (GLSL ES 1.00 of the gles2 path: ``float``; its values
then go through the RGBA8 encoding). The vec4 kernels select their op by an integer code
(``ACT`` for the unary / fused activation, ``BOP`` for the binary op) from the generated snippet
``shaders/common/elementwise.glsl`` (:func:`glsl_library`), so the compute path ships one SPIR-V
binary per op and the runtime parameters ``ACT_P0`` / ``ACT_P1`` stay push constants.

Adding an op: one :class:`Op` entry in :data:`UNARY` or :data:`BINARY` (codes are positions:
append, never reorder), plus its CPU kernel in ``fallback/`` if it lacks one; then
``python -m gpubackend.shaders.build_spirv`` regenerates the snippet and the SPIR-V. See
``docs/adding_an_op.md``.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Op:
    """One elementwise op. ``params``: (ONNX attribute name, default) for ``P0`` then ``P1``
    (Clip's come from inputs 1 and 2 in opset 11+). ``domain``: the input range where the op is
    real-valued, for tests (outside it the result is NaN, as IEEE and NumPy give).
    ``nan_in_nan_out``: a NaN input gives NaN; the renderers then return a NaN input as it is
    before anything else (Mesa's NIR turns ``x < 0 ? 0 : x`` into ``fmax(x, 0)``, which llvmpipe
    evaluates to 0 for NaN, so a select alone does not keep NaN)."""

    name: str
    expr: str
    params: tuple[tuple[str, float], ...] = ()
    domain: tuple[float, float] = (-math.inf, math.inf)
    nan_in_nan_out: bool = True


# name -> (argument names, expression). A helper may call the helpers listed before it.
# Extra arguments act as local variables: sigmoid(v) = sigmoid_e(v, exp(-abs(v))).
HELPERS: dict[str, tuple[tuple[str, ...], str]] = {
    # NaN-propagating max / min (as NumPy's maximum / minimum; ONNX Max, Min, Clip)
    "fmax": (("u", "v"), "sel(isnan(u), u, sel(isnan(v), v, sel(lt(u, v), v, u)))"),
    "fmin": (("u", "v"), "sel(isnan(u), u, sel(isnan(v), v, sel(gt(u, v), v, u)))"),
    "clamp01": (("u",), "sel(lt(u, 0.0), 0.0, sel(gt(u, 1.0), 1.0, u))"),
    "log_": (("u",), "sel(lt(u, 0.0), nan(), sel(eq(u, 0.0), -inf(), log(u)))"),
    "sqrt_": (("u",), "sel(lt(u, 0.0), nan(), sqrt(u))"),
    "sigmoid_e": (("u", "e"), "sel(ge(u, 0.0), 1.0 / (1.0 + e), e / (1.0 + e))"),
    "sigmoid": (("u",), "sigmoid_e(u, exp(-abs(u)))"),
    "tanh_e": (("u", "e"), "sel(lt(u, 0.0), (e - 1.0) / (1.0 + e), (1.0 - e) / (1.0 + e))"),
    "tanh_": (("u",), "tanh_e(u, exp(-2.0 * abs(u)))"),
    # log(1 + e) for 0 <= e <= 1, accurate relative to e: log(1 + e) loses the digits of a small e
    # when 1 + e rounds, so below 1/16 the series to e^5 (truncation < e^6 / 6 < 1e-8 e) stands in
    "log1p_e": (("e",), "sel(lt(e, 0.0625), e * (1.0 - e * (0.5 - e * (0.33333333 - e * (0.25 - e * 0.2)))), "
                        "log(1.0 + e))"),
    "softplus": (("u",), "fmax(u, 0.0) + log1p_e(exp(-abs(u)))"),
    # tanh(softplus(u)) without a cancellation: with e = exp(-|u|), (1+e^u)^2 = n + 1 gives
    # tanh = n / (n + 2) = e(e+2) / (e(e+2) + 2) for u < 0 and (1+2e) / (1+2e+2e^2) for u >= 0
    "tanh_softplus_e": (("u", "e"), "sel(lt(u, 0.0), e * (e + 2.0) / (e * (e + 2.0) + 2.0), "
                                    "(1.0 + 2.0 * e) / (1.0 + 2.0 * e + 2.0 * e * e))"),
    # Abramowitz & Stegun 7.1.26 (|error| <= 1.5e-7); t = 1 / (1 + p |u|)
    "erf_t": (("u", "t"), "sel(lt(u, 0.0), -1.0, 1.0) * (1.0 - t * (0.254829592 + t * (-0.284496736 + t * ("
                          "1.421413741 + t * (-1.453152027 + t * 1.061405429)))) * exp(-u * u))"),
    "erf": (("u",), "erf_t(u, 1.0 / (1.0 + 0.3275911 * abs(u)))"),
    # round half to even: r = floor(u), f = u - r (exact below 2^23, where floats are integers)
    "round_rf": (("r", "f"), "sel(gt(f, 0.5), r + 1.0, sel(lt(f, 0.5), r, r + (r - 2.0 * floor(r * 0.5))))"),
    "round_even": (("u",), "sel(ge(abs(u), 8388608.0), u, round_rf(floor(u), u - floor(u)))"),
    # ONNX / NumPy float power: x^0 = 1 (even for NaN x); a negative base needs an integer exponent
    "pow_m": (("u", "v", "m"), "sel(ge(u, 0.0), m, sel(ne(floor(v), v), nan(), "
                               "sel(eq(v - 2.0 * floor(v * 0.5), 1.0), -m, m)))"),  # odd: -m; +-Inf: even
    # pow(0, v) by hand: llvmpipe's pow(0, negative) is 0, not Inf
    "pow_abs": (("u", "v"), "sel(eq(u, 0.0), sel(lt(v, 0.0), inf(), 0.0), pow(abs(u), v))"),
    "pow_nan": (("u", "v"), "sel(isnan(u), u, sel(isnan(v), v, pow_m(u, v, pow_abs(u, v))))"),
    "pow_": (("u", "v"), "sel(eq(v, 0.0), 1.0, sel(eq(u, 1.0), 1.0, pow_nan(u, v)))"),
}

# Codes are 1-based positions (0 = identity): append new ops, never reorder. The first seven are
# the activations the model loader fuses into Conv / Gemm / MatMul (FUSABLE).
UNARY: tuple[Op, ...] = (
    Op("Relu", "sel(lt(x, 0.0), 0.0, x)"),
    Op("Clip", "fmin(fmax(x, P0), P1)", (("min", -math.inf), ("max", math.inf))),
    Op("LeakyRelu", "sel(lt(x, 0.0), x * P0, x)", (("alpha", 0.01),)),
    Op("HardSigmoid", "clamp01(x * P0 + P1)", (("alpha", 0.2), ("beta", 0.5))),
    Op("HardSwish", "x * clamp01(x * 0.16666667 + 0.5)"),
    Op("Sigmoid", "sigmoid(x)"),
    Op("Tanh", "tanh_(x)"),
    Op("Exp", "exp(x)"),
    Op("Log", "log_(x)", domain=(0.0, math.inf)),
    Op("Sqrt", "sqrt_(x)", domain=(0.0, math.inf)),
    Op("Abs", "abs(x)"),
    Op("Neg", "-x"),
    Op("Reciprocal", "1.0 / x"),
    Op("Floor", "floor(x)"),
    Op("Ceil", "ceil(x)"),
    Op("Round", "round_even(x)"),
    Op("Sign", "sel(gt(x, 0.0), 1.0, sel(lt(x, 0.0), -1.0, x))"),
    Op("Erf", "erf(x)"),
    Op("Elu", "sel(lt(x, 0.0), P0 * (exp(x) - 1.0), x)", (("alpha", 1.0),)),
    Op("Selu", "P1 * sel(le(x, 0.0), P0 * (exp(x) - 1.0), x)",
       (("alpha", 1.67326319217681884765625), ("gamma", 1.05070102214813232421875))),
    Op("Softplus", "softplus(x)"),
    # Past 1e30 the quotient is +-1 in float32; computing it there would divide by ~1e38, which
    # drivers that divide through a flushed reciprocal (NVIDIA) turn into 0.
    Op("Softsign", "sel(gt(abs(x), 1e30), sel(lt(abs(x), inf()), sel(lt(x, 0.0), -1.0, 1.0), nan()), "
                   "x / (1.0 + abs(x)))"),
    Op("Mish", "x * tanh_softplus_e(x, exp(-abs(x)))"),
    Op("Gelu", "0.5 * x * (1.0 + erf(x * 0.70710678118654752))"),
    Op("GeluTanh", "0.5 * x * (1.0 + tanh_(0.79788456080286536 * (x + 0.044715 * x * x * x)))"),
    Op("ThresholdedRelu", "sel(gt(x, P0), x, 0.0)", (("alpha", 1.0),), nan_in_nan_out=False),
    Op("Sin", "sin(x)"),
    Op("Cos", "cos(x)"),
    Op("Tan", "tan(x)", domain=(-1.4, 1.4)),
    Op("Atan", "atan(x)"),
    # llvmpipe's asin / acos are off by 4e-4; atan is exact to fp32 rounding
    Op("Asin", "sel(gt(abs(x), 1.0), nan(), atan(x, sqrt(1.0 - x * x)))", domain=(-1.0, 1.0)),
    Op("Acos", "sel(gt(abs(x), 1.0), nan(), atan(sqrt(1.0 - x * x), x))", domain=(-1.0, 1.0)),
    Op("Sinh", "0.5 * (exp(x) - exp(-x))"),
    Op("Cosh", "0.5 * (exp(x) + exp(-x))"),
    Op("Celu", "fmax(x, 0.0) + fmin(0.0, P0 * (exp(x / P0) - 1.0))", (("alpha", 1.0),)),
)
FUSABLE = ("Relu", "Clip", "LeakyRelu", "HardSigmoid", "HardSwish", "Sigmoid", "Tanh")

BINARY: tuple[Op, ...] = (
    Op("Add", "a + b"),
    Op("Sub", "a - b"),
    Op("Mul", "a * b"),
    Op("Div", "a / b"),
    Op("Max", "fmax(a, b)"),
    Op("Min", "fmin(a, b)"),
    Op("Pow", "pow_(a, b)", nan_in_nan_out=False),  # NumPy: NaN^0 = 1 and 1^NaN = 1
    Op("PRelu", "sel(isnan(a), a, sel(lt(a, 0.0), a * b, a))", nan_in_nan_out=False),  # as ONNX: a >= 0 gives a
    Op("Mean", "(a + b) * 0.5"),
)
# ONNX op types that are another entry (n-ary Sum of two inputs is Add)
ALIASES = {"Sum": "Add"}

BUILTINS = frozenset({"abs", "floor", "ceil", "exp", "log", "sqrt", "pow", "sin", "cos", "tan", "atan", "exp2",
                      "log2", "fract"})
_CMP = {"lt": ("lessThan", "<"), "le": ("lessThanEqual", "<="), "gt": ("greaterThan", ">"),
        "ge": ("greaterThanEqual", ">="), "eq": ("equal", "=="), "ne": ("notEqual", "!=")}
_ARITH = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}

ACT_CODES: dict[str, int] = {op.name: i + 1 for i, op in enumerate(UNARY)}
UNARY_OP_TYPES = tuple(op.name for op in UNARY if op.name != "GeluTanh")  # Gelu(approximate="tanh") is GeluTanh
BINARY_OP_TYPES = (*(op.name for op in BINARY), *ALIASES)
BOP_CODES: dict[str, int] = {op.name: i + 1 for i, op in enumerate(BINARY)}
_UNARY_BY_NAME = {op.name: op for op in UNARY}
_BINARY_BY_NAME = {op.name: op for op in BINARY}


class ExpressionError(ValueError):
    """A table expression uses something outside the neutral form (a bug in the table)."""


# ---- which table entry a node is ----------------------------------------------------------------
def unary_key(op_type: str, attrs: Mapping[str, Any]) -> str | None:
    """The :data:`UNARY` entry for an ONNX op type and its attributes (None: not a table op)."""
    if op_type == "Gelu":
        approx = attrs.get("approximate", "none")
        approx = approx.decode() if isinstance(approx, bytes) else str(approx)
        return {"none": "Gelu", "tanh": "GeluTanh"}.get(approx)
    return op_type if op_type in _UNARY_BY_NAME and op_type != "GeluTanh" else None


def binary_key(op_type: str) -> str | None:
    """The :data:`BINARY` entry for an ONNX op type (None: not a table op)."""
    op_type = ALIASES.get(op_type, op_type)
    return op_type if op_type in _BINARY_BY_NAME else None


def unary_op(key: str) -> Op:
    return _UNARY_BY_NAME[key]


def binary_op(key: str) -> Op:
    return _BINARY_BY_NAME[key]


def unary_params(key: str, values: Mapping[str, Any]) -> tuple[float, float]:
    """(P0, P1) of a unary entry from its attribute values (absent ones take the defaults); the
    values of the fused-activation form ``(op, params)`` are read the same way."""
    out = []
    for name, default in unary_op(key).params:
        v = values.get(name)
        out.append(float(default) if v is None else float(np.asarray(v, np.float64).reshape(-1)[0]))
    out += [0.0] * (2 - len(out))
    return out[0], out[1]


def resolve_unary(node: Any, graph: Any) -> tuple[str, float, float] | str:
    """(table key, P0, P1) of a standalone unary node, or the reason it is not a table op here
    (a Clip bound that arrives at run time, an unknown Gelu mode). The fusable activations take
    their parameters from the op layer's activation record."""
    key = unary_key(node.op_type, node.attrs)
    if key is None:
        return f"{node.op_type} with these attributes is not a unary table op"
    if key in FUSABLE:
        from .records import activation

        act = activation(node, graph)
        if act is None:
            return f"{node.op_type} parameters must be constants"
        return (key, *unary_params(key, act.spec[1]))
    return (key, *unary_params(key, node.attrs))


def activation_params(act: tuple[str, Mapping[str, Any]]) -> tuple[int, float, float]:
    """(ACT code, P0, P1) of a fused activation ``(op, params)`` (the loader's ``_act`` form)."""
    op, params = act
    if op not in ACT_CODES:
        raise KeyError(f"{op} is not an elementwise table op")
    p0, p1 = unary_params(op, params or {})
    return ACT_CODES[op], p0, p1


# ---- rendering ----------------------------------------------------------------------------------
def glsl_float(v: float, vec: bool) -> str:
    """A GLSL literal (or constant expression) for the float32 value of ``v``, IEEE specials
    included: ``vec`` GLSL ES 3.00+ (bit casts), else GLSL ES 1.00 (gles2's encoding helpers)."""
    v = float(np.float32(v))
    if math.isnan(v):
        return "uintBitsToFloat(0x7fc00000u)" if vec else "g2_nan()"
    if math.isinf(v):
        if vec:
            return "uintBitsToFloat(0x7f800000u)" if v > 0 else "uintBitsToFloat(0xff800000u)"
        return "g2_inf()" if v > 0 else "(-g2_inf())"
    text = repr(v)
    return text if ("." in text or "e" in text) else text + ".0"


class _Renderer:
    def __init__(self, vec: bool, names: Mapping[str, str]):
        self.vec = vec
        self.names = dict(names)

    def __call__(self, expr: str) -> str:
        try:
            tree = ast.parse(expr, mode="eval").body
        except SyntaxError as exc:
            raise ExpressionError(f"{expr!r}: {exc}") from exc
        return self.node(tree, expr)

    def node(self, n: ast.AST, expr: str) -> str:
        if isinstance(n, ast.Constant) and isinstance(n.value, (int, float)):
            lit = glsl_float(n.value, self.vec)
            return f"vec4({lit})" if self.vec else lit
        if isinstance(n, ast.Name):
            if n.id not in self.names:
                raise ExpressionError(f"{expr!r}: unknown name {n.id!r}")
            return self.names[n.id]
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub):
            return f"(-{self.node(n.operand, expr)})"
        if isinstance(n, ast.BinOp) and type(n.op) in _ARITH:
            return f"({self.node(n.left, expr)} {_ARITH[type(n.op)]} {self.node(n.right, expr)})"
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and not n.keywords:
            return self.call(n.func.id, [self.node(a, expr) for a in n.args], expr)
        raise ExpressionError(f"{expr!r}: {ast.dump(n)} is outside the neutral form")

    def call(self, fn: str, args: list[str], expr: str) -> str:
        want = {"sel": 3, "isnan": 1, "nan": 0, "inf": 0, **{k: 2 for k in _CMP}}.get(fn)
        if fn in HELPERS:
            want = len(HELPERS[fn][0])
        if want is not None and len(args) != want:
            raise ExpressionError(f"{expr!r}: {fn} takes {want} arguments")
        if fn == "sel":
            c, u, v = args
            return f"mix({v}, {u}, {c})" if self.vec else f"(({c}) ? ({u}) : ({v}))"
        if fn in _CMP:
            u, v = args
            return f"{_CMP[fn][0]}({u}, {v})" if self.vec else f"({u} {_CMP[fn][1]} {v})"
        if fn == "isnan":  # on the bits where there are integers: float compares may be folded
            (u,) = args
            if self.vec:
                return f"greaterThan(floatBitsToUint({u}) & uvec4(0x7fffffffu), uvec4(0x7f800000u))"
            return f"g2_isnan({u})"
        if fn in ("nan", "inf"):
            lit = glsl_float(math.nan if fn == "nan" else math.inf, self.vec)
            return f"vec4({lit})" if self.vec else lit
        if fn in HELPERS:
            return f"ew_{fn}({', '.join(args)})"
        if fn in BUILTINS:
            return f"{fn}({', '.join(args)})"
        raise ExpressionError(f"{expr!r}: unknown function {fn!r}")


def _calls(expr: str) -> set[str]:
    return {n.func.id for n in ast.walk(ast.parse(expr, mode="eval"))
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}


def helpers_used(exprs: list[str]) -> list[str]:
    """The helpers the expressions need, directly or through other helpers, in definition order."""
    need: set[str] = set()
    todo = [c for e in exprs for c in _calls(e) if c in HELPERS]
    while todo:
        h = todo.pop()
        if h not in need:
            need.add(h)
            todo += [c for c in _calls(HELPERS[h][1]) if c in HELPERS]
    return [h for h in HELPERS if h in need]


def _helper_defs(names: list[str], vec: bool) -> list[str]:
    t = "vec4" if vec else "float"
    out = []
    for h in names:
        args, expr = HELPERS[h]
        body = _Renderer(vec, {a: a for a in args})(expr)
        out.append(f"{t} ew_{h}({', '.join(f'{t} {a}' for a in args)}) {{ return {body}; }}")
    return out


def _guarded(op: Op) -> str:
    """The op's expression, returning a NaN input first when NaN in means NaN out."""
    if not op.nan_in_nan_out:
        return op.expr
    names = ("x",) if "x" in _names(op.expr) else ("a", "b")
    expr = op.expr
    for n in reversed(names):
        expr = f"sel(isnan({n}), {n}, {expr})"
    return expr


def _names(expr: str) -> set[str]:
    return {n.id for n in ast.walk(ast.parse(expr, mode="eval")) if isinstance(n, ast.Name)}


def render_vec4(op: Op, inputs: Mapping[str, str], p0: str = "ACT_P0", p1: str = "ACT_P1") -> str:
    """``op`` as a GLSL ES 3.00+ vec4 expression; ``inputs`` maps x (or a, b) to GLSL text and
    ``p0`` / ``p1`` are float expressions (default: the ``ACT_P0`` / ``ACT_P1`` macros).
    Helpers come from :func:`glsl_library` (included by every kernel)."""
    return _Renderer(True, {**inputs, "P0": f"vec4({p0})", "P1": f"vec4({p1})"})(_guarded(op))


def render_scalar(op: Op, inputs: Mapping[str, str], params: tuple[float, float] = (0.0, 0.0)) -> tuple[str, str]:
    """``op`` as a GLSL ES 1.00 float expression with its parameters as literals (or as the
    expressions ``inputs`` gives for "P0" / "P1"), and the helper functions it needs (to place
    before it; ``g2_*`` come from ``shaders/gles2/encoding.glsl``)."""
    names = {"P0": glsl_float(params[0], False), "P1": glsl_float(params[1], False), **inputs}
    expr = _Renderer(False, names)(_guarded(op))
    return expr, "\n".join(_helper_defs(helpers_used([op.expr]), False))


def activation_defines(act: tuple[str, Mapping[str, Any]] | None) -> dict[str, object]:
    """The ``#define``s that select ``activate()`` in the generated snippet, with the parameters
    as literals (the GL fragment paths bake them; the compute path passes them as parameters)."""
    if act is None:
        return {"ACT": 0}
    code, p0, p1 = activation_params(act)
    gate = {"GATE": 1} if (act[1] or {}).get("gate") else {}  # x * activate(x) (ops.silu_into)
    return {"ACT": code, "ACT_P0": glsl_float(p0, True), "ACT_P1": glsl_float(p1, True), **gate}


def unary_defines(key: str, p0: float, p1: float) -> dict[str, object]:
    """:func:`activation_defines` for a resolved unary op (see :func:`resolve_unary`)."""
    return {"ACT": ACT_CODES[key], "ACT_P0": glsl_float(p0, True), "ACT_P1": glsl_float(p1, True)}


LIBRARY = Path(__file__).resolve().parents[2] / "shaders" / "common" / "elementwise.glsl"


def glsl_library() -> str:
    """The text of ``shaders/common/elementwise.glsl``: the helpers, ``vec4 activate(vec4)``
    chosen by ``ACT`` and, when ``BOP`` is defined, ``vec4 binop(vec4, vec4)``."""
    lines = [
        "// GENERATED from gpubackend/ops/elementwise.py (python -m gpubackend.shaders.build_spirv): do not edit.",
        "// activate(x): unary op / fused activation number ACT (0: identity) with parameters ACT_P0,",
        "// ACT_P1; binop(a, b): binary op number BOP. Valid in GLSL ES 3.00, 3.10 and Vulkan 450.",
        "#ifndef ACT", "#define ACT 0", "#endif",
        "#ifndef ACT_P0", "#define ACT_P0 0.0", "#endif",
        "#ifndef ACT_P1", "#define ACT_P1 0.0", "#endif",
    ]
    lines += _helper_defs(list(HELPERS), True)
    lines.append("vec4 activate(vec4 x) {")
    for i, op in enumerate(UNARY):
        lines.append(f"#{'if' if i == 0 else 'elif'} ACT == {ACT_CODES[op.name]}  // {op.name}")
        lines.append(f"    return {render_vec4(op, {'x': 'x'})};")
    lines += ["#else", "    return x;", "#endif", "}"]
    lines += ["#ifdef BOP", "vec4 binop(vec4 a, vec4 b) {"]
    for i, op in enumerate(BINARY):
        lines.append(f"#{'if' if i == 0 else 'elif'} BOP == {BOP_CODES[op.name]}  // {op.name}")
        lines.append(f"    return {render_vec4(op, {'a': 'a', 'b': 'b'})};")
    lines += ["#else", '#error "unknown BOP"', "#endif", "}", "#endif"]
    return "\n".join(lines) + "\n"


def write_library() -> bool:
    """Regenerate the snippet; True when its text changed."""
    text = glsl_library()
    if LIBRARY.is_file() and LIBRARY.read_text() == text:
        return False
    LIBRARY.write_text(text)
    return True


__all__ = ["ACT_CODES", "ALIASES", "BINARY", "BINARY_OP_TYPES", "BOP_CODES", "BUILTINS", "ExpressionError",
           "FUSABLE", "HELPERS", "Op", "UNARY", "UNARY_OP_TYPES", "activation_defines", "activation_params",
           "binary_key", "binary_op", "glsl_float", "glsl_library", "helpers_used", "render_scalar",
           "render_vec4", "resolve_unary", "unary_defines", "unary_key", "unary_op", "unary_params", "write_library"]
