"""The one kernel contract of every GPU path (TFLite's ``GenerateCode`` plus its ordered
candidate lists).

- A **generator** is a pure function ``(node, graph, context) -> payload``: the path's record(s) of
  one generated kernel (shader source or shader name, bindings, textures, dispatch size). It makes
  no driver call. ``context`` is the path's own plain data (compute: the precision; gles3: its
  :class:`~.gles3.kernels.Limits`; gles2: its :class:`~.gles2.kernels.Config`). A generator declines
  by raising :class:`gpubackend.ops.Decline` or by returning the reason as a string.
- A :class:`KernelRegistry` maps an op type to its ordered candidates ``(kernel name, generator)``,
  most specialised first, plus the path's preconditions (``check``: dtypes, outputs).
- :func:`generate` is the one loop every path runs: domain, registry lookup, preconditions,
  kernels disabled by the probe, each candidate in order. It returns a :class:`Generated` or the
  reason the path declines (a string), never raises for a node it cannot run: a generator's
  unexpected exception (a bug) becomes a decline naming the exception, so the node goes to the
  next path instead of crashing the session. Only ``ModelError`` (a bad attribute, which the
  planner reports for every path alike) passes through.
- :class:`KernelCache` memoises :func:`generate` per (node, attributes, shapes, constant inputs)
  between a path's ``decline()`` and ``compile()`` without keeping a node or graph alive.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

import numpy as np

from .. import ops, tuning
from ..errors import ModelError
from ..graph import Graph, Node

log = logging.getLogger(__name__)

ONNX_DOMAINS = ("", "ai.onnx")

Generator = Callable[[Node, Graph, Any], Any]
Candidate = tuple[str, Generator]


class KernelRecord:
    """Base of every path's generated-kernel record (compute ``Kernel``/``Alias``, gles3 and gles2
    ``Kernel``). ``kernel_name`` is the short stable name the probe's per-kernel verdicts disable
    and the conformance suite reports; a generator that serves several kernels (a Conv generator
    emitting ``conv1x1``, ``depthwise`` or ``conv``) says which one through it."""

    __slots__ = ()

    @property
    def kernel_name(self) -> str:
        raise NotImplementedError


class Generated(NamedTuple):
    """What :func:`generate` returns for an accepted node: the kernel's name and the generator's
    payload (the path's record or list of records)."""

    kernel: str
    payload: Any


class KernelRegistry(dict[str, list[Candidate]]):
    """op type -> ordered candidates ``(kernel name, generator)``, for one path (or, for the compute
    kernels, for the two paths that share them). A dict, so a module that adds generators can
    register with ``REGISTRY["Op"] = [...]`` or :meth:`add`. ``check(node, graph)`` gives the
    path-wide reason to decline before any candidate runs (None: go on)."""

    def __init__(self, label: str, candidates: dict[str, list[Candidate]] | None = None,
                 check: Callable[[Node, Graph], str | None] | None = None):
        super().__init__(candidates or {})
        self.label = label
        self.check = check

    def add(self, op_types: str | Iterable[str], kernel: str, generator: Generator, *, first: bool = False) -> None:
        """Register ``generator`` as candidate ``kernel`` for each op type, after the existing
        candidates (``first``: before them, for a more specialised kernel)."""
        for op in [op_types] if isinstance(op_types, str) else op_types:
            cands = self.setdefault(op, [])
            cands.insert(0, (kernel, generator)) if first else cands.append((kernel, generator))


# Non-float tensors on the float paths (bool results, ArgMax indices, Where of integers) are held as
# exact floats: bool as 0.0 / 1.0, integers as their value, converted to the graph's type where they
# leave the device. Integers are exact up to this magnitude in each storage precision (fp32: 24-bit
# significand, fp16: 11-bit); a kernel that cannot bound its integers by it declines.
EXACT_INTEGER_LIMIT = {"fp32": 1 << 24, "fp16": 1 << 11}


def non_float32(graph: Graph, names: Iterable[str], holds: str) -> str | None:
    """The reason to decline when one of ``names`` (empty names skipped) is known not to be
    float32; ``holds`` says what the path stores (e.g. "gles3 textures hold float32 only")."""
    for n in names:
        if not n:
            continue
        dt = graph.constants[n].dtype if n in graph.constants else graph.dtypes.get(n)
        if dt is not None and np.dtype(dt) != np.float32:
            return f"tensor {n!r} is {np.dtype(dt)}; {holds}"
    return None


def _name_of(payload: Any, candidate: str) -> str:
    return payload.kernel_name if isinstance(payload, KernelRecord) else candidate


def generate(registry: KernelRegistry, node: Node, graph: Graph, context: Any,
             disabled: frozenset[str] = frozenset()) -> Generated | str:
    """The first candidate of ``registry`` that accepts ``node`` as a :class:`Generated`, else
    the reason (every candidate's reason, prefixed by its name when there are several). A kernel
    whose name is in ``disabled`` is declined; a generator that raises anything but ``Decline``
    or ``ModelError`` declines with the exception's type and text."""
    if node.domain not in ONNX_DOMAINS:
        return f"domain {node.domain!r}"
    cands = registry.get(node.op_type)
    if not cands:
        return f"no {registry.label} kernel for {node.op_type}"
    if registry.check is not None:
        try:
            why = registry.check(node, graph)
        except ops.Decline as exc:
            why = str(exc)
        if why:
            return why
    reasons = []
    for name, gen in cands:
        # Disabled kernels are refused by the name the generated record reports, not the
        # candidate's: one generator may emit several kernels (conv1x1, depthwise, conv).
        try:
            got = gen(node, graph, context)
        except ops.Decline as exc:
            got = str(exc)
        except ModelError:
            raise
        except Exception as exc:  # noqa: BLE001 - a generator bug declines; it must not crash a session
            log.debug("%s kernel %r failed on %s", registry.label, name, node, exc_info=True)
            got = f"the {name!r} generator failed ({type(exc).__name__}: {exc})"
        if isinstance(got, str):
            reasons.append(f"{name}: {got}" if len(cands) > 1 else got)
            continue
        kernel = _name_of(got, name)
        if kernel in disabled:
            reasons.append(f"kernel {kernel!r} disabled by the probe")
            continue
        return Generated(kernel, got)
    return "; ".join(reasons)


class KernelCache:
    """:func:`generate` memoised for one path instance. Entries are keyed by the node's identity
    and its signature (attributes, opset, input/output shapes, constant inputs' identities: what
    ops records are memoised on too), and leave when the node is collected (``weakref.finalize``),
    so the cache keeps no node or graph alive. ``context`` may be a callable, called once on first
    use (a path whose context needs its driver). ``accept(node, generated, graph)`` is the path's
    last word on a generated kernel (e.g. Vulkan: its SPIR-V variant is shipped): a reason, the
    generated kernel as the path will run it, or None (as generated)."""

    def __init__(self, registry: KernelRegistry, context: Any, disabled: frozenset[str] = frozenset(),
                 lazy_context: bool = False,
                 accept: Callable[[Node, Generated, Graph], str | Generated | None] | None = None):
        self.registry = registry
        self.accept = accept
        self._context = context
        self._lazy = lazy_context
        self.disabled = disabled
        self._memo: dict[int, dict[tuple, Generated | str]] = {}
        # the per-device tuning (gpubackend.tuning.Table) the generators read; None: defaults
        self.tuning: Any = None

    @property
    def context(self) -> Any:
        if self._lazy:
            self._context, self._lazy = self._context(), False
        return self._context

    def get(self, node: Node, graph: Graph) -> Generated | str:
        per_node = self._memo.get(id(node))
        if per_node is None:
            per_node = self._memo[id(node)] = {}
            weakref.finalize(node, self._memo.pop, id(node), None)
        names = [*node.inputs, *node.outputs]
        key = (ops.node_signature(node, graph), tuple(str(graph.dtypes.get(n, "")) for n in names),
               tuple(n in graph.inputs for n in node.inputs))
        hit = per_node.get(key)
        if hit is None:
            with tuning.active(self.tuning):
                hit = generate(self.registry, node, graph, self.context, self.disabled)
            if not isinstance(hit, str) and self.accept is not None:
                hit = self.accept(node, hit, graph) or hit
            per_node[key] = hit
        return hit

    def decline(self, node: Node, graph: Graph) -> str | None:
        hit = self.get(node, graph)
        return hit if isinstance(hit, str) else None

    def payloads(self, nodes: list[Node], graph: Graph, path: str) -> list[Any]:
        """The generated payload of each node, for ``compile()``; a node the path declines (the
        planner never hands one over) raises ValueError with the reason."""
        out = []
        for node in nodes:
            hit = self.get(node, graph)
            if isinstance(hit, str):
                raise ValueError(f"{path} cannot compile {node.name} ({node.op_type}): {hit}")
            out.append(hit.payload)
        return out

    def forget(self, nodes: Iterable[Node]) -> None:
        """Drop the entries of ``nodes`` (a compiled segment holds their data on the device now)."""
        for node in nodes:
            self._memo.pop(id(node), None)

    def clear(self) -> None:
        self._memo.clear()

    def __len__(self) -> int:
        return sum(len(v) for v in self._memo.values())


__all__ = ["EXACT_INTEGER_LIMIT", "Candidate", "Generated", "Generator", "KernelCache", "KernelRecord",
           "KernelRegistry", "ONNX_DOMAINS", "generate", "non_float32"]
