"""``gpubackend probe``: which code paths this machine offers, verified, and which one ``auto`` picks."""

from __future__ import annotations

import argparse
import json
from typing import Any


def register(subparsers: Any) -> None:
    """Add the ``probe`` subcommand to ``gpubackend``'s subparsers."""
    p = subparsers.add_parser(
        "probe",
        help="detect and verify the GPU code paths (vulkan, gles31, gles3, gles2) and show the choice",
        description="Detect the GL ES and Vulkan drivers, verify each code path in a crash-safe child "
                    "process, and print a table (path, available, verified, preferred, software, reason), "
                    "the driver fingerprint and key limits. Verdicts are cached per driver and package "
                    "version in GPUBACKEND_CACHE_DIR.",
    )
    p.add_argument("--json", action="store_true", help="print the whole report as JSON")
    p.add_argument("--refresh", action="store_true", help="ignore the cached verdict and verify again")
    p.add_argument("--timeout", type=float, default=None,
                   help="seconds the verification child may take (default: $GPUBACKEND_PROBE_TIMEOUT or 60)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import os

    if getattr(args, "timeout", None):
        os.environ["GPUBACKEND_PROBE_TIMEOUT"] = str(args.timeout)
    from capability_probe import probe

    from .. import tuning
    from ..paths.cpu import cpu_engine_info

    report = probe(refresh=bool(args.refresh))
    engine = cpu_engine_info()
    kernel_variants = tuning.device_wide_lines(report.fingerprint)
    if args.json:
        print(json.dumps(dict(report.to_dict(), cpu_engine=engine, kernel_variants=kernel_variants), indent=2,
                         default=str))
    else:
        print(report.table())
        print("\n".join(kernel_variants))
        print(f"cpu engine (auto): {engine['auto']}"
              + (f" (onnxruntime {engine['onnxruntime']})" if engine["onnxruntime"] else
                 " (onnxruntime not installed: pip install 'gpubackend[cpu]')"))
    return 0
