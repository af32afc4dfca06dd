"""A compiled Vulkan segment as plain data plus its Kompute objects: device buffers by name, the
dispatches in order, and the one recorded sequence (upload inputs -> every dispatch -> download
outputs) that each run replays."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..base import RunStats
from ..segment_services import POISON_F32, POISON_HALF_PAIR, plan_storage, run_steps, time_steps
from .device import VkDevice


@dataclass
class BufferSpec:
    """One device buffer. ``kind``: input (uploaded each run), output (read back each run; may
    also feed later dispatches), temp (device only), const (uploaded once at compile time)."""

    name: str
    words: int
    dtype: type  # np.float32 or np.uint32
    kind: str
    data: np.ndarray | None = None  # const contents


@dataclass
class Step:
    """One dispatch: ``bindings[i]`` names the buffer at descriptor binding i ("" = unused)."""

    node: str
    spv: str
    bindings: list[str]
    push: np.ndarray  # uint32 words
    workgroups: tuple[int, int, int]
    local_size: tuple[int, int, int]
    flops: float = 0.0


@dataclass
class Edge:
    """Host-side conversion of a segment input or output between its NumPy form and words."""

    tensor: str  # graph tensor name
    buffer: str
    to_words: Callable[[np.ndarray], np.ndarray] | None = None  # inputs
    from_words: Callable[[np.ndarray], np.ndarray] | None = None  # outputs


@dataclass
class Program:
    buffers: dict[str, BufferSpec] = field(default_factory=dict)
    steps: list[Step] = field(default_factory=list)
    inputs: list[Edge] = field(default_factory=list)
    outputs: list[Edge] = field(default_factory=list)

    def add_buffer(self, spec: BufferSpec) -> str:
        old = self.buffers.get(spec.name)
        if old is not None:
            if old.kind == "temp" and spec.kind == "output":
                old.kind = "output"
            return spec.name
        self.buffers[spec.name] = spec
        return spec.name


class Compiled:
    """Kompute tensors, algorithms and the recorded sequence of a :class:`Program`."""

    def __init__(self, dev: VkDevice, program: Program, record_once: bool = True):
        self.dev = dev
        self.program = program
        self.record_once = record_once
        self.tensors: dict[str, Any] = {}
        for spec in program.buffers.values():
            if spec.kind == "const":
                assert spec.data is not None
                init = np.ascontiguousarray(spec.data, spec.dtype).reshape(-1)
            else:
                poison = POISON_F32 if spec.dtype is np.float32 else POISON_HALF_PAIR
                init = np.full(max(1, spec.words), poison, spec.dtype)
            self.tensors[spec.name] = dev.tensor(init, device_only=spec.kind == "temp")
        self.algos = []
        for step in program.steps:
            tensors = [self.tensors[b] if b else dev.dummy() for b in step.bindings]
            self.algos.append(dev.algorithm(tensors, step.spv, step.workgroups, step.local_size, step.push))
        # Constants and poisoned initial contents go to the device once, now.
        hosted = [t for n, t in self.tensors.items() if program.buffers[n].kind != "temp"]
        if dev._dummy is not None:
            hosted.append(dev._dummy)
        dev.eval(dev.sequence().record(dev.sync_device(hosted)))
        self.in_tensors = [self.tensors[e.buffer] for e in program.inputs]
        self.out_tensors = list({e.buffer: self.tensors[e.buffer] for e in program.outputs}.values())
        self.seq = self._record_all()
        self._per_node: list[Any] | None = None

    def _record_all(self) -> Any:
        dev = self.dev
        seq = dev.sequence()
        if self.in_tensors:
            seq.record(dev.sync_device(self.in_tensors))
        for algo in self.algos:
            seq.record(dev.dispatch_op(algo))
        if self.out_tensors:
            seq.record(dev.sync_local(self.out_tensors))
        return seq

    def _record_per_node(self) -> list[Any]:
        dev = self.dev
        seqs = []
        if self.in_tensors:
            seqs.append(dev.sequence().record(dev.sync_device(self.in_tensors)))
        seqs += [dev.sequence().record(dev.dispatch_op(a)) for a in self.algos]
        if self.out_tensors:
            seqs.append(dev.sequence().record(dev.sync_local(self.out_tensors)))
        return seqs

    def execute(self, words_in: list[np.ndarray], stats: RunStats | None = None) -> list[np.ndarray]:
        """Write the input words, run every dispatch, return the output words (copies). With
        ``stats.profile`` each dispatch is evaluated alone and its host-measured seconds added to
        its node in ``stats.node_seconds`` (segment_services.run_steps)."""
        for t, w in zip(self.in_tensors, words_in):
            view = t.data()
            view[: w.size] = w.reshape(-1).view(view.dtype) if w.dtype != view.dtype else w.reshape(-1)
        profile = stats is not None and stats.profile
        if self.record_once and not profile:
            self.dev.eval(self.seq)
        else:
            if self._per_node is None:
                self._per_node = self._record_per_node()
            first = 1 if self.in_tensors else 0
            end = first + len(self.algos)
            for s in self._per_node[:first]:
                self.dev.eval(s)
            run_steps(list(zip(self.program.steps, self._per_node[first:end])), lambda step: self.dev.eval(step[1]),
                      stats if stats is not None else RunStats(), lambda: None, lambda step: step[0].node)
            for s in self._per_node[end:]:
                self.dev.eval(s)
        return [self.dev.readback(np.array(self.tensors[e.buffer].data(), copy=True)) for e in self.program.outputs]

    def time_dispatches(self, repeats: int = 3) -> list[float]:
        """Median seconds per step, each step evaluated alone (benchmarks)."""
        seqs = [self.dev.sequence().record(self.dev.dispatch_op(a)) for a in self.algos]
        return time_steps(seqs, lambda s: s.eval(), lambda: None, repeats)

    def close(self) -> None:
        for seq in [self.seq, *(self._per_node or [])]:
            try:
                seq.destroy()
            except Exception:  # noqa: BLE001 - already destroyed
                pass
        for algo in self.algos:
            try:
                algo.destroy()
            except Exception:  # noqa: BLE001
                pass
        for t in self.tensors.values():
            try:
                t.destroy()
            except Exception:  # noqa: BLE001
                pass
        self.algos = []
        self.tensors = {}


def reuse_temps(prog: Program) -> int:
    """Let device-only intermediates share buffers once their last reader has run (smallest free
    buffer of the same word type that fits: ``segment_services.plan_storage``). Rewrites ``prog``
    in place; returns the words saved. Safe with Kompute's per-dispatch barrier: its
    compute->compute execution dependency also orders a later write after every earlier read
    (write-after-read)."""
    temps = {n for n, s in prog.buffers.items() if s.kind == "temp"}
    slot_of, _ = plan_storage([step.bindings for step in prog.steps],
                              lambda b: (np.dtype(prog.buffers[b].dtype).str, prog.buffers[b].words),
                              managed=temps.__contains__,
                              fits=lambda have, need: have[0] == need[0] and have[1] >= need[1])
    host: dict[int, str] = {}  # slot -> the first temp placed in it, whose buffer it becomes
    physical: dict[str, str] = {}
    saved = 0
    for b in slot_of:  # in first-use order
        slot = slot_of[b]
        if slot in host:
            physical[b] = host[slot]
            saved += prog.buffers[b].words
        else:
            host[slot] = physical[b] = b
    for step in prog.steps:
        step.bindings = [physical.get(b, b) for b in step.bindings]
    prog.buffers = {n: s for n, s in prog.buffers.items() if n not in temps or physical.get(n) == n}
    return saved
