"""``gpubackend calibrate-fp16 MODEL --input IMAGE_OR_NPY -o plan.json``: measure which activations
``precision="fp16"`` must keep in fp32 for a model to stay within a tolerance of fp32, and write
them as a precision plan (``SessionOptions(precision_plan="plan.json")``)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from ..errors import InputError
from . import add_shape_option, shapes_of

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".webp")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "calibrate-fp16", help="find the activations fp16 must keep in fp32; write a precision plan",
        description="Measure on the CPU (onnxruntime with fp16 round trips where precision=fp16 stores "
                    "activations) which activations hurt the outputs most when stored in fp16, keep the fewest "
                    "of them in fp32 until the simulated error (max|got - ref| / max(1, max|ref|) over the "
                    "outputs) is below TOLERANCE x MARGIN, and write them as a JSON precision plan for "
                    "SessionOptions(precision_plan=...). The GPU paths' own error lies a little above the "
                    "simulated one, hence the margin. Calibrate on a realistic input: the plan holds for inputs "
                    "like it, and should be checked on a few others.")
    p.add_argument("model", help="path to an .onnx file")
    p.add_argument("--input", "-i", action="append", default=[], metavar="[NAME=]FILE",
                   help="an input: a .npy array, or an image (png, jpg, ...) resized to the input's height and "
                        "width, RGB, times --scale, then (x - mean) / std (repeat for several inputs)")
    add_shape_option(p)
    p.add_argument("--scale", type=float, default=1 / 255, help="image pixel scale (default 1/255: values in [0, 1])")
    p.add_argument("--mean", default="0,0,0", help="image channel means after scaling (default 0,0,0)")
    p.add_argument("--std", default="1,1,1", help="image channel deviations after scaling (default 1,1,1)")
    p.add_argument("--bgr", action="store_true", help="feed image channels as BGR")
    p.add_argument("--tolerance", type=float, default=2e-2, help="the error the plan is for (default 2e-2)")
    p.add_argument("--margin", type=float, default=0.5,
                   help="calibrate to TOLERANCE x MARGIN, room for the GPU paths' own rounding (default 0.5)")
    p.add_argument("--verify", metavar="PATH", choices=("gles2", "gles3", "gles31", "vulkan"),
                   help="run the model on this GPU path with the plan; while its error is above TOLERANCE, halve "
                        "the margin and calibrate again (at most 3 times)")
    p.add_argument("--no-prune", action="store_true",
                   help="skip the pass that tries to drop each kept activation again (fewer runs, larger plan)")
    p.add_argument("--output", "-o", type=Path, required=True, help="where to write the JSON plan")
    p.add_argument("--json", action="store_true", help="print a JSON report (progress goes to stderr)")
    p.set_defaults(func=run)


def _floats(text: str, what: str) -> np.ndarray:
    try:
        values = np.asarray([float(v) for v in text.split(",")], np.float32)
    except ValueError as exc:
        raise InputError(f"--{what} {text!r}: write comma-separated numbers, e.g. 0.485,0.456,0.406") from exc
    if values.size not in (1, 3):
        raise InputError(f"--{what} {text!r}: give one value or three (one per channel)")
    return values


def image_input(file: Path, shape: tuple[int | None, ...] | None, args: argparse.Namespace) -> np.ndarray:
    """An image file as an NCHW or NHWC float32 array of ``shape`` (the axis of size 3 or 1 next to
    the batch axis, or the last, is the channel axis)."""
    from PIL import Image

    if shape is None or len(shape) != 4 or None in shape:
        raise InputError(f"--input {file}: an image needs the input's full shape (give --shape NAME=1x3xHxW)")
    nhwc = shape[3] in (1, 3) and shape[1] not in (1, 3)
    channels, height, width = (shape[3], shape[1], shape[2]) if nhwc else (shape[1], shape[2], shape[3])
    try:
        with Image.open(file) as img:
            pic = img.convert("RGB" if channels == 3 else "L").resize((width, height), Image.BILINEAR)
    except OSError as exc:
        raise InputError(f"--input {file}: cannot read the image: {exc}") from exc
    x = np.asarray(pic, np.float32).reshape(height, width, channels)
    if args.bgr and channels == 3:
        x = x[..., ::-1]
    x = (x * np.float32(args.scale) - _floats(args.mean, "mean")[:channels]) / _floats(args.std, "std")[:channels]
    x = x[None] if nhwc else x.transpose(2, 0, 1)[None]
    return np.ascontiguousarray(np.repeat(x, shape[0], axis=0), np.float32)


def load_inputs(specs: list[str], names: list[str], shapes: dict[str, tuple[int | None, ...] | None],
                args: argparse.Namespace) -> dict[str, np.ndarray]:
    """``--input`` as a feed dict; every input of the model must be given."""
    feeds: dict[str, np.ndarray] = {}
    for spec in specs:
        name, sep, file = spec.partition("=")
        if not sep or name not in names:
            if len(names) != 1:
                raise InputError(f"--input {spec!r}: write NAME=FILE (the inputs are {names})")
            name, file = names[0], spec
        path = Path(file)
        if path.suffix.lower() in IMAGE_SUFFIXES:
            feeds[name] = image_input(path, shapes.get(name), args)
            continue
        try:
            feeds[name] = np.load(path, allow_pickle=False)
        except Exception as exc:
            raise InputError(f"--input {spec}: cannot read {file} as .npy: {exc}") from exc
    missing = [n for n in names if n not in feeds]
    if missing:
        raise InputError(f"calibration needs a realistic value for every input; missing: {missing} (--input NAME=FILE)")
    return feeds


def run(args: argparse.Namespace) -> int:
    from .. import fp16_calibration, mixed_precision
    from ..model import declared_shape, load_model, pin_shape

    proto = load_model(str(args.model))
    given = shapes_of(args)
    inits = {i.name for i in proto.graph.initializer}
    names = [i.name for i in proto.graph.input if i.name not in inits]
    shapes: dict[str, tuple[int | None, ...] | None] = {}
    for vi in proto.graph.input:
        if vi.name in names:
            declared = declared_shape(vi.name, vi.type)
            shapes[vi.name] = pin_shape(vi.name, declared, given[vi.name]) if vi.name in given else declared
    feeds = load_inputs(args.input, names, shapes, args)
    out = sys.stderr if args.json else sys.stdout

    def say(msg: str) -> None:
        print(msg, file=out, flush=True)

    say(f"calibrating {args.model} for fp16 within {args.tolerance:g} (target {args.tolerance * args.margin:g}) on "
        + ", ".join(f"{n} {'x'.join(map(str, v.shape))}" for n, v in feeds.items()))
    cal, verified = fp16_calibration.calibrate_verified(proto, feeds, args.tolerance, args.margin,
                                                        [args.verify] if args.verify else (),
                                                        prune=not args.no_prune, progress=say)
    about = {"model": Path(args.model).name, "inputs": {n: list(v.shape) for n, v in feeds.items()}, **cal.about(),
             **({"verified_fp16_error": verified} if verified else {})}
    mixed_precision.write_plan(args.output, cal.keep, **about)
    report = {**about, "keep_fp32": cal.keep, "onnxruntime_runs": cal.runs, "plan": str(args.output)}
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        verdict = "reached" if cal.reached else "NOT reached (every candidate kept)"
        print(f"simulated fp16 error: {cal.error_static:.2e} with the static rule -> {cal.error_planned:.2e} with "
              f"{len(cal.keep)} of {cal.candidates} activations kept fp32 (target {cal.target:.2e} {verdict}); "
              f"{cal.fp32_byte_share:.1%} of activation bytes fp32; {cal.runs} onnxruntime runs")
        print(f"plan written to {args.output}: SessionOptions(precision='fp16', precision_plan='{args.output}')")
        for path, err in verified.items():
            print(f"{path} fp16 error with the plan: {err:.2e} ({'within' if err <= args.tolerance else 'ABOVE'} "
                  f"{args.tolerance:g})")
    return 0 if cal.reached and all(e <= args.tolerance for e in verified.values()) else 1
