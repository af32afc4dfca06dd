"""Produce ``tests/data/selfie_reference.npz`` with MediaPipe's own runtime.

Run this with a scratch virtual environment OUTSIDE the project; nothing in it is a project
dependency, and the project's tests only read the stored ``.npz``::

    python3 -m venv /tmp/mpvenv
    /tmp/mpvenv/bin/pip install mediapipe==0.10.14 scikit-image
    pip download --no-deps mediapipe==0.10.14 -d /tmp/mp
    unzip -o /tmp/mp/mediapipe-0.10.14-*.whl \
        'mediapipe/modules/selfie_segmentation/selfie_segmentation.tflite' -d /tmp/mp
    /tmp/mpvenv/bin/python tools/make_selfie_reference.py \
        /tmp/mp/mediapipe/modules/selfie_segmentation/selfie_segmentation.tflite \
        tests/data/selfie_reference.npz

The model runs through ``mediapipe.tasks.python.vision.ImageSegmenter`` (MediaPipe's TFLite
runtime with its XNNPACK CPU delegate). The ``.tflite`` carries no normalisation metadata, so
MediaPipe feeds a float input in [0, 1] (``uint8 / 255``); the inputs are exactly 256x256, so
its resize step is the identity, and the confidence mask it returns is the model output itself.

Stored arrays: ``names`` (str, N), ``inputs`` (uint8, N x 256 x 256 x 3, RGB),
``masks`` (float32, N x 256 x 256), ``tflite_sha256`` (str).
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path

import numpy as np


def make_inputs() -> tuple[list[str], np.ndarray]:
    """The fixed inputs: two photographs of people shipped with scikit-image, and seeded noise."""
    import skimage.data

    def halve(img: np.ndarray) -> np.ndarray:
        # exact 2x2 box average, rounded half up: deterministic, no library resampling involved
        s = img.astype(np.uint16).reshape(256, 2, 256, 2, -1).sum(axis=(1, 3))
        return ((s + 2) // 4).astype(np.uint8)

    astro256 = halve(skimage.data.astronaut())  # 512x512x3 uint8
    cam = halve(skimage.data.camera())[:, :, 0]  # 512x512 uint8 grayscale, a person with a camera
    cam_rgb = np.repeat(cam[:, :, None], 3, axis=2)
    noise = np.random.default_rng(20261121).integers(0, 256, (256, 256, 3), dtype=np.uint8)
    return ["astronaut", "camera", "noise"], np.stack([astro256, cam_rgb, noise])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="reference masks from MediaPipe's runtime")
    ap.add_argument("tflite", type=Path)
    ap.add_argument("output", type=Path)
    args = ap.parse_args(argv)

    import mediapipe as mp
    from mediapipe.tasks import python as mp_tasks
    from mediapipe.tasks.python import vision

    if mp.__version__ != "0.10.14":
        print(f"warning: made with mediapipe 0.10.14, this is {mp.__version__}", file=sys.stderr)
    options = vision.ImageSegmenterOptions(
        base_options=mp_tasks.BaseOptions(model_asset_path=str(args.tflite)),
        output_confidence_masks=True,
        output_category_mask=False,
    )
    names, inputs = make_inputs()
    masks = []
    with vision.ImageSegmenter.create_from_options(options) as seg:
        for img in inputs:
            res = seg.segment(mp.Image(image_format=mp.ImageFormat.SRGB, data=np.ascontiguousarray(img)))
            masks.append(np.array(res.confidence_masks[0].numpy_view(), dtype=np.float32))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(
        args.output,
        names=np.array(names),
        inputs=inputs,
        masks=np.stack(masks),
        tflite_sha256=np.array(hashlib.sha256(args.tflite.read_bytes()).hexdigest()),
    )
    for n, m in zip(names, masks):
        print(f"{n}: mask min {m.min():.4f} max {m.max():.4f} mean {m.mean():.4f}")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
