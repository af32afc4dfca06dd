"""Compile every compute shader variant in ``shaders/compute/`` to SPIR-V for the Vulkan path.

``python -m gpubackend.shaders.build_spirv`` regenerates ``shaders/spirv/*.spv`` (and removes stale ones);
``--check`` only verifies that the shipped binaries match their sources (exit 1 if not). The
variants (define sets) per shader come from ``gpubackend.paths.compute_kernels.variants()``
(the kernel generators know which defines they emit) plus this module's own self-test variants.
Each source is compiled as ``#version 450`` (glslang defines ``VULKAN``), so one GLSL body serves
GL ES 3.1 and Vulkan. Users need no compiler: the runtime only loads the shipped ``.spv`` files.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from . import ROOT, expand, read

SPIRV_DIR = ROOT / "spirv"
MANIFEST = SPIRV_DIR / "manifest.json"  # spv name -> sha256 of the exact GLSL text it was built from
COMPUTE_DIR = ROOT / "compute"
VERSION = "450"
TARGET_ENV = "vulkan1.0"
SUBGROUP_TARGET_ENV = "vulkan1.1"  # variants defining SG use subgroup operations (SPIR-V 1.3)
# {"FP16_COMPUTE": 1}: mediump arithmetic (RelaxedPrecision), the vulkan check of gpubackend/paths/fp16_compute.py
SELFTEST_VARIANTS: tuple[dict[str, object], ...] = ({}, {"FP16": 1}, {"ACT": 5}, {"FP16_COMPUTE": 1})
# SPIR-V header word 2 is the generator's id and version: it differs between glslang builds
# while the module is the same, so the sync check ignores it.
_GENERATOR_WORD = slice(8, 12)


class SpirvBuildError(RuntimeError):
    """glslangValidator is missing or rejected a shader."""


# Defines that select a GL ES-only form (TEXW / TEXX / TEXT: weights / input / resize taps
# through a buffer texture, compute/weights.glsl, compute/input_x.glsl, compute/resize.comp); the
# Vulkan source ignores them, so a variant with one is the same binary.
GL_ONLY_DEFINES = frozenset({"TEXT", "TEXW", "TEXX"})
# Every fp32-storage variant is also built with the defines of the "loads" tuning unit's 64-bit
# form (compute/prelude.glsl WIDE), which the Vulkan path adds per device (paths/vulkan, widened).
WIDE = {"WIDE": 1}


def normalize(defines: Mapping[str, object] | Iterable[tuple[str, object]] | None) -> tuple[tuple[str, str], ...]:
    """A canonical, hashable form of a define set (sorted; values as GLSL text, True -> "1";
    without the GL-only defines)."""
    items = dict(defines or {}).items()
    return tuple(sorted((str(k), "1" if v is True else str(v)) for k, v in items if k not in GL_ONLY_DEFINES))


def spv_name(shader: str, defines: Mapping[str, object] | Iterable[tuple[str, object]] | None = None) -> str:
    """File name of the compiled (shader, defines) variant, e.g. ``conv__ACT=1__FP16=1.spv``."""
    stem = Path(shader).stem
    parts = [f"{k}={v}" for k, v in normalize(defines)]
    name = "__".join([stem, *parts])
    safe = "".join(c if c.isalnum() or c in "_=-." else "_" for c in name)
    if len(safe) > 120 or safe != name:  # odd values (expressions): keep names short and unique
        digest = hashlib.sha1(name.encode()).hexdigest()[:12]
        safe = f"{stem}__{digest}"
    return safe + ".spv"


def vulkan_source(shader: str, defines: Mapping[str, object] | Iterable[tuple[str, object]] | None = None) -> str:
    """The complete GLSL text compiled for Vulkan: version line and the variant's defines."""
    lines = [f"#version {VERSION}"]  # glslang -V predefines VULKAN (100)
    lines += [f"#define {k} {v}" for k, v in normalize(defines)]
    lines.append(expand(f"compute/{Path(shader).name}"))
    return "\n".join(lines) + "\n"


def source_hash(shader: str, defines: Mapping[str, object] | Iterable[tuple[str, object]] | None = None) -> str:
    """sha256 of the complete GLSL text of a variant: what the manifest records at build time and
    the runtime compares (no compiler needed) to refuse a binary that is out of date."""
    return hashlib.sha256(vulkan_source(shader, defines).encode()).hexdigest()


def read_manifest() -> dict[str, str]:
    try:
        return dict(json.loads(MANIFEST.read_text()))
    except (OSError, ValueError):
        return {}


def glslang() -> str | None:
    """Path of glslangValidator, or None."""
    return shutil.which("glslangValidator")


def compile_variant(shader: str, defines: Mapping[str, object] | Iterable[tuple[str, object]] | None = None) -> bytes:
    """SPIR-V bytes of one variant (raises SpirvBuildError with glslang's log on failure)."""
    exe = glslang()
    if exe is None:
        raise SpirvBuildError("glslangValidator not found on PATH (Debian: apt-get install glslang-tools)")
    import tempfile

    src = vulkan_source(shader, defines)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.spv"
        env = SUBGROUP_TARGET_ENV if "SG" in dict(normalize(defines)) else TARGET_ENV
        proc = subprocess.run([exe, "-V", "--target-env", env, "--stdin", "-S", "comp", "-o", str(out)],
                              input=src, capture_output=True, text=True)
        if proc.returncode != 0 or not out.is_file():
            numbered = "\n".join(f"{i + 1:4d}| {t}" for i, t in enumerate(src.splitlines()))
            raise SpirvBuildError(f"glslang failed on {shader} {dict(normalize(defines))}:\n"
                                  f"{(proc.stdout + proc.stderr)[-4000:]}\nsource:\n{numbered}")
        return out.read_bytes()


def variants() -> list[tuple[str, tuple[tuple[str, str], ...]]]:
    """Every (shader file name, normalized defines) the Vulkan runtime may load."""
    out: list[tuple[str, tuple[tuple[str, str], ...]]] = [("vk_selftest.comp", normalize(d)) for d in SELFTEST_VARIANTS]
    try:
        from gpubackend.paths import compute_kernels
    except ImportError:
        compute_kernels = None  # type: ignore[assignment]
    listed = getattr(compute_kernels, "variants", None)
    if listed is not None:
        for shader, defines in listed():
            out.append((Path(shader).name, normalize(defines)))
            if "FP16" not in dict(defines):  # the 64-bit storage form (tuning unit "loads")
                out.append((Path(shader).name, normalize({**dict(defines), **WIDE})))
    seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
    unique = []
    for item in out:
        if item not in seen:
            seen.add(item)
            unique.append(item)
    return unique


def same_module(a: bytes, b: bytes) -> bool:
    """Equal SPIR-V modules, ignoring the generator word of the header."""
    if len(a) != len(b) or len(a) < 20:
        return a == b
    lo, hi = _GENERATOR_WORD.start, _GENERATOR_WORD.stop
    return a[:lo] == b[:lo] and a[hi:] == b[hi:]


def _elementwise_library(check: bool) -> list[str]:
    """Regenerate (or verify) ``common/elementwise.glsl`` from the elementwise table first: every
    compute variant includes it."""
    try:
        from gpubackend.ops import elementwise
    except ImportError:
        return []
    if check:
        ok = elementwise.LIBRARY.is_file() and elementwise.LIBRARY.read_text() == elementwise.glsl_library()
        return [] if ok else ["common/elementwise.glsl is out of date with gpubackend/ops/elementwise.py"]
    if elementwise.write_library():
        read.cache_clear()
    return []


def build(check: bool = False, verbose: bool = False, force: bool = False) -> list[str]:
    """Regenerate (or with ``check`` verify) every variant; returns the problems found."""
    problems: list[str] = _elementwise_library(check)
    wanted: set[str] = set()
    SPIRV_DIR.mkdir(exist_ok=True)
    manifest = read_manifest()
    new_manifest: dict[str, str] = {}
    todo = variants()
    hashes = [source_hash(s, d) for s, d in todo]
    names = [spv_name(s, d) for s, d in todo]
    # A rebuild recompiles only variants whose source text changed; a check recompiles everything.
    redo = [check or force or manifest.get(n) != h or not (SPIRV_DIR / n).is_file() for n, h in zip(names, hashes)]
    with ThreadPoolExecutor(max_workers=max(1, min(4, os.cpu_count() or 1))) as pool:
        futures = [pool.submit(compile_variant, s, d) if r else None for (s, d), r in zip(todo, redo)]
    for name, digest, fut in zip(names, hashes, futures):
        wanted.add(name)
        target = SPIRV_DIR / name
        new_manifest[name] = digest
        if fut is None:
            continue
        try:
            code = fut.result()
        except SpirvBuildError as exc:
            problems.append(str(exc))
            continue
        if target.is_file() and same_module(target.read_bytes(), code):
            if check and manifest.get(name) != new_manifest[name]:
                problems.append(f"{name}: manifest.json does not record its current source")
            continue
        if check:
            problems.append(f"{name} is {'out of date' if target.is_file() else 'missing'}")
        else:
            target.write_bytes(code)
            if verbose:
                print(f"wrote {target.relative_to(ROOT.parent)}")
    for stale in sorted(SPIRV_DIR.glob("*.spv")):
        if stale.name not in wanted:
            if check:
                problems.append(f"{stale.name} has no source variant (stale)")
            else:
                stale.unlink()
                if verbose:
                    print(f"removed stale {stale.name}")
    if not check and not problems:
        MANIFEST.write_text(json.dumps(dict(sorted(new_manifest.items())), indent=0) + "\n")
    return problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m gpubackend.shaders.build_spirv", description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="verify the shipped .spv files, write nothing")
    ap.add_argument("--force", action="store_true", help="recompile every variant, not only changed ones")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    problems = build(check=args.check, verbose=args.verbose, force=args.force)
    for p in problems:
        print(p, file=sys.stderr)
    if not problems:
        print(f"{len(variants())} SPIR-V variants {'in sync' if args.check else 'built'} in {SPIRV_DIR}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
