"""The project's own fuzzer (gpubackend.fuzz): malformed and hostile models on every path in child
processes with time and memory limits, compared with onnxruntime. The default run takes a quick
slice; ``-m slow`` runs the 500-case corpus on cpu, gles3, gles31 and vulkan."""

from __future__ import annotations

import pytest

from gpubackend import fuzz


def _check(summary: dict) -> None:
    assert not summary["failures"], fuzz.format_table(summary)
    for path, counts in summary["paths"].items():
        assert sum(counts.values()) == summary["cases"], (path, counts)


def test_cases_are_reproducible() -> None:
    a, b = fuzz.make_case(3, 17), fuzz.make_case(3, 17)
    assert (a.model, a.detail) == (b.model, b.detail)
    kinds = {fuzz.make_case(3, i).mutation for i in range(60)}
    assert kinds == {"attr", "weight", "structure", "bytes", "feed"}, kinds


def test_quick_slice() -> None:
    summary = fuzz.run(["cpu", "gles31", "vulkan"], seed=11, cases=list(range(24)), timeout_s=180)
    print(fuzz.format_table(summary))
    _check(summary)
    # the slice exercises both outcomes: refusals with a reason, and runs compared with onnxruntime
    assert all(c.get("error", 0) > 0 and c.get("correct", 0) > 0 for c in summary["paths"].values())


@pytest.mark.slow
def test_full_corpus() -> None:
    summary = fuzz.run(["cpu", "gles3", "gles31", "vulkan"], seed=1, cases=list(range(500)), timeout_s=180)
    print(fuzz.format_table(summary))
    _check(summary)

