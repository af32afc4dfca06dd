"""Quantization semantics for the GPU paths, resolved once.

Two things live here:

- :class:`DequantizedWeight`: what constant folding learnt when it folded a DequantizeLinear of
  integer constants (a QDQ model's weights) into a float constant: the scale and its axis. The
  float constant stays the graph's value (the CPU path and every float kernel use it); a GPU
  kernel may instead keep the integers, four to a 32-bit word, and apply the scale per output
  channel (:func:`output_channel_scale`).
- :class:`QuantRecord`: a QuantizeLinear / DequantizeLinear node's parameters (constant scale and
  zero point, per tensor or per axis, the integer type's range).
- :func:`requantize_in_integers`: the integer form of ``DequantizeLinear -> Conv ->
  QuantizeLinear`` that onnxruntime runs (its QDQ fusion makes a QLinearConv), written with
  standard ops every path already runs, so that every path computes onnxruntime's integers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx

from ..errors import ModelError
from ..graph import Graph, Node

# Integer types whose every value a float32 holds exactly (activations travel on the GPU as
# float32 or float16 holding the integer; float16 is exact for the 8-bit types only).
QUANT_TYPES = (np.dtype(np.int8), np.dtype(np.uint8), np.dtype(np.int16), np.dtype(np.uint16))


@dataclass(frozen=True)
class DequantizedWeight:
    """A constant equal to ``(q - zero_point) * scale`` for integers ``q`` (8-bit weights, or an
    int32 bias): ``scale`` is float32, a scalar (``axis`` None) or one value per index of ``axis``
    of the constant."""

    scale: np.ndarray
    axis: int | None
    # the integers' type and the integers minus their zero point (int64), for the integer form
    # of the consumer (:func:`requantize_in_integers`)
    int_type: np.dtype = np.dtype(np.int8)
    centered: np.ndarray | None = None


def note_dequantized(graph: Graph, node: Node, operands: list[np.ndarray | None]) -> None:
    """Constant folding calls this for every DequantizeLinear it folds: remember the scale of a
    per-tensor or per-axis (not blocked) dequantisation of 8-bit integers."""
    if node.op_type != "DequantizeLinear" or len(operands) < 2 or operands[0] is None or operands[1] is None:
        return
    x, scale = np.asarray(operands[0]), np.asarray(operands[1])
    if x.dtype not in (np.dtype(np.int8), np.dtype(np.uint8), np.dtype(np.int32)) or scale.dtype != np.float32:
        return
    if int(node.attrs.get("block_size", 0) or 0):
        return
    zp = np.asarray(operands[2]) if len(operands) > 2 and operands[2] is not None else np.zeros((), x.dtype)
    if scale.size == 1:
        axis = None
        if zp.size != 1:
            return
        zp = zp.reshape(())
    else:
        axis = int(node.attrs.get("axis", 1))
        if not -x.ndim <= axis < x.ndim or scale.ndim != 1 or scale.shape[0] != x.shape[axis]:
            return
        axis %= x.ndim
        if zp.size != 1:
            if zp.shape != scale.shape:
                return
            zp = zp.reshape([-1 if a == axis else 1 for a in range(x.ndim)])
        else:
            zp = zp.reshape(())
    centered = x.astype(np.int64) - zp.astype(np.int64)
    graph.dequantized[node.outputs[0]] = DequantizedWeight(scale.reshape(-1).copy(), axis, x.dtype, centered)


def output_channel_scale(node: Node, graph: Graph, out_channels: int, group: int = 1) -> np.ndarray | str:
    """The dequantisation scale of ``node``'s weight (input 1) per output channel, or the reason
    there is none: the weight is not a folded DequantizeLinear of 8-bit integers, or its scale
    varies along another axis than the output channels. Conv weights are (co, ci/g, kh, kw),
    ConvTranspose (ci, co/g, kh, kw), MatMul's B (k, n), Gemm's B (k, n) or with transB (n, k);
    Gemm's alpha is folded into the scale."""
    name = node.inputs[1] if len(node.inputs) > 1 else ""
    dq = graph.dequantized.get(name)
    if dq is None or dq.int_type == np.dtype(np.int32):
        return f"the weight {name!r} is not a dequantized 8-bit integer constant"
    alpha = 1.0
    if dq.axis is None:
        per_co = np.full(out_channels, dq.scale[0], np.float32)
    else:
        op = node.op_type
        rank = np.ndim(graph.constants[name])
        if op == "Conv":
            co_axis = 0
        elif op == "ConvTranspose":
            co_axis = 1
        elif op == "Gemm":
            co_axis = 0 if int(node.attrs.get("transB", 0)) else 1
        else:
            co_axis = rank - 1
        if dq.axis != co_axis:
            return f"the weight's scale varies along axis {dq.axis}, not the output channels"
        per_co = np.tile(dq.scale, group) if op == "ConvTranspose" else dq.scale
    if node.op_type == "Gemm":
        alpha = float(node.attrs.get("alpha", 1.0))
    per_co = np.asarray(per_co, np.float32) * np.float32(alpha)
    if per_co.shape != (out_channels,):
        return f"{per_co.size} weight scales for {out_channels} output channels"
    if not np.all(np.isfinite(per_co)) or np.any(per_co == 0):
        return "a weight scale is zero or not finite"
    return per_co


def weight_scale(node: Node, graph: Graph) -> np.ndarray | str:
    """:func:`output_channel_scale` of a Conv / ConvTranspose / Gemm / MatMul, its output channels
    and groups read off the node (the scale every path's int8 weight kernel applies)."""
    from .records import ConvRecord, GemmRecord, require  # records imports this module at load

    if node.op_type in ("Conv", "ConvTranspose"):
        rec = require(node, graph, ConvRecord)
        co, group = rec.out_channels, rec.group
    else:
        bshape = graph.shape(node.inputs[1]) if len(node.inputs) > 1 else None
        if bshape is None or len(bshape) != 2:
            return "the weight must be a rank-2 constant"
        trans = node.op_type == "Gemm" and require(node, graph, GemmRecord).trans_b
        co, group = int(bshape[0] if trans else bshape[1]), 1
    return output_channel_scale(node, graph, co, group)


@dataclass(frozen=True)
class QuantRecord:
    """QuantizeLinear (``quantize``) or DequantizeLinear: ``y = saturate(round_half_even(x /
    scale) + zero_point)`` to [lo, hi], or ``y = (x - zero_point) * scale``. ``scale`` and
    ``zero_point`` have one entry (per tensor) or one per index of ``axis``."""

    quantize: bool
    scale: tuple[float, ...]
    zero_point: tuple[int, ...]
    axis: int | None
    int_type: np.dtype
    lo: int
    hi: int


def lower_qdq(node: Node, graph: Graph) -> QuantRecord | str:
    """The record of a QuantizeLinear / DequantizeLinear node, or why it cannot be resolved
    statically (a runtime scale, blocked quantization, a type a float does not hold exactly)."""
    quantize = node.op_type == "QuantizeLinear"
    names = list(node.inputs) + [""] * (3 - len(node.inputs))
    if not names[1] or names[1] not in graph.constants:
        return "the scale must be a constant"
    if names[2] and names[2] not in graph.constants:
        return "the zero point must be a constant"
    scale = np.asarray(graph.constants[names[1]])
    zp = np.asarray(graph.constants[names[2]]) if names[2] else None
    if scale.dtype != np.float32:
        return f"scale of type {scale.dtype} (float32 only)"
    if int(node.attrs.get("block_size", 0) or 0):
        return "blocked quantization"
    if quantize:
        if zp is not None:
            int_type = zp.dtype
        elif node.attrs.get("output_dtype"):
            from onnx.helper import tensor_dtype_to_np_dtype

            int_type = np.dtype(tensor_dtype_to_np_dtype(int(node.attrs["output_dtype"])))
        else:
            int_type = np.dtype(np.uint8)
    else:
        int_type = graph.constants[names[0]].dtype if names[0] in graph.constants else graph.dtypes.get(names[0])
        if int_type is None:
            return f"the type of {names[0]!r} is not known"
        int_type = np.dtype(int_type)
        if zp is not None and zp.dtype != int_type:
            raise ModelError(f"node {node.name} ({node.op_type}): x_zero_point type {zp.dtype} differs from "
                             f"x type {int_type}")
    if int_type not in QUANT_TYPES:
        return f"{int_type} quantization (int8, uint8, int16, uint16 are supported)"
    shape = graph.shape(names[0]) if names[0] else None
    axis = None
    if scale.size != 1 or (zp is not None and zp.size != 1):
        if shape is None:
            return "per-axis quantization of a tensor of unknown shape"
        axis = int(node.attrs.get("axis", 1))
        if not -len(shape) <= axis < len(shape):
            raise ModelError(f"node {node.name} ({node.op_type}): attribute axis={axis} is out of range "
                             f"for rank {len(shape)}")
        axis %= len(shape)
        for what, v in (("scale", scale), ("zero point", zp)):
            if v is not None and v.size != 1 and (v.ndim != 1 or v.shape[0] != shape[axis]):
                raise ModelError(f"node {node.name} ({node.op_type}): the {what} has shape {v.shape}, "
                                 f"not ({shape[axis]},) for axis {axis}")
        length = shape[axis]
    else:
        length = 1
    s = np.broadcast_to(scale.reshape(-1), (length,))
    z = np.broadcast_to(zp.reshape(-1), (length,)) if zp is not None else np.zeros(length, np.int64)
    info = np.iinfo(int_type)
    return QuantRecord(quantize, tuple(float(v) for v in s), tuple(int(v) for v in z), axis, int_type,
                       int(info.min), int(info.max))


# A float32 holds every integer up to 2**24 exactly: the integer form's sums stay below it.
EXACT_FLOAT_INTEGER = 1 << 24
REQUANTIZE_SUFFIX = "/requantize"


# ops with an integer form: op -> how to read its weight's output-channel axis
_INTEGER_FORM_OPS = ("Conv", "MatMul", "Gemm")


def _output_channel_axis(node: Node, weights: np.ndarray) -> int | str:
    """The weight axis of ``node``'s output channels (Conv (co, ci, k...), MatMul (k, n), Gemm
    (k, n) or with transB (n, k)), or why the node has no integer form."""
    if node.op_type == "Conv":
        return 0
    if weights.ndim != 2:
        return "the weight is not rank 2"
    if node.op_type == "MatMul":
        return 1
    if int(node.attrs.get("transA", 0)) or float(node.attrs.get("alpha", 1.0)) != 1.0 \
            or float(node.attrs.get("beta", 1.0)) != 1.0:
        return "transA, alpha or beta"
    return 0 if int(node.attrs.get("transB", 0)) else 1


def _integer_form_parts(node: Node, graph: Graph, producers: dict[str, Node], consumers: dict[str, list[Node]]
                        ) -> tuple[Node, QuantRecord, QuantRecord, Node, np.ndarray, np.ndarray, np.ndarray] | str:
    """The pieces of ``DequantizeLinear(x) -> Conv / MatMul / Gemm(DQ(w), DQ(b)) ->
    QuantizeLinear``, or why the node is not one: (input DQ node, its record, the output Q's
    record, the Q node, centered integer weights, centered integer bias, requantisation multiplier
    per output channel)."""
    if "_act" in node.attrs or len(node.inputs) < 2:
        return "a fused activation or no weight"
    users = consumers.get(node.outputs[0], [])
    if len(users) != 1 or node.outputs[0] in graph.outputs or users[0].op_type != "QuantizeLinear":
        return "the output does not go to exactly one QuantizeLinear"
    q_node = users[0]
    dq_node = producers.get(node.inputs[0])
    if dq_node is None or dq_node.op_type != "DequantizeLinear" or dq_node.domain not in ("", "ai.onnx"):
        return "the input is not a DequantizeLinear"
    if q_node.domain not in ("", "ai.onnx") or q_node.inputs[0] != node.outputs[0]:
        return "not a standard QuantizeLinear"
    x_rec, y_rec = lower_qdq(dq_node, graph), lower_qdq(q_node, graph)
    if isinstance(x_rec, str) or isinstance(y_rec, str):
        return x_rec if isinstance(x_rec, str) else str(y_rec)
    eight_bit = (np.dtype(np.int8), np.dtype(np.uint8))
    if x_rec.axis is not None or y_rec.axis is not None or x_rec.int_type not in eight_bit \
            or y_rec.int_type not in eight_bit:
        return "the activations are not per-tensor 8-bit"
    w = graph.dequantized.get(node.inputs[1])
    if w is None or w.centered is None or w.int_type not in eight_bit:
        return "the weight is not a DequantizeLinear of 8-bit integers"
    co_axis = _output_channel_axis(node, w.centered)
    if isinstance(co_axis, str):
        return co_axis
    if w.axis not in (None, co_axis):
        return "the weight's scale varies along another axis than the output channels"
    out_channels = w.centered.shape[co_axis]
    bias = np.zeros(out_channels, np.int64)
    if len(node.inputs) > 2 and node.inputs[2]:
        b = graph.dequantized.get(node.inputs[2])
        if b is None or b.centered is None or b.int_type != np.dtype(np.int32) or b.centered.shape != (out_channels,):
            return "the bias is not a DequantizeLinear of int32 with one value per output channel"
        bias = b.centered
    x_scale = np.float32(x_rec.scale[0])
    w_scale = np.broadcast_to(w.scale.astype(np.float32), (out_channels,))
    # onnxruntime's QLinearConv / QLinearMatMul / QGemm: (x_scale * w_scale) / y_scale, each step
    # rounded to float32
    multiplier = (x_scale * w_scale) / np.float32(y_rec.scale[0])
    if not np.all(np.isfinite(multiplier)):
        return "the requantisation multiplier is not finite"
    x_reach = max(x_rec.hi - x_rec.zero_point[0], x_rec.zero_point[0] - x_rec.lo)
    per_channel = np.moveaxis(np.abs(w.centered), co_axis, 0).reshape(out_channels, -1).sum(axis=1)
    reach = x_reach * per_channel + np.abs(bias)
    if int(reach.max()) >= EXACT_FLOAT_INTEGER:
        return f"its integer sums can reach {int(reach.max())}, past the 2**24 a float32 holds exactly"
    return dq_node, x_rec, y_rec, q_node, w.centered, bias, multiplier


def _zero_point_in_bias(node: Node, x_rec: QuantRecord, weights: np.ndarray, bias: np.ndarray
                        ) -> np.ndarray | None:
    """The integer bias with the input's zero point folded in, ``bias - x_zero_point * sum(w)``
    per output channel, for a Conv without padding or a Gemm: then ``sum(x * w) + that`` is
    onnxruntime's ``sum((x - x_zero_point) * w) + bias`` as the same integer, and the layer reads
    the integers as they are (``DequantizeLinear(x, 1, 0)``, a plain copy or none on the GPU
    paths) instead of a centered copy. None where the zero point is 0, padding would add
    ``-x_zero_point * w`` terms only at the borders, MatMul has no bias to carry it, or the sums
    could reach 2**24."""
    zp = x_rec.zero_point[0]
    if not zp or node.op_type == "MatMul":
        return None
    if node.op_type == "Conv":  # read off the attributes: shapes may not be known yet
        auto_pad = node.attrs.get("auto_pad", "NOTSET")
        auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
        explicit = any(int(v) for v in node.attrs.get("pads", ()))
        one_by_one = all(d == 1 for d in weights.shape[2:])  # SAME pads a 1x1 window by 0
        if not (auto_pad == "VALID" or (auto_pad == "NOTSET" and not explicit)
                or (auto_pad.startswith("SAME") and one_by_one)):
            return None
    co_axis = _output_channel_axis(node, weights)
    if isinstance(co_axis, str):
        return None
    per_channel = np.moveaxis(weights, co_axis, 0).reshape(weights.shape[co_axis], -1)
    folded = bias - np.int64(zp) * per_channel.sum(axis=1)
    reach = max(abs(x_rec.lo), abs(x_rec.hi)) * np.abs(per_channel).sum(axis=1) + np.abs(folded)
    return folded if int(reach.max()) < EXACT_FLOAT_INTEGER else None


def requantize_in_integers(graph: Graph) -> list[str]:
    """Rewrite every ``DequantizeLinear(x) -> Conv / MatMul / Gemm -> QuantizeLinear`` with
    constant int8 weights and int32 bias into the integer arithmetic onnxruntime runs for it
    (its QDQ fusion makes QLinearConv, QLinearMatMul or QGemm of them: exact int32
    accumulation of ``(x - x_zero_point) * w``, plus the bias, times the float32 multiplier
    ``x_scale * w_scale / y_scale``, rounded half to even, plus ``y_zero_point``, saturated):

        DequantizeLinear(x, 1, x_zero_point)       the centered integers, as floats
        -> Conv(integer weights, integer bias)     integer sums, exact in float32 below 2**24
                                                   (MatMul: no bias; Gemm: bias as C)
        -> Mul(multiplier per output channel)      one float32 rounding, as onnxruntime
        -> QuantizeLinear(1, y_zero_point)         round half to even, saturate

    Standard ops every path runs; the weights stay ``graph.dequantized`` (scale 1), so the GPU
    paths keep them as int8. A Conv without padding or a Gemm takes the zero point in its bias
    instead (:func:`_zero_point_in_bias`: ``DequantizeLinear(x, 1, 0)``, no centering pass). A
    node whose sums could pass 2**24 keeps its float form. Returns the names of the nodes
    rewritten."""
    producers, consumers = graph.producers(), graph.consumers()
    centered_inputs: dict[tuple[str, int], str] = {}
    done: list[str] = []
    new_nodes: list[Node] = []
    for node in graph.nodes:
        parts = (_integer_form_parts(node, graph, producers, consumers)
                 if node.op_type in _INTEGER_FORM_OPS and node.domain in ("", "ai.onnx") else "no integer form")
        if isinstance(parts, str):
            new_nodes.append(node)
            continue
        dq_node, x_rec, y_rec, q_node, weights, bias, multiplier = parts
        x_zp = x_rec.zero_point[0]
        folded = _zero_point_in_bias(node, x_rec, weights, bias)
        if folded is not None:
            bias, x_zp = folded, 0
        key = (dq_node.inputs[0], x_zp)
        one = _constant(graph, "gpubackend/one", np.float32(1.0))
        if key not in centered_inputs:
            role = "centered" if x_zp else "integers"
            centered = f"{dq_node.outputs[0]}/{role}"
            zp = _constant(graph, f"{centered}/zero_point", np.array(x_zp, x_rec.int_type))
            new_nodes.append(Node(f"{dq_node.name}/{role}", "DequantizeLinear", [dq_node.inputs[0], one, zp],
                                  [centered]))
            _like(graph, centered, dq_node.outputs[0])
            centered_inputs[key] = centered
        w_name = _constant(graph, f"{node.name}/integer_weights", weights.astype(np.float32))
        graph.dequantized[w_name] = DequantizedWeight(np.ones(1, np.float32), None, np.dtype(np.int8),
                                                      weights)
        b_name = _constant(graph, f"{node.name}/integer_bias", bias.astype(np.float32))
        acc, scaled = f"{node.name}/integer_sum", f"{node.name}/requantized"
        rank = len(graph.shape(node.outputs[0]) or (0, 0, 0, 0))
        per_channel_shape = (-1,) + (1,) * (rank - 2) if node.op_type == "Conv" else (-1,)
        mult = _constant(graph, f"{node.name}/multiplier", multiplier.reshape(per_channel_shape))
        for name in (acc, scaled):
            _like(graph, name, node.outputs[0])
        node.inputs = [centered_inputs[key], w_name] + ([b_name] if node.op_type != "MatMul" else [])
        node.outputs = [acc]
        new_nodes.append(node)
        new_nodes.append(Node(f"{node.name}{REQUANTIZE_SUFFIX}", "Mul", [acc, mult], [scaled]))
        q_node.inputs = [scaled, one] + q_node.inputs[2:]
        done.append(node.name)
    graph.nodes = new_nodes
    return done


MS_DOMAIN = "com.microsoft"
# QOperator op -> (its float op, how many (x, scale, zero point) input triples come before the
# output's scale and zero point), for the ops whose QDQ form is DQ of each input -> op -> Q
_QLINEAR_FLOAT_FORM = {
    ("", "QLinearMatMul"): ("MatMul", 2),
    (MS_DOMAIN, "QLinearAdd"): ("Add", 2),
    (MS_DOMAIN, "QLinearMul"): ("Mul", 2),
    (MS_DOMAIN, "QLinearSigmoid"): ("Sigmoid", 1),
    (MS_DOMAIN, "QLinearLeakyRelu"): ("LeakyRelu", 1),
    (MS_DOMAIN, "QLinearGlobalAveragePool"): ("GlobalAveragePool", 1),
    (MS_DOMAIN, "QLinearSoftmax"): ("Softmax", 1),
}


def qoperators_as_qdq(graph: Graph) -> list[tuple[Node, onnx.NodeProto]]:
    """Rewrite the QOperator ops onnxruntime's quantizer writes (QLinearConv, QLinearMatMul, and
    the com.microsoft QGemm, QLinearAdd, QLinearMul, QLinearSigmoid, QLinearLeakyRelu,
    QLinearGlobalAveragePool, QLinearSoftmax, QLinearConcat) into the QDQ form of the same
    layer: DequantizeLinear of each input, the float op, QuantizeLinear of the output. The QDQ
    form is what every path runs, and :func:`requantize_in_integers` then turns its Conv / MatMul
    / Gemm into onnxruntime's integer arithmetic. Nodes whose scales or zero points are not
    constants stay as they are (the CPU path runs them). Returns the nodes it made, each with its
    NodeProto (shape inference reads the graph's nodes as protos)."""
    made: list[Node] = []
    out: list[Node] = []
    producers: dict[str, Node] = {}
    for node in graph.nodes:
        parts = _qdq_form(node, graph)
        if parts is None:
            parts = _movement_qdq_form(node, graph, producers)
        if parts is None:
            parts = [node]
        else:
            made.extend(parts)
        out.extend(parts)
        producers.update({o: n for n in parts for o in n.outputs if o})
    graph.nodes = out
    return [(n, _node_proto(n)) for n in made]


def quantize_float_weights(graph: Graph) -> list[tuple[Node, onnx.NodeProto]]:
    """onnxruntime's weight and bias quantization (its ``WeightBiasQuantization`` graph
    transformer, on by default), written into the graph so every path computes its result: a
    Conv / ConvTranspose / Gemm whose input is a DequantizeLinear with one scale gets

    - float32 weights (a constant) quantized to int8, per tensor: the range [min(w, 0),
      max(w, 0)] over 255 steps, zero point ``round_half_even(-128 - min / scale)``;
    - a 1-D float32 bias (a constant) quantized to int32 with scale ``x_scale * w_scale``
      (per channel where the weights are): ``round_half_even(bias / scale)``.

    Both then feed the node through DequantizeLinear. This is not ONNX's result (the weights lose
    precision), but it is onnxruntime's: a QOperator model's float ConvTranspose (the quantizer
    has no QLinearConvTranspose) otherwise lands steps away from onnxruntime's int8 output.
    A node onnxruntime skips (a bias that is not a 1-D constant, quantized weights without a
    bias, per-channel weights on another axis) is skipped here too. Returns the nodes it made,
    with their NodeProtos."""
    producers = graph.producers()
    made: list[Node] = []
    out: list[Node] = []
    for node in graph.nodes:
        parts = _quantized_weight_parts(node, graph, producers)
        if parts:
            made.extend(parts + [node])  # the node too: its inputs changed
        out.extend(parts)
        out.append(node)
    graph.nodes = out
    return [(n, _node_proto(n)) for n in made]


def _node_proto(node: Node) -> onnx.NodeProto:
    return onnx.helper.make_node(node.op_type, node.inputs, node.outputs, name=node.name, domain=node.domain or None,
                                 **{k: v for k, v in node.attrs.items() if not k.startswith("_")})


def _scalar_scale(graph: Graph, name: str) -> bool:
    return name in graph.constants and np.ndim(graph.constants[name]) <= 1 and np.size(graph.constants[name]) == 1


def _quantized_weight_parts(node: Node, graph: Graph, producers: dict[str, Node]) -> list[Node]:
    """The DequantizeLinear nodes of :func:`quantize_float_weights` for ``node`` (rewiring its
    weight and bias inputs to them), or [] where onnxruntime leaves the node as it is."""
    if node.op_type not in ("Conv", "ConvTranspose", "Gemm") or node.domain not in ("", "ai.onnx") \
            or len(node.inputs) < 2:
        return []
    x_dq = producers.get(node.inputs[0])
    if x_dq is None or x_dq.op_type != "DequantizeLinear" or not _scalar_scale(graph, x_dq.inputs[1]):
        return []
    w_name = node.inputs[1]
    w_dq = producers.get(w_name)
    if w_dq is not None and w_dq.op_type != "DequantizeLinear":
        return []
    if w_dq is None and (w_name not in graph.constants or graph.constants[w_name].dtype != np.float32):
        return []
    bias = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else None
    if bias is not None and (bias in producers or bias not in graph.constants or np.ndim(graph.constants[bias]) != 1):
        return []
    if w_dq is not None and bias is None:
        return []
    if w_dq is not None:
        w_scale_name = w_dq.inputs[1]
        if w_scale_name not in graph.constants:
            return []
        w_scale = np.asarray(graph.constants[w_scale_name], np.float32)
        if w_scale.size != 1 or w_scale.ndim > 1:  # per channel: on the output-channel axis only
            expected = 0 if node.op_type != "Gemm" else (0 if int(node.attrs.get("transB", 0)) else 1)
            if w_scale.ndim != 1 or w_scale.size != np.size(graph.constants[bias]) or "block_size" in w_dq.attrs \
                    or int(w_dq.attrs.get("axis", 1)) != expected:
                return []
    name = node.name
    parts: list[Node] = []
    if w_dq is None:
        w = np.asarray(graph.constants[w_name], np.float32)
        lo, hi = min(np.float32(w.min()), np.float32(0)), max(np.float32(w.max()), np.float32(0))
        w_scale = np.float32(1) if hi == lo else np.float32(hi - lo) / np.float32(255)
        zp = np.int8(np.clip(np.rint(np.float32(-128) - lo / w_scale), -128, 127))
        wq = np.clip(np.rint(w / w_scale) + np.float32(zp), -128, 127).astype(np.int8)
        w_scale_name = _constant(graph, f"{name}/weight_scale", w_scale)
        graph.constants[f"{name}/weight_q"] = wq
        parts.append(Node(f"{name}/weight_dq", "DequantizeLinear",
                          [f"{name}/weight_q", w_scale_name, _constant(graph, f"{name}/weight_zp", zp)],
                          [f"{name}/weight"]))
        node.inputs[1] = f"{name}/weight"
    if bias is not None:
        x_scale = np.float32(np.asarray(graph.constants[x_dq.inputs[1]]).reshape(-1)[0])
        b_scale = (x_scale * w_scale).astype(np.float32)
        b = np.asarray(graph.constants[bias], np.float32)
        bq = np.rint(b / b_scale).astype(np.int32)
        graph.constants[f"{name}/bias_q"] = bq
        parts.append(Node(f"{name}/bias_dq", "DequantizeLinear",
                          [f"{name}/bias_q", _constant(graph, f"{name}/bias_scale", b_scale)], [f"{name}/bias"],
                          {"axis": 0} if b_scale.size > 1 else {}))
        node.inputs[2] = f"{name}/bias"
    return parts


# Ops the QOperator format applies to 8-bit tensors directly (onnxruntime runs them on the
# integers): exact on dequantized values quantized back with the same scale and zero point. A
# linear Resize is not (it makes new values): see _integer_resize_form.
_INTEGER_MOVEMENT_OPS = frozenset({"Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze", "MaxPool", "Slice",
                                   "Gather", "Identity", "Resize"})


def _movement_qdq_form(node: Node, graph: Graph, producers: dict[str, Node]) -> list[Node] | None:
    """``node`` (a movement op on a QuantizeLinear's 8-bit output) as DQ -> node -> Q with that
    QuantizeLinear's constant scale and zero point, or None."""
    if node.op_type not in _INTEGER_MOVEMENT_OPS or node.domain not in ("", "ai.onnx") or len(node.outputs) != 1 \
            or not node.inputs:
        return None
    src = producers.get(node.inputs[0])
    if src is None or src.op_type != "QuantizeLinear" or len(src.inputs) < 3 or not src.inputs[2] \
            or not _const_operands(graph, src.inputs[1:3]) or np.size(graph.constants[src.inputs[1]]) != 1 \
            or np.size(graph.constants[src.inputs[2]]) != 1:
        return None
    scale, zp = src.inputs[1], src.inputs[2]
    if node.op_type == "Resize" and str(node.attrs.get("mode", "nearest")) == "linear":
        return _integer_resize_form(node, graph, np.asarray(graph.constants[zp]).dtype)
    x, y = f"{node.name}/x", f"{node.name}/y"
    return [Node(f"{node.name}/dequantize_x", "DequantizeLinear", [node.inputs[0], scale, zp], [x]),
            Node(node.name, node.op_type, [x] + node.inputs[1:], [y], dict(node.attrs), node.domain),
            Node(f"{node.name}/quantize", "QuantizeLinear", [y, scale, zp], [node.outputs[0]])]


def _integer_resize_form(node: Node, graph: Graph, int_type: np.dtype) -> list[Node]:
    """A linear Resize of an 8-bit tensor as onnxruntime computes it (its upsample kernel on 8-bit
    data): the float bilinear sum of the integers themselves (zero point included), converted back
    by C's cast, which truncates toward zero; not the round-half-even of DQ -> Resize -> Q, which
    lands one step away on a quarter of a 2x upsample's outputs. Floor is that truncation on
    uint8's non-negative sums; int8 takes ``Sign(y) * Floor(Abs(y))``. The sums stay exact
    integers and fractions in float32, and the paths' bilinear kernels add onnxruntime's four
    products in its order, so every path gets its integers."""
    name = node.name
    one = _constant(graph, f"{name}/unit_scale", np.float32(1))
    zero = _constant(graph, f"{name}/zero_point", np.zeros((), int_type))
    x, y, t = f"{name}/x", f"{name}/y", f"{name}/truncated"
    nodes = [Node(f"{name}/integers", "DequantizeLinear", [node.inputs[0], one, zero], [x]),
             Node(name, "Resize", [x] + node.inputs[1:], [y], dict(node.attrs), node.domain)]
    if int_type.kind == "u":
        nodes.append(Node(f"{name}/truncate", "Floor", [y], [t]))
    else:
        nodes += [Node(f"{name}/magnitude", "Abs", [y], [f"{name}/abs"]),
                  Node(f"{name}/floor", "Floor", [f"{name}/abs"], [f"{name}/floor_abs"]),
                  Node(f"{name}/sign", "Sign", [y], [f"{name}/sign"]),
                  Node(f"{name}/truncate", "Mul", [f"{name}/floor_abs", f"{name}/sign"], [t])]
    nodes.append(Node(f"{name}/quantize", "QuantizeLinear", [t, one, zero], [node.outputs[0]]))
    return nodes


def _const_operands(graph: Graph, names: list[str]) -> bool:
    return all(not n or n in graph.constants for n in names)


def _qdq_form(node: Node, graph: Graph) -> list[Node] | None:
    domain = "" if node.domain in ("", "ai.onnx") else node.domain
    key = (domain, node.op_type)
    name, ins = node.name, list(node.inputs)
    nodes: list[Node] = []

    def dq(x: str, scale: str, zp: str, tag: str, axis: int | None = None) -> str:
        out = f"{name}/{tag}"
        inputs = [x, scale] + ([zp] if zp else [])
        nodes.append(Node(f"{name}/dequantize_{tag}", "DequantizeLinear", inputs, [out],
                          {} if axis is None else {"axis": axis}))
        return out

    def q(x: str, scale: str, zp: str, like: str) -> None:
        if not zp:  # the output has the input's integer type
            dtype = graph.constants[like].dtype if like in graph.constants else graph.dtypes.get(like)
            if dtype is None:
                raise _NoForm
            zp = _constant(graph, f"{name}/y_zero_point", np.zeros((), dtype))
        nodes.append(Node(f"{name}/quantize", "QuantizeLinear", [x, scale, zp], [node.outputs[0]]))

    try:
        if key == ("", "QLinearConv"):
            ins += [""] * (9 - len(ins))
            if not _const_operands(graph, [ins[1], ins[2], ins[4], ins[5], ins[6], ins[7], ins[8]]):
                return None
            x = dq(ins[0], ins[1], ins[2], "x")
            w = dq(ins[3], ins[4], ins[5], "w", axis=0)
            conv_in = [x, w]
            if ins[8]:
                conv_in.append(dq(ins[8], _bias_scale(graph, name, ins[1], ins[4]), "", "b", axis=0))
            nodes.append(Node(f"{name}/conv", "Conv", conv_in, [f"{name}/y"], dict(node.attrs)))
            q(f"{name}/y", ins[6], ins[7], ins[0])
        elif key == (MS_DOMAIN, "QGemm"):
            ins += [""] * (9 - len(ins))
            if not _const_operands(graph, [ins[1], ins[2], ins[4], ins[5], ins[6], ins[7], ins[8]]):
                return None
            trans_b = int(node.attrs.get("transB", 0))
            a = dq(ins[0], ins[1], ins[2], "a")
            b = dq(ins[3], ins[4], ins[5], "b", axis=0 if trans_b else 1)
            gemm_in = [a, b]
            if ins[6]:
                gemm_in.append(dq(ins[6], _bias_scale(graph, name, ins[1], ins[4]), "", "c", axis=0))
            attrs = {k: node.attrs[k] for k in ("alpha", "transA", "transB") if k in node.attrs}
            if ins[7]:
                nodes.append(Node(f"{name}/gemm", "Gemm", gemm_in, [f"{name}/y"], attrs))
                q(f"{name}/y", ins[7], ins[8], ins[0])
            else:  # a float output
                nodes.append(Node(f"{name}/gemm", "Gemm", gemm_in, [node.outputs[0]], attrs))
        elif key == (MS_DOMAIN, "QLinearConcat"):
            triples = ins[2:]
            if len(triples) % 3 or not triples or not _const_operands(graph, [ins[0], ins[1]] + [
                    t for i, t in enumerate(triples) if i % 3]):
                return None
            parts = [dq(triples[i], triples[i + 1], triples[i + 2], f"x{i // 3}") for i in range(0, len(triples), 3)]
            nodes.append(Node(f"{name}/concat", "Concat", parts, [f"{name}/y"],
                              {"axis": int(node.attrs.get("axis", 0))}))
            q(f"{name}/y", ins[0], ins[1], triples[0])
        elif key in _QLINEAR_FLOAT_FORM:
            op, count = _QLINEAR_FLOAT_FORM[key]
            ins += [""] * (3 * count + 2 - len(ins))
            if not _const_operands(graph, [t for i, t in enumerate(ins) if i % 3 or i >= 3 * count]):
                return None
            attrs: dict = {}
            if op == "LeakyRelu":
                attrs = {"alpha": float(node.attrs.get("alpha", 0.01))}
            elif op == "GlobalAveragePool" and int(node.attrs.get("channels_last", 0)):
                return None
            elif op == "Softmax":
                if int(node.attrs.get("opset", 13)) < 13 and int(node.attrs.get("axis", -1)) != -1:
                    return None  # the opset-1 coercion to 2-D over the trailing axes
                attrs = {"axis": int(node.attrs.get("axis", -1))}
            xs = [dq(ins[3 * i], ins[3 * i + 1], ins[3 * i + 2], f"x{i}",
                     axis=(1 if op == "MatMul" and i == 1 and np.size(graph.constants[ins[4]]) > 1 else None))
                  for i in range(count)]
            nodes.append(Node(f"{name}/{op.lower()}", op, xs, [f"{name}/y"], attrs))
            q(f"{name}/y", ins[3 * count], ins[3 * count + 1], ins[0])
        else:
            return None
    except _NoForm:
        return None
    return nodes


class _NoForm(Exception):
    """A QOperator node without a QDQ form (its output type is not known)."""


def _bias_scale(graph: Graph, name: str, x_scale: str, w_scale: str) -> str:
    """The int32 bias's scale, ``x_scale * w_scale`` in float32 (per output channel or scalar)."""
    scale = np.float32(np.asarray(graph.constants[x_scale]).reshape(-1)[0]) * np.asarray(
        graph.constants[w_scale], np.float32).reshape(-1)
    return _constant(graph, f"{name}/bias_scale", scale if scale.size > 1 else scale.reshape(()))


def integer_sums(graph: Graph) -> list[str]:
    """The layers of ``graph`` in the integer form (:func:`requantize_in_integers`): their integer
    sums run far past 2048, the largest integer float16 holds exactly, so fp16 storage would
    round them before the multiplier (selfie's QDQ model came out 128-255 output steps off).
    8-bit activations themselves are exact in fp16."""
    return [n.name[:-len(REQUANTIZE_SUFFIX)] for n in graph.nodes if is_requantize(n)]


def is_requantize(node: Node) -> bool:
    """Whether ``node`` is the multiplier Mul of an integer-form Conv (which must not be folded
    into the Conv's weights)."""
    return node.op_type == "Mul" and node.name.endswith(REQUANTIZE_SUFFIX)


def _constant(graph: Graph, name: str, value: np.ndarray) -> str:
    graph.constants[name] = np.asarray(value)
    return name


def _like(graph: Graph, name: str, like: str) -> None:
    """``name`` is a float32 tensor of ``like``'s shape."""
    shape = graph.shape(like)
    if shape is not None:
        graph.shapes[name] = shape
    graph.dtypes[name] = np.dtype(np.float32)


__all__ = ["EXACT_FLOAT_INTEGER", "QUANT_TYPES", "DequantizedWeight", "QuantRecord", "integer_sums", "lower_qdq",
           "is_requantize", "note_dequantized", "output_channel_scale", "qoperators_as_qdq", "quantize_float_weights",
           "requantize_in_integers"]
