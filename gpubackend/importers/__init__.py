"""Importers that turn other model formats into an ONNX ModelProto for the normal loader."""

from __future__ import annotations

import os

from .tflite import TFLITE_MAGIC, tflite_initial_state, tflite_to_onnx


def is_tflite(model: object) -> bool:
    """True for a ``.tflite`` path or bytes carrying the TFLite flatbuffer identifier."""
    if isinstance(model, (bytes, bytearray, memoryview)):
        return bytes(model[4:8]) == TFLITE_MAGIC
    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        if path.lower().endswith(".tflite"):
            return True
        try:
            with open(path, "rb") as f:
                return f.read(8)[4:8] == TFLITE_MAGIC
        except OSError:
            return False
    return False


__all__ = ["TFLITE_MAGIC", "is_tflite", "tflite_initial_state", "tflite_to_onnx"]
