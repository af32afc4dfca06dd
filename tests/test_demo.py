"""gpubackend-demo: headless runs on every available path, CLI errors, and window mode under Xvfb."""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

cv2 = pytest.importorskip("cv2")
pytest.importorskip("skimage")

from gpubackend.demo.app import main  # noqa: E402
from gpubackend.demo.pipeline import LatencyStats, Mailbox  # noqa: E402
from gpubackend.demo.processing import MODES, TINT_RGB, TemporalSmoother, compose  # noqa: E402
from gpubackend.demo.sources import SyntheticSource  # noqa: E402

W, H = 320, 240
N_FRAMES = 6
GPU_PATHS = ("gles2", "gles3", "gles31", "vulkan")


def _demo_cmd() -> list[str]:
    return [sys.executable, "-m", "gpubackend.demo.app"]


def _read_frames(out: dict) -> list[np.ndarray]:
    frames = []
    if out.get("video"):
        cap = cv2.VideoCapture(out["video"])
        while True:
            ok, bgr = cap.read()
            if not ok:
                break
            frames.append(bgr[:, :, ::-1])
        cap.release()
    else:
        for f in sorted(Path(out["frames_dir"]).glob("frame_*.png")):
            frames.append(cv2.imread(str(f))[:, :, ::-1])
    return frames


def _tint(out: np.ndarray, orig: np.ndarray, box: tuple[int, int, int, int]) -> float:
    """How far a region moved toward the overlay colour (green channel gain, in levels)."""
    x0, y0, x1, y1 = box
    o = out[y0:y1, x0:x1].astype(np.float32)
    s = orig[y0:y1, x0:x1].astype(np.float32)
    return float((o[..., 1] - s[..., 1]).mean() - 0.5 * ((o[..., 0] - s[..., 0]).mean()))


def _background_box(src: SyntheticSource, i: int) -> tuple[int, int, int, int]:
    """A background region beside the pasted portrait, below the HUD."""
    x0, _, x1, _ = src.person_box(i)
    y0, y1 = int(H * 0.3), int(H * 0.6)
    if x0 >= 40:
        return 4, y0, x0 - 12, y1
    return x1 + 12, y0, W - 4, y1


def _unavailable_reason(summary: dict) -> str | None:
    """The session's own words when it could not use the requested path (it then ran on cpu)."""
    if summary["path_requested"] in ("auto", summary["path"]):
        return None
    notes = [line.strip() for line in summary["explain"].splitlines() if "not usable" in line or "not built" in line]
    assert notes, f"asked for {summary['path_requested']}, ran on {summary['path']}:\n{summary['explain']}"
    return notes[0]


@pytest.mark.parametrize("path", ("cpu", *GPU_PATHS, "auto"))
def test_headless_synthetic(path: str, tmp_path: Path) -> None:
    # a fresh process per path: GL contexts belong to the thread (of the process) that made them
    out_dir = tmp_path / "out"
    cmd = [*_demo_cmd(), "--headless", "--source", "synthetic", "--path", path, "--frames", str(N_FRAMES),
           "--width", str(W), "--height", str(H), "--output", str(out_dir)]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    summary = json.loads((out_dir / "summary.json").read_text())
    reason = _unavailable_reason(summary)
    if reason is not None:
        pytest.skip(f"{path} unavailable: {reason}")
    assert str(out_dir / "summary.json") in proc.stdout  # says where the output went
    assert summary["frames"] == N_FRAMES
    assert summary["fps"] > 0
    for key in ("p50", "p95", "p99"):
        assert summary["latency_ms"][key] > 0
        assert summary["inference_ms"][key] > 0
    assert summary["latency_ms"]["p50"] <= summary["latency_ms"]["p95"] <= summary["latency_ms"]["p99"]
    assert summary["path_requested"] == path
    if path != "auto":
        assert summary["path"] == path
    if summary["path"] == "cpu":  # the fast engine when onnxruntime is installed (it is, in CI)
        assert summary["cpu_engine"] == "onnxruntime", summary["explain"]
    assert summary["frames_per_path"] == {summary["path"]: N_FRAMES}
    assert sum(summary["placement"].values()) > 0
    assert set(summary["placement"]) <= {"cpu", *GPU_PATHS}
    assert summary["fallback_nodes"] == sum(v for k, v in summary["placement"].items() if k != summary["path"])
    assert summary["dropped_frames"] == 0  # offline runs process every frame
    # gles3/gles31 keep the frame on the GPU and read the composite back once for the writer;
    # the host pipeline uploads the model input and downloads the mask
    assert summary["device_resident"] == (summary["path"] in ("gles3", "gles31")), summary["notes"]
    per_frame = summary["transfers_per_frame"]
    if summary["device_resident"]:
        assert per_frame == {"uploads": 1, "downloads": 1}, per_frame
    elif summary["path"] != "cpu":
        assert per_frame["uploads"] >= 1 and per_frame["downloads"] >= 1, per_frame
    out = summary["output"]
    assert Path(out["last_frame"]).is_file()

    # the written frames show the overlay on the person, not on the background
    frames = _read_frames(out)
    assert len(frames) == N_FRAMES
    src = SyntheticSource(W, H)
    for i, img in enumerate(frames):
        assert img.shape == (H, W, 3)
        orig = src.frame(i)
        face = _tint(img, orig, src.face_box(i))
        background = _tint(img, orig, _background_box(src, i))
        assert face > 25, (i, face, background)
        assert background < 8, (i, face, background)


def test_help_and_console_script() -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    script = shutil.which("gpubackend-demo", path=os.path.dirname(sys.executable))
    if script is None:
        pytest.skip("the console script is not installed in this environment")
    proc = subprocess.run([script, "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0
    assert "--headless" in proc.stdout and "--path" in proc.stdout


@pytest.mark.parametrize("kind", ("missing_file", "unreadable_video", "unreadable_image", "no_webcam"))
def test_bad_source_is_a_clear_error(kind: str, tmp_path: Path) -> None:
    if kind == "missing_file":
        source = str(tmp_path / "nope.mp4")
    elif kind == "unreadable_video":
        source = str(tmp_path / "bad.mp4")
        Path(source).write_text("not a video")
    elif kind == "unreadable_image":
        source = str(tmp_path / "bad.png")
        Path(source).write_bytes(b"\x89PNG broken")
    else:
        source = "57"  # no such webcam
    proc = subprocess.run(
        [*_demo_cmd(), "--headless", "--source", source, "--path", "cpu", "--output", str(tmp_path / "o")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    assert "gpubackend-demo:" in proc.stderr
    if kind == "no_webcam":
        assert "webcam 57" in proc.stderr
    else:
        assert Path(source).name in proc.stderr


# ---------------------------------------------------------------------------------------------
# window mode under Xvfb


def _start_xvfb() -> tuple[subprocess.Popen, str]:
    """Start Xvfb on a display number it picks itself (``-displayfd``)."""
    rfd, wfd = os.pipe()
    proc = subprocess.Popen(
        ["Xvfb", "-displayfd", str(wfd), "-screen", "0", "1024x768x24", "-nolisten", "tcp"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        pass_fds=(wfd,),
    )
    os.close(wfd)
    try:
        with os.fdopen(rfd, "rb", buffering=0) as r:
            data = b""
            deadline = time.monotonic() + 20
            while not data.endswith(b"\n") and time.monotonic() < deadline:
                chunk = r.read(16)
                if not chunk:
                    break
                data += chunk
    except OSError:
        data = b""
    if not data.strip().isdigit():
        _stop(proc)
        pytest.fail("Xvfb did not start")
    return proc, f":{int(data)}"


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()  # SIGTERM: Xvfb removes its lock file and socket
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _send_key(display: str, keysym: str, x: int, y: int) -> None:
    """A real X key press + release (XTest extension through ctypes), pointer over the window."""
    try:
        x11 = ctypes.CDLL("libX11.so.6")
        xtst = ctypes.CDLL("libXtst.so.6")
    except OSError as exc:
        pytest.skip(f"libX11/libXtst not loadable, cannot send a key event: {exc}")
    vp = ctypes.c_void_p
    x11.XOpenDisplay.restype = vp
    x11.XOpenDisplay.argtypes = [ctypes.c_char_p]
    x11.XStringToKeysym.restype = ctypes.c_ulong
    x11.XStringToKeysym.argtypes = [ctypes.c_char_p]
    x11.XKeysymToKeycode.restype = ctypes.c_ubyte
    x11.XKeysymToKeycode.argtypes = [vp, ctypes.c_ulong]
    x11.XFlush.argtypes = [vp]
    x11.XCloseDisplay.argtypes = [vp]
    xtst.XTestFakeMotionEvent.argtypes = [vp, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_ulong]
    xtst.XTestFakeKeyEvent.argtypes = [vp, ctypes.c_uint, ctypes.c_int, ctypes.c_ulong]
    dpy = x11.XOpenDisplay(display.encode())
    assert dpy, f"cannot open X display {display}"
    try:
        code = x11.XKeysymToKeycode(dpy, x11.XStringToKeysym(keysym.encode()))
        xtst.XTestFakeMotionEvent(dpy, -1, x, y, 0)
        xtst.XTestFakeKeyEvent(dpy, code, 1, 0)
        xtst.XTestFakeKeyEvent(dpy, code, 0, 0)
        x11.XFlush(dpy)
    finally:
        x11.XCloseDisplay(dpy)


def test_window_under_xvfb(tmp_path: Path) -> None:
    if shutil.which("Xvfb") is None:
        pytest.skip("Xvfb is not installed (setup.sh installs it)")
    xvfb, display = _start_xvfb()
    shot = tmp_path / "shot.png"
    out_dir = tmp_path / "out"
    env = dict(os.environ, DISPLAY=display)
    env.pop("WAYLAND_DISPLAY", None)
    cmd = [*_demo_cmd(), "--source", "synthetic", "--path", "cpu", "--width", str(W), "--height", str(H),
           "--screenshot", str(shot), "--screenshot-after", "3", "--quit-after", "45",
           "--output", str(out_dir)]  # fmt: skip
    app = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 40
        while not shot.exists() and app.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert shot.exists(), f"no screenshot; app exited with {app.poll()}"
        time.sleep(0.3)
        _send_key(display, "m", W // 2, H // 2)  # next display mode: overlay -> blur
        time.sleep(0.5)
        _send_key(display, "q", W // 2, H // 2)
        stdout, stderr = app.communicate(timeout=20)
    finally:
        if app.poll() is None:
            app.kill()
            app.wait()
        _stop(xvfb)
    assert app.returncode == 0, stderr
    assert "running headless" not in stderr  # it really opened a window
    summary = json.loads((out_dir / "summary.json").read_text())
    assert summary["quit_reason"] == "key"
    assert summary["mode"] == "blur"
    assert summary["headless"] is False and summary["frames"] >= 3
    assert summary["output"]["screenshot"] == str(shot)

    img = cv2.imread(str(shot))[:, :, ::-1].astype(np.int16)
    assert img.shape == (H, W, 3)
    assert img.std() > 25  # a picture, not a cleared window
    # the overlay colour pulls the person toward green; the raw scene has almost none of it
    greenish = (img[..., 1] - img[..., 0] > 40) & (img[..., 1] - img[..., 2] > 40)
    raw = SyntheticSource(W, H).frame(0).astype(np.int16)
    raw_greenish = (raw[..., 1] - raw[..., 0] > 40) & (raw[..., 1] - raw[..., 2] > 40)
    assert greenish.mean() > 0.02 and raw_greenish.mean() < 0.005, (greenish.mean(), raw_greenish.mean())
    # the HUD band (darkened, white text) sits top left
    assert img[2:40, 2:120].mean() < img[60:, :].mean()
    assert TINT_RGB[1] == max(TINT_RGB)


# ---------------------------------------------------------------------------------------------
# pieces


def test_mailbox_keeps_only_the_newest() -> None:
    box: Mailbox[int] = Mailbox()
    for i in range(5):
        assert box.put(i)  # a live source never waits
    assert box.dropped == 4
    assert box.get(timeout=0) == 4
    assert box.get(timeout=0.01) is None
    assert box.put(7, overwrite=False, timeout=0)
    assert not box.put(8, overwrite=False, timeout=0.01)  # offline: waits for the consumer instead
    assert box.get(timeout=0) == 7
    box.close()
    assert not box.put(9)
    assert box.get(timeout=0) is None


def test_latency_percentiles_and_smoothing() -> None:
    stats = LatencyStats(window=10)
    for ms in range(1, 101):
        stats.add(float(ms))
    summary = stats.summary()
    assert summary["p50"] == pytest.approx(50.5) and summary["p99"] == pytest.approx(99.01)
    assert stats.percentile(50, recent=True) == pytest.approx(95.5)
    smooth = TemporalSmoother(0.25)
    a, b = np.zeros((4, 4), np.float32), np.ones((4, 4), np.float32)
    assert np.all(smooth(a) == 0)
    assert np.allclose(smooth(b), 0.25) and np.allclose(smooth(b), 0.4375)
    assert np.all(TemporalSmoother(0.0)(b) == 1)  # 0 = off


def test_compose_modes() -> None:
    rng = np.random.default_rng(0)
    frame = rng.integers(0, 256, (48, 64, 3), dtype=np.uint8)
    bg = np.zeros_like(frame)
    mask = np.zeros((48, 64), np.float32)
    mask[:, 32:] = 1.0
    for mode in MODES:
        out = compose(frame, mask, mode, bg)
        assert out.dtype == np.uint8 and out.shape == frame.shape
    over = compose(frame, mask, "overlay").astype(int)
    assert np.array_equal(over[:, :32], frame[:, :32])  # no person: untouched
    assert (over[:, 32:, 1] - frame[:, 32:, 1].astype(int)).mean() > 30  # person: pulled to the tint
    rep = compose(frame, mask, "replace", bg)
    assert np.all(rep[:, :28] == 0) and np.array_equal(rep[:, 36:], frame[:, 36:])
    blur = compose(frame, mask, "blur").astype(int)
    assert np.array_equal(blur[:, 36:], frame[:, 36:].astype(int))
    assert blur[:, :28].std() < frame[:, :28].std() / 2
    with pytest.raises(ValueError):
        compose(frame, mask, "sepia")


@pytest.mark.parametrize("path", ["gles3", "gles31"])
def test_device_resident_frames_never_return_to_the_cpu(path: str, tmp_path: Path) -> None:
    """The frame is uploaded once; resize, inference, mask and compositing stay on the GPU: no
    other upload, and no download at all without a video (test_headless_synthetic checks the
    one download per frame with a video)."""
    import gpubackend

    if not gpubackend.probe().usable(path):
        pytest.skip(f"the probe did not verify {path} here")
    out_dir = tmp_path / "out"
    cmd = [*_demo_cmd(), "--headless", "--source", "synthetic", "--path", path, "--frames", "3",
           "--width", "160", "--height", "120", "--output", str(out_dir), "--no-video"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((out_dir / "summary.json").read_text())
    assert summary["device_resident"], summary["notes"]
    assert summary["frames"] == 3
    per_frame = summary["transfers_per_frame"]
    assert per_frame == {"uploads": 1, "downloads": 0}, per_frame
    assert "device-resident" in proc.stdout and "1 up, 0 down" in proc.stdout
    assert summary["output"]["video"] is None and summary["output"]["frames_dir"] is None


def test_host_pipeline_counts_its_transfers_and_shape_option(tmp_path: Path) -> None:
    """--no-device-resident on a GL path moves the input and the mask through the host each frame;
    --shape pins a symbolic input of a user model."""
    import onnx

    import gpubackend
    from gpubackend.models import selfie_model_path

    model = onnx.load(str(selfie_model_path()))
    dims = model.graph.input[0].type.tensor_type.shape.dim
    dims[2].dim_param, dims[3].dim_param = "height", "width"
    user_model = tmp_path / "symbolic.onnx"
    onnx.save(model, str(user_model))
    name = model.graph.input[0].name
    path = "gles3" if gpubackend.probe().usable("gles3") else "cpu"
    out_dir = tmp_path / "out"
    cmd = [*_demo_cmd(), "--headless", "--source", "synthetic", "--path", path, "--frames", "2", "--no-video",
           "--no-device-resident", "--width", "160", "--height", "120", "--output", str(out_dir),
           "--model", str(user_model), "--shape", f"{name}=1x3x256x256"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((out_dir / "summary.json").read_text())
    assert not summary["device_resident"] and summary["frames"] == 2
    if path != "cpu":
        assert summary["transfers_per_frame"] == {"uploads": 1, "downloads": 1}
    bad = subprocess.run([*_demo_cmd(), "--shape", "nonsense"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "NAME=" in bad.stderr
