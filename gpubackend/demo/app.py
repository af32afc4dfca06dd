"""``gpubackend-demo``: live person segmentation with MediaPipe's selfie model on any gpubackend path.

Capture, inference and display run in three threads joined by one-slot mailboxes (stale frames
are dropped for live sources). With a display the frame and the mask are drawn with OpenGL in a
glfw window (the shader upsamples the mask and blends); without one (``--headless``, or when no
window can be opened) the composited frames go to a video file and a JSON summary.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from .. import shaders
from ..commands import add_shape_option, shapes_of
from ..errors import OptionError
from .pipeline import CaptureThread, InferenceThread, LatencyStats, Mailbox, Result, _make_session
from .processing import (
    MODES,
    TINT_RGB,
    TINT_STRENGTH,
    TemporalSmoother,
    compose,
    default_background,
    draw_hud,
    upsample_mask,
)
from .sources import SourceError, SyntheticSource, open_source

PATHS = ("auto", "cpu", "gles2", "gles3", "gles31", "vulkan")
PATH_CYCLE = ("cpu", "gles2", "gles3", "gles31", "vulkan")
DEFAULT_OUTPUT = "out/demo"
DEFAULT_HEADLESS_FRAMES = 150


class DemoError(Exception):
    """A failure to report as one clear line and a non-zero exit."""


class WindowError(Exception):
    """No window could be opened (no display, no GL)."""


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="gpubackend-demo",
        description="Person segmentation (MediaPipe selfie model converted to ONNX) on a webcam, video, "
        "images or a synthetic scene, run by gpubackend on the chosen path. Keys in the window: "
        "q/Esc quit, p next path, m next display mode.",
    )
    ap.add_argument(
        "--source",
        default="auto",
        help="'auto' (default: webcam 0 if there is one, else 'synthetic'), 'synthetic' (a moving scene "
        "built from scikit-image's pictures), a webcam index (0), a video file, an image, or a folder of images",
    )
    ap.add_argument("--path", default="auto", choices=PATHS, help="gpubackend code path (default auto)")
    ap.add_argument("--mode", default="overlay", choices=MODES, help="display mode (default overlay)")
    ap.add_argument("--frames", type=int, default=None, help="stop after N frames (0: never)")
    ap.add_argument("--width", type=int, default=640, help="frame width (default 640)")
    ap.add_argument("--height", type=int, default=480, help="frame height (default 480)")
    ap.add_argument("--headless", action="store_true", help="no window: write a video and a JSON summary")
    ap.add_argument("--output", default=DEFAULT_OUTPUT, help=f"output folder (default {DEFAULT_OUTPUT})")
    ap.add_argument("--png", action="store_true", help="headless: write PNG frames instead of a video")
    ap.add_argument(
        "--smoothing",
        type=float,
        default=0.0,
        help="temporal smoothing of the mask, EMA weight of the new mask in (0, 1]; 0 = off (default)",
    )
    ap.add_argument("--background", default=None, help="image for 'replace' mode")
    ap.add_argument("--loop", action="store_true", help="loop a video file or images")
    ap.add_argument("--no-hud", action="store_true", help="do not draw the HUD text")
    ap.add_argument("--model", default=None, help="ONNX model (default: the shipped selfie segmentation)")
    ap.add_argument("--screenshot", default=None, help="window mode: save the window as PNG to this file")
    ap.add_argument("--screenshot-after", type=int, default=5, help="window mode: take the screenshot at this frame")
    ap.add_argument("--quit-after", type=float, default=0.0, help="quit after this many seconds (0: never)")
    ap.add_argument("--json", action="store_true", help="print the summary as JSON on stdout")
    ap.add_argument(
        "--device-resident",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="headless on gles3/gles31: keep the frame on the GPU from upload to composite (resize, inference, "
        "mask upsampling and blending in shaders; read back only for a written video); "
        "--no-device-resident preprocesses and composites on the CPU, to compare (default on)",
    )
    ap.add_argument("--no-video", action="store_true",
                    help="headless: write no video or frames, only summary.json (to measure FPS; with "
                    "--device-resident the frame then never returns to the CPU)")
    add_shape_option(ap)
    return ap


def _display_available() -> bool:
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


# ------------------------------------------------------------------------------------------------
# window


class Window:
    """A glfw window; moderngl draws the frame, the mask and the HUD with one fragment shader."""

    def __init__(self, width: int, height: int, title: str = "gpubackend-demo") -> None:
        if not _display_available():
            raise WindowError("no DISPLAY or WAYLAND_DISPLAY")
        try:
            import glfw
            import moderngl
        except ImportError as exc:
            raise WindowError(f"{exc.name} is not installed (pip install 'gpubackend[demo]')") from exc
        glfw.ERROR_REPORTING = "ignore"
        if not glfw.init():
            raise WindowError("glfw could not initialise")
        self.glfw = glfw
        glfw.window_hint(glfw.CONTEXT_VERSION_MAJOR, 3)
        glfw.window_hint(glfw.CONTEXT_VERSION_MINOR, 3)
        glfw.window_hint(glfw.OPENGL_PROFILE, glfw.OPENGL_CORE_PROFILE)
        glfw.window_hint(glfw.OPENGL_FORWARD_COMPAT, True)
        self.win = glfw.create_window(width, height, title, None, None)
        if not self.win:
            glfw.terminate()
            raise WindowError("glfw could not create an OpenGL 3.3 window")
        glfw.make_context_current(self.win)
        glfw.swap_interval(0)
        glfw.focus_window(self.win)
        try:
            self.ctx = moderngl.create_context()
        except Exception as exc:
            glfw.terminate()
            raise WindowError(f"no OpenGL context: {exc}") from exc
        self.width, self.height = width, height
        ctx = self.ctx
        self.prog = ctx.program(vertex_shader=shaders.source("demo/window.vert", "330"),
                               fragment_shader=shaders.source("demo/window.frag", "330"))
        quad = np.array([-1, -1, 1, -1, -1, 1, 1, 1], dtype="f4")
        self.vbo = ctx.buffer(quad.tobytes())
        self.vao = ctx.vertex_array(self.prog, [(self.vbo, "2f", "pos")])
        self.frame_tex = ctx.texture((width, height), 3, dtype="f1")
        self.frame_tex.filter = (moderngl.LINEAR_MIPMAP_LINEAR, moderngl.LINEAR)
        self.frame_tex.repeat_x = self.frame_tex.repeat_y = False
        self.mask_tex: Any = None
        self.bg_tex = ctx.texture((width, height), 3, dtype="f1")
        self.bg_tex.repeat_x = self.bg_tex.repeat_y = False
        self.hud_tex = ctx.texture((width, height), 4, dtype="f1")
        for unit, name in enumerate(("frame_tex", "mask_tex", "bg_tex", "hud_tex")):
            self.prog[name].value = unit
        self.prog["texel"].value = (1.0 / width, 1.0 / height)
        self.keys: list[str] = []
        glfw.set_key_callback(self.win, self._on_key)

    def _on_key(self, win: Any, key: int, scancode: int, action: int, mods: int) -> None:
        glfw = self.glfw
        if action != glfw.PRESS:
            return
        if key in (glfw.KEY_Q, glfw.KEY_ESCAPE):
            glfw.set_window_should_close(win, True)
            self.keys.append("quit")
        elif key == glfw.KEY_P:
            self.keys.append("path")
        elif key == glfw.KEY_M:
            self.keys.append("mode")

    def _upload(self, tex: Any, img: np.ndarray) -> None:
        a = np.ascontiguousarray(img)
        tex.write(a.tobytes())

    def set_background(self, img: np.ndarray) -> None:
        self._upload(self.bg_tex, img)

    def draw(self, frame: np.ndarray, mask: np.ndarray, mode: str, hud: np.ndarray | None) -> None:
        import moderngl

        ctx = self.ctx
        h, w = frame.shape[:2]
        if (w, h) != self.frame_tex.size:
            raise ValueError("frame size changed")
        self._upload(self.frame_tex, frame)
        self.frame_tex.build_mipmaps()
        mh, mw = mask.shape
        if self.mask_tex is None or self.mask_tex.size != (mw, mh):
            self.mask_tex = ctx.texture((mw, mh), 1, dtype="f4")
            self.mask_tex.filter = (moderngl.LINEAR, moderngl.LINEAR)
            self.mask_tex.repeat_x = self.mask_tex.repeat_y = False
        self._upload(self.mask_tex, mask.astype(np.float32))
        if hud is not None:
            self._upload(self.hud_tex, hud)
        else:
            self.hud_tex.write(bytes(w * h * 4))
        fw, fh = self.glfw.get_framebuffer_size(self.win)
        ctx.screen.use()
        ctx.viewport = (0, 0, fw, fh)
        ctx.clear(0.0, 0.0, 0.0)
        self.prog["mode"].value = MODES.index(mode)
        self.prog["tint"].value = tuple(c / 255.0 for c in TINT_RGB)
        self.prog["strength"].value = TINT_STRENGTH
        self.frame_tex.use(0)
        self.mask_tex.use(1)
        self.bg_tex.use(2)
        self.hud_tex.use(3)
        self.vao.render(moderngl.TRIANGLE_STRIP)

    def screenshot(self) -> np.ndarray:
        """The drawn back buffer as RGB uint8 (read with glReadPixels before the swap)."""
        fw, fh = self.glfw.get_framebuffer_size(self.win)
        data = self.ctx.screen.read(viewport=(0, 0, fw, fh), components=3, alignment=1)
        return np.frombuffer(data, np.uint8).reshape(fh, fw, 3)[::-1].copy()

    def swap(self) -> None:
        self.glfw.swap_buffers(self.win)

    def poll(self) -> None:
        self.glfw.poll_events()

    def should_close(self) -> bool:
        return bool(self.glfw.window_should_close(self.win))

    def close(self) -> None:
        self.glfw.destroy_window(self.win)
        self.glfw.terminate()


# ------------------------------------------------------------------------------------------------
# output


class OutputWriter:
    """Writes composited frames: an MP4 (mp4v), else an AVI (MJPG), else PNG files."""

    def __init__(self, folder: Path, width: int, height: int, fps: float, png: bool = False) -> None:
        import cv2

        self.cv2 = cv2
        self.folder = folder
        self.video: Path | None = None
        self.frames_dir: Path | None = None
        self.writer: Any = None
        self.count = 0
        folder.mkdir(parents=True, exist_ok=True)
        if not png:
            for name, fourcc in (("demo.mp4", "mp4v"), ("demo.avi", "MJPG")):
                target = folder / name
                w = cv2.VideoWriter(str(target), cv2.VideoWriter_fourcc(*fourcc), fps, (width, height))
                if w.isOpened():
                    self.writer, self.video = w, target
                    break
                w.release()
        if self.writer is None:
            self.frames_dir = folder / "frames"
            self.frames_dir.mkdir(parents=True, exist_ok=True)
            for old in self.frames_dir.glob("frame_*.png"):
                old.unlink()

    def write(self, rgb: np.ndarray) -> None:
        bgr = self.cv2.cvtColor(rgb, self.cv2.COLOR_RGB2BGR)  # 0.05 ms; a NumPy [..., ::-1] copy is 2 ms
        if self.writer is not None:
            self.writer.write(bgr)
        else:
            assert self.frames_dir is not None
            self.cv2.imwrite(str(self.frames_dir / f"frame_{self.count:05d}.png"), bgr)
        self.count += 1

    def close(self) -> None:
        if self.writer is not None:
            self.writer.release()


# ------------------------------------------------------------------------------------------------
# running


class Demo:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.mode = args.mode
        self.smoother = TemporalSmoother(args.smoothing)
        self.latency = LatencyStats()  # capture -> shown/written
        self.infer = LatencyStats()  # session.run only
        # per-frame milliseconds of each CPU-side stage (capture and preprocess run on their own
        # threads; compose and encode on the output loop of a headless run)
        self.stages = {name: LatencyStats() for name in ("capture", "preprocess", "compose", "encode")}
        self.frame_times: list[float] = []
        self.path_counts: dict[str, int] = {}
        self.last: Result | None = None
        self.background: np.ndarray | None = None
        self.quit_reason = ""
        self.max_frames = 0
        self.transfers: dict[str, int] = {}  # summed over frames: uploads, downloads

    def model_path(self) -> str:
        if self.args.model:
            if not Path(self.args.model).is_file():
                raise DemoError(f"model file {self.args.model} not found")
            return self.args.model
        from ..models import selfie_model_path

        try:
            return str(selfie_model_path())
        except (OSError, ValueError) as exc:
            raise DemoError(str(exc)) from exc

    def load_background(self) -> np.ndarray:
        from .sources import ImageSource

        w, h = self.args.width, self.args.height
        if self.args.background:
            try:
                bg = ImageSource(Path(self.args.background), w, h).read()
            except SourceError as exc:
                raise DemoError(f"--background: {exc}") from exc
            assert bg is not None
            return bg
        return default_background(w, h)

    def fps(self, recent: bool = False) -> float:
        t = self.frame_times[-60:] if recent else self.frame_times
        if len(t) < 2 or t[-1] <= t[0]:
            return 0.0
        return (len(t) - 1) / (t[-1] - t[0])

    def hud_lines(self, res: Result, worker: InferenceThread) -> list[str]:
        path = res.path if res.path == res.requested else f"{res.path} (asked {res.requested})"
        lines = [
            f"{self.fps(recent=True):5.1f} FPS   infer p50 {self.infer.percentile(50, True):.1f} ms"
            f"  p95 {self.infer.percentile(95, True):.1f} ms",
            f"path {path}   fallback nodes {res.fallback_nodes}   mode {self.mode}",
        ]
        if worker.last_error:
            lines.append(f"path switch failed: {worker.last_error[:70]}")
        return lines

    def account(self, res: Result) -> np.ndarray:
        now = time.perf_counter()
        self.frame_times.append(now)
        self.latency.add((now - res.frame.t_capture) * 1e3)
        self.infer.add(res.infer_ms)
        self.stages["capture"].add(res.frame.capture_ms)
        self.stages["preprocess"].add(res.preprocess_ms)
        self.path_counts[res.path] = self.path_counts.get(res.path, 0) + 1
        self.last = res
        if res.transfers is not None:
            for key, value in res.transfers.items():
                self.transfers[key] = self.transfers.get(key, 0) + value
        return self.smoother(res.mask) if res.mask is not None else None

    def start(self, live: bool) -> tuple[Any, CaptureThread, InferenceThread, Mailbox[Result]]:
        a = self.args
        try:
            source = open_source(a.source, a.width, a.height, loop=a.loop, live=live)
        except SourceError as exc:
            raise DemoError(str(exc)) from exc
        if a.source == "auto":
            print(f"gpubackend-demo: source: {source.name}", file=sys.stderr)
        frames = a.frames
        if frames is None:  # headless: a bounded run for endless sources, all frames of files
            endless = source.live or isinstance(source, SyntheticSource)
            frames = DEFAULT_HEADLESS_FRAMES if (endless and not live) else 0
        self.max_frames = frames
        model = self.model_path()
        frames_box: Mailbox[Any] = Mailbox()
        results: Mailbox[Result] = Mailbox()
        try:
            shapes = shapes_of(a)
        except OptionError as exc:
            raise DemoError(str(exc)) from exc
        device = None
        if a.device_resident and not live:  # the window composites in its own GL context
            from .device_pipeline import DeviceFramePipeline

            background = self.background

            def device(sess: Any) -> DeviceFramePipeline:
                return DeviceFramePipeline(sess, a.width, a.height, self.mode, background, a.smoothing)

        worker = InferenceThread(model, a.path, frames_box, results, lossless=not live,
                                 session_factory=lambda m, p: _make_session(m, p, shapes or None),
                                 device_pipeline=device, readback=not a.no_video)
        worker.start()
        worker.ready.wait()
        if worker.error is not None:
            source.close()
            raise DemoError(f"cannot create a gpubackend session on path {a.path!r}: {worker.error}")
        self.source = source
        # live runs stop on shown frames (stale ones are dropped); offline runs on read frames
        capture = CaptureThread(source, frames_box, max_frames=0 if live else frames)
        capture.start()
        return source, capture, worker, results

    def finish(self, capture: CaptureThread, worker: InferenceThread) -> None:
        capture.stop()
        worker.stop()
        capture.join(timeout=5)
        worker.join(timeout=10)
        self.source.close()
        for t in (capture, worker):
            if t.error is not None:
                raise DemoError(f"{t.name} failed: {type(t.error).__name__}: {t.error}")

    def summary(self, worker: InferenceThread, outputs: dict[str, Any], headless: bool) -> dict[str, Any]:
        res = self.last
        wall = self.frame_times[-1] - self.frame_times[0] if len(self.frame_times) > 1 else 0.0
        return {
            "frames": len(self.frame_times),
            "fps": round(self.fps(), 3),
            "wall_seconds": round(wall, 3),
            "latency_ms": self.latency.summary(),
            "inference_ms": self.infer.summary(),
            "stage_ms_p50": {name: st.summary()["p50"] for name, st in self.stages.items() if st.samples},
            "path_requested": self.args.path,
            "path": res.path if res else getattr(worker.session, "path", None),
            "frames_per_path": self.path_counts,
            "placement": res.placement_counts if res else {},
            "fallback_nodes": res.fallback_nodes if res else None,
            "cpu_engine": getattr(worker.session, "cpu_engine", None),  # what runs CPU nodes
            "session_seconds": round(worker.session_seconds, 3),
            "explain": worker.explain,
            "source": self.source.name,
            "mode": self.mode,
            "width": self.args.width,
            "height": self.args.height,
            "smoothing": self.args.smoothing,
            "headless": headless,
            "dropped_frames": None,
            "device_resident": worker.pipeline is not None,
            "transfers_per_frame": {k: round(v / max(1, len(self.frame_times)), 3) for k, v in self.transfers.items()},
            "notes": list(worker.notes),
            "quit_reason": self.quit_reason,
            "output": outputs,
        }

    # -- headless ----------------------------------------------------------------------------
    def run_headless(self) -> dict[str, Any]:
        a = self.args
        out_dir = Path(a.output).resolve()
        if self.mode == "replace":
            self.background = self.load_background()
        source, capture, worker, results = self.start(live=False)
        fps = source.fps if source.fps > 0 else 30.0
        writer = None if a.no_video else OutputWriter(out_dir, a.width, a.height, fps=fps, png=a.png)
        last_img: np.ndarray | None = None
        t_start = time.perf_counter()
        self.quit_reason = "end of source"
        try:
            while True:
                try:
                    res = results.get(timeout=0.5)
                except KeyboardInterrupt:
                    self.quit_reason = "interrupted"
                    break
                if res is None:
                    if results.closed or not worker.is_alive():
                        break
                    continue
                mask = self.account(res)
                t0 = time.perf_counter()
                h, w = res.frame.image.shape[:2]
                if res.composite is not None:  # composited on the GPU and read back for the writer
                    img = np.array(res.composite)
                elif mask is not None:
                    img = compose(res.frame.image, upsample_mask(mask, w, h), self.mode, self.background)
                else:  # device-resident with no writer: the frame stayed on the GPU
                    img = None
                if img is not None and not a.no_hud and writer is not None:
                    draw_hud(img, self.hud_lines(res, worker))
                t1 = time.perf_counter()
                if img is not None and writer is not None:
                    writer.write(img)
                    last_img = img
                self.stages["compose"].add((t1 - t0) * 1e3)
                self.stages["encode"].add((time.perf_counter() - t1) * 1e3)
                if a.quit_after and time.perf_counter() - t_start > a.quit_after:
                    self.quit_reason = "--quit-after"
                    break
        finally:
            if writer is not None:
                writer.close()
            self.finish(capture, worker)
        if not self.frame_times:
            raise DemoError("no frame was processed")
        last_png = None
        if last_img is not None:
            import cv2

            last_png = out_dir / "last_frame.png"
            cv2.imwrite(str(last_png), last_img[:, :, ::-1])
        out_dir.mkdir(parents=True, exist_ok=True)
        outputs = {
            "video": str(writer.video) if writer is not None and writer.video else None,
            "frames_dir": str(writer.frames_dir) if writer is not None and writer.frames_dir else None,
            "last_frame": str(last_png) if last_png else None,
            "summary": str(out_dir / "summary.json"),
        }
        summary = self.summary(worker, outputs, headless=True)
        summary["dropped_frames"] = capture.out.dropped + results.dropped
        (out_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        return summary

    # -- window ------------------------------------------------------------------------------
    def run_window(self, win: Window) -> dict[str, Any]:
        a = self.args
        source, capture, worker, results = self.start(live=True)
        win.set_background(self.load_background())
        shot_path = Path(a.screenshot).resolve() if a.screenshot else None
        shot_taken = False
        t_start = time.perf_counter()
        self.quit_reason = "window closed"
        try:
            while not win.should_close():
                try:
                    win.poll()
                except KeyboardInterrupt:
                    self.quit_reason = "interrupted"
                    break
                for key in win.keys:
                    if key == "mode":
                        self.mode = MODES[(MODES.index(self.mode) + 1) % len(MODES)]
                    elif key == "path":
                        cur = worker.requested if worker.requested in PATH_CYCLE else worker.session.path
                        nxt = PATH_CYCLE[(PATH_CYCLE.index(cur) + 1) % len(PATH_CYCLE)]
                        worker.switch_path(nxt)
                        self.smoother.reset()
                if "quit" in win.keys:
                    self.quit_reason = "key"
                win.keys.clear()
                if a.quit_after and time.perf_counter() - t_start > a.quit_after:
                    self.quit_reason = "--quit-after"
                    break
                res = results.get(timeout=0.01)
                if res is None:
                    if results.closed:
                        self.quit_reason = "end of source"
                        break
                    continue
                mask = self.account(res)
                assert mask is not None  # window mode runs the host pipeline
                hud = None
                if not a.no_hud:
                    h, w = res.frame.image.shape[:2]
                    hud = draw_hud(np.zeros((h, w, 4), np.uint8), self.hud_lines(res, worker))
                win.draw(res.frame.image, mask, self.mode, hud)
                if shot_path is not None and not shot_taken and len(self.frame_times) >= a.screenshot_after:
                    import cv2

                    shot_path.parent.mkdir(parents=True, exist_ok=True)
                    cv2.imwrite(str(shot_path), win.screenshot()[:, :, ::-1])
                    shot_taken = True
                win.swap()
                if self.max_frames and len(self.frame_times) >= self.max_frames:
                    self.quit_reason = "--frames"
                    break
        finally:
            self.finish(capture, worker)
            win.close()
        outputs: dict[str, Any] = {"screenshot": str(shot_path) if shot_taken else None}
        summary = self.summary(worker, outputs, headless=False)
        summary["dropped_frames"] = capture.out.dropped + results.dropped
        out_dir = Path(a.output).resolve()
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        outputs["summary"] = str(out_dir / "summary.json")
        return summary


def _report(summary: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(summary, indent=2))
        return
    lat, inf = summary["latency_ms"], summary["inference_ms"]
    print(
        f"{summary['frames']} frames at {summary['fps']:.1f} FPS on path {summary['path']} "
        f"(asked {summary['path_requested']}; nodes per path {summary['placement']}, "
        f"{summary['fallback_nodes']} fell back)"
    )
    if lat["p50"] is not None:
        print(
            f"latency capture->output p50 {lat['p50']:.1f} ms, p95 {lat['p95']:.1f} ms, "
            f"p99 {lat['p99']:.1f} ms; "
            f"inference p50 {inf['p50']:.1f} ms, p95 {inf['p95']:.1f} ms"
        )
    if summary.get("stage_ms_p50"):
        print("CPU stages p50: " + ", ".join(f"{k} {v:.1f} ms" for k, v in summary["stage_ms_p50"].items()))
    t = summary.get("transfers_per_frame") or {}
    if t:
        where = "device-resident (GPU from upload to composite)" if summary["device_resident"] else "host"
        print(f"frame pipeline: {where}"
              f"; host<->device transfers per frame: {t.get('uploads', 0):g} up, {t.get('downloads', 0):g} down")
    for note in summary.get("notes", []):
        print(f"note: {note}")
    out = summary["output"]
    for key in ("video", "frames_dir", "last_frame", "screenshot", "summary"):
        if out.get(key):
            print(f"{key.replace('_', ' ')}: {out[key]}")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.width < 16 or args.height < 16:
        print("gpubackend-demo: --width and --height must be at least 16", file=sys.stderr)
        return 2
    if args.smoothing < 0 or args.smoothing > 1:
        print("gpubackend-demo: --smoothing must be in [0, 1]", file=sys.stderr)
        return 2
    demo = Demo(args)
    try:
        win = None
        if not args.headless:
            try:
                win = Window(args.width, args.height)
            except WindowError as exc:
                print(f"gpubackend-demo: no window ({exc}); running headless", file=sys.stderr)
        summary = demo.run_window(win) if win is not None else demo.run_headless()
    except DemoError as exc:
        print(f"gpubackend-demo: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("gpubackend-demo: interrupted", file=sys.stderr)
        return 130
    _report(summary, args.json)
    return 0


__all__ = ["main", "build_parser", "Demo", "Window", "OutputWriter", "SyntheticSource"]


if __name__ == "__main__":
    sys.exit(main())
