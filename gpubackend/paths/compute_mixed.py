"""The mixed-precision policy of ``precision="fp16"`` (:mod:`gpubackend.mixed_precision`) on the
compute paths (gles31, vulkan): which kernel records of a segment run on fp32 storage.

The compute kernels have one storage define, ``FP16``, for all their bindings, so a kept tensor
(small: pooled features, squeeze-excite vectors, gates) stays fp32 only where every kernel that
touches it can say so: a kernel whose runtime tensors are all kept runs as its fp32 variant; the
kernels at the edges of a squeeze-excite branch or a LayerNorm's statistics take one fp32 binding
beside fp16 ones (``globalpool.comp`` ``Y32``: the pooled mean; ``reduce.comp`` ``Y32``: a mean
or variance; ``binary.comp`` ``A32`` / ``B32``: the gate or statistic applied to the plane). A
tensor any other kernel touches, a segment input or output, or an aliased view falls back to fp16.
Under fp16-compute, a kernel touching a kept tensor computes in fp32
(no ``FP16_COMPUTE``): the kept value would otherwise be rounded to fp16 by the arithmetic.
"""

from __future__ import annotations

from dataclasses import replace

from .. import mixed_precision
from ..graph import Graph, Node
from . import compute_kernels as ck

# kernel -> (binding roles that may be fp32 beside fp16 ones, the define per binding index)
_MIXED = {"binary": ("in", {0: "A32", 1: "B32"}), "globalpool": ("out", {1: "Y32"}), "reduce": ("out", {2: "Y32"})}
_STORAGE_DEFINES = {"FP16", "A32", "B32", "Y32", "FP16_COMPUTE"}


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


def plan(records: list[ck.Record], nodes: list[Node], graph: Graph, boundary: set[str],
         precision: str) -> tuple[list[ck.Record], set[str]]:
    """``records`` with the kernels that touch kept tensors rewritten (fp32 variant, or the fp32
    binding's define), and the kept tensors; unchanged records and an empty set off fp16."""
    if precision != "fp16":
        return records, set()
    keep = set(mixed_precision.fp32_tensors(nodes, graph)) - boundary
    for r in records:
        if isinstance(r, ck.Alias):
            keep -= {r.src, r.dst}
    kernels = [r for r in records if isinstance(r, ck.Kernel)]
    changed = True
    while changed and keep:
        changed = False
        for r in kernels:
            if not _fits(r, graph, keep):
                keep -= {b.name for _, b in _runtime(r, graph)}
                changed = True
    if not keep:
        return records, keep
    out: list[ck.Record] = []
    for r in records:
        bound = _runtime(r, graph) if isinstance(r, ck.Kernel) else []
        kept = [(i, b) for i, b in bound if b.name in keep]
        if not kept:
            out.append(r)
        elif len(kept) == len(bound):
            defines = tuple(d for d in r.defines if d[0] not in _STORAGE_DEFINES)
            bindings = tuple(replace(b, fp32=True) if b.role == "const" else b for b in r.bindings)
            out.append(replace(r, defines=defines, bindings=bindings))
        else:
            names = _MIXED[r.kernel][1]
            wide = {d for d in r.defines if d[0] != "FP16_COMPUTE"} | {(names[i], 1) for i, _ in kept}
            out.append(replace(r, defines=tuple(sorted(wide))))
    return out, keep


def storage(name: str, keep: set[str], precision: str) -> str:
    """The storage precision of tensor ``name`` in a segment planned with :func:`plan`."""
    return "fp32" if name in keep else precision


__all__ = ["plan", "storage"]
