"""``gpubackend segment INPUT... -o DIR``: batch segmentation of images, folders and videos.

For every image it writes ``<name>.mask.png`` (8-bit mask), ``<name>.cutout.png`` (RGBA, the mask as
alpha) and/or ``<name>.composite.png``; for every video ``<name>.mask.mp4`` and/or
``<name>.composite.mp4``; then ``summary.json``. Each output is written under a ``.partial`` name and
renamed when complete, so a re-run skips every input whose outputs all exist and never mistakes a
partial file for a finished one. Unreadable files are reported in the summary and skipped.
``--ray [ADDRESS]`` runs the same work on a Ray cluster (``segment_ray.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError, OptionError
from ..paths import PATH_KEYS

IMAGE_EXTS = {".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff"}
VIDEO_EXTS = {".mp4", ".avi", ".mov", ".mkv", ".webm", ".m4v"}
OUTPUT_KINDS = ("mask", "cutout", "composite")
STAGES = ("decode", "inference", "encode")
SUMMARY = "summary.json"


@dataclass
class SegmentConfig:
    """Everything a worker needs to turn a frame into a mask and outputs (plain data: it travels to Ray)."""

    model: str | None = None  # None: the bundled selfie segmentation model
    path: str = "auto"
    size: tuple[int, int] | None = None  # model input (width, height); None: from the model
    layout: str | None = None  # "nchw" | "nhwc"; None: from the model's input shape
    scale: float = 1.0 / 255.0
    mean: tuple[float, ...] = (0.0,)
    std: tuple[float, ...] = (1.0,)
    mask_output: str = "0"  # output name or index
    mask_channel: int = 0
    outputs: tuple[str, ...] = ("mask", "cutout")
    mode: str = "blur"  # composite mode (demo.processing.MODES)


@dataclass
class WorkItem:
    source: str
    rel: str  # output stem relative to the output directory, without suffixes
    kind: str  # "image" | "video"

    def targets(self, out_dir: Path, outputs: Iterable[str]) -> dict[str, Path]:
        ext = ".png" if self.kind == "image" else ".mp4"
        kinds = [k for k in outputs if self.kind == "image" or k != "cutout"]
        return {k: out_dir / f"{self.rel}.{k}{ext}" for k in kinds}


@dataclass
class ItemResult:
    source: str
    kind: str
    status: str  # "done" | "skipped" | "error"
    outputs: list[str] = field(default_factory=list)
    frames: int = 0
    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(STAGES, 0.0))
    error: str | None = None
    worker: str | None = None


def collect_inputs(inputs: list[str]) -> list[WorkItem]:
    """Files and folders (searched recursively) -> work items; names not images or videos are ignored in
    folders and rejected when given directly."""
    items: list[WorkItem] = []
    for spec in inputs:
        p = Path(spec)
        if p.is_dir():
            for f in sorted(p.rglob("*")):
                if f.is_file() and f.suffix.lower() in IMAGE_EXTS | VIDEO_EXTS:
                    rel = f.relative_to(p)
                    items.append(_item(f, str(Path(p.name) / rel.with_suffix("")) if len(inputs) > 1
                                       else str(rel.with_suffix(""))))
        elif p.is_file():
            if p.suffix.lower() not in IMAGE_EXTS | VIDEO_EXTS:
                raise InputError(f"{spec}: not an image or video file (by extension)")
            items.append(_item(p, p.stem))
        else:
            raise InputError(f"{spec}: no such file or folder")
    seen: set[str] = set()
    for it in items:
        if it.rel in seen:
            raise InputError(f"two inputs would write the same output name {it.rel!r}")
        seen.add(it.rel)
    return items


def _item(f: Path, rel: str) -> WorkItem:
    return WorkItem(str(f), rel, "video" if f.suffix.lower() in VIDEO_EXTS else "image")


class Segmenter:
    """One Session and the preprocessing around it: RGB uint8 frame -> float mask of the frame's size."""

    def __init__(self, cfg: SegmentConfig) -> None:
        from ..models import selfie_model_path
        from ..session import Session

        self.cfg = cfg
        self.session = Session(cfg.model or str(selfie_model_path()), path=cfg.path)
        self.input_name = self.session.input_names[0]
        shape = self.session._base_graph.input_shapes.get(self.input_name)
        if shape is None or len(shape) != 4:
            raise InputError(f"the model's input {self.input_name!r} must be rank 4 (got shape {shape})")
        layout = cfg.layout or ("nchw" if shape[1] in (1, 3) and shape[3] not in (1, 3) else "nhwc")
        if layout not in ("nchw", "nhwc"):
            raise OptionError(f"--layout must be nchw or nhwc, not {layout!r}")
        self.layout = layout
        h, w, c = (shape[2], shape[3], shape[1]) if layout == "nchw" else (shape[1], shape[2], shape[3])
        if cfg.size is not None:
            w, h = cfg.size
        if not (isinstance(w, int) and isinstance(h, int)):
            raise InputError(f"the model's input size is symbolic ({shape}); give --size WxH")
        self.width, self.height, self.channels = w, h, int(c or 3)
        self.mean = np.asarray(cfg.mean, np.float32)
        self.std = np.asarray(cfg.std, np.float32)
        names = self.session.output_names
        self.output = names[int(cfg.mask_output)] if cfg.mask_output.isdigit() else cfg.mask_output
        if self.output not in names:
            raise OptionError(f"--mask-output {cfg.mask_output!r}: the model's outputs are {names}")

    def preprocess(self, rgb: np.ndarray) -> np.ndarray:
        import cv2

        small = cv2.resize(rgb, (self.width, self.height), interpolation=cv2.INTER_AREA)[:, :, : self.channels]
        x = (small.astype(np.float32) * np.float32(self.cfg.scale) - self.mean) / self.std
        x = x.transpose(2, 0, 1) if self.layout == "nchw" else x
        return np.ascontiguousarray(x[None], dtype=np.float32)

    def mask(self, rgb: np.ndarray) -> np.ndarray:
        from ..demo.processing import upsample_mask

        (y,) = self.session.run({self.input_name: self.preprocess(rgb)}, output_names=[self.output])
        y = np.asarray(y, np.float32)
        if y.ndim == 4:  # pick the mask channel in the output's own layout
            y = y[0, self.cfg.mask_channel] if self.layout == "nchw" else y[0, :, :, self.cfg.mask_channel]
        m = np.clip(y.reshape(y.shape[-2], y.shape[-1]), 0.0, 1.0)
        return upsample_mask(m, rgb.shape[1], rgb.shape[0])


def _partial(target: Path) -> Path:
    return target.with_name(target.stem + ".partial" + target.suffix)


def process_item(seg: Segmenter, item: WorkItem, out_dir: Path, background: np.ndarray | None = None) -> ItemResult:
    """Segment one image or video and write its outputs atomically; errors become an ``error`` result."""
    targets = item.targets(out_dir, seg.cfg.outputs)
    res = ItemResult(item.source, item.kind, "done", outputs=[str(p) for p in targets.values()])
    try:
        for p in targets.values():
            p.parent.mkdir(parents=True, exist_ok=True)
        if item.kind == "image":
            _process_image(seg, item, targets, res)
        else:
            _process_video(seg, item, targets, res)
    except Exception as exc:  # a bad file is reported and skipped, never fatal to the batch
        res.status, res.error, res.outputs = "error", f"{type(exc).__name__}: {exc}", []
        for p in targets.values():
            _partial(p).unlink(missing_ok=True)
    return res


def _compose(seg: Segmenter, frame: np.ndarray, mask: np.ndarray) -> np.ndarray:
    from ..demo.processing import compose

    return compose(frame, mask, seg.cfg.mode)


def _process_image(seg: Segmenter, item: WorkItem, targets: dict[str, Path], res: ItemResult) -> None:
    import cv2

    t0 = time.perf_counter()
    bgr = cv2.imread(item.source, cv2.IMREAD_COLOR)
    if bgr is None:
        raise InputError("cannot decode the image")
    rgb = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
    t1 = time.perf_counter()
    mask = seg.mask(rgb)
    t2 = time.perf_counter()
    m8 = np.round(mask * 255.0).astype(np.uint8)
    for kind, target in targets.items():
        if kind == "mask":
            img = m8
        elif kind == "cutout":
            img = np.dstack([bgr, m8])
        else:
            img = cv2.cvtColor(_compose(seg, rgb, mask), cv2.COLOR_RGB2BGR)
        part = _partial(target)
        if not cv2.imwrite(str(part), img):
            raise OSError(f"cannot write {part}")
        os.replace(part, target)
    res.frames = 1
    res.seconds = {"decode": t1 - t0, "inference": t2 - t1, "encode": time.perf_counter() - t2}


def _process_video(seg: Segmenter, item: WorkItem, targets: dict[str, Path], res: ItemResult) -> None:
    import cv2

    cap = cv2.VideoCapture(item.source)
    if not cap.isOpened():
        raise InputError("cannot open the video")
    fps = cap.get(cv2.CAP_PROP_FPS) or 25.0
    writers: dict[str, Any] = {}
    secs = dict.fromkeys(STAGES, 0.0)
    try:
        while True:
            t0 = time.perf_counter()
            ok, bgr = cap.read()
            if not ok:
                break
            rgb = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
            t1 = time.perf_counter()
            mask = seg.mask(rgb)
            t2 = time.perf_counter()
            h, w = bgr.shape[:2]
            for kind, target in targets.items():
                if kind not in writers:
                    writers[kind] = cv2.VideoWriter(str(_partial(target)), cv2.VideoWriter_fourcc(*"mp4v"), fps, (w, h))
                    if not writers[kind].isOpened():
                        raise OSError(f"cannot open a video writer for {target}")
                if kind == "mask":
                    frame = cv2.cvtColor(np.round(mask * 255.0).astype(np.uint8), cv2.COLOR_GRAY2BGR)
                else:
                    frame = cv2.cvtColor(_compose(seg, rgb, mask), cv2.COLOR_RGB2BGR)
                writers[kind].write(frame)
            t3 = time.perf_counter()
            secs["decode"] += t1 - t0
            secs["inference"] += t2 - t1
            secs["encode"] += t3 - t2
            res.frames += 1
    finally:
        cap.release()
        for w_ in writers.values():
            w_.release()
    if res.frames == 0:
        raise InputError("the video has no readable frame")
    for target in targets.values():
        os.replace(_partial(target), target)
    res.seconds = secs


def is_complete(item: WorkItem, out_dir: Path, outputs: Iterable[str]) -> bool:
    return all(p.is_file() for p in item.targets(out_dir, outputs).values())


def summarize(results: list[ItemResult], wall: float, cfg: SegmentConfig, engine: str) -> dict[str, Any]:
    done = [r for r in results if r.status == "done"]
    frames = sum(r.frames for r in done)
    stages = {s: round(sum(r.seconds.get(s, 0.0) for r in done), 4) for s in STAGES}
    workers: dict[str, dict[str, float]] = {}
    for r in done:
        w = workers.setdefault(r.worker or "local", {"frames": 0, "busy_s": 0.0})
        w["frames"] += r.frames
        w["busy_s"] += sum(r.seconds.values())
    for w in workers.values():
        w["fps"] = round(w["frames"] / w["busy_s"], 2) if w["busy_s"] > 0 else 0.0
        w["busy_s"] = round(w["busy_s"], 3)
    return {
        "engine": engine,
        "model": cfg.model or "bundled selfie_segmentation",
        "path": cfg.path,
        "counts": {s: sum(1 for r in results if r.status == s) for s in ("done", "skipped", "error")},
        "frames": frames,
        "wall_s": round(wall, 3),
        "fps": round(frames / wall, 2) if wall > 0 else 0.0,
        "stage_seconds": stages,
        "workers": workers,
        "items": [asdict(r) for r in results],
    }


def write_json_atomic(path: Path, data: Any) -> None:
    part = path.with_name(path.name + ".partial")
    part.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(part, path)


def run_local(cfg: SegmentConfig, todo: list[WorkItem], out_dir: Path, progress: bool) -> list[ItemResult]:
    from tqdm import tqdm

    seg = Segmenter(cfg)
    results = []
    for item in tqdm(todo, desc="segment", unit="file", disable=not progress, file=sys.stderr):
        results.append(process_item(seg, item, out_dir))
    seg.session.close()
    return results


def segment(inputs: list[str], out_dir: Path, cfg: SegmentConfig, ray_address: str | None = None,
            use_ray: bool = False, progress: bool = True, workers: int | None = None) -> dict[str, Any]:
    """The whole command as a function: returns the summary it also writes to ``out_dir/summary.json``."""
    for k in cfg.outputs:
        if k not in OUTPUT_KINDS:
            raise OptionError(f"--output {k!r}: choose from {', '.join(OUTPUT_KINDS)}")
    items = collect_inputs(inputs)
    out_dir.mkdir(parents=True, exist_ok=True)
    skipped = [i for i in items if is_complete(i, out_dir, cfg.outputs)]
    todo = [i for i in items if i not in skipped]
    t0 = time.perf_counter()
    if todo and use_ray:
        from .segment_ray import run_ray

        results = run_ray(cfg, todo, out_dir, ray_address, workers, progress)
    elif todo:
        results = run_local(cfg, todo, out_dir, progress)
    else:
        results = []
    wall = time.perf_counter() - t0
    results += [ItemResult(i.source, i.kind, "skipped", outputs=[str(p) for p in
                                                              i.targets(out_dir, cfg.outputs).values()])
                for i in skipped]
    order = {i.source: n for n, i in enumerate(items)}
    results.sort(key=lambda r: order[r.source])
    summary = summarize(results, wall, cfg, "ray" if use_ray else "local")
    write_json_atomic(out_dir / SUMMARY, summary)
    return summary


def _floats(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(v) for v in text.split(","))
    except ValueError as exc:
        raise OptionError(f"expected comma-separated numbers, got {text!r}") from exc


def _size(text: str) -> tuple[int, int]:
    w, sep, h = text.lower().partition("x")
    if not sep or not w.isdigit() or not h.isdigit():
        raise OptionError(f"--size must be WIDTHxHEIGHT, not {text!r}")
    return int(w), int(h)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("segment", help="segment images, folders and videos into masks, cut-outs or composites",
                       description="Batch segmentation of images, folders and videos: masks, cut-outs, composites "
                                   "and summary.json; resumable; --ray runs it on a Ray cluster.")
    p.add_argument("inputs", nargs="+", help="image or video files and folders (searched recursively)")
    p.add_argument("--output-dir", "-o", type=Path, required=True, help="where outputs and summary.json go")
    p.add_argument("--model", help="an .onnx or .tflite segmentation model (default: the bundled selfie model)")
    p.add_argument("--path", default="auto", choices=("auto",) + PATH_KEYS, help="code path (default: auto)")
    p.add_argument("--output", default="mask,cutout",
                   help="comma list of mask, cutout (images only), composite (default: mask,cutout)")
    p.add_argument("--mode", default="blur", choices=("overlay", "blur", "replace"), help="composite style")
    p.add_argument("--size", type=_size, help="model input WIDTHxHEIGHT (default: the model's)")
    p.add_argument("--layout", choices=("nchw", "nhwc"), help="model input layout (default: from its shape)")
    p.add_argument("--scale", type=float, default=1.0 / 255.0, help="pixel scale before mean/std (default 1/255)")
    p.add_argument("--mean", type=_floats, default=(0.0,), help="per-channel mean subtracted after scaling")
    p.add_argument("--std", type=_floats, default=(1.0,), help="per-channel std divided by after the mean")
    p.add_argument("--mask-output", default="0", help="the output holding the mask: name or index (default 0)")
    p.add_argument("--mask-channel", type=int, default=0, help="channel of that output to use (default 0)")
    p.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                   help="run on Ray: a cluster ADDRESS ('auto' joins the local node's cluster), none: start one "
                        "(write --ray after the inputs, or give an ADDRESS)")
    p.add_argument("--workers", type=int, help="Ray actors (default: the cluster's CPUs)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    cfg = SegmentConfig(model=args.model, path=args.path, size=args.size, layout=args.layout, scale=args.scale,
                        mean=args.mean, std=args.std, mask_output=args.mask_output, mask_channel=args.mask_channel,
                        outputs=tuple(k.strip() for k in args.output.split(",") if k.strip()), mode=args.mode)
    summary = segment(args.inputs, args.output_dir, cfg, ray_address=args.ray or None, use_ray=args.ray is not None,
                      progress=not args.no_progress, workers=args.workers)
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        c = summary["counts"]
        print(f"{c['done']} done, {c['skipped']} skipped (complete), {c['error']} failed; {summary['frames']} frames "
              f"in {summary['wall_s']:.2f} s ({summary['fps']:.1f} frames/s); stages "
              + ", ".join(f"{k} {v:.2f} s" for k, v in summary["stage_seconds"].items()))
        for item in summary["items"]:
            if item["status"] == "error":
                print(f"  failed: {item['source']}: {item['error']}", file=sys.stderr)
    return 0 if summary["counts"]["error"] == 0 else 1
