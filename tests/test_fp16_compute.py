"""precision="fp16-compute": the probe's check of real fp16 arithmetic per path, the option, and
the accuracy of a session that asks for it (fp16 storage; within 2e-2 of the fp32 reference)."""

from __future__ import annotations

from dataclasses import replace

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
    if path == "gles2":  # no mediump kernels there, whatever the driver does
        assert verdict.startswith("not available: the gles2 kernels have no mediump variant"), verdict
    else:
        assert verdict.startswith("verified" if bits == 16 else "not available"), verdict


@pytest.mark.parametrize("path", ["gles3", "gles31"])
def test_fp16_compute_kernels_round_as_fp16(path: str) -> None:
    """The cancelling sum 2048 + 1 - 2048 is 1 with fp16 storage and fp32 arithmetic, and 0 with
    the fp16-compute kernels where mediump is 16-bit (llvmpipe); the random graph stays within
    the fp16 bar of the NumPy reference either way."""
    from capability_probe import contexts

    graph, feeds = fp16_compute.cancelling_sum_graph()
    assert fp16_compute.run_graph(path, graph, feeds, "fp16")["y"][0, 0] == 1.0
    total, err = fp16_compute.kernel_canary(path)
    fp16 = fp16_compute.gl_mediump_bits(contexts.gl_context(path)) == 16
    assert total == (0.0 if fp16 else 1.0)
    assert err <= 2e-2


def test_fp16_compute_define_reaches_only_mediump_kernels() -> None:
    from gpubackend.paths import compute_kernels as ck

    graph, _ = fp16_compute.cancelling_sum_graph()
    (gemm,) = ck.generate(graph.nodes[0], graph).payload
    assert ("FP16_COMPUTE", 1) in fp16_compute.mediump_record(gemm).defines
    softmax = replace(gemm, kernel="softmax")
    assert fp16_compute.mediump_record(softmax) is softmax  # long reductions keep highp
    src = fp16_compute.with_define(ck.glsl_source(gemm))
    assert src.splitlines()[:2] == ["#version 310 es", "#define FP16_COMPUTE 1"]


def test_vulkan_reports_fp16_arithmetic_unavailable() -> None:
    relaxed = fp16_compute.vulkan_relaxed_precision()
    assert relaxed in (1.0, 1.0 + 2.0 ** -12)
    verdict = fp16_compute.check("vulkan")
    assert verdict.startswith("not available: this driver"), verdict
    assert "shaderFloat16" in verdict


def test_option_is_accepted_and_unknown_precisions_refused() -> None:
    assert SessionOptions(precision="fp16-compute").resolved().precision == "fp16-compute"
    with pytest.raises(gpubackend.errors.GpuBackendError):
        SessionOptions(precision="fp8").resolved()


# vulkan has no fp16 arithmetic here (test_vulkan_reports_fp16_arithmetic_unavailable): its case is slow
@pytest.mark.parametrize("path", [pytest.param("gles3", marks=pytest.mark.slow), "gles31",
                                  pytest.param("vulkan", marks=pytest.mark.slow)])
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


# Whole zoo models with fp16 arithmetic against onnxruntime (fp32), at the fp16 bar. Measured on
# gles31 (llvmpipe, under load): mtcnn_pnet 1.3e-2 (fp16 storage alone 1.3e-3), mtcnn_rnet 4.7e-4,
# mtcnn_onet 2.8e-4, mobilenetv3_orientation 1.2e-4; selfie 1.2e-1 (fp16 storage alone 2.7e-2).
FP16_COMPUTE_MODELS = ("mtcnn_pnet", "mtcnn_rnet", "mtcnn_onet", "mobilenetv3_orientation", "selfie_segmentation")
# selfie_segmentation misses the bar (a known, unexplained accuracy gap, so its slow cases fail rather
# than being marked xfail): fp16 arithmetic in conv and depthwise (either alone: 3.6e-2) puts the person
# mask at 1.2e-1 max |diff| from onnxruntime (8.9e-2 with fp16 accumulators; mean 2.8e-4 either way);
# fp16 storage alone is already 2.7e-2.


def _model_cases() -> list:
    cases = []
    for name in FP16_COMPUTE_MODELS:
        for path in ("gles31", "gles3"):
            marks = [] if (path == "gles31" and name in ("mtcnn_pnet", "mtcnn_onet")) else [pytest.mark.slow]
            cases.append(pytest.param(name, path, id=f"{name}-{path}", marks=marks))
    return cases


@pytest.mark.parametrize("name,path", _model_cases())
def test_zoo_fp16_compute_within_2e_2_of_onnxruntime(name: str, path: str) -> None:
    from gpubackend import zoo
    from gpubackend.zoo.check import max_rel_error, run_on_path

    got, ref, sess = run_on_path(zoo.BY_NAME[name], path, "fp16-compute")
    try:
        assert f"precision fp16-compute on {path}: fp16 arithmetic " in sess.explain()
        err = max_rel_error(got, ref)
        assert err <= 2e-2, f"{name} on {path} (fp16-compute): max|got-ref|/max(1,max|ref|) = {err:.3g}"
    finally:
        sess.close()
