"""A tiny TFLite flatbuffer writer for tests: models with int8 per-axis quantized weights, built with the
``tflite`` package's generated builder functions (no TensorFlow needed)."""

from __future__ import annotations

import sys

import flatbuffers
import numpy as np
import tflite  # noqa: F401  (registers the tflite.* generated modules)

_TYPES = {np.dtype(np.float32): 0, np.dtype(np.int32): 2, np.dtype(np.int8): 9}


def _m(name: str):  # type: ignore[no-untyped-def]
    return sys.modules[f"tflite.{name}"]


def int8_conv_model(w_q: np.ndarray, scales: np.ndarray, zero_points: np.ndarray, bias: np.ndarray,
                    in_shape: tuple[int, int, int, int], out_shape: tuple[int, int, int, int], stride: int,
                    same: bool, relu6: bool) -> bytes:
    """x (float NHWC) -> CONV_2D(DEQUANTIZE(int8 OHWI weights, per-axis on O), float bias) -> y."""
    b = flatbuffers.Builder(4096)

    def vec(arr: np.ndarray) -> int:
        return b.CreateNumpyVector(np.ascontiguousarray(arr))

    def buffer(data: np.ndarray | None) -> int:
        B = _m("Buffer")
        v = vec(np.frombuffer(data.tobytes(), np.uint8)) if data is not None else None
        B.BufferStart(b)
        if v is not None:
            B.BufferAddData(b, v)
        return B.BufferEnd(b)

    def tensor(name: str, shape: tuple[int, ...], dtype: np.dtype, buf: int, quant: int | None = None) -> int:
        T = _m("Tensor")
        n, s = b.CreateString(name), vec(np.array(shape, np.int32))
        T.TensorStart(b)
        T.TensorAddShape(b, s)
        T.TensorAddType(b, _TYPES[np.dtype(dtype)])
        T.TensorAddBuffer(b, buf)
        T.TensorAddName(b, n)
        if quant is not None:
            T.TensorAddQuantization(b, quant)
        return T.TensorEnd(b)

    def opcode(code: int) -> int:
        C = _m("OperatorCode")
        C.OperatorCodeStart(b)
        C.OperatorCodeAddDeprecatedBuiltinCode(b, code)
        C.OperatorCodeAddBuiltinCode(b, code)
        C.OperatorCodeAddVersion(b, 1)
        return C.OperatorCodeEnd(b)

    def operator(idx: int, ins: list[int], outs: list[int], opt_type: int = 0, opt: int | None = None) -> int:
        O = _m("Operator")
        i, o = vec(np.array(ins, np.int32)), vec(np.array(outs, np.int32))
        O.OperatorStart(b)
        O.OperatorAddOpcodeIndex(b, idx)
        O.OperatorAddInputs(b, i)
        O.OperatorAddOutputs(b, o)
        if opt is not None:
            O.OperatorAddBuiltinOptionsType(b, opt_type)
            O.OperatorAddBuiltinOptions(b, opt)
        return O.OperatorEnd(b)

    def vector_of(start, items: list[int]) -> int:  # type: ignore[no-untyped-def]
        start(b, len(items))
        for it in reversed(items):
            b.PrependUOffsetTRelative(it)
        return b.EndVector()

    Q = _m("QuantizationParameters")
    sc, zp = vec(scales.astype(np.float32)), vec(zero_points.astype(np.int64))
    Q.QuantizationParametersStart(b)
    Q.QuantizationParametersAddScale(b, sc)
    Q.QuantizationParametersAddZeroPoint(b, zp)
    Q.QuantizationParametersAddQuantizedDimension(b, 0)
    quant = Q.QuantizationParametersEnd(b)

    buffers = [buffer(None), buffer(w_q.astype(np.int8)), buffer(bias.astype(np.float32))]
    tensors = [tensor("x", in_shape, np.float32, 0), tensor("w_int8", w_q.shape, np.int8, 1, quant),
               tensor("w", w_q.shape, np.float32, 0), tensor("bias", bias.shape, np.float32, 2),
               tensor("y", out_shape, np.float32, 0)]
    C2 = _m("Conv2DOptions")
    C2.Conv2DOptionsStart(b)
    C2.Conv2DOptionsAddPadding(b, 0 if same else 1)
    C2.Conv2DOptionsAddStrideW(b, stride)
    C2.Conv2DOptionsAddStrideH(b, stride)
    C2.Conv2DOptionsAddDilationWFactor(b, 1)
    C2.Conv2DOptionsAddDilationHFactor(b, 1)
    C2.Conv2DOptionsAddFusedActivationFunction(b, 3 if relu6 else 0)
    conv_opt = C2.Conv2DOptionsEnd(b)
    ops = [operator(0, [1], [2]), operator(1, [0, 2, 3], [4], opt_type=1, opt=conv_opt)]
    codes = [opcode(6), opcode(3)]  # DEQUANTIZE, CONV_2D

    S = _m("SubGraph")
    tv = vector_of(S.SubGraphStartTensorsVector, tensors)
    ov = vector_of(S.SubGraphStartOperatorsVector, ops)
    iv, outv = vec(np.array([0], np.int32)), vec(np.array([4], np.int32))
    name = b.CreateString("main")
    S.SubGraphStart(b)
    S.SubGraphAddTensors(b, tv)
    S.SubGraphAddInputs(b, iv)
    S.SubGraphAddOutputs(b, outv)
    S.SubGraphAddOperators(b, ov)
    S.SubGraphAddName(b, name)
    sub = S.SubGraphEnd(b)

    M = _m("Model")
    codes_v = vector_of(M.ModelStartOperatorCodesVector, codes)
    subs_v = vector_of(M.ModelStartSubgraphsVector, [sub])
    bufs_v = vector_of(M.ModelStartBuffersVector, buffers)
    desc = b.CreateString("gpubackend test: int8 per-axis weights")
    M.ModelStart(b)
    M.ModelAddVersion(b, 3)
    M.ModelAddOperatorCodes(b, codes_v)
    M.ModelAddSubgraphs(b, subs_v)
    M.ModelAddDescription(b, desc)
    M.ModelAddBuffers(b, bufs_v)
    model = M.ModelEnd(b)
    b.Finish(model, file_identifier=b"TFL3")
    return bytes(b.Output())
