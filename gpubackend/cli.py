"""The ``gpubackend`` command: ``run``, ``probe``, ``bench``, ``tune``, ``conformance``, ``segment``, ``zoo``,
``calibrate-fp16``. Each subcommand lives in ``gpubackend/commands/<name>.py`` (``-`` written ``_``) and exposes
``register(subparsers)``."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from . import __version__
from .errors import GpuBackendError

COMMANDS = ("run", "probe", "bench", "tune", "conformance", "segment", "zoo", "calibrate_fp16")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpubackend",
        description="Run ONNX models on GL ES 2.0/3.0/3.1, Vulkan or the CPU; probe, benchmark and check drivers.",
        epilog="Each command has its own --help. The demo is the separate command gpubackend-demo.")
    parser.add_argument("--version", action="version", version=f"gpubackend {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log what the runtime decides")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"gpubackend.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"gpubackend.commands.{name}":
                continue  # not built in this version
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(name)s: %(message)s")
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    if args.command in ("run", "bench", "conformance"):
        from gpubackend import fallback

        fallback.tune_malloc()  # the command owns its process: let the NumPy kernels reuse freed buffers
    try:
        return int(args.func(args) or 0)
    except GpuBackendError as exc:
        print(f"gpubackend {args.command}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
