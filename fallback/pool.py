"""MaxPool, AveragePool and the global pools, as a reduction over kernel taps of strided views."""

from __future__ import annotations

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


@register("MaxPool")
def k_maxpool(inputs, attrs, opset):
    op = "MaxPool"
    x = need(op, inputs, 0)
    _check(op, x)
    g = geometry(op, x.shape[2:], attrs, None, bool(iattr(attrs, "ceil_mode", 0)))
    end = [e + x_ for e, x_ in zip(g.pad_end, g.extra_end)]
    xp = pad_spatial(x, g.pad_begin, end, _lowest(x.dtype))
    want_idx = int(attrs.get("_num_outputs", 1)) > 1
    y = None
    idx = None
    nsp = x.ndim - 2
    if want_idx:
        insp = x.shape[2:]
        col_major = iattr(attrs, "storage_order", 0) == 1
        mul = []
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
def k_avgpool(inputs, attrs, opset):
    op = "AveragePool"
    x = need(op, inputs, 0)
    _check(op, x)
    g = geometry(op, x.shape[2:], attrs, None, bool(iattr(attrs, "ceil_mode", 0)))
    include_pad = iattr(attrs, "count_include_pad", 0) == 1
    end = [e + x_ for e, x_ in zip(g.pad_end, g.extra_end)]
    xp = pad_spatial(x, g.pad_begin, end, 0)
    y = None
    for tap in np.ndindex(*g.kernel):
        src = xp[tap_slices(tap, g.out, g.strides, g.dilations)]
        if y is None:
            y = src.astype(x.dtype, copy=True)
        else:
            y += src
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
def k_global_avgpool(inputs, attrs, opset):
    x = need("GlobalAveragePool", inputs, 0)
    _check("GlobalAveragePool", x)
    return [x.mean(axis=tuple(range(2, x.ndim)), keepdims=True, dtype=x.dtype)]


@register("GlobalMaxPool")
def k_global_maxpool(inputs, attrs, opset):
    x = need("GlobalMaxPool", inputs, 0)
    _check("GlobalMaxPool", x)
    return [x.max(axis=tuple(range(2, x.ndim)), keepdims=True)]
