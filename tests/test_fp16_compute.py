"""precision="fp16-compute": the probe's check of real fp16 arithmetic per path, the option, and
the accuracy of a session that asks for it (fp16 storage; within 2e-2 of the fp32 reference)."""

from __future__ import annotations

import numpy as np
import pytest

import gpubackend
from gpubackend.options import SessionOptions
from gpubackend.paths import fp16_compute
from tests.models import mobilenet_v2_like, random_inputs

GL_PATHS = ["gles2", "gles3", "gles31"]


@pytest.mark.parametrize("path", GL_PATHS)
def test_gl_mediump_check_tells_fp16_from_fp32(path: str) -> None:
    from capability_probe import contexts

    ctx = contexts.gl_context(path)
    bits = fp16_compute.gl_mediump_bits(ctx)
    assert bits in (16, 32)
    verdict = fp16_compute.check(path)
    assert verdict.startswith("verified" if bits == 16 else "not available"), verdict
    assert "runs as fp32 arithmetic" in verdict  # no fp16-arithmetic kernels yet: never pretends


def test_vulkan_reports_fp16_arithmetic_unavailable() -> None:
    assert fp16_compute.check("vulkan").startswith("not available: Kompute enables no Vulkan device features")


def test_option_is_accepted_and_unknown_precisions_refused() -> None:
    assert SessionOptions(precision="fp16-compute").resolved().precision == "fp16-compute"
    with pytest.raises(gpubackend.errors.GpuBackendError):
        SessionOptions(precision="fp8").resolved()


@pytest.mark.parametrize("path", [pytest.param("gles3", marks=pytest.mark.slow), "gles31", "vulkan"])
def test_fp16_compute_session_within_2e_2(path: str) -> None:
    model = mobilenet_v2_like(size=32, classes=10)
    feeds = random_inputs(model)
    want = gpubackend.Session(model, path="cpu", cpu_engine="numpy").run(feeds)
    sess = gpubackend.Session(model, path=path, precision="fp16-compute", fallback=False)
    got = sess.run(feeds)
    report = sess.explain()
    sess.close()
    assert f"precision fp16-compute on {path}: fp16 arithmetic " in report, report
    for g, w in zip(got, want):
        err = float(np.max(np.abs(g - w)) / max(1.0, float(np.max(np.abs(w)))))
        assert err <= 2e-2, err
