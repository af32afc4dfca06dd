"""int8 versions of zoo models, made with onnxruntime's own quantization tool and cached beside
the zoo's models (``<zoo cache>/quantized/``), never committed.

Static quantization in the QDQ format (QuantizeLinear/DequantizeLinear around float ops, as
onnxruntime writes by default) or the QOperator format (QLinearConv, QLinearMatMul, com.microsoft
QLinear*), int8 weights with one scale per output channel, uint8
activations, calibrated (MinMax) on the zoo's own realistic input for the model and flipped and
brightness-shifted versions of it. ``reduce_range=True`` (7-bit weights): onnxruntime's u8s8
kernels on x86 without VNNI saturate int16 pair sums otherwise, and its int8 result would then
not be the exact one ONNX defines."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
from filelock import FileLock
from onnx import numpy_helper, version_converter

from .cache import cache_dir, fetch, get
from .inputs import make_input, photo_rgb


def brightness_variants(base: np.ndarray, count: int = 6) -> list[np.ndarray]:
    """``base`` (NCHW or NHWC), mirrored both ways and with shifted brightness (in the input's own
    units, so the shift survives any normalisation): calibration data from one real picture."""
    spread = float(np.std(base)) or 1.0
    variants = [base, base[..., ::-1], base[..., ::-1, :]]
    return [np.ascontiguousarray(variants[i % len(variants)] + np.float32((i // len(variants)) * 0.1 * spread),
                                 dtype=np.float32) for i in range(count)]


def calibration_feeds(name: str, count: int = 6) -> list[dict[str, np.ndarray]]:
    """The model's realistic input, mirrored and with shifted brightness (after normalisation,
    so the shift stays in the input's own units)."""
    model = get(name)
    base = make_input(model)[model.input_name]
    return [{model.input_name: arr} for arr in brightness_variants(base, count)]


def photo_input(height: int, width: int) -> np.ndarray:
    """The zoo's photo (scikit-image's astronaut) resized to ``height`` x ``width``, as a
    1x3xHxW float32 tensor in [0, 1]: the real picture for models that take plain RGB."""
    rgb = photo_rgb(height, width)
    return np.ascontiguousarray(rgb.astype(np.float32).transpose(2, 0, 1)[None] / np.float32(255))


QUANT_FORMATS = ("QDQ", "QOperator")


def quantize_static(src: str | Path | onnx.ModelProto, dest: Path, feeds: list[dict[str, np.ndarray]],
                    quant_format: str = "QDQ") -> Path:
    """Quantize the float model ``src`` with onnxruntime's tool into ``dest`` (static, per-channel
    int8 weights with ``reduce_range``, uint8 activations, MinMax calibration on ``feeds``), after
    onnxruntime's pre-processing; written atomically, so a finished ``dest`` is complete."""
    from onnxruntime import quantization as ortq

    if quant_format not in QUANT_FORMATS:
        raise ValueError(f"quant_format must be one of {QUANT_FORMATS}, not {quant_format!r}")

    class Reader(ortq.CalibrationDataReader):
        def __init__(self) -> None:
            self.it = iter(feeds)

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.it, None)

    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    upgraded = dest.with_name(f".{dest.name}.{os.getpid()}.opset13.onnx")
    prepared = dest.with_name(f".{dest.name}.{os.getpid()}.prepared.onnx")
    try:
        proto = src if isinstance(src, onnx.ModelProto) else onnx.load(str(src))
        opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 0)
        if opset < 13:  # per-channel DequantizeLinear (its axis attribute) needs opset 13
            proto = version_converter.convert_version(proto, 13)
        onnx.save(proto, str(upgraded))
        # onnxruntime's recommended pre-processing: shape inference and its graph optimisations
        # (BatchNormalization folded into Conv, so it is quantized with it)
        ortq.quant_pre_process(str(upgraded), str(prepared), skip_symbolic_shape=True)
        ortq.quantize_static(str(prepared), str(tmp), Reader(), quant_format=getattr(ortq.QuantFormat, quant_format),
                             per_channel=True,
                             weight_type=ortq.QuantType.QInt8, activation_type=ortq.QuantType.QUInt8,
                             reduce_range=True)
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
        upgraded.unlink(missing_ok=True)
        prepared.unlink(missing_ok=True)
    return dest


def output_step(model: str | Path | onnx.ModelProto, output: str) -> float | None:
    """The quantization step of graph output ``output``: the scale of the per-tensor
    DequantizeLinear that produces it (None when another op produces it)."""
    proto = model if isinstance(model, onnx.ModelProto) else onnx.load(str(model))
    node = next((n for n in proto.graph.node if output in n.output), None)
    if node is None or node.op_type != "DequantizeLinear":
        return None
    scale = next((i for i in proto.graph.initializer if i.name == node.input[1]), None)
    if scale is None:
        return None
    values = numpy_helper.to_array(scale).reshape(-1)
    return float(values[0]) if values.size == 1 else None


def quantized_path(name: str, quant_format: str = "QDQ") -> Path:
    """The int8 model of zoo model ``name`` in ``quant_format`` ("QDQ": QuantizeLinear /
    DequantizeLinear around float ops; "QOperator": QLinearConv, QLinearMatMul and the
    com.microsoft QLinear* ops), quantized on first use and then cached."""
    if quant_format not in QUANT_FORMATS:
        raise ValueError(f"quant_format must be one of {QUANT_FORMATS}, not {quant_format!r}")
    suffix = "qdq" if quant_format == "QDQ" else "qop"
    dest = cache_dir() / "quantized" / f"{name}.{suffix}_int8.onnx"
    if dest.exists():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(f"{dest}.lock"):  # another process may be quantizing it: wait for its result
        if dest.exists():
            return dest
        return quantize_static(fetch(name), dest, calibration_feeds(name), quant_format)


__all__ = ["QUANT_FORMATS", "brightness_variants", "calibration_feeds", "output_step", "photo_input", "quantize_static",
           "quantized_path"]
