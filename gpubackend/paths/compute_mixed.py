"""The mixed-precision policy of ``precision="fp16"`` (:mod:`gpubackend.mixed_precision`) on the
compute paths (gles31, vulkan): which kernel records of a segment run on fp32 storage.

The compute kernels have one storage define, ``FP16``, for all their bindings, so a kept tensor
(small: pooled features, squeeze-excite vectors, gates) stays fp32 only where every kernel that
touches it can say so: a kernel whose runtime tensors are all kept runs as its fp32 variant; the
kernels at the edges of a squeeze-excite branch or a LayerNorm's statistics take one fp32 binding
beside fp16 ones (``globalpool.comp`` ``Y32``: the pooled mean; ``reduce.comp`` ``Y32``: a mean
or variance; ``binary.comp`` ``A32`` / ``B32``: the gate or statistic applied to the plane). A
tensor any other kernel touches, a segment input or output (except one the precision plan names,
uploaded or read back as fp32: ``mixed_precision.planned_edges``), or an aliased view falls back
to fp16.
Under fp16-compute, a kernel touching a kept tensor computes in fp32
(no ``FP16_COMPUTE``): the kept value would otherwise be rounded to fp16 by the arithmetic.

A tensor a precision plan names (any size: a convolution's output, say) is kept where the
kernels touching it cannot mix: such a kernel runs as its fp32 variant, and each of its other
runtime tensors goes through a cast (``unary.comp`` ``Y32`` / ``X32``) into or out of an fp32
copy named ``<tensor>#fp32``; reading fp16 into fp32 is exact, and writing fp32 to fp16 rounds
as storing it would have. A kernel that cannot be rewritten so (it writes into another node's
tensor, shares its output with other dispatches, reads a constant or runtime weights as a
tensor) drops the tensor back to fp16 as before.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from .. import mixed_precision
from ..graph import Graph, Node
from . import compute_kernels as ck

# kernel -> (binding roles that may be fp32 beside fp16 ones, the define per binding index)
_MIXED = {"binary": ("in", {0: "A32", 1: "B32"}), "globalpool": ("out", {1: "Y32"}), "reduce": ("out", {2: "Y32"})}
_STORAGE_DEFINES = {"FP16", "A32", "B32", "X32", "Y32", "FP16_COMPUTE"}
WIDE = "#fp32"  # suffix of a tensor's fp32 copy around a kernel that runs in fp32 for a planned tensor


def _runtime(rec: ck.Kernel, graph: Graph) -> list[tuple[int, ck.Binding]]:
    return [(i, b) for i, b in enumerate(rec.bindings)
            if b.role in ("in", "out") and b.transform is None and b.name not in graph.constants]


def _fits(rec: ck.Kernel, graph: Graph, keep: set[str]) -> bool:
    bound = _runtime(rec, graph)
    kept = [b for _, b in bound if b.name in keep]
    if not kept:
        return True
    if len(kept) == len(bound):  # the whole kernel in fp32: a graph constant read as a tensor would be fp16
        return not any(b.role == "in" and (b.name in graph.constants or b.transform is not None) for b in rec.bindings)
    mixed = _MIXED.get(rec.kernel)
    if mixed is None:
        return False
    role, defines = mixed
    return all(b.role == role and i in defines for i, b in bound if b.name in keep)


def _castable(rec: ck.Kernel, graph: Graph, producer: dict[str, str], per_node: dict[str, int]) -> bool:
    """Whether ``rec`` can run as its fp32 variant with casts around its fp16 tensors."""
    if per_node.get(rec.node, 0) != 1:
        return False
    for b in rec.bindings:
        if b.role == "const":
            continue
        if b.transform is not None or b.name in graph.constants or graph.shape(b.name) is None \
                or np.dtype(graph.dtypes.get(b.name, np.float32)) != np.float32:
            return False
        if b.role == "out" and producer.get(b.name) != rec.node:
            return False
    return True


def _fp32_variant(rec: ck.Kernel, bindings: tuple[ck.Binding, ...] | None = None) -> ck.Kernel:
    defines = tuple(d for d in rec.defines if d[0] not in _STORAGE_DEFINES)
    bindings = tuple(replace(b, fp32=True) if b.role == "const" else b for b in bindings or rec.bindings)
    return replace(rec, defines=defines, bindings=bindings)


def plan(records: list[ck.Record], nodes: list[Node], graph: Graph, boundary: set[str],
         precision: str) -> tuple[list[ck.Record], set[str]]:
    """``records`` with the kernels that touch kept tensors rewritten (fp32 variant, the fp32
    binding's define, or the fp32 variant between casts), and the kept tensors (with the
    ``WIDE`` copies the casts make); unchanged records and an empty set off fp16."""
    if precision != "fp16":
        return records, set()
    wanted = mixed_precision.fp32_tensors(nodes, graph)
    keep = set(wanted) - boundary
    edges = mixed_precision.planned_edges(graph, boundary)
    wanted.update(edges)
    keep |= set(edges)  # uploaded / read back as fp32
    for r in records:
        if isinstance(r, ck.Alias):
            keep -= {r.src, r.dst}
    kernels = [r for r in records if isinstance(r, ck.Kernel)]
    producer = {o: n.name for n in nodes for o in n.outputs if o}
    per_node: dict[str, int] = {}
    for r in kernels:
        per_node[r.node] = per_node.get(r.node, 0) + 1
    planned = {n for n, why in wanted.items() if why == mixed_precision.REASON_CALIBRATED}
    cast: set[int] = set()  # indices into ``kernels`` that run in fp32 between casts
    changed = True
    while changed and keep:
        changed = False
        for i, r in enumerate(kernels):
            names = {b.name for _, b in _runtime(r, graph)}
            if i in cast or _fits(r, graph, keep):
                continue
            if names & keep & planned and _castable(r, graph, producer, per_node):
                cast.add(i)
            else:
                keep -= names
                changed = True
    if not keep:
        return records, keep
    cast_ids = {id(kernels[i]) for i in cast if {b.name for _, b in _runtime(kernels[i], graph)} & keep}
    out: list[ck.Record] = []
    wide: dict[str, str] = {}  # fp16 tensor -> its fp32 copy, once made
    for r in records:
        bound = _runtime(r, graph) if isinstance(r, ck.Kernel) else []
        kept = [(i, b) for i, b in bound if b.name in keep]
        if not kept:
            out.append(r)
        elif id(r) in cast_ids:
            assert isinstance(r, ck.Kernel)
            before, after, bindings = [], [], []
            for b in r.bindings:
                if b.role in ("in", "out") and b.name not in keep and b.name not in graph.constants:
                    copy = b.name + WIDE
                    shape = tuple(graph.shape(b.name) or ())
                    if b.role == "in" and b.name not in wide:
                        before.append(ck.cast_record(b.name, copy, shape, True, r.node))
                    elif b.role == "out":
                        after.append(ck.cast_record(copy, b.name, shape, False, r.node))
                    wide[b.name] = copy
                    b = replace(b, name=copy, shape=shape)  # a scratch tensor: sized by its binding
                bindings.append(b)
            out += [*before, _fp32_variant(r, tuple(bindings)), *after]
        elif len(kept) == len(bound):
            out.append(_fp32_variant(r))
        else:
            names = _MIXED[r.kernel][1]
            widened = {d for d in r.defines if d[0] != "FP16_COMPUTE"} | {(names[i], 1) for i, _ in kept}
            out.append(replace(r, defines=tuple(sorted(widened))))
    return out, keep | set(wide.values())


def describe(nodes: list[Node], graph: Graph, kept: set[str]) -> str:
    """``explain()``'s line for a segment planned with :func:`plan`."""
    copies = sum(1 for n in kept if n.endswith(WIDE))
    why = {n: mixed_precision.keeps_fp32(n, graph) or mixed_precision.REASON_SMALL
           for n in kept if not n.endswith(WIDE)}
    line = mixed_precision.describe(nodes, graph, why)
    return line + (f"; {copies} fp32 copies of fp16 tensors around kernels run in fp32 for planned tensors"
                   if copies else "")


def storage(name: str, keep: set[str], precision: str) -> str:
    """The storage precision of tensor ``name`` in a segment planned with :func:`plan`."""
    return "fp32" if name in keep else precision


__all__ = ["WIDE", "describe", "plan", "storage"]
