"""MaxPool, AveragePool and the global pools. Max and average pooling reduce one spatial axis at a time
over strided slices (the window is separable); MaxPool's Indices output (row-major, or column-major with
storage_order=1) is computed, over all taps, only when ``_num_outputs`` asks for it."""

from __future__ import annotations

import math

import numpy as np

from ._registry import fail, iattr, need, register
from ._spatial import geometry, pad_spatial, tap_slices


def _check(op: str, x: np.ndarray) -> None:
    if x.ndim < 3:
        raise fail(op, f"input must be (N, C, spatial...), got shape {x.shape}")


def _lowest(dtype: np.dtype):
    if dtype.kind == "f":
        return -np.inf
    if dtype.kind in "iu":
        return np.iinfo(dtype).min
    if dtype.kind == "b":
        return False
    raise fail("MaxPool", f"unsupported dtype {dtype}")


def _separable(x: np.ndarray, g, fill, ufunc) -> np.ndarray:
    """Max and sum over a box window are separable: reduce one spatial axis at a time (the first
    spatial axis first, whose taps are whole contiguous rows). (k_h - 1) + (k_w - 1) ufunc passes
    instead of k_h * k_w - 1, each on an already reduced array."""
    end = [e + x_ for e, x_ in zip(g.pad_end, g.extra_end)]
    cur = pad_spatial(x, g.pad_begin, end, fill)
    for i in range(x.ndim - 2):
        k, s, d, o = g.kernel[i], g.strides[i], g.dilations[i], g.out[i]
        index = [slice(None)] * cur.ndim
        acc = None
        for t in range(k):
            index[2 + i] = slice(t * d, t * d + (o - 1) * s + 1, s)
            src = cur[tuple(index)]
            if acc is None:
                acc = src.copy()
            else:
                ufunc(acc, src, out=acc)
        cur = acc
    return cur if cur is not x else cur.copy()


@register("MaxPool")
def k_maxpool(inputs: list, attrs: dict, opset: int) -> list:
    op = "MaxPool"
    x = need(op, inputs, 0)
    _check(op, x)
    g = geometry(op, x.shape[2:], attrs, None, bool(iattr(attrs, "ceil_mode", 0)))
    want_idx = int(attrs.get("_num_outputs", 1)) > 1
    if not want_idx:
        return [_separable(x, g, _lowest(x.dtype), np.maximum)]
    end = [e + x_ for e, x_ in zip(g.pad_end, g.extra_end)]
    xp = pad_spatial(x, g.pad_begin, end, _lowest(x.dtype))
    y = None
    idx = None
    nsp = x.ndim - 2
    if want_idx:
        insp = x.shape[2:]
        col_major = iattr(attrs, "storage_order", 0) == 1
        acc = 1
        order = range(nsp) if col_major else range(nsp - 1, -1, -1)
        mul = [0] * nsp
        for i in order:
            mul[i] = acc
            acc *= insp[i]
        plane = (np.arange(x.shape[0])[:, None] * x.shape[1] + np.arange(x.shape[1])[None, :]) * acc
        plane = plane.reshape(x.shape[:2] + (1,) * nsp)
    for tap in np.ndindex(*g.kernel):
        src = xp[tap_slices(tap, g.out, g.strides, g.dilations)]
        if want_idx:
            lin = plane
            for i in range(nsp):
                coord = np.arange(g.out[i]) * g.strides[i] + tap[i] * g.dilations[i] - g.pad_begin[i]
                lin = lin + (coord * mul[i]).reshape((1, 1) + tuple(-1 if j == i else 1 for j in range(nsp)))
            if y is None:
                y = src.copy()
                idx = np.broadcast_to(lin, y.shape).astype(np.int64)
            else:
                better = src > y
                np.copyto(y, src, where=better)
                np.copyto(idx, np.broadcast_to(lin, y.shape), where=better)
        elif y is None:
            y = src.copy()
        else:
            np.maximum(y, src, out=y)
    return [y, idx] if want_idx else [y]


@register("AveragePool")
def k_avgpool(inputs: list, attrs: dict, opset: int) -> list:
    op = "AveragePool"
    x = need(op, inputs, 0)
    _check(op, x)
    g = geometry(op, x.shape[2:], attrs, None, bool(iattr(attrs, "ceil_mode", 0)))
    include_pad = iattr(attrs, "count_include_pad", 0) == 1
    y = _separable(x, g, 0, np.add)
    # per-axis count of taps that land on counted positions; the divisor is their outer product
    nsp = x.ndim - 2
    counts = []
    uniform = True
    for i in range(nsp):
        n = x.shape[2 + i]
        lo, hi = (0, n + g.pad_begin[i] + g.pad_end[i]) if include_pad else (g.pad_begin[i], g.pad_begin[i] + n)
        pos = (np.arange(g.out[i])[:, None] * g.strides[i] + np.arange(g.kernel[i])[None, :] * g.dilations[i])
        cnt = ((pos >= lo) & (pos < hi)).sum(axis=1)
        uniform = uniform and bool((cnt == cnt[0]).all())
        counts.append(cnt)
    if uniform:
        y *= y.dtype.type(1.0 / float(np.prod([c[0] for c in counts])))
    else:
        div = np.ones((1,) * nsp, dtype=np.float64)
        for i, cnt in enumerate(counts):
            div = div * cnt.reshape(tuple(-1 if j == i else 1 for j in range(nsp)))
        y /= np.maximum(div, 1).astype(y.dtype)
    return [y]


@register("GlobalAveragePool")
def k_global_avgpool(inputs: list, attrs: dict, opset: int) -> list:
    x = need("GlobalAveragePool", inputs, 0)
    _check("GlobalAveragePool", x)
    acc = np.float32 if x.dtype == np.float16 else x.dtype  # no float16 accumulation
    n, c = x.shape[:2]
    size = math.prod(x.shape[2:])
    if x.dtype.kind == "f" and size and x.flags.c_contiguous:
        # one contiguous reduction per plane, then a divide (what mean does, minus its overhead)
        s = x.reshape(n, c, size).sum(axis=-1, dtype=acc)
        y = np.divide(s, s.dtype.type(size), out=s)
        return [y.reshape((n, c) + (1,) * (x.ndim - 2)).astype(x.dtype, copy=False)]
    return [x.mean(axis=tuple(range(2, x.ndim)), keepdims=True, dtype=acc).astype(x.dtype, copy=False)]


@register("GlobalMaxPool")
def k_global_maxpool(inputs: list, attrs: dict, opset: int) -> list:
    x = need("GlobalMaxPool", inputs, 0)
    _check("GlobalMaxPool", x)
    return [x.max(axis=tuple(range(2, x.ndim)), keepdims=True)]
