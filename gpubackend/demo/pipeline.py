"""Capture -> inference -> display, each stage in its own thread, joined by one-slot mailboxes.

A mailbox holds at most one item. A live source (webcam, paced synthetic scene) overwrites the
item, so a slow consumer always gets the newest frame and stale ones are dropped: latency stays
bounded by one frame per stage. Offline sources (files, headless runs) block instead, so every
frame is processed in order.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import numpy as np

from .processing import MODEL_SIZE, mask_from_output, preprocess
from .sources import FrameSource

T = TypeVar("T")


class Mailbox(Generic[T]):
    """A one-slot, thread-safe box. ``put(item, overwrite=True)`` replaces an unread item (counted
    in ``dropped``); ``overwrite=False`` waits until the slot is free."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._item: T | None = None
        self._full = False
        self._closed = False
        self.dropped = 0

    def put(self, item: T, overwrite: bool = True, timeout: float | None = None) -> bool:
        """False if the mailbox is closed (or ``timeout`` passed while waiting)."""
        with self._cond:
            if not overwrite:
                if not self._cond.wait_for(lambda: not self._full or self._closed, timeout):
                    return False
            if self._closed:
                return False
            if self._full:
                self.dropped += 1
            self._item, self._full = item, True
            self._cond.notify_all()
            return True

    def get(self, timeout: float | None = None) -> T | None:
        """The item (emptying the slot), or None on timeout or when closed and empty."""
        with self._cond:
            if not self._cond.wait_for(lambda: self._full or self._closed, timeout):
                return None
            if not self._full:
                return None
            item, self._item, self._full = self._item, None, False
            self._cond.notify_all()
            return item

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    @property
    def closed(self) -> bool:
        return self._closed


@dataclass
class Frame:
    index: int
    image: np.ndarray  # RGB uint8
    t_capture: float
    capture_ms: float = 0.0  # reading (or making) the frame


@dataclass
class Result:
    frame: Frame
    mask: np.ndarray | None  # model-size float32 mask in [0, 1] (None: it stayed on the GPU)
    infer_ms: float
    path: str  # the session's path
    requested: str
    fallback_nodes: int
    placement_counts: dict[str, int]
    preprocess_ms: float = 0.0
    composite: np.ndarray | None = None  # device-resident pipeline: the composited frame, if read back
    transfers: dict[str, int] | None = None  # this frame's host<->device transfers (uploads, downloads)


class LatencyStats:
    """Latency samples in ms: all of them for the summary, the recent ones for the HUD."""

    def __init__(self, window: int = 120) -> None:
        self.samples: list[float] = []
        self.recent: deque[float] = deque(maxlen=window)

    def add(self, ms: float) -> None:
        self.samples.append(ms)
        self.recent.append(ms)

    @staticmethod
    def _pct(values: Any, q: float) -> float:
        return float(np.percentile(np.asarray(values, dtype=np.float64), q)) if len(values) else float("nan")

    def percentile(self, q: float, recent: bool = False) -> float:
        return self._pct(self.recent if recent else self.samples, q)

    def summary(self) -> dict[str, float | None]:
        if not self.samples:
            return {"p50": None, "p95": None, "p99": None, "mean": None, "max": None}
        a = np.asarray(self.samples)
        return {
            "p50": round(float(np.percentile(a, 50)), 3),
            "p95": round(float(np.percentile(a, 95)), 3),
            "p99": round(float(np.percentile(a, 99)), 3),
            "mean": round(float(a.mean()), 3),
            "max": round(float(a.max()), 3),
        }


class CaptureThread(threading.Thread):
    """Reads the source into ``out``; stops at its end, after ``max_frames``, or on ``stop()``."""

    def __init__(self, source: FrameSource, out: Mailbox[Frame], max_frames: int = 0) -> None:
        super().__init__(name="capture", daemon=True)
        self.source = source
        self.out = out
        self.max_frames = max_frames
        self.error: BaseException | None = None
        self.count = 0
        self._halt = threading.Event()

    def stop(self) -> None:
        self._halt.set()

    def run(self) -> None:
        try:
            while not self._halt.is_set() and (self.max_frames <= 0 or self.count < self.max_frames):
                t0 = time.perf_counter()
                img = self.source.read()
                if img is None:
                    break
                t1 = time.perf_counter()
                frame = Frame(self.count, img, t1, (t1 - t0) * 1e3)
                self.count += 1
                while not self.out.put(frame, overwrite=self.source.live, timeout=0.1):
                    if self._halt.is_set() or self.out.closed:
                        return
        except BaseException as exc:  # reported by the app, not a thread traceback
            self.error = exc
        finally:
            self.out.close()


class InferenceThread(threading.Thread):
    """Owns the :class:`gpubackend.Session` (GPU contexts belong to the thread that made them),
    takes the newest frame, runs the model, hands the result on. ``switch_path`` asks for a new
    session on another path; if that fails the old one stays and ``last_error`` says why."""

    def __init__(
        self,
        model: str,
        path: str,
        inbox: Mailbox[Frame],
        out: Mailbox[Result],
        lossless: bool,
        session_factory: Callable[[str, str], Any] | None = None,
        device_pipeline: Callable[[Any], Any] | None = None,
        readback: bool = True,
    ) -> None:
        super().__init__(name="inference", daemon=True)
        self.model = model
        self.requested = path
        self.inbox = inbox
        self.out = out
        self.lossless = lossless
        self.session_factory = session_factory or _make_session
        # device-resident mode: a factory of DeviceFramePipeline for a gles3/gles31 session
        self.device_pipeline = device_pipeline
        self.readback = readback  # the device pipeline reads the composite back (for a writer)
        self.pipeline: Any = None
        self.model_size = MODEL_SIZE
        self.session: Any = None
        self.ready = threading.Event()
        self.error: BaseException | None = None
        self.last_error = ""
        self.session_seconds = 0.0
        self.explain = ""
        self.notes: list[str] = []
        self._want_path: str | None = None
        self._lock = threading.Lock()
        self._halt = threading.Event()
        self._placement_counts: dict[str, int] = {}
        self._fallback = 0

    def stop(self) -> None:
        self._halt.set()

    def switch_path(self, path: str) -> None:
        with self._lock:
            self._want_path = path

    def _open(self, path: str) -> None:
        t0 = time.perf_counter()
        sess = self.session_factory(self.model, path)
        shape = sess.input_shape(sess.input_names[0]) if hasattr(sess, "input_shape") else None
        if not shape or None in shape:
            shape = (1, 3, MODEL_SIZE, MODEL_SIZE)
        self.model_size = int(shape[-1])
        x = np.zeros(shape, np.float32)
        sess.run({sess.input_names[0]: x})  # compile and warm up before the first frame
        pipeline = None
        if self.device_pipeline is not None:
            from .device_pipeline import DEVICE_PATHS

            if sess.path in DEVICE_PATHS:
                pipeline = self.device_pipeline(sess)
            else:
                self.notes.append(f"device-resident frames need {' or '.join(DEVICE_PATHS)}; "
                                  f"{sess.path} runs the host pipeline")
        old, self.session, self.requested = self.session, sess, path
        old_pipeline, self.pipeline = self.pipeline, pipeline
        if old_pipeline is not None:
            old_pipeline.close()
        if old is not None and hasattr(old, "close"):
            old.close()
        self.session_seconds = time.perf_counter() - t0
        counts: dict[str, int] = {}
        for key in sess.placement.values():
            counts[key] = counts.get(key, 0) + 1
        self._placement_counts = counts
        self._fallback = len(getattr(sess, "fallback_nodes", []))
        self.explain = sess.explain() if hasattr(sess, "explain") else ""

    def run(self) -> None:
        try:
            self._open(self.requested)
        except BaseException as exc:
            self.error = exc
            self.ready.set()
            self.out.close()
            return
        self.ready.set()
        try:
            while not self._halt.is_set():
                with self._lock:
                    want, self._want_path = self._want_path, None
                if want is not None and want != self.requested:
                    try:
                        self._open(want)
                        self.last_error = ""
                    except Exception as exc:
                        self.last_error = f"{want}: {exc}"
                frame = self.inbox.get(timeout=0.1)
                if frame is None:
                    if self.inbox.closed:
                        break
                    continue
                mask = composite = None
                t_pre = time.perf_counter()
                if self.pipeline is not None:  # frame -> composite on the GPU (its preprocess there too)
                    t0 = time.perf_counter()
                    before = (self.pipeline.transfers.uploads, self.pipeline.transfers.downloads)
                    composite = self.pipeline.process(frame.image, self.readback)
                    ms = (time.perf_counter() - t0) * 1e3
                    transfers = {"uploads": self.pipeline.transfers.uploads - before[0],
                                 "downloads": self.pipeline.transfers.downloads - before[1]}
                else:
                    x = preprocess(frame.image, self.model_size)
                    t0 = time.perf_counter()
                    (y,) = self.session.run({self.session.input_names[0]: x})[:1]
                    ms = (time.perf_counter() - t0) * 1e3
                    mask = mask_from_output(y)
                    stats = getattr(self.session, "stats", None)
                    transfers = {"uploads": stats.uploads, "downloads": stats.downloads} if stats else None
                res = Result(
                    frame=frame,
                    mask=mask,
                    infer_ms=ms,
                    path=self.session.path,
                    requested=self.requested,
                    fallback_nodes=self._fallback,
                    placement_counts=dict(self._placement_counts),
                    preprocess_ms=(t0 - t_pre) * 1e3,
                    composite=composite,
                    transfers=transfers,
                )
                while not self.out.put(res, overwrite=not self.lossless, timeout=0.1):
                    if self._halt.is_set() or self.out.closed:
                        return
        except BaseException as exc:
            self.error = exc
        finally:
            self.out.close()
            if self.pipeline is not None:
                self.pipeline.close()
            if self.session is not None and hasattr(self.session, "close"):
                self.session.close()


def _make_session(model: str, path: str, input_shapes: dict[str, tuple[int, ...]] | None = None) -> Any:
    import gpubackend

    # onnxruntime's idle threads spin-wait by default: in this pipeline that doubles the CPU an
    # inference costs (selfie: 16.6 vs 9.6 ms per run with 2 threads) and takes it from the capture,
    # compose and encode threads
    opts = gpubackend.SessionOptions()
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return gpubackend.Session(model, path=path, options=opts, input_shapes=input_shapes)
