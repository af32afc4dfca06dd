"""Convert MediaPipe's selfie segmentation ``.tflite`` model to ONNX (opset 17, fp32, NCHW).

The model ships inside the Apache-2.0 PyPI wheel ``mediapipe==0.10.14`` at
``mediapipe/modules/selfie_segmentation/selfie_segmentation.tflite`` (249,505 bytes, SHA-256
``9ee168ec7c8f2a16c56fe8e1cfbc514974cbbb7e434051b455635f1bd1462f5c``). Regenerate the shipped
model (needs the project's ``[convert]`` extra and network access for the download only)::

    pip download --no-deps mediapipe==0.10.14 -d /tmp/mp
    unzip -o /tmp/mp/mediapipe-0.10.14-*.whl \
        'mediapipe/modules/selfie_segmentation/selfie_segmentation.tflite' -d /tmp/mp
    python tools/convert_selfie_tflite.py \
        /tmp/mp/mediapipe/modules/selfie_segmentation/selfie_segmentation.tflite \
        gpubackend/models/selfie_segmentation.onnx

This writes the ONNX file and ``<output>.sha256`` next to it. The conversion is deterministic:
the same ``.tflite`` always gives the same bytes.

Layout choice. TFLite is NHWC; the ONNX operators (Conv, ConvTranspose, GlobalAveragePool,
Resize) are NCHW. Rather than wrapping every NHWC operator in Transposes, the whole graph is
converted to NCHW: weights are permuted once at conversion time (OHWI -> OIHW for CONV_2D,
1HWO -> O1HW with ``group = C`` for DEPTHWISE_CONV_2D, OHWI -> IOHW for the transposed
convolution), broadcasts of squeeze-excite gates become ``(1, C, 1, 1)`` and the
model's input and output are NCHW too: input ``"input"`` is ``1x3x256x256`` float RGB in [0, 1]
and output ``"mask"`` is ``1x1x256x256`` person probability (already through a sigmoid). The
graph therefore contains no Transpose at all; a caller holding an HWC image does the one
``transpose(2, 0, 1)`` itself.

Operator mapping (TFLite -> ONNX):

- DEQUANTIZE of a constant fp16 tensor -> folded: the weight is stored as an fp32 initializer.
- CONV_2D -> Conv; DEPTHWISE_CONV_2D -> Conv with ``group = in_channels`` (depth multiplier 1).
  TFLite ``SAME`` padding is turned into explicit ONNX pads, computed the way TFLite does it:
  ``total = max((out - 1) * stride + (k - 1) * dilation + 1 - in, 0)``, ``before = total // 2``,
  the remainder after. For the stride-2 3x3 convolutions on even sizes this is asymmetric
  (0 before, 1 after), which ``auto_pad=SAME_UPPER`` would also give, but explicit pads say it.
- Fused activations on any op (RELU, RELU6, TANH, RELU_N1_TO_1) -> a separate node after it.
- HARD_SWISH -> HardSwish, RELU -> Relu, LOGISTIC -> Sigmoid, MUL -> Mul, ADD -> Add.
- AVERAGE_POOL_2D whose window covers the whole input -> GlobalAveragePool (others -> AveragePool).
- RESIZE_BILINEAR -> Resize(mode=linear) with ``half_pixel`` (half_pixel_centers),
  ``align_corners`` or ``asymmetric`` coordinates, and explicit output ``sizes``.
- custom ``Convolution2DTransposeBias`` (MediaPipe) -> ConvTranspose with bias; its custom
  options are ``TfLiteTransposeConvParams`` (padding enum, stride_w, stride_h as int32).
"""

from __future__ import annotations

import argparse
import hashlib
import struct
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
INPUT_NAME = "input"
OUTPUT_NAME = "mask"

# tflite.TensorType values
_TFL_FLOAT32 = 0
_TFL_FLOAT16 = 1
_TFL_INT32 = 2
_NP_TYPES = {_TFL_FLOAT32: np.float32, _TFL_FLOAT16: np.float16, _TFL_INT32: np.int32}

# tflite.Padding (builtin ops) and TfLitePadding (custom op params) differ in numbering.
_BUILTIN_SAME, _BUILTIN_VALID = 0, 1
_CUSTOM_SAME, _CUSTOM_VALID = 1, 2


class ConversionError(RuntimeError):
    """The model uses something this converter does not handle."""


def _import_tflite():  # type: ignore[no-untyped-def]
    try:
        import tflite
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise SystemExit("the 'tflite' package is needed: pip install 'gpubackend[convert]'") from exc
    return tflite


def _same_pads(in_size: int, k: int, stride: int, dilation: int) -> tuple[int, int, int]:
    """TFLite SAME padding for one spatial axis: (before, after, out_size)."""
    out = (in_size + stride - 1) // stride
    eff_k = (k - 1) * dilation + 1
    total = max((out - 1) * stride + eff_k - in_size, 0)
    return total // 2, total - total // 2, out


class _Converter:
    def __init__(self, model_bytes: bytes) -> None:
        tflite = _import_tflite()
        self.tfl = tflite
        self.model = tflite.Model.GetRootAsModel(model_bytes, 0)
        if self.model.SubgraphsLength() != 1:
            raise ConversionError("expected exactly one subgraph")
        self.g = self.model.Subgraphs(0)
        self.op_names = {v: k for k, v in vars(tflite.BuiltinOperator).items() if not k.startswith("_")}
        self.nodes: list[onnx.NodeProto] = []
        self.inits: dict[str, np.ndarray] = {}
        self.names: dict[int, str] = {}  # tflite tensor index -> onnx value name
        self.const: dict[int, np.ndarray] = {}  # tflite tensor index -> constant (after DEQUANTIZE)
        self.shapes: dict[int, tuple[int, ...]] = {}  # NHWC shapes from the flatbuffer
        self._used: set[str] = set()

    # -- helpers ---------------------------------------------------------------------------
    def _unique(self, name: str) -> str:
        base = "".join(c if c.isalnum() or c in "_/.-" else "_" for c in name) or "t"
        out, i = base, 1
        while out in self._used:
            i += 1
            out = f"{base}_{i}"
        self._used.add(out)
        return out

    def tensor_name(self, idx: int) -> str:
        if idx not in self.names:
            self.names[idx] = self._unique(self.g.Tensors(idx).Name().decode())
        return self.names[idx]

    def buffer(self, idx: int) -> np.ndarray | None:
        t = self.g.Tensors(idx)
        buf = self.model.Buffers(t.Buffer())
        if buf is None or buf.DataLength() == 0:
            return None
        if t.Type() not in _NP_TYPES:
            raise ConversionError(f"tensor {t.Name().decode()}: unsupported type {t.Type()}")
        data = np.frombuffer(buf.DataAsNumpy().tobytes(), dtype=_NP_TYPES[t.Type()])
        shape = tuple(int(s) for s in t.ShapeAsNumpy()) if t.ShapeLength() else ()
        return data.reshape(shape)

    def constant(self, idx: int) -> np.ndarray:
        if idx in self.const:
            return self.const[idx]
        arr = self.buffer(idx)
        if arr is None:
            raise ConversionError(f"tensor {self.g.Tensors(idx).Name().decode()} is not a constant")
        return arr

    def add_init(self, name: str, arr: np.ndarray) -> str:
        name = self._unique(name)
        self.inits[name] = arr
        return name

    def activation(self, fused: int, out_name: str, base: str) -> str:
        """Append a node for a TFLite fused activation; returns the name to feed it from."""
        aft = self.tfl.ActivationFunctionType
        if fused == aft.NONE:
            return out_name
        pre = self._unique(base + "/preact")
        if fused == aft.RELU:
            self.nodes.append(helper.make_node("Relu", [pre], [out_name], name=base + "/relu"))
        elif fused in (aft.RELU6, aft.RELU_N1_TO_1):
            lo, hi = (0.0, 6.0) if fused == aft.RELU6 else (-1.0, 1.0)
            lo_n = self.add_init(base + "/clip_min", np.array(lo, np.float32))
            hi_n = self.add_init(base + "/clip_max", np.array(hi, np.float32))
            self.nodes.append(helper.make_node("Clip", [pre, lo_n, hi_n], [out_name], name=base + "/clip"))
        elif fused == aft.TANH:
            self.nodes.append(helper.make_node("Tanh", [pre], [out_name], name=base + "/tanh"))
        else:
            raise ConversionError(f"{base}: unsupported fused activation {fused}")
        return pre

    def options(self, op, cls):  # type: ignore[no-untyped-def]
        tab = op.BuiltinOptions()
        o = cls()
        o.Init(tab.Bytes, tab.Pos)
        return o

    def shape(self, idx: int) -> tuple[int, ...]:
        t = self.g.Tensors(idx)
        return tuple(int(s) for s in t.ShapeAsNumpy()) if t.ShapeLength() else ()

    # -- ops -------------------------------------------------------------------------------
    def conv(self, op, ins: list[int], out: int, depthwise: bool) -> None:  # type: ignore[no-untyped-def]
        tfl = self.tfl
        o = self.options(op, tfl.DepthwiseConv2DOptions if depthwise else tfl.Conv2DOptions)
        x_shape, y_shape = self.shape(ins[0]), self.shape(out)
        w = self.constant(ins[1]).astype(np.float32)
        if depthwise:
            # TFLite depthwise kernel: [1, kh, kw, C * multiplier] -> ONNX [C * m, 1, kh, kw]
            if o.DepthMultiplier() != 1 and w.shape[3] != x_shape[3] * o.DepthMultiplier():
                raise ConversionError("unexpected depthwise kernel shape")
            w_onnx = np.ascontiguousarray(w.transpose(3, 0, 1, 2))
            group = x_shape[3]
        else:
            # TFLite conv kernel: OHWI -> ONNX OIHW
            w_onnx = np.ascontiguousarray(w.transpose(0, 3, 1, 2))
            group = 1
        kh, kw = w_onnx.shape[2], w_onnx.shape[3]
        sh, sw = o.StrideH(), o.StrideW()
        dh, dw = o.DilationHFactor(), o.DilationWFactor()
        if o.Padding() == _BUILTIN_SAME:
            t, b, oh = _same_pads(x_shape[1], kh, sh, dh)
            left, right, ow = _same_pads(x_shape[2], kw, sw, dw)
            pads = [t, left, b, right]
        elif o.Padding() == _BUILTIN_VALID:
            pads = [0, 0, 0, 0]
            oh = (x_shape[1] - (kh - 1) * dh - 1) // sh + 1
            ow = (x_shape[2] - (kw - 1) * dw - 1) // sw + 1
        else:
            raise ConversionError(f"unknown padding {o.Padding()}")
        if (oh, ow) != (y_shape[1], y_shape[2]):
            raise ConversionError(f"output size mismatch {(oh, ow)} vs {y_shape}")
        base = self.tensor_name(out)
        inputs = [self.tensor_name(ins[0]), self.add_init(base + "/W", w_onnx)]
        if len(ins) > 2 and ins[2] >= 0:
            inputs.append(self.add_init(base + "/B", self.constant(ins[2]).astype(np.float32)))
        y = self.activation(o.FusedActivationFunction(), base, base)
        self.nodes.append(
            helper.make_node(
                "Conv",
                inputs,
                [y],
                name=base + "/conv",
                kernel_shape=[kh, kw],
                strides=[sh, sw],
                dilations=[dh, dw],
                pads=pads,
                group=group,
            )
        )

    def transpose_conv_bias(self, op, ins: list[int], out: int) -> None:  # type: ignore[no-untyped-def]
        raw = op.CustomOptionsAsNumpy().tobytes()
        if len(raw) != 12:
            raise ConversionError("Convolution2DTransposeBias: expected 12 bytes of options")
        padding, stride_w, stride_h = struct.unpack("<iii", raw)
        w = self.constant(ins[1]).astype(np.float32)  # [O, kh, kw, I]
        _, kh, kw, _ = w.shape
        x_shape, y_shape = self.shape(ins[0]), self.shape(out)
        if padding == _CUSTOM_VALID:
            pads = [0, 0, 0, 0]
        elif padding == _CUSTOM_SAME:
            # TFLite transpose conv SAME: output = in * stride, total = max(k - stride, 0)
            th = max((x_shape[1] - 1) * stride_h + kh - y_shape[1], 0)
            tw = max((x_shape[2] - 1) * stride_w + kw - y_shape[2], 0)
            pads = [th // 2, tw // 2, th - th // 2, tw - tw // 2]
        else:
            raise ConversionError(f"Convolution2DTransposeBias: unknown padding {padding}")
        oh = (x_shape[1] - 1) * stride_h + kh - pads[0] - pads[2]
        ow = (x_shape[2] - 1) * stride_w + kw - pads[1] - pads[3]
        if (oh, ow) != (y_shape[1], y_shape[2]):
            raise ConversionError(f"transpose conv output size mismatch {(oh, ow)} vs {y_shape}")
        base = self.tensor_name(out)
        w_onnx = np.ascontiguousarray(w.transpose(3, 0, 1, 2))  # OHWI -> IOHW
        inputs = [self.tensor_name(ins[0]), self.add_init(base + "/W", w_onnx)]
        if len(ins) > 2 and ins[2] >= 0:
            inputs.append(self.add_init(base + "/B", self.constant(ins[2]).astype(np.float32)))
        self.nodes.append(
            helper.make_node(
                "ConvTranspose",
                inputs,
                [base],
                name=base + "/convtranspose",
                kernel_shape=[kh, kw],
                strides=[stride_h, stride_w],
                pads=pads,
            )
        )

    def pool(self, op, ins: list[int], out: int) -> None:  # type: ignore[no-untyped-def]
        o = self.options(op, self.tfl.Pool2DOptions)
        x_shape = self.shape(ins[0])
        base = self.tensor_name(out)
        x = self.tensor_name(ins[0])
        y = self.activation(o.FusedActivationFunction(), base, base)
        fh, fw = o.FilterHeight(), o.FilterWidth()
        if (fh, fw) == (x_shape[1], x_shape[2]) and o.Padding() == _BUILTIN_VALID:
            self.nodes.append(helper.make_node("GlobalAveragePool", [x], [y], name=base + "/gap"))
            return
        if o.Padding() == _BUILTIN_SAME:
            t, b, _ = _same_pads(x_shape[1], fh, o.StrideH(), 1)
            left, right, _ = _same_pads(x_shape[2], fw, o.StrideW(), 1)
            pads = [t, left, b, right]
        else:
            pads = [0, 0, 0, 0]
        self.nodes.append(
            helper.make_node(
                "AveragePool",
                [x],
                [y],
                name=base + "/avgpool",
                kernel_shape=[fh, fw],
                strides=[o.StrideH(), o.StrideW()],
                pads=pads,
                count_include_pad=0,
            )
        )

    def resize(self, op, ins: list[int], out: int) -> None:  # type: ignore[no-untyped-def]
        o = self.options(op, self.tfl.ResizeBilinearOptions)
        size = self.constant(ins[1]).astype(np.int64)
        x_shape = self.shape(ins[0])
        base = self.tensor_name(out)
        if o.HalfPixelCenters():
            ctm = "half_pixel"
        elif o.AlignCorners():
            ctm = "align_corners"
        else:
            ctm = "asymmetric"
        sizes = self.add_init(base + "/sizes", np.array([x_shape[0], x_shape[3], size[0], size[1]], np.int64))
        self.nodes.append(
            helper.make_node(
                "Resize",
                [self.tensor_name(ins[0]), "", "", sizes],
                [base],
                name=base + "/resize",
                mode="linear",
                coordinate_transformation_mode=ctm,
            )
        )

    def binary(self, op, kind: str, ins: list[int], out: int) -> None:  # type: ignore[no-untyped-def]
        o = self.options(op, self.tfl.AddOptions if kind == "Add" else self.tfl.MulOptions)
        names = []
        for i in ins:
            if i in self.const or self.buffer(i) is not None:
                c = self.constant(i).astype(np.float32)
                if c.ndim == 4:  # NHWC constant -> NCHW
                    c = np.ascontiguousarray(c.transpose(0, 3, 1, 2))
                elif c.ndim == 1 and c.size > 1:  # per-channel vector -> (C, 1, 1)
                    c = c.reshape(-1, 1, 1)
                names.append(self.add_init(self.tensor_name(out) + "/const", c))
            else:
                a_shape = self.shape(i)
                if len(a_shape) != 4:
                    raise ConversionError(f"{kind}: only rank-4 activations are handled")
                names.append(self.tensor_name(i))
        base = self.tensor_name(out)
        y = self.activation(o.FusedActivationFunction(), base, base)
        self.nodes.append(helper.make_node(kind, names, [y], name=base + "/" + kind.lower()))

    # -- driver ----------------------------------------------------------------------------
    def convert(self) -> onnx.ModelProto:
        g = self.g
        if g.InputsLength() != 1 or g.OutputsLength() != 1:
            raise ConversionError("expected one input and one output")
        in_idx, out_idx = g.Inputs(0), g.Outputs(0)
        self.names[in_idx] = INPUT_NAME
        self.names[out_idx] = OUTPUT_NAME
        self._used.update({INPUT_NAME, OUTPUT_NAME})
        unary = {"HARD_SWISH": "HardSwish", "RELU": "Relu", "LOGISTIC": "Sigmoid", "TANH": "Tanh"}
        for k in range(g.OperatorsLength()):
            op = g.Operators(k)
            oc = self.model.OperatorCodes(op.OpcodeIndex())
            code = max(oc.BuiltinCode(), oc.DeprecatedBuiltinCode())
            name = self.op_names.get(code, str(code))
            ins = [op.Inputs(j) for j in range(op.InputsLength())]
            outs = [op.Outputs(j) for j in range(op.OutputsLength())]
            out = outs[0]
            if name == "DEQUANTIZE":
                src = self.buffer(ins[0])
                if src is None:
                    raise ConversionError("DEQUANTIZE of a non-constant tensor")
                if self.g.Tensors(ins[0]).Type() != _TFL_FLOAT16:
                    raise ConversionError("only fp16 DEQUANTIZE is handled")
                self.const[out] = src.astype(np.float32)
            elif name == "CONV_2D":
                self.conv(op, ins, out, depthwise=False)
            elif name == "DEPTHWISE_CONV_2D":
                self.conv(op, ins, out, depthwise=True)
            elif name in unary:
                self.nodes.append(
                    helper.make_node(
                        unary[name],
                        [self.tensor_name(ins[0])],
                        [self.tensor_name(out)],
                        name=self.tensor_name(out) + "/" + unary[name].lower(),
                    )
                )
            elif name in ("ADD", "MUL"):
                self.binary(op, name.capitalize(), ins, out)
            elif name == "AVERAGE_POOL_2D":
                self.pool(op, ins, out)
            elif name == "RESIZE_BILINEAR":
                self.resize(op, ins, out)
            elif name == "CUSTOM" and oc.CustomCode() == b"Convolution2DTransposeBias":
                self.transpose_conv_bias(op, ins, out)
            else:
                raise ConversionError(f"operator {name} is not handled")

        in_shape = self.shape(in_idx)
        out_shape = self.shape(out_idx)
        nchw = lambda s: [s[0], s[3], s[1], s[2]]  # noqa: E731
        graph = helper.make_graph(
            self.nodes,
            "selfie_segmentation",
            [helper.make_tensor_value_info(INPUT_NAME, TensorProto.FLOAT, nchw(in_shape))],
            [helper.make_tensor_value_info(OUTPUT_NAME, TensorProto.FLOAT, nchw(out_shape))],
            initializer=[numpy_helper.from_array(v, k) for k, v in self.inits.items()],
        )
        model = helper.make_model(
            graph,
            opset_imports=[helper.make_opsetid("", OPSET)],
            producer_name="gpubackend tools/convert_selfie_tflite.py",
            producer_version="1",
            doc_string=(
                "MediaPipe selfie segmentation (general, 256x256), converted from "
                "mediapipe==0.10.14 selfie_segmentation.tflite (Apache-2.0). Input 'input': "
                "1x3x256x256 float RGB in [0,1], NCHW. Output 'mask': 1x1x256x256 person probability."
            ),
        )
        model.ir_version = 8
        onnx.checker.check_model(model, full_check=True)
        return model


def convert(tflite_bytes: bytes) -> onnx.ModelProto:
    """Convert the selfie segmentation ``.tflite`` bytes to an ONNX model (NCHW, fp32)."""
    return _Converter(tflite_bytes).convert()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tflite", type=Path, help="path to selfie_segmentation.tflite")
    ap.add_argument("output", type=Path, help="ONNX file to write (a .sha256 sidecar is written too)")
    args = ap.parse_args(argv)
    try:
        model = convert(args.tflite.read_bytes())
    except (OSError, ConversionError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    data = model.SerializeToString()
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_bytes(data)
    digest = hashlib.sha256(data).hexdigest()
    args.output.with_name(args.output.name + ".sha256").write_text(f"{digest}  {args.output.name}\n")
    ops: dict[str, int] = {}
    for n in model.graph.node:
        ops[n.op_type] = ops.get(n.op_type, 0) + 1
    print(f"wrote {args.output} ({len(data)} bytes, sha256 {digest})")
    print("ops: " + ", ".join(f"{k} x{v}" for k, v in sorted(ops.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
