"""GLSL sources shipped as package data, with a tiny ``#include "name"`` mechanism.

Layout: ``common/`` snippets shared by every tier (activations, fp16 packing), and one folder
per tier (``gles2/``, ``gles3/``, ``compute/`` for ES 3.1 and Vulkan, ``spirv/`` for the compiled
Vulkan binaries)."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent
_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"\s*$', re.M)


class ShaderSourceError(LookupError):
    """A shader or an included snippet is missing, or includes itself."""


@cache
def read(name: str) -> str:
    """The raw text of ``name`` (relative to the shaders folder)."""
    path = ROOT / name
    if not path.is_file():
        raise ShaderSourceError(f"no shader source {name!r} under {ROOT}")
    return path.read_text()


def expand(name: str, _stack: tuple[str, ...] = ()) -> str:
    """``name`` with every ``#include "x"`` replaced by the text of x (paths relative to the
    shaders folder), each included once."""
    if name in _stack:
        raise ShaderSourceError(f"shader include cycle: {' -> '.join(_stack + (name,))}")
    seen: set[str] = set()

    def repl(match: re.Match[str]) -> str:
        inc = match.group(1)
        if inc in seen:
            return ""
        seen.add(inc)
        return expand(inc, _stack + (name,))

    return _INCLUDE.sub(repl, read(name))


# On an NVIDIA H100 (driver 580) gles2's encoding lost NaN (decoded as 0) and Softsign(-1e38)
# gave -0: the compiler assumes no NaN/Inf and divides through a flushed reciprocal. These pragmas
# ask it for IEEE behaviour (not yet re-checked on that device); other compilers ignore pragmas
# they do not know (GLSL ES 1.00 / 3.x, section 3.4).
GL_PRAGMAS = "#pragma optionNV(fastmath off)\n#pragma optionNV(fastprecision off)"


def source(name: str, version: str, defines: dict[str, object] | None = None, preamble: str = "") -> str:
    """A complete shader: ``#version`` line, ``#define``s, optional preamble, then the expanded body."""
    lines = [f"#version {version}"]
    if version.endswith(" es") or version == "100":
        lines.append(GL_PRAGMAS)
    for key, value in (defines or {}).items():
        lines.append(f"#define {key} {'' if value is True else value}".rstrip())
    if preamble:
        lines.append(preamble)
    lines.append(expand(name))
    return "\n".join(lines)


__all__ = ["ROOT", "read", "expand", "source", "ShaderSourceError"]
