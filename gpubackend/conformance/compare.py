"""Comparing a path's outputs with the reference: the error measures and the per-precision tolerance.

An element ``g`` of a path's output, against the reference ``w`` of the same tensor, is within
tolerance when

    |g - w| <= atol * scale + rtol * |w|        with scale = max(1, max |w| over the finite w)

so the absolute part follows the magnitude of the tensor (a convolution over values near 1e4
cannot be held to 1e-5 in absolute terms, and a tensor of values near 1e-20 is held to its
relative part); atol grows by sqrt(K / 4096) for a case reducing over K > 4096 elements (a long
fp32 sum accumulated in order loses about sqrt(K) ulps). NaN in the reference must be NaN in the
output and an infinity the same infinity; a NaN or infinity the reference does not have is always
out of tolerance.

Reported per case: the maximum absolute error, the maximum relative error
``|g - w| / max(|w|, 1e-6 * scale)``, the number of elements out of tolerance and the worst
*tolerance ratio* ``|g - w| / (atol * scale + rtol * |w|)`` (a case passes when no element is
out of tolerance, i.e. the ratio is at most 1; infinite when non-finite values disagree).
Integer and boolean outputs must match exactly.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

# precision -> (rtol, atol). fp32: accumulation order differs between a shader and NumPy (sums of
# a few thousand terms lose a few ulps each); fp16: storage in half precision (11 significant
# bits, relative step 4.9e-4) between kernels and at the inputs and outputs.
TOLERANCES: dict[str, tuple[float, float]] = {
    "fp32": (1e-4, 1e-5),
    "fp16": (1e-2, 4e-3),
}


@dataclass
class Metrics:
    max_abs: float = 0.0
    max_rel: float = 0.0
    ratio: float = 0.0  # worst |g - w| / tolerance; <= 1 passes
    bad: int = 0  # elements out of tolerance
    total: int = 0  # elements compared
    note: str = ""  # shape or dtype mismatch, non-finite disagreement

    @property
    def passed(self) -> bool:
        return self.bad == 0 and not self.note.startswith("mismatch")

    def merge(self, other: Metrics) -> Metrics:
        notes = "; ".join(n for n in (self.note, other.note) if n)
        return Metrics(max(self.max_abs, other.max_abs), max(self.max_rel, other.max_rel),
                       max(self.ratio, other.ratio), self.bad + other.bad, self.total + other.total, notes)

    def as_dict(self) -> dict[str, float | int | str]:
        return {k: _jsonable(v) for k, v in asdict(self).items()}


def _jsonable(v: float | int | str) -> float | int | str:
    if isinstance(v, float) and not np.isfinite(v):
        return "inf" if v > 0 else ("-inf" if v < 0 else "nan")
    return v


def tolerance(precision: str) -> tuple[float, float]:
    """(rtol, atol) for ``precision``."""
    return TOLERANCES.get(precision, TOLERANCES["fp16"])


def compare(got: np.ndarray, want: np.ndarray, precision: str,
            floor: tuple[float, float] | None = None, atol_mult: float = 1.0) -> Metrics:
    """Error measures of one output tensor against its reference. ``floor``: an (rtol, atol) the
    tolerance never goes below (an ONNX node test's own tolerance, its expected outputs being
    computed by another implementation). ``atol_mult`` widens atol for long reductions."""
    got = np.asarray(got)
    want = np.asarray(want)
    if got.shape != want.shape:
        return Metrics(np.inf, np.inf, np.inf, int(want.size) or 1, int(want.size),
                       f"mismatch: shape {list(got.shape)}, expected {list(want.shape)}")
    if want.dtype.kind not in "fc" or got.dtype.kind not in "fc":
        if got.dtype.kind != want.dtype.kind:
            return Metrics(np.inf, np.inf, np.inf, int(want.size) or 1, int(want.size),
                           f"mismatch: dtype {got.dtype}, expected {want.dtype}")
        bad = int(np.count_nonzero(got != want))
        diff = float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64)))) if want.size else 0.0
        return Metrics(diff, np.inf if bad else 0.0, np.inf if bad else 0.0, bad, int(want.size))
    rtol, atol = tolerance(precision)
    atol *= atol_mult
    if floor is not None:
        rtol, atol = max(rtol, floor[0]), max(atol, floor[1])
    g = got.astype(np.float64).reshape(-1)
    w = want.astype(np.float64).reshape(-1)
    if w.size == 0:
        return Metrics()
    finite_w = np.isfinite(w)
    scale = max(1.0, float(np.max(np.abs(w[finite_w]))) if finite_w.any() else 1.0)
    # non-finite agreement: NaN where NaN, the same infinity where an infinity
    nan_w, nan_g = np.isnan(w), np.isnan(g)
    inf_mismatch = ~finite_w & ~nan_w & (g != w)
    nonfinite_bad = (nan_w != nan_g) | inf_mismatch | (finite_w & ~np.isfinite(g))
    both = finite_w & np.isfinite(g)
    err = np.abs(g[both] - w[both])
    tol = atol * scale + rtol * np.abs(w[both])
    bad = int(np.count_nonzero(err > tol)) + int(np.count_nonzero(nonfinite_bad))
    max_abs = float(err.max()) if err.size else 0.0
    max_rel = float(np.max(err / np.maximum(np.abs(w[both]), 1e-6 * scale))) if err.size else 0.0
    ratio = float(np.max(err / tol)) if err.size else 0.0
    note = ""
    if nonfinite_bad.any():
        n = int(np.count_nonzero(nonfinite_bad))
        note = f"{n} element(s) with NaN/Inf where the reference differs"
        max_abs = max_rel = ratio = float("inf")
    return Metrics(max_abs, max_rel, ratio, bad, int(w.size), note)


def compare_all(got: list[np.ndarray], want: list[np.ndarray], precision: str,
                floor: tuple[float, float] | None = None, atol_mult: float = 1.0) -> Metrics:
    """Merged measures over every output of a case."""
    if len(got) != len(want):
        return Metrics(np.inf, np.inf, np.inf, 1, 0, f"mismatch: {len(got)} outputs, expected {len(want)}")
    out = Metrics()
    for g, w in zip(got, want):
        out = out.merge(compare(g, w, precision, floor, atol_mult))
    return out
