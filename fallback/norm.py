"""BatchNormalization, Softmax / LogSoftmax and the Reduce* family."""

from __future__ import annotations

import math

import numpy as np

from ._registry import as_int_list, fail, iattr, ints_attr, need, norm_axis, opt, register


@register("BatchNormalization")
def k_batchnorm(inputs: list, attrs: dict, opset: int) -> list:
    op = "BatchNormalization"
    x = need(op, inputs, 0, "X")
    scale, bias, mean, var = (need(op, inputs, i, n) for i, n in
                              ((1, "scale"), (2, "B"), (3, "input_mean"), (4, "input_var")))
    if x.ndim < 2:
        raise fail(op, f"input must have rank >= 2, got shape {x.shape}")
    c = x.shape[1]
    eps = float(attrs.get("epsilon", 1e-5))
    for name, v in (("scale", scale), ("B", bias), ("mean", mean), ("var", var)):
        if v.size != c and v.shape != x.shape[1:]:
            raise fail(op, f"{name} has shape {v.shape}, expected ({c},)")
    pshape = (1, c) + (1,) * (x.ndim - 2) if scale.size == c else (1,) + x.shape[1:]
    training = opset >= 14 and iattr(attrs, "training_mode", 0) == 1
    dt = x.dtype
    if training:
        axes = (0,) + tuple(range(2, x.ndim))
        momentum = float(attrs.get("momentum", 0.9))
        bmean = x.mean(axis=axes, dtype=np.float64)
        bvar = x.var(axis=axes, dtype=np.float64)
        a = scale.astype(np.float64).reshape(-1) / np.sqrt(bvar + eps)
        b = bias.astype(np.float64).reshape(-1) - bmean * a
        y = x * a.astype(dt).reshape(pshape)
        y += b.astype(dt).reshape(pshape)
        run_mean = (mean * momentum + bmean * (1 - momentum)).astype(dt)
        run_var = (var * momentum + bvar * (1 - momentum)).astype(dt)
        return [y, run_mean, run_var]
    a = scale.astype(np.float64) / np.sqrt(var.astype(np.float64) + eps)
    b = bias.astype(np.float64) - mean.astype(np.float64) * a
    y = x * a.astype(dt).reshape(pshape)
    y += b.astype(dt).reshape(pshape)
    return [y]


def _softmax(op: str, inputs, attrs, opset: int, log: bool):
    x = need(op, inputs, 0)
    if opset < 13:
        axis = iattr(attrs, "axis", 1)
        if not -x.ndim <= axis <= x.ndim:
            raise fail(op, f"axis {axis} out of range for rank {x.ndim}")
        if axis < 0:
            axis += x.ndim
        shape = x.shape
        x2 = x.reshape(math.prod(shape[:axis]), math.prod(shape[axis:]))
        return [_softmax_axis(x2, 1, log).reshape(shape)]
    axis = norm_axis(op, iattr(attrs, "axis", -1), max(x.ndim, 1))
    return [_softmax_axis(x, axis, log)]


def _softmax_axis(x: np.ndarray, axis: int, log: bool) -> np.ndarray:
    if x.size == 0:
        return x.copy()
    y = x - x.max(axis=axis, keepdims=True)
    if log:
        y -= np.log(np.exp(y).sum(axis=axis, keepdims=True))
        return y
    np.exp(y, out=y)
    y /= y.sum(axis=axis, keepdims=True)
    return y


@register("Softmax")
def k_softmax(inputs: list, attrs: dict, opset: int) -> list:
    return _softmax("Softmax", inputs, attrs, opset, False)


@register("LogSoftmax")
def k_log_softmax(inputs: list, attrs: dict, opset: int) -> list:
    return _softmax("LogSoftmax", inputs, attrs, opset, True)


# opset from which `axes` is an input rather than an attribute
_AXES_INPUT_SINCE = {"ReduceSum": 13}


def _reduce(op: str, fn):
    def kernel(inputs: list, attrs: dict, opset: int) -> list:
        x = need(op, inputs, 0)
        if opset < _AXES_INPUT_SINCE.get(op, 18):
            axes = ints_attr(attrs, "axes")
        else:
            axes = as_int_list(op, opt(inputs, 1), "axes")
        keepdims = bool(iattr(attrs, "keepdims", 1))
        if not axes:
            if iattr(attrs, "noop_with_empty_axes", 0):
                return [x]
            axes_t = tuple(range(x.ndim))
        else:
            axes_t = tuple(sorted({norm_axis(op, a, x.ndim) for a in axes}))
        y = np.asarray(fn(x, axes_t, keepdims))
        if y.dtype != x.dtype:
            y = y.astype(x.dtype)
        return [y]

    kernel.__name__ = f"k_{op.lower()}"
    register(op)(kernel)


def _empty_ok(x: np.ndarray, axes: tuple[int, ...]) -> bool:
    return all(x.shape[a] for a in axes)


def _rmax(x, axes, keep):
    if _empty_ok(x, axes):
        return np.max(x, axis=axes, keepdims=keep)
    init = -np.inf if x.dtype.kind == "f" else False if x.dtype.kind == "b" else np.iinfo(x.dtype).min
    return np.max(x, axis=axes, keepdims=keep, initial=init)


def _rmin(x, axes, keep):
    if _empty_ok(x, axes):
        return np.min(x, axis=axes, keepdims=keep)
    init = np.inf if x.dtype.kind == "f" else True if x.dtype.kind == "b" else np.iinfo(x.dtype).max
    return np.min(x, axis=axes, keepdims=keep, initial=init)


def _rmean(x, axes, keep):
    if x.dtype.kind == "f":
        acc = np.float32 if x.dtype == np.float16 else x.dtype  # no float16 accumulation
        return np.mean(x, axis=axes, keepdims=keep, dtype=acc)
    return np.mean(x, axis=axes, keepdims=keep)


def _rlogsumexp(x, axes, keep):
    if x.size == 0:
        return np.log(np.sum(np.exp(x), axis=axes, keepdims=keep))
    m = np.max(x, axis=axes, keepdims=True)
    m = np.where(np.isfinite(m), m, 0)
    s = np.log(np.sum(np.exp(x - m), axis=axes, keepdims=True)) + m
    return s if keep else np.squeeze(s, axis=axes)


for _op, _fn in {
    "ReduceMean": _rmean,
    "ReduceSum": lambda x, a, k: np.sum(x, axis=a, keepdims=k),
    "ReduceMax": _rmax,
    "ReduceMin": _rmin,
    "ReduceProd": lambda x, a, k: np.prod(x, axis=a, keepdims=k),
    "ReduceL1": lambda x, a, k: np.sum(np.abs(x), axis=a, keepdims=k),
    "ReduceL2": lambda x, a, k: np.sqrt(np.sum(np.square(x), axis=a, keepdims=k)),
    "ReduceSumSquare": lambda x, a, k: np.sum(np.square(x), axis=a, keepdims=k),
    "ReduceLogSum": lambda x, a, k: np.log(np.sum(x, axis=a, keepdims=k)),
    "ReduceLogSumExp": _rlogsumexp,
}.items():
    _reduce(_op, _fn)


def _normalize(x: np.ndarray, axes: tuple[int, ...], eps: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(x - mean) / sqrt(var + eps) over ``axes``, computed in float32 at least (float16 inputs do
    not accumulate in float16); also returns the mean and the inverse standard deviation."""
    acc = np.dtype(np.float32 if x.dtype == np.float16 else x.dtype).type
    xa = x.astype(acc, copy=False)
    mean = xa.mean(axis=axes, keepdims=True)
    centered = xa - mean
    inv_std = 1.0 / np.sqrt(np.mean(np.square(centered), axis=axes, keepdims=True) + acc(eps))
    return centered * inv_std, mean, inv_std


@register("LayerNormalization")
def k_layer_norm(inputs: list, attrs: dict, opset: int) -> list:
    op = "LayerNormalization"
    x = need(op, inputs, 0, "X")
    scale = need(op, inputs, 1, "Scale")
    bias = opt(inputs, 2)
    axis = norm_axis(op, iattr(attrs, "axis", -1), max(x.ndim, 1))
    axes = tuple(range(axis, x.ndim))
    y, mean, inv_std = _normalize(x, axes, float(attrs.get("epsilon", 1e-5)))
    y = y * scale
    if bias is not None:
        y = y + bias
    stash = np.float32
    return [y.astype(x.dtype, copy=False), mean.astype(stash), inv_std.astype(stash)]


@register("InstanceNormalization")
def k_instance_norm(inputs: list, attrs: dict, opset: int) -> list:
    op = "InstanceNormalization"
    x = need(op, inputs, 0, "input")
    scale, bias = need(op, inputs, 1, "scale"), need(op, inputs, 2, "B")
    if x.ndim < 3:
        raise fail(op, f"input must be (N, C, spatial...), got shape {x.shape}")
    c = x.shape[1]
    if scale.shape != (c,) or bias.shape != (c,):
        raise fail(op, f"scale and B must have shape ({c},), got {scale.shape} and {bias.shape}")
    y, _, _ = _normalize(x, tuple(range(2, x.ndim)), float(attrs.get("epsilon", 1e-5)))
    pshape = (1, c) + (1,) * (x.ndim - 2)
    return [(y * scale.reshape(pshape) + bias.reshape(pshape)).astype(x.dtype, copy=False)]


@register("GroupNormalization")
def k_group_norm(inputs: list, attrs: dict, opset: int) -> list:
    op = "GroupNormalization"
    x = need(op, inputs, 0, "X")
    scale, bias = need(op, inputs, 1, "scale"), need(op, inputs, 2, "bias")
    groups = iattr(attrs, "num_groups", 0)
    if x.ndim < 3:
        raise fail(op, f"input must be (N, C, spatial...), got shape {x.shape}")
    n, c = x.shape[:2]
    if groups < 1 or c % groups:
        raise fail(op, f"num_groups {groups} must be positive and divide the {c} channels")
    per = c if opset >= 21 else groups  # opset 18 scales per group, opset 21 per channel
    if scale.shape != (per,) or bias.shape != (per,):
        raise fail(op, f"scale and bias must have shape ({per},) at opset {opset}, got {scale.shape}, {bias.shape}")
    xg = x.reshape((n, groups, -1))
    y, _, _ = _normalize(xg, (2,), float(attrs.get("epsilon", 1e-5)))
    if per == groups:
        y = y * scale.reshape(1, groups, 1) + bias.reshape(1, groups, 1)
        return [y.reshape(x.shape).astype(x.dtype, copy=False)]
    y = y.reshape(x.shape)
    pshape = (1, c) + (1,) * (x.ndim - 2)
    return [(y * scale.reshape(pshape) + bias.reshape(pshape)).astype(x.dtype, copy=False)]


def _arg(op: str, pick):
    @register(op)
    def kernel(inputs: list, attrs: dict, opset: int) -> list:
        x = need(op, inputs, 0, "data")
        axis = norm_axis(op, iattr(attrs, "axis", 0), max(x.ndim, 1))
        keep = bool(iattr(attrs, "keepdims", 1))
        if x.shape[axis] == 0:
            raise fail(op, f"axis {axis} has no elements")
        if iattr(attrs, "select_last_index", 0):
            flipped = np.flip(x, axis=axis)
            idx = x.shape[axis] - 1 - pick(flipped, axis=axis)
        else:
            idx = pick(x, axis=axis)
        idx = idx.astype(np.int64)
        return [np.expand_dims(idx, axis) if keep else idx]

    return kernel


_arg("ArgMax", np.argmax)
_arg("ArgMin", np.argmin)
