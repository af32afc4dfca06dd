"""Conv and ConvTranspose.

* 1x1 convolutions (any stride, no padding): a plain (batched) GEMM on the input, no im2col.
* 2-D depthwise (one input channel per group, any multiplier): the padded input split into stride
  phases and flattened (``phase_planes``), so every kernel tap is one contiguous slice; the taps are
  gathered per cache-sized channel block (the taps of one phase plane form a regular grid of
  offsets: one strided-view copy each, see ``_tap_grids``) and summed by one batched BLAS call; large
  planes in bands of output rows. Other ranks use a tap loop on strided slices.
* ungrouped 2-D convolutions whose column matrix is small (at most 4 MiB) and that are strided or have
  32+ input channels: im2col of the whole output and one GEMM (``_conv_full_cols_plan``).
* other ungrouped 2-D convolutions with 8+ input channels: one GEMM per kernel tap on the phase planes
  (each tap a BLAS-ready shifted view, no im2col), accumulated over cache-sized column bands; with
  fewer input channels (stems), im2col on the phase planes (unit-stride tap copies) and one GEMM.
* everything else: im2col (one copy out of a strided window view, built a band of output rows at a
  time when large) and one batched BLAS GEMM over the groups.
* ConvTranspose: one GEMM (W^T X) then a scatter-add of the kernel taps into the output (col2im), or
  a pure interleave when stride == kernel without overlap or padding.

float16 runs in float32 and float32 never becomes float64; the bias and a fused activation are
applied in place on the output (the phase-plane paths fold the bias into the copy that drops their
padding columns).

Inside a CPU-path run the GEMMs and the GEMM-heavy splits choose how to use the kernel threads by
timing (``_runtime.gemm_site``, ``_runtime.split_site``).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ._registry import NODE_KERNELS, RUN_TIME, Kernel, fail, half_via_float32, iattr, need, opt, register
from ._runtime import current_threads, empty, gemm_site, matmul, parallel, split_site, zeros
from ._spatial import drop_columns, geometry, pad_spatial, phase_plan, phase_planes, tap_slices, transpose_geometry
from .elementwise import Activation, activation_function, apply_activation, then

ConvRun = Callable[[np.ndarray], np.ndarray]


def _float_like(op: str, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The weight in the input's dtype (a float64 initializer must not promote a float32 graph)."""
    if w.dtype != x.dtype:
        w = w.astype(x.dtype)
    return w


def _bias(op: str, b: np.ndarray | None, m: int, ndim: int, dtype: np.dtype) -> np.ndarray | None:
    """The bias shaped (1, M, 1, ...) to broadcast over an (N, M, spatial...) output."""
    if b is None:
        return None
    if b.size != m:
        raise fail(op, f"bias has {b.size} elements, expected {m} (one per output channel)")
    return b.reshape((1, m) + (1,) * (ndim - 2)).astype(dtype, copy=False)


def _flat_bias(bias: np.ndarray | None) -> np.ndarray | None:
    """A bias from :func:`_bias` as (M,)."""
    return None if bias is None else bias.reshape(-1)


_EPILOGUE_BLOCK_BYTES = 512 << 10


def _epilogue(y: np.ndarray, b: np.ndarray | None, act: Activation | None) -> np.ndarray:
    """``act(y + b)`` (``b`` from :func:`_bias`, ``act`` from ``activation_function``), contiguous,
    in one pass per channel block while it is in cache, split over the kernel threads by output
    channel. ``y`` (N, M, spatial...) is written in place when it is contiguous; the phase-plane
    paths hand in a view with their padding columns still in place, and the result is then a new
    array."""
    in_place = y.flags.c_contiguous
    if in_place and b is None and act is None:
        return y
    res = y if in_place else empty(y.shape, y.dtype)

    # channel blocks of about _EPILOGUE_BLOCK_BYTES: the bias pass, the activation's passes and its
    # temporaries stay in cache (measured under load, 1x1 conv 16->32 at 160x160 with HardSwish:
    # 6.5 -> 3.0 ms; single-pass Relu epilogues unchanged at this size, slower with smaller blocks)
    block = max(1, _EPILOGUE_BLOCK_BYTES // max(1, y[:, :1].nbytes))

    def part(c0: int, c1: int) -> None:
        for b0 in range(c0, c1, block):
            b1 = min(c1, b0 + block)
            src, dst = y[:, b0:b1], res[:, b0:b1]
            if b is not None:
                np.add(src, b[:, b0:b1], out=dst)
            elif not in_place:
                if act is not None:  # the copy that drops padding columns is the activation's pass
                    act(src, dst)
                    continue
                np.copyto(dst, src)
            if act is not None:
                apply_activation(dst, act)

    parallel(part, y.shape[1], y.size * (1 + (b is not None) + 3 * (act is not None)))  # passes per element
    return res


def _with_bias_column(wm: np.ndarray, b: np.ndarray | None) -> tuple[np.ndarray, int]:
    """The (M, K) GEMM weights ``wm`` with the bias (M,) appended as column K, and the GEMM depth:
    multiplied by a row of ones in the column matrix, the bias is added inside the GEMM instead of
    in a pass over the output (which for a layer that pads its planes is also the pass that drops
    the padding columns). Without a bias, ``wm`` (contiguous) and K."""
    if b is None:
        return np.ascontiguousarray(wm), wm.shape[1]
    return np.ascontiguousarray(np.concatenate([wm, b.reshape(-1, 1).astype(wm.dtype)], axis=1)), wm.shape[1] + 1


def _depthwise_plan(w: np.ndarray, mult: int, pb: list[int], pe: list[int], out: list[int],
                    strides: list[int], dil: list[int]) -> ConvRun:
    """Depthwise conv (one input channel per group, any rank) as a sum of per-channel scaled shifted
    slices of the padded input."""
    m = w.shape[0]
    nsp = len(out)
    kernel = w.shape[2:]
    taps = [(tap_slices(tap, out, strides, dil), w.reshape(m, -1)[:, t].reshape((m,) + (1,) * nsp))
            for t, tap in enumerate(np.ndindex(*kernel))]

    def run(x: np.ndarray) -> np.ndarray:
        xp = pad_spatial(x, pb, pe)
        if mult > 1:
            xp = np.repeat(xp, mult, axis=1)
        y = np.empty((xp.shape[0], m, *out), dtype=xp.dtype)
        tmp = np.empty_like(y)
        for t, (sl, wt) in enumerate(taps):
            if t == 0:
                np.multiply(xp[sl], wt, out=y)
            else:
                np.multiply(xp[sl], wt, out=tmp)
                y += tmp
        return y

    return run


def _depthwise2d_plan(x_shape: tuple[int, ...], dtype: np.dtype, w: np.ndarray, b: np.ndarray | None, mult: int,
                      pb: list[int], out: list[int], strides: list[int], dil: list[int]) -> ConvRun:
    """2-D depthwise conv on flattened phase planes (see ``phase_planes``): every kernel tap is one
    contiguous slice for all planes at once, so the work is long unit-stride loops or BLAS calls.
    The bias ``b`` (M,) or None is added inside the GEMMs (see ``_with_bias_column``)."""
    n, c, h, wd = x_shape
    m = c * mult
    if n == 0 or m == 0:
        return lambda x: np.empty((n, m, *out), dtype=dtype)
    kernel = tuple(w.shape[2:])
    _, phases_w, hq, wq, _, offsets = phase_plan(h, wd, tuple(pb), tuple(out), tuple(strides), tuple(dil), kernel)
    length = out[0] * wq
    ktaps = len(offsets)
    wv = w.reshape(m, ktaps)

    def planes(x: np.ndarray) -> np.ndarray:
        if mult > 1:
            x = np.repeat(x, mult, axis=1)
        return phase_planes(x, pb, out, strides, dil, list(kernel))[0]

    # gather the taps of a cache-sized block (channels x output rows) into columns; one batched BLAS
    # call per block does the sums. Large planes are cut into bands of output rows so a block's
    # columns stay in cache; this replaced a loop of two ufunc passes per tap for planes over 16384
    # pixels (0.83-1.03x its time on MobileNet/selfie shapes from 7x7 to 256x256, 1-thread CPU time
    # interleaved under load: within noise or faster, and one code path instead of two)
    isz = np.dtype(dtype).itemsize
    per_row = n * ktaps * wq * isz
    rows = max(1, min(out[0], _COLS_BYTES // per_row))
    nbands = -(-out[0] // rows)
    cb = max(1, min(_COLS_BYTES // (per_row * rows), -(-m // current_threads()) if nbands == 1 else m))
    nblocks = -(-m // cb)
    grids, perm = _tap_grids(offsets, kernel)
    wb, depth = _with_bias_column(wv[:, perm], b)
    wb = wb.reshape(m, 1, depth)
    plane, sb = hq * wq, len(phases_w)

    def run_gemm(x: np.ndarray) -> np.ndarray:
        flat = np.ascontiguousarray(planes(x))
        y = empty((n, m, 1, length), dtype)

        def blocks(k0: int, k1: int) -> None:
            cols = np.empty((n, min(cb, m), depth, min(rows, out[0]) * wq), dtype=dtype)
            cols[:, :, ktaps:] = 1  # the bias row (when there is one): never overwritten
            for k in range(k0, k1):
                blk, band = divmod(k, nbands)
                c0, c1 = blk * cb, min(m, blk * cb + cb)
                l0, l1 = band * rows * wq, min(out[0], band * rows + rows) * wq
                cc = cols[:, :c1 - c0, :, :l1 - l0]
                for ai, bi, o, nr, nc, rs, cs, t0 in grids:
                    # the taps of one phase plane are a (rows x cols) grid of offsets: one copy of a
                    # strided window view (over the contiguous ``flat``) gathers them all
                    view = np.ndarray((n, c1 - c0, nr, nc, l1 - l0), dtype=dtype, buffer=flat,
                                      offset=(((ai * sb + bi) * n * m + c0) * plane + o + l0) * isz,
                                      strides=(m * plane * isz, plane * isz, rs * isz, cs * isz, isz))
                    cc[:, :, t0:t0 + nr * nc].reshape(n, c1 - c0, nr, nc, l1 - l0)[...] = view
                np.matmul(wb[c0:c1], cc, out=y[:, c0:c1, :, l0:l1])

        parallel(blocks, nblocks * nbands, 2 * n * m * ktaps * length)
        return drop_columns(y.reshape(n, m, length), out, wq, copy=False)

    return run_gemm


@functools.lru_cache(maxsize=256)
def _tap_grids(offsets: tuple[tuple[int, int, int], ...], kernel: tuple[int, int]):
    """Group the taps of ``phase_planes`` by phase plane. Within one plane the taps are a regular
    grid of flat offsets ``o + r * rs + c * cs``; returns ``[(a, b, o, rows, cols, rs, cs, first
    column index)]`` and the permutation taking the grouped column order to row-major tap order."""
    kh, kw = kernel
    groups: dict[tuple[int, int], list[int]] = {}
    for t, (ai, bi, _) in enumerate(offsets):
        groups.setdefault((ai, bi), []).append(t)
    grids, perm = [], []
    for (ai, bi), taps in groups.items():
        rows = sorted({t // kw for t in taps})
        cols = sorted({t % kw for t in taps})
        o0 = offsets[taps[0]][2]
        rs = offsets[rows[1] * kw + cols[0]][2] - o0 if len(rows) > 1 else 0
        cs = offsets[rows[0] * kw + cols[1]][2] - o0 if len(cols) > 1 else 0
        order = [r * kw + c for r in rows for c in cols]
        if sorted(order) != sorted(taps) or any(
                offsets[r * kw + c][2] != o0 + ri * rs + ci * cs
                for ri, r in enumerate(rows) for ci, c in enumerate(cols)):
            # not a grid (cannot happen for phase planes, kept as a safe fallback): one tap per copy
            grids.extend((ai, bi, offsets[t][2], 1, 1, 0, 0, len(perm) + k) for k, t in enumerate(taps))
            perm.extend(taps)
            continue
        grids.append((ai, bi, o0, len(rows), len(cols), rs, cs, len(perm)))
        perm.extend(order)
    perm_a = np.array(perm)
    perm_a.setflags(write=False)  # shared through the cache
    return tuple(grids), perm_a


def _windows(xp: np.ndarray, kernel: list[int], out: list[int], strides: list[int], dil: list[int]) -> np.ndarray:
    """The (N, C, *kernel, *out) strided window view of the padded input ``xp`` (read-only)."""
    nsp = len(kernel)
    sp = xp.strides[2:]
    return as_strided(
        xp,
        shape=(*xp.shape[:2], *kernel, *out),
        strides=(*xp.strides[:2], *(sp[i] * dil[i] for i in range(nsp)), *(sp[i] * strides[i] for i in range(nsp))),
        writeable=False,
    )


def _im2col(xp: np.ndarray, group: int, kernel: list[int], out: list[int], strides: list[int],
            dil: list[int]) -> np.ndarray:
    """(N, group, Cg * prod(kernel), prod(out)) column matrix of the padded input: one copy out of a
    strided window view."""
    n, c = xp.shape[:2]
    return _windows(xp, kernel, out, strides, dil).reshape(n, group, (c // group) * math.prod(kernel), math.prod(out))


# im2col matrices above this size are built and multiplied a band of output rows at a time: the
# column buffer stays cache- and heap-friendly instead of growing to 9x a large activation.
_COLS_BYTES = 1 << 20


def _conv_im2col(xp: np.ndarray, wg: np.ndarray, group: int, kernel: list[int], out: list[int],
                 strides: list[int], dil: list[int]) -> np.ndarray:
    n, c = xp.shape[:2]
    ksize = math.prod(kernel)
    rest = math.prod(out[1:])
    row_bytes = c * ksize * rest * xp.itemsize
    if n * out[0] * row_bytes <= _COLS_BYTES:
        return matmul(wg, _im2col(xp, group, kernel, out, strides, dil))
    y = empty((n, group, wg.shape[1], out[0] * rest), xp.dtype)
    rows = max(1, min(_COLS_BYTES // row_bytes, -(-n * out[0] // current_threads())))
    nbands = -(-out[0] // rows)
    dk0 = (kernel[0] - 1) * dil[0] + 1

    def bands(k0: int, k1: int) -> None:
        for k in range(k0, k1):
            b, r0 = divmod(k, nbands)
            r0 *= rows
            r1 = min(out[0], r0 + rows)
            band = xp[b:b + 1, :, r0 * strides[0]:(r1 - 1) * strides[0] + dk0]
            cols = _im2col(band, group, kernel, [r1 - r0, *out[1:]], strides, dil)
            np.matmul(wg, cols, out=y[b:b + 1, :, :, r0 * rest:r1 * rest])

    parallel(bands, n * nbands, y.size * wg.shape[-1])
    return y


# im2col of the whole output and one GEMM (``_conv_full_cols_plan``) where the column matrix is at
# most this size and the convolution is strided or has 32+ input channels. Measured per conv (2
# kernel threads, interleaved in one process, quiet machine), against the algorithm chosen before:
# YOLOv8n's 3x3 convs 0.59-0.90 of the time with the GEMM split over the pool (64->64 at 20x20
# 0.73, at 40x40 0.83; 128->128 at 10x10 0.59; its stride-2 convs 0.70-0.90) and 0.37-0.74 with
# BLAS's own threads (see ``_runtime.matmul``); the banded kernels stay faster on larger column
# matrices (U-Net-like 8->8 at 256x256, 18 MB: 1.46) and with 8-16 input channels at stride 1
# (16->16 at 80x80 1.24, 8->16 at 128x128 1.17).
_FULL_COLS_BYTES = 4 << 20
_FULL_COLS_MIN_CHANNELS = 32


def _full_cols_pays(c: int, strides: list[int], cols_bytes: int) -> bool:
    """Whether an ungrouped 2-D convolution runs as one GEMM on the whole column matrix (above)."""
    return cols_bytes <= _FULL_COLS_BYTES and (c >= _FULL_COLS_MIN_CHANNELS or any(s > 1 for s in strides))


def _conv_full_cols_plan(x_shape: tuple[int, ...], dtype: np.dtype, w: np.ndarray, b: np.ndarray | None,
                         pb: list[int], pe: list[int], out: list[int], strides: list[int],
                         dil: list[int]) -> ConvRun:
    """Ungrouped convolution as im2col of the whole output (one copy of a window view per image)
    and one GEMM per image, the bias ``b`` (M,) or None inside it (``_with_bias_column``); the GEMM
    threads as its call site has timed fastest (``_runtime.matmul``)."""
    n, c = x_shape[:2]
    m = w.shape[0]
    kernel = list(w.shape[2:])
    depth_w = c * math.prod(kernel)
    pixels = math.prod(out)
    wb, depth = _with_bias_column(w.reshape(m, depth_w), b)
    site = gemm_site()

    def run(x: np.ndarray) -> np.ndarray:
        win = _windows(pad_spatial(x, pb, pe), kernel, out, strides, dil)
        y = empty((n, m, pixels), dtype)
        rows = empty((depth, pixels), dtype)
        rows[depth_w:] = 1  # the bias row (when there is one)
        for i in range(n):
            rows[:depth_w].reshape(c, *kernel, *out)[...] = win[i]
            matmul(wb, rows, out=y[i], site=site)
        return y

    return run


# shifted-GEMM convolution: column bands of about this many bytes of input + output planes, and the
# fewest input channels (the GEMM depth of each tap) for which it beats im2col. Measured on the
# U-Net-like model: 24->8 channels dilated 3x3 at 256x256 15 -> 9-10 ms, 32->16 at 128x128
# 7.7 -> 4.5 ms, the rest within noise; with 3 input channels (stems) im2col's single deeper GEMM
# is faster.
_SHIFT_BAND_BYTES = 1 << 20
_SHIFT_MIN_CHANNELS = 8
# ...but up to this many input channels, when the output has as many channels or more, im2col on the
# phase planes (one GEMM of depth 9C per band, no accumulation passes) is faster. Measured per conv
# (3x3, 1-thread CPU, interleaved, under load; YOLOv8n and U-Net-like shapes), phase-cols / shifted:
# 8->8 and 8->16 0.66-0.76, 16->16 and 16->32 0.73-0.84, 32->32 and 32->64 0.77-0.92; where the
# output has fewer channels (24->8, 32->16) 1.02-1.06 and from 64 input channels 1.01-1.13.
_PHASE_COLS_MAX_CHANNELS = 32


def _shifted_gemm_pays(c: int, m: int) -> bool:
    """Whether an ungrouped 2-D convolution with ``c`` input and ``m`` output channels runs as
    shifted GEMMs rather than im2col on the phase planes (see the measurements above)."""
    return c >= _SHIFT_MIN_CHANNELS and (c > _PHASE_COLS_MAX_CHANNELS or m < c)


# shifted GEMMs with at most this many output channels stack the taps' weights: one GEMM per phase
# plane and band, (taps x M, C) @ X, then the taps' (M, band) slices of its result added in tap order
# ("kn2row"; the same dot products as one GEMM per tap, bit-equal where BLAS rounds them alike). Measured per conv,
# 2 kernel threads, against one GEMM per tap: 96->24 at 120x160 0.86, at 60x80 0.54-0.77, 24->8 at 256^2
# 0.60-0.77, 32->16 at 128^2 0.59-0.70, 64->32 at 80^2 0.56-0.76 (the pool split / BLAS's threads); on
# one thread 0.78-0.94, and 1.13 on 24->8 at 256^2.
_STACKED_TAPS_MAX_OUT = 32
_STACKED_BAND_BYTES = 4 << 20


def _conv_shifted_plan(x_shape: tuple[int, ...], dtype: np.dtype, w: np.ndarray, pb: list[int], out: list[int],
                       strides: list[int], dil: list[int]) -> ConvRun:
    """2-D ungrouped convolution without im2col: on ``phase_planes`` every kernel tap reads one
    contiguous slice of every input plane, a BLAS-ready (C, L) view, so the convolution is a sum
    of one GEMM per tap, W[:, :, tap] @ X_shifted, accumulated over cache-sized column bands; with
    few output channels the taps of one phase plane share one GEMM (see ``_STACKED_TAPS_MAX_OUT``)."""
    n, c, h, wd = x_shape
    m = w.shape[0]
    kernel = tuple(w.shape[2:])
    *_, wq, _, offsets = phase_plan(h, wd, tuple(pb), tuple(out), tuple(strides), tuple(dil), kernel)
    length = out[0] * wq
    ktaps = len(offsets)
    wt = np.ascontiguousarray(w.reshape(m, c, -1).transpose(2, 0, 1))
    isz = np.dtype(dtype).itemsize
    stacked = m <= _STACKED_TAPS_MAX_OUT
    per_column = (ktaps * m + c) if stacked else (c + 2 * m)
    band = max(64, min((_STACKED_BAND_BYTES if stacked else _SHIFT_BAND_BYTES) // (per_column * isz),
                       -(-n * length // current_threads())))
    nbands = -(-length // band)
    if stacked:
        # the taps of each phase plane (``_tap_grids``, in ``perm`` order) stacked: per plane (a, b,
        # first offset, offset span, first row, taps), each tap's (row, column shift) in the result
        grids, perm = _tap_grids(offsets, kernel)
        wall = np.ascontiguousarray(wt[perm].reshape(ktaps * m, c))
        groups, where = [], [(0, 0)] * ktaps
        for ai, bi, o0, nr, nc, rs, cs, t0 in grids:
            groups.append((ai, bi, o0, (nr - 1) * rs + (nc - 1) * cs, t0 * m, nr * nc))
            for i in range(t0, t0 + nr * nc):
                where[perm[i]] = (i * m, offsets[perm[i]][2] - o0)
        span = max(g[3] for g in groups)

    site = split_site()  # its bands are mostly GEMMs

    def run(x: np.ndarray) -> np.ndarray:
        flat = phase_planes(x, pb, out, strides, dil, list(kernel))[0]
        y = empty((n, m, length), dtype)

        def stacked_bands(k0: int, k1: int) -> None:
            z = np.empty((ktaps * m, min(band, length) + span), dtype=dtype)
            for k in range(k0, k1):
                b, l0 = divmod(k, nbands)
                l0 *= band
                l1 = min(length, l0 + band)
                cols = l1 - l0
                for ai, bi, lo, sp, r0, count in groups:
                    np.matmul(wall[r0:r0 + count * m], flat[ai, bi, b, :, lo + l0:lo + l1 + sp],
                              out=z[r0:r0 + count * m, :cols + sp])
                yb = y[b, :, l0:l1]
                for t in range(ktaps):
                    r, sh = where[t]
                    if t == 0:
                        np.copyto(yb, z[r:r + m, sh:sh + cols])
                    else:
                        yb += z[r:r + m, sh:sh + cols]

        def bands(k0: int, k1: int) -> None:
            tmp = np.empty((m, min(band, length)), dtype=dtype)
            for k in range(k0, k1):
                b, l0 = divmod(k, nbands)
                l0 *= band
                l1 = min(length, l0 + band)
                yb = y[b, :, l0:l1]
                tb = tmp[:, :l1 - l0]
                for t, (ai, bi, o) in enumerate(offsets):
                    src = flat[ai, bi, b, :, o + l0:o + l1]
                    if t == 0:
                        np.matmul(wt[t], src, out=yb)
                    else:
                        np.matmul(wt[t], src, out=tb)
                        yb += tb

        parallel(stacked_bands if stacked else bands, n * nbands, n * m * c * ktaps * length, site)
        return drop_columns(y, out, wq, copy=False)

    return run


def _conv_phase_cols_plan(x_shape: tuple[int, ...], dtype: np.dtype, w: np.ndarray, b: np.ndarray | None,
                          pb: list[int], out: list[int], strides: list[int], dil: list[int]) -> ConvRun:
    """2-D ungrouped convolution with few input channels: im2col on ``phase_planes``, where the taps
    of one phase plane are a regular grid of contiguous slices (one strided-view copy per grid and
    column band, unit-stride inner loops), then one GEMM of depth C x taps per band (plus a row of
    ones for the bias ``b``, see ``_with_bias_column``)."""
    n, c, h, wd = x_shape
    m = w.shape[0]
    kernel = tuple(w.shape[2:])
    _, phases_w, hq, wq, _, offsets = phase_plan(h, wd, tuple(pb), tuple(out), tuple(strides), tuple(dil), kernel)
    length = out[0] * wq
    ktaps = len(offsets)
    grids, perm = _tap_grids(offsets, kernel)
    wg, depth = _with_bias_column(w.reshape(m, c, ktaps)[:, :, perm].reshape(m, c * ktaps), b)
    isz = np.dtype(dtype).itemsize
    band = max(wq, min(_COLS_BYTES // (c * ktaps * isz), -(-n * length // current_threads())))
    nbands = -(-length // band)
    sb, plane = len(phases_w), hq * wq

    site = split_site()  # its bands are mostly GEMMs

    def run(x: np.ndarray) -> np.ndarray:
        flat = np.ascontiguousarray(phase_planes(x, pb, out, strides, dil, list(kernel))[0])
        y = empty((n, m, length), dtype)

        def bands(k0: int, k1: int) -> None:
            rows = np.empty((depth, min(band, length)), dtype=dtype)
            rows[c * ktaps:] = 1  # the bias row (when there is one): never overwritten
            cols = rows[:c * ktaps].reshape(c, ktaps, -1)
            for k in range(k0, k1):
                b, l0 = divmod(k, nbands)
                l0 *= band
                lb = min(length, l0 + band) - l0
                cc = cols[:, :, :lb]
                for ai, bi, o, nr, nc, rs, cs, t0 in grids:
                    view = np.ndarray((c, nr, nc, lb), dtype=dtype, buffer=flat,
                                      offset=(((ai * sb + bi) * n + b) * c * plane + o + l0) * isz,
                                      strides=(plane * isz, rs * isz, cs * isz, isz))
                    cc[:, t0:t0 + nr * nc].reshape(c, nr, nc, lb)[...] = view
                np.matmul(wg, rows[:, :lb], out=y[b, :, l0:l0 + lb])

        parallel(bands, n * nbands, n * m * c * ktaps * length, site)
        return drop_columns(y, out, wq, copy=False)

    return run


# ---- Winograd F(2x2, 3x3) ------------------------------------------------------------------

# weight transform G (4x3) of Winograd's F(2, 3); the input transform B^T and output transform A^T
# are written out as adds in _conv_winograd_plan
_WINOGRAD_G = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0.0, 0.0, 1.0]])
# tile rows per band: the band's transformed input and GEMM results (16 planes each) stay about this size
_WINOGRAD_BAND_BYTES = 1 << 20
# where Winograd beats the shifted GEMMs (1-thread, interleaved A/B of min times under load, YOLOv8n
# and PP-OCR shapes, Winograd / shifted): 32->32 at 40x40 0.84, 64->64 at 20x20 0.85 and at 40x40
# 0.53-0.78, 128->128 at 10x10 0.88; slower with fewer output than input channels (128->64 at 20x20
# 0.97-1.15, 256->64 at 10x10 1.09, 96->24 at 30x30 1.46), with few channels (16->16 at 80x80 1.6) and
# on little work (64->64 at 10x10 1.23)
_WINOGRAD_MIN_CHANNELS = 32
_WINOGRAD_MIN_WORK = 1 << 20  # input x output channels x output pixels


def _winograd_pays(c: int, m: int, kernel: list[int], strides: list[int], dil: list[int], out: list[int]) -> bool:
    """Whether an ungrouped 2-D convolution runs as Winograd F(2x2, 3x3) (see ``_conv_winograd_plan``)."""
    return (kernel == [3, 3] and strides == [1, 1] and dil == [1, 1] and _WINOGRAD_MIN_CHANNELS <= c <= m
            and c * m * out[0] * out[1] >= _WINOGRAD_MIN_WORK)


def _conv_winograd_plan(x_shape: tuple[int, ...], dtype: np.dtype, w: np.ndarray, pb: list[int],
                        out: list[int], direct: ConvRun) -> ConvRun:
    """3x3 stride-1 convolution as Winograd F(2x2, 3x3): each 2x2 block of outputs from a 4x4 tile of
    the padded input, transformed (B^T d B, adds only), multiplied per transform position by the
    transformed weights (G g G^T, made once): 16 GEMMs of depth C on a quarter of the pixels, 4 M C
    multiply-adds per pixel instead of 9 M C; then the inverse transform (A^T . A, adds only). Both
    transforms are separable and run as whole-plane adds of strided views, a band of tile rows at a
    time so the 16 planes stay in cache. Rounding: within fp32 of the direct sum (the transforms
    have coefficients 0, +-1 and +-1/2). The transforms mix a tile's inputs (an infinity would turn
    its neighbours' outputs into NaN), so an input that is not all finite (its sum is not finite:
    one reduction, also true of sums that overflow) runs on ``direct`` (the same convolution without
    Winograd), which keeps IEEE semantics."""
    n, c, h, wd = x_shape
    m = w.shape[0]
    oh, ow = out
    th, tw = -(-oh // 2), -(-ow // 2)
    hp, wp = 2 * th + 2, 2 * tw + 2
    u = np.einsum("ai,mcij,bj->abmc", _WINOGRAD_G, w.astype(np.float64), _WINOGRAD_G)
    u = np.ascontiguousarray(u.reshape(16, m, c).astype(dtype))
    pt, pl = pb
    r0, r1 = max(0, pt), min(hp, h + pt)  # the padded rows / columns the input fills
    c0, c1 = max(0, pl), min(wp, wd + pl)
    isz = np.dtype(dtype).itemsize
    tb = max(1, min(th, _WINOGRAD_BAND_BYTES // ((16 * (c + m) + 4 * c * 2) * tw * isz),
                    -(-n * th // current_threads())))
    nbands = -(-th // tb)

    site = split_site()  # its bands are mostly GEMMs

    def run(x: np.ndarray) -> np.ndarray:
        if not np.isfinite(np.sum(x)):
            return direct(x)
        xp = empty((n, c, hp, wp), dtype)
        for rows, cols in ((slice(0, r0), slice(None)), (slice(r1, hp), slice(None)),
                           (slice(r0, r1), slice(0, c0)), (slice(r0, r1), slice(c1, wp))):
            xp[:, :, rows, cols] = 0
        xp[:, :, r0:r1, c0:c1] = x[:, :, r0 - pt:r1 - pt, c0 - pl:c1 - pl]
        y = empty((n, m, 2 * th, 2 * tw), dtype)

        def bands(k0: int, k1: int) -> None:
            rr = np.empty((4, c, tb, wp), dtype=dtype)
            vv = np.empty((16, c, tb * tw), dtype=dtype)
            mm = np.empty((16, m, tb * tw), dtype=dtype)
            ss = np.empty((2, 4, m, tb * tw), dtype=dtype)
            for k in range(k0, k1):
                b, band = divmod(k, nbands)
                i0 = band * tb
                nt = min(th, i0 + tb) - i0
                size = nt * tw
                # B^T d: rows 0-2, 1+2, 2-1, 1-3 of each tile (rows 2i + r of the padded input)
                d = [xp[b, :, 2 * i0 + r:2 * (i0 + nt) + r:2] for r in range(4)]
                r_ = rr[:, :, :nt]
                np.subtract(d[0], d[2], out=r_[0])
                np.add(d[1], d[2], out=r_[1])
                np.subtract(d[2], d[1], out=r_[2])
                np.subtract(d[1], d[3], out=r_[3])
                # (B^T d) B: the same on columns 2j + s, all four row combinations at once
                e = [r_[..., s:s + 2 * tw - 1:2] for s in range(4)]
                v = vv[:, :, :size].reshape(4, 4, c, nt, tw)
                np.subtract(e[0], e[2], out=v[:, 0])
                np.add(e[1], e[2], out=v[:, 1])
                np.subtract(e[2], e[1], out=v[:, 2])
                np.subtract(e[1], e[3], out=v[:, 3])
                prod = mm[:, :, :size]
                np.matmul(u, vv[:, :, :size], out=prod)
                # A^T M: rows 0+1+2 and 1-2-3, then the same on columns, into the 2x2 output blocks
                pv = prod.reshape(4, 4, m, size)
                s_ = ss[:, :, :, :size]
                np.add(pv[0], pv[1], out=s_[0])
                s_[0] += pv[2]
                np.subtract(pv[1], pv[2], out=s_[1])
                s_[1] -= pv[3]
                sv = s_.reshape(2, 4, m, nt, tw)
                yv = y[b].reshape(m, th, 2, tw, 2)[:, i0:i0 + nt].transpose(2, 0, 1, 3, 4)  # (p, m, nt, tw, q)
                np.add(sv[:, 0], sv[:, 1], out=yv[..., 0])
                yv[..., 0] += sv[:, 2]
                np.subtract(sv[:, 1], sv[:, 2], out=yv[..., 1])
                yv[..., 1] -= sv[:, 3]

        parallel(bands, n * nbands, 4 * n * m * c * th * tw * 4, site)
        if 2 * th == oh and 2 * tw == ow:
            return y
        return y[:, :, :oh, :ow]

    return run


def _pointwise_plan(x_shape: tuple[int, ...], w: np.ndarray, group: int, out: list[int],
                    strides: list[int]) -> ConvRun:
    """1x1 convolution without padding: a (batched) GEMM on the input, no im2col."""
    n, c = x_shape[:2]
    m = w.shape[0]
    wg = w.reshape(group, m // group, c // group)
    cut = None
    if any(s != 1 for s in strides):
        cut = (slice(None), slice(None)) + tuple(slice(0, (o - 1) * s + 1, s) for o, s in zip(out, strides))
    site = gemm_site()
    if group == 1:
        wg = wg[0]
        if n == 1 and cut is None:
            return lambda x: matmul(wg, x.reshape(c, -1), site=site)
    shape = (n, c, -1) if group == 1 else (n, group, c // group, -1)
    return lambda x: matmul(wg, (x if cut is None else x[cut]).reshape(shape), site=site)


# ...up to this many output elements: measured (1-thread, interleaved, min times under load) 24->144 at
# 56x56 0.84-0.92 of the bias pass, 32->192 at 28x28 0.88, 16->72 at 64x64 0.87, 24->96 at 32x32
# 0.93, 64->384 at 14x14 0.93; larger outputs within noise or slower (16->96 at 112x112 0.94-1.05,
# 16->64 at 128x128 1.0-1.1)
_POINTWISE_BIAS_MAX_OUTPUT = 1 << 20


def _pointwise_bias_plan(x_shape: tuple[int, ...], w: np.ndarray, b: np.ndarray) -> ConvRun:
    """Ungrouped unit-stride 1x1 convolution of one image with more output than input channels and a
    bias (the expansion layers of inverted residual blocks): the bias is a column of the GEMM weights
    times a row of ones under a copy of the input (see ``_with_bias_column``). The copy and the
    deeper GEMM cost less than the pass over the larger output that adds the bias."""
    c = x_shape[1]
    wb, depth = _with_bias_column(w.reshape(w.shape[0], c), b)
    site = gemm_site()

    def run(x: np.ndarray) -> np.ndarray:
        flat = x.reshape(c, -1)
        rows = empty((depth, flat.shape[1]), x.dtype)
        rows[:c] = flat
        rows[c:] = 1
        return matmul(wb, rows, site=site)

    return run


def _im2col_plan(w: np.ndarray, group: int, pb: list[int], pe: list[int], out: list[int], strides: list[int],
                 dil: list[int]) -> ConvRun:
    kernel = list(w.shape[2:])
    wg = w.reshape(group, w.shape[0] // group, -1)
    return lambda x: _conv_im2col(pad_spatial(x, pb, pe), wg, group, kernel, out, strides, dil)


def conv_plan(x_shape: tuple[int, ...], dtype: np.dtype, w: np.ndarray, b: np.ndarray | None,
              attrs: dict, tail: Activation | None = None) -> ConvRun:
    """A Conv of an input of shape ``x_shape`` and float ``dtype`` with weights ``w`` and bias ``b``
    (or None), resolved once: attributes checked, geometry, algorithm, weight layouts, bias and
    fused activation (then ``tail``, an element-wise function of the node's output that a caller fused
    into it, e.g. ``elementwise.silu``). Returns ``run(x) -> y``. ``k_conv`` makes one per call; the CPU path's
    compiled plan keeps one per input shape, so a run pays only for the arithmetic."""
    op = "Conv"
    dtype = np.dtype(dtype)
    if len(x_shape) < 3:
        raise fail(op, f"input must be (N, C, spatial...), got shape {tuple(x_shape)}")
    if w.ndim != len(x_shape):
        raise fail(op, f"weight rank {w.ndim} does not match input rank {len(x_shape)}")
    if w.dtype != dtype:  # a float64 initializer must not promote a float32 graph
        w = w.astype(dtype)
    group = iattr(attrs, "group", 1)
    n, c = x_shape[:2]
    m, cg = w.shape[:2]
    if group < 1 or c % group or cg * group != c:
        raise fail(op, f"input channels {c} do not match weight channels {cg} x group {group}")
    if m % group:
        raise fail(op, f"output channels {m} are not divisible by group {group}")
    kernel = list(w.shape[2:])
    g = geometry(op, x_shape[2:], attrs, kernel)
    nsp = len(kernel)
    out_shape = (n, m, *g.out)
    bias = _bias(op, b, m, len(out_shape), dtype)
    if cg == 1 and group == c and group > 1 and nsp == 2:
        body = _depthwise2d_plan(x_shape, dtype, w, _flat_bias(bias), m // c, g.pad_begin, g.out, g.strides,
                                 g.dilations)
        bias = None
    elif cg == 1 and group == c and group > 1:
        body = _depthwise_plan(w, m // c, g.pad_begin, g.pad_end, g.out, g.strides, g.dilations)
    elif all(k == 1 for k in kernel) and not g.padded:
        if (group == 1 and n == 1 and bias is not None and m > 2 * c and all(s == 1 for s in g.strides)
                and m * math.prod(g.out) < _POINTWISE_BIAS_MAX_OUTPUT):
            body = _pointwise_bias_plan(x_shape, w, _flat_bias(bias))
            bias = None
        else:
            body = _pointwise_plan(x_shape, w, group, g.out, g.strides)
    elif group == 1 and nsp == 2 and _full_cols_pays(c, g.strides, c * math.prod(kernel) * math.prod(g.out)
                                                     * dtype.itemsize):
        body = _conv_full_cols_plan(x_shape, dtype, w, _flat_bias(bias), g.pad_begin, g.pad_end, g.out, g.strides,
                                    g.dilations)
        bias = None
    elif (group == 1 and nsp == 2 and _winograd_pays(c, m, kernel, g.strides, g.dilations, g.out)
          and np.isfinite(w).all()):
        body = _conv_winograd_plan(x_shape, dtype, w, g.pad_begin, g.out,
                                   _conv_shifted_plan(x_shape, dtype, w, g.pad_begin, g.out, g.strides, g.dilations))
    elif group == 1 and nsp == 2 and _shifted_gemm_pays(c, m):
        body = _conv_shifted_plan(x_shape, dtype, w, g.pad_begin, g.out, g.strides, g.dilations)
    elif group == 1 and nsp == 2:
        body = _conv_phase_cols_plan(x_shape, dtype, w, _flat_bias(bias), g.pad_begin, g.out, g.strides,
                                     g.dilations)
        bias = None
    else:
        body = _im2col_plan(w, group, g.pad_begin, g.pad_end, g.out, g.strides, g.dilations)
    act = activation_function(attrs.get("_act"))
    if tail is not None:
        act = then(act, tail)
    return lambda x: _epilogue(body(x).reshape(out_shape), bias, act)


@register("Conv")
@half_via_float32
def k_conv(inputs: list, attrs: dict, opset: int) -> list:
    x = need("Conv", inputs, 0, "X")
    w = need("Conv", inputs, 1, "W")
    return [conv_plan(x.shape, x.dtype, w, opt(inputs, 2), attrs)(x)]


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
    strides, dil, outpad, pb, _, out = transpose_geometry(op, x.shape[2:], attrs, kernel)
    nsp = len(kernel)
    insp = list(x.shape[2:])
    ksize = math.prod(kernel)
    isize = math.prod(insp)
    # cols[n, g, (mg, taps), pixels] = W_g^T @ X_g
    wt = w.reshape(group, cg, mg * ksize).transpose(0, 2, 1)
    cols = matmul(wt, x.reshape(n, group, cg, isize))
    cols = cols.reshape(n, m, *kernel, *insp)
    full = [s * (i - 1) + (k - 1) * d + 1 for s, i, k, d in zip(strides, insp, kernel, dil)]
    bias = _bias(op, b, m, cols.ndim - nsp, cols.dtype)
    if (strides == kernel and all(d == 1 for d in dil) and not any(pb) and out == full):
        # no overlap between taps: each tap's plane is one strided copy into the output seen as
        # (in_0, k_0, in_1, k_1, ...), the bias added on the way. (One copy of the whole
        # transposed cols runs a loop of k_last elements per call: PP-OCR's 24->24 2x2 at
        # 120x160 4.7 -> 1.5 ms, interleaved.)
        y = empty((n, m, *out), cols.dtype)
        split = y.reshape(n, m, *[v for i, k in zip(insp, kernel) for v in (i, k)])

        def taps(c0: int, c1: int) -> None:
            chans = (slice(None), slice(c0, c1))
            for tap in np.ndindex(*kernel):
                dst = split[chans + tuple(v for t in tap for v in (slice(None), t))]
                if bias is None:
                    dst[...] = cols[chans + tap]
                else:
                    np.add(cols[chans + tap], bias[:, c0:c1], out=dst)

        parallel(taps, m, 2 * cols.size)
        return [_epilogue(y, None, activation_function(attrs.get("_act")))]
    off = [max(0, -p) for p in pb]
    start = [p + o for p, o in zip(pb, off)]
    buf_shape = [max(f + o, s + u) for f, o, s, u in zip(full, off, start, out)]
    buf = zeros((n, m, *buf_shape), cols.dtype)

    def channels(c0: int, c1: int) -> None:
        for tap in np.ndindex(*kernel):
            sl = (slice(None), slice(c0, c1)) + tuple(
                slice(t * d + o, t * d + o + (i - 1) * s + 1, s)
                for t, d, o, i, s in zip(tap, dil, off, insp, strides))
            buf[sl] += cols[(slice(None), slice(c0, c1)) + tap]

    parallel(channels, m, cols.size)
    y = buf[(slice(None), slice(None)) + tuple(slice(s, s + u) for s, u in zip(start, out))]
    if y.shape != buf.shape:
        y = np.ascontiguousarray(y)
    return [_epilogue(y, bias, activation_function(attrs.get("_act")))]




def conv_node_kernel(inputs: list, attrs: dict, tail: Activation | None = None) -> Kernel | None:
    """For a Conv node whose weight (and bias, if any) are constants (``inputs``: constant arrays, None
    for an absent input, ``RUN_TIME`` for the input tensor), a kernel that keeps one
    :func:`conv_plan` per input shape, dtype and kernel-thread count; None when the node does not
    qualify (its weights are computed at run time). ``tail``: see :func:`conv_plan`."""
    if len(inputs) < 2 or inputs[0] is not RUN_TIME or not isinstance(inputs[1], np.ndarray) or any(
            v is RUN_TIME for v in inputs[2:3]):
        return None
    w, b = inputs[1], inputs[2] if len(inputs) > 2 else None
    plans: dict[tuple, ConvRun] = {}

    def run(args: list, attrs: dict, opset: int) -> list:
        x = args[0]
        if type(x) is not np.ndarray or x.dtype not in _PLANNED_DTYPES:
            y = k_conv(args, attrs, opset)[0]
            return [y if tail is None else apply_activation(y, tail)]
        key = (x.shape, x.dtype, current_threads())
        plan = plans.get(key)
        if plan is None:
            plan = plans[key] = conv_plan(x.shape, x.dtype, w, b, attrs, tail)
        return [plan(x)]

    return run


_PLANNED_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
NODE_KERNELS["Conv"] = conv_node_kernel
