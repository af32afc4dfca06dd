"""The op layer: ONNX semantics resolved once, for every path.

``records`` lowers a graph node into a typed, frozen record (explicit pads, normalised axes,
resolved Resize modes, the fused activation, ...) and validates its attributes, raising
:class:`~gpubackend.errors.ModelError` naming the node, op and attribute. The GPU paths read
these records instead of ``node.attrs``; ``fallback/`` keeps its own parsing as the reference.
"""

from __future__ import annotations

from . import quant
from .quant import DequantizedWeight, QuantRecord
from .records import (
    Activation,
    ArgRecord,
    AxisRecord,
    CastRecord,
    ConvRecord,
    Decline,
    DepthSpaceRecord,
    GatherRecord,
    GemmRecord,
    GlobalPoolRecord,
    MatMulRecord,
    NormRecord,
    PadRecord,
    PoolRecord,
    Record,
    ReduceRecord,
    ReshapeRecord,
    ResizeRecord,
    SliceRecord,
    SplitRecord,
    TransposeRecord,
    activation,
    fused_residual,
    lower,
    node_signature,
    require,
    residual_into,
    silu_into,
    validate,
)

__all__ = ["Activation", "DequantizedWeight", "QuantRecord", "quant",
           "ArgRecord", "AxisRecord", "CastRecord", "ConvRecord", "Decline", "DepthSpaceRecord", "GatherRecord",
           "GemmRecord", "GlobalPoolRecord", "MatMulRecord", "NormRecord", "PadRecord", "PoolRecord", "Record",
           "ReduceRecord", "ReshapeRecord", "ResizeRecord", "SliceRecord", "SplitRecord", "TransposeRecord",
           "activation", "lower", "node_signature", "require", "validate", "silu_into", "residual_into",
           "fused_residual"]
