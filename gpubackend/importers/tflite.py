"""TFLite flatbuffer -> in-memory ONNX ModelProto (opset 17, fp32), handed to the normal loader.

Layout. TFLite is NHWC; the ONNX spatial operators are NCHW. Every rank-4 activation is kept in
NCHW inside the graph: weights are permuted once at import (OHWI -> OIHW for CONV_2D, 1HWO ->
O1HW with ``group = C`` for DEPTHWISE_CONV_2D, OHWI -> IOHW for transposed convolutions) and
per-channel constants are broadcast as ``(1, C, 1, 1)``. A Transpose is emitted only where the
NHWC element order matters (graph inputs and outputs, RESHAPE, FULLY_CONNECTED, STRIDED_SLICE and
friends), so the model keeps TFLite's own interface: inputs and outputs have TFLite's names,
shapes and NHWC layout, and the same feeds work for both runtimes.

Padding. TFLite SAME is turned into explicit pads computed the way TFLite does:
``total = max((out - 1) * stride + (k - 1) * dilation + 1 - in, 0)``, ``before = total // 2``.

Constants. fp16 weights behind DEQUANTIZE and int8/uint8 quantized weights (per-tensor and
per-axis scale / zero point) are dequantised to fp32 at import; sparse weights behind DENSIFY are
densified.

Quantized activations (full-integer models) become ONNX QDQ: every op is computed in float on
dequantized values, and each int8/uint8 tensor it writes goes through QuantizeLinear then
DequantizeLinear with that tensor's scale and zero point, so every activation lies on TFLite's
grid (TFLite's integer kernels requantize with fixed-point multipliers instead: results agree
within one output step). Quantized graph inputs and outputs keep their integer type.

Resource variables (streaming models: VAR_HANDLE, READ_VARIABLE, ASSIGN_VARIABLE, CALL_ONCE)
become explicit state: each variable is a graph input named after it and a graph output
``<name>/next`` holding the value assigned during the run; :func:`tflite_initial_state` gives the
values CALL_ONCE resets them to. Feeding each run the previous run's ``/next`` outputs reproduces
the interpreter's successive invocations.
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ..errors import ModelError
from ..model import TFLITE_IMPORTER

log = logging.getLogger(__name__)

TFLITE_MAGIC = b"TFL3"
OPSET = 17

# TFLite tensor types (tflite.TensorType) that can hold constants we read.
_NP_TYPES = {0: np.float32, 1: np.float16, 2: np.int32, 3: np.uint8, 4: np.int64, 9: np.int8, 7: np.int16}
_ONNX_TYPES = {0: TensorProto.FLOAT, 2: TensorProto.INT32, 4: TensorProto.INT64, 9: TensorProto.INT8,
               3: TensorProto.UINT8}
_QUANTIZED = (9, 3)  # int8, uint8 activations (QuantizeLinear at opset 17 has no int16)
# tflite.Padding (builtin ops) and TfLitePadding (MediaPipe custom op params) number differently.
_SAME, _VALID = 0, 1
_CUSTOM_SAME, _CUSTOM_VALID = 1, 2
# NHWC axis -> position of that axis in NCHW.
_NHWC_TO_NCHW_AXIS = (0, 2, 3, 1)
_TO_NCHW, _TO_NHWC = (0, 3, 1, 2), (0, 2, 3, 1)


def _tflite_module() -> Any:
    try:
        import tflite
    except ImportError as exc:  # depends on the installation
        raise ModelError("reading .tflite models needs the 'tflite' package: "
                         "pip install 'gpubackend[convert]'") from exc
    return tflite


def _same_pads(in_size: int, k: int, stride: int, dilation: int = 1) -> tuple[int, int]:
    out = (in_size + stride - 1) // stride
    total = max((out - 1) * stride + (k - 1) * dilation + 1 - in_size, 0)
    return total // 2, total - total // 2


def _io_shape(shape: tuple[int, ...], nchw: bool) -> list[int]:
    return [shape[i] for i in _TO_NCHW] if nchw else list(shape)


class _Value:
    """One TFLite tensor as the ONNX graph holds it: its name, and whether it is stored NCHW."""

    __slots__ = ("name", "nchw")

    def __init__(self, name: str, nchw: bool) -> None:
        self.name = name
        self.nchw = nchw


class _Importer:
    def __init__(self, data: bytes, source: str, layout: str = "nhwc") -> None:
        if layout not in ("nhwc", "nchw"):
            raise ModelError(f"layout must be 'nhwc' or 'nchw', not {layout!r}")
        self.io_nchw = layout == "nchw"
        self.tfl = _tflite_module()
        self.source = source
        try:
            self.model = self.tfl.Model.GetRootAsModel(data, 0)
            n_sub = self.model.SubgraphsLength()
        except Exception as exc:
            raise ModelError(f"{source}: cannot parse the TFLite flatbuffer: {exc}") from exc
        if n_sub < 1:
            raise ModelError(f"{source}: the TFLite model has no subgraph")
        # Models with several subgraphs (control flow) run subgraph 0; its ops would need WHILE/IF.
        self.g = self.model.Subgraphs(0)
        self.op_names = {v: k for k, v in vars(self.tfl.BuiltinOperator).items() if not k.startswith("_")}
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[TensorProto] = []
        self.values: dict[int, _Value] = {}
        self.consts: dict[int, np.ndarray] = {}
        self._used: set[str] = set()
        self._transposed: dict[tuple[str, bool], str] = {}
        self.op_label = ""
        # nodes that follow the producer of a name: its fused activation, its Quantize/Dequantize pair
        self._pending_after: dict[str, list[onnx.NodeProto]] = {}
        self._qparams: dict[int, tuple[str, str]] = {}
        self.graph_outputs: dict[int, str] = {}  # tensor index -> reserved graph output name
        self.resources: dict[int, str] = {}  # VAR_HANDLE output tensor -> variable name
        self.state_inputs: list[onnx.ValueInfoProto] = []
        self.state_outputs: list[onnx.ValueInfoProto] = []
        self.initial_state: dict[str, np.ndarray] = {}  # state input name -> value CALL_ONCE assigns
        self._state_names: dict[str, str] = {}  # variable name -> state input name
        self._init_values: dict[str, np.ndarray] = {}  # variable name -> value CALL_ONCE assigns

    # -- names, constants, layouts -----------------------------------------------------------
    def unique(self, name: str) -> str:
        base = "".join(c if c.isalnum() or c in "_/.-" else "_" for c in name) or "t"
        out, i = base, 1
        while out in self._used:
            i += 1
            out = f"{base}_{i}"
        self._used.add(out)
        return out

    def error(self, message: str) -> ModelError:
        return ModelError(f"{self.source}: {self.op_label}: {message}")

    def tensor(self, idx: int) -> Any:
        return self.g.Tensors(idx)

    def tname(self, idx: int) -> str:
        return self.tensor(idx).Name().decode("utf-8", "replace")

    def shape(self, idx: int) -> tuple[int, ...]:
        t = self.tensor(idx)
        return tuple(int(s) for s in t.ShapeAsNumpy()) if t.ShapeLength() else ()

    def is_const(self, idx: int) -> bool:
        return idx in self.consts or self._buffer(idx) is not None

    def _buffer(self, idx: int) -> np.ndarray | None:
        t = self.tensor(idx)
        buf = self.model.Buffers(t.Buffer())
        if buf is None or buf.DataLength() == 0:
            return None
        if t.Type() not in _NP_TYPES:
            raise self.error(f"tensor {self.tname(idx)!r} has unsupported type {t.Type()}")
        data = np.frombuffer(buf.DataAsNumpy().tobytes(), dtype=_NP_TYPES[t.Type()])
        if t.Sparsity() is not None:
            return data  # still compressed: DENSIFY expands it
        return data.reshape(self.shape(idx))

    def const(self, idx: int, dequantize: bool = True) -> np.ndarray:
        """The constant behind a tensor; quantized int8/uint8 weights come back as fp32."""
        if idx in self.consts:
            return self.consts[idx]
        arr = self._buffer(idx)
        if arr is None:
            raise self.error(f"input {self.tname(idx)!r} must be a constant")
        if self.tensor(idx).Sparsity() is not None:
            raise self.error(f"tensor {self.tname(idx)!r} is sparse and not behind a DENSIFY")
        if dequantize and arr.dtype == np.int32 and self._has_scale(idx):
            return self.dequantize(idx, arr)  # int32 bias of a quantized op: scale = input x weight scale
        if dequantize and arr.dtype in (np.int8, np.uint8, np.int16):
            if self.full_integer:
                return self.dequantize(idx, arr)
            # Weights quantized without a DEQUANTIZE in front ("hybrid" models): TFLite quantizes the float
            # input on the fly for these ops; computing in float instead differs by about one input step.
            log.warning("%s: %s: int8 weights %r used directly (hybrid quantization); computed in float",
                        self.source, self.op_label, self.tname(idx))
            arr = self.dequantize(idx, arr)
        return arr

    def _has_scale(self, idx: int) -> bool:
        qp = self.tensor(idx).Quantization()
        return qp is not None and qp.ScaleLength() > 0

    @property
    def full_integer(self) -> bool:
        """Any run-time tensor of the graph is quantized (a full-integer model, not a hybrid one)."""
        if not hasattr(self, "_full_integer"):
            self._full_integer = any(self.tensor(i).Type() in _QUANTIZED and self._buffer(i) is None
                                     for i in range(self.g.TensorsLength()))
        return self._full_integer

    def quant_params(self, idx: int) -> tuple[str, str] | None:
        """Initializer names (scale, zero point) of a quantized run-time tensor; None for a float one."""
        t = self.tensor(idx)
        if t.Type() not in _QUANTIZED:
            if t.Type() == 7 and not self.is_const(idx):
                raise self.error(f"tensor {self.tname(idx)!r} is an int16 activation (not imported)")
            return None
        if idx not in self._qparams:
            qp = t.Quantization()
            if qp is None or qp.ScaleLength() == 0:
                raise self.error(f"tensor {self.tname(idx)!r} is quantized without a scale")
            if qp.ScaleLength() > 1:
                raise self.error(f"activation {self.tname(idx)!r} is quantized per axis (not imported)")
            zp = int(qp.ZeroPointAsNumpy()[0]) if qp.ZeroPointLength() else 0
            base = self.tname(idx)
            self._qparams[idx] = (self.init(base + "/scale", np.array(qp.ScaleAsNumpy()[0], np.float32)),
                                  self.init(base + "/zero_point", np.array(zp, _NP_TYPES[t.Type()])))
        return self._qparams[idx]

    def dequantize(self, idx: int, q: np.ndarray) -> np.ndarray:
        qp = self.tensor(idx).Quantization()
        if qp is None or qp.ScaleLength() == 0:
            raise self.error(f"tensor {self.tname(idx)!r} is {q.dtype} without quantization parameters")
        scale = qp.ScaleAsNumpy().astype(np.float32)
        zero = qp.ZeroPointAsNumpy().astype(np.float32) if qp.ZeroPointLength() else np.zeros_like(scale)
        if scale.size > 1:  # per-axis
            shape = [1] * q.ndim
            shape[qp.QuantizedDimension()] = scale.size
            scale, zero = scale.reshape(shape), zero.reshape(shape)
        return ((q.astype(np.float32) - zero) * scale).astype(np.float32)

    def init(self, hint: str, arr: np.ndarray) -> str:
        name = self.unique(hint)
        self.inits.append(numpy_helper.from_array(np.asarray(arr, order="C"), name))
        return name

    def value(self, idx: int, nchw: bool) -> str:
        """The ONNX name of tensor ``idx`` in the layout asked for (NCHW only means anything at rank 4)."""
        rank4 = len(self.shape(idx)) == 4
        if self.is_const(idx):
            arr = self.const(idx)
            if arr.dtype == np.float16:
                arr = arr.astype(np.float32)
            if nchw and arr.ndim == 4:
                arr = arr.transpose(_TO_NCHW)
            return self.init(self.tname(idx), arr)
        v = self.values.get(idx)
        if v is None:
            raise self.error(f"tensor {self.tname(idx)!r} is used before it is produced")
        want = nchw and rank4
        if v.nchw == want:
            return v.name
        key = (v.name, want)
        if key not in self._transposed:
            out = self.unique(v.name + ("/nchw" if want else "/nhwc"))
            perm = _TO_NCHW if want else _TO_NHWC
            self.node("Transpose", [v.name], [out], perm=list(perm))
            self._transposed[key] = out
        return self._transposed[key]

    def stored_nchw(self, idx: int) -> bool:
        v = self.values.get(idx)
        return v is not None and v.nchw

    def node(self, op: str, inputs: list[str], outputs: list[str], **attrs: Any) -> None:
        self._append(helper.make_node(op, inputs, outputs, name=self.unique(outputs[0] + "/" + op), **attrs))

    def _append(self, node: onnx.NodeProto) -> None:
        self.nodes.append(node)
        for out in node.output:  # a fused activation, then a Quantize/Dequantize pair, follow the producer
            for after in self._pending_after.pop(out, []):
                self._append(after)

    def output(self, idx: int, nchw: bool, fused: int = 0) -> str:
        """Name that the op should write for tensor ``idx``; a fused activation and, for a quantized
        tensor, the QuantizeLinear / DequantizeLinear pair are appended after it."""
        nchw = nchw and len(self.shape(idx)) == 4
        name = self.unique(self.tname(idx) + ("/value" if idx in self.graph_outputs else ""))
        self.values[idx] = _Value(name, nchw)
        qp = self.quant_params(idx)
        if qp is not None:
            real, q = self.unique(name + "/real"), self.unique(name + "/q")
            self._pending_after[real] = [
                helper.make_node("QuantizeLinear", [real, *qp], [q], name=self.unique(q + "/QuantizeLinear")),
                helper.make_node("DequantizeLinear", [q, *qp], [name], name=self.unique(name + "/DequantizeLinear"))]
            name = real
        aft = self.tfl.ActivationFunctionType
        if fused == aft.NONE:
            return name
        pre = self.unique(name + "/preact")
        if fused == aft.RELU:
            op, extra = "Relu", []
        elif fused in (aft.RELU6, aft.RELU_N1_TO_1):
            lo, hi = (0.0, 6.0) if fused == aft.RELU6 else (-1.0, 1.0)
            op = "Clip"
            extra = [self.init(name + "/min", np.array(lo, np.float32)),
                     self.init(name + "/max", np.array(hi, np.float32))]
        elif fused == aft.TANH:
            op, extra = "Tanh", []
        else:
            raise self.error(f"fused activation {fused} is not supported")
        self._pending_after[pre] = [helper.make_node(op, [pre, *extra], [name], name=self.unique(name + "/" + op))]
        return pre

    def options(self, op: Any, cls_name: str) -> Any:
        tab = op.BuiltinOptions()
        o = getattr(self.tfl, cls_name)()
        if tab is None:
            return None
        o.Init(tab.Bytes, tab.Pos)
        return o

    # -- operators -------------------------------------------------------------------------
    def conv(self, op: Any, ins: list[int], out: int, depthwise: bool) -> None:
        o = self.options(op, "DepthwiseConv2DOptions" if depthwise else "Conv2DOptions")
        x_shape, y_shape = self.shape(ins[0]), self.shape(out)
        w = self.const(ins[1]).astype(np.float32)
        if depthwise:  # [1, kh, kw, C*m] -> [C*m, 1, kh, kw], group = C
            w_onnx = w.transpose(3, 0, 1, 2)
            group = x_shape[3]
        else:  # OHWI -> OIHW; a kernel with fewer input channels than the input is a grouped conv
            w_onnx = w.transpose(0, 3, 1, 2)
            group = x_shape[3] // w.shape[3]
        kh, kw = w_onnx.shape[2:]
        sh, sw, dh, dw = o.StrideH(), o.StrideW(), o.DilationHFactor(), o.DilationWFactor()
        pads = self.pads(o.Padding(), x_shape, (kh, kw), (sh, sw), (dh, dw))
        inputs = [self.value(ins[0], True), self.init(self.tname(out) + "/W", w_onnx)]
        if len(ins) > 2 and ins[2] >= 0:
            inputs.append(self.init(self.tname(out) + "/B", self.const(ins[2]).astype(np.float32)))
        y = self.output(out, True, o.FusedActivationFunction())
        self.node("Conv", inputs, [y], kernel_shape=[kh, kw], strides=[sh, sw], dilations=[dh, dw],
                  pads=pads, group=group)
        self.check_spatial(out, y_shape)

    def pads(self, padding: int, x_shape: tuple[int, ...], k: tuple[int, int], s: tuple[int, int],
             d: tuple[int, int] = (1, 1)) -> list[int]:
        if padding == _VALID:
            return [0, 0, 0, 0]
        if padding != _SAME:
            raise self.error(f"unknown padding {padding}")
        t, b = _same_pads(x_shape[1], k[0], s[0], d[0])
        left, right = _same_pads(x_shape[2], k[1], s[1], d[1])
        return [t, left, b, right]

    def check_spatial(self, out: int, y_shape: tuple[int, ...]) -> None:
        if len(y_shape) != 4:
            raise self.error(f"expected a rank-4 output, got shape {y_shape}")

    def transpose_conv(self, w: np.ndarray, ins_x: int, bias: int | None, out: int, padding_same: bool,
                       stride: tuple[int, int]) -> None:
        """A transposed convolution with an OHWI kernel (TFLite's layout for both variants)."""
        _, kh, kw, _ = w.shape
        x_shape, y_shape = self.shape(ins_x), self.shape(out)
        sh, sw = stride
        if padding_same:
            th = max((x_shape[1] - 1) * sh + kh - y_shape[1], 0)
            tw = max((x_shape[2] - 1) * sw + kw - y_shape[2], 0)
            pads = [th // 2, tw // 2, th - th // 2, tw - tw // 2]
        else:
            pads = [0, 0, 0, 0]
        oh = (x_shape[1] - 1) * sh + kh - pads[0] - pads[2]
        ow = (x_shape[2] - 1) * sw + kw - pads[1] - pads[3]
        extra = [y_shape[1] - oh, y_shape[2] - ow]
        if min(extra) < 0 or max(extra) >= max(sh, sw):
            raise self.error(f"transposed convolution output {y_shape} does not follow from input {x_shape}")
        inputs = [self.value(ins_x, True), self.init(self.tname(out) + "/W", w.transpose(3, 0, 1, 2))]
        if bias is not None:
            inputs.append(self.init(self.tname(out) + "/B", self.const(bias).astype(np.float32)))
        attrs: dict[str, Any] = {"kernel_shape": [kh, kw], "strides": [sh, sw], "pads": pads}
        if any(extra):
            attrs["output_padding"] = extra
        self.node("ConvTranspose", inputs, [self.output(out, True)], **attrs)

    def pool(self, op: Any, ins: list[int], out: int, kind: str) -> None:
        o = self.options(op, "Pool2DOptions")
        x_shape = self.shape(ins[0])
        fh, fw, sh, sw = o.FilterHeight(), o.FilterWidth(), o.StrideH(), o.StrideW()
        x = self.value(ins[0], True)
        y = self.output(out, True, o.FusedActivationFunction())
        if kind == "AveragePool" and (fh, fw) == tuple(x_shape[1:3]) and o.Padding() == _VALID:
            self.node("GlobalAveragePool", [x], [y])
            return
        attrs: dict[str, Any] = {"kernel_shape": [fh, fw], "strides": [sh, sw],
                                 "pads": self.pads(o.Padding(), x_shape, (fh, fw), (sh, sw))}
        if kind == "AveragePool":
            attrs["count_include_pad"] = 0  # TFLite averages over the valid window only
        self.node(kind, [x], [y], **attrs)

    def elementwise(self, op_type: str, ins: list[int], out: int, fused: int = 0) -> None:
        """Broadcasting ops: computed NCHW when the output is a rank-4 activation."""
        nchw = len(self.shape(out)) == 4 and any(self.stored_nchw(i) for i in ins)
        names = []
        for i in ins:
            if nchw and self.is_const(i):
                c = self.const(i)
                c = c.astype(np.float32) if c.dtype == np.float16 else c
                c = c.reshape((1,) * (4 - c.ndim) + c.shape).transpose(_TO_NCHW)
                names.append(self.init(self.tname(i), c))
            elif nchw and len(self.shape(i)) < 4:
                nhwc = self.value(i, False)
                shape = (1,) * (4 - len(self.shape(i))) + self.shape(i)
                r = self.unique(nhwc + "/rank4")
                self.node("Reshape", [nhwc, self.init(r + "/shape", np.array(shape, np.int64))], [r])
                t = self.unique(r + "/nchw")
                self.node("Transpose", [r], [t], perm=list(_TO_NCHW))
                names.append(t)
            else:
                names.append(self.value(i, nchw))
        self.node(op_type, names, [self.output(out, nchw, fused)])

    def unary(self, op_type: str, ins: list[int], out: int, **attrs: Any) -> None:
        nchw = self.stored_nchw(ins[0])
        self.node(op_type, [self.value(ins[0], nchw)], [self.output(out, nchw)], **attrs)

    def reduce_mean(self, op: Any, ins: list[int], out: int) -> None:
        keep = bool(self.options(op, "ReducerOptions").KeepDims())
        x_shape = self.shape(ins[0])
        axes = sorted(int(a) % len(x_shape) for a in np.atleast_1d(self.const(ins[1])))
        nchw = self.stored_nchw(ins[0])
        if nchw and axes == [1, 2]:
            x = self.value(ins[0], True)
            if keep:
                self.node("GlobalAveragePool", [x], [self.output(out, True)])
                return
            gap = self.unique(self.tname(out) + "/gap")
            self.node("GlobalAveragePool", [x], [gap])
            self.node("Reshape", [gap, self.init(gap + "/shape", np.array(self.shape(out), np.int64))],
                      [self.output(out, False)])
            return
        x = self.value(ins[0], False)
        self.node("ReduceMean", [x], [self.output(out, False)], axes=axes, keepdims=int(keep))

    def pad(self, ins: list[int], out: int) -> None:
        p = self.const(ins[1]).astype(np.int64).reshape(-1, 2)
        # Rank 4 pads in NCHW whatever the input's stored layout (a graph input is NHWC): padding
        # H and W of an NHWC tensor would be a Pad over axes 1 and 2, which the GPU paths decline.
        nchw = len(p) == 4
        if nchw:
            p = p[list(_TO_NCHW)]
        value = self.const(ins[2]).astype(np.float32).reshape(()) if len(ins) > 2 and ins[2] >= 0 else None
        if nchw and not p[[0, 2, 3]].any():
            # Channel-only padding (residual blocks that widen): a Concat with constant fill, which the
            # GPU paths run inside their segment (gles3's Pad covers H and W only).
            n, c, h, w = (self.shape(ins[0])[i] for i in _TO_NCHW)
            fill = np.float32(0.0 if value is None else value)
            parts = [self.value(ins[0], True)]
            if p[1, 0]:
                parts.insert(0, self.init(self.tname(out) + "/fill_before", np.full((n, p[1, 0], h, w), fill)))
            if p[1, 1]:
                parts.append(self.init(self.tname(out) + "/fill_after", np.full((n, p[1, 1], h, w), fill)))
            self.node("Concat", parts, [self.output(out, True)], axis=1)
            return
        inputs = [self.value(ins[0], nchw), self.init(self.tname(out) + "/pads", np.concatenate([p[:, 0], p[:, 1]]))]
        if value is not None:
            inputs.append(self.init(self.tname(out) + "/value", value))
        self.node("Pad", inputs, [self.output(out, nchw)], mode="constant")

    def reshape(self, ins: list[int], out: int) -> None:
        shape = np.array(self.shape(out), np.int64)
        self.node("Reshape", [self.value(ins[0], False), self.init(self.tname(out) + "/shape", shape)],
                  [self.output(out, False)])

    def concat(self, op: Any, ins: list[int], out: int) -> None:
        o = self.options(op, "ConcatenationOptions")
        rank = len(self.shape(out))
        axis = o.Axis() % rank
        nchw = rank == 4
        if nchw:
            axis = _NHWC_TO_NCHW_AXIS[axis]
        names = [self.value(i, nchw) for i in ins]
        self.node("Concat", names, [self.output(out, nchw, o.FusedActivationFunction())], axis=axis)

    def resize(self, op: Any, ins: list[int], out: int, mode: str) -> None:
        o = self.options(op, "ResizeBilinearOptions" if mode == "linear" else "ResizeNearestNeighborOptions")
        y_shape = self.shape(out)
        if o.HalfPixelCenters():
            ctm = "half_pixel" if mode == "linear" else "tf_half_pixel_for_nn"
        elif o.AlignCorners():
            ctm = "align_corners"
        else:
            ctm = "asymmetric"
        attrs: dict[str, Any] = {"mode": mode, "coordinate_transformation_mode": ctm}
        if mode == "nearest":
            attrs["nearest_mode"] = "round_prefer_ceil" if o.AlignCorners() else "floor"
        sizes = np.array([y_shape[0], y_shape[3], y_shape[1], y_shape[2]], np.int64)
        self.node("Resize", [self.value(ins[0], True), "", "", self.init(self.tname(out) + "/sizes", sizes)],
                  [self.output(out, True)], **attrs)

    def fully_connected(self, op: Any, ins: list[int], out: int) -> None:
        o = self.options(op, "FullyConnectedOptions")
        w = self.const(ins[1]).astype(np.float32)  # [O, I]
        x = self.value(ins[0], False)
        flat = self.unique(self.tname(out) + "/flat")
        self.node("Reshape", [x, self.init(flat + "/shape", np.array([-1, w.shape[1]], np.int64))], [flat])
        inputs = [flat, self.init(self.tname(out) + "/W", w)]
        if len(ins) > 2 and ins[2] >= 0:
            inputs.append(self.init(self.tname(out) + "/B", self.const(ins[2]).astype(np.float32)))
        y_shape = self.shape(out)
        if len(y_shape) == 2:
            self.node("Gemm", inputs, [self.output(out, False, o.FusedActivationFunction())], transB=1)
            return
        g = self.unique(self.tname(out) + "/gemm")
        self.node("Gemm", inputs, [g], transB=1)
        self.node("Reshape", [g, self.init(g + "/shape", np.array(y_shape, np.int64))],
                  [self.output(out, False, o.FusedActivationFunction())])

    def strided_slice(self, op: Any, ins: list[int], out: int) -> None:
        o = self.options(op, "StridedSliceOptions")
        if o.EllipsisMask() or o.NewAxisMask():
            raise self.error("STRIDED_SLICE with ellipsis_mask or new_axis_mask is not supported")
        x_shape = self.shape(ins[0])
        begin, end, strides = (self.const(i).astype(np.int64) for i in ins[1:4])
        starts, ends = [], []
        for a in range(len(begin)):
            b, e = int(begin[a]), int(end[a])
            if o.BeginMask() >> a & 1:
                b = 0 if strides[a] > 0 else x_shape[a] - 1
            if o.EndMask() >> a & 1:
                e = np.iinfo(np.int64).max if strides[a] > 0 else np.iinfo(np.int64).min
            if o.ShrinkAxisMask() >> a & 1:
                e = b + 1 if b != -1 else np.iinfo(np.int64).max
            starts.append(b)
            ends.append(e)
        base = self.tname(out)
        sliced = self.unique(base + "/slice")
        self.node("Slice", [self.value(ins[0], False), self.init(base + "/starts", np.array(starts, np.int64)),
                            self.init(base + "/ends", np.array(ends, np.int64)),
                            self.init(base + "/axes", np.arange(len(starts), dtype=np.int64)),
                            self.init(base + "/steps", strides)], [sliced])
        self.node("Reshape", [sliced, self.init(base + "/shape", np.array(self.shape(out), np.int64))],
                  [self.output(out, False)])

    def densify(self, idx: int) -> np.ndarray:
        """Expand a sparse constant (TFLite SparsityParameters, no block sparsity)."""
        t = self.tensor(idx)
        sp = t.Sparsity()
        data = self._buffer(idx)
        if sp is None or data is None:
            raise self.error(f"DENSIFY input {self.tname(idx)!r} is not a sparse constant")
        shape = self.shape(idx)
        order = [int(v) for v in sp.TraversalOrderAsNumpy()]
        if sp.BlockMapLength() or sorted(order) != list(range(len(shape))):
            raise self.error("DENSIFY with block sparsity is not supported")
        positions = np.zeros(1, np.int64)  # index into the next level's storage, per element so far
        coords = np.zeros((1, 0), np.int64)
        vec_types = {1: "Int32Vector", 2: "Uint16Vector", 3: "Uint8Vector"}

        def vector(kind: int, table: Any) -> np.ndarray:
            v = getattr(self.tfl, vec_types[kind])()
            v.Init(table.Bytes, table.Pos)
            return v.ValuesAsNumpy().astype(np.int64)

        for level in range(sp.DimMetadataLength()):
            dm = sp.DimMetadata(level)
            if dm.Format() == 0:  # DENSE
                d = dm.DenseSize()
                coords = np.concatenate([np.repeat(coords, d, axis=0),
                                         np.tile(np.arange(d), len(positions))[:, None]], axis=1)
                positions = (positions[:, None] * d + np.arange(d)).reshape(-1)
            else:  # SPARSE_CSR
                seg = vector(dm.ArraySegmentsType(), dm.ArraySegments())
                ind = vector(dm.ArrayIndicesType(), dm.ArrayIndices())
                counts = seg[positions + 1] - seg[positions]
                starts = np.repeat(seg[positions], counts)
                offsets = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
                positions = starts + offsets
                coords = np.concatenate([np.repeat(coords, counts, axis=0), ind[positions][:, None]], axis=1)
        dense = np.zeros(shape, data.dtype)
        dense[tuple(coords[:, order.index(a)] for a in range(len(shape)))] = data[positions]
        return dense

    # -- driver ----------------------------------------------------------------------------
    def run(self) -> onnx.ModelProto:
        g = self.g
        for k in range(g.OutputsLength()):
            self.graph_outputs[g.Outputs(k)] = self.unique(self.tname(g.Outputs(k)))
        graph_inputs = []
        for k in range(g.InputsLength()):
            idx = g.Inputs(k)
            t = self.tensor(idx)
            if t.Type() not in (0, *_QUANTIZED):
                raise ModelError(f"{self.source}: input {self.tname(idx)!r} has TFLite type {t.Type()}; only float32, "
                                 "int8 and uint8 inputs are imported")
            name = self.unique(self.tname(idx))
            shape = self.shape(idx)
            nchw = self.io_nchw and len(shape) == 4
            self.values[idx] = _Value(name, nchw)
            graph_inputs.append(helper.make_tensor_value_info(name, _ONNX_TYPES[t.Type()], _io_shape(shape, nchw)))
            qp = self.quant_params(idx)
            if qp is not None:
                real = self.unique(name + "/real")
                self.node("DequantizeLinear", [name, *qp], [real])
                self.values[idx] = _Value(real, nchw)
        unsupported: list[str] = []
        for k in range(g.OperatorsLength()):
            op = g.Operators(k)
            oc = self.model.OperatorCodes(op.OpcodeIndex())
            code = max(oc.BuiltinCode(), oc.DeprecatedBuiltinCode())
            name = self.op_names.get(code, str(code))
            if name == "CUSTOM":
                name = oc.CustomCode().decode("utf-8", "replace")
            ins = [op.Inputs(j) for j in range(op.InputsLength())]
            outs = [op.Outputs(j) for j in range(op.OutputsLength())]
            self.op_label = f"operator {k} {name} (output {self.tname(outs[0]) if outs else '?'})"
            handler = self.handlers().get(name)
            if handler is None:
                unsupported.append(name)
                continue
            if unsupported:
                continue  # keep scanning to list every missing op, but stop building
            handler(op, ins, outs)
        if unsupported:
            missing = sorted(set(unsupported))
            raise ModelError(f"{self.source}: cannot import TFLite operator(s) {', '.join(missing)} "
                             f"({len(unsupported)} node(s))")
        graph_outputs = []
        for k in range(g.OutputsLength()):
            idx = g.Outputs(k)
            want = self.graph_outputs[idx]
            shape = self.shape(idx)
            nchw = self.io_nchw and len(shape) == 4
            qp = self.quant_params(idx)
            if qp is not None:  # on the grid already: quantizing again gives TFLite's integers exactly
                self.node("QuantizeLinear", [self.value(idx, nchw), *qp], [want])
            else:
                self.node("Identity", [self.value(idx, nchw)], [want])
            elem = _ONNX_TYPES.get(self.tensor(idx).Type(), TensorProto.FLOAT)
            graph_outputs.append(helper.make_tensor_value_info(want, elem, _io_shape(shape, nchw)))
        graph = helper.make_graph(self.nodes, os.path.splitext(os.path.basename(self.source))[0] or "tflite",
                                  graph_inputs + self.state_inputs, graph_outputs + self.state_outputs,
                                  initializer=self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                                  producer_name=TFLITE_IMPORTER, producer_version="1")
        model.ir_version = 8
        return model

    def handlers(self) -> dict[str, Callable[[Any, list[int], list[int]], None]]:
        aft = self.tfl.ActivationFunctionType

        def fused(cls: str) -> Callable[[Any], int]:
            return lambda op: self.options(op, cls).FusedActivationFunction() if op.BuiltinOptions() else aft.NONE

        def binary(op_type: str, cls: str | None) -> Callable[[Any, list[int], list[int]], None]:
            act = fused(cls) if cls else (lambda op: aft.NONE)
            return lambda op, ins, outs: self.elementwise(op_type, ins, outs[0], act(op))

        def unary(op_type: str, **attrs: Any) -> Callable[[Any, list[int], list[int]], None]:
            return lambda op, ins, outs: self.unary(op_type, ins, outs[0], **attrs)

        def set_const(out: int, arr: np.ndarray) -> None:
            self.consts[out] = arr

        return {
            "CONV_2D": lambda op, ins, outs: self.conv(op, ins, outs[0], depthwise=False),
            "DEPTHWISE_CONV_2D": lambda op, ins, outs: self.conv(op, ins, outs[0], depthwise=True),
            "ADD": binary("Add", "AddOptions"),
            "SUB": binary("Sub", "SubOptions"),
            "MUL": binary("Mul", "MulOptions"),
            "DIV": binary("Div", "DivOptions"),
            "MAXIMUM": binary("Max", None),
            "MINIMUM": binary("Min", None),
            "PRELU": lambda op, ins, outs: self.elementwise("PRelu", ins, outs[0]),
            "RELU": unary("Relu"),
            "RELU6": lambda op, ins, outs: self.elementwise_clip(ins, outs[0], 0.0, 6.0),
            "RELU_N1_TO_1": lambda op, ins, outs: self.elementwise_clip(ins, outs[0], -1.0, 1.0),
            "LOGISTIC": unary("Sigmoid"),
            "TANH": unary("Tanh"),
            "HARD_SWISH": unary("HardSwish"),
            "ELU": unary("Elu"),
            "LEAKY_RELU": lambda op, ins, outs: self.unary(
                "LeakyRelu", ins, outs[0], alpha=self.options(op, "LeakyReluOptions").Alpha()),
            "ABS": unary("Abs"),
            "EXP": unary("Exp"),
            "SQRT": unary("Sqrt"),
            "MAX_POOL_2D": lambda op, ins, outs: self.pool(op, ins, outs[0], "MaxPool"),
            "AVERAGE_POOL_2D": lambda op, ins, outs: self.pool(op, ins, outs[0], "AveragePool"),
            "MEAN": lambda op, ins, outs: self.reduce_mean(op, ins, outs[0]),
            "PAD": lambda op, ins, outs: self.pad(ins, outs[0]),
            "PADV2": lambda op, ins, outs: self.pad(ins, outs[0]),
            "RESHAPE": lambda op, ins, outs: self.reshape(ins, outs[0]),
            "SQUEEZE": lambda op, ins, outs: self.reshape(ins, outs[0]),
            "EXPAND_DIMS": lambda op, ins, outs: self.reshape(ins, outs[0]),
            "CONCATENATION": lambda op, ins, outs: self.concat(op, ins, outs[0]),
            "RESIZE_BILINEAR": lambda op, ins, outs: self.resize(op, ins, outs[0], "linear"),
            "RESIZE_NEAREST_NEIGHBOR": lambda op, ins, outs: self.resize(op, ins, outs[0], "nearest"),
            "DEPTH_TO_SPACE": lambda op, ins, outs: self.depth_to_space(
                ins[0], outs[0], self.options(op, "DepthToSpaceOptions").BlockSize()),
            "FULLY_CONNECTED": lambda op, ins, outs: self.fully_connected(op, ins, outs[0]),
            "STRIDED_SLICE": lambda op, ins, outs: self.strided_slice(op, ins, outs[0]),
            "SOFTMAX": lambda op, ins, outs: self.softmax(op, ins, outs[0]),
            "DEQUANTIZE": lambda op, ins, outs: self.dequantize_op(ins[0], outs[0]),
            "QUANTIZE": lambda op, ins, outs: self.unary("Identity", ins, outs[0]),  # output() quantizes
            "VAR_HANDLE": lambda op, ins, outs: self.var_handle(op, outs[0]),
            "CALL_ONCE": lambda op, ins, outs: self.call_once(op),
            "READ_VARIABLE": lambda op, ins, outs: self.read_variable(ins[0], outs[0]),
            "ASSIGN_VARIABLE": lambda op, ins, outs: self.assign_variable(ins[0], ins[1]),
            "DENSIFY": lambda op, ins, outs: set_const(outs[0], self.densify(ins[0])),
            "TRANSPOSE_CONV": lambda op, ins, outs: self.builtin_transpose_conv(op, ins, outs[0]),
            "Convolution2DTransposeBias": lambda op, ins, outs: self.mediapipe_transpose_conv(op, ins, outs[0]),
        }

    def depth_to_space(self, src: int, out: int, block: int) -> None:
        """NHWC depth-to-space as Reshape / Transpose / Reshape: plain layout ops that every path's
        fallback runs (ONNX DepthToSpace has no CPU kernel here)."""
        n, h, w, c = self.shape(src)
        base = self.tname(out)
        split, moved = self.unique(base + "/split"), self.unique(base + "/moved")
        self.node("Reshape", [self.value(src, False),
                              self.init(split + "/shape", np.array([n, h, w, block, block, c // block**2], np.int64))],
                  [split])
        self.node("Transpose", [split], [moved], perm=[0, 1, 3, 2, 4, 5])
        self.node("Reshape", [moved, self.init(base + "/shape", np.array(self.shape(out), np.int64))],
                  [self.output(out, False)])

    def elementwise_clip(self, ins: list[int], out: int, lo: float, hi: float) -> None:
        nchw = self.stored_nchw(ins[0])
        name = self.tname(out)
        self.node("Clip", [self.value(ins[0], nchw), self.init(name + "/min", np.array(lo, np.float32)),
                           self.init(name + "/max", np.array(hi, np.float32))], [self.output(out, nchw)])

    def softmax(self, op: Any, ins: list[int], out: int) -> None:
        beta = self.options(op, "SoftmaxOptions").Beta()
        x = self.value(ins[0], False)
        if beta != 1.0:
            scaled = self.unique(self.tname(out) + "/scaled")
            self.node("Mul", [x, self.init(scaled + "/beta", np.array(beta, np.float32))], [scaled])
            x = scaled
        self.node("Softmax", [x], [self.output(out, False)], axis=-1)

    def dequantize_op(self, src: int, out: int) -> None:
        if not self.is_const(src):  # a quantized activation: its value is already the real one
            self.unary("Identity", [src], out)
            return
        arr = self.consts[src] if src in self.consts else self.const(src, dequantize=False)
        if arr.dtype in (np.int8, np.uint8, np.int16):
            arr = self.dequantize(src, arr)
        self.consts[out] = arr.astype(np.float32)

    # -- resource variables (streaming state) ------------------------------------------------------
    def var_handle(self, op: Any, out: int) -> None:
        o = self.options(op, "VarHandleOptions")
        shared = (o.SharedName() or b"").decode("utf-8", "replace") if o is not None else ""
        self.resources[out] = shared or self.tname(out)

    def call_once(self, op: Any) -> None:
        """Read the values the init subgraph assigns (VAR_HANDLE + ASSIGN_VARIABLE of constants)."""
        index = self.options(op, "CallOnceOptions").InitSubgraphIndex()
        sub = self.model.Subgraphs(index)
        handles: dict[int, str] = {}
        for k in range(sub.OperatorsLength()):
            sop = sub.Operators(k)
            oc = self.model.OperatorCodes(sop.OpcodeIndex())
            name = self.op_names.get(max(oc.BuiltinCode(), oc.DeprecatedBuiltinCode()), "")
            if name == "VAR_HANDLE":
                o = self.tfl.VarHandleOptions()
                tab = sop.BuiltinOptions()
                o.Init(tab.Bytes, tab.Pos)
                handles[sop.Outputs(0)] = o.SharedName().decode("utf-8", "replace")
            elif name == "ASSIGN_VARIABLE":
                t = sub.Tensors(sop.Inputs(1))
                buf = self.model.Buffers(t.Buffer())
                if buf is None or buf.DataLength() == 0 or t.Type() not in _NP_TYPES:
                    raise self.error("CALL_ONCE init subgraph assigns a non-constant value")
                value = np.frombuffer(buf.DataAsNumpy().tobytes(), _NP_TYPES[t.Type()]).reshape(t.ShapeAsNumpy())
                self._init_values[handles[sop.Inputs(0)]] = value.copy()
            else:
                raise self.error(f"CALL_ONCE init subgraph runs {name or 'a custom op'}; only variable "
                                 "initialisation is imported")

    def _variable(self, resource: int) -> str:
        if resource not in self.resources:
            raise self.error(f"{self.tname(resource)!r} is not a VAR_HANDLE resource")
        return self.resources[resource]

    def read_variable(self, resource: int, out: int) -> None:
        var = self._variable(resource)
        if var in self._state_names:
            raise self.error(f"variable {var!r} is read twice")
        t = self.tensor(out)
        if t.Type() not in _ONNX_TYPES:
            raise self.error(f"variable {var!r} has TFLite type {t.Type()}")
        name = self.unique(var)
        self._state_names[var] = name
        self.state_inputs.append(helper.make_tensor_value_info(name, _ONNX_TYPES[t.Type()], list(self.shape(out))))
        if var in self._init_values:
            self.initial_state[name] = self._init_values[var].reshape(self.shape(out))
        self.values[out] = _Value(name, False)
        qp = self.quant_params(out)
        if qp is not None:
            real = self.unique(name + "/real")
            self.node("DequantizeLinear", [name, *qp], [real])
            self.values[out] = _Value(real, False)

    def assign_variable(self, resource: int, src: int) -> None:
        var = self._variable(resource)
        t = self.tensor(src)
        name = self.unique(self._state_names.get(var, var) + "/next")
        qp = self.quant_params(src)
        if qp is not None:
            self.node("QuantizeLinear", [self.value(src, False), *qp], [name])
        else:
            self.node("Identity", [self.value(src, False)], [name])
        self.state_outputs.append(helper.make_tensor_value_info(name, _ONNX_TYPES.get(t.Type(), TensorProto.FLOAT),
                                                                list(self.shape(src))))

    def builtin_transpose_conv(self, op: Any, ins: list[int], out: int) -> None:
        o = self.options(op, "TransposeConvOptions")  # inputs: output_shape, weights, input, [bias]
        bias = ins[3] if len(ins) > 3 and ins[3] >= 0 else None
        self.transpose_conv(self.const(ins[1]).astype(np.float32), ins[2], bias, out, o.Padding() == _SAME,
                            (o.StrideH(), o.StrideW()))

    def mediapipe_transpose_conv(self, op: Any, ins: list[int], out: int) -> None:
        raw = op.CustomOptionsAsNumpy().tobytes() if op.CustomOptionsLength() else b""
        if len(raw) != 12:
            raise self.error("expected 12 bytes of TfLiteTransposeConvParams options")
        padding, stride_w, stride_h = struct.unpack("<iii", raw)
        if padding not in (_CUSTOM_SAME, _CUSTOM_VALID):
            raise self.error(f"unknown padding {padding}")
        bias = ins[2] if len(ins) > 2 and ins[2] >= 0 else None
        self.transpose_conv(self.const(ins[1]).astype(np.float32), ins[0], bias, out, padding == _CUSTOM_SAME,
                            (stride_h, stride_w))


def tflite_to_onnx(model: str | os.PathLike | bytes, layout: str = "nhwc") -> onnx.ModelProto:
    """Import a ``.tflite`` file (path or bytes) as an ONNX ModelProto; ModelError names what it cannot.

    ``layout="nhwc"`` keeps TFLite's interface (what ``Session("x.tflite")`` uses); ``"nchw"`` declares
    rank-4 graph inputs and outputs NCHW, so the graph needs no edge Transposes."""
    if isinstance(model, (str, os.PathLike)):
        source = os.fspath(model)
        try:
            with open(source, "rb") as f:
                data = f.read()
        except OSError as exc:
            raise ModelError(f"cannot read {source}: {exc}") from exc
    else:
        data, source = bytes(model), "<tflite bytes>"
    if data[4:8] != TFLITE_MAGIC:
        raise ModelError(f"{source}: not a TFLite flatbuffer (no 'TFL3' identifier)")
    return _Importer(data, source, layout).run()


def tflite_initial_state(model: str | os.PathLike | bytes) -> dict[str, np.ndarray]:
    """The values a stateful model's CALL_ONCE assigns to its variables, by state input name (feed
    these to the first run; later runs take the previous run's ``<name>/next`` outputs). Empty
    for a model without variables."""
    data = open(os.fspath(model), "rb").read() if isinstance(model, (str, os.PathLike)) else bytes(model)
    importer = _Importer(data, os.fspath(model) if isinstance(model, (str, os.PathLike)) else "<tflite bytes>")
    importer.run()
    return dict(importer.initial_state)
