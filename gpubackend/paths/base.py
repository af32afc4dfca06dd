"""The interface every code path implements: a :class:`Path` says which nodes it accepts and
compiles a run of consecutive accepted nodes into a :class:`Segment`; a segment keeps its
tensors on its device and only crosses to the host at its inputs and outputs."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from ..graph import Graph, Node


@dataclass
class RunStats:
    """Host<->device traffic and GPU work of one run (or accumulated by a segment)."""

    uploads: int = 0
    upload_bytes: int = 0
    downloads: int = 0
    download_bytes: int = 0
    dispatches: int = 0
    # With ``profile`` set, segments record per-node seconds (synchronising after each node)
    # in ``node_seconds``; ``timing`` says how they were measured ("host" or "gpu-timer").
    profile: bool = False
    node_seconds: dict[str, float] = field(default_factory=dict)
    timing: str = "host"

    def upload(self, nbytes: int, count: int = 1) -> None:
        self.uploads += count
        self.upload_bytes += int(nbytes)

    def download(self, nbytes: int, count: int = 1) -> None:
        self.downloads += count
        self.download_bytes += int(nbytes)

    @property
    def transfers(self) -> int:
        return self.uploads + self.downloads

    def as_dict(self) -> dict[str, int]:
        return {"uploads": self.uploads, "upload_bytes": self.upload_bytes, "downloads": self.downloads,
                "download_bytes": self.download_bytes, "dispatches": self.dispatches, "transfers": self.transfers}


class Segment(ABC):
    """Compiled consecutive nodes of one path. ``inputs`` are the non-constant tensors it reads
    from outside, ``outputs`` the tensors it produces that are needed outside."""

    def __init__(self, path: str, nodes: list[Node], inputs: list[str], outputs: list[str]):
        self.path = path
        self.nodes = nodes
        self.inputs = inputs
        self.outputs = outputs

    @abstractmethod
    def run(self, feeds: dict[str, np.ndarray], stats: RunStats) -> dict[str, np.ndarray]:
        """Run with host arrays for ``inputs``; return host arrays for ``outputs``. Never
        modifies the arrays in ``feeds``."""

    def run_resident(self, feeds: dict[str, Any], stats: RunStats,
                     device_outputs: dict[str, Any]) -> dict[str, Any]:
        """:meth:`run` where feeds may be device tensors (``gpubackend.device_tensor``) and
        the outputs named in ``device_outputs`` may stay on the device (as DeviceTensors, written
        into the given one when it fits). This default goes through the host (every transfer
        counted); a GPU path overrides it to copy on the device."""
        from ..device_tensor import DeviceTensor

        host = {n: v.host(stats) if isinstance(v, DeviceTensor) else v for n, v in feeds.items()}
        return self.run(host, stats)

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release device objects. Safe to call twice."""


class Path(ABC):
    """One code path (``cpu``, ``gles2``, ``gles3``, ``gles31``, ``vulkan``)."""

    key: ClassVar[str]

    def __init__(self, precision: str = "fp32", disabled_kernels: frozenset[str] = frozenset()):
        from .segment_services import poison_requested

        self.precision = precision
        # "fp16": precision="fp16-compute" (create_path sets it; paths/fp16_compute.py says which
        # kernels then compute in mediump); "fp32" otherwise
        self.arithmetic = "fp32"
        self.disabled_kernels = disabled_kernels
        # Tests: segments compiled from now on fill every tensor they produce with NaN before it
        # is written, so an element a kernel forgets stays NaN (GPUBACKEND_POISON=1 sets it).
        self.poison = poison_requested()

    @abstractmethod
    def decline(self, node: Node, graph: Graph) -> str | None:
        """None if this path can run ``node``, else the reason it cannot."""

    @abstractmethod
    def compile(self, nodes: list[Node], graph: Graph, inputs: list[str], outputs: list[str]) -> Segment:
        """Compile accepted, consecutive nodes into a segment."""

    def kernel_name_for(self, node: Node, graph: Graph) -> str | None:
        """The short name of the kernel this path object runs ``node`` with (None: none), which the
        first-run kernel check files its verdict under: the path module's ``kernel_name``, unless a
        path's choice depends on its context's limits (gles3's conv_blend) and it says so itself."""
        from . import path_module

        return path_module(self.key).kernel_name(node, graph)

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release what the path holds. Safe to call twice."""
