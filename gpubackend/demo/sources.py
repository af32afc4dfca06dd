"""Frame sources for the demo: webcam, video file, image or folder of images, and a synthetic scene.

Every source yields RGB ``uint8`` frames of exactly ``height x width x 3``.
"""

from __future__ import annotations

import contextlib
import math
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".webp", ".ppm", ".pgm")


class SourceError(Exception):
    """A source cannot be opened or read (missing webcam, unreadable file, ...)."""


def _cv2():  # type: ignore[no-untyped-def]
    try:
        import cv2
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise SourceError("OpenCV is needed for this source: pip install 'gpubackend[demo]'") from exc
    return cv2


@contextlib.contextmanager
def _quiet_opencv(cv2: Any) -> Iterator[None]:
    """Silence OpenCV's own warnings while probing a device (we report failures ourselves)."""
    logging = getattr(getattr(cv2, "utils", None), "logging", None)
    if logging is None:
        yield
        return
    old = logging.getLogLevel()
    logging.setLogLevel(logging.LOG_LEVEL_ERROR)
    try:
        yield
    finally:
        logging.setLogLevel(old)


def fit_cover(img: np.ndarray, width: int, height: int) -> np.ndarray:
    """Scale ``img`` to cover ``width x height`` and crop the centre (keeps the aspect ratio)."""
    cv2 = _cv2()
    h, w = img.shape[:2]
    if (w, h) == (width, height):
        return img
    scale = max(width / w, height / h)
    nw, nh = max(width, round(w * scale)), max(height, round(h * scale))
    interp = cv2.INTER_AREA if scale < 1 else cv2.INTER_LINEAR
    big = cv2.resize(img, (nw, nh), interpolation=interp)
    x0, y0 = (nw - width) // 2, (nh - height) // 2
    return np.ascontiguousarray(big[y0 : y0 + height, x0 : x0 + width])


def _to_rgb(img: np.ndarray) -> np.ndarray:
    if img.ndim == 2:
        return np.repeat(img[:, :, None], 3, axis=2)
    if img.shape[2] == 4:
        return np.ascontiguousarray(img[:, :, :3])
    return img


class FrameSource:
    """A stream of RGB frames. ``live`` sources produce frames in real time whether or not they
    are consumed (stale frames may be dropped); the others are read at the consumer's pace."""

    live: bool = False
    name: str = "source"
    fps: float = 30.0
    length: int | None = None  # number of frames when known (one pass)

    def __init__(self, width: int, height: int) -> None:
        self.width = width
        self.height = height

    def read(self) -> np.ndarray | None:
        """The next frame, or None at the end of the source."""
        raise NotImplementedError

    def close(self) -> None:
        """Release the device or file."""


class _CaptureSource(FrameSource):
    """An OpenCV ``VideoCapture`` (webcam or video file); the first frame is read at opening to
    prove the source works, and handed out by the first ``read``."""

    cap: Any
    _first: np.ndarray | None = None

    def _grab(self) -> np.ndarray | None:
        ok, bgr = self.cap.read()
        if not ok or bgr is None:
            return None
        return fit_cover(_to_rgb(bgr)[:, :, ::-1], self.width, self.height)

    def _take_first(self) -> np.ndarray | None:
        frame, self._first = self._first, None
        return frame

    def close(self) -> None:
        self.cap.release()


class CameraSource(_CaptureSource):
    live = True

    def __init__(self, index: int, width: int, height: int) -> None:
        super().__init__(width, height)
        cv2 = _cv2()
        self.name = f"webcam {index}"
        if sys.platform.startswith("linux") and not Path(f"/dev/video{index}").exists():
            raise SourceError(f"cannot open webcam {index}: /dev/video{index} does not exist")
        with _quiet_opencv(cv2):
            self.cap = cv2.VideoCapture(index)
        if not self.cap.isOpened():
            self.cap.release()
            raise SourceError(f"cannot open webcam {index}: no such camera, or it is busy")
        self.cap.set(cv2.CAP_PROP_FRAME_WIDTH, width)
        self.cap.set(cv2.CAP_PROP_FRAME_HEIGHT, height)
        self.fps = float(self.cap.get(cv2.CAP_PROP_FPS) or 30.0)
        self._first = self._grab()
        if self._first is None:
            self.cap.release()
            raise SourceError(f"webcam {index} opened but delivers no frames")

    def read(self) -> np.ndarray | None:
        if self._first is not None:
            return self._take_first()
        return self._grab()


class VideoSource(_CaptureSource):
    def __init__(self, path: Path, width: int, height: int, loop: bool = False) -> None:
        super().__init__(width, height)
        cv2 = _cv2()
        self.name = f"video {path}"
        self.path = path
        self.loop = loop
        self.cap = cv2.VideoCapture(str(path))
        if not self.cap.isOpened():
            self.cap.release()
            raise SourceError(f"cannot read video file {path}: not a video OpenCV can decode")
        self.fps = float(self.cap.get(cv2.CAP_PROP_FPS) or 30.0)
        n = int(self.cap.get(cv2.CAP_PROP_FRAME_COUNT) or 0)
        self.length = n if n > 0 else None
        self._first = self._grab()
        if self._first is None:
            self.cap.release()
            raise SourceError(f"cannot read video file {path}: it has no decodable frames")

    def read(self) -> np.ndarray | None:
        if self._first is not None:
            return self._take_first()
        frame = self._grab()
        if frame is None and self.loop:
            self.cap.set(_cv2().CAP_PROP_POS_FRAMES, 0)
            frame = self._grab()
        return frame


class ImageSource(FrameSource):
    """One image, or every image in a folder (sorted by name); ``loop`` repeats them."""

    def __init__(self, path: Path, width: int, height: int, loop: bool = False) -> None:
        super().__init__(width, height)
        self.name = f"images {path}"
        if path.is_dir():
            files = sorted(p for p in path.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file())
            if not files:
                raise SourceError(f"folder {path} contains no images ({', '.join(IMAGE_SUFFIXES)})")
        else:
            files = [path]
        self.frames = []
        for f in files:
            img = self._load(f)
            if img is None:
                if len(files) == 1:
                    raise SourceError(f"cannot read image {f}: not an image OpenCV can decode")
                continue
            self.frames.append(img)
        if not self.frames:
            raise SourceError(f"none of the images in {path} can be decoded")
        self.length = len(self.frames)
        self.loop = loop
        self._i = 0

    def _load(self, f: Path) -> np.ndarray | None:
        cv2 = _cv2()
        bgr = cv2.imread(str(f), cv2.IMREAD_COLOR)
        if bgr is None:
            return None
        return fit_cover(bgr[:, :, ::-1], self.width, self.height)

    def read(self) -> np.ndarray | None:
        if self._i >= len(self.frames):
            if not self.loop:
                return None
            self._i = 0
        frame = self.frames[self._i]
        self._i += 1
        return frame


def _smoothstep(x: float) -> float:
    x = min(max(x, 0.0), 1.0)
    return x * x * (3 - 2 * x)


class SyntheticSource(FrameSource):
    """A moving, changing scene from scikit-image's bundled pictures: the astronaut portrait
    drifts and breathes in front of panning backgrounds that cross-fade every few seconds,
    under slowly varying light. Frame ``i`` is a pure function of ``i`` (deterministic)."""

    BACKGROUNDS = ("coffee", "rocket", "chelsea", "hubble_deep_field")
    SECONDS_PER_BACKGROUND = 4.0
    FADE_SECONDS = 0.8
    # the astronaut's face in skimage.data.astronaut() (512x512): rows, cols
    FACE_512 = (90, 140, 200, 250)

    def __init__(self, width: int, height: int, fps: float = 30.0, live: bool = False) -> None:
        super().__init__(width, height)
        import skimage.data

        cv2 = _cv2()
        self.name = "synthetic"
        self.fps = fps
        self.live = live
        self._i = 0
        self._t0: float | None = None
        self.person = skimage.data.astronaut()
        pan_w = int(width * 1.3)
        self.backgrounds = []
        for name in self.BACKGROUNDS:
            try:
                img = _to_rgb(getattr(skimage.data, name)())
            except Exception:  # a picture missing from this scikit-image: skip it
                continue
            self.backgrounds.append(fit_cover(img, pan_w, height))
        if not self.backgrounds:
            grad = np.linspace(0, 255, pan_w, dtype=np.float32)[None, :, None]
            self.backgrounds.append(np.broadcast_to(grad, (height, pan_w, 3)).astype(np.uint8))
        self._cv2 = cv2
        self._people: dict[int, np.ndarray] = {}

    def person_box(self, i: int) -> tuple[int, int, int, int]:
        """(x0, y0, x1, y1) of the pasted portrait in frame ``i`` (may reach outside the frame)."""
        t = i / self.fps
        size = int(self.height * (0.72 + 0.08 * math.sin(2 * math.pi * t / 5.0)))
        cx = self.width / 2 + 0.22 * self.width * math.sin(2 * math.pi * t / 7.0)
        x0 = int(round(cx - size / 2))
        y0 = self.height - size
        return x0, y0, x0 + size, y0 + size

    def face_box(self, i: int) -> tuple[int, int, int, int]:
        """(x0, y0, x1, y1) of the astronaut's face in frame ``i``."""
        x0, y0, x1, _ = self.person_box(i)
        s = (x1 - x0) / 512
        r0, r1, c0, c1 = self.FACE_512
        return x0 + int(c0 * s), y0 + int(r0 * s), x0 + int(c1 * s), y0 + int(r1 * s)

    def _person_at(self, size: int) -> np.ndarray:
        """The portrait resized to ``size`` (INTER_AREA, 3 ms a frame; the scene uses ~40 sizes)."""
        img = self._people.get(size)
        if img is None:
            if len(self._people) >= 64:
                self._people.clear()
            img = self._people[size] = self._cv2.resize(self.person, (size, size), interpolation=self._cv2.INTER_AREA)
        return img

    def frame(self, i: int) -> np.ndarray:
        cv2 = self._cv2
        t = i / self.fps
        w, h = self.width, self.height
        nb = len(self.backgrounds)
        k = int(t // self.SECONDS_PER_BACKGROUND)
        into = t - k * self.SECONDS_PER_BACKGROUND
        fade = _smoothstep((into - (self.SECONDS_PER_BACKGROUND - self.FADE_SECONDS)) / self.FADE_SECONDS)
        span = self.backgrounds[0].shape[1] - w
        off = int(round(span * (0.5 + 0.5 * math.sin(2 * math.pi * t / 6.0))))
        a = self.backgrounds[k % nb][:, off : off + w]
        out = a.copy()
        if fade > 0 and nb > 1:
            b = self.backgrounds[(k + 1) % nb][:, off : off + w]
            out = cv2.addWeighted(a, 1.0 - fade, b, fade, 0.0)
        x0, y0, x1, y1 = self.person_box(i)
        size = x1 - x0
        person = self._person_at(size)
        fx0, fx1 = max(x0, 0), min(x1, w)
        fy0, fy1 = max(y0, 0), min(y1, h)
        if fx1 > fx0 and fy1 > fy0:
            out[fy0:fy1, fx0:fx1] = person[fy0 - y0 : fy1 - y0, fx0 - x0 : fx1 - x0]
        gain = 1.0 + 0.12 * math.sin(2 * math.pi * t / 3.0)
        return cv2.convertScaleAbs(out, alpha=gain)

    def read(self) -> np.ndarray | None:
        if self.live:  # real-time pacing: frame i is due at i / fps, late frames are skipped
            now = time.perf_counter()
            if self._t0 is None:
                self._t0 = now
            due = self._t0 + self._i / self.fps
            if due > now:
                time.sleep(due - now)
            else:
                self._i = max(self._i, int((now - self._t0) * self.fps))
        frame = self.frame(self._i)
        self._i += 1
        return frame


def webcam_present() -> bool:
    """Whether a webcam may exist (on Linux: a /dev/video* device), checked without opening one."""
    import glob

    return not sys.platform.startswith("linux") or bool(glob.glob("/dev/video*"))


def open_source(spec: str, width: int, height: int, loop: bool = False, live: bool = False) -> FrameSource:
    """``spec``: ``auto`` (webcam 0 if there is one, else synthetic), ``synthetic``, a webcam index
    (``0``), a video file, an image or a folder of images."""
    if spec == "auto":
        if webcam_present():
            try:
                return CameraSource(0, width, height)
            except SourceError:
                pass
        return SyntheticSource(width, height, live=live)
    if spec == "synthetic":
        return SyntheticSource(width, height, live=live)
    if spec.isdigit():
        return CameraSource(int(spec), width, height)
    path = Path(spec).expanduser()
    if not path.exists():
        raise SourceError(f"source {spec!r} not found: give 'synthetic', a webcam index, or an existing file or folder")
    if path.is_dir() or path.suffix.lower() in IMAGE_SUFFIXES:
        return ImageSource(path, width, height, loop=loop)
    return VideoSource(path, width, height, loop=loop)
