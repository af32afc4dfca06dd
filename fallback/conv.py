"""Conv and ConvTranspose: 1x1 as a plain GEMM, depthwise as a sum over kernel taps, everything else
as im2col (a strided view, one copy) + one batched BLAS GEMM."""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ._registry import fail, iattr, ints_attr, need, opt, register, sattr
from ._spatial import geometry, pad_spatial, spatial_attrs, tap_slices
from .elementwise import apply_activation


def _float_like(op: str, x: np.ndarray, w: np.ndarray) -> np.ndarray:
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
    """2-D depthwise conv on flattened planes.

    The padded input is split into stride x stride phases (one phase when the stride is 1), each
    stored as a zero-padded plane of width ``wq``. Kernel tap (i, j) then reads one phase at a fixed
    offset, so for every tap the whole batch of planes is one contiguous slice of the flattened phase:
    long, unit-stride inner loops, two ufunc passes per tap. Columns past ``ow`` on each row are
    computed and dropped.
    """
    if mult > 1:
        x = np.repeat(x, mult, axis=1)
    n, m, h, wd = x.shape
    kh, kw = w.shape[2:]
    (sh, sw), (dh, dw), (oh, ow), (ph, pw) = strides, dil, out, pb
    off_h = [(i * dh) // sh for i in range(kh)]
    off_w = [(j * dw) // sw for j in range(kw)]
    phases_h = sorted({(i * dh) % sh for i in range(kh)})
    phases_w = sorted({(j * dw) % sw for j in range(kw)})
    hq = oh + max(off_h) + 1
    wq = ow + max(off_w)
    planes = np.zeros((len(phases_h), len(phases_w), n, m, hq, wq), dtype=x.dtype)
    for ai, a in enumerate(phases_h):
        r0 = max(0, -(-(ph - a) // sh))
        r1 = min(hq, (h - 1 + ph - a) // sh + 1)
        if r1 <= r0:
            continue
        for bi, b in enumerate(phases_w):
            c0 = max(0, -(-(pw - b) // sw))
            c1 = min(wq, (wd - 1 + pw - b) // sw + 1)
            if c1 <= c0:
                continue
            planes[ai, bi, :, :, r0:r1, c0:c1] = x[:, :, a + sh * r0 - ph: a + sh * (r1 - 1) - ph + 1: sh,
                                                   b + sw * c0 - pw: b + sw * (c1 - 1) - pw + 1: sw]
    flat = planes.reshape(len(phases_h), len(phases_w), n, m, hq * wq)
    length = oh * wq
    wv = w.reshape(m, kh * kw)
    y = np.empty((n, m, length), dtype=x.dtype)
    tmp = np.empty_like(y)
    for i in range(kh):
        ai = phases_h.index((i * dh) % sh)
        for j in range(kw):
            bi = phases_w.index((j * dw) % sw)
            o = off_h[i] * wq + off_w[j]
            src = flat[ai, bi, :, :, o:o + length]
            wt = wv[:, i * kw + j].reshape(m, 1)
            if i == 0 and j == 0:
                np.multiply(src, wt, out=y)
            else:
                np.multiply(src, wt, out=tmp)
                y += tmp
    y = y.reshape(n, m, oh, wq)
    return y if wq == ow else np.ascontiguousarray(y[..., :ow])


def _im2col(xp: np.ndarray, group: int, kernel: list[int], out: list[int], strides: list[int],
            dil: list[int]) -> np.ndarray:
    """(N, group, Cg * prod(kernel), prod(out)) column matrix of the padded input."""
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


@register("Conv")
def k_conv(inputs, attrs, opset):
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
        cols = _im2col(xp, group, kernel, g.out, g.strides, g.dilations)
        y = np.matmul(w.reshape(group, mg, -1), cols)
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
def k_conv_transpose(inputs, attrs, opset):
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
    del outpad
    _add_bias(y, b, m, op)
    return [apply_activation(y, attrs.get("_act"))]


_ = sattr
