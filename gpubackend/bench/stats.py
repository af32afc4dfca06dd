"""Latency statistics: distributions, not averages.

Percentiles interpolate linearly between the two nearest order statistics (NumPy's default,
"linear", i.e. type 7 of Hyndman and Fan): on ``[1, 2, 3, 4]`` the median is 2.5 and p90 is 3.7.
The standard deviation is the sample one (n - 1 in the denominator; 0 for a single sample)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

SUMMARY_KEYS = ("n", "min", "p50", "p90", "p99", "max", "mean", "std")


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) of ``values`` by linear interpolation."""
    if len(values) == 0:
        raise ValueError("percentile of no values")
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile must be in [0, 100], not {q}")
    return float(np.percentile(np.asarray(values, dtype=np.float64), q))


def mean(values: Sequence[float]) -> float:
    if len(values) == 0:
        raise ValueError("mean of no values")
    return float(np.mean(np.asarray(values, dtype=np.float64)))


def stdev(values: Sequence[float]) -> float:
    """Sample standard deviation (0.0 for fewer than two values)."""
    if len(values) < 2:
        return 0.0
    return float(np.std(np.asarray(values, dtype=np.float64), ddof=1))


def summarize(values: Iterable[float]) -> dict[str, float]:
    """``n``, ``min``, ``p50``, ``p90``, ``p99``, ``max``, ``mean``, ``std`` of ``values``."""
    xs = np.fromiter((float(v) for v in values), dtype=np.float64)
    if xs.size == 0:
        raise ValueError("summarize of no values")
    p50, p90, p99 = (float(p) for p in np.percentile(xs, [50, 90, 99]))
    return {"n": int(xs.size), "min": float(xs.min()), "p50": p50, "p90": p90, "p99": p99,
            "max": float(xs.max()), "mean": mean(xs), "std": stdev(xs)}


def ratio(value: float | None, baseline: float | None) -> float | None:
    """``value / baseline``, or None when either is missing or the baseline is not positive."""
    if value is None or baseline is None or not baseline > 0:
        return None
    return value / baseline
