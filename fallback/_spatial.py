"""Shared geometry for convolution and pooling: attributes, padding, output sizes, padded copies."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._registry import fail, ints_attr, sattr
from ._runtime import empty, parallel

AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


@dataclass
class Geometry:
    kernel: list[int]
    strides: list[int]
    dilations: list[int]
    pad_begin: list[int]
    pad_end: list[int]  # explicit end padding (what counts as "padding" for count_include_pad)
    extra_end: list[int]  # further padding needed by ceil_mode windows that run past the end
    out: list[int]

    @property
    def padded(self) -> bool:
        return any(self.pad_begin) or any(self.pad_end) or any(self.extra_end)


def spatial_attrs(op: str, attrs: dict[str, Any], nsp: int, kernel: list[int] | None):
    """kernel, strides, dilations, pads (begin+end) and auto_pad, validated."""
    ks = ints_attr(attrs, "kernel_shape")
    if ks is None:
        ks = kernel
    if ks is None:
        raise fail(op, "attribute kernel_shape is required")
    if kernel is not None and list(ks) != list(kernel):
        raise fail(op, f"kernel_shape {ks} does not match the weight's spatial shape {kernel}")
    strides = ints_attr(attrs, "strides") or [1] * nsp
    dil = ints_attr(attrs, "dilations") or [1] * nsp
    pads = ints_attr(attrs, "pads") or [0] * (2 * nsp)
    auto_pad = sattr(attrs, "auto_pad", "NOTSET") or "NOTSET"
    if len(ks) != nsp:
        raise fail(op, f"kernel_shape {ks} has {len(ks)} dims but the input has {nsp} spatial dims")
    if len(strides) != nsp or len(dil) != nsp or len(pads) != 2 * nsp:
        raise fail(op, f"strides {strides}, dilations {dil} or pads {pads} do not match {nsp} spatial dims")
    if auto_pad not in AUTO_PADS:
        raise fail(op, f"unknown auto_pad {auto_pad!r}")
    if min(ks) < 1 or min(strides) < 1 or min(dil) < 1:
        raise fail(op, f"kernel_shape {ks}, strides {strides} and dilations {dil} must be positive")
    if min(pads) < 0:
        raise fail(op, f"pads {pads} must not be negative")
    return list(ks), list(strides), list(dil), list(pads), auto_pad


def geometry(op: str, in_shape: tuple[int, ...], attrs: dict[str, Any], kernel: list[int] | None = None,
             ceil_mode: bool = False) -> Geometry:
    nsp = len(in_shape)
    ks, strides, dil, pads, auto_pad = spatial_attrs(op, attrs, nsp, kernel)
    pb, pe, extra, out = [], [], [], []
    for i in range(nsp):
        n, k, s, d = in_shape[i], ks[i], strides[i], dil[i]
        dk = (k - 1) * d + 1
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            o = -(-n // s)
            total = max(0, (o - 1) * s + dk - n)
            small = total // 2
            b, e = (small, total - small) if auto_pad == "SAME_UPPER" else (total - small, small)
        else:
            b, e = (0, 0) if auto_pad == "VALID" else (pads[i], pads[i + nsp])
            span = n + b + e - dk
            if span < 0:
                raise fail(op, f"kernel extent {dk} (kernel {k}, dilation {d}) is larger than the padded "
                               f"input {n + b + e} on spatial axis {i}")
            if ceil_mode:
                o = -(-span // s) + 1
                if (o - 1) * s >= n + b:  # the last window must start inside the input or the left pad
                    o -= 1
            else:
                o = span // s + 1
        if o < 1:
            raise fail(op, f"output size {o} on spatial axis {i} is not positive")
        pb.append(b)
        pe.append(e)
        extra.append(max(0, (o - 1) * s + dk - (n + b + e)))
        out.append(o)
    return Geometry(ks, strides, dil, pb, pe, extra, out)


def transpose_geometry(op: str, in_shape: tuple[int, ...], attrs: dict[str, Any], kernel: list[int]):
    """ConvTranspose: (strides, dilations, output_padding, pad_begin, pad_end, out) for spatial input
    ``in_shape``, with pads resolved from ``pads``, ``auto_pad`` or ``output_shape``."""
    nsp = len(in_shape)
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
        n, s, d, k = in_shape[i], strides[i], dil[i], kernel[i]
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
    return strides, dil, outpad, pb, pe, out


def pad_spatial(x: np.ndarray, begin: list[int], end: list[int], value: Any = 0) -> np.ndarray:
    """Copy of ``x`` (N, C, *spatial) padded on the spatial axes with a constant."""
    if not any(begin) and not any(end):
        return x
    shape = x.shape[:2] + tuple(n + b + e for n, b, e in zip(x.shape[2:], begin, end))
    if value == 0:
        out = np.zeros(shape, dtype=x.dtype)
    else:
        out = np.full(shape, value, dtype=x.dtype)
    out[(slice(None), slice(None)) + tuple(slice(b, b + n) for b, n in zip(begin, x.shape[2:]))] = x
    return out


def tap_slices(tap: tuple[int, ...], out: list[int], strides: list[int], dil: list[int]) -> tuple:
    """Index selecting, for kernel offset ``tap``, the input element of every output position."""
    return (slice(None), slice(None)) + tuple(
        slice(t * d, t * d + (o - 1) * s + 1, s) for t, o, s, d in zip(tap, out, strides, dil))


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)




def phase_planes(x: np.ndarray, pad_begin: list[int], out: list[int], strides: list[int], dil: list[int],
                 kernel: list[int], fill: Any = 0) -> tuple[np.ndarray, list[tuple[int, int, int]], int]:
    """2-D helper for sliding-window kernels: the input, padded with ``fill``, split into its
    stride x stride phases (one phase when the stride is 1), each a plane of width ``wq`` flattened.

    Kernel tap (i, j) then reads phase ``(a, b)`` at flat offset ``o`` for all outputs at once:
    ``flat[a, b, :, :, o:o + out[0] * wq]`` is one unit-stride slice per (batch, channel) plane,
    holding the tap's value for every output position (plus ``wq - out[1]`` columns per row past the
    output's width, to be dropped). Returns ``(flat, [(a, b, o) per tap, row-major], wq)``.
    """
    n, c, h, wd = x.shape
    geometry = (h, wd, tuple(pad_begin), tuple(out), tuple(strides), tuple(dil), tuple(kernel))
    phases_h, phases_w, hq, wq, copies, offsets = phase_plan(*geometry)
    shape = (len(phases_h), len(phases_w), n, c, hq, wq)
    planes = empty(shape, x.dtype)
    borders = _borders(*geometry)
    if borders is None:
        planes.fill(fill)

    def channels(c0: int, c1: int) -> None:
        for ai, bi, rows, cols in borders or ():  # only what no copy writes: one pass fewer
            planes[ai, bi, :, c0:c1, rows, cols] = fill
        for ai, bi, dst, src in copies:
            planes[ai, bi, :, c0:c1, dst[0], dst[1]] = x[:, c0:c1, src[0], src[1]]

    parallel(channels, c, x.size)
    return planes.reshape(len(phases_h), len(phases_w), n, c, hq * wq), list(offsets), wq


@functools.lru_cache(maxsize=512)
def phase_plan(h: int, wd: int, pad_begin: tuple, out: tuple, strides: tuple, dil: tuple, kernel: tuple):
    """The index arithmetic of ``phase_planes`` (pure in the shapes, so computed once per shape):
    phases, plane size, the (phase, destination, source) slices to copy and the taps' offsets."""
    kh, kw = kernel
    (sh, sw), (dh, dw), (oh, ow), (ph, pw) = strides, dil, out, pad_begin
    off_h = [(i * dh) // sh for i in range(kh)]
    off_w = [(j * dw) // sw for j in range(kw)]
    phases_h = sorted({(i * dh) % sh for i in range(kh)})
    phases_w = sorted({(j * dw) % sw for j in range(kw)})
    hq = oh + max(off_h) + 1
    wq = ow + max(off_w)
    copies = []
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
            copies.append((ai, bi, (slice(r0, r1), slice(c0, c1)),
                           (slice(a + sh * r0 - ph, a + sh * (r1 - 1) - ph + 1, sh),
                            slice(b + sw * c0 - pw, b + sw * (c1 - 1) - pw + 1, sw))))
    offsets = tuple((phases_h.index((i * dh) % sh), phases_w.index((j * dw) % sw), off_h[i] * wq + off_w[j])
                    for i in range(kh) for j in range(kw))
    return tuple(phases_h), tuple(phases_w), hq, wq, tuple(copies), offsets


@functools.lru_cache(maxsize=512)
def _borders(*geometry: Any) -> tuple[tuple[int, int, slice, slice], ...] | None:
    """The (phase, rows, columns) regions of ``phase_planes`` that no copy of the input writes: the
    padding, to be filled. None when the padding is over a tenth of the planes: several small fills
    then cost more than one fill of everything (measured under load: a 16x128x128 3x3 stride-1
    input 110 -> 93 us with border fills, 240x12x80 5x5 125 -> 150-250 us)."""
    phases_h, phases_w, hq, wq, copies, _ = phase_plan(*geometry)
    inside = {(ai, bi): dst for ai, bi, dst, _ in copies}
    copied = sum((d[0].stop - d[0].start) * (d[1].stop - d[1].start) for d in inside.values())
    if copied < 0.9 * len(phases_h) * len(phases_w) * hq * wq:
        return None
    regions = []
    for ai in range(len(phases_h)):
        for bi in range(len(phases_w)):
            dst = inside.get((ai, bi))
            if dst is None:
                regions.append((ai, bi, slice(0, hq), slice(0, wq)))
                continue
            (r0, r1), (c0, c1) = (dst[0].start, dst[0].stop), (dst[1].start, dst[1].stop)
            regions += [(ai, bi, rows, cols) for rows, cols in (
                (slice(0, r0), slice(0, wq)), (slice(r1, hq), slice(0, wq)),
                (slice(r0, r1), slice(0, c0)), (slice(r0, r1), slice(c1, wq))) if
                rows.stop > rows.start and cols.stop > cols.start]
    return tuple(regions)


def drop_columns(y: np.ndarray, out: list[int], wq: int, copy: bool = True) -> np.ndarray:
    """(N, C, out[0] * wq) rows computed on phase planes -> contiguous (N, C, out[0], out[1]); with
    ``copy=False`` the (possibly non-contiguous) view, for a caller that copies it anyway."""
    y = y.reshape(y.shape[0], y.shape[1], out[0], wq)
    if wq == out[1] or not copy:
        return y[..., :out[1]]
    return np.ascontiguousarray(y[..., :out[1]])
