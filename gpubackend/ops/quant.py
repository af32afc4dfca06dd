"""Quantization semantics for the GPU paths, resolved once.

Two things live here:

- :class:`DequantizedWeight`: what constant folding learnt when it folded a DequantizeLinear of
  integer constants (a QDQ model's weights) into a float constant: the scale and its axis. The
  float constant stays the graph's value (the CPU path and every float kernel use it); a GPU
  kernel may instead keep the integers, four to a 32-bit word, and apply the scale per output
  channel (:func:`output_channel_scale`).
- :class:`QuantRecord`: a QuantizeLinear / DequantizeLinear node's parameters (constant scale and
  zero point, per tensor or per axis, the integer type's range).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ModelError
from ..graph import Graph, Node

# Integer types whose every value a float32 holds exactly (activations travel on the GPU as
# float32 or float16 holding the integer; float16 is exact for the 8-bit types only).
QUANT_TYPES = (np.dtype(np.int8), np.dtype(np.uint8), np.dtype(np.int16), np.dtype(np.uint16))


@dataclass(frozen=True)
class DequantizedWeight:
    """A constant equal to ``(q - zero_point) * scale`` for integers ``q``: ``scale`` is float32,
    a scalar (``axis`` None) or one value per index of ``axis`` of the constant."""

    scale: np.ndarray
    axis: int | None


def note_dequantized(graph: Graph, node: Node, operands: list[np.ndarray | None]) -> None:
    """Constant folding calls this for every DequantizeLinear it folds: remember the scale of a
    per-tensor or per-axis (not blocked) dequantisation of 8-bit integers."""
    if node.op_type != "DequantizeLinear" or len(operands) < 2 or operands[0] is None or operands[1] is None:
        return
    x, scale = np.asarray(operands[0]), np.asarray(operands[1])
    if x.dtype not in (np.dtype(np.int8), np.dtype(np.uint8)) or scale.dtype != np.float32:
        return
    if int(node.attrs.get("block_size", 0) or 0):
        return
    if scale.size == 1:
        axis = None
    else:
        axis = int(node.attrs.get("axis", 1))
        if not -x.ndim <= axis < x.ndim or scale.ndim != 1 or scale.shape[0] != x.shape[axis]:
            return
        axis %= x.ndim
    graph.dequantized[node.outputs[0]] = DequantizedWeight(scale.reshape(-1).copy(), axis)


def output_channel_scale(node: Node, graph: Graph, out_channels: int, group: int = 1) -> np.ndarray | str:
    """The dequantisation scale of ``node``'s weight (input 1) per output channel, or the reason
    there is none: the weight is not a folded DequantizeLinear of 8-bit integers, or its scale
    varies along another axis than the output channels. Conv weights are (co, ci/g, kh, kw),
    ConvTranspose (ci, co/g, kh, kw), MatMul's B (k, n), Gemm's B (k, n) or with transB (n, k);
    Gemm's alpha is folded into the scale."""
    name = node.inputs[1] if len(node.inputs) > 1 else ""
    dq = graph.dequantized.get(name)
    if dq is None:
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


__all__ = ["QUANT_TYPES", "DequantizedWeight", "QuantRecord", "lower_qdq", "note_dequantized",
           "output_channel_scale"]
