"""Exception types for everything a GPU driver can do wrong.

Every GPU path raises (or lets through) these, so the session and planner can tell a driver
fault from a bug in the project: ``DriverError`` and its subclasses mean "this path is unusable
here, fall back", anything else is a bug.
"""

from __future__ import annotations


class DriverError(RuntimeError):
    """Base of everything a driver does wrong."""


class DriverUnavailable(DriverError):
    """The API, its library or a context for it is absent."""


class ShaderCompileError(DriverError):
    """A shader stage failed to compile.

    The message names the stage, shows the source lines around the first error and carries the
    driver's log.
    """

    def __init__(self, message: str, stage: str = "", source: str = "", log: str = "") -> None:
        super().__init__(message)
        self.stage = stage
        self.source = source
        self.log = log


class ShaderLinkError(DriverError):
    """A program (or a Vulkan pipeline) failed to link."""

    def __init__(self, message: str, stage: str = "link", source: str = "", log: str = "") -> None:
        super().__init__(message)
        self.stage = stage
        self.source = source
        self.log = log


class ContextLost(DriverError):
    """The context or device was lost (reset, removed, or the driver gave up)."""


class DeviceOutOfMemory(DriverError):
    """An allocation on the device failed."""


def format_compile_error(stage: str, source: str, log: str, context_lines: int = 3) -> str:
    """Build a compile-error message: stage, the source lines around the first error, the log.

    The first ``N:LINE`` (Mesa ``0:12(5)``, glslang ``ERROR: 0:12:``) in ``log`` picks the line.
    """
    import re

    lines = source.splitlines()
    m = re.search(r"\b\d+:(\d+)", log or "")
    shown: list[str] = []
    if m and lines:
        lineno = int(m.group(1))
        lo, hi = max(1, lineno - context_lines), min(len(lines), lineno + context_lines)
        for i in range(lo, hi + 1):
            mark = ">>" if i == lineno else "  "
            shown.append(f"{mark}{i:4d}| {lines[i - 1]}")
    elif lines:
        shown = [f"  {i:4d}| {t}" for i, t in enumerate(lines[: 2 * context_lines + 1], 1)]
    body = "\n".join(shown)
    return f"{stage} shader failed to compile:\n{body}\ndriver log:\n{(log or '').strip()}"
