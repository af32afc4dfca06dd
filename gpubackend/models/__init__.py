"""Models shipped with gpubackend.

``selfie_segmentation.onnx``: MediaPipe's selfie segmentation (Apache-2.0, see ``NOTICE`` and
``LICENSE`` here), converted by ``tools/convert_selfie_tflite.py``. Input ``"input"``:
1x3x256x256 float RGB in [0, 1] (NCHW); output ``"mask"``: 1x1x256x256 person probability.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

MODELS_DIR = Path(__file__).resolve().parent
SELFIE_SEGMENTATION = MODELS_DIR / "selfie_segmentation.onnx"
SELFIE_INPUT_SIZE = 256


def expected_sha256(model: Path = SELFIE_SEGMENTATION) -> str:
    """The SHA-256 recorded in the model's ``.sha256`` sidecar file."""
    return model.with_name(model.name + ".sha256").read_text().split()[0]


def selfie_model_path(verify: bool = True) -> Path:
    """Path of the shipped selfie segmentation model, checked against its checksum."""
    if not SELFIE_SEGMENTATION.is_file():
        raise FileNotFoundError(f"model missing: {SELFIE_SEGMENTATION}")
    if verify:
        digest = hashlib.sha256(SELFIE_SEGMENTATION.read_bytes()).hexdigest()
        if digest != expected_sha256():
            raise ValueError(f"{SELFIE_SEGMENTATION} does not match its checksum (got {digest})")
    return SELFIE_SEGMENTATION
