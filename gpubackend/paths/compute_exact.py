"""Non-float tensors on the ``gles31`` and ``vulkan`` compute paths, registered into
:data:`compute_kernels.REGISTRY`: ArgMax / ArgMin (int64 indices), comparisons and logic ops (bool
results), Where (bool condition) and Cast.

The device holds such tensors in the ordinary packed float layout as exact floats (see
``kernel_contract.EXACT_INTEGER_LIMIT``): bool as 0.0 / 1.0, integers as their value; the segment
converts them to the graph's type when they leave the device (``compute_kernels.unpack``) and
packs fed bool arrays as 0.0 / 1.0. An integer tensor is accepted only where its values are known
to be exact: a constant checked on the host, or ArgMax / ArgMin indices over an axis no longer than
the limit. Integer graph inputs (values unknown until run time, an int64 may pass 2^24) and
float-to-integer casts decline.

Comparisons, logic, Where and Cast to bool run ``logic.comp``: each operand is read through an
int32 index map built on the host from its packed addresses broadcast to the output (as the layout
ops of ``compute_ops``), so any broadcast at ranks up to ``compute_ops.MAX_RANK`` is one kernel.
ArgMax / ArgMin are op codes of ``reduce.comp``.
"""

from __future__ import annotations

import math

import numpy as np

from .. import ops
from ..graph import Graph, Node
from . import compute_kernels as ck
from . import compute_ops
from .compute_kernels import Binding, Decline, Kernel, Record
from .kernel_contract import EXACT_INTEGER_LIMIT

_LOGIC_OPS = {"Equal": 0, "Greater": 1, "Less": 2, "GreaterOrEqual": 3, "LessOrEqual": 4, "And": 5, "Or": 6,
              "Xor": 7, "Not": 8}
_TO_BOOL, _WHERE = 9, 10
_ARG_OPS = {"ArgMax": 10, "ArgMin": 11}  # reduce.comp; + 2 with select_last_index
# ops whose output may be bool or an integer type (held as exact floats); their generators check it
EXACT_OUTPUT_OPS = frozenset({*_LOGIC_OPS, *_ARG_OPS, "Where", "Cast", "CastLike"})


def _dtype(graph: Graph, name: str) -> np.dtype:
    return np.dtype(graph.constants[name].dtype) if name in graph.constants else ck.tensor_dtype(graph, name)


def _arg_axis_length(graph: Graph, node: Node) -> int:
    xs = ck._shape(graph, node.inputs[0])
    return xs[ops.require(node, graph, ops.ArgRecord).axis] if xs else 1


def exact_operand(graph: Graph, name: str, precision: str) -> tuple[int, ...]:
    """The shape of ``name`` when the device holds it exactly (float32, bool, or integers known to
    be within the precision's exact range); otherwise :class:`Decline` with the reason."""
    dt = _dtype(graph, name)
    shape = ck._shape(graph, name)
    if len(shape) > compute_ops.MAX_RANK or math.prod(shape) == 0:
        raise Decline(f"{name!r} of shape {shape}")
    if dt == np.float32 or dt == np.bool_:
        return shape
    if dt.kind not in "iu":
        raise Decline(f"{name!r} is {dt}; the compute paths hold float32 (and bool / exact integers)")
    limit = EXACT_INTEGER_LIMIT[precision]
    if name in graph.constants:
        values = np.asarray(graph.constants[name])
        if values.size and np.abs(values.astype(np.int64)).max() > limit:
            raise Decline(f"constant {name!r} has integers past {limit}, not exact in {precision} storage")
        return shape
    producer = graph.producers().get(name)
    if producer is not None and producer.op_type in _ARG_OPS and _arg_axis_length(graph, producer) <= limit:
        return shape
    raise Decline(f"{name!r} is {dt} known only at run time; its values could pass {limit}, not exact in "
                  f"{precision} storage")


def _arg(node: Node, graph: Graph, precision: str) -> list[Record]:
    xs = ck._float_tensor(graph, node.inputs[0], compute_ops.MAX_RANK)
    rec = ops.require(node, graph, ops.ArgRecord)
    if ck.tensor_dtype(graph, node.outputs[0]) != np.int64:
        raise Decline("output is not int64")
    count, limit = xs[rec.axis], EXACT_INTEGER_LIMIT[precision]
    if count > limit:
        raise Decline(f"axis of {count} elements: indices past {limit} are not exact in {precision} storage")
    code = _ARG_OPS[node.op_type] + 2 * int(rec.select_last_index)
    return [compute_ops.reduce_record(node, graph, precision, xs, (rec.axis,), code)]


def _logic_kernel(node: Node, graph: Graph, precision: str, names: list[str], op: int) -> Kernel:
    """``logic.comp`` with op code ``op`` over ``names`` broadcast to output 0."""
    y = node.outputs[0]
    ys = ck._shape(graph, y)
    if len(ys) > compute_ops.MAX_RANK or math.prod(ys) == 0:
        raise Decline(f"output of shape {ys}")
    bindings: list[Binding] = []
    total = 0
    for k, name in enumerate(names):
        shape = exact_operand(graph, name, precision)
        if len(shape) > len(ys):
            raise Decline(f"{name!r} has a higher rank than the output")
        try:
            mapped = np.broadcast_to(compute_ops.addresses(shape).reshape((1,) * (len(ys) - len(shape)) + shape), ys)
        except ValueError as exc:
            raise Decline(f"{name!r} of shape {shape} does not broadcast to {ys}") from exc
        if name in graph.constants:
            bindings.append(Binding("const", f"{node.name}/in{k}", ck.pack(graph.constants[name])))
        else:
            bindings.append(Binding("in", name))
        map_binding, total = compute_ops.map_binding(f"{node.name}/map{k}", mapped)
        bindings.append(map_binding)
    groups, local = ck._grid_flat(total)
    return Kernel("logic", "compute/logic.comp", ck._variant(precision, OPERANDS=len(names)),
                  (("total", total), ("op", op)), (*bindings, Binding("out", y)), groups, local, node.name)


def _logic(node: Node, graph: Graph, precision: str) -> list[Record]:
    """Comparisons (float or exact operands) and And / Or / Xor / Not (bool operands): bool output."""
    names = list(node.inputs)
    if len(names) != (1 if node.op_type == "Not" else 2) or not all(names):
        raise Decline(f"{len(names)} inputs")
    if ck.tensor_dtype(graph, node.outputs[0]) != np.bool_:
        raise Decline("output is not bool")
    if node.op_type in ("And", "Or", "Xor", "Not") and any(_dtype(graph, n) != np.bool_ for n in names):
        raise Decline("logic op on non-bool inputs")
    return [_logic_kernel(node, graph, precision, names, _LOGIC_OPS[node.op_type])]


def _where(node: Node, graph: Graph, precision: str) -> list[Record]:
    names = list(node.inputs)
    if len(names) != 3 or not all(names):
        raise Decline(f"{len(names)} inputs")
    if _dtype(graph, names[0]) != np.bool_:
        raise Decline(f"condition {names[0]!r} is not bool")
    if len({_dtype(graph, n) for n in names[1:]} | {ck.tensor_dtype(graph, node.outputs[0])}) != 1:
        raise Decline("the values and the output differ in type")
    return [_logic_kernel(node, graph, precision, names, _WHERE)]


def _cast(node: Node, graph: Graph, precision: str) -> list[Record]:
    """Cast / CastLike between float32, bool and exact integers: a no-op where the held values stay
    the same (to float32, or bool / exact integers to an integer type), a ``!= 0`` kernel to bool.
    Float to integer declines (truncated values could pass the exact range)."""
    x, y = node.inputs[0], node.outputs[0]
    if x in graph.constants:
        raise Decline("Cast of a constant (folded on the host)")
    if node.op_type == "Cast":
        to = ops.require(node, graph, ops.CastRecord).to
    else:
        to = ck.tensor_dtype(graph, y)
    src = _dtype(graph, x)
    exact_operand(graph, x, precision)
    if to == np.bool_:
        return [_logic_kernel(node, graph, precision, [x], _TO_BOOL)]
    if to == np.float32 or (to.kind in "iu" and src.kind in "biu"):
        if to.kind in "iu" and src.kind in "iu" and np.iinfo(to).max < EXACT_INTEGER_LIMIT[precision]:
            raise Decline(f"{src} to {to} may wrap")
        return [ck.Alias(x, y, "layout", node.name)]
    raise Decline(f"Cast from {src} to {to}: the compute paths hold float32, bool and exact integers")


def variants() -> list[tuple[str, tuple[tuple[str, int], ...]]]:
    """Every (shader, defines) variant this module's generators emit (reduce.comp's are compute_ops')."""
    return [("compute/logic.comp", ck._variant(prec, OPERANDS=n)) for prec in ck.PRECISIONS for n in (1, 2, 3)]


def _register() -> None:
    reg = ck.REGISTRY
    for op in _LOGIC_OPS:
        reg[op] = [("logic", _logic)]
    reg["Where"] = [("logic", _where)]
    for op in _ARG_OPS:
        reg[op] = [("reduce", _arg)]
    reg["Cast"] = reg["CastLike"] = [("layout", _cast)]


_register()
