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
from onnx import version_converter

from .cache import cache_dir, fetch, get
from .inputs import make_input


def calibration_feeds(name: str, count: int = 6) -> list[dict[str, np.ndarray]]:
    """The model's realistic input, mirrored and with shifted brightness (after normalisation,
    so the shift stays in the input's own units)."""
    model = get(name)
    base = make_input(model)[model.input_name]
    spread = float(np.std(base)) or 1.0
    variants = [base, base[..., ::-1], base[..., ::-1, :]]
    feeds = []
    for i in range(count):
        arr = variants[i % len(variants)] + np.float32((i // len(variants)) * 0.1 * spread)
        feeds.append({model.input_name: np.ascontiguousarray(arr, dtype=np.float32)})
    return feeds


QUANT_FORMATS = ("QDQ", "QOperator")


def quantized_path(name: str, quant_format: str = "QDQ") -> Path:
    """The int8 model of zoo model ``name`` in ``quant_format`` ("QDQ": QuantizeLinear /
    DequantizeLinear around float ops; "QOperator": QLinearConv, QLinearMatMul and the
    com.microsoft QLinear* ops), quantized on first use and then cached."""
    from onnxruntime import quantization as ortq

    if quant_format not in QUANT_FORMATS:
        raise ValueError(f"quant_format must be one of {QUANT_FORMATS}, not {quant_format!r}")
    suffix = "qdq" if quant_format == "QDQ" else "qop"
    dest = cache_dir() / "quantized" / f"{name}.{suffix}_int8.onnx"
    if dest.exists():
        return dest
    src = fetch(name)
    feeds = calibration_feeds(name)

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
        proto = onnx.load(str(src))
        opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 0)
        if opset < 13:  # per-channel DequantizeLinear (its axis attribute) needs opset 13
            onnx.save(version_converter.convert_version(proto, 13), str(upgraded))
            src = upgraded
        # onnxruntime's recommended pre-processing: shape inference and its graph optimisations
        # (BatchNormalization folded into Conv, so it is quantized with it)
        ortq.quant_pre_process(str(src), str(prepared), skip_symbolic_shape=True)
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


__all__ = ["QUANT_FORMATS", "calibration_feeds", "quantized_path"]
