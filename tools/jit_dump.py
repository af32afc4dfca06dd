"""What llvmpipe / lavapipe compiled the shaders into: disassembly and instruction counts.

Mesa's release builds ignore GALLIVM_DEBUG / LP_DEBUG / NIR_DEBUG, but llvmpipe keeps every
compiled shader in Mesa's on-disk shader cache as an ELF object (zstd-compressed). Run anything
with a fresh cache directory, then point this tool at it:

    MESA_SHADER_CACHE_DIR=/tmp/mc python my_run.py
    python tools/jit_dump.py /tmp/mc [--out DIR] [--grep cs]

One line per compiled shader (``csN`` compute, ``fsN`` fragment): instructions, 8-wide float
multiplies / adds / FMAs, and ``lane loops``: the per-SIMD-lane loops gallivm emits for a storage
buffer load or store (``cmp $8`` closing a loop over the 8 lanes). ``--out`` writes each
disassembly. Needs the ``zstd`` and ``llvm-objdump`` commands.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def objects(cache: Path) -> list[tuple[str, bytes]]:
    """(cache file name, ELF bytes) of every cached compiled shader under ``cache``."""
    out = []
    for f in sorted(cache.rglob("*")):
        if not f.is_file():
            continue
        data = f.read_bytes()
        at = data.find(ZSTD_MAGIC)
        if at < 0:
            continue
        got = subprocess.run(["zstd", "-d", "-c"], input=data[at:], capture_output=True).stdout
        if got.startswith(b"\x7fELF"):
            out.append((f.name, got))
    return out


def disassemble(elf: bytes, tmp: Path) -> tuple[str, str]:
    """(shader name from the object's file symbol, disassembly text)."""
    tmp.write_bytes(elf)
    syms = subprocess.run(["llvm-objdump", "-t", str(tmp)], capture_output=True, text=True).stdout
    name = next((line.split()[-1] for line in syms.splitlines() if "df *ABS*" in line), "?")
    text = subprocess.run(["llvm-objdump", "-d", "--no-show-raw-insn", str(tmp)], capture_output=True,
                          text=True).stdout
    return name, text


def counts(text: str) -> dict[str, int]:
    ops = [m.group(1) for m in re.finditer(r"^\s+[0-9a-f]+:\s+([a-z0-9]+)", text, re.M)]
    return {"instructions": len(ops), "vmulps": ops.count("vmulps"), "vaddps": ops.count("vaddps"),
            "fma": sum(o.startswith("vfmadd") for o in ops),
            "lane loops": len(re.findall(r"cmpl\s+\$8, %", text))}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("cache", type=Path, help="the MESA_SHADER_CACHE_DIR the run used")
    ap.add_argument("--out", type=Path, help="write NAME-CACHEKEY.s disassemblies here")
    ap.add_argument("--grep", default="cs", help="only shaders whose name starts with this (default cs)")
    args = ap.parse_args(argv)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
    tmp = Path(f"/tmp/jit_dump_{id(args)}.o")
    try:
        for key, elf in objects(args.cache):
            name, text = disassemble(elf, tmp)
            if not name.startswith(args.grep):
                continue
            c = counts(text)
            print(f"{name:16s} {key[:10]}  " + "  ".join(f"{k} {v}" for k, v in c.items()))
            if args.out:
                (args.out / f"{name}-{key[:10]}.s").write_text(text)
    finally:
        tmp.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
