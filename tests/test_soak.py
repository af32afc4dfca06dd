"""Demo soak: the headless demo on the synthetic source keeps its memory flat over many frames.
The demo runs in its own process (GL contexts belong to the process's threads), which records its
resident set after every frame; the last quarter of the frames is compared with the second."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

GPU_PATHS = ("vulkan", "gles31", "gles3", "gles2")


# Runs in the demo's process: the demo's own headless loop, with the resident set read after each
# frame it accounts for.
_DRIVER = """
import json, sys
from pathlib import Path
from gpubackend.demo.app import Demo, build_parser

def rss_mb():
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024

args = build_parser().parse_args(sys.argv[2:])
demo = Demo(args)
per_frame = []
account = demo.account
def counted(res):
    out = account(res)
    per_frame.append(rss_mb())
    return out
demo.account = counted
summary = demo.run_headless()
Path(sys.argv[1]).write_text(json.dumps({"summary": summary, "rss_mb": per_frame}))
"""


def soak(path: str, frames: int, out_dir: Path) -> tuple[dict, list[float]]:
    """Run the headless demo for ``frames`` frames; its summary and its RSS (MB) after each frame."""
    result = out_dir.parent / "soak.json"
    cmd = [sys.executable, "-c", _DRIVER, str(result), "--headless", "--source", "synthetic", "--path", path,
           "--frames", str(frames), "--width", "160", "--height", "120", "--no-hud", "--output", str(out_dir)]
    proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=6600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(result.read_text())
    return data["summary"], data["rss_mb"]


def growth_mb(per_frame: list[float]) -> tuple[float, float, float]:
    """(after warm-up, at the end, growth): medians of the second and the last quarter of the frames
    (the first quarter warms up: programs compiled, buffers and caches made)."""
    q = max(1, len(per_frame) // 4)
    warm = float(np.median(per_frame[q:2 * q]))
    end = float(np.median(per_frame[-q:]))
    return warm, end, end - warm


def _check(path: str, frames: int, limit_mb: float, tmp_path: Path) -> None:
    summary, samples = soak(path, frames, tmp_path / "out")
    if summary["path"] != path:
        pytest.skip(f"{path} unavailable here: the demo ran on {summary['path']}")
    assert summary["frames"] == frames
    assert len(samples) == frames
    warm, end, grew = growth_mb(samples)
    print(f"demo soak {path}: {frames} frames, RSS {warm:.1f} -> {end:.1f} MB ({grew:+.1f} MB), "
          f"peak {max(samples):.1f} MB")
    assert grew < limit_mb, f"{path}: RSS grew {grew:.1f} MB over {frames} frames ({warm:.1f} -> {end:.1f})"


@pytest.mark.parametrize(("path", "frames"), [("cpu", 100), ("gles31", 40)])
def test_demo_memory_stays_flat(path: str, frames: int, tmp_path: Path) -> None:
    _check(path, frames, 20.0, tmp_path)


@pytest.mark.slow
# 500 selfie frames on a software GPU driver: 12-18 min on a loaded 2-core machine, 43 min for gles2
# at a load average of 17 (measured: vulkan RSS 316.0 -> 317.3 MB, gles2 324.0 -> 324.1 MB)
@pytest.mark.timeout(7200)
@pytest.mark.parametrize(("path", "frames"), [("cpu", 2000), *((p, 500) for p in GPU_PATHS)])
def test_demo_soak(path: str, frames: int, tmp_path: Path) -> None:
    _check(path, frames, 20.0, tmp_path)
