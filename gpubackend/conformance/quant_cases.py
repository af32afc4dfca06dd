"""int8 (QDQ) conformance cases: one quantized layer per case, as onnxruntime's quantizer writes
it (x -> QuantizeLinear -> DequantizeLinear -> op with DequantizeLinear(int8 weight) ->
QuantizeLinear -> DequantizeLinear), under the int8 kernels' own names (``conv_q8``, ...,
``quantize``), so a driver that unpacks integers wrongly loses only those kernels. The output is
the dequantized tensor; the tolerance is one output quantization step."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from onnx import helper

from .cases import CaseData, _Matrix, _round, _seed, make_case_data

Y_SCALE = np.float32(0.05)


def _layer_builder(name: str, op: str, attrs: dict[str, Any], x_shape: tuple[int, ...],
                   w_shape: tuple[int, ...], w_axis: int, co: int, bias: bool) -> Callable[[str], CaseData]:
    def build(precision: str) -> CaseData:
        rng = np.random.default_rng(_seed(name))
        x = _round((rng.standard_normal(x_shape) * 2).astype(np.float32), precision)
        # 7-bit weights (onnxruntime's reduce_range): the cpu path's onnxruntime u8s8 kernels
        # saturate int16 pair sums on x86 without VNNI with full 8-bit weights
        wq = rng.integers(-64, 64, w_shape).astype(np.int8)
        wq.reshape(-1)[:2] = (-64, 63)
        n_scales = w_shape[w_axis]
        consts: dict[str, np.ndarray] = {
            "wq": wq, "ws": ((rng.random(n_scales) + 0.5) * 4e-3).astype(np.float32),
            "xs": np.float32(0.03), "xz": np.uint8(120), "ys": Y_SCALE, "yz": np.uint8(128)}
        inputs = ["xd", "w"]
        extra = []
        if bias:  # int32, scale x_scale * w_scale, as onnxruntime's quantizer writes it
            bscale = (consts["xs"] * np.broadcast_to(consts["ws"], (co,))).astype(np.float32)
            consts["bq"] = np.rint(rng.standard_normal(co) * 0.2 / bscale).astype(np.int32)
            consts["bs"] = bscale
            extra.append(helper.make_node("DequantizeLinear", ["bq", "bs"], ["b"], name="dq_b", axis=0))
            inputs.append("b")
        nodes = extra + [
            helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"], name="q_x"),
            helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"], name="dq_x"),
            helper.make_node("DequantizeLinear", ["wq", "ws"], ["w"], name="dq_w", axis=w_axis),
            helper.make_node(op, inputs, ["acc"], name="n0", **attrs),
            helper.make_node("QuantizeLinear", ["acc", "ys", "yz"], ["yq"], name="q_y"),
            helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"], name="dq_y"),
        ]
        data = make_case_data(nodes, {"x": x}, consts, ["y"], name)
        data.tolerance = (0.0, float(Y_SCALE) * 1.001)  # one output step (atol scales with max(1, |y|))
        return data

    return build


def add(m: _Matrix, full: bool) -> None:
    """Register the int8 cases into the conformance matrix."""
    layers = [
        ("conv_q8", "Conv", "3x3_pads_stride2/1x5x9x7", {"pads": [1, 0, 2, 1], "strides": [2, 2]}, (1, 5, 9, 7),
         (6, 5, 3, 3), 0, 6, True, True),
        ("conv_q8", "Conv", "3x3_group2/1x6x5x5", {"group": 2, "pads": [1, 1, 1, 1]}, (1, 6, 5, 5), (10, 3, 3, 3),
         0, 10, True, False),
        ("conv1x1_q8", "Conv", "1x1/1x7x5x5", {}, (1, 7, 5, 5), (10, 7, 1, 1), 0, 10, True, True),
        ("depthwise_q8", "Conv", "3x3_stride2/1x8x9x9", {"group": 8, "pads": [1, 1, 1, 1], "strides": [2, 2]},
         (1, 8, 9, 9), (8, 1, 3, 3), 0, 8, True, True),
        ("depthwise_q8", "Conv", "5x5/1x6x7x7", {"group": 6, "pads": [2, 2, 2, 2]}, (1, 6, 7, 7), (6, 1, 5, 5), 0, 6,
         True, False),
        ("convtranspose_q8", "ConvTranspose", "2x2_stride2/1x6x4x5", {"strides": [2, 2]}, (1, 6, 4, 5),
         (6, 5, 2, 2), 1, 5, True, True),
        ("gemm_q8", "Gemm", "m3_k20_n13_tb1", {"transB": 1}, (3, 20), (13, 20), 0, 13, True, True),
        ("matmul_q8", "MatMul", "a4x12_w12x7", {}, (4, 12), (12, 7), 1, 7, False, True),
    ]
    for kernel, op, name, attrs, x_shape, w_shape, w_axis, co, bias, quick in layers:
        full_name = f"{kernel}/{name}"
        # not in --quick: the cpu path's onnxruntime engine is up to 30 output steps away from ONNX's
        # exact result on the conv/gemm layers here (its int8 kernels; the numpy engine is exact),
        # which the harness's cpu self-check would report as a failure
        m.add_graph(name, kernel, op, _layer_builder(full_name, op, attrs, x_shape, w_shape, w_axis, co, bias),
                    quick=quick and op in ("MatMul",))
    for per_axis in (False, True):
        name = f"{'per_channel' if per_axis else 'per_tensor'}/2x6x5x4"
        m.add_graph(name, "quantize", "QuantizeLinear", _qdq_builder(f"quantize/{name}", per_axis), quick=True)


def _qdq_builder(name: str, per_axis: bool) -> Callable[[str], CaseData]:
    """QuantizeLinear -> DequantizeLinear on an activation, with infinities and exact ties."""
    def build(precision: str) -> CaseData:
        rng = np.random.default_rng(_seed(name))
        x = (rng.standard_normal((2, 6, 5, 4)) * 40).astype(np.float32)
        x[0, 0, 0, :2] = (np.inf, -np.inf)  # NaN has no integer; onnxruntime and ONNX's reference differ
        x[0, 1, 0, :4] = (0.25, 0.75, -0.25, -0.75)
        x = _round(x, precision)
        scale = np.linspace(0.5, 1.5, 6).astype(np.float32) if per_axis else np.float32(0.5)
        zp = (np.arange(6) * 7 % 20).astype(np.int8) if per_axis else np.int8(3)
        nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="q"),
                 helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], name="dq")]
        data = make_case_data(nodes, {"x": x}, {"s": np.asarray(scale), "z": np.asarray(zp)}, ["y"], name)
        # fp16 storage rounds x before it is quantized: one step there, exact in fp32
        data.tolerance = (0.0, 0.0) if precision == "fp32" else (0.0, float(np.max(scale)) * 1.001)
        return data

    return build


__all__ = ["add"]
