"""The shipped selfie segmentation model against MediaPipe's own output (tests/data/selfie_reference.md)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import onnx
import pytest

from gpubackend.models import SELFIE_SEGMENTATION, expected_sha256, selfie_model_path

DATA = Path(__file__).parent / "data"
TOL = 1e-3
TFLITE_SHA256 = "9ee168ec7c8f2a16c56fe8e1cfbc514974cbbb7e434051b455635f1bd1462f5c"


@pytest.fixture(scope="module")
def reference() -> dict[str, np.ndarray]:
    with np.load(DATA / "selfie_reference.npz") as d:
        return {k: d[k] for k in d.files}


def _nchw(img_u8: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray((img_u8.astype(np.float32) / 255.0).transpose(2, 0, 1)[None])


def _astronaut256() -> np.ndarray:
    skimage_data = pytest.importorskip("skimage.data")
    a = skimage_data.astronaut().astype(np.uint16)
    return ((a.reshape(256, 2, 256, 2, 3).sum(axis=(1, 3)) + 2) // 4).astype(np.uint8)


def test_checksum_matches_sidecar() -> None:
    digest = hashlib.sha256(SELFIE_SEGMENTATION.read_bytes()).hexdigest()
    assert digest == expected_sha256()
    assert selfie_model_path() == SELFIE_SEGMENTATION


def test_model_is_standard_onnx() -> None:
    model = onnx.load(str(SELFIE_SEGMENTATION))
    onnx.checker.check_model(model, full_check=True)
    assert model.opset_import[0].version == 17
    ops = {n.op_type for n in model.graph.node}
    assert ops <= {
        "Conv",
        "ConvTranspose",
        "HardSwish",
        "Relu",
        "Sigmoid",
        "Mul",
        "Add",
        "GlobalAveragePool",
        "Resize",
    }
    assert "Transpose" not in ops
    dims = lambda vi: [d.dim_value for d in vi.type.tensor_type.shape.dim]  # noqa: E731
    assert dims(model.graph.input[0]) == [1, 3, 256, 256]
    assert dims(model.graph.output[0]) == [1, 1, 256, 256]
    assert all(t.data_type == onnx.TensorProto.FLOAT for t in model.graph.initializer if t.name.endswith(("/W", "/B")))


def test_reference_made_from_the_pinned_tflite(reference: dict[str, np.ndarray]) -> None:
    assert str(reference["tflite_sha256"]) == TFLITE_SHA256
    assert reference["inputs"].shape == (3, 256, 256, 3)
    # the stored astronaut input is the one the region test below recomputes
    np.testing.assert_array_equal(reference["inputs"][0], _astronaut256())


def test_onnxruntime_matches_mediapipe(reference: dict[str, np.ndarray]) -> None:
    ort = pytest.importorskip("onnxruntime")
    sess = ort.InferenceSession(str(SELFIE_SEGMENTATION), providers=["CPUExecutionProvider"])
    for name, img, ref in zip(reference["names"], reference["inputs"], reference["masks"]):
        (y,) = sess.run(None, {"input": _nchw(img)})
        err = float(np.abs(y[0, 0] - ref).max())
        assert err < TOL, f"{name}: max abs diff {err}"


@pytest.mark.parametrize("engine", ["numpy", "onnxruntime"])
def test_gpubackend_cpu_matches_mediapipe(reference: dict[str, np.ndarray], engine: str) -> None:
    import gpubackend

    if engine == "onnxruntime":
        pytest.importorskip("onnxruntime")
    sess = gpubackend.Session(str(SELFIE_SEGMENTATION), path="cpu", cpu_engine=engine)
    for name, img, ref in zip(reference["names"], reference["inputs"], reference["masks"]):
        (y,) = sess.run({"input": _nchw(img)})
        assert y.shape == (1, 1, 256, 256)
        err = float(np.abs(y[0, 0] - ref).max())
        assert err < TOL, f"{name}: max abs diff {err}"


def test_mask_covers_the_person_not_the_background() -> None:
    ort = pytest.importorskip("onnxruntime")
    sess = ort.InferenceSession(str(SELFIE_SEGMENTATION), providers=["CPUExecutionProvider"])
    (y,) = sess.run(None, {"input": _nchw(_astronaut256())})
    m = y[0, 0]
    # rows, cols in the 256x256 image: her face, her orange suit, the wall top right
    face = m[45:70, 100:125].mean()
    torso = m[160:220, 40:110].mean()
    background = m[0:40, 216:256].mean()
    assert face > 0.9 and torso > 0.9, (face, torso)
    assert background < 0.05, background
    assert 0.3 < m.mean() < 0.8


@pytest.mark.slow
@pytest.mark.parametrize("path", ("gles2", "gles3", "gles31", "vulkan"))
def test_gpu_paths_match_mediapipe(path: str, reference: dict[str, np.ndarray]) -> None:
    """The same check on each GPU path this machine verifies (fp32 storage)."""
    import gpubackend

    try:
        sess = gpubackend.Session(str(SELFIE_SEGMENTATION), path=path, fallback=False)
    except gpubackend.PathUnavailableError as exc:
        pytest.skip(f"{path} unavailable: {exc}")
    try:
        for name, img, ref in zip(reference["names"], reference["inputs"], reference["masks"]):
            (y,) = sess.run({"input": _nchw(img)})
            err = float(np.abs(y[0, 0] - ref).max())
            assert err < TOL, f"{path} {name}: max abs diff {err}"
    finally:
        sess.close()
