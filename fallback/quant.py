"""Quantized operators: QuantizeLinear / DequantizeLinear / DynamicQuantizeLinear, the integer
ops (ConvInteger, MatMulInteger), the QOperator ops (QLinearConv, QLinearMatMul) and the
``com.microsoft`` QLinear* ops onnxruntime's quantizer emits.

Integer results are exact: accumulation happens in float64 on integer-valued arrays (exact below
2**53) and is rounded back. Requantisation follows ONNX: divide by the output scale, round half to
even, add the zero point, saturate to the output type's range. Where ONNX leaves the order of the
float operations open (``acc * x_scale * w_scale / y_scale``), the result may differ from another
runtime's by one quantisation step on exact ties."""

from __future__ import annotations

import numpy as np

from ._registry import MS_DOMAIN, fail, iattr, need, opt, register

_INT_TYPES = (np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32)


def _int_type(op: str, dtype: np.dtype, what: str) -> np.dtype:
    if dtype not in [np.dtype(t) for t in _INT_TYPES]:
        raise fail(op, f"{what} must be an 8/16/32-bit integer tensor, got {dtype}")
    return np.dtype(dtype)


def _per_axis(op: str, v: np.ndarray, rank: int, axis: int, length: int, what: str) -> np.ndarray:
    """A scale or zero point shaped to broadcast against a rank-``rank`` tensor: scalar or 1-D
    of ``length`` along ``axis``."""
    if v.size == 1:
        return v.reshape(())
    if v.ndim != 1 or v.shape[0] != length:
        raise fail(op, f"{what} must be a scalar or 1-D of length {length} (axis {axis}), got shape {v.shape}")
    shape = [1] * rank
    shape[axis] = length
    return v.reshape(shape)


def _blocked(op: str, v: np.ndarray, x_shape: tuple[int, ...], axis: int, block: int, what: str) -> np.ndarray:
    """A blocked scale or zero point (one value per ``block`` elements along ``axis``) expanded to
    ``x_shape``."""
    want = list(x_shape)
    want[axis] = -(-x_shape[axis] // block)
    if list(v.shape) != want:
        raise fail(op, f"{what} must have shape {tuple(want)} for block_size {block}, got {v.shape}")
    return np.repeat(v, block, axis=axis)[tuple(slice(0, d) for d in x_shape)]


def _scale_and_zp(op: str, attrs: dict, x: np.ndarray, scale: np.ndarray, zp: np.ndarray | None,
                  names: tuple[str, str]) -> tuple[np.ndarray, np.ndarray | int]:
    if scale.size == 1 and not iattr(attrs, "block_size", 0):  # per-tensor: the axis plays no part
        return scale.reshape(()), (zp.reshape(()) if zp is not None else 0)
    axis = _axis(op, attrs, x.ndim)
    block = iattr(attrs, "block_size", 0)
    if block < 0:
        raise fail(op, f"block_size must be >= 0, got {block}")
    if block:
        s = _blocked(op, scale, x.shape, axis, block, names[0])
        z = _blocked(op, zp, x.shape, axis, block, names[1]) if zp is not None else 0
        return s, z
    length = x.shape[axis] if x.ndim else 1
    s = _per_axis(op, scale, x.ndim, axis, length, names[0])
    return s, (_per_axis(op, zp, x.ndim, axis, length, names[1]) if zp is not None else 0)


def _axis(op: str, attrs: dict, rank: int) -> int:
    axis = iattr(attrs, "axis", 1)
    if not -rank <= axis < max(rank, 1):
        raise fail(op, f"axis {axis} out of range for rank {rank}")
    return axis % max(rank, 1)


def saturate_round(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Round half to even and saturate to ``dtype``'s range (ONNX's integer quantisation)."""
    info = np.iinfo(dtype)
    with np.errstate(invalid="ignore"):
        r = np.rint(values)
    r = np.nan_to_num(r, nan=0.0, posinf=info.max, neginf=info.min)
    return np.clip(r, info.min, info.max).astype(dtype)


def quantize(x: np.ndarray, scale: np.ndarray, zero_point: np.ndarray | int, dtype: np.dtype) -> np.ndarray:
    """``saturate(round(x / scale) + zero_point)``, the arithmetic in float32 as ONNX specifies."""
    q = np.divide(x.astype(np.float32), np.asarray(scale, np.float32))
    return saturate_round(np.rint(q).astype(np.float64) + np.asarray(zero_point, np.float64), dtype)


@register("QuantizeLinear")
def k_quantize_linear(inputs: list, attrs: dict, opset: int) -> list:
    op = "QuantizeLinear"
    x = need(op, inputs, 0, "x")
    scale = need(op, inputs, 1, "y_scale")
    zp = opt(inputs, 2)
    dtype = _int_type(op, zp.dtype, "y_zero_point") if zp is not None else np.dtype(np.uint8)
    if attrs.get("output_dtype") and zp is None:
        from onnx.helper import tensor_dtype_to_np_dtype

        dtype = _int_type(op, np.dtype(tensor_dtype_to_np_dtype(int(attrs["output_dtype"]))), "output_dtype")
    s, z = _scale_and_zp(op, attrs, x, scale, zp, ("y_scale", "y_zero_point"))
    return [quantize(x, s, z, dtype)]


@register("DequantizeLinear")
def k_dequantize_linear(inputs: list, attrs: dict, opset: int) -> list:
    op = "DequantizeLinear"
    x = need(op, inputs, 0, "x")
    scale = need(op, inputs, 1, "x_scale")
    zp = opt(inputs, 2)
    _int_type(op, x.dtype, "x")
    if zp is not None and zp.dtype != x.dtype:
        raise fail(op, f"x_zero_point type {zp.dtype} differs from x type {x.dtype}")
    s, z = _scale_and_zp(op, attrs, x, scale, zp, ("x_scale", "x_zero_point"))
    z = np.asarray(z).astype(np.int64)
    out_dtype = scale.dtype if scale.dtype.kind == "f" else np.dtype(np.float32)
    return [((x.astype(np.int64) - z).astype(np.float32) * s.astype(np.float32)).astype(out_dtype)]


@register("DynamicQuantizeLinear")
def k_dynamic_quantize_linear(inputs: list, attrs: dict, opset: int) -> list:
    op = "DynamicQuantizeLinear"
    x = need(op, inputs, 0, "x").astype(np.float32)
    lo = np.float32(min(0.0, float(x.min()) if x.size else 0.0))
    hi = np.float32(max(0.0, float(x.max()) if x.size else 0.0))
    scale = np.float32((hi - lo) / np.float32(255.0))
    if scale == 0 or not np.isfinite(scale):
        zp = np.uint8(0)
        y = np.zeros(x.shape, np.uint8)
    else:
        zp = saturate_round(np.asarray(np.float32(0.0) - lo / scale, np.float64), np.dtype(np.uint8))
        y = quantize(x, scale, zp, np.dtype(np.uint8))
    return [y, np.asarray(scale, np.float32), np.asarray(zp, np.uint8)]


def _centered(op: str, v: np.ndarray, zp: np.ndarray | None, what: str) -> np.ndarray:
    """``v - zero_point`` as exact float64 integers (zero point scalar)."""
    _int_type(op, v.dtype, what)
    out = v.astype(np.float64)
    if zp is not None:
        if zp.size != 1:
            raise fail(op, f"{what} zero point must be a scalar here, got shape {zp.shape}")
        out = out - float(zp.reshape(-1)[0])
    return out


def _weights_centered(op: str, w: np.ndarray, zp: np.ndarray | None) -> np.ndarray:
    """Conv weights minus a scalar or per-output-channel zero point, as exact float64."""
    _int_type(op, w.dtype, "w")
    out = w.astype(np.float64)
    if zp is not None:
        if zp.size == 1:
            out = out - float(zp.reshape(-1)[0])
        elif zp.ndim == 1 and zp.shape[0] == w.shape[0]:
            out = out - zp.astype(np.float64).reshape((-1,) + (1,) * (w.ndim - 1))
        else:
            raise fail(op, f"w zero point must be a scalar or one per output channel ({w.shape[0]}), "
                           f"got shape {zp.shape}")
    return out


def _conv_exact(op: str, x: np.ndarray, w: np.ndarray, attrs: dict, opset: int) -> np.ndarray:
    from .conv import k_conv

    conv_attrs = {k: v for k, v in attrs.items() if not k.startswith("_")}
    return k_conv([x, w, None], conv_attrs, opset)[0]


@register("ConvInteger")
def k_conv_integer(inputs: list, attrs: dict, opset: int) -> list:
    op = "ConvInteger"
    x = _centered(op, need(op, inputs, 0, "x"), opt(inputs, 2), "x")
    w = _weights_centered(op, need(op, inputs, 1, "w"), opt(inputs, 3))
    return [np.rint(_conv_exact(op, x, w, attrs, opset)).astype(np.int32)]


def _requantize(acc: np.ndarray, in_scales: np.ndarray, y_scale: np.ndarray, y_zp: np.ndarray) -> np.ndarray:
    """``saturate(round(acc * (in_scales / y_scale)) + y_zp)``: the multiplier in float32 as the
    ONNX reference forms it, applied to the exact integer accumulator."""
    multiplier = in_scales.astype(np.float32) / np.float32(y_scale.reshape(-1)[0])
    return saturate_round(np.rint(acc * multiplier.astype(np.float64)) + float(y_zp.reshape(-1)[0]), y_zp.dtype)


@register("QLinearConv")
def k_qlinear_conv(inputs: list, attrs: dict, opset: int) -> list:
    op = "QLinearConv"
    x = need(op, inputs, 0, "x")
    x_scale, x_zp = need(op, inputs, 1, "x_scale"), need(op, inputs, 2, "x_zero_point")
    w = need(op, inputs, 3, "w")
    w_scale, w_zp = need(op, inputs, 4, "w_scale"), need(op, inputs, 5, "w_zero_point")
    y_scale, y_zp = need(op, inputs, 6, "y_scale"), need(op, inputs, 7, "y_zero_point")
    bias = opt(inputs, 8)
    _int_type(op, y_zp.dtype, "y_zero_point")
    acc = _conv_exact(op, _centered(op, x, x_zp, "x"), _weights_centered(op, w, w_zp), attrs, opset)
    m = w.shape[0]
    if bias is not None:
        if bias.dtype != np.int32 or bias.shape != (m,):
            raise fail(op, f"B must be int32 of shape ({m},), got {bias.dtype} {bias.shape}")
        acc = acc + bias.astype(np.float64).reshape((1, m) + (1,) * (acc.ndim - 2))
    ws = w_scale.astype(np.float32).reshape(-1)
    if ws.size not in (1, m):
        raise fail(op, f"w_scale must be a scalar or one per output channel ({m}), got {w_scale.shape}")
    mult = (np.float32(x_scale.reshape(-1)[0]) * ws).reshape((1, -1) + (1,) * (acc.ndim - 2))
    return [_requantize(np.rint(acc), mult, y_scale, y_zp)]


def _matmul_exact(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.matmul(a, b)


def _row_zp(op: str, a: np.ndarray, zp: np.ndarray | None) -> np.ndarray:
    """A minus its zero point: scalar, or per row (1-D of M) as MatMulInteger allows."""
    _int_type(op, a.dtype, "A")
    out = a.astype(np.float64)
    if zp is None:
        return out
    if zp.size == 1:
        return out - float(zp.reshape(-1)[0])
    if zp.ndim == 1 and a.ndim >= 2 and zp.shape[0] == a.shape[-2]:
        return out - zp.astype(np.float64).reshape(-1, 1)
    raise fail(op, f"a zero point must be a scalar or one per row ({a.shape[-2] if a.ndim >= 2 else 1}), "
                   f"got shape {zp.shape}")


def _col_zp(op: str, b: np.ndarray, zp: np.ndarray | None) -> np.ndarray:
    """B minus its zero point: scalar, or per column (1-D of N)."""
    _int_type(op, b.dtype, "B")
    out = b.astype(np.float64)
    if zp is None:
        return out
    if zp.size == 1:
        return out - float(zp.reshape(-1)[0])
    if zp.ndim >= 1 and zp.shape[-1] == b.shape[-1]:
        shape = zp.shape[:-1] + (1, zp.shape[-1])
        return out - zp.astype(np.float64).reshape((1,) * max(0, b.ndim - len(shape)) + shape)
    raise fail(op, f"b zero point must be a scalar or one per column ({b.shape[-1]}), got shape {zp.shape}")


@register("MatMulInteger")
def k_matmul_integer(inputs: list, attrs: dict, opset: int) -> list:
    op = "MatMulInteger"
    a = _row_zp(op, need(op, inputs, 0, "A"), opt(inputs, 2))
    b = _col_zp(op, need(op, inputs, 1, "B"), opt(inputs, 3))
    return [np.rint(_matmul_exact(a, b)).astype(np.int32)]


@register("QLinearMatMul")
def k_qlinear_matmul(inputs: list, attrs: dict, opset: int) -> list:
    op = "QLinearMatMul"
    a, a_scale, a_zp = need(op, inputs, 0, "a"), need(op, inputs, 1, "a_scale"), need(op, inputs, 2, "a_zero_point")
    b, b_scale, b_zp = need(op, inputs, 3, "b"), need(op, inputs, 4, "b_scale"), need(op, inputs, 5, "b_zero_point")
    y_scale, y_zp = need(op, inputs, 6, "y_scale"), need(op, inputs, 7, "y_zero_point")
    _int_type(op, y_zp.dtype, "y_zero_point")
    acc = _matmul_exact(_row_zp(op, a, a_zp), _col_zp(op, b, b_zp))
    bs = b_scale.astype(np.float32)
    mult = np.float32(a_scale.reshape(-1)[0]) * (bs.reshape(-1) if bs.size > 1 else bs.reshape(()))
    return [_requantize(np.rint(acc), mult, y_scale, y_zp)]


# ---- com.microsoft QLinear* ops (what onnxruntime's quantizer emits in QOperator format) --------

def _dequant(op: str, v: np.ndarray, scale: np.ndarray, zp: np.ndarray | None) -> np.ndarray:
    _int_type(op, v.dtype, "input")
    z = 0.0 if zp is None else float(zp.reshape(-1)[0])
    return ((v.astype(np.float64) - z) * float(np.float32(scale.reshape(-1)[0]))).astype(np.float32)


def _out(op: str, real: np.ndarray, scale: np.ndarray, zp: np.ndarray | None, like: np.ndarray) -> np.ndarray:
    dtype = zp.dtype if zp is not None else like.dtype
    z = 0 if zp is None else zp.reshape(())
    return quantize(real, scale.reshape(()), z, _int_type(op, np.dtype(dtype), "output zero point"))


def _qbinary(op: str, fn):
    def kernel(inputs: list, attrs: dict, opset: int) -> list:
        a = _dequant(op, need(op, inputs, 0, "A"), need(op, inputs, 1, "A_scale"), opt(inputs, 2))
        b = _dequant(op, need(op, inputs, 3, "B"), need(op, inputs, 4, "B_scale"), opt(inputs, 5))
        return [_out(op, fn(a, b), need(op, inputs, 6, "C_scale"), opt(inputs, 7), inputs[0])]

    return kernel


register("QLinearAdd", domain=MS_DOMAIN)(_qbinary("QLinearAdd", np.add))
register("QLinearMul", domain=MS_DOMAIN)(_qbinary("QLinearMul", np.multiply))


def _qunary(op: str, fn):
    def kernel(inputs: list, attrs: dict, opset: int) -> list:
        x = _dequant(op, need(op, inputs, 0, "X"), need(op, inputs, 1, "X_scale"), opt(inputs, 2))
        return [_out(op, fn(x, attrs), need(op, inputs, 3, "Y_scale"), opt(inputs, 4), inputs[0])]

    return kernel


register("QLinearSigmoid", domain=MS_DOMAIN)(_qunary(
    "QLinearSigmoid", lambda x, a: (1.0 / (1.0 + np.exp(-x))).astype(np.float32)))
register("QLinearLeakyRelu", domain=MS_DOMAIN)(_qunary(
    "QLinearLeakyRelu", lambda x, a: np.where(x < 0, x * np.float32(a.get("alpha", 0.01)), x).astype(np.float32)))


@register("QLinearGlobalAveragePool", domain=MS_DOMAIN)
def k_qlinear_global_average_pool(inputs: list, attrs: dict, opset: int) -> list:
    op = "QLinearGlobalAveragePool"
    raw = need(op, inputs, 0, "X")
    x = _dequant(op, raw, need(op, inputs, 1, "x_scale"), opt(inputs, 2))
    if x.ndim < 3:
        raise fail(op, f"input must be (N, C, spatial...) or channels-last, got shape {x.shape}")
    channels_last = iattr(attrs, "channels_last", 0)
    axes = tuple(range(1, x.ndim - 1)) if channels_last else tuple(range(2, x.ndim))
    mean = x.astype(np.float64).mean(axis=axes, keepdims=True).astype(np.float32)
    return [_out(op, mean, need(op, inputs, 3, "y_scale"), opt(inputs, 4), raw)]


@register("QLinearConcat", domain=MS_DOMAIN)
def k_qlinear_concat(inputs: list, attrs: dict, opset: int) -> list:
    op = "QLinearConcat"
    y_scale, y_zp = need(op, inputs, 0, "Y_scale"), opt(inputs, 1)
    rest = inputs[2:]
    if not rest or len(rest) % 3:
        raise fail(op, f"inputs after Y_scale, Y_zero_point must come in (X, scale, zero point) triples, "
                       f"got {len(rest)}")
    parts = [_dequant(op, need(op, rest, i, "X"), need(op, rest, i + 1, "X_scale"), opt(rest, i + 2))
             for i in range(0, len(rest), 3)]
    axis = iattr(attrs, "axis", 0)
    rank = parts[0].ndim
    if not -rank <= axis < rank:
        raise fail(op, f"axis {axis} out of range for rank {rank}")
    return [_out(op, np.concatenate(parts, axis=axis), y_scale, y_zp, np.asarray(rest[0]))]
