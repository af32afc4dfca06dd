"""The error a zoo model gets from fp16 *storage* alone: onnxruntime (CPU, fp32 arithmetic) on the
model with float activations, and the graph input, rounded through float16 (Cast to FLOAT16 and
back), against onnxruntime in fp32 on the same input. Constants stay fp32, as the GPU paths keep
weights and biases in fp32 (``Binding.fp32``). The rounding model is
:mod:`gpubackend.fp16_calibration`'s (``gpubackend calibrate-fp16`` uses it to write precision plans).

Two figures per model: every node output of the ONNX model rounded ("every output"), and only the
tensors ``precision="fp16"`` stores, i.e. the node outputs of gpubackend's optimised graph (fused
activations leave no tensor) less those the static mixed-precision rule keeps ("as stored").
This is the floor of ``precision="fp16"``: a path whose fp16 error is far above the second
figure loses precision somewhere else (an fp16 accumulation, a constant stored in fp16), while a
figure above 2e-2 means the model itself is not fp16-safe on this input.

``python tools/fp16_storage_sim.py [--small] [--models a,b] [--keep-small N]``; ``--keep-small N``
leaves tensors of at most N elements (squeeze-excite vectors, pooled features) in fp32 in the
"every output" figure.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import onnx

from gpubackend import fp16_calibration


def storage_errors(name: str, small: bool = False, keep_small: int = 0) -> tuple[float, float]:
    """(every node output rounded, only what precision="fp16" stores rounded) for zoo model
    ``name`` on its realistic input."""
    from gpubackend import zoo
    from gpubackend.zoo.inputs import make_input

    model = onnx.load(str(zoo.fetch(name)))
    feeds = make_input(zoo.BY_NAME[name], small=small)
    shapes = {n: tuple(np.asarray(v).shape) for n, v in feeds.items()}
    keep = {o for o, n in fp16_calibration.elements(model, shapes).items() if n <= keep_small}
    return (fp16_calibration.storage_error(model, feeds, keep),
            fp16_calibration.storage_error(model, feeds, every_output=False))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--small", action="store_true", help="reduced input sizes where the zoo defines them")
    ap.add_argument("--models", default="", help="comma list (default: all)")
    ap.add_argument("--keep-small", type=int, default=0, metavar="N",
                    help="keep tensors of at most N elements in fp32 (the 'every output' figure)")
    args = ap.parse_args()
    from gpubackend import zoo

    for name in [m for m in args.models.split(",") if m] or [m.name for m in zoo.MODELS]:
        every, stored = storage_errors(name, args.small, args.keep_small)
        print(f"{name:26s} fp16-storage error: every output {every:.1e}, as stored {stored:.1e}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
