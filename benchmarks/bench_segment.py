"""Throughput of ``gpubackend segment``: local vs Ray, with the per-stage split (issue 20).

    python benchmarks/bench_segment.py                       # 200 frames at 640x480, cpu path, all scenarios
    python benchmarks/bench_segment.py --frames 200 --size 640x480 --path cpu --workers 2 \\
        --scenarios local-video,local-images,ray-images --json out.json

Makes the input once in a temporary folder: ``--frames`` frames at ``--size`` (scikit-image's
astronaut photo, shifted a little per frame), written both as PNG files and as one MP4 video. Each
scenario then runs the real command in a fresh process (``python -m gpubackend segment ... --json``,
``--output mask``), so session creation, Ray cluster start and actor start are inside its wall time:

- ``local-video``: the video, one local process;
- ``local-images``: the PNG folder, one local process;
- ``ray-images``: the PNG folder through Ray with ``--workers`` actors (a local cluster the command
  starts; ``--ray-address`` joins a running one instead).

Prints, per scenario: wall seconds (measured outside the process), frames/s over that wall, the
command's own frames/s, the seconds spent per stage (decode, inference, encode, summed over
workers) and each worker's busy frames/s. Run it on a quiet machine (nothing else running): on 2
cores Ray's workers share the CPUs with the driver and raylet.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ("local-video", "local-images", "ray-images")


def make_frames(folder: Path, frames: int, size: tuple[int, int]) -> tuple[Path, Path]:
    """``folder/images/frame_NNNN.png`` and ``folder/video/clip.mp4`` with the same frames."""
    import cv2
    import numpy as np
    from skimage import data

    w, h = size
    photo = cv2.resize(data.astronaut()[:, :, ::-1], (w + 32, h + 32), interpolation=cv2.INTER_AREA)
    images, video = folder / "images", folder / "video"
    images.mkdir(parents=True)
    video.mkdir()
    clip = video / "clip.mp4"
    writer = cv2.VideoWriter(str(clip), cv2.VideoWriter_fourcc(*"mp4v"), 25.0, (w, h))
    for i in range(frames):
        dx, dy = i % 32, (i // 2) % 32
        frame = np.ascontiguousarray(photo[dy:dy + h, dx:dx + w])
        cv2.imwrite(str(images / f"frame_{i:04d}.png"), frame)
        writer.write(frame)
    writer.release()
    return images, clip


def run_scenario(name: str, source: Path, out: Path, args: argparse.Namespace) -> dict:
    cmd = [sys.executable, "-m", "gpubackend", "segment", str(source), "-o", str(out), "--output", "mask",
           "--path", args.path, "--json", "--no-progress"]
    if name.startswith("ray"):
        cmd += ["--ray", *([args.ray_address] if args.ray_address else []), "--workers", str(args.workers)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{name}: `{' '.join(cmd)}` exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    summary = json.loads(proc.stdout[proc.stdout.index("{"):])
    return {"scenario": name, "frames": summary["frames"], "wall_s": round(wall, 2),
            "fps_wall": round(summary["frames"] / wall, 2), "fps_command": summary["fps"],
            "stage_seconds": summary["stage_seconds"],
            "workers": {k: v["fps"] for k, v in summary["workers"].items()}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--frames", type=int, default=200)
    ap.add_argument("--size", default="640x480", help="frame WIDTHxHEIGHT")
    ap.add_argument("--path", default="cpu", help="gpubackend path the command uses (default cpu)")
    ap.add_argument("--workers", type=int, default=2, help="Ray actors")
    ap.add_argument("--ray-address", default="", help="join a running Ray cluster instead of starting one")
    ap.add_argument("--scenarios", default=",".join(SCENARIOS), help=f"comma list of {', '.join(SCENARIOS)}")
    ap.add_argument("--json", type=Path, help="also write the rows here")
    args = ap.parse_args(argv)
    scenarios = [s for s in args.scenarios.split(",") if s]
    unknown = set(scenarios) - set(SCENARIOS)
    if unknown:
        ap.error(f"unknown scenario(s) {sorted(unknown)}")
    w, h = (int(v) for v in args.size.lower().split("x"))
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_segment_") as tmp:
        images, clip = make_frames(Path(tmp), args.frames, (w, h))
        for name in scenarios:
            source = clip if name == "local-video" else images
            rows.append(run_scenario(name, source, Path(tmp) / f"out-{name}", args))
            r = rows[-1]
            print(f"{name}: {r['frames']} frames in {r['wall_s']} s", file=sys.stderr, flush=True)
    print(f"{args.frames} frames at {w}x{h}, path {args.path}, --output mask\n")
    print("| run | wall s | frames/s (wall) | frames/s (command) | decode s | inference s | encode s | "
          "per-worker busy frames/s |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        st = r["stage_seconds"]
        workers = ", ".join(f"{v}" for v in r["workers"].values())
        print(f"| {r['scenario']} | {r['wall_s']} | {r['fps_wall']} | {r['fps_command']} | {st['decode']:.1f} | "
              f"{st['inference']:.1f} | {st['encode']:.1f} | {workers} |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
