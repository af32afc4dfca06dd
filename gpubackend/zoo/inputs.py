"""Realistic inputs for zoo models: a photo (scikit-image's astronaut), a face cropped from it,
rendered text lines and a rendered document page, preprocessed as each model's package does."""

from __future__ import annotations

import numpy as np

from .manifest import ZooModel

# The astronaut's face in skimage.data.astronaut() (512x512): left, top, right, bottom.
FACE_BOX = (168, 60, 280, 172)
TEXT_LINE = "Real models 2026: gpubackend"
PAGE_LINES = (
    "Inference on every GPU API",
    "OpenGL ES 2.0, 3.0, 3.1 and Vulkan",
    "verified against the CPU reference.",
    "Table 1: latency per path (ms)",
    "cpu 4.7  gles3 37  vulkan 58",
)


def _photo() -> np.ndarray:
    from skimage import data

    return data.astronaut()


def _font(size: int):
    from PIL import ImageFont

    return ImageFont.load_default(size=size)


def _text_line(height: int, width: int) -> np.ndarray:
    """Dark text on a light background, filling the line the way a cropped text box does."""
    from PIL import Image, ImageDraw

    font_size = 32
    font = _font(font_size)
    probe = ImageDraw.Draw(Image.new("RGB", (1, 1)))
    left, top, right, bottom = probe.textbbox((0, 0), TEXT_LINE, font=font)
    canvas = Image.new("RGB", (right - left + 16, bottom - top + 16), (236, 232, 224))
    ImageDraw.Draw(canvas).text((8 - left, 8 - top), TEXT_LINE, fill=(20, 20, 30), font=font)
    # PaddleOCR keeps the aspect ratio, scaling to the line height and padding the width.
    scaled_w = min(width, max(1, round(canvas.width * height / canvas.height)))
    line = canvas.resize((scaled_w, height), Image.BILINEAR)
    out = Image.new("RGB", (width, height), (236, 232, 224))
    out.paste(line, (0, 0))
    return np.asarray(out)


# A reduced input (``small``) is a window of the page drawn at this scale, over the title and the
# first lines: the whole page shrunk to 64x96 leaves text too small to detect, and PP-OCRv4's
# detector then outputs ~1e-6 everywhere, where any error looks fine.
PAGE_WINDOW_SCALE = 0.5
PAGE_WINDOW_TOP_LEFT = (10, 15)


def _text_page(height: int, width: int, window: bool = False) -> np.ndarray:
    """A document page: a title, lines of text and the photo as a figure (``window``: a
    height x width window of it at PAGE_WINDOW_SCALE, where it fits)."""
    from PIL import Image, ImageDraw

    page = Image.new("RGB", (608, 800), (250, 250, 246))
    draw = ImageDraw.Draw(page)
    draw.text((40, 30), "gpubackend", fill=(0, 0, 0), font=_font(48))
    y = 110
    for line in PAGE_LINES:
        draw.text((40, y), line, fill=(25, 25, 25), font=_font(26))
        y += 40
    figure = Image.fromarray(_photo()).resize((260, 260), Image.BILINEAR)
    page.paste(figure, (40, y + 20))
    draw.text((320, y + 40), "Figure 1: a test", fill=(25, 25, 25), font=_font(22))
    draw.text((320, y + 70), "photo from skimage", fill=(25, 25, 25), font=_font(22))
    top, left = PAGE_WINDOW_TOP_LEFT
    window_h, window_w = round(page.height * PAGE_WINDOW_SCALE), round(page.width * PAGE_WINDOW_SCALE)
    if window and top + height <= window_h and left + width <= window_w:
        scaled = page.resize((window_w, window_h), Image.BILINEAR)
        return np.asarray(scaled)[top:top + height, left:left + width]
    return np.asarray(page.resize((width, height), Image.BILINEAR))


def _resized(rgb: np.ndarray, height: int, width: int) -> np.ndarray:
    from PIL import Image

    return np.asarray(Image.fromarray(rgb).resize((width, height), Image.BILINEAR))


def photo_rgb(height: int, width: int) -> np.ndarray:
    """The photo as a height x width x 3 uint8 RGB picture."""
    return _resized(_photo(), height, width)


def image_size(model: ZooModel, shape: tuple[int, ...]) -> tuple[int, int]:
    """(height, width) of the picture drawn into an input of ``shape``."""
    if model.layout == "nwhc":
        return shape[2], shape[1]
    return shape[2], shape[3]


def rgb_image(model: ZooModel, height: int, width: int, small: bool = False) -> np.ndarray:
    """The uint8 RGB picture (height x width x 3) for the model's input kind (``small``: for
    its reduced input size)."""
    kind = model.input_kind
    if kind == "photo":
        return photo_rgb(height, width)
    if kind == "face":
        left, top, right, bottom = FACE_BOX
        return _resized(_photo()[top:bottom, left:right], height, width)
    if kind == "text_line":
        return _text_line(height, width)
    if kind == "text_page":
        return _text_page(height, width, window=small)
    raise ValueError(f"unknown input kind {kind!r} for zoo model {model.name}")


def make_input(model: ZooModel, small: bool = False, batch: int | None = None) -> dict[str, np.ndarray]:
    """The feed dict for ``model`` at its full (or reduced, ``small``) input size."""
    shape = model.shape(small)
    height, width = image_size(model, shape)
    img = rgb_image(model, height, width, small=small and model.small_shape is not None).astype(np.float32)
    if model.channels == "BGR":
        img = img[..., ::-1]
    img = (img * np.float32(model.scale) - np.asarray(model.mean, np.float32)) / np.asarray(model.std, np.float32)
    arr = img.transpose(2, 0, 1) if model.layout == "nchw" else img.transpose(1, 0, 2)
    arr = np.ascontiguousarray(arr[None], dtype=np.float32)
    if batch and batch > 1:
        arr = np.ascontiguousarray(np.repeat(arr, batch, axis=0))
    return {model.input_name: arr}
