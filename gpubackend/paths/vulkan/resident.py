"""Device-resident inputs and outputs of a Vulkan segment (IOBinding): a tensor stays in a Kompute
device buffer in the packed layout between runs and moves with ``kp.OpTensorCopy`` (a buffer
copy recorded in the same sequence as the dispatches), so nothing crosses to the host.

Known gap, as for uploads (see :mod:`.device`): kp 0.9 records no transfer -> compute barrier
after the copy; lavapipe executes a command buffer in order, a real GPU relies on its driver."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ...device_tensor import DeviceTensor
from .. import compute_kernels as ck
from ..base import RunStats
from . import VulkanSegment
from .device import VkDevice

_MAX_SEQUENCES = 4  # recorded resident sequences kept per segment (one per set of bound tensors)


class VulkanTensor(DeviceTensor):
    """A tensor in one Kompute buffer of packed words (float32, or packHalf2x16 pairs at fp16)."""

    path = "vulkan"

    def __init__(self, dev: VkDevice, precision: str, shape: tuple[int, ...], words: int, dtype: type,
                 call: Callable[..., Any] | None = None):
        super().__init__(shape, call)
        self.dev = dev
        self.precision = precision
        self.words = words
        self.word_dtype = dtype
        self.tensor = dev.tensor(np.zeros(max(1, words), dtype))

    def download(self, stats: RunStats) -> np.ndarray:
        self.dev.eval(self.dev.sequence().record(self.dev.sync_local([self.tensor])))
        w = self.dev.readback(np.array(self.tensor.data(), copy=True))
        stats.download(w.nbytes)
        return ck.unpack(w.view(np.float16) if self.precision == "fp16" else w, self.shape)

    def release(self) -> None:
        try:
            self.tensor.destroy()
        except Exception:  # noqa: BLE001 - already destroyed with the manager
            pass


def _plain_buffer(seg: VulkanSegment, name: str) -> str | None:
    """The buffer ``name`` is uploaded into when it is uploaded only in the packed layout."""
    edges = [e for e in seg.program.inputs if e.tensor == name]
    return edges[0].buffer if len(edges) == 1 and edges[0].buffer == name else None


def copy_source(seg: VulkanSegment, name: str, tensor: DeviceTensor) -> Any | None:
    buf = _plain_buffer(seg, name)
    if buf is None or not isinstance(tensor, VulkanTensor) or tensor.precision != seg.storage_of(name):
        return None
    spec = seg.program.buffers[buf]
    if tensor.shape != tuple(seg.shapes[name]) or tensor.words != spec.words or tensor.word_dtype is not spec.dtype:
        return None
    return tensor.tensor


def run_resident(seg: VulkanSegment, feeds: dict[str, Any], stats: RunStats,
                 device_outputs: dict[str, Any]) -> dict[str, Any]:
    compiled = seg.compiled
    dev, kp = compiled.dev, compiled.dev.kp
    copies_in: list[tuple[Any, Any]] = []
    host_edges = []
    for edge in seg.program.inputs:
        value = feeds[edge.tensor]
        src = copy_source(seg, edge.tensor, value) if isinstance(value, DeviceTensor) else None
        if src is not None:
            copies_in.append((src, compiled.tensors[edge.buffer]))
            continue
        x = value.host(stats) if isinstance(value, DeviceTensor) else np.asarray(value)
        if x.shape != seg.shapes[edge.tensor]:
            raise ValueError(f"vulkan: input {edge.tensor!r} has shape {x.shape}, compiled for "
                             f"{seg.shapes[edge.tensor]}")
        assert edge.to_words is not None
        w = edge.to_words(x)
        view = compiled.tensors[edge.buffer].data()
        view[: w.size] = w.reshape(-1).view(view.dtype) if w.dtype != view.dtype else w.reshape(-1)
        stats.upload(w.nbytes)
        host_edges.append(compiled.tensors[edge.buffer])
    targets: dict[str, VulkanTensor] = {}
    copies_out: list[tuple[Any, Any]] = []
    host_out = []
    for edge in seg.program.outputs:
        if edge.tensor in device_outputs:
            spec = seg.program.buffers[edge.buffer]
            shape = tuple(seg.shapes[edge.tensor])
            target = device_outputs[edge.tensor]
            prec = seg.storage_of(edge.tensor)
            if not (isinstance(target, VulkanTensor) and target.precision == prec and target.shape == shape
                    and target.words == spec.words and target.word_dtype is spec.dtype and not target._closed):  # noqa: SLF001
                target = VulkanTensor(dev, prec, shape, spec.words, spec.dtype)
            targets[edge.tensor] = target
            copies_out.append((compiled.tensors[edge.buffer], target.tensor))
        else:
            host_out.append(edge)
    dev.staged(sum(int(np.asarray(t.data()).nbytes) for t in host_edges))
    seq = _sequence(seg, tuple(host_edges), tuple(copies_in), tuple(copies_out),
                    tuple(compiled.tensors[e.buffer] for e in host_out), kp)
    dev.eval(seq)
    stats.dispatches += seg.dispatch_count
    out: dict[str, Any] = dict(targets)
    for edge in host_out:
        assert edge.from_words is not None
        w = np.array(compiled.tensors[edge.buffer].data(), copy=True)
        stats.download(w.nbytes)
        out[edge.tensor] = dev.readback(edge.from_words(w))
    return out


def _sequence(seg: VulkanSegment, host_in: tuple, copies_in: tuple, copies_out: tuple, host_out: tuple,
              kp: Any) -> Any:
    """The recorded sequence for this set of bound tensors (kept, a few per segment)."""
    cache: dict[tuple, tuple[Any, tuple]] = seg.__dict__.setdefault("_resident_sequences", {})
    key = tuple(id(t) for t in host_in) + (0,) + tuple(id(t) for pair in copies_in + copies_out for t in pair) \
        + (0,) + tuple(id(t) for t in host_out)
    hit = cache.get(key)
    if hit is not None:
        return hit[0]
    dev = seg.compiled.dev
    seq = dev.sequence()
    if host_in:
        seq.record(dev.sync_device(list(host_in)))
    for src, dst in copies_in:
        seq.record(kp.OpTensorCopy([src, dst]))
    for algo in seg.compiled.algos:
        seq.record(dev.dispatch_op(algo))
    for src, dst in copies_out:
        seq.record(kp.OpTensorCopy([src, dst]))
    if host_out:
        seq.record(dev.sync_local(list(host_out)))
    if len(cache) >= _MAX_SEQUENCES:
        old = cache.pop(next(iter(cache)))
        try:
            old[0].destroy()
        except Exception:  # noqa: BLE001
            pass
    cache[key] = (seq, host_in + copies_in + copies_out + host_out)  # the tensors keep their ids unique
    return seq
