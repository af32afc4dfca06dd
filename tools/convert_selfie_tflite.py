"""Convert MediaPipe's selfie segmentation ``.tflite`` to the bundled ONNX form (NCHW ``input`` ->
``mask``), through the package's TFLite importer (``gpubackend.importers.tflite``).

``gpubackend.Session("selfie_segmentation.tflite")`` runs the ``.tflite`` directly (NHWC, TFLite's
tensor names); this script only writes the NCHW ONNX file the demo ships, with the input renamed
``"input"`` (1x3x256x256 RGB in [0, 1]) and the output ``"mask"`` (1x1x256x256 probability)::

    pip download --no-deps mediapipe==0.10.14 -d /tmp/mp
    unzip -o /tmp/mp/mediapipe-0.10.14-*.whl \
        'mediapipe/modules/selfie_segmentation/selfie_segmentation.tflite' -d /tmp/mp
    python tools/convert_selfie_tflite.py \
        /tmp/mp/mediapipe/modules/selfie_segmentation/selfie_segmentation.tflite out.onnx

It writes ``<output>.sha256`` next to the model. The shipped ``gpubackend/models/selfie_segmentation.onnx``
was made by the earlier single-model converter; this one gives the same function (tests compare them).
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path

import onnx

from gpubackend.errors import ModelError
from gpubackend.importers import tflite_to_onnx

INPUT_NAME, OUTPUT_NAME = "input", "mask"


def convert(tflite_bytes: bytes) -> onnx.ModelProto:
    """The selfie ``.tflite`` bytes as an NCHW ONNX model with inputs/outputs named input/mask."""
    model = tflite_to_onnx(tflite_bytes, layout="nchw")
    g = model.graph
    renames = {g.input[0].name: INPUT_NAME, g.output[0].name: OUTPUT_NAME}
    for vi in (g.input[0], g.output[0]):
        vi.name = renames[vi.name]
    for node in g.node:
        node.input[:] = [renames.get(n, n) for n in node.input]
        node.output[:] = [renames.get(n, n) for n in node.output]
    model.doc_string = ("MediaPipe selfie segmentation (general, 256x256) from mediapipe==0.10.14 "
                        "selfie_segmentation.tflite (Apache-2.0). Input 'input': 1x3x256x256 float RGB in [0,1], "
                        "NCHW. Output 'mask': 1x1x256x256 person probability.")
    onnx.checker.check_model(model, full_check=True)
    return model


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tflite", type=Path, help="path to selfie_segmentation.tflite")
    ap.add_argument("output", type=Path, help="ONNX file to write (a .sha256 sidecar is written too)")
    args = ap.parse_args(argv)
    try:
        model = convert(args.tflite.read_bytes())
    except (OSError, ModelError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    data = model.SerializeToString()
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_bytes(data)
    digest = hashlib.sha256(data).hexdigest()
    args.output.with_name(args.output.name + ".sha256").write_text(f"{digest}  {args.output.name}\n")
    print(f"wrote {args.output} ({len(data)} bytes, sha256 {digest})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
