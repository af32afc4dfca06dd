"""Conv and ConvTranspose.

* 1x1 convolutions (any stride, no padding): a plain (batched) GEMM on the input, no im2col.
* 2-D depthwise (one input channel per group, any multiplier): the padded input split into stride
  phases and flattened (``phase_planes``), so every kernel tap is one contiguous slice; the taps are
  gathered per cache-sized channel block and summed by one batched BLAS call (tap loop of two ufunc
  passes for very large planes). Other ranks use the tap loop on strided slices.
* everything else: im2col (one copy out of a strided window view, built a band of output rows at a
  time when large) and one batched BLAS GEMM over the groups.
* ConvTranspose: one GEMM (W^T X) then a scatter-add of the kernel taps into the output (col2im), or
  a pure interleave when stride == kernel without overlap or padding.

float16 runs in float32 and float32 never becomes float64; the bias and a fused activation are
applied in place on the output.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ._registry import fail, half_via_float32, iattr, ints_attr, need, opt, register
from ._spatial import drop_columns, geometry, pad_spatial, phase_planes, spatial_attrs, tap_slices
from .elementwise import apply_activation


def _float_like(op: str, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The weight in the input's dtype (a float64 initializer must not promote a float32 graph)."""
    if w.dtype != x.dtype:
        w = w.astype(x.dtype)
    return w


def _add_bias(y: np.ndarray, b: np.ndarray | None, m: int, op: str) -> None:
    if b is None:
        return
    if b.size != m:
        raise fail(op, f"bias has {b.size} elements, expected {m} (one per output channel)")
    y += b.reshape((1, m) + (1,) * (y.ndim - 2)).astype(y.dtype, copy=False)


def _depthwise(xp: np.ndarray, w: np.ndarray, mult: int, out: list[int], strides: list[int],
               dil: list[int]) -> np.ndarray:
    """Depthwise conv (one input channel per group, any rank) as a sum of per-channel scaled shifted
    slices of the padded input."""
    if mult > 1:
        xp = np.repeat(xp, mult, axis=1)
    n, m = xp.shape[0], xp.shape[1]
    nsp = len(out)
    y = np.empty((n, m, *out), dtype=xp.dtype)
    tmp = np.empty_like(y)
    kernel = w.shape[2:]
    wv = w.reshape(m, -1)
    for t, tap in enumerate(np.ndindex(*kernel)):
        src = xp[tap_slices(tap, out, strides, dil)]
        wt = wv[:, t].reshape((m,) + (1,) * nsp)
        if t == 0:
            np.multiply(src, wt, out=y)
        else:
            np.multiply(src, wt, out=tmp)
            y += tmp
    return y


def _depthwise2d(x: np.ndarray, w: np.ndarray, mult: int, pb: list[int], out: list[int],
                 strides: list[int], dil: list[int]) -> np.ndarray:
    """2-D depthwise conv on flattened phase planes (see ``phase_planes``): every kernel tap is one
    contiguous slice for all planes at once, so the work is long unit-stride loops or BLAS calls."""
    if mult > 1:
        x = np.repeat(x, mult, axis=1)
    n, m = x.shape[:2]
    kernel = list(w.shape[2:])
    flat, offsets, wq = phase_planes(x, pb, out, strides, dil, kernel)
    length = out[0] * wq
    ktaps = len(offsets)
    wv = w.reshape(m, ktaps)
    if length <= _DW_GEMM_MAX_PIXELS:
        # gather the taps of a cache-sized block of channels; one batched BLAS call does the sums
        y = np.empty((n, m, 1, length), dtype=x.dtype)
        cb = max(1, _COLS_BYTES // (n * ktaps * length * x.itemsize))
        cols = np.empty((n, min(cb, m), ktaps, length), dtype=x.dtype)
        wb = wv.reshape(m, 1, ktaps)
        for c0 in range(0, m, cb):
            c1 = min(m, c0 + cb)
            cc = cols[:, :c1 - c0]
            for t, (ai, bi, o) in enumerate(offsets):
                cc[:, :, t] = flat[ai, bi, :, c0:c1, o:o + length]
            np.matmul(wb[c0:c1], cc, out=y[:, c0:c1])
        return drop_columns(y.reshape(n, m, length), out, wq)
    # large planes: two ufunc passes per tap over the whole batch of planes
    y = np.empty((n, m, length), dtype=x.dtype)
    tmp = np.empty_like(y)
    for t, (ai, bi, o) in enumerate(offsets):
        src = flat[ai, bi, :, :, o:o + length]
        wt = wv[:, t].reshape(m, 1)
        if t == 0:
            np.multiply(src, wt, out=y)
        else:
            np.multiply(src, wt, out=tmp)
            y += tmp
    return drop_columns(y, out, wq)


def _im2col(xp: np.ndarray, group: int, kernel: list[int], out: list[int], strides: list[int],
            dil: list[int]) -> np.ndarray:
    """(N, group, Cg * prod(kernel), prod(out)) column matrix of the padded input: one copy out of a
    strided window view."""
    n, c = xp.shape[:2]
    nsp = len(kernel)
    sn, sc = xp.strides[:2]
    sp = xp.strides[2:]
    view = as_strided(
        xp,
        shape=(n, c, *kernel, *out),
        strides=(sn, sc, *(sp[i] * dil[i] for i in range(nsp)), *(sp[i] * strides[i] for i in range(nsp))),
        writeable=False,
    )
    k = int(np.prod(kernel))
    o = int(np.prod(out))
    return view.reshape(n, group, (c // group) * k, o)


# depthwise planes up to this many (padded-width) output pixels use gather + batched GEMM (as fast or
# faster at every MobileNet size measured here, 7x7 to 112x112); larger planes, whose per-channel
# column block no longer fits in cache, use the two-ufunc-passes-per-tap loop
_DW_GEMM_MAX_PIXELS = 16384

# im2col matrices above this size are built and multiplied a band of output rows at a time: the
# column buffer stays cache- and heap-friendly instead of growing to 9x a large activation.
_COLS_BYTES = 1 << 20


def _conv_im2col(xp: np.ndarray, wg: np.ndarray, group: int, kernel: list[int], out: list[int],
                 strides: list[int], dil: list[int]) -> np.ndarray:
    n, c = xp.shape[:2]
    ksize = int(np.prod(kernel))
    rest = int(np.prod(out[1:]))
    row_bytes = c * ksize * rest * xp.itemsize
    if n * out[0] * row_bytes <= _COLS_BYTES:
        return np.matmul(wg, _im2col(xp, group, kernel, out, strides, dil))
    y = np.empty((n, group, wg.shape[1], out[0] * rest), dtype=xp.dtype)
    rows = max(1, _COLS_BYTES // row_bytes)
    dk0 = (kernel[0] - 1) * dil[0] + 1
    for b in range(n):
        for r0 in range(0, out[0], rows):
            r1 = min(out[0], r0 + rows)
            band = xp[b:b + 1, :, r0 * strides[0]:(r1 - 1) * strides[0] + dk0]
            cols = _im2col(band, group, kernel, [r1 - r0, *out[1:]], strides, dil)
            np.matmul(wg, cols, out=y[b:b + 1, :, :, r0 * rest:r1 * rest])
    return y


@register("Conv")
@half_via_float32
def k_conv(inputs: list, attrs: dict, opset: int) -> list:
    op = "Conv"
    x = need(op, inputs, 0, "X")
    w = need(op, inputs, 1, "W")
    b = opt(inputs, 2)
    if x.ndim < 3:
        raise fail(op, f"input must be (N, C, spatial...), got shape {x.shape}")
    if w.ndim != x.ndim:
        raise fail(op, f"weight rank {w.ndim} does not match input rank {x.ndim}")
    w = _float_like(op, x, w)
    group = iattr(attrs, "group", 1)
    n, c = x.shape[:2]
    m, cg = w.shape[:2]
    if group < 1 or c % group or cg * group != c:
        raise fail(op, f"input channels {c} do not match weight channels {cg} x group {group}")
    if m % group:
        raise fail(op, f"output channels {m} are not divisible by group {group}")
    kernel = list(w.shape[2:])
    g = geometry(op, x.shape[2:], attrs, kernel)
    nsp = len(kernel)
    mg = m // group
    if cg == 1 and group == c and group > 1 and nsp == 2:
        y = _depthwise2d(x, w, m // c, g.pad_begin, g.out, g.strides, g.dilations)
    elif cg == 1 and group == c and group > 1:
        xp = pad_spatial(x, g.pad_begin, g.pad_end)
        y = _depthwise(xp, w, m // c, g.out, g.strides, g.dilations)
    elif all(k == 1 for k in kernel) and not g.padded:
        xs = x
        if any(s != 1 for s in g.strides):
            xs = x[(slice(None), slice(None)) + tuple(slice(0, (o - 1) * s + 1, s)
                                                        for o, s in zip(g.out, g.strides))]
        cols = xs.reshape(n, group, cg, -1)
        y = np.matmul(w.reshape(group, mg, cg), cols)
    else:
        xp = pad_spatial(x, g.pad_begin, g.pad_end)
        y = _conv_im2col(xp, w.reshape(group, mg, -1), group, kernel, g.out, g.strides, g.dilations)
    y = y.reshape(n, m, *g.out)
    _add_bias(y, b, m, op)
    return [apply_activation(y, attrs.get("_act"))]


def _convtranspose_pads(op: str, x: np.ndarray, attrs, kernel: list[int]):
    nsp = x.ndim - 2
    _, strides, dil, pads, auto_pad = spatial_attrs(op, attrs, nsp, kernel)
    outpad = ints_attr(attrs, "output_padding") or [0] * nsp
    if len(outpad) != nsp:
        raise fail(op, f"output_padding {outpad} does not match {nsp} spatial dims")
    out_shape = ints_attr(attrs, "output_shape")
    if out_shape is not None and len(out_shape) == nsp + 2:
        out_shape = out_shape[2:]
    if out_shape is not None and len(out_shape) != nsp:
        raise fail(op, f"output_shape {out_shape} does not match {nsp} spatial dims")
    pb, pe, out = [], [], []
    for i in range(nsp):
        n, s, d, k = x.shape[2 + i], strides[i], dil[i], kernel[i]
        full = s * (n - 1) + outpad[i] + (k - 1) * d + 1
        if out_shape is not None or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            o = out_shape[i] if out_shape is not None else n * s
            total = full - o
            if auto_pad == "SAME_UPPER":
                b, e = total // 2, total - total // 2
            else:
                b, e = total - total // 2, total // 2
        elif auto_pad == "VALID":
            b, e = 0, 0
        else:
            b, e = pads[i], pads[i + nsp]
        o = full - b - e
        if o < 1:
            raise fail(op, f"output size {o} on spatial axis {i} is not positive")
        pb.append(b)
        pe.append(e)
        out.append(o)
    return strides, dil, outpad, pb, out


@register("ConvTranspose")
@half_via_float32
def k_conv_transpose(inputs: list, attrs: dict, opset: int) -> list:
    op = "ConvTranspose"
    x = need(op, inputs, 0, "X")
    w = need(op, inputs, 1, "W")
    b = opt(inputs, 2)
    if x.ndim < 3:
        raise fail(op, f"input must be (N, C, spatial...), got shape {x.shape}")
    if w.ndim != x.ndim:
        raise fail(op, f"weight rank {w.ndim} does not match input rank {x.ndim}")
    w = _float_like(op, x, w)
    group = iattr(attrs, "group", 1)
    n, c = x.shape[:2]
    if group < 1 or c % group or w.shape[0] != c:
        raise fail(op, f"input channels {c} do not match weight shape {w.shape} with group {group}")
    cg = c // group
    mg = w.shape[1]
    m = mg * group
    kernel = list(w.shape[2:])
    strides, dil, outpad, pb, out = _convtranspose_pads(op, x, attrs, kernel)
    nsp = len(kernel)
    insp = list(x.shape[2:])
    ksize = int(np.prod(kernel))
    isize = int(np.prod(insp))
    # cols[n, g, (mg, taps), pixels] = W_g^T @ X_g
    wt = w.reshape(group, cg, mg * ksize).transpose(0, 2, 1)
    cols = np.matmul(wt, x.reshape(n, group, cg, isize))
    cols = cols.reshape(n, m, *kernel, *insp)
    full = [s * (i - 1) + (k - 1) * d + 1 for s, i, k, d in zip(strides, insp, kernel, dil)]
    if (strides == kernel and all(d == 1 for d in dil) and not any(pb) and out == full):
        # no overlap between taps: interleave (in_i, k_i) axes, one copy
        perm = [0, 1]
        for i in range(nsp):
            perm += [2 + nsp + i, 2 + i]
        y = cols.transpose(perm).reshape(n, m, *out)
    else:
        off = [max(0, -p) for p in pb]
        start = [p + o for p, o in zip(pb, off)]
        buf_shape = [max(f + o, s + u) for f, o, s, u in zip(full, off, start, out)]
        buf = np.zeros((n, m, *buf_shape), dtype=cols.dtype)
        for tap in np.ndindex(*kernel):
            sl = (slice(None), slice(None)) + tuple(
                slice(t * d + o, t * d + o + (i - 1) * s + 1, s)
                for t, d, o, i, s in zip(tap, dil, off, insp, strides))
            buf[sl] += cols[(slice(None), slice(None)) + tap]
        y = buf[(slice(None), slice(None)) + tuple(slice(s, s + u) for s, u in zip(start, out))]
        if y.shape != buf.shape:
            y = np.ascontiguousarray(y)
    _add_bias(y, b, m, op)
    return [apply_activation(y, attrs.get("_act"))]


