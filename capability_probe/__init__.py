"""Capability probe: which GPU code paths this machine offers, verified in a crash-safe child.

Usable on its own::

    import capability_probe
    report = capability_probe.probe()
    report.preferred_path           # best verified non-software GPU path, else "cpu"
    report.usable("gles31")
    print(report.table())

See ``docs/probe.md`` for the tier rules, the threading rule, fault kinds and the blocklist format.
"""

from __future__ import annotations

from .errors import (
    ContextLost,
    DeviceOutOfMemory,
    DriverError,
    DriverUnavailable,
    ShaderCompileError,
    ShaderLinkError,
)
from .report import GPU_PATH_KEYS, PATH_KEYS, PathVerdict, ProbeReport
from .runner import canaries, probe, register_canary

__all__ = [
    "PATH_KEYS",
    "GPU_PATH_KEYS",
    "PathVerdict",
    "ProbeReport",
    "probe",
    "register_canary",
    "canaries",
    "DriverError",
    "DriverUnavailable",
    "ShaderCompileError",
    "ShaderLinkError",
    "ContextLost",
    "DeviceOutOfMemory",
]
