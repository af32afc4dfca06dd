"""``gpubackend segment``: a small folder (photos, a short video, a corrupt file) locally and on Ray."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

cv2 = pytest.importorskip("cv2")
skimage_data = pytest.importorskip("skimage.data")

from gpubackend.cli import main  # noqa: E402
from gpubackend.commands.segment import SegmentConfig, Segmenter, segment  # noqa: E402

VIDEO_FRAMES = 6


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("inputs")
    photos = {"astronaut": skimage_data.astronaut(), "coffee": skimage_data.coffee(), "chelsea": skimage_data.chelsea()}
    for name, rgb in photos.items():
        small = cv2.resize(rgb, (200, 150), interpolation=cv2.INTER_AREA)
        cv2.imwrite(str(root / f"{name}.png"), cv2.cvtColor(small, cv2.COLOR_RGB2BGR))
    (root / "sub").mkdir()
    writer = cv2.VideoWriter(str(root / "sub" / "clip.mp4"), cv2.VideoWriter_fourcc(*"mp4v"), 10.0, (160, 120))
    base = cv2.resize(photos["astronaut"], (200, 150))
    for i in range(VIDEO_FRAMES):
        writer.write(cv2.cvtColor(np.ascontiguousarray(base[i * 4:i * 4 + 120, i * 6:i * 6 + 160]), cv2.COLOR_RGB2BGR))
    writer.release()
    (root / "corrupt.jpg").write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg" * 10)
    return root


def _masks(out: Path) -> dict[str, np.ndarray]:
    return {p.relative_to(out).as_posix(): cv2.imread(str(p), cv2.IMREAD_UNCHANGED)
            for p in sorted(out.rglob("*.png"))}


def _video_frames(path: Path) -> list[np.ndarray]:
    cap = cv2.VideoCapture(str(path))
    frames = []
    while True:
        ok, f = cap.read()
        if not ok:
            break
        frames.append(f)
    cap.release()
    return frames


def test_segment_folder_locally(folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "out"
    rc = main(["segment", str(folder), "-o", str(out), "--path", "cpu", "--output", "mask,cutout,composite",
               "--no-progress"])
    assert rc == 1  # the corrupt file fails; everything else is written
    summary = json.loads((out / "summary.json").read_text())
    assert summary["counts"] == {"done": 4, "skipped": 0, "error": 1}
    bad = [i for i in summary["items"] if i["status"] == "error"]
    assert bad[0]["source"].endswith("corrupt.jpg") and "decode" in bad[0]["error"]
    assert summary["frames"] == 3 + VIDEO_FRAMES
    assert set(summary["stage_seconds"]) == {"decode", "inference", "encode"}
    assert "1 failed" in capsys.readouterr().out

    # every image mask equals a single-session run of the same model on the same photo
    seg = Segmenter(SegmentConfig(path="cpu"))
    for name in ("astronaut", "coffee", "chelsea"):
        rgb = cv2.cvtColor(cv2.imread(str(folder / f"{name}.png")), cv2.COLOR_BGR2RGB)
        want = np.round(seg.mask(rgb) * 255).astype(np.uint8)
        got = cv2.imread(str(out / f"{name}.mask.png"), cv2.IMREAD_UNCHANGED)
        np.testing.assert_array_equal(got, want)
        cut = cv2.imread(str(out / f"{name}.cutout.png"), cv2.IMREAD_UNCHANGED)
        assert cut.shape == (150, 200, 4)
        np.testing.assert_array_equal(cut[:, :, 3], want)
        assert (out / f"{name}.composite.png").is_file()
    assert want.max() > 200 and want.min() < 50  # the astronaut photo has person and background
    frames = _video_frames(out / "sub" / "clip.mask.mp4")
    assert len(frames) == VIDEO_FRAMES and frames[0].shape == (120, 160, 3)
    assert len(_video_frames(out / "sub" / "clip.composite.mp4")) == VIDEO_FRAMES
    assert not list(out.rglob("*.partial*"))

    # resumable: a re-run skips what is complete and redoes only what is missing or partial
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*.png")}
    (out / "coffee.cutout.png").unlink()
    (out / "coffee.cutout.partial.png").write_bytes(b"half a file")
    s2 = segment([str(folder)], out, SegmentConfig(path="cpu", outputs=("mask", "cutout", "composite")),
                 progress=False)
    assert s2["counts"] == {"done": 1, "skipped": 3, "error": 1}
    assert [i["source"] for i in s2["items"] if i["status"] == "done"] == [str(folder / "coffee.png")]
    for p, t in before.items():
        if "coffee" not in p.name:
            assert p.stat().st_mtime_ns == t, f"{p} was rewritten"
    assert cv2.imread(str(out / "coffee.cutout.png"), cv2.IMREAD_UNCHANGED).shape == (150, 200, 4)


def test_segment_options_and_errors(folder: Path, tmp_path: Path) -> None:
    out = tmp_path / "o"
    # an unknown output kind, mask output or input file is an error, not a traceback
    assert main(["segment", str(folder / "astronaut.png"), "-o", str(out), "--output", "nope", "--no-progress"]) == 1
    assert main(["segment", str(folder / "astronaut.png"), "-o", str(out), "--path", "cpu", "--mask-output", "zzz",
                 "--no-progress"]) == 1
    assert main(["segment", str(tmp_path / "missing.png"), "-o", str(out), "--no-progress"]) == 1
    s = segment([str(folder / "astronaut.png")], out, SegmentConfig(path="cpu", outputs=("mask",)), progress=False)
    assert s["counts"]["done"] == 1 and (out / "astronaut.mask.png").is_file()


def test_segment_with_a_tflite_model(folder: Path, tmp_path: Path) -> None:
    """MediaPipe's own .tflite (NHWC input, found from its shape) gives the bundled ONNX model's masks."""
    from gpubackend.importers.mediapipe_models import mediapipe_models

    tfl = mediapipe_models()["selfie_segmentation"]
    photo = str(folder / "astronaut.png")
    a = segment([photo], tmp_path / "a", SegmentConfig(model=str(tfl), path="cpu", outputs=("mask",)), progress=False)
    b = segment([photo], tmp_path / "b", SegmentConfig(path="cpu", outputs=("mask",)), progress=False)
    assert a["counts"]["done"] == b["counts"]["done"] == 1
    ma = cv2.imread(str(tmp_path / "a" / "astronaut.mask.png"), cv2.IMREAD_UNCHANGED).astype(int)
    mb = cv2.imread(str(tmp_path / "b" / "astronaut.mask.png"), cv2.IMREAD_UNCHANGED).astype(int)
    assert np.abs(ma - mb).max() <= 1
    assert Segmenter(SegmentConfig(model=str(tfl), path="cpu")).layout == "nhwc"


@pytest.fixture(scope="module")
def local_ray():
    ray = pytest.importorskip("ray")
    for attempt in range(3):  # Ray gives its raylet a fixed 30 s to register: a loaded machine can miss that
        try:
            ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
            break
        except Exception:
            ray.shutdown()
            if attempt == 2:
                raise
    yield ray
    ray.shutdown()


def _compare_with_local(folder: Path, ray_out: Path, local_out: Path) -> None:
    local, remote = _masks(local_out), _masks(ray_out)
    assert local.keys() == remote.keys() and local
    for k in local:
        np.testing.assert_array_equal(remote[k], local[k], err_msg=k)
    for name in ("clip.mask.mp4", "clip.composite.mp4"):
        a, b = _video_frames(local_out / "sub" / name), _video_frames(ray_out / "sub" / name)
        assert len(a) == len(b) == VIDEO_FRAMES
        for fa, fb in zip(a, b):
            np.testing.assert_array_equal(fa, fb)


@pytest.mark.slow
def test_segment_on_local_ray_cluster(folder: Path, tmp_path: Path, local_ray) -> None:
    cfg = SegmentConfig(path="cpu", outputs=("mask", "cutout", "composite"))
    local = segment([str(folder)], tmp_path / "local", cfg, progress=False)
    s = segment([str(folder)], tmp_path / "ray", cfg, use_ray=True, progress=False)
    assert s["engine"] == "ray" and s["counts"] == local["counts"] == {"done": 4, "skipped": 0, "error": 1}
    assert len(s["workers"]) >= 1
    _compare_with_local(folder, tmp_path / "ray", tmp_path / "local")


@pytest.mark.slow
def test_segment_survives_a_killed_ray_worker(folder: Path, tmp_path: Path, local_ray,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = SegmentConfig(path="cpu", outputs=("mask", "cutout", "composite"))
    segment([str(folder)], tmp_path / "local", cfg, progress=False)
    marker = tmp_path / "killed"
    monkeypatch.setenv("GPUBACKEND_SEGMENT_KILL_ONCE", str(marker))  # the actors get GPUBACKEND_* variables
    s = segment([str(folder)], tmp_path / "ray", cfg, use_ray=True, progress=False)
    assert marker.exists(), "no worker was killed"
    assert s["counts"] == {"done": 4, "skipped": 0, "error": 1}
    _compare_with_local(folder, tmp_path / "ray", tmp_path / "local")
    assert not list((tmp_path / "ray").rglob("*.partial*"))


def test_throughput_script_runs_the_local_scenarios(tmp_path: Path) -> None:
    """benchmarks/bench_segment.py (the lead times it at 200 frames on a quiet machine) on 3 tiny frames."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    out = tmp_path / "rows.json"
    proc = subprocess.run([sys.executable, str(root / "benchmarks" / "bench_segment.py"), "--frames", "3",
                           "--size", "96x64", "--scenarios", "local-video,local-images", "--json", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = json.loads(out.read_text())
    assert [r["scenario"] for r in rows] == ["local-video", "local-images"]
    assert all(r["frames"] == 3 and r["stage_seconds"]["inference"] > 0 for r in rows)
    assert "| local-images |" in proc.stdout
