"""Canonical op records: each ONNX node lowered once into a frozen dataclass with its semantics
resolved (explicit pads after ``auto_pad`` / ``ceil_mode`` / ``output_padding``, normalised axes,
Resize modes and scales, the fused activation and its parameters), and its attributes validated.

``lower(node, graph)`` returns the record, or a string saying why it cannot be resolved
statically (a shape or a constant input is only known at run time: a path declines with it).
A bad attribute raises :class:`ModelError` naming the node, the op and the attribute.
Records are memoised per (node, attributes, input/output shapes, constant inputs) and keep no
reference to the graph or the node.

Pads and output sizes come from ``fallback._spatial`` (the reference computes them the same way),
so the GPU paths and the CPU reference share one definition.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpubackend.fallback._registry import FallbackError
from gpubackend.fallback._spatial import AUTO_PADS, geometry, transpose_geometry
from gpubackend.fallback.resize import axis_taps, border_linear_taps

from ..errors import ModelError
from ..graph import Graph, Node, Shape
from . import quant

INT32_MAX = 2**31 - 1  # every path passes geometry to shaders as 32-bit ints


# ---- attribute access with validation ------------------------------------------------------------
class _Attrs:
    """Typed, validated reads of one node's attributes."""

    def __init__(self, node: Node):
        self.node = node
        self.a = node.attrs

    def error(self, attr: str, msg: str) -> ModelError:
        return ModelError(f"node {self.node.name!r} ({self.node.op_type}): attribute {attr!r} {msg}")

    def has(self, name: str) -> bool:
        return self.a.get(name) is not None

    def _int_value(self, name: str, v: Any) -> int:
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
            raise self.error(name, f"must be an integer, got {v!r}")
        if not -INT32_MAX <= int(v) <= INT32_MAX:
            raise self.error(name, f"value {int(v)} does not fit in 32 bits")
        return int(v)

    def int(self, name: str, default: int, lo: int | None = None, hi: int | None = None) -> int:
        v = self.a.get(name)
        if v is None:
            return default
        if isinstance(v, np.ndarray) and v.ndim == 0:
            v = v.item()
        out = self._int_value(name, v)
        if (lo is not None and out < lo) or (hi is not None and out > hi):
            rng = f">= {lo}" if hi is None else f"in [{lo}, {hi}]" if lo is not None else f"<= {hi}"
            raise self.error(name, f"must be {rng}, got {out}")
        return out

    def ints(self, name: str, default: tuple[int, ...] | None, length: int | None = None,
             lo: int | None = None) -> tuple[int, ...] | None:
        v = self.a.get(name)
        if v is None:
            return default
        if isinstance(v, np.ndarray):
            if v.dtype.kind not in "iu":
                raise self.error(name, f"must be a list of integers, got {v.dtype} values")
            v = v.reshape(-1).tolist()
        if not isinstance(v, (list, tuple)):
            raise self.error(name, f"must be a list of integers, got {v!r}")
        out = tuple(self._int_value(name, e) for e in v)
        if length is not None and len(out) != length:
            raise self.error(name, f"must have {length} values, got {len(out)} ({list(out)})")
        if lo is not None and any(e < lo for e in out):
            raise self.error(name, f"values must be >= {lo}, got {list(out)}")
        return out

    def float(self, name: str, default: float) -> float:
        v = self.a.get(name)
        if v is None:
            return default
        if isinstance(v, np.ndarray) and v.ndim == 0:
            v = v.item()
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
            raise self.error(name, f"must be a number, got {v!r}")
        return float(v)

    def floats(self, name: str) -> tuple[float, ...] | None:
        v = self.a.get(name)
        if v is None:
            return None
        arr = np.asarray(v)
        if arr.dtype.kind not in "iuf":
            raise self.error(name, f"must be a list of numbers, got {v!r}")
        return tuple(float(e) for e in arr.reshape(-1))

    def str(self, name: str, default: str, choices: tuple[str, ...] | None = None) -> str:
        v = self.a.get(name, default)
        if isinstance(v, bytes):
            v = v.decode(errors="replace")
        if not isinstance(v, str):
            raise self.error(name, f"must be a string, got {v!r}")
        if choices is not None and v not in choices:
            raise self.error(name, f"must be one of {', '.join(choices)}, got {v!r}")
        return v


def _error(node: Node, msg: str) -> ModelError:
    return ModelError(f"node {node.name!r} ({node.op_type}): {msg}")


def _shape(graph: Graph, name: str) -> Shape | None:
    if not name:
        return None
    s = graph.shape(name)
    return None if s is None else tuple(int(d) for d in s)


def _input(node: Node, i: int) -> str:
    return node.inputs[i] if i < len(node.inputs) else ""


def _const(graph: Graph, node: Node, i: int) -> np.ndarray | None | str:
    """Constant input ``i``: its array, None when absent, or a reason when it arrives at run time."""
    name = _input(node, i)
    if not name:
        return None
    if name not in graph.constants:
        return f"input {i} ({name!r}) is not constant (it arrives at run time)"
    return np.asarray(graph.constants[name])


def _norm_axis(node: Node, attr: str, axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise _error(node, f"attribute {attr!r}: axis {axis} is out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


# ---- the fused activation ------------------------------------------------------------------------
@dataclass(frozen=True)
class Activation:
    """An activation (fused into its producer, or standing alone) with its parameters resolved."""

    op: str  # "Relu", "Clip", "LeakyRelu", "HardSigmoid", "HardSwish", "Sigmoid", "Tanh"
    alpha: float = 0.0
    beta: float = 0.0
    min: float = -math.inf
    max: float = math.inf
    # applied as a gate on the value, x * act(x): SiLU is a gated Sigmoid (see :func:`silu_into`)
    gate: bool = False

    @property
    def params(self) -> tuple[float, float]:
        """The two scalars a shader's ``activate()`` takes: Clip (min, max), LeakyRelu (alpha, 0),
        HardSigmoid (alpha, beta), (0, 0) otherwise."""
        if self.op == "Clip":
            return self.min, self.max
        if self.op == "LeakyRelu":
            return self.alpha, 0.0
        if self.op == "HardSigmoid":
            return self.alpha, self.beta
        return 0.0, 0.0

    @property
    def spec(self) -> tuple[str, dict[str, float]]:
        """The ``_act`` attribute form ``fallback`` reads: (op, params), ``gate`` 1 in the params
        of a gated one."""
        if self.op == "Clip":
            params = {"min": self.min, "max": self.max}
        elif self.op == "LeakyRelu":
            params = {"alpha": self.alpha}
        elif self.op == "HardSigmoid":
            params = {"alpha": self.alpha, "beta": self.beta}
        else:
            params = {}
        return self.op, {**params, "gate": 1} if self.gate else params

    @staticmethod
    def from_spec(spec: tuple[str, dict[str, float]] | None) -> Activation | None:
        if spec is None:
            return None
        op, p = spec
        defaults = {"LeakyRelu": {"alpha": 0.01}, "HardSigmoid": {"alpha": 0.2, "beta": 0.5}}.get(op, {})
        p = {**defaults, **p}
        return Activation(op, float(p.get("alpha", 0.0)), float(p.get("beta", 0.0)),
                          float(p.get("min", -math.inf)), float(p.get("max", math.inf)), bool(p.get("gate", 0)))


def activation(node: Node, graph: Graph) -> Activation | None:
    """The activation an activation node computes, or None when it is not one (or a Clip bound
    arrives at run time, so it cannot be fused)."""
    op, at = node.op_type, _Attrs(node)
    if op == "Clip":
        lo: float | None = None
        hi: float | None = None
        if graph.opset < 11:
            lo, hi = at.float("min", -math.inf), at.float("max", math.inf)
        else:
            for idx in (1, 2):
                v = _const(graph, node, idx)
                if isinstance(v, str):
                    return None
                if v is not None:
                    if v.size != 1:
                        raise _error(node, f"input {idx} (Clip bound) must be a scalar, got shape {v.shape}")
                    if idx == 1:
                        lo = float(v.reshape(-1)[0])
                    else:
                        hi = float(v.reshape(-1)[0])
        return Activation("Clip", min=-math.inf if lo is None else lo, max=math.inf if hi is None else hi)
    if op == "LeakyRelu":
        return Activation("LeakyRelu", alpha=at.float("alpha", 0.01))
    if op == "HardSigmoid":
        return Activation("HardSigmoid", alpha=at.float("alpha", 0.2), beta=at.float("beta", 0.5))
    if op in ("Relu", "HardSwish", "Sigmoid", "Tanh"):
        return Activation(op)
    return None


def silu_into(conv: Node, output: str) -> Node:
    """``conv`` (no fused activation of its own) writing ``output = y * Sigmoid(y)`` of its result
    ``y``: SiLU written as Sigmoid and Mul nodes after it (YOLOv8's conv blocks), fused by a path
    that found the pattern (``segment_services.fuse_silu``). Its record's activation is a gated
    Sigmoid."""
    if _fused(conv) is not None:
        raise ValueError(f"{conv.name} has a fused activation already")
    return Node(conv.name, conv.op_type, list(conv.inputs), [output],
                {**conv.attrs, "_act": Activation("Sigmoid", gate=True).spec}, conv.domain)


def residual_into(conv: Node, residual: str, output: str) -> Node:
    """``conv`` writing ``output = y + residual`` of its result ``y`` (after its fused activation, if
    any): a residual Add after a Conv, fused by a path that found the pattern
    (``segment_services.fuse_residual_adds``); ``residual`` has the output's shape. The tensor is
    named by the ``_residual`` attribute, which only that path's kernels read."""
    if fused_residual(conv) is not None:
        raise ValueError(f"{conv.name} adds a residual already")
    return Node(conv.name, conv.op_type, list(conv.inputs), [output], {**conv.attrs, "_residual": residual},
                conv.domain)


def fused_residual(node: Node) -> str | None:
    """The tensor a path fused into ``node`` as a residual Add (:func:`residual_into`), or None."""
    name = node.attrs.get("_residual")
    return name if isinstance(name, str) and name else None


def _fused(node: Node) -> Activation | None:
    spec = node.attrs.get("_act")
    try:
        return Activation.from_spec(spec)
    except (TypeError, ValueError) as exc:
        raise _error(node, f"fused activation {spec!r}: {exc}") from exc


# ---- records -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ConvRecord:
    """Conv / ConvTranspose. Pads are explicit whatever ``auto_pad`` / ``output_shape`` said;
    ``out_spatial`` is the output's spatial size (for ConvTranspose it includes ``output_padding``)."""

    op: str
    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    pads_begin: tuple[int, ...]
    pads_end: tuple[int, ...]
    output_padding: tuple[int, ...]  # ConvTranspose only (zeros for Conv)
    group: int
    in_channels: int
    out_channels: int
    in_spatial: tuple[int, ...]
    out_spatial: tuple[int, ...]
    act: Activation | None
    has_bias: bool

    @property
    def transpose(self) -> bool:
        return self.op == "ConvTranspose"

    @property
    def depthwise(self) -> bool:
        """One input channel per group, one output channel per input channel."""
        return not self.transpose and self.group > 1 and self.group == self.in_channels == self.out_channels

    @property
    def pads(self) -> tuple[int, ...]:
        """ONNX order: every begin, then every end."""
        return self.pads_begin + self.pads_end


@dataclass(frozen=True)
class PoolRecord:
    """MaxPool / AveragePool / LpPool with pads resolved; ``extra_end`` is the further padding
    ``ceil_mode`` windows read past the explicit end pad (never counted by count_include_pad)."""

    op: str
    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    pads_begin: tuple[int, ...]
    pads_end: tuple[int, ...]
    extra_end: tuple[int, ...]
    in_spatial: tuple[int, ...]
    out_spatial: tuple[int, ...]
    ceil_mode: bool
    count_include_pad: bool
    auto_pad: str
    p: int  # LpPool's norm (2 otherwise)
    with_indices: bool  # MaxPool asked for its Indices output

    @property
    def pads(self) -> tuple[int, ...]:
        return self.pads_begin + self.pads_end


@dataclass(frozen=True)
class GlobalPoolRecord:
    op: str
    is_max: bool


@dataclass(frozen=True)
class GemmRecord:
    trans_a: bool
    trans_b: bool
    alpha: float
    beta: float
    act: Activation | None


@dataclass(frozen=True)
class MatMulRecord:
    act: Activation | None


@dataclass(frozen=True)
class ResizeRecord:
    """Resize / Upsample: ``scales`` per axis of the input (sizes resolved to out / in), the output
    shape, and the modes. Before opset 11 (and for Upsample) the coordinate mode is "asymmetric"
    and nearest picks floor when upscaling, ceil when downscaling (onnxruntime's rule), resolved
    here to "floor" / "ceil" ("simple" remains only when axes mix both)."""

    op: str
    mode: str  # "nearest" | "linear" | "cubic"
    coordinate_mode: str
    nearest_mode: str
    cubic_coeff_a: float
    exclude_outside: bool
    extrapolation_value: float
    antialias: bool
    keep_aspect_ratio_policy: str
    axes: tuple[int, ...] | None
    scales: tuple[float, ...]
    out_shape: tuple[int, ...]

    def taps(self, axis: int, in_len: int) -> tuple[np.ndarray, np.ndarray | None]:
        """Source indices (clamped) and weights (None for nearest) per output index of ``axis``,
        from the reference's own coordinate arithmetic (kernels read them as tables). Linear
        taps take onnxruntime's form at the borders (the coordinate clamped first: weights 1 and 0
        at the start, 0.5 and 0.5 on one repeated pixel at the end): the same value, but the
        bilinear sum of a quantized model then rounds its ties as onnxruntime does."""
        idx, w = axis_taps(self.mode, self.nearest_mode, self.coordinate_mode, in_len, self.out_shape[axis],
                           self.scales[axis], None, self.cubic_coeff_a, self.exclude_outside, self.antialias)
        if self.mode == "linear" and not self.antialias and w is not None and w.shape[1] == 2 \
                and self.coordinate_mode != "tf_crop_and_resize":
            idx, w = border_linear_taps(idx, w, in_len)
        return idx, w


@dataclass(frozen=True)
class PadRecord:
    """Pad: ``pads`` in ONNX order (all begins, then all ends) over every axis."""

    mode: str
    pads: tuple[int, ...]
    value: float


@dataclass(frozen=True)
class AxisRecord:
    """One normalised axis: Concat, Softmax / LogSoftmax / Hardmax, Flatten, Gather(without indices)."""

    op: str
    axis: int
    rank: int


@dataclass(frozen=True)
class ReduceRecord:
    op: str
    axes: tuple[int, ...]  # normalised, sorted; every axis when none were given
    keepdims: bool
    noop: bool  # noop_with_empty_axes with no axes: the identity


@dataclass(frozen=True)
class ArgRecord:
    """ArgMax / ArgMin."""

    op: str
    axis: int  # normalised
    keepdims: bool
    select_last_index: bool


@dataclass(frozen=True)
class TransposeRecord:
    perm: tuple[int, ...]


@dataclass(frozen=True)
class SliceRecord:
    """Slice with starts/ends clamped per ONNX (so ``range(start, end, step)`` is the selection)."""

    starts: tuple[int, ...]
    ends: tuple[int, ...]
    axes: tuple[int, ...]
    steps: tuple[int, ...]


@dataclass(frozen=True)
class SplitRecord:
    axis: int
    sizes: tuple[int, ...]


@dataclass(frozen=True)
class GatherRecord:
    axis: int
    indices: tuple[int, ...] | None  # constant indices, normalised (None: run-time indices)
    indices_shape: tuple[int, ...] | None


@dataclass(frozen=True)
class ReshapeRecord:
    """Flatten / Squeeze / Unsqueeze / Reshape / Identity: the resolved shapes."""

    op: str
    in_shape: tuple[int, ...]
    out_shape: tuple[int, ...]


@dataclass(frozen=True)
class CastRecord:
    to: np.dtype


@dataclass(frozen=True)
class DepthSpaceRecord:
    op: str
    blocksize: int
    mode: str  # "DCR" | "CRD"


@dataclass(frozen=True)
class NormRecord:
    """BatchNormalization / InstanceNormalization / LayerNormalization."""

    op: str
    epsilon: float
    axis: int  # LayerNormalization's first normalised axis (normalised); 1 otherwise
    training: bool = False  # BatchNormalization's training_mode (opset 14+): the batch's own statistics


Record = (ConvRecord | PoolRecord | GlobalPoolRecord | GemmRecord | MatMulRecord | ResizeRecord | PadRecord
          | AxisRecord | ReduceRecord | ArgRecord | TransposeRecord | SliceRecord | SplitRecord | GatherRecord
          | ReshapeRecord | CastRecord | DepthSpaceRecord | NormRecord | quant.QuantRecord)


# ---- lowering ------------------------------------------------------------------------------------
def _spatial_attrs(node: Node, at: _Attrs, nsp: int, kernel: tuple[int, ...]) -> dict[str, Any]:
    """Validated kernel/strides/dilations/pads/auto_pad as a plain dict for ``fallback._spatial``."""
    strides = at.ints("strides", (1,) * nsp, nsp, lo=1)
    dilations = at.ints("dilations", (1,) * nsp, nsp, lo=1)
    pads = at.ints("pads", (0,) * (2 * nsp), 2 * nsp, lo=0)
    auto_pad = at.str("auto_pad", "NOTSET", AUTO_PADS)
    return {"kernel_shape": list(kernel), "strides": list(strides or ()), "dilations": list(dilations or ()),
            "pads": list(pads or ()), "auto_pad": auto_pad}


def _geometry_error(node: Node, exc: FallbackError) -> ModelError:
    msg = str(exc).split(": ", 1)[-1]
    return _error(node, f"attributes 'kernel_shape'/'strides'/'dilations'/'pads' do not fit the input: {msg}")


def _conv(node: Node, graph: Graph) -> ConvRecord | str:
    at = _Attrs(node)
    op = node.op_type
    transpose = op == "ConvTranspose"
    group = at.int("group", 1, lo=1)
    at.str("auto_pad", "NOTSET", AUTO_PADS)
    xs, ws = _shape(graph, _input(node, 0)), _shape(graph, _input(node, 1))
    if ws is None:  # the attributes alone are still checked
        ks = at.ints("kernel_shape", None, lo=1)
        nsp = len(ks) if ks is not None else None
        at.ints("strides", None, nsp, lo=1)
        at.ints("dilations", None, nsp, lo=1)
        at.ints("pads", None, None if nsp is None else 2 * nsp, lo=0)
        return "the weight's shape is not known statically"
    if len(ws) < 3:
        raise _error(node, f"weight of shape {ws}: expected (M, C/group, k...) with at least one spatial axis")
    nsp = len(ws) - 2
    kernel = tuple(ws[2:])
    ks = at.ints("kernel_shape", None, nsp, lo=1)
    if ks is not None and ks != kernel:
        raise at.error("kernel_shape", f"{list(ks)} does not match the weight's spatial shape {list(kernel)}")
    attrs = _spatial_attrs(node, at, nsp, kernel)
    if xs is None:
        return "the input's shape is not known statically"
    if len(xs) != len(ws):
        raise _error(node, f"input rank {len(xs)} does not match weight rank {len(ws)}")
    c = xs[1]
    if c % group:
        raise at.error("group", f"{group} does not divide the {c} input channels")
    if transpose:
        if ws[0] != c:
            raise _error(node, f"weight of shape {ws} does not match {c} input channels")
        m = ws[1] * group
    else:
        m = ws[0]
        if ws[1] * group != c:
            raise _error(node, f"weight of shape {ws} with group {group} does not match {c} input channels")
        if m % group:
            raise at.error("group", f"{group} does not divide the {m} output channels")
    bias = _shape(graph, _input(node, 2))
    if bias is not None and bias != (m,):
        raise _error(node, f"bias of shape {bias} does not match {m} output channels")
    if transpose:
        attrs["output_padding"] = list(at.ints("output_padding", (0,) * nsp, nsp, lo=0) or ())
        for i, (op_, s, d) in enumerate(zip(attrs["output_padding"], attrs["strides"], attrs["dilations"])):
            if op_ >= max(s, d):
                raise at.error("output_padding", f"{attrs['output_padding']} must be smaller than the stride or "
                                                 f"dilation on axis {i}")
        out_shape = at.ints("output_shape", None, lo=1)
        if out_shape is not None:
            if len(out_shape) == nsp + 2:
                out_shape = out_shape[2:]
            if len(out_shape) != nsp:
                raise at.error("output_shape", f"{list(out_shape)} does not have {nsp} spatial values")
            attrs["output_shape"] = list(out_shape)
        try:
            _, _, opad, pb, pe, out = transpose_geometry(op, xs[2:], attrs, list(kernel))
        except FallbackError as exc:
            raise _geometry_error(node, exc) from exc
    else:
        try:
            g = geometry(op, xs[2:], attrs, list(kernel))
        except FallbackError as exc:
            raise _geometry_error(node, exc) from exc
        opad, pb, pe, out = [0] * nsp, g.pad_begin, g.pad_end, g.out
    # (ConvTranspose's resolved pads may be negative: an output_shape larger than the full output)
    extent = list(out) if transpose else [n + b + e for n, b, e in zip(xs[2:], pb, pe)] + list(out)
    if max(extent) > INT32_MAX:
        raise at.error("pads", f"{attrs['pads']} give a padded size of {extent}, beyond 32 bits")
    ys = _shape(graph, node.outputs[0]) if node.outputs else None
    if ys is not None and (len(ys) != len(xs) or tuple(ys[2:]) != tuple(out) or ys[1] != m):
        return f"the graph's output shape {ys} does not match the attributes' {(xs[0], m, *out)}"
    return ConvRecord(op, kernel, tuple(attrs["strides"]), tuple(attrs["dilations"]), tuple(pb), tuple(pe),
                      tuple(opad), group, c, m, tuple(xs[2:]), tuple(out), _fused(node), bias is not None)


def _pool(node: Node, graph: Graph) -> PoolRecord | str:
    at = _Attrs(node)
    op = node.op_type
    kernel = at.ints("kernel_shape", None, lo=1)
    if kernel is None:
        raise at.error("kernel_shape", "is required")
    nsp = len(kernel)
    attrs = _spatial_attrs(node, at, nsp, kernel)
    ceil_mode = bool(at.int("ceil_mode", 0, 0, 1))
    include_pad = bool(at.int("count_include_pad", 0, 0, 1))
    at.int("storage_order", 0, 0, 1)
    p = at.int("p", 2, lo=1) if op == "LpPool" else 2
    xs = _shape(graph, _input(node, 0))
    if xs is None:
        return "the input's shape is not known statically"
    if len(xs) != nsp + 2:
        raise at.error("kernel_shape", f"{list(kernel)} does not match an input of rank {len(xs)}")
    try:
        g = geometry(op, xs[2:], attrs, None, ceil_mode)
    except FallbackError as exc:
        raise _geometry_error(node, exc) from exc
    return PoolRecord(op, tuple(kernel), tuple(g.strides), tuple(g.dilations), tuple(g.pad_begin), tuple(g.pad_end),
                      tuple(g.extra_end), tuple(xs[2:]), tuple(g.out), ceil_mode, include_pad, attrs["auto_pad"], p,
                      len([o for o in node.outputs if o]) > 1)


def _gemm(node: Node, graph: Graph) -> GemmRecord:
    at = _Attrs(node)
    return GemmRecord(bool(at.int("transA", 0, 0, 1)), bool(at.int("transB", 0, 0, 1)), at.float("alpha", 1.0),
                      at.float("beta", 1.0), _fused(node))


_COORD_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
                "tf_half_pixel_for_nn", "tf_crop_and_resize")
_NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def _resize(node: Node, graph: Graph) -> ResizeRecord | str:
    at = _Attrs(node)
    op = node.op_type
    mode = at.str("mode", "nearest", ("nearest", "linear", "bilinear", "cubic"))
    mode = "linear" if mode == "bilinear" else mode
    xs = _shape(graph, _input(node, 0))
    if xs is None:
        return "the input's shape is not known statically"
    legacy = op == "Upsample" or graph.opset < 11
    axes = None
    scales: tuple[float, ...] | None = None
    sizes: tuple[int, ...] | None = None
    if legacy:
        coord, nearest = "asymmetric", "simple"
        cubic_a, exclude, extrap, antialias, policy = -0.75, False, 0.0, False, "stretch"
        scales = at.floats("scales")
        if scales is None and at.has("height_scale"):
            scales = (1.0, 1.0, at.float("height_scale", 1.0), at.float("width_scale", 1.0))
        if scales is None:
            v = _const(graph, node, 1)
            if isinstance(v, str):
                return f"scales: {v}"
            if v is None:
                raise at.error("scales", "is required")
            scales = tuple(float(e) for e in v.reshape(-1))
    else:
        coord = at.str("coordinate_transformation_mode", "half_pixel", _COORD_MODES)
        nearest = at.str("nearest_mode", "round_prefer_floor", _NEAREST_MODES)
        cubic_a = at.float("cubic_coeff_a", -0.75)
        exclude = bool(at.int("exclude_outside", 0, 0, 1))
        extrap = at.float("extrapolation_value", 0.0)
        antialias = bool(at.int("antialias", 0, 0, 1))
        policy = at.str("keep_aspect_ratio_policy", "stretch", ("stretch", "not_larger", "not_smaller"))
        ax = at.ints("axes", None)
        if ax is not None:
            axes = tuple(_norm_axis(node, "axes", a, len(xs)) for a in ax)
        for idx in (2, 3):
            v = _const(graph, node, idx)
            if isinstance(v, str) and idx == 3 and node.outputs and _shape(graph, node.outputs[0]) is not None:
                continue  # run-time sizes: the static output shape says the same (scales = out / in)
            if isinstance(v, str):
                return f"{'scales' if idx == 2 else 'sizes'}: {v}"
            if v is not None and v.size:
                if idx == 2:
                    scales = tuple(float(e) for e in v.reshape(-1))
                else:
                    sizes = tuple(int(e) for e in v.reshape(-1))
    n_ax = len(axes) if axes is not None else len(xs)
    ys = _shape(graph, node.outputs[0]) if node.outputs else None
    if scales is not None:
        if len(scales) != n_ax:
            raise _error(node, f"scales {list(scales)} must have {n_ax} values")
        if any(not 0 < s < math.inf for s in scales):
            raise _error(node, f"scales {list(scales)} must be positive and finite")
    full = list(range(len(xs))) if axes is None else list(axes)
    if scales is None and sizes is None:
        if ys is None:
            raise _error(node, "one of scales or sizes is required")
        sizes = tuple(ys[a] for a in full)
    if ys is None:
        return "the output's shape is not known statically"
    if scales is None:
        if len(sizes or ()) != n_ax:
            raise _error(node, f"sizes {list(sizes or ())} must have {n_ax} values")
        per_axis = [1.0] * len(xs)
        for a in full:
            per_axis[a] = ys[a] / xs[a]
    else:
        per_axis = [1.0] * len(xs)
        for a, s in zip(full, scales):
            per_axis[a] = s
    if nearest == "simple":
        spatial = [s for a, s in enumerate(per_axis) if xs[a] != ys[a] or s != 1]
        if all(s >= 1 for s in spatial):
            nearest = "floor"
        elif all(s < 1 for s in spatial):
            nearest = "ceil"
    return ResizeRecord(op, mode, coord, nearest, cubic_a, exclude, extrap, antialias, policy, axes,
                        tuple(per_axis), tuple(ys))


def _pad(node: Node, graph: Graph) -> PadRecord | str:
    at = _Attrs(node)
    mode = at.str("mode", "constant", ("constant", "reflect", "edge", "wrap"))
    xs = _shape(graph, _input(node, 0))
    if graph.opset >= 11:
        pv = _const(graph, node, 1)
        if isinstance(pv, str):
            return f"pads: {pv}"
        if pv is None:
            raise _error(node, "input 1 (pads) is required")
        if pv.dtype.kind not in "iu":
            raise _error(node, f"input 1 (pads) must be integers, got {pv.dtype}")
        pads = tuple(int(v) for v in pv.reshape(-1))
        cv = _const(graph, node, 2)
        if isinstance(cv, str):
            return f"constant_value: {cv}"
        value = 0.0 if cv is None or cv.size == 0 else float(cv.reshape(-1)[0])
        av = _const(graph, node, 3)
        if isinstance(av, str):
            return f"axes: {av}"
        axes = None if av is None else [int(v) for v in av.reshape(-1)]
    else:
        pads = at.ints("pads", None) or ()
        if not at.has("pads"):
            raise at.error("pads", "is required")
        value = at.float("value", 0.0)
        axes = None
    if xs is None:
        return "the input's shape is not known statically"
    r = len(xs)
    if axes is not None:
        axes = [_norm_axis(node, "axes", a, r) for a in axes]
        if len(pads) != 2 * len(axes):
            raise _error(node, f"pads {list(pads)} must have {2 * len(axes)} values for axes {axes}")
        full = [0] * (2 * r)
        for i, a in enumerate(axes):
            full[a], full[a + r] = pads[i], pads[i + len(axes)]
        pads = tuple(full)
    if len(pads) != 2 * r:
        raise _error(node, f"pads {list(pads)} must have {2 * r} values for a rank {r} input")
    if any(abs(p) > INT32_MAX for p in pads):
        raise _error(node, f"pads {list(pads)} do not fit in 32 bits")
    for i in range(r):
        if xs[i] + pads[i] + pads[i + r] < 0:
            raise _error(node, f"pads {list(pads)} remove more than the {xs[i]} elements of axis {i}")
    return PadRecord(mode, pads, value)


def _axis(node: Node, graph: Graph) -> AxisRecord | str:
    at = _Attrs(node)
    op = node.op_type
    name = node.outputs[0] if op == "Concat" else _input(node, 0)
    s = _shape(graph, name) if name else None
    if s is None:
        return "the shape is not known statically"
    r = len(s)
    if op in ("Softmax", "LogSoftmax", "Hardmax"):
        default = -1 if graph.opset >= 13 else 1
    elif op == "Flatten":
        default = 1
        axis = at.int("axis", default)
        if not -r <= axis <= r:
            raise at.error("axis", f"{axis} is out of range for rank {r}")
        return AxisRecord(op, axis + r if axis < 0 else axis, r)
    else:
        default = 0
        if op == "Concat" and not at.has("axis"):
            raise at.error("axis", "is required")
    return AxisRecord(op, _norm_axis(node, "axis", at.int("axis", default), max(r, 1)), r)


def _reduce(node: Node, graph: Graph) -> ReduceRecord | str:
    at = _Attrs(node)
    keep = bool(at.int("keepdims", 1, 0, 1))
    noop_empty = bool(at.int("noop_with_empty_axes", 0, 0, 1))
    xs = _shape(graph, _input(node, 0))
    axes = at.ints("axes", None)
    if axes is None and _input(node, 1):
        v = _const(graph, node, 1)
        if isinstance(v, str):
            return f"axes: {v}"
        axes = tuple(int(e) for e in v.reshape(-1)) if v is not None else None
    if xs is None:
        return "the input's shape is not known statically"
    r = len(xs)
    if not axes:
        return ReduceRecord(node.op_type, () if noop_empty else tuple(range(r)), keep, noop_empty)
    norm = tuple(sorted({_norm_axis(node, "axes", a, r) for a in axes}))
    if len(norm) != len(axes):
        raise at.error("axes", f"{list(axes)} names an axis twice")
    return ReduceRecord(node.op_type, norm, keep, False)


def _arg(node: Node, graph: Graph) -> ArgRecord | str:
    at = _Attrs(node)
    xs = _shape(graph, _input(node, 0))
    if xs is None:
        return "the input's shape is not known statically"
    axis = _norm_axis(node, "axis", at.int("axis", 0), max(len(xs), 1))
    return ArgRecord(node.op_type, axis, bool(at.int("keepdims", 1, 0, 1)), bool(at.int("select_last_index", 0, 0, 1)))


def _transpose(node: Node, graph: Graph) -> TransposeRecord | str:
    at = _Attrs(node)
    xs = _shape(graph, _input(node, 0))
    perm = at.ints("perm", None)
    if xs is None:
        if perm is None:
            return "the input's shape is not known statically"
        r = len(perm)
    else:
        r = len(xs)
    if perm is None:
        perm = tuple(range(r))[::-1]
    if sorted(perm) != list(range(r)):
        raise at.error("perm", f"{list(perm)} is not a permutation of the {r} axes")
    return TransposeRecord(tuple(perm))


def _slice(node: Node, graph: Graph) -> SliceRecord | str:
    at = _Attrs(node)
    xs = _shape(graph, _input(node, 0))
    if graph.opset < 10:
        starts, ends = at.ints("starts", None), at.ints("ends", None)
        axes, steps = at.ints("axes", None), None
        if starts is None or ends is None:
            raise at.error("starts" if starts is None else "ends", "is required")
    else:
        vals = []
        for idx in (1, 2, 3, 4):
            v = _const(graph, node, idx)
            if isinstance(v, str):
                return v
            vals.append(None if v is None else tuple(int(e) for e in v.reshape(-1)))
        starts, ends, axes, steps = vals
        if starts is None or ends is None:
            raise _error(node, "inputs starts and ends are required")
    if xs is None:
        return "the input's shape is not known statically"
    r = len(xs)
    axes = tuple(range(len(starts))) if axes is None else axes
    steps = (1,) * len(starts) if steps is None else steps
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise _error(node, f"starts {starts}, ends {ends}, axes {axes} and steps {steps} differ in length")
    out_s, out_e, out_a = [], [], []
    for s, e, a, st in zip(starts, ends, axes, steps):
        a = _norm_axis(node, "axes", a, r)
        if st == 0:
            raise _error(node, f"steps {list(steps)}: a step is 0")
        n = xs[a]
        s = s + n if s < 0 else s
        e = e + n if e < 0 else e
        if st > 0:
            s, e = min(max(s, 0), n), min(max(e, 0), n)
        else:
            s, e = min(max(s, -1), n - 1), min(max(e, -1), n - 1)
        out_s.append(s)
        out_e.append(e)
        out_a.append(a)
    if len(set(out_a)) != len(out_a):
        raise _error(node, f"axes {list(axes)} name an axis twice")
    return SliceRecord(tuple(out_s), tuple(out_e), tuple(out_a), tuple(steps))


def _split(node: Node, graph: Graph) -> SplitRecord | str:
    at = _Attrs(node)
    xs = _shape(graph, _input(node, 0))
    sizes = at.ints("split", None, lo=0)
    if sizes is None and _input(node, 1):
        v = _const(graph, node, 1)
        if isinstance(v, str):
            return f"split: {v}"
        sizes = tuple(int(e) for e in v.reshape(-1)) if v is not None else None
    if xs is None:
        return "the input's shape is not known statically"
    axis = _norm_axis(node, "axis", at.int("axis", 0), len(xs))
    n_out = len(node.outputs)
    if sizes is None:
        parts = at.int("num_outputs", n_out, lo=1)
        chunk = -(-xs[axis] // parts)
        sizes = tuple(min(chunk, max(0, xs[axis] - i * chunk)) for i in range(parts))
    if sum(sizes) != xs[axis] or any(s < 0 for s in sizes):
        raise _error(node, f"split sizes {list(sizes)} do not add up to the {xs[axis]} elements of axis {axis}")
    return SplitRecord(axis, tuple(sizes))


def _gather(node: Node, graph: Graph) -> GatherRecord | str:
    at = _Attrs(node)
    xs = _shape(graph, _input(node, 0))
    if xs is None:
        return "the input's shape is not known statically"
    axis = _norm_axis(node, "axis", at.int("axis", 0), len(xs))
    v = _const(graph, node, 1)
    if v is None:
        raise _error(node, "input 1 (indices) is required")
    if isinstance(v, str):
        return GatherRecord(axis, None, _shape(graph, _input(node, 1)))
    idx = v.reshape(-1).astype(np.int64)
    n = xs[axis]
    if idx.size and (idx.min() < -n or idx.max() >= n):
        raise _error(node, f"indices out of range for axis {axis} of size {n}")
    return GatherRecord(axis, tuple(int(i) + n if i < 0 else int(i) for i in idx), tuple(v.shape))


def _reshape(node: Node, graph: Graph) -> ReshapeRecord | str:
    xs = _shape(graph, _input(node, 0))
    ys = _shape(graph, node.outputs[0]) if node.outputs else None
    if xs is None or ys is None:
        return "the shape is not known statically"
    if math.prod(xs) != math.prod(ys):
        raise _error(node, f"cannot reshape {xs} to {ys}")
    return ReshapeRecord(node.op_type, xs, ys)


def _cast(node: Node, graph: Graph) -> CastRecord:
    at = _Attrs(node)
    to = at.int("to", -1)
    try:
        from onnx import helper

        return CastRecord(np.dtype(helper.tensor_dtype_to_np_dtype(to)))
    except (KeyError, TypeError, ValueError) as exc:
        raise at.error("to", f"{to} is not a known tensor type") from exc


def _depth_space(node: Node, graph: Graph) -> DepthSpaceRecord:
    at = _Attrs(node)
    bs = at.int("blocksize", 0, lo=1)
    if not at.has("blocksize"):
        raise at.error("blocksize", "is required")
    mode = at.str("mode", "DCR", ("DCR", "CRD"))  # SpaceToDepth has a mode since opset 28
    return DepthSpaceRecord(node.op_type, bs, mode)


def _norm(node: Node, graph: Graph) -> NormRecord:
    at = _Attrs(node)
    eps = at.float("epsilon", 1e-5)
    if not eps >= 0:
        raise at.error("epsilon", f"must be >= 0, got {eps}")
    axis = 1
    if node.op_type == "LayerNormalization":
        xs = _shape(graph, _input(node, 0))
        axis = at.int("axis", -1)
        if xs is not None:
            axis = _norm_axis(node, "axis", axis, len(xs))
    training = node.op_type == "BatchNormalization" and graph.opset >= 14 and bool(at.int("training_mode", 0, 0, 1))
    return NormRecord(node.op_type, eps, axis, training)


_LOWER = {
    "Conv": _conv, "ConvTranspose": _conv,
    "MaxPool": _pool, "AveragePool": _pool, "LpPool": _pool,
    "GlobalAveragePool": lambda n, g: GlobalPoolRecord(n.op_type, False),
    "GlobalMaxPool": lambda n, g: GlobalPoolRecord(n.op_type, True),
    "GlobalLpPool": lambda n, g: GlobalPoolRecord(n.op_type, False),
    "Gemm": _gemm, "MatMul": lambda n, g: MatMulRecord(_fused(n)),
    "Resize": _resize, "Upsample": _resize,
    "Pad": _pad,
    "Concat": _axis, "Softmax": _axis, "LogSoftmax": _axis, "Hardmax": _axis, "Flatten": _axis,
    **{op: _reduce for op in ("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
                              "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare")},
    "ArgMax": _arg, "ArgMin": _arg,
    "Transpose": _transpose,
    "Slice": _slice, "Split": _split, "Gather": _gather,
    "Squeeze": _reshape, "Unsqueeze": _reshape, "Reshape": _reshape,
    "Cast": _cast,
    "DepthToSpace": _depth_space, "SpaceToDepth": _depth_space,
    "BatchNormalization": _norm, "InstanceNormalization": _norm, "LayerNormalization": _norm,
    "QuantizeLinear": quant.lower_qdq, "DequantizeLinear": quant.lower_qdq,
}

# id(node) -> {(attributes, opset, shapes, constant identities): record or reason}; a node's entries
# leave with it (weakref.finalize), so nothing here keeps a graph alive.
_MEMO: dict[int, dict[tuple, Record | str]] = {}


def node_signature(node: Node, graph: Graph) -> tuple:
    """What a node's lowering (and any kernel generated from it) depends on besides the node's
    identity: attributes by value, op type, opset, input/output shapes, constant inputs' identities."""
    names = list(node.inputs) + list(node.outputs)
    # the attributes by value: a caller may change a node's attrs dict in place
    return (repr(node.attrs), node.op_type, graph.opset,
            tuple(_shape(graph, n) if n else None for n in names),
            tuple(id(graph.constants.get(n)) if n in graph.constants else 0 for n in node.inputs))


class Decline(Exception):  # noqa: N818 - declining is control flow, not an error
    """A path's kernel generator cannot run this node; the message is the reason. Every path's
    generators raise this one type, and its planner-facing ``decline()`` turns it into the reason."""


def require(node: Node, graph: Graph, kind: type[Record]) -> Record:
    """The record of ``node`` as a ``kind``; raises :class:`Decline` when its semantics cannot be
    resolved statically or the op has no such record."""
    rec = lower(node, graph)
    if isinstance(rec, str):
        raise Decline(rec)
    if not isinstance(rec, kind):
        raise Decline(f"no {kind.__name__} for {node.op_type}")
    return rec


def lower(node: Node, graph: Graph) -> Record | str | None:
    """The record of ``node`` (None: an op without one, e.g. elementwise), or the reason its
    semantics cannot be resolved statically. Raises ModelError for a bad attribute."""
    fn = _LOWER.get(node.op_type)
    if fn is None or node.domain not in ("", "ai.onnx"):
        return None
    per_node = _MEMO.get(id(node))
    if per_node is None:
        per_node = _MEMO[id(node)] = {}
        weakref.finalize(node, _MEMO.pop, id(node), None)
    key = node_signature(node, graph)
    rec = per_node.get(key)
    if rec is None:
        rec = per_node[key] = fn(node, graph)
    return rec


def validate(node: Node, graph: Graph) -> None:
    """Raise ModelError if ``node`` has a bad attribute (the planner calls this for every node)."""
    lower(node, graph)
