"""Latency statistics: distributions, not averages.

Percentiles interpolate linearly between the two nearest order statistics (NumPy's default,
"linear", i.e. type 7 of Hyndman and Fan): on ``[1, 2, 3, 4]`` the median is 2.5 and p90 is 3.7.
The standard deviation is the sample one (n - 1 in the denominator; 0 for a single sample)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

SUMMARY_KEYS = ("n", "min", "p50", "p90", "p99", "max", "mean", "std")


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) of ``values`` by linear interpolation."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile must be in [0, 100], not {q}")
    xs = sorted(float(v) for v in values)
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    frac = pos - lo
    return xs[lo] + (xs[hi] - xs[lo]) * frac


def mean(values: Sequence[float]) -> float:
    if not values:
        raise ValueError("mean of no values")
    return math.fsum(values) / len(values)


def stdev(values: Sequence[float]) -> float:
    """Sample standard deviation (0.0 for fewer than two values)."""
    n = len(values)
    if n < 2:
        return 0.0
    m = mean(values)
    return math.sqrt(math.fsum((v - m) ** 2 for v in values) / (n - 1))


def summarize(values: Iterable[float]) -> dict[str, float]:
    """``n``, ``min``, ``p50``, ``p90``, ``p99``, ``max``, ``mean``, ``std`` of ``values``."""
    xs = [float(v) for v in values]
    if not xs:
        raise ValueError("summarize of no values")
    return {
        "n": len(xs),
        "min": min(xs),
        "p50": percentile(xs, 50),
        "p90": percentile(xs, 90),
        "p99": percentile(xs, 99),
        "max": max(xs),
        "mean": mean(xs),
        "std": stdev(xs),
    }


def ratio(value: float | None, baseline: float | None) -> float | None:
    """``value / baseline``, or None when either is missing or the baseline is not positive."""
    if value is None or baseline is None or not baseline > 0:
        return None
    return value / baseline
