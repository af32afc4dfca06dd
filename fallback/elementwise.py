"""Activations, unary math and broadcasting binary / variadic element-wise ops."""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import reduce
from typing import Any

import numpy as np

from ._registry import FallbackError, fail, need, opt, register
from ._runtime import binary, current_threads, elementwise, empty

try:  # scipy is optional: it is only the fast path for Erf
    from scipy.special import erf as _scipy_erf
except ImportError:  # pragma: no cover - exercised only without scipy
    _scipy_erf = None


# ----------------------------------------------------------------------------- activations
def _relu(x: np.ndarray, out: np.ndarray | None) -> np.ndarray:
    if x.dtype.kind == "f":  # np.clip with two bounds is several times faster than np.maximum(x, 0)
        return np.clip(x, x.dtype.type(0), x.dtype.type(np.inf), out=out)
    return np.maximum(x, x.dtype.type(0), out=out)


def _clip(x: np.ndarray, out: np.ndarray | None, lo: Any, hi: Any) -> np.ndarray:
    if lo is None and hi is None:
        if out is None:
            return x.copy()
        if out is not x:
            out[...] = x
        return out
    t = x.dtype.type
    lo = None if lo is None else t(_scalar(lo))
    hi = None if hi is None else t(_scalar(hi))
    if x.dtype.kind == "f":  # one fast np.clip pass; NaN propagates as in ONNX
        lo = t(-np.inf) if lo is None else lo
        hi = t(np.inf) if hi is None else hi
        if lo > hi:  # ONNX: every value becomes max
            lo = hi
        return np.clip(x, lo, hi, out=out)
    if lo is not None and hi is not None:
        y = np.maximum(x, lo, out=out)
        return np.minimum(y, hi, out=y)
    if lo is not None:
        return np.maximum(x, lo, out=out)
    return np.minimum(x, hi, out=out)


def _leaky_relu(x: np.ndarray, out: np.ndarray | None, alpha: float) -> np.ndarray:
    a = x.dtype.type(alpha)
    if x.dtype.kind == "f" and 0 <= alpha <= 1:  # max(x, a*x): two fast passes, no mask
        return np.maximum(x, x * a, out=out)
    if out is None:
        return np.where(x < 0, x * a, x)
    np.multiply(x, a, out=out, where=x < 0)
    return out


def _hard_sigmoid(x: np.ndarray, out: np.ndarray | None, alpha: float, beta: float) -> np.ndarray:
    t = x.dtype.type
    y = np.multiply(x, t(alpha), out=out)
    y += t(beta)
    np.clip(y, t(0), t(1), out=y)
    return y


def _hard_swish(x: np.ndarray, out: np.ndarray | None) -> np.ndarray:
    t = x.dtype.type
    g = x * t(1.0 / 6.0)
    g += t(0.5)
    np.clip(g, t(0), t(1), out=g)
    return np.multiply(x, g, out=out)


def _sigmoid(x: np.ndarray, out: np.ndarray | None) -> np.ndarray:
    # 1 / (1 + exp(-x)); exp overflows to inf for very negative x, giving the correct limit 0
    y = np.negative(x, out=out)
    np.exp(y, out=y)
    y += y.dtype.type(1)
    np.reciprocal(y, out=y)
    return y


def silu(x: np.ndarray, out: np.ndarray | None) -> np.ndarray:
    """``x * sigmoid(x)`` (a Sigmoid and a Mul of its input) as x / (1 + exp(-x)): four passes and one
    temporary instead of five passes and two arrays; ``out`` may be ``x``. Within an ulp or two of
    the two-op form; NaN and +-inf give what the two ops give (-inf: -inf * 0 = NaN)."""
    t = np.negative(x)
    np.exp(t, out=t)
    t += t.dtype.type(1)
    return np.divide(x, t, out=out)


def then(first: Activation | None, second: Activation) -> Activation:
    """The activation ``second(first(x))`` (``first`` None: just ``second``), for a kernel epilogue."""
    if first is None:
        return second

    def both(x: np.ndarray, out: np.ndarray | None) -> np.ndarray:
        y = first(x, out)
        return second(y, y)

    return both


def _tanh(x: np.ndarray, out: np.ndarray | None) -> np.ndarray:
    return np.tanh(x, out=out)


def _scalar(v: Any) -> Any:
    """A Python / NumPy scalar from a scalar or a one-element array (fused parameters may be either)."""
    if isinstance(v, np.ndarray):
        if v.size != 1:
            raise FallbackError(f"activation parameter must be a scalar, got shape {v.shape}")
        return v.reshape(-1)[0]
    return v


Activation = Callable[[np.ndarray, "np.ndarray | None"], np.ndarray]


def activation_function(act: tuple[str, dict] | None) -> Activation | None:
    """A fused activation ``(op_type, params)`` as ``fn(x, out)`` with its parameters bound (None for
    no activation), so a caller that applies it many times resolves it once. With ``gate`` in the
    params, ``x * act(x)`` (a gated Sigmoid is SiLU: :func:`silu`)."""
    if act is None:
        return None
    name, p = act
    p = p or {}
    if p.get("gate"):
        if name == "Sigmoid":
            return silu
        fn = _activation(name, p)
        return lambda x, out: np.multiply(x, fn(x, None), out=out)
    return _activation(name, p)


def _activation(name: str, p: dict) -> Activation:
    if name == "Relu":
        return _relu
    if name == "Clip":
        lo, hi = p.get("min"), p.get("max")
        return lambda x, out: _clip(x, out, lo, hi)
    if name == "LeakyRelu":
        alpha = float(_scalar(p.get("alpha", 0.01)))
        return lambda x, out: _leaky_relu(x, out, alpha)
    if name == "HardSigmoid":
        alpha, beta = float(_scalar(p.get("alpha", 0.2))), float(_scalar(p.get("beta", 0.5)))
        return lambda x, out: _hard_sigmoid(x, out, alpha, beta)
    if name == "HardSwish":
        return _hard_swish
    if name == "Sigmoid":
        return _sigmoid
    if name == "Tanh":
        return _tanh
    raise FallbackError(f"fused activation {name!r} is not supported")


def apply_activation(x: np.ndarray, act: tuple[str, dict] | Activation | None) -> np.ndarray:
    """Apply a fused activation (``(op_type, params)``, or what :func:`activation_function` made of
    one) to ``x``, in place when ``x`` is writable.

    Returns the result (``x`` itself when done in place).
    """
    fn = activation_function(act) if isinstance(act, tuple) else act
    if fn is None:
        return x
    x = np.asarray(x)
    if x.ndim == 0 or not x.flags.writeable:
        return np.asarray(elementwise(fn, x, None))
    return elementwise(fn, x, x)


def silu_kernel(inputs: list, attrs: dict, opset: int) -> list:
    """A Sigmoid and the Mul of its input by its output, fused: ``[x * sigmoid(x)]`` (:func:`silu`)
    for ``inputs == [x]``."""
    return [elementwise(silu, need("Sigmoid", inputs, 0))]


@register("Relu")
def k_relu(inputs: list, attrs: dict, opset: int) -> list:
    return [elementwise(_relu, need("Relu", inputs, 0))]


@register("Clip")
def k_clip(inputs: list, attrs: dict, opset: int) -> list:
    x = need("Clip", inputs, 0)
    if opset < 11:
        lo = attrs.get("min", None)
        hi = attrs.get("max", None)
    else:
        lo_a, hi_a = opt(inputs, 1), opt(inputs, 2)
        for name, v in (("min", lo_a), ("max", hi_a)):
            if v is not None and v.size != 1:
                raise fail("Clip", f"{name} must be a scalar, got shape {v.shape}")
        lo = None if lo_a is None else lo_a.reshape(())
        hi = None if hi_a is None else hi_a.reshape(())
    if lo is not None:
        lo = np.asarray(lo).astype(x.dtype)
    if hi is not None:
        hi = np.asarray(hi).astype(x.dtype)
    return [elementwise(lambda xp, out: _clip(xp, out, lo, hi), x)]


@register("LeakyRelu")
def k_leaky_relu(inputs: list, attrs: dict, opset: int) -> list:
    alpha = float(attrs.get("alpha", 0.01))
    return [elementwise(lambda x, out: _leaky_relu(x, out, alpha), need("LeakyRelu", inputs, 0))]


@register("HardSigmoid")
def k_hard_sigmoid(inputs: list, attrs: dict, opset: int) -> list:
    x = need("HardSigmoid", inputs, 0)
    alpha, beta = float(attrs.get("alpha", 0.2)), float(attrs.get("beta", 0.5))
    return [elementwise(lambda xp, out: _hard_sigmoid(xp, out, alpha, beta), x)]


@register("HardSwish")
def k_hard_swish(inputs: list, attrs: dict, opset: int) -> list:
    return [elementwise(_hard_swish, need("HardSwish", inputs, 0))]


@register("Sigmoid")
def k_sigmoid(inputs: list, attrs: dict, opset: int) -> list:
    return [elementwise(_sigmoid, need("Sigmoid", inputs, 0))]


@register("Tanh")
def k_tanh(inputs: list, attrs: dict, opset: int) -> list:
    return [elementwise(_tanh, need("Tanh", inputs, 0))]


@register("PRelu")
def k_prelu(inputs: list, attrs: dict, opset: int) -> list:
    x = need("PRelu", inputs, 0)
    slope = need("PRelu", inputs, 1, "slope").astype(x.dtype, copy=False)
    if opset < 7 and slope.ndim == 1 and x.ndim > 2 and slope.shape[0] == x.shape[1]:
        slope = slope.reshape(-1, *([1] * (x.ndim - 2)))  # legacy per-channel slope
    try:
        shape = np.broadcast_shapes(x.shape, slope.shape)
    except ValueError as e:
        raise fail("PRelu", f"slope shape {slope.shape} does not broadcast to input {x.shape}") from e
    if shape != x.shape:
        raise fail("PRelu", f"slope shape {slope.shape} must broadcast to input shape {x.shape}")
    if x.dtype.kind == "f" and np.isfinite(slope).all():  # x+ + slope * x-: fast clip passes, no mask
        # (not for Inf / NaN slopes: 0 * Inf would turn x >= 0 into NaN)
        inf = x.dtype.type(np.inf)
        neg = np.clip(x, -inf, x.dtype.type(0))
        neg *= slope
        neg += np.clip(x, x.dtype.type(0), inf)
        return [neg]
    return [np.where(x < 0, x * slope, x)]


@register("Elu")
def k_elu(inputs: list, attrs: dict, opset: int) -> list:
    x = need("Elu", inputs, 0)
    a = x.dtype.type(attrs.get("alpha", 1.0))
    return [np.where(x < 0, a * np.expm1(np.minimum(x, 0)), x)]


@register("Selu")
def k_selu(inputs: list, attrs: dict, opset: int) -> list:
    x = need("Selu", inputs, 0)
    a = x.dtype.type(attrs.get("alpha", 1.67326319217681884765625))
    g = x.dtype.type(attrs.get("gamma", 1.05070102214813232421875))
    return [np.where(x <= 0, a * np.expm1(np.minimum(x, 0)), x) * g]


@register("Softplus")
def k_softplus(inputs: list, attrs: dict, opset: int) -> list:
    x = need("Softplus", inputs, 0)
    return [np.logaddexp(x, x.dtype.type(0))]


@register("Celu")
def k_celu(inputs: list, attrs: dict, opset: int) -> list:
    x = need("Celu", inputs, 0)
    a = x.dtype.type(attrs.get("alpha", 1.0))
    return [np.maximum(x, 0) + np.minimum(0, a * np.expm1(x / a))]


@register("Softsign")
def k_softsign(inputs: list, attrs: dict, opset: int) -> list:
    x = need("Softsign", inputs, 0)
    return [x / (x.dtype.type(1) + np.abs(x))]


@register("Mish")
def k_mish(inputs: list, attrs: dict, opset: int) -> list:
    x = need("Mish", inputs, 0)
    return [x * np.tanh(np.logaddexp(x, x.dtype.type(0)))]


@register("ThresholdedRelu")
def k_thresholded_relu(inputs: list, attrs: dict, opset: int) -> list:
    x = need("ThresholdedRelu", inputs, 0)
    return [np.where(x > x.dtype.type(attrs.get("alpha", 1.0)), x, x.dtype.type(0))]


@register("Gelu")
def k_gelu(inputs: list, attrs: dict, opset: int) -> list:
    x = need("Gelu", inputs, 0)
    approx = attrs.get("approximate", "none")
    approx = approx.decode() if isinstance(approx, bytes) else str(approx)
    t = x.dtype.type
    if approx == "tanh":
        inner = t(math.sqrt(2.0 / math.pi)) * (x + t(0.044715) * x * x * x)
        return [t(0.5) * x * (t(1) + np.tanh(inner))]
    if approx != "none":
        raise fail("Gelu", f"attribute approximate={approx!r} must be 'none' or 'tanh'")
    return [t(0.5) * x * (t(1) + _erf(x * t(1.0 / math.sqrt(2.0))))]


# ----------------------------------------------------------------------------- unary math
def _unary(op: str, fn) -> None:
    def kernel(inputs: list, attrs: dict, opset: int) -> list:
        return [fn(need(op, inputs, 0))]

    kernel.__name__ = f"k_{op.lower()}"
    register(op)(kernel)


def _erf(x: np.ndarray) -> np.ndarray:
    if _scipy_erf is not None and x.dtype.kind == "f":
        return np.asarray(_scipy_erf(x), dtype=x.dtype)
    return np.frompyfunc(math.erf, 1, 1)(x).astype(x.dtype)


for _op, _fn in {
    "Exp": np.exp,
    "Log": np.log,
    "Sqrt": np.sqrt,
    "Neg": np.negative,
    "Abs": np.abs,
    "Erf": _erf,
    "Reciprocal": np.reciprocal,
    "Floor": np.floor,
    "Ceil": np.ceil,
    "Sign": np.sign,
    "Sin": np.sin,
    "Cos": np.cos,
    "Not": np.logical_not,
    "Round": np.round,  # numpy rounds half to even, as ONNX requires
    "Tan": np.tan,
    "Atan": np.arctan,
    "Asin": np.arcsin,
    "Acos": np.arccos,
    "Sinh": np.sinh,
    "Cosh": np.cosh,
}.items():
    _unary(_op, _fn)


# ----------------------------------------------------------------------------- binary
def _legacy_bcast(a: np.ndarray, b: np.ndarray, attrs: dict, opset: int) -> np.ndarray:
    """Opset < 7 broadcasting: ``b`` aligned with ``a`` starting at attribute ``axis``."""
    if opset < 7 and attrs.get("broadcast", 0) and "axis" in attrs and b.ndim:
        axis = int(attrs["axis"])
        if axis < 0:
            axis += a.ndim
        trail = a.ndim - axis - b.ndim
        if trail > 0:
            b = b.reshape(b.shape + (1,) * trail)
    return b


def _operands(op: str, inputs, attrs, opset) -> tuple[np.ndarray, np.ndarray]:
    a = need(op, inputs, 0)
    b = need(op, inputs, 1)
    b = _legacy_bcast(a, b, attrs, opset)
    if a.dtype != b.dtype and op not in ("Pow",):
        # ONNX requires equal types; never let NumPy promote (e.g. float32 to float64)
        if a.ndim == 0 and b.ndim > 0:
            a = a.astype(b.dtype)
        else:
            b = b.astype(a.dtype)
    # (a plain-Python check: np.broadcast_shapes costs several microseconds per call)
    if a.shape != b.shape and any(p != q and p != 1 and q != 1
                                  for p, q in zip(reversed(a.shape), reversed(b.shape))):
        raise fail(op, f"input shapes {a.shape} and {b.shape} are not broadcastable")
    return a, b


_FLOAT_UFUNCS = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide}
_THREADED_BINARY_MIN = 1 << 17  # elements: below, one thread is as fast


def _binary(op: str, fn) -> None:
    ufunc = _FLOAT_UFUNCS.get(op)

    def kernel(inputs: list, attrs: dict, opset: int) -> list:
        a, b = _operands(op, inputs, attrs, opset)
        if (ufunc is not None and a.dtype.kind == "f" and a.dtype == b.dtype
                and max(a.size, b.size) >= _THREADED_BINARY_MIN and current_threads() > 1):
            return [binary(ufunc, a, b, empty(np.broadcast_shapes(a.shape, b.shape), a.dtype))]
        return [fn(a, b)]

    kernel.__name__ = f"k_{op.lower()}"
    register(op)(kernel)


def _div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind in "iu":
        q = np.floor_divide(a, b)
        if a.dtype.kind == "i":  # ONNX (C) integer division truncates toward zero
            fix = (np.remainder(a, b) != 0) & ((a < 0) != (b < 0))
            q = q + fix.astype(q.dtype)
        return q
    return np.divide(a, b)


def _mod_fmod(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.fmod(a, b)


for _op, _fn in {
    "Add": np.add,
    "Sub": np.subtract,
    "Mul": np.multiply,
    "Div": _div,
    "Equal": np.equal,
    "Less": np.less,
    "LessOrEqual": np.less_equal,
    "Greater": np.greater,
    "GreaterOrEqual": np.greater_equal,
    "And": np.logical_and,
    "Or": np.logical_or,
    "Xor": np.logical_xor,
}.items():
    _binary(_op, _fn)


@register("Mod")
def k_mod(inputs: list, attrs: dict, opset: int) -> list:
    a, b = _operands("Mod", inputs, attrs, opset)
    if int(attrs.get("fmod", 0)):
        return [np.fmod(a, b)]
    return [np.mod(a, b)]


@register("Pow")
def k_pow(inputs: list, attrs: dict, opset: int) -> list:
    x, y = _operands("Pow", inputs, attrs, opset)
    if x.dtype.kind in "iu":
        return [np.power(x.astype(np.float64), y.astype(np.float64)).astype(x.dtype)]
    return [np.power(x, y.astype(x.dtype, copy=False))]


# ----------------------------------------------------------------------------- variadic
def _variadic(op: str, fn, mean: bool = False) -> None:
    def kernel(inputs: list, attrs: dict, opset: int) -> list:
        xs = [np.asarray(v) for v in inputs if v is not None]
        if not xs:
            raise fail(op, "needs at least one input")
        dt = xs[0].dtype
        xs = [v.astype(dt, copy=False) for v in xs]
        try:
            np.broadcast_shapes(*[v.shape for v in xs])
        except ValueError as e:
            raise fail(op, f"input shapes {[v.shape for v in xs]} are not broadcastable") from e
        if len(xs) == 1:
            return [xs[0]]
        out = reduce(fn, xs)
        if mean:
            out = out / dt.type(len(xs)) if dt.kind == "f" else out // len(xs)
        return [out]

    kernel.__name__ = f"k_{op.lower()}"
    register(op)(kernel)


_variadic("Sum", np.add)
_variadic("Max", np.maximum)
_variadic("Min", np.minimum)
_variadic("Mean", np.add, mean=True)


@register("Where")
def k_where(inputs: list, attrs: dict, opset: int) -> list:
    c = need("Where", inputs, 0).astype(bool, copy=False)
    a, b = need("Where", inputs, 1), need("Where", inputs, 2)
    if a.dtype != b.dtype:
        b = b.astype(a.dtype)
    return [np.where(c, a, b)]
