"""Resize and Upsample: separable per-axis interpolation (nearest, linear, cubic, antialias) following
the ONNX reference's coordinate rules; each axis is a gather of a few taps and a weighted sum."""

from __future__ import annotations

import functools
import math

import numpy as np

from ._registry import FallbackError, as_int_list, fail, iattr, need, norm_axis, opt, register, sattr
from ._runtime import empty, parallel

_CTMS = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
         "tf_crop_and_resize", "tf_half_pixel_for_nn")


def _source_coords(ctm: str, in_len: int, out_len: int, scale: float,
                   roi: tuple[float, float] | None) -> np.ndarray:
    x = np.arange(out_len, dtype=np.float64)
    out_w = scale * in_len
    if ctm == "align_corners":
        return np.zeros_like(x) if out_w == 1 else x * (in_len - 1) / (out_w - 1)
    if ctm == "asymmetric":
        return x / scale
    if ctm == "tf_crop_and_resize":
        r0, r1 = roi if roi is not None else (0.0, 1.0)
        if out_w == 1:
            return np.full_like(x, (r1 - r0) * (in_len - 1) / 2 + r0 * (in_len - 1))
        return x * (r1 - r0) * (in_len - 1) / (out_w - 1) + r0 * (in_len - 1)
    if ctm == "pytorch_half_pixel":
        return np.full_like(x, -0.5) if out_w == 1 else (x + 0.5) / scale - 0.5
    if ctm == "half_pixel":
        return (x + 0.5) / scale - 0.5
    if ctm == "half_pixel_symmetric":
        adjustment = out_len / out_w
        offset = in_len / 2 * (1 - adjustment)
        return offset + (x + 0.5) / scale - 0.5
    if ctm == "tf_half_pixel_for_nn":
        return (x + 0.5) / scale
    raise FallbackError(f"Resize: unknown coordinate_transformation_mode {ctm!r}")


def _cubic(t: np.ndarray, a: float) -> np.ndarray:
    t = np.abs(t)
    t2, t3 = t * t, t * t * t
    near = (a + 2) * t3 - (a + 3) * t2 + 1
    far = a * t3 - 5 * a * t2 + 8 * a * t - 4 * a
    return np.where(t <= 1, near, np.where(t < 2, far, 0.0))


def _axis_taps(mode: str, nearest_mode: str, xo: np.ndarray, in_len: int, scale: float, cubic_a: float,
               exclude_outside: bool, antialias: bool) -> tuple[np.ndarray, np.ndarray | None]:
    """(out_len, T) source indices (not yet clamped to the axis) and weights (None for nearest)."""
    fl = np.floor(xo)
    frac = xo - fl
    if mode == "nearest":
        if nearest_mode == "round_prefer_floor":
            pick = np.where(frac > 0.5, fl + 1, fl)
        elif nearest_mode == "round_prefer_ceil":
            pick = np.where(frac >= 0.5, fl + 1, fl)
        elif nearest_mode == "floor":
            pick = fl
        elif nearest_mode == "ceil":
            pick = np.where(frac > 0, fl + 1, fl)
        elif nearest_mode == "simple":  # onnxruntime's rule before opset 11
            pick = np.ceil(xo) if scale < 1 else np.trunc(xo)
        else:
            raise FallbackError(f"Resize: unknown nearest_mode {nearest_mode!r}")
        return pick.astype(np.intp)[:, None], None
    s = min(scale, 1.0) if antialias else 1.0
    if mode == "linear":
        start = int(math.floor(-1 / s) + 1) if antialias else 0
        offs = np.arange(start, 2 - start)
        w = np.clip(1 - np.abs((offs[None, :] - frac[:, None]) * s), 0, 1)
    elif mode == "cubic":
        start = int(math.floor(-2 / s) + 1) if antialias else -1
        offs = np.arange(start, 2 - start)
        w = _cubic((offs[None, :] - frac[:, None]) * s, cubic_a)
    else:
        raise FallbackError(f"Resize: unknown mode {mode!r}")
    idx = fl[:, None].astype(np.intp) + offs[None, :]
    if exclude_outside:
        w = np.where((idx < 0) | (idx >= in_len), 0.0, w)
    if antialias or exclude_outside:
        w = w / w.sum(axis=1, keepdims=True)
    return idx, w


def _periodic(idx: np.ndarray, w: np.ndarray | None, in_len: int):
    """For an integer upscale factor s with the same taps and weights for every output phase
    (half_pixel / asymmetric / pytorch_half_pixel coordinates), the per-phase tap offsets and weights;
    else None."""
    out_len, taps = idx.shape
    if out_len % in_len or out_len == in_len:
        return None
    s = out_len // in_len
    rel = idx.reshape(in_len, s, taps) - np.arange(in_len).reshape(in_len, 1, 1)
    if (rel != rel[:1]).any():
        return None
    if w is not None:
        wp = w.reshape(in_len, s, taps)
        if not np.allclose(wp, wp[:1], rtol=0, atol=1e-12):
            return None
        return s, rel[0], wp[0]
    return s, rel[0], None


@functools.lru_cache(maxsize=256)
def _axis_plan(mode: str, nearest_mode: str, ctm: str, in_len: int, out_len: int, scale: float,
               roi: tuple[float, float] | None, cubic_a: float, exclude_outside: bool, antialias: bool):
    """Source coordinates, taps, weights and the periodic form of one axis, computed once per
    geometry (read-only: shared by every call with the same parameters)."""
    xo = _source_coords(ctm, in_len, out_len, scale, roi)
    idx, w = _axis_taps(mode, nearest_mode, xo, in_len, scale, cubic_a, exclude_outside, antialias)
    per = _periodic(idx, w, in_len)
    for a in (xo, idx, w, *(per[1:] if per is not None else ())):
        if a is not None:
            a.setflags(write=False)
    return xo, idx, w, per


def axis_taps(mode: str, nearest_mode: str, ctm: str, in_len: int, out_len: int, scale: float,
              roi: tuple[float, float] | None = None, cubic_a: float = -0.75, exclude_outside: bool = False,
              antialias: bool = False) -> tuple[np.ndarray, np.ndarray | None]:
    """For each output index of one axis, the source indices (clamped to the axis) and their
    weights (None for nearest) exactly as this reference computes them: GPU kernels read these
    tables instead of redoing the coordinate arithmetic, which drivers round differently at ties."""
    _, idx, w, _ = _axis_plan(mode, nearest_mode, ctm, in_len, out_len, scale, roi, cubic_a, exclude_outside,
                              antialias)
    return np.clip(idx, 0, in_len - 1), w


def border_linear_taps(idx: np.ndarray, w: np.ndarray, in_len: int) -> tuple[np.ndarray, np.ndarray]:
    """Two-tap linear taps of one axis (clamped indices and weights from ``axis_taps``) in
    onnxruntime's border form: the coordinate is clamped to the axis before its taps are taken, so
    the first output weighs 1 and 0 and the last 0.5 and 0.5 on one repeated pixel. The value is
    the same; a bilinear sum of a quantized model then rounds its ties as onnxruntime does."""
    pair = idx[:, 0] == idx[:, 1]
    coord = idx[:, 0] + w[:, 1].astype(np.float64)
    coord[pair] = idx[pair, 0]
    coord = np.clip(coord, 0, in_len - 1)
    first = np.minimum(np.floor(coord).astype(idx.dtype), in_len - 1)
    second = np.minimum(first + 1, in_len - 1)
    near = (coord - first).astype(np.float32)
    far = np.abs(coord - second).astype(np.float32)
    same = first == second
    near[same], far[same] = 0.5, 0.5
    return np.stack([first, second], axis=1), np.stack([far, near], axis=1).astype(w.dtype)


@functools.lru_cache(maxsize=256)
def _border_axis_taps(mode: str, nearest_mode: str, ctm: str, in_len: int, out_len: int, scale: float,
                      cubic_a: float) -> tuple[np.ndarray, np.ndarray] | None:
    """``border_linear_taps`` of one axis of a two-axis linear resize (None unless the axis has two
    taps), once per geometry: the arrays are read-only, shared through the cache."""
    _, idx, w, _ = _axis_plan(mode, nearest_mode, ctm, in_len, out_len, scale, None, cubic_a, False, False)
    if w.shape[1] != 2:
        return None
    taps = border_linear_taps(np.clip(idx, 0, in_len - 1), w, in_len)
    for arr in taps:
        arr.setflags(write=False)
    return taps


def _bilinear_2d(x: np.ndarray, axes: tuple[int, int], taps: tuple[tuple[np.ndarray, np.ndarray], ...],
                 dt: np.dtype) -> np.ndarray:
    """Linear resize of two axes at once as onnxruntime's bilinear kernel computes it: per output,
    the four products ``(wx * wy) * x`` summed in its order (not one axis after the other, which
    rounds the .5 ties of a quantized model's 2x upsample differently)."""
    (ay, ax), ((iy, wy), (ix, wx)) = axes, taps
    if (ay, ax) == (x.ndim - 2, x.ndim - 1) and x.dtype == dt and dt.kind == "f":
        return _bilinear_2d_blocked(x, taps)
    rows = [np.take(x, iy[:, t], axis=ay) for t in range(2)]
    shape_y, shape_x = [1] * x.ndim, [1] * x.ndim
    shape_y[ay] = shape_x[ax] = -1
    wy = [wy[:, t].astype(dt).reshape(shape_y) for t in range(2)]
    wx = [wx[:, t].astype(dt).reshape(shape_x) for t in range(2)]
    y = None
    for ty in range(2):
        for tx in range(2):
            term = np.take(rows[ty], ix[:, tx], axis=ax)
            term *= wx[tx] * wy[ty]
            if y is None:
                y = term
            else:
                y += term
    return y


# output bytes per block of leading (batch x channel) planes in _bilinear_2d_blocked: the gathered
# terms stay in cache (1-thread CPU, under load, bit-equal to the one-block form: 16x64x64 x2
# 3.2 -> 1.7 ms, 32x128x128 27 -> 13 ms, 128x16x16 2.1 -> 0.9 ms)
_BILINEAR_BLOCK_BYTES = 256 << 10


def _bilinear_2d_blocked(x: np.ndarray, taps: tuple[tuple[np.ndarray, np.ndarray], ...]) -> np.ndarray:
    """:func:`_bilinear_2d` of the last two axes of a float ``x``, the same products summed in the
    same order, a block of leading planes at a time (split over the kernel threads): the column taps
    are gathered on the smaller input rows, the row taps are then whole-row copies. (``np.take`` into
    ``out=`` buffers the whole result first unless ``mode`` is not "raise"; the indices are in range.)"""
    (iy, wy), (ix, wx) = taps
    h, w = x.shape[-2:]
    ho, wo = len(iy), len(ix)
    planes = x.reshape(-1, h, w)
    count = planes.shape[0]
    y = empty((count, ho, wo), x.dtype)
    weights = [[wx[:, tx].astype(x.dtype)[None, :] * wy[:, ty].astype(x.dtype)[:, None] for tx in range(2)]
               for ty in range(2)]
    rows = [np.ascontiguousarray(iy[:, t]) for t in range(2)]
    cols = [np.ascontiguousarray(ix[:, t]) for t in range(2)]
    block = max(1, _BILINEAR_BLOCK_BYTES // max(1, ho * wo * x.itemsize))

    def part(p0: int, p1: int) -> None:
        nb = min(block, p1 - p0)
        gathered = [np.empty((nb, h, wo), x.dtype) for _ in range(2)]
        term = np.empty((nb, ho, wo), x.dtype)
        for b0 in range(p0, p1, block):
            b1 = min(p1, b0 + block)
            k = b1 - b0
            for t in range(2):
                np.take(planes[b0:b1], cols[t], axis=2, out=gathered[t][:k], mode="clip")
            out = y[b0:b1]
            for ty in range(2):
                for tx in range(2):
                    dst = out if ty == tx == 0 else term[:k]
                    np.take(gathered[tx][:k], rows[ty], axis=1, out=dst, mode="clip")
                    dst *= weights[ty][tx]
                    if dst is not out:
                        out += dst

    parallel(part, count, 11 * y.size)  # per output: 4 row copies, 4 products, 3 sums
    return y.reshape(*x.shape[:-2], ho, wo)


def _interp_axis(x: np.ndarray, axis: int, idx: np.ndarray, w: np.ndarray | None, dt: np.dtype,
                 per=False) -> np.ndarray:
    in_len = x.shape[axis]
    if per is False:
        per = _periodic(idx, w, in_len)
    if per is not None:
        if _is_linear_x2(*per) and in_len >= 2:
            return _linear_x2(x, axis, dt)
        return _interp_axis_periodic(x, axis, *per, dt)
    idx = np.clip(idx, 0, in_len - 1)
    if w is None:
        return np.take(x, idx[:, 0], axis=axis)
    shape = [1] * x.ndim
    shape[axis] = -1
    y = None
    for t in range(idx.shape[1]):
        wt = w[:, t]
        if not wt.any():
            continue
        term = np.take(x, idx[:, t], axis=axis)
        term *= wt.astype(dt).reshape(shape)
        if y is None:
            y = term
        else:
            y += term
    if y is None:
        shape_out = list(x.shape)
        shape_out[axis] = idx.shape[0]
        y = np.zeros(shape_out, dtype=dt)
    return y


def _is_linear_x2(s: int, rel: np.ndarray, w: np.ndarray | None) -> bool:
    """The half_pixel / pytorch_half_pixel bilinear x2 stencil: even outputs 0.25 x[i-1] + 0.75 x[i],
    odd outputs 0.75 x[i] + 0.25 x[i+1]."""
    return (s == 2 and w is not None and rel.shape == (2, 2) and rel.tolist() == [[-1, 0], [0, 1]]
            and w.tolist() == [[0.25, 0.75], [0.75, 0.25]])


def _linear_x2(x: np.ndarray, axis: int, dt: np.dtype) -> np.ndarray:
    """Bilinear x2 upscale along ``axis`` as a fixed stencil on shifted slices (no gathers, no padded
    copy): the edge outputs, whose clamped taps coincide, are the edge inputs themselves."""
    n = x.shape[axis]
    lead, trail = x.shape[:axis], x.shape[axis + 1:]
    x3 = x.reshape(math.prod(lead), n, math.prod(trail))
    y = empty((x3.shape[0], n, 2, x3.shape[2]), dt)

    interleave = x3.shape[2] == 1
    # blocks of leading rows of about 128 KiB of input: the scaled copies and scratch stay in cache
    # and come from malloc's heap, not fresh pages (measured under load, whole-array passes ->
    # blocks: 16x64x64 x2 2.2 -> 0.9 ms, 16x128x128 x2 10.2 -> 3.9 ms, small inputs unchanged)
    block = max(1, (1 << 15) // max(1, n * x3.shape[2]))

    def rows(i: int, j: int) -> None:  # split over the kernel threads along the leading axes
        for b0 in range(i, j, block):
            b1 = min(j, b0 + block)
            xs, even, odd = x3[b0:b1], y[b0:b1, :, 0], y[b0:b1, :, 1]
            if interleave:
                # along the last axis even and odd outputs alternate: arithmetic into stride-2
                # outputs (and on a trailing axis of length 1) runs 3x slower than on 2-D
                # contiguous scratch followed by one strided copy
                xs, dst = xs[..., 0], (even[..., 0], odd[..., 0])
                even, odd = np.empty_like(xs), np.empty_like(xs)
            q = np.multiply(xs, dt.type(0.25))
            m = np.multiply(xs, dt.type(0.75))
            np.add(q[:, :-1], m[:, 1:], out=even[:, 1:])
            np.add(m[:, :-1], q[:, 1:], out=odd[:, :-1])
            even[:, 0] = xs[:, 0]
            odd[:, -1] = xs[:, -1]
            if interleave:
                dst[0][...] = even
                dst[1][...] = odd

    parallel(rows, x3.shape[0], 2 * y.size)
    return y.reshape(*lead, 2 * n, *trail)


def _interp_axis_periodic(x: np.ndarray, axis: int, s: int, rel: np.ndarray, w: np.ndarray | None,
                          dt: np.dtype) -> np.ndarray:
    """Integer upscale along ``axis`` without gathers: output phase p (positions p, p+s, ...) is a fixed
    weighted sum of the edge-padded input shifted by ``rel[p]``; each term is one strided slice."""
    n = x.shape[axis]
    lo = max(0, -int(rel.min()))
    hi = max(0, int(rel.max()))
    xp = x
    if lo or hi:
        width = [(0, 0)] * x.ndim
        width[axis] = (lo, hi)
        xp = np.pad(x, width, mode="edge")
    shape = list(x.shape)
    shape[axis] = n * s
    y = np.empty(shape, dtype=dt)

    def along(arr: np.ndarray, sl: slice) -> np.ndarray:
        index = [slice(None)] * arr.ndim
        index[axis] = sl
        return arr[tuple(index)]

    tmp = None
    for p in range(s):
        dst = along(y, slice(p, None, s))
        first = True
        for t in range(rel.shape[1]):
            wt = 1.0 if w is None else float(w[p, t])
            if w is not None and wt == 0.0:
                continue
            src = along(xp, slice(lo + int(rel[p, t]), lo + int(rel[p, t]) + n))
            if first:
                if wt == 1.0:
                    dst[...] = src
                else:
                    np.multiply(src, dt.type(wt), out=dst)
                first = False
            else:
                if tmp is None:
                    tmp = np.empty(src.shape, dtype=dt)
                np.multiply(src, dt.type(wt), out=tmp)
                dst += tmp
        if first:
            dst[...] = 0
    return y


def resize(op: str, x: np.ndarray, scales: list[float] | None, sizes: list[int] | None,
           axes: list[int] | None, roi: list[float] | None, mode: str, ctm: str, nearest_mode: str,
           cubic_a: float = -0.75, exclude_outside: bool = False, extrapolation: float = 0.0,
           keep_policy: str = "stretch", antialias: bool = False) -> np.ndarray:
    r = x.ndim
    if ctm not in _CTMS:
        raise fail(op, f"unknown coordinate_transformation_mode {ctm!r}")
    if mode not in ("nearest", "linear", "cubic"):
        raise fail(op, f"unknown mode {mode!r}")
    if antialias and mode == "nearest":
        raise fail(op, "antialias is not defined for mode 'nearest'")
    if axes is None:
        axes = list(range(r))
    else:
        axes = [norm_axis(op, a, r, "axes") for a in axes]
    n_ax = len(axes)
    full_roi: list[tuple[float, float]] | None = None
    if roi is not None and len(roi):
        if len(roi) != 2 * n_ax:
            raise fail(op, f"roi has {len(roi)} values, expected {2 * n_ax}")
        full_roi = [(0.0, 1.0)] * r
        for i, a in enumerate(axes):
            full_roi[a] = (float(roi[i]), float(roi[n_ax + i]))
    if sizes is not None:
        if len(sizes) != n_ax:
            raise fail(op, f"sizes {sizes} must have {n_ax} values")
        out = list(x.shape)
        for i, a in enumerate(axes):
            out[a] = int(sizes[i])
        sc = [out[i] / x.shape[i] if x.shape[i] else 1.0 for i in range(r)]
        if keep_policy != "stretch":
            vals = [sc[a] for a in axes]
            if keep_policy == "not_larger":
                s = min(vals)
            elif keep_policy == "not_smaller":
                s = max(vals)
            else:
                raise fail(op, f"unknown keep_aspect_ratio_policy {keep_policy!r}")
            sc = [s if i in axes else 1.0 for i in range(r)]
            out = [int(s * x.shape[i] + 0.5) if i in axes else x.shape[i] for i in range(r)]
    elif scales is not None:
        if len(scales) != n_ax:
            raise fail(op, f"scales {scales} must have {n_ax} values")
        sc = [1.0] * r
        for i, a in enumerate(axes):
            sc[a] = float(scales[i])
        if any(not 0 < s < math.inf for s in sc):
            raise fail(op, f"scales {scales} must be positive and finite")
        out = [int(math.floor(sc[i] * x.shape[i])) for i in range(r)]
    else:
        raise fail(op, "one of scales or sizes is required")
    if any(o < 0 for o in out):
        raise fail(op, f"invalid output shape {out}")

    dt = x.dtype
    # integers are interpolated in float32 (float64 past 16 bits) and truncated back (onnxruntime's
    # cast; ONNX leaves the rounding open)
    work = x if dt.kind == "f" else x.astype(np.float32 if dt.itemsize <= 2 else np.float64)
    # Axes are independent; order them for speed: shrinking axes first, growing ones last, and the
    # last axis (whose gather is the slow, non-contiguous one) on the smaller of its two sides.
    last = r - 1
    downs = sorted((a for a in axes if out[a] <= x.shape[a]), key=lambda a: a == last)
    ups = sorted((a for a in axes if out[a] > x.shape[a]), key=lambda a: a != last)
    moving = [a for a in axes if not (math.isclose(sc[a], 1.0) and out[a] == x.shape[a])]
    passes = downs + ups
    if (mode == "linear" and not antialias and not exclude_outside and ctm != "tf_crop_and_resize"
            and len(moving) == 2 and all(out[a] and x.shape[a] for a in moving)):
        # two axes resized together, as onnxruntime's bilinear kernel does
        ay, ax = moving
        taps = []
        for a in (ay, ax):
            taps.append(_border_axis_taps(mode, nearest_mode, ctm, x.shape[a], out[a], sc[a], cubic_a))
        if all(t is not None for t in taps):
            work = _bilinear_2d(work, (ay, ax), tuple(taps), work.dtype)
            passes = []
    for a in passes:
        roi_a = full_roi[a] if full_roi is not None else None
        if (math.isclose(sc[a], 1.0) and out[a] == work.shape[a]
                and (roi_a is None or (math.isclose(roi_a[0], 0.0) and math.isclose(roi_a[1], 1.0)))):
            continue
        if work.shape[a] == 0 or out[a] == 0:
            shape = list(work.shape)
            shape[a] = out[a]
            work = np.zeros(shape, dtype=work.dtype)
            continue
        in_len = work.shape[a]
        xo, idx, w, per = _axis_plan(mode, nearest_mode, ctm, in_len, out[a], sc[a],
                                     None if roi_a is None else tuple(roi_a), cubic_a, exclude_outside,
                                     antialias)
        work = _interp_axis(work, a, idx, w, work.dtype, per)
        if ctm == "tf_crop_and_resize":
            bad = (xo < 0) | (xo > in_len - 1)
            if bad.any():
                sl = [slice(None)] * r
                sl[a] = bad
                work[tuple(sl)] = extrapolation
    if work is x:
        return x.copy()
    if dt.kind != "f":
        info = np.iinfo(dt) if dt.kind in "iu" else None
        work = np.trunc(work) if mode == "linear" else np.rint(work)
        if info is not None:
            work = np.clip(work, info.min, info.max)
        return work.astype(dt)
    return work


def _scales_sizes(op: str, inputs, si: int, zi: int):
    scales = opt(inputs, si)
    sizes = opt(inputs, zi) if zi is not None else None
    scales_l = [float(v) for v in scales.reshape(-1)] if scales is not None and scales.size else None
    sizes_l = as_int_list(op, sizes, "sizes") if sizes is not None and sizes.size else None
    if scales_l is not None and sizes_l is not None:
        raise fail(op, "only one of scales and sizes may be given")
    return scales_l, sizes_l


@register("Resize")
def k_resize(inputs: list, attrs: dict, opset: int) -> list:
    op = "Resize"
    x = need(op, inputs, 0)
    mode = sattr(attrs, "mode", "nearest")
    if opset < 11:
        scales, sizes = _scales_sizes(op, inputs, 1, None)
        return [resize(op, x, scales, sizes, None, None, mode, "asymmetric", "simple")]
    scales, sizes = _scales_sizes(op, inputs, 2, 3)
    roi = opt(inputs, 1)
    roi_l = [float(v) for v in roi.reshape(-1)] if roi is not None and roi.size else None
    ctm = sattr(attrs, "coordinate_transformation_mode", "half_pixel")
    if ctm != "tf_crop_and_resize":
        roi_l = None
    return [resize(op, x, scales, sizes, attrs.get("axes"), roi_l, mode, ctm,
                   sattr(attrs, "nearest_mode", "round_prefer_floor"),
                   float(attrs.get("cubic_coeff_a", -0.75)), bool(iattr(attrs, "exclude_outside", 0)),
                   float(attrs.get("extrapolation_value", 0.0)),
                   sattr(attrs, "keep_aspect_ratio_policy", "stretch"), bool(iattr(attrs, "antialias", 0)))]


@register("Upsample")
def k_upsample(inputs: list, attrs: dict, opset: int) -> list:
    op = "Upsample"
    x = need(op, inputs, 0)
    mode = sattr(attrs, "mode", "nearest")
    if mode == "bilinear":
        mode = "linear"
    if opset < 9:
        scales = attrs.get("scales")
        if scales is None:
            if "height_scale" in attrs:  # opset 1
                scales = [1.0, 1.0, float(attrs["height_scale"]), float(attrs["width_scale"])]
            else:
                raise fail(op, "attribute scales is required")
        scales = [float(v) for v in scales]
    else:
        s = need(op, inputs, 1, "scales")
        scales = [float(v) for v in s.reshape(-1)]
    if any(s < 1 for s in scales):
        raise fail(op, f"scales {scales} must be >= 1")
    return [resize(op, x, scales, None, None, None, mode, "asymmetric", "simple")]
