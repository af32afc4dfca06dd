"""The probe's result records: plain data, JSON round-trippable."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from typing import Any

from tabulate import tabulate

PATH_KEYS = ("vulkan", "gles31", "gles3", "gles2", "cpu")  # best first
GPU_PATH_KEYS = PATH_KEYS[:-1]
PREFER_SOFTWARE_ENV = "GPUBACKEND_PREFER_SOFTWARE"


@dataclass
class PathVerdict:
    """What the probe concluded about one code path."""

    path: str
    available: bool = False  # the API/context exists
    verified: bool = False  # its round trip (and canary, when registered) computed correctly
    preferred: bool = False  # this is the report's preferred_path
    software: bool = False  # runs on a software rasteriser (llvmpipe, lavapipe, SwiftShader, CPU device)
    reason: str = ""  # why (not) usable, in words
    canary_error: float | None = None  # max relative error of the path's canary, when one ran
    disabled_kernels: list[str] = field(default_factory=list)  # e.g. "conv", "depthwise", "gemm", "fp16"
    retry_at: float | None = None  # the probe timed out: when it is probed again (epoch seconds)
    ieee_lost: str | None = None  # e.g. "NaN not preserved": the path's NaN/Inf check failed (still verified)

    @property
    def usable(self) -> bool:
        return self.path == "cpu" or (self.available and self.verified)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PathVerdict:
        names = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in d.items() if k in names})


@dataclass
class ProbeReport:
    """What this machine offers and what was verified."""

    paths: dict[str, PathVerdict]
    fingerprint: dict[str, Any] = field(default_factory=dict)
    limits: dict[str, Any] = field(default_factory=dict)
    features: dict[str, Any] = field(default_factory=dict)
    extensions: dict[str, list[str]] = field(default_factory=dict)
    elapsed_s: float = 0.0
    cached: bool = False
    notes: list[str] = field(default_factory=list)

    @property
    def preferred_path(self) -> str:
        """What ``path="auto"`` runs on: the best verified path that is not a software renderer,
        else ``"cpu"``; with ``GPUBACKEND_PREFER_SOFTWARE=1`` software renderers count too."""
        return self.preferred_path_for(os.environ.get(PREFER_SOFTWARE_ENV, "").strip() == "1")

    def preferred_path_for(self, prefer_software: bool) -> str:
        """The best verified path; software renderers count only with ``prefer_software``."""
        for key in GPU_PATH_KEYS:
            v = self.paths.get(key)
            if v is not None and v.available and v.verified and (prefer_software or not v.software):
                return key
        return "cpu"

    def usable(self, path: str) -> bool:
        """Available and verified (software renderers included); ``cpu`` always."""
        if path == "cpu":
            return True
        v = self.paths.get(path)
        return bool(v and v.available and v.verified)

    def verdict(self, path: str) -> PathVerdict:
        return self.paths[path]

    def usable_paths(self) -> list[str]:
        """Every usable path, best first (software ones included, ``cpu`` last)."""
        return [p for p in PATH_KEYS if self.usable(p)]

    def mark_preferred(self) -> None:
        pref = self.preferred_path
        for k, v in self.paths.items():
            v.preferred = k == pref

    def to_dict(self) -> dict[str, Any]:
        self.mark_preferred()  # the environment may have changed since the verdicts were cached
        d = asdict(self)
        d["preferred_path"] = self.preferred_path
        return d

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, sort_keys=False, default=str)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ProbeReport:
        paths = {k: PathVerdict.from_dict(v) for k, v in d.get("paths", {}).items()}
        return cls(
            paths=paths,
            fingerprint=d.get("fingerprint", {}),
            limits=d.get("limits", {}),
            features=d.get("features", {}),
            extensions=d.get("extensions", {}),
            elapsed_s=float(d.get("elapsed_s", 0.0)),
            cached=bool(d.get("cached", False)),
            notes=list(d.get("notes", [])),
        )

    def table(self) -> str:
        """A readable table of the paths, then the fingerprint and key limits."""
        rows = [("path", "available", "verified", "preferred", "software", "canary err", "reason")]
        for key in PATH_KEYS:
            v = self.paths.get(key)
            if v is None:
                continue
            err = "" if v.canary_error is None else f"{v.canary_error:.1e}"
            reason = v.reason
            if v.disabled_kernels:
                reason += f" [disabled: {', '.join(v.disabled_kernels)}]"
            rows.append((key, _yn(v.available), _yn(v.verified), _yn(key == self.preferred_path), _yn(v.software),
                         err, reason))
        lines = [line.rstrip() for line in
                 tabulate(rows[1:], headers=rows[0], tablefmt="simple", disable_numparse=True).splitlines()]
        lines.append("")
        lines.append(f"preferred path: {self.preferred_path}"
                     f"   (probe {'cached' if self.cached else 'ran'} in {self.elapsed_s:.2f} s)")
        fp = self.fingerprint
        for api in ("gl", "vulkan"):
            f = fp.get(api) or {}
            if f:
                shown = ", ".join(f"{k}={v}" for k, v in f.items() if k != "error" and v not in (None, ""))
                lines.append(f"{api}: {shown or f.get('error', '')}")
        if fp.get("package"):
            lines.append(f"package: {fp['package']}")
        key_limits = []
        for api, names in (
            ("gl", ("max_texture_size", "max_draw_buffers", "max_color_attachments", "max_uniform_block_size",
                    "max_compute_work_group_invocations", "max_compute_shared_memory_size",
                    "max_shader_storage_block_size", "fragment_highp")),
            ("vulkan", ("maxComputeWorkGroupInvocations", "maxComputeSharedMemorySize",
                        "maxStorageBufferRange", "maxPushConstantsSize")),
        ):
            lim = self.limits.get(api) or {}
            shown = [f"{n}={lim[n]}" for n in names if n in lim]
            if shown:
                key_limits.append(f"{api} limits: " + ", ".join(shown))
        lines.extend(key_limits)
        for api in ("gl", "vulkan"):
            feats = self.features.get(api) or {}
            if feats:
                lines.append(f"{api} features: " + ", ".join(f"{k}={v}" for k, v in feats.items()))
        for key, feats in (self.features.get("paths") or {}).items():
            if feats.get("fp16_compute"):
                lines.append(f"{key} fp16 arithmetic (precision fp16-compute): {feats['fp16_compute']}")
        lines.extend(f"note: {n}" for n in self.notes)
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


def _yn(b: bool) -> str:
    return "yes" if b else "no"
