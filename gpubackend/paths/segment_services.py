"""Services every GPU segment uses, written once: tensor liveness with storage reuse
(:func:`plan_storage`), the per-node profiling loop (:func:`run_steps`, :func:`time_steps`) and
output poisoning for tests (:func:`poison_requested`, the NaN patterns). What a path keeps to itself
is only what differs: the device objects a storage slot becomes, how a step is dispatched, how
its outputs are filled with NaN (cleared render targets, filled buffers)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

if TYPE_CHECKING:
    from ..graph import Graph, Node
    from .base import RunStats
    from .kernel_contract import KernelCache

S = TypeVar("S", bound=Hashable)
T = TypeVar("T")

# ---- fusion patterns -------------------------------------------------------------------------------


def silu_pairs(nodes: list[Node], opset: int, readers: dict[str, int], keep: set[str]) -> dict[int, int]:
    """SiLU written as two nodes, s = Sigmoid(y) then z = Mul(y, s) (YOLOv8's Conv blocks), where s is
    read by nothing else (``readers``: reads per tensor in the whole graph) and not in ``keep``:
    {index of the Sigmoid: index of the Mul}. The NumPy engine and gles2 fuse these pairs into the
    kernel writing y (the compute paths do the same on their records, ``compute_kernels.fuse_gates``)."""
    standard = ("", "ai.onnx")
    by_input: dict[frozenset[str], int] = {}
    for idx, node in enumerate(nodes):
        if node.op_type == "Mul" and node.domain in standard and opset >= 7 and len(node.inputs) == 2:
            by_input.setdefault(frozenset(node.inputs), idx)
    pairs = {}
    for idx, node in enumerate(nodes):
        if node.op_type != "Sigmoid" or node.domain not in standard or len(node.inputs) != 1:
            continue
        (y,), s = node.inputs, node.outputs[0]
        mul = by_input.get(frozenset((y, s)))
        if mul is not None and y != s and mul > idx and readers.get(s) == 1 and s not in keep:
            pairs[idx] = mul
    return pairs


def silu_convs(nodes: list[Node], graph: Graph, outputs: Iterable[str]) -> list[tuple[int, int, int]]:
    """(conv, sigmoid, mul) indices in ``nodes`` of SiLU pairs (:func:`silu_pairs`) after a standard
    Conv without an activation of its own, whose result y is read by the pair only, is not among
    ``outputs`` (the segment's) or the graph's outputs, and has the Mul's shape: the Conv can write
    the Mul's output itself (``ops.silu_into``) where the path's kernel for it applies a gate
    (:func:`fuse_silu`)."""
    from .. import ops

    keep = set(outputs) | set(graph.outputs)
    readers = {name: len(users) for name, users in graph.consumers().items()}
    index_of = {o: i for i, n in enumerate(nodes) for o in n.outputs if o}
    found = []
    for sig, mul in silu_pairs(nodes, graph.opset, readers, keep).items():
        y, z = nodes[sig].inputs[0], nodes[mul].outputs[0]
        conv = index_of.get(y)
        if conv is None or readers.get(y) != 2 or y in keep or graph.shape(z) != graph.shape(y):
            continue
        node = nodes[conv]
        if node.op_type != "Conv" or node.domain not in ("", "ai.onnx") or len(node.outputs) != 1:
            continue
        rec = ops.lower(node, graph)
        if isinstance(rec, ops.ConvRecord) and rec.act is None:
            found.append((conv, sig, mul))
    return found


def fuse_silu(nodes: list[Node], payloads: list[Any], graph: Graph, outputs: Iterable[str], kernels: KernelCache,
              gate_kernels: frozenset[str]) -> tuple[list[Node], list[Any]]:
    """The (node, payload) steps of a fragment path's segment with SiLU fused (:func:`silu_convs`):
    the Conv becomes ``ops.silu_into`` (a gated Sigmoid, writing the Mul's output) and the Sigmoid
    and Mul are no steps, where the path's kernels for the Conv, before and after, are all in
    ``gate_kernels`` (the ones that apply the gate). Saves two draws per pair, and two tensors'
    stores and loads."""
    from .. import ops

    steps, out, fused = list(nodes), list(payloads), set()
    for conv, sig, mul in silu_convs(nodes, graph, outputs):
        gated = ops.silu_into(nodes[conv], nodes[mul].outputs[0])
        hit = kernels.get(gated, graph)
        if isinstance(hit, str) or not all(k.kernel_name in gate_kernels for p in (out[conv], hit.payload)
                                           for k in (p if isinstance(p, list) else [p])):
            continue
        steps[conv], out[conv] = gated, hit.payload
        fused |= {sig, mul}
    keep = [i for i in range(len(nodes)) if i not in fused]
    return [steps[i] for i in keep], [out[i] for i in keep]


def residual_convs(nodes: list[Node], graph: Graph, outputs: Iterable[str]) -> list[tuple[int, int, str]]:
    """(conv, add, residual) of each standard ``Add(y, r)`` (either order) after a Conv writing y,
    where y is read by the Add only, is not among ``outputs`` (the segment's) or the graph's
    outputs, and y, r and the sum are float32 of one shape (no broadcast): the Conv can write the
    sum itself (``ops.residual_into``) where the path's kernel for it adds a residual
    (:func:`fuse_residual_adds`)."""
    from .. import ops

    keep = set(outputs) | set(graph.outputs)
    readers = {name: len(users) for name, users in graph.consumers().items()}
    index_of = {o: i for i, n in enumerate(nodes) for o in n.outputs if o}
    found = []
    for add, node in enumerate(nodes):
        if node.op_type != "Add" or node.domain not in ("", "ai.onnx") or len(node.inputs) != 2 or \
                node.inputs[0] == node.inputs[1]:
            continue
        for y, r in (node.inputs, node.inputs[::-1]):
            conv = index_of.get(y)
            if conv is None or conv > add or readers.get(y) != 1 or y in keep or not r:
                continue
            conv_node = nodes[conv]
            if conv_node.op_type != "Conv" or conv_node.domain not in ("", "ai.onnx") or len(conv_node.outputs) != 1 \
                    or ops.fused_residual(conv_node) is not None:
                continue
            shapes = {graph.shape(n) for n in (y, r, node.outputs[0])}
            if len(shapes) != 1 or None in shapes or any(
                    np.dtype(graph.dtypes.get(n, np.float32)) != np.float32 for n in (y, r, node.outputs[0])):
                continue
            found.append((conv, add, r))
            break
    return found


def fuse_residual_adds(nodes: list[Node], payloads: list[Any], graph: Graph, outputs: Iterable[str],
                       kernels: KernelCache, residual_kernels: frozenset[str]) -> tuple[list[Node], list[Any]]:
    """The (node, payload) steps with residual Adds fused (:func:`residual_convs`): the Conv becomes
    ``ops.residual_into`` at the Add's place (where the residual and the Conv's inputs are all
    written) and the Add is no step, where the path's kernels for the Conv, before and after, are
    all in ``residual_kernels`` and the fused node has a kernel. Saves a draw or dispatch per Add,
    and a tensor's store and two loads."""
    from .. import ops

    steps, out, fused = list(nodes), list(payloads), set()
    for conv, add, residual in residual_convs(nodes, graph, outputs):
        node = ops.residual_into(nodes[conv], residual, nodes[add].outputs[0])
        hit = kernels.get(node, graph)
        if isinstance(hit, str) or not all(k.kernel_name in residual_kernels for p in (out[conv], hit.payload)
                                           for k in (p if isinstance(p, list) else [p])):
            continue
        steps[add], out[add] = node, hit.payload
        fused.add(conv)
    keep = [i for i in range(len(nodes)) if i not in fused]
    return [steps[i] for i in keep], [out[i] for i in keep]


# ---- liveness and storage reuse --------------------------------------------------------------------


def plan_storage(steps: Sequence[Iterable[str]], size_of: Callable[[str], S], *, managed: Callable[[str], bool],
                 preloaded: Iterable[str] = (), keep: Iterable[str] = (),
                 fits: Callable[[S, S], bool] | None = None) -> tuple[dict[str, int], list[S]]:
    """Assign each managed tensor a storage slot so that tensors whose lifetimes do not overlap
    share one. ``steps[i]`` names the tensors step i reads or writes (aliases already mapped to
    the tensor that owns the storage); a tensor lives from its first step (``preloaded`` ones, the
    segment's uploaded inputs, from before step 0) to its last, ``keep`` (the segment's outputs)
    to the end. A tensor takes the smallest free slot that ``fits(slot size, its size)`` (default:
    equal sizes), else a new slot of its size; a slot is free again after the last step that
    touches its tenant, so a step never writes into storage it reads. Returns (tensor -> slot,
    slot sizes)."""
    fits = fits or (lambda have, need: have == need)
    keep = set(keep)
    last: dict[str, int] = {}
    for i, names in enumerate(steps):
        for n in names:
            if n and managed(n):
                last[n] = i
    slot_of: dict[str, int] = {}
    sizes: list[S] = []
    free: list[int] = []

    def place(name: str) -> None:
        need = size_of(name)
        ok = [s for s in free if fits(sizes[s], need)]
        if ok:
            best = min(ok, key=lambda s: sizes[s])  # type: ignore[arg-type,return-value]
            free.remove(best)
            slot_of[name] = best
        else:
            slot_of[name] = len(sizes)
            sizes.append(need)

    for name in dict.fromkeys(preloaded):
        if managed(name):
            place(name)
    for i, names in enumerate(steps):
        names = [n for n in dict.fromkeys(names) if n and managed(n)]
        for n in names:
            if n not in slot_of:
                place(n)
        for n in names:
            if last.get(n) == i and n not in keep:
                free.append(slot_of[n])
    return slot_of, sizes


# ---- the run loop with per-node profiling -----------------------------------------------------------

def run_steps(steps: Sequence[T], run_one: Callable[[T], Any], stats: RunStats, finish: Callable[[], Any],
              node_of: Callable[[T], str]) -> None:
    """Run ``run_one(step)`` for every step. With ``stats.profile`` the device is synchronised
    (``finish``) around each step and the host-clock seconds are added to the node's entry of
    ``stats.node_seconds``."""
    if not stats.profile:
        for step in steps:
            run_one(step)
        return
    seconds = stats.node_seconds
    for step in steps:
        finish()
        t0 = time.perf_counter()
        run_one(step)
        finish()
        name = node_of(step)
        seconds[name] = seconds.get(name, 0.0) + time.perf_counter() - t0


def time_steps(steps: Sequence[T], run_one: Callable[[T], Any], finish: Callable[[], Any],
               repeat: int = 1) -> list[float]:
    """Median seconds of each step over ``repeat`` rounds, each step synchronised alone
    (benchmarks); the same loop as :func:`run_steps`."""
    from .base import RunStats

    times: list[list[float]] = [[] for _ in steps]
    for _ in range(repeat):
        stats = RunStats(profile=True)
        run_steps(steps, run_one, stats, finish, lambda s: str(id(s)))
        for i, s in enumerate(steps):
            times[i].append(stats.node_seconds[str(id(s))])
    return [float(np.median(t)) for t in times]


# ---- output poisoning for tests ---------------------------------------------------------------------

POISON_ENV = "GPUBACKEND_POISON"  # tests: fill every segment output with NaN before it is written
POISON_F32 = np.float32(np.nan)
POISON_HALF_PAIR = np.uint32(0x7E007E00)  # two fp16 NaNs in one packHalf2x16 word


def poison_requested() -> bool:
    """Whether the environment asks paths to poison outputs (``Path.poison``'s default)."""
    return os.environ.get(POISON_ENV, "") not in ("", "0")


def poison_words(nbytes: int, precision: str) -> np.ndarray:
    """``nbytes`` of NaN in the storage format of ``precision`` (fp32 floats or fp16 halves)."""
    if precision == "fp16":
        return np.full(nbytes // 2, np.nan, np.float16)
    return np.full(nbytes // 4, POISON_F32, np.float32)


__all__ = ["POISON_ENV", "POISON_F32", "POISON_HALF_PAIR", "plan_storage", "poison_requested", "poison_words",
           "run_steps", "time_steps"]
