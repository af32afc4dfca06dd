"""Benchmarks and profiling for ``gpubackend bench``: the model runner (cold/warm start,
first run, steady-state distributions against onnxruntime), per-node profiles, FMA-peak and
bandwidth microbenchmarks with the roofline, the figure, and the measured basis for
``path="auto"`` (:func:`measured_choice`, written by ``gpubackend bench --record``)."""

from __future__ import annotations

from .choice import measured_choice, measurements_file, record_measurement
from .micro import Peak, measure_peak
from .runner import BenchOptions, bench_model, make_inputs, resolve_model
from .stats import percentile, summarize

__all__ = ["BenchOptions", "Peak", "bench_model", "make_inputs", "measure_peak", "measured_choice",
           "measurements_file", "percentile", "record_measurement", "resolve_model", "summarize"]
