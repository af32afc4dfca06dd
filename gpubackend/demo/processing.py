"""Pre- and post-processing for the segmentation demo (CPU, NumPy + OpenCV)."""

from __future__ import annotations

import functools

import cv2
import numpy as np

MODEL_SIZE = 256
MODES = ("overlay", "blur", "replace")
TINT_RGB = (40, 255, 90)  # the overlay colour painted over the person
TINT_STRENGTH = 0.55


def preprocess(frame: np.ndarray, size: int = MODEL_SIZE, out: np.ndarray | None = None) -> np.ndarray:
    """RGB uint8 HxWx3 frame -> the model's 1x3xSxS float32 input, RGB in [0, 1] (written into
    ``out`` when given)."""
    h, w = frame.shape[:2]
    if min(h, w) > size and (h % size or w % size):
        # INTER_AREA at a fractional ratio (640x480 -> 256) costs 2 ms; a bilinear step to twice
        # the size, then INTER_AREA's fast 2x2 average, about 1 ms and looks the same
        frame = cv2.resize(frame, (2 * size, 2 * size), interpolation=cv2.INTER_LINEAR)
    small = cv2.resize(frame, (size, size), interpolation=cv2.INTER_AREA)
    if out is None:
        out = np.empty((1, 3, size, size), dtype=np.float32)
    # one pass: uint8 HWC read, float32 CHW written
    np.multiply(small.transpose(2, 0, 1), np.float32(1.0 / 255.0), out=out[0], dtype=np.float32)
    return out


def mask_from_output(out: np.ndarray) -> np.ndarray:
    """The model output (1x1xSxS) as an SxS float32 mask clipped to [0, 1]."""
    m = np.asarray(out, dtype=np.float32).reshape(out.shape[-2], out.shape[-1])
    return np.clip(m, 0.0, 1.0)


def upsample_mask(mask: np.ndarray, width: int, height: int) -> np.ndarray:
    """Bilinear upsampling of the model's mask to the frame size."""
    return cv2.resize(mask, (width, height), interpolation=cv2.INTER_LINEAR)


class TemporalSmoother:
    """Exponential moving average of the mask: ``m = alpha * new + (1 - alpha) * previous``.
    ``alpha = 1`` (or 0, meaning off) passes masks through unchanged."""

    def __init__(self, alpha: float = 1.0) -> None:
        if not 0.0 <= alpha <= 1.0:
            raise ValueError("smoothing alpha must be in [0, 1]")
        self.alpha = 1.0 if alpha == 0.0 else alpha
        self._state: np.ndarray | None = None

    def __call__(self, mask: np.ndarray) -> np.ndarray:
        if self.alpha >= 1.0 or self._state is None or self._state.shape != mask.shape:
            self._state = mask.astype(np.float32, copy=True)
        else:
            self._state = self.alpha * mask + (1.0 - self.alpha) * self._state
        return self._state

    def reset(self) -> None:
        self._state = None


def default_background(width: int, height: int) -> np.ndarray:
    """The picture used by ``replace`` mode when none is given."""
    try:
        import skimage.data

        from .sources import fit_cover

        return fit_cover(skimage.data.hubble_deep_field(), width, height)
    except Exception:  # scikit-image or the picture missing: a gradient
        y = np.linspace(0.0, 1.0, height, dtype=np.float32)[:, None]
        x = np.linspace(0.0, 1.0, width, dtype=np.float32)[None, :]
        rgb = np.stack([40 + 120 * x + 0 * y, 60 + 100 * y + 0 * x, 160 + 60 * (1 - x) * y], axis=2)
        return rgb.astype(np.uint8)


def blur_radius(width: int, height: int) -> float:
    return max(width, height) / 50.0


def blur_background(frame: np.ndarray) -> np.ndarray:
    """A strong Gaussian blur, computed at quarter resolution (cheap, and looks the same)."""
    h, w = frame.shape[:2]
    small = cv2.resize(frame, (max(1, w // 4), max(1, h // 4)), interpolation=cv2.INTER_AREA)
    small = cv2.GaussianBlur(small, (0, 0), blur_radius(w, h) / 4)
    return cv2.resize(small, (w, h), interpolation=cv2.INTER_LINEAR)


@functools.lru_cache(maxsize=4)
def _solid(shape: tuple[int, ...], rgb: tuple[int, int, int]) -> np.ndarray:
    """A read-only uint8 image of one colour (filling 640x480 costs 2.5 ms: made once per size)."""
    img = np.empty(shape, dtype=np.uint8)
    img[:] = rgb
    img.setflags(write=False)
    return img


def compose(frame: np.ndarray, mask: np.ndarray, mode: str, background: np.ndarray | None = None) -> np.ndarray:
    """Blend ``frame`` (RGB uint8) with the full-size ``mask`` (float32 HxW in [0, 1]):
    ``overlay`` tints the person, ``blur`` blurs the background, ``replace`` swaps it."""
    m = np.ascontiguousarray(mask, dtype=np.float32)
    if mode == "overlay":
        a = m * np.float32(TINT_STRENGTH)
        return cv2.blendLinear(frame, _solid(frame.shape, TINT_RGB), np.float32(1.0) - a, a)
    if mode == "blur":
        return cv2.blendLinear(frame, blur_background(frame), m, 1.0 - m)
    if mode == "replace":
        if background is None:
            background = default_background(frame.shape[1], frame.shape[0])
        return cv2.blendLinear(frame, np.ascontiguousarray(background), m, 1.0 - m)
    raise ValueError(f"mode must be one of {MODES}, not {mode!r}")


def draw_hud(img: np.ndarray, lines: list[str], scale: float = 0.5) -> np.ndarray:
    """Draw text lines top-left onto ``img`` (RGB, or RGBA for an overlay) in place: white text on
    a darkened band, so it reads on any frame."""
    font = cv2.FONT_HERSHEY_SIMPLEX
    step = int(round(22 * scale / 0.5))
    width = max((cv2.getTextSize(line, font, scale, 1)[0][0] for line in lines), default=0)
    y1 = min(img.shape[0], 6 + step * len(lines))
    x1 = min(img.shape[1], 16 + width)
    band = img[:y1, :x1]
    if img.shape[2] == 4:
        band[:, :, :3] = band[:, :, :3] // 3
        band[:, :, 3] = np.maximum(band[:, :, 3], 170)
    else:
        band[:] = band // 3
    colour = (255, 255, 255, 255)[: img.shape[2]]
    for i, line in enumerate(lines):
        cv2.putText(img, line, (8, step * (i + 1) - 4), font, scale, colour, 1, cv2.LINE_AA)
    return img
