"""Placement: each node goes to the first path in preference order that accepts it; runs of
consecutive nodes on one path become segments, with host transfers only at their edges."""

from __future__ import annotations

from dataclasses import dataclass, field

from capability_probe.errors import DriverError

from .errors import UnsupportedOperatorError
from .graph import Graph, Node
from .ops import validate as validate_attributes
from .paths.base import Path


@dataclass
class Plan:
    placement: dict[str, str]  # node name -> path key
    reasons: dict[str, list[str]] = field(default_factory=dict)  # node name -> why better paths declined
    segments: list[tuple[str, list[Node]]] = field(default_factory=list)


def place(graph: Graph, nodes: list[Node], paths: list[Path]) -> Plan:
    """Place ``nodes`` (a topologically ordered subset of the graph) on ``paths`` (best first).
    Raises ModelError for a node with a bad attribute (before any path sees it) and
    UnsupportedOperatorError naming every node no path accepts."""
    plan = Plan({})
    refused: list[tuple[str, str, list[str]]] = []
    for node in nodes:
        validate_attributes(node, graph)
        reasons = []
        for path in paths:
            try:
                why = path.decline(node, graph)
            except DriverError:  # the driver failed (not the node): the session decides what follows
                raise
            except Exception as exc:  # a path's own bug must not stop planning: the node goes on
                why = f"its check of the node failed ({type(exc).__name__}: {exc})"
            if why is None:
                plan.placement[node.name] = path.key
                break
            reasons.append(f"{path.key}: {why}")
        else:
            refused.append((node.name, node.op_type, reasons))
        if reasons:
            plan.reasons[node.name] = reasons
    if refused:
        ops = sorted({op for _, op, _ in refused})
        lines = [f"  {name} ({op}): {'; '.join(r)}" for name, op, r in refused[:20]]
        more = f"\n  ... and {len(refused) - 20} more" if len(refused) > 20 else ""
        raise UnsupportedOperatorError(
            f"{len(refused)} node(s) cannot run on {', '.join(p.key for p in paths)} "
            f"(op types: {', '.join(ops)}):\n" + "\n".join(lines) + more, refused)
    for node in nodes:
        key = plan.placement[node.name]
        if plan.segments and plan.segments[-1][0] == key:
            plan.segments[-1][1].append(node)
        else:
            plan.segments.append((key, [node]))
    return plan


def segment_io(graph: Graph, segments: list[tuple[str, list[Node]]]) -> list[tuple[list[str], list[str]]]:
    """For each segment: the non-constant tensors it reads from outside and those it must hand out."""
    produced_in: dict[str, int] = {}
    for idx, (_, nodes) in enumerate(segments):
        for node in nodes:
            for o in node.outputs:
                if o:
                    produced_in[o] = idx
    needed_outside: dict[int, set[str]] = {}
    ios = []
    for _, nodes in segments:
        inside = {o for n in nodes for o in n.outputs if o}
        ins: list[str] = []
        for node in nodes:
            for i in node.inputs:
                if i and i not in inside and i not in graph.constants and i not in ins:
                    ins.append(i)
                    if i in produced_in:
                        needed_outside.setdefault(produced_in[i], set()).add(i)
        ios.append((ins, []))
    for idx, (_, nodes) in enumerate(segments):
        outs = [o for n in nodes for o in n.outputs
                if o and (o in needed_outside.get(idx, ()) or o in graph.outputs)]
        ios[idx] = (ios[idx][0], outs)
    return ios
