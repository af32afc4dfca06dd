"""The ``.tflite`` models shipped inside the ``mediapipe`` wheel on PyPI (Apache-2.0), fetched with pip.

``mediapipe_models()`` downloads the pinned wheel once (``pip download --no-deps``; mediapipe itself is
never installed), extracts every ``.tflite`` file next to it and returns them by file stem. The cache
lives under ``$GPUBACKEND_CACHE_DIR/mediapipe-<version>`` (default ``~/.cache/gpubackend``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import numpy as np

from ..errors import ModelError

MEDIAPIPE_VERSION = "0.10.14"


def _cache_root() -> Path:
    base = os.environ.get("GPUBACKEND_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "gpubackend")
    return Path(base) / f"mediapipe-{MEDIAPIPE_VERSION}"


def mediapipe_models(dest: Path | None = None) -> dict[str, Path]:
    """Every ``.tflite`` in the mediapipe wheel, by stem (e.g. ``"selfie_segmentation"``)."""
    root = Path(dest) if dest is not None else _cache_root()
    done = root / ".complete"
    if not done.exists():
        root.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=root) as tmp:
            cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q",
                   f"mediapipe=={MEDIAPIPE_VERSION}", "-d", tmp]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            wheels = list(Path(tmp).glob("mediapipe-*.whl"))
            if proc.returncode != 0 or not wheels:
                raise ModelError(f"could not download mediapipe=={MEDIAPIPE_VERSION}: {proc.stderr.strip()[-500:]}")
            with zipfile.ZipFile(wheels[0]) as whl:
                for info in whl.infolist():
                    if info.filename.endswith(".tflite"):
                        target = root / Path(info.filename).name
                        part = target.with_name(target.name + ".part")
                        part.write_bytes(whl.read(info))
                        part.replace(target)
        done.write_text(MEDIAPIPE_VERSION + "\n")
    return {p.stem: p for p in sorted(root.glob("*.tflite"))}


def interpreter_reference(model: Path) -> tuple[dict[str, np.ndarray], list[np.ndarray]]:
    """(feeds, outputs) of the official TFLite interpreter (``ai-edge-litert``) on ``model``, fed
    scikit-image's astronaut photo resized to each NHWC input, RGB in [0, 1]: the reference the
    MediaPipe table and tests compare with. Needs ai-edge-litert and scikit-image."""
    from ai_edge_litert.interpreter import Interpreter
    from skimage import data
    from skimage.transform import resize

    it = Interpreter(model_path=str(model))
    it.allocate_tensors()
    img = data.astronaut().astype(np.float32) / 255.0
    feeds = {}
    for d in it.get_input_details():
        _, h, w, c = d["shape"]
        x = np.ascontiguousarray(resize(img, (h, w), anti_aliasing=True)[None, :, :, :c].astype(np.float32))
        it.set_tensor(d["index"], x)
        feeds[d["name"]] = x
    it.invoke()
    return feeds, [it.get_tensor(d["index"]).copy() for d in it.get_output_details()]
