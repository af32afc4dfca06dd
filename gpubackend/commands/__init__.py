"""The subcommands of ``gpubackend``, and the options they share."""

from __future__ import annotations

import argparse

SHAPE_HELP = ("the shape of a dynamic input, e.g. --shape image=1x3x480x640 (repeat for several inputs); "
              "an input with symbolic dimensions needs one")


def parse_shape(spec: str) -> tuple[str, tuple[int, ...]]:
    """``NAME=1x3x480x640`` -> ("NAME", (1, 3, 480, 640)); argparse type of ``--shape``."""
    name, sep, dims = spec.rpartition("=")
    try:
        shape = tuple(int(d) for d in dims.lower().split("x")) if dims.strip() else ()
    except ValueError:
        shape = ()
    if not sep or not name or not shape or any(d < 0 for d in shape):
        raise argparse.ArgumentTypeError(f"{spec!r}: write NAME=DIMxDIMx..., e.g. image=1x3x480x640")
    return name, shape


def add_shape_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--shape", action="append", type=parse_shape, default=[], metavar="NAME=1x3xHxW",
                        help=SHAPE_HELP)


def shapes_of(args: argparse.Namespace) -> dict[str, tuple[int, ...]]:
    """The ``--shape`` options as input name -> shape (OptionError for one input given twice)."""
    from ..errors import OptionError

    shapes: dict[str, tuple[int, ...]] = {}
    for name, shape in args.shape:
        if name in shapes and shapes[name] != shape:
            raise OptionError(f"--shape gives input {name!r} two shapes: {shapes[name]} and {shape}")
        shapes[name] = shape
    return shapes
