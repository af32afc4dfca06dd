"""Op tests written once: each case runs one node on the GPU paths and precisions it lists
against ``fallback`` (the CPU reference), with every path's outputs poisoned (``Path.poison``: an
element no kernel writes stays NaN), per-precision tolerances and awkward shapes.

- ``CASES``: ONNX semantics (pads, auto_pad, output_padding, ceil_mode, Resize modes, axes, ...) on
  every GPU path in fp32 and fp16; a case lists the paths expected to decline it (a case a path
  should run but declines fails, and so does one it runs but is listed as declining).
- ``KERNEL_CASES``: each kernel family of a path on awkward shapes (channels not a multiple of 4,
  batch 2, broadcasts, fused activations), naming the kernel the path must choose. These moved here
  from ``test_path_<key>.py`` and run on the path(s) they were written for (``paths``), so the
  default suite costs what it did.
- the elementwise table (``gpubackend/ops/elementwise.py``): every entry on every path and precision
  with NaN / Inf / +-0 / +-1e38 inputs.

The error measure is the project's: max|got - ref| / max(1, max|ref|) within 1e-4 (fp32) or 1e-2
(fp16). A case moved from a per-path file also keeps that file's own measure (``metric``: "max",
max|got - ref| / max|ref|; "norm", the norm-relative error; "gles2", the norm-relative error within
1e-5 in fp32 plus every element within 1e-4). To add a case, append it to a table.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import gpubackend
from gpubackend import fallback
from gpubackend.graph import Graph, Node
from gpubackend.ops import elementwise as ew
from gpubackend.paths import path_module
from gpubackend.paths.base import RunStats

GPU_PATHS = ("gles31", "vulkan", "gles3", "gles2")
PRECISIONS = ("fp32", "fp16")
TOL = {"fp32": 1e-4, "fp16": 1e-2}  # max|got - ref| / max(1, max|ref|)


@dataclass(frozen=True)
class Case:
    id: str
    op: str
    attrs: dict[str, Any]
    runtime: dict[str, Any]  # fed inputs (name -> shape, drawn from N(0, 1), or an array), before consts
    consts: dict[str, np.ndarray] = field(default_factory=dict)
    order: tuple[str, ...] | None = None  # input order when not runtime then consts ("" = absent)
    opset: int = 17
    declines: frozenset[str] = frozenset()  # paths that decline this case (by design, today)
    paths: tuple[str, ...] = GPU_PATHS
    precisions: tuple[str, ...] = PRECISIONS
    kernel: str | None = None  # the kernel name each listed path must choose
    metric: str = ""  # a moved case's own extra measure: "max", "norm" or "gles2" (norm 1e-5 + elementwise)
    tol: float | None = None


# ---- ONNX semantics on every path (CASES) ---------------------------------------------------------
def _w(*shape: int, seed: int = 1) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(shape) * 0.5).astype(np.float32)


def _i64(*v: int) -> np.ndarray:
    return np.array(v, np.int64)


def _f32(*v: float) -> np.ndarray:
    return np.array(v, np.float32)


CASES = [
    # Conv: awkward channel counts, asymmetric pads, strides, dilations, groups, auto_pad, batch 2
    Case("conv_pads_asym_stride2", "Conv", {"pads": [1, 0, 2, 1], "strides": [2, 2]}, {"x": (1, 3, 9, 7)},
         {"w": _w(5, 3, 3, 3), "b": _w(5)}),
    Case("conv_dilated_batch2", "Conv", {"dilations": [2, 2], "pads": [2, 2, 2, 2]}, {"x": (2, 5, 6, 6)},
         {"w": _w(6, 5, 3, 3)}),
    Case("conv_group2_leakyrelu", "Conv", {"group": 2, "_act": ("LeakyRelu", {"alpha": 0.2})}, {"x": (1, 6, 5, 5)},
         {"w": _w(10, 3, 3, 3), "b": _w(10)}),
    Case("conv_depthwise_same_upper_hardsigmoid", "Conv",
         {"group": 5, "auto_pad": "SAME_UPPER", "strides": [2, 2],
          "_act": ("HardSigmoid", {"alpha": 0.3, "beta": 0.4})}, {"x": (1, 5, 8, 7)}, {"w": _w(5, 1, 4, 4)}),
    Case("conv_same_lower_even_kernel_clip", "Conv", {"auto_pad": "SAME_LOWER", "_act": ("Clip", {"min": -0.2,
                                                                                               "max": 0.3})},
         {"x": (1, 3, 6, 5)}, {"w": _w(4, 3, 2, 2)}),
    Case("conv_1x1_batch2", "Conv", {}, {"x": (2, 7, 1, 1)}, {"w": _w(9, 7, 1, 1), "b": _w(9)}),
    # ConvTranspose: output_padding with explicit pads, with SAME_UPPER, and output_shape
    Case("convtranspose_output_padding", "ConvTranspose", {"strides": [2, 2], "pads": [1, 1, 1, 1],
                                                           "output_padding": [1, 1]},
         {"x": (1, 3, 4, 5)}, {"w": _w(3, 5, 3, 3), "b": _w(5)}),
    Case("convtranspose_same_upper_output_padding", "ConvTranspose",
         {"strides": [2, 2], "auto_pad": "SAME_UPPER", "output_padding": [1, 1]},
         {"x": (1, 2, 3, 4)}, {"w": _w(2, 3, 3, 3)}),
    Case("convtranspose_output_shape_group2", "ConvTranspose",
         {"strides": [2, 2], "output_shape": [9, 7], "group": 2}, {"x": (1, 4, 4, 3)}, {"w": _w(4, 3, 3, 3)},
         declines=frozenset({"gles3"})),
    # pooling
    Case("maxpool_ceil_mode", "MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1},
         {"x": (1, 5, 8, 8)}),
    Case("maxpool_same_upper_dilated", "MaxPool", {"kernel_shape": [2, 3], "auto_pad": "SAME_UPPER",
                                                   "dilations": [2, 1]}, {"x": (2, 3, 7, 6)}),
    Case("avgpool_count_include_pad", "AveragePool", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1],
                                                      "count_include_pad": 1}, {"x": (1, 6, 5, 7)}),
    Case("avgpool_same_lower_stride2", "AveragePool", {"kernel_shape": [3, 3], "strides": [2, 2],
                                                       "auto_pad": "SAME_LOWER"}, {"x": (1, 3, 7, 6)}),
    Case("globalavgpool_odd", "GlobalAveragePool", {}, {"x": (2, 5, 3, 7)}),
    # linear algebra
    Case("gemm_transb_alpha_beta", "Gemm", {"transB": 1, "alpha": 0.5, "beta": 2.0}, {"a": (3, 7)},
         {"b": _w(5, 7), "c": _w(5)}),
    Case("matmul_const_b", "MatMul", {}, {"a": (5, 6)}, {"b": _w(6, 3)}),
    # resize
    Case("resize_linear_half_pixel_x2", "Resize", {"mode": "linear"}, {"x": (1, 3, 4, 5)},
         {"scales": _f32(1, 1, 2, 2)}, order=("x", "", "scales")),
    Case("resize_nearest_asymmetric_sizes", "Resize",
         {"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"},
         {"x": (1, 5, 3, 4)}, {"sizes": _i64(1, 5, 7, 9)}, order=("x", "", "", "sizes")),
    Case("resize_linear_align_corners", "Resize", {"mode": "linear", "coordinate_transformation_mode": "align_corners"},
         {"x": (2, 2, 3, 3)}, {"scales": _f32(1, 1, 2, 3)}, order=("x", "", "scales")),
    # a fractional scale * length (3 x 2.5 = 7.5): ONNX's reference divides by 7.5 - 1, not 7 - 1
    # (onnxruntime does the latter)
    Case("resize_linear_align_corners_fractional", "Resize",
         {"mode": "linear", "coordinate_transformation_mode": "align_corners"},
         {"x": (1, 2, 3, 4)}, {"scales": _f32(1, 1, 2.5, 0.6)}, order=("x", "", "scales")),
    Case("upsample_nearest_x3_opset9", "Upsample", {"mode": "nearest"}, {"x": (1, 3, 2, 3)},
         {"scales": _f32(1, 1, 3, 3)}, opset=9),
    # axes
    Case("concat_channels_3_5", "Concat", {"axis": 1}, {"a": (1, 3, 4, 4), "b": (1, 5, 4, 4)}),
    Case("softmax_channels", "Softmax", {"axis": 1}, {"x": (2, 6, 3, 2)}),
    Case("softmax_last_axis", "Softmax", {"axis": -1}, {"x": (3, 7)}),
    # loops past 2048 steps: gles2's loop counters were mediump ints, so float(i) ran in fp16 on Mesa
    Case("logsoftmax_long_axis", "LogSoftmax", {"axis": -1}, {"x": (1, 12, 2100)}),
    Case("reducemax_long_axis", "ReduceMax", {"axes": [-1]}, {"x": (1, 3, 4000)}, opset=13),
    Case("pad_reflect", "Pad", {"mode": "reflect"}, {"x": (1, 3, 5, 6)}, {"pads": _i64(0, 0, 1, 2, 0, 0, 2, 1)}),
    Case("pad_constant_value", "Pad", {"mode": "constant"}, {"x": (1, 5, 3, 4)},
         {"pads": _i64(0, 0, 2, 0, 0, 0, 1, 3), "value": _f32(1.5)}),
    Case("reducemean_hw_keepdims", "ReduceMean", {"axes": [-2, -1]}, {"x": (2, 5, 3, 4)}, opset=13),
    Case("reducesum_channels_axes_input", "ReduceSum", {"keepdims": 0}, {"x": (1, 6, 2, 3)}, {"axes": _i64(1)}),
    Case("reducemax_axes_0_2", "ReduceMax", {"keepdims": 0}, {"x": (3, 4, 7)}, {"axes": _i64(0, 2)}, opset=18),
    Case("reducelogsumexp_last", "ReduceLogSumExp", {}, {"x": (2, 5, 9)}, {"axes": _i64(-1)}, opset=18),
    Case("reducel2_rank5_all", "ReduceL2", {}, {"x": (2, 1, 3, 2, 5)}, opset=18,
         declines=frozenset({"gles2"})),
    Case("softmax_axis_not_packed", "Softmax", {"axis": 2}, {"x": (2, 6, 3, 5)}),
    Case("logsoftmax_axis0", "LogSoftmax", {"axis": 0}, {"x": (3, 7)}),
    Case("conv1d_pads_stride", "Conv", {"pads": [2, 1], "strides": [2]}, {"x": (1, 3, 11)}, {"w": _w(4, 3, 3)},
         declines=frozenset({"gles31", "vulkan", "gles3"})),
    Case("transpose_nhwc", "Transpose", {"perm": [0, 2, 3, 1]}, {"x": (1, 5, 3, 2)}),
    # layout ops as index maps on gles31/vulkan (compute_ops): negative steps, rank 5, const indices
    Case("slice_steps_negative", "Slice", {}, {"x": (2, 5, 7, 6)},
         {"starts": _i64(1, -1, 0), "ends": _i64(5, -8, 6), "axes": _i64(1, 3, 2), "steps": _i64(2, -2, 3)}),
    Case("transpose_rank5", "Transpose", {"perm": [2, 0, 3, 1, 4]}, {"x": (1, 7, 3, 2, 5)},
         declines=frozenset({"gles2"})),
    Case("reshape_to_rank5", "Reshape", {}, {"x": (1, 6, 10)}, {"shape": _i64(1, 6, 2, 1, 5)}),
    Case("gather_const_indices", "Gather", {"axis": 2}, {"x": (2, 3, 5, 4)}, {"indices": _i64(4, 0, -1)},
         declines=frozenset({"gles2"})),
    Case("expand_rank_up", "Expand", {}, {"x": (3, 1, 5)}, {"shape": _i64(2, 1, 4, 5)},
         declines=frozenset({"gles2"})),
    Case("tile_3d", "Tile", {}, {"x": (2, 3, 5)}, {"repeats": _i64(2, 1, 3)}, declines=frozenset({"gles2"})),
    Case("depthtospace_crd", "DepthToSpace", {"blocksize": 2, "mode": "CRD"}, {"x": (1, 8, 3, 2)},
         declines=frozenset({"gles2"})),
    # standalone BatchNormalization (channel packed or not) and attention-style rank-4 MatMul
    Case("batchnorm_rank4", "BatchNormalization", {"epsilon": 1e-3}, {"x": (2, 5, 3, 4)},
         {"scale": _w(5), "b": _w(5, seed=2), "mean": _w(5, seed=3), "var": np.abs(_w(5, seed=4)) + 0.5}),
    Case("batchnorm_rank3", "BatchNormalization", {}, {"x": (2, 5, 7)},
         {"scale": _w(5), "b": _w(5, seed=2), "mean": _w(5, seed=3), "var": np.abs(_w(5, seed=4)) + 0.5}),
    Case("matmul_rank4_broadcast", "MatMul", {}, {"a": (1, 6, 5, 7), "b": (2, 1, 7, 3)}),
    Case("spacetodepth", "SpaceToDepth", {"blocksize": 2}, {"x": (1, 3, 4, 6)}, declines=frozenset({"gles2"})),
    # general index kernels on gles3 (index_ops): views, any-axis concat, normalisations, n-ary ops
    Case("reshape_across_layouts", "Reshape", {}, {"x": (1, 12, 7)}, {"shape": _i64(1, 3, 4, 7)}),
    Case("flatten_axis2", "Flatten", {"axis": 2}, {"x": (2, 3, 4, 5)}),
    Case("concat_axis2_3inputs", "Concat", {"axis": 2}, {"a": (1, 3, 4, 5), "b": (1, 3, 1, 5), "c": (1, 3, 2, 5)}),
    Case("layernorm_last_axis", "LayerNormalization", {"axis": -1}, {"x": (1, 6, 20)},
         {"scale": _w(20, seed=2), "bias": _w(20, seed=3)},
         declines=frozenset({"gles2"})),
    Case("instancenorm", "InstanceNormalization", {}, {"x": (2, 3, 4, 5)}, {"scale": _w(3, seed=2), "b": _w(3)},
         declines=frozenset({"gles2"})),
    Case("sum_3_inputs_broadcast", "Sum", {}, {"a": (2, 3, 4), "b": (3, 1), "c": (4,)}),
    Case("max_3_inputs", "Max", {}, {"a": (2, 3, 4), "b": (2, 3, 4), "c": (4,)}),
    Case("mean_three_inputs_broadcast", "Mean", {}, {"a": (2, 3, 4), "b": (3, 1), "c": (4,)}),
    Case("layernorm_rank4_axis2", "LayerNormalization", {"axis": 2}, {"x": (2, 5, 3, 4)},
         {"scale": _w(3, 4), "b": _w(4, seed=2)}, declines=frozenset({"gles3", "gles2"})),
    Case("matmul_3d_const_b", "MatMul", {}, {"a": (1, 6, 10)}, {"b": _w(10, 9)}),
]



# ---- per-kernel cases (moved from test_path_<key>.py) --------------------------------------------------
_rng = np.random.default_rng(20261121)


def _u(*shape: int, lo: float = -1.0, hi: float = 1.0) -> np.ndarray:
    return _rng.uniform(lo, hi, shape).astype(np.float32)


def _n(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (_rng.standard_normal(shape) * scale).astype(np.float32)


def _node(id: str, kernel: str | None, op: str, inputs: list[np.ndarray | None], attrs: dict[str, Any],
          consts: tuple[int, ...] = (1, 2), **kw: Any) -> Case:
    """A case from the node's inputs in order (None: absent); ``consts``: which are graph constants."""
    names = tuple(f"in{i}" if a is not None else "" for i, a in enumerate(inputs))
    runtime = {n: a for i, (n, a) in enumerate(zip(names, inputs)) if a is not None and i not in consts}
    constant = {n: a for i, (n, a) in enumerate(zip(names, inputs)) if a is not None and i in consts}
    return Case(id, op, attrs, runtime, constant, order=names, kernel=kernel, **kw)


def _vk(id: str, kernel: str, op: str, inputs: list[np.ndarray | None], attrs: dict[str, Any],
        consts: tuple[int, ...] = (1, 2)) -> Case:
    return _node(id, kernel, op, inputs, attrs, consts, paths=("vulkan",), metric="norm")


def _conv(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None, **attrs: Any) -> tuple:
    return "Conv", [x, w, b], attrs


VULKAN_CASES = [
    _vk("conv3x3_pad_stride2_relu", "conv", *_conv(_u(1, 5, 11, 9), _u(7, 5, 3, 3), _u(7), kernel_shape=[3, 3],
                                                   pads=[1, 1, 1, 1], strides=[2, 2], _act=("Relu", {}))),
    _vk("conv_asym_pad_dilation_batch2", "conv", *_conv(_u(2, 3, 10, 13), _u(6, 3, 3, 2), _u(6), kernel_shape=[3, 2],
                                                        pads=[2, 0, 1, 1], dilations=[2, 3], strides=[1, 2])),
    _vk("conv_grouped_hardswish", "conv", *_conv(_u(1, 6, 7, 7), _u(9, 2, 3, 3), _u(9), kernel_shape=[3, 3], group=3,
                                                 pads=[1, 1, 1, 1], _act=("HardSwish", {}))),
    _vk("conv_1x1_spatial_no_bias", "conv", *_conv(_u(1, 13, 1, 1), _u(17, 13, 3, 3), None, kernel_shape=[3, 3],
                                                   pads=[1, 1, 1, 1])),
    _vk("conv_same_upper_leaky", "conv", *_conv(_u(1, 4, 8, 5), _u(5, 4, 4, 4), _u(5), kernel_shape=[4, 4],
                                                auto_pad="SAME_UPPER", strides=[2, 2],
                                                _act=("LeakyRelu", {"alpha": 0.1}))),
    _vk("conv_runtime_weights", "conv", "Conv", [_u(2, 5, 6, 7), _u(6, 5, 3, 3), _u(6)],
        {"kernel_shape": [3, 3], "pads": [1, 0, 1, 2]}, ()),
    _vk("conv1x1_clip", "conv1x1", *_conv(_u(2, 10, 5, 3), _u(7, 10, 1, 1), _u(7), kernel_shape=[1, 1],
                                          _act=("Clip", {"min": -0.5, "max": 0.5}))),
    _vk("conv1x1_sigmoid_c1", "conv1x1", *_conv(_u(1, 3, 9, 9), _u(1, 3, 1, 1), _u(1), kernel_shape=[1, 1],
                                                _act=("Sigmoid", {}))),
    _vk("depthwise_s2_relu6", "depthwise", *_conv(_u(1, 6, 9, 11), _u(6, 1, 3, 3), _u(6), kernel_shape=[3, 3], group=6,
                                                  pads=[1, 1, 1, 1], strides=[2, 2],
                                                  _act=("Clip", {"min": 0.0, "max": 6.0}))),
    _vk("depthwise_5x5_dilated_batch2", "depthwise", *_conv(_u(2, 5, 8, 8), _u(5, 1, 5, 5), None, kernel_shape=[5, 5],
                                                            group=5, pads=[4, 4, 4, 4], dilations=[2, 2])),
    _vk("convtranspose_2x2_s2", "convtranspose", "ConvTranspose", [_u(1, 6, 5, 7), _u(6, 3, 2, 2), _u(3)],
        {"kernel_shape": [2, 2], "strides": [2, 2]}),
    _vk("convtranspose_3x3_pad_group_tanh", "convtranspose", "ConvTranspose", [_u(2, 4, 4, 5), _u(4, 3, 3, 3), _u(6)],
        {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "group": 2, "_act": ("Tanh", {})}),
    # kernel == stride, no padding: the non-overlapping taps kernel (convtranspose_tap.comp) on both compute paths
    _node("convtranspose_taps_16to1_k2s2_batch2", "convtranspose", "ConvTranspose",
          [_u(2, 16, 6, 9), _u(16, 1, 2, 2), _u(1)], {"kernel_shape": [2, 2], "strides": [2, 2]},
          paths=("gles31", "vulkan"), metric="norm"),
    _node("convtranspose_taps_k3x2_group2_hardswish", "convtranspose", "ConvTranspose",
          [_u(1, 6, 5, 7), _u(6, 5, 3, 2), _u(10)], {"kernel_shape": [3, 2], "strides": [3, 2], "group": 2,
                                                    "_act": ("HardSwish", {})},
          paths=("gles31", "vulkan"), metric="norm"),
    _vk("gemm_transb_bias", "gemm", "Gemm", [_u(3, 37), _u(11, 37), _u(11)], {"transB": 1}),
    _vk("gemm_alpha_beta_hardsigmoid", "gemm", "Gemm", [_u(5, 6), _u(6, 9), _u(9)],
        {"alpha": 0.5, "beta": 2.0, "_act": ("HardSigmoid", {"alpha": 0.3, "beta": 0.4})}),
    _vk("matmul_const_b_rank3", "matmul", "MatMul", [_u(2, 5, 7), _u(7, 6)], {}),
    _vk("matmul_runtime_batched", "matmul", "MatMul", [_u(3, 5, 7), _u(3, 7, 9)], {}, ()),
    _vk("add_broadcast_channels", "binary", "Add", [_u(2, 5, 4, 3), _u(1, 5, 1, 1)], {}, ()),
    _vk("mul_se_scale", "binary", "Mul", [_u(1, 7, 6, 5), _u(1, 7, 1, 1)], {}, ()),
    _vk("sub_const_rhs", "binary", "Sub", [_u(1, 3, 4, 4), _u(4)], {}, (1,)),
    _vk("div_rank2", "binary", "Div", [_u(3, 10), _u(3, 10, lo=0.5, hi=2.0)], {}, ()),
    _vk("relu", "unary", "Relu", [_u(1, 6, 5, 3)], {}, ()),
    _vk("sigmoid_large", "unary", "Sigmoid", [_u(1, 5, 3, 3, lo=-60, hi=60)], {}, ()),
    _vk("hardswish", "unary", "HardSwish", [_u(2, 3, 5, 7, lo=-5, hi=5)], {}, ()),
    _vk("leakyrelu", "unary", "LeakyRelu", [_u(1, 9, 2, 2)], {"alpha": 0.2}, ()),
    _vk("maxpool_2x2", "pool", "MaxPool", [_u(1, 5, 9, 7)], {"kernel_shape": [2, 2], "strides": [2, 2]}, ()),
    _vk("avgpool_3x3_pad", "pool", "AveragePool", [_u(2, 3, 7, 6)],
        {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}, ()),
    _vk("globalavgpool", "globalpool", "GlobalAveragePool", [_u(2, 7, 9, 5)], {}, ()),
    _vk("globalmaxpool", "globalpool", "GlobalMaxPool", [_u(1, 6, 3, 3)], {}, ()),
    _vk("resize_linear_half_pixel", "resize", "Resize", [_u(1, 5, 5, 7), None, np.array([1, 1, 2, 2], np.float32)],
        {"mode": "linear", "coordinate_transformation_mode": "half_pixel"}, (2,)),
    _vk("resize_nearest_asymmetric_x3", "resize", "Resize", [_u(1, 3, 4, 3), None, np.array([1, 1, 3, 3], np.float32)],
        {"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}, (2,)),
    _vk("concat_channels_unaligned", "concat", "Concat", [_u(1, 3, 4, 5), _u(1, 6, 4, 5), _u(1, 1, 4, 5)],
        {"axis": 1}, ()),
    _vk("concat_height", "concat", "Concat", [_u(2, 5, 3, 4), _u(2, 5, 2, 4)], {"axis": 2}, ()),
    _vk("softmax_rank2", "softmax", "Softmax", [_u(3, 11, lo=-5, hi=5)], {"axis": -1}, ()),
    _vk("pad_reflect", "pad", "Pad", [_u(1, 5, 4, 6), np.array([0, 0, 1, 2, 0, 0, 2, 1], np.int64)],
        {"mode": "reflect"}, (1,)),
    _vk("pad_constant_value", "pad", "Pad", [_u(1, 3, 3, 3), np.array([0, 0, 2, 0, 0, 0, 0, 3], np.int64),
                                             np.array(0.75, np.float32)], {}, (1, 2)),
    _vk("transpose_nchw_nhwc", "layout", "Transpose", [_u(2, 5, 3, 4)], {"perm": [0, 2, 3, 1]}, ()),
    _vk("reshape_4d_to_2d", "layout", "Reshape", [_u(2, 6, 2, 3), np.array([2, -1], np.int64)], {}, (1,)),
    _vk("flatten_nc11", "layout", "Flatten", [_u(2, 9, 1, 1)], {"axis": 1}, ()),
]


def _g31(id: str, kernel: str | None, op: str, runtime: dict[str, np.ndarray], consts: dict[str, np.ndarray],
         order: list[str], attrs: dict[str, Any] | None = None, opset: int = 17,
         precisions: tuple[str, ...] = ("fp32",)) -> Case:
    return Case(id, op, attrs or {}, runtime, consts, tuple(order), opset, paths=("gles31",), precisions=precisions,
                kernel=kernel, metric="max")


def _gles31_cases() -> list[Case]:
    out = []
    conv = [  # (n, cin, h, w, cout, k, stride, dilation, pads, group, act)
        (1, 3, 17, 13, 8, 3, 2, 1, [1, 1, 1, 1], 1, ("Clip", {"min": 0.0, "max": 6.0})),
        (2, 5, 9, 7, 6, 3, 1, 2, [2, 1, 2, 0], 1, ("Relu", {})),
        (1, 6, 8, 8, 10, 3, 1, 1, [0, 0, 0, 0], 2, ("HardSwish", {})),
        (1, 4, 5, 6, 7, 5, 2, 1, [2, 2, 1, 1], 1, ("LeakyRelu", {"alpha": 0.1})),
        (1, 7, 1, 1, 5, 1, 1, 1, [0, 0, 0, 0], 1, ("Sigmoid", {})),
        (1, 9, 6, 5, 3, 2, 2, 1, [0, 0, 0, 0], 1, ("Tanh", {})),
        (1, 2, 7, 9, 9, 3, 3, 1, [1, 1, 1, 1], 1, ("HardSigmoid", {"alpha": 0.3, "beta": 0.4})),
        (1, 8, 6, 6, 16, 3, 1, 1, [1, 1, 1, 1], 4, None),  # grouped (dense block-diagonal)
    ]
    for n, cin, h, w, cout, k, s, d, pads, group, act in conv:
        attrs = {"kernel_shape": [k, k], "strides": [s, s], "dilations": [d, d], "pads": pads, "group": group}
        if act:
            attrs["_act"] = act
        pointwise = (k, s, group, max(pads)) == (1, 1, 1, 0)
        out.append(_g31(f"conv_{n}x{cin}x{h}x{w}_{cout}_k{k}s{s}d{d}g{group}", "conv1x1" if pointwise else "conv",
                        "Conv", {"x": _n(n, cin, h, w)},
                        {"w": _n(cout, cin // group, k, k, scale=0.3), "b": _n(cout)}, ["x", "w", "b"], attrs))
    for cin, cout, h, w, n, bias in [(3, 5, 7, 9, 1, True), (16, 24, 11, 11, 2, False), (13, 4, 1, 1, 1, True)]:
        out.append(_g31(f"conv1x1_{cin}_{cout}_{h}x{w}_n{n}_bias{int(bias)}", "conv1x1", "Conv",
                        {"x": _n(n, cin, h, w)}, {"w": _n(cout, cin, 1, 1, scale=0.3), "b": _n(cout)},
                        ["x", "w", "b" if bias else ""], {"kernel_shape": [1, 1], "_act": ("Relu", {})}))
    for c, h, w, k, s, d, pads, act in [(6, 9, 11, 3, 1, 1, [1, 1, 1, 1], ("Clip", {"min": 0.0, "max": 6.0})),
                                         (5, 8, 7, 3, 2, 1, [1, 1, 1, 1], ("Relu", {})),
                                         (12, 10, 10, 5, 2, 1, [2, 2, 2, 2], None),
                                         (3, 9, 9, 3, 1, 2, [2, 2, 2, 2], ("HardSwish", {})),
                                         (8, 1, 1, 3, 1, 1, [1, 1, 1, 1], None)]:
        attrs = {"kernel_shape": [k, k], "strides": [s, s], "dilations": [d, d], "pads": pads, "group": c}
        if act:
            attrs["_act"] = act
        out.append(_g31(f"depthwise_{c}_{h}x{w}_k{k}s{s}d{d}", "depthwise", "Conv", {"x": _n(2, c, h, w)},
                        {"w": _n(c, 1, k, k), "b": _n(c)}, ["x", "w", "b"], attrs))
    out.append(_g31("conv_same_upper", None, "Conv", {"x": _n(1, 3, 10, 7)}, {"w": _n(4, 3, 3, 3)}, ["x", "w"],
                    {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_UPPER"}))
    for cin, cout, h, w, k, s, pads, group, opad in [(32, 16, 5, 6, 2, 2, [0, 0, 0, 0], 1, [0, 0]),
                                                     (5, 7, 4, 3, 3, 2, [1, 1, 1, 1], 1, [1, 1]),
                                                     (6, 4, 3, 5, 3, 1, [0, 1, 0, 1], 2, [0, 0])]:
        attrs = {"kernel_shape": [k, k], "strides": [s, s], "pads": pads, "group": group, "output_padding": opad,
                 "_act": ("Relu", {})}
        out.append(_g31(f"convtranspose_{cin}_{cout}_k{k}s{s}g{group}_opad{opad[0]}", "convtranspose",
                        "ConvTranspose", {"x": _n(1, cin, h, w)},
                        {"w": _n(cin, cout // group, k, k, scale=0.3), "b": _n(cout)}, ["x", "w", "b"], attrs))
    for m, k, n, trans_b, c_shape in [(1, 320, 100, 1, (100,)), (3, 7, 5, 0, (1, 5)), (5, 9, 6, 1, ())]:
        b = _n(n, k) if trans_b else _n(k, n)
        out.append(_g31(f"gemm_{m}x{k}x{n}_tb{trans_b}_c{len(c_shape)}", "gemm", "Gemm", {"a": _n(m, k)},
                        {"b": b, "c": _n(*c_shape)}, ["a", "b", "c"], {"transB": trans_b, "alpha": 0.7, "beta": 1.3}))
    out.append(_g31("matmul_constant_b_tanh", "matmul", "MatMul", {"a": _n(2, 5, 9)}, {"b": _n(9, 6)}, ["a", "b"],
                    {"_act": ("Tanh", {})}))
    for sa, sb in [((2, 5, 7), (2, 7, 6)), ((3, 4), (4, 9)), ((2, 3, 5), (5, 3))]:
        out.append(_g31(f"matmul_runtime_{'x'.join(map(str, sa))}_{'x'.join(map(str, sb))}", None, "MatMul",
                        {"a": _n(*sa), "b": _n(*sb)}, {}, ["a", "b"]))
    for op, sa, sb, b_const in [("Add", (2, 6, 5, 7), (2, 6, 5, 7), False),
                                ("Mul", (1, 10, 6, 5), (1, 10, 1, 1), False),  # squeeze-excite per-channel scale
                                ("Mul", (1, 10, 6, 5), (1, 10, 1, 1), True),
                                ("Sub", (1, 5, 4, 3), (5, 1, 1), True),
                                ("Div", (2, 3, 4, 5), (), True),
                                ("Add", (1, 7, 3, 3), (1, 1, 3, 3), False),  # channel broadcast (splat)
                                ("Max", (1, 6, 1, 4), (1, 6, 3, 1), False),
                                ("Min", (3, 5), (5,), True),
                                ("Pow", (2, 3, 4), (2, 3, 4), False),
                                ("Add", (2, 8, 5, 7), (2, 8, 5, 7), False),  # FLAT: same layout, channels % 4 == 0
                                ("Div", (1, 8, 3, 5), (1, 8, 3, 5), False)]:
        a, b = _n(*sa), _n(*sb)
        if op == "Div":
            b = np.where(np.abs(b) < 0.2, 0.5, b).astype(np.float32)
        if op == "Pow":
            a = np.abs(a) + 0.1
        out.append(_g31(f"binary_{op}_{'x'.join(map(str, sa))}_{'x'.join(map(str, sb))}_const{int(b_const)}",
                        "binary", op, {"a": a} if b_const else {"a": a, "b": b}, {"b": b} if b_const else {},
                        ["a", "b"]))
    for op, attrs in [("Relu", {}), ("LeakyRelu", {"alpha": 0.2}), ("HardSigmoid", {}), ("HardSwish", {}),
                      ("Sigmoid", {}), ("Tanh", {}), ("Clip", {})]:
        consts = {"lo": np.array(-0.5, np.float32), "hi": np.array(0.7, np.float32)} if op == "Clip" else {}
        out.append(_g31(f"unary_{op}", "unary", op, {"x": _n(2, 5, 3, 7, scale=3.0)}, consts,
                        ["x", "lo", "hi"] if op == "Clip" else ["x"], attrs))
    for i, (op, attrs, shape) in enumerate([
            ("MaxPool", {"kernel_shape": [2, 2], "strides": [2, 2]}, (1, 5, 8, 9)),
            ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}, (2, 6, 7, 7)),
            ("AveragePool", {"kernel_shape": [3, 3], "strides": [1, 2], "pads": [1, 1, 1, 1]}, (1, 3, 6, 5)),
            ("AveragePool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "count_include_pad": 1},
             (1, 7, 6, 5)),
            ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}, (1, 4, 8, 8)),
            ("AveragePool", {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1}, (1, 4, 7, 7))]):
        out.append(_g31(f"pool{i}_{op}", "pool", op, {"x": _n(*shape)}, {}, ["x"], attrs))
    for op, shape in [("GlobalAveragePool", (2, 7, 9, 11)), ("GlobalMaxPool", (1, 5, 3, 1)),
                      ("GlobalAveragePool", (1, 32, 1, 1))]:
        out.append(_g31(f"globalpool_{op}_{'x'.join(map(str, shape))}", "globalpool", op, {"x": _n(*shape)}, {},
                        ["x"]))
    for i, (shapes, axis) in enumerate([([(1, 3, 4, 5), (1, 6, 4, 5), (1, 1, 4, 5)], 1),
                                        ([(2, 8, 3, 3), (2, 4, 3, 3)], 1), ([(1, 3, 2, 5), (1, 3, 4, 5)], 2),
                                        ([(1, 5, 2, 3), (1, 5, 2, 1)], -1), ([(2, 3), (4, 3)], 0),
                                        ([(2, 3), (2, 6)], 1)]):
        runtime = {f"x{j}": _n(*s) for j, s in enumerate(shapes)}
        out.append(_g31(f"concat{i}_axis{axis}", "concat", "Concat", runtime, {}, list(runtime), {"axis": axis}))
    out.append(_g31("concat_constant_input", None, "Concat", {"x": _n(1, 3, 2, 2)}, {"c": _n(1, 2, 2, 2)},
                    ["x", "c"], {"axis": 1}))
    for mode, coord, nearest, scales, sizes in [
            ("linear", "half_pixel", None, [1, 1, 2, 2], None),
            ("linear", "align_corners", None, None, [1, 5, 7, 4]),
            ("linear", "pytorch_half_pixel", None, [1, 1, 0.6, 1.7], None),
            ("linear", "asymmetric", None, [1, 1, 3, 2], None),
            ("nearest", "asymmetric", "floor", [1, 1, 2, 3], None),
            ("nearest", "half_pixel", "round_prefer_floor", None, [1, 5, 11, 3]),
            ("nearest", "tf_half_pixel_for_nn", "round_prefer_ceil", [1, 1, 1.5, 2.5], None),
            ("nearest", "align_corners", "ceil", None, [1, 5, 4, 9])]:
        attrs = {"mode": mode, "coordinate_transformation_mode": coord}
        if nearest:
            attrs["nearest_mode"] = nearest
        consts = {"s": np.array(scales, np.float32)} if scales else {"z": np.array(sizes, np.int64)}
        out.append(_g31(f"resize_{mode}_{coord}", "resize", "Resize", {"x": _n(1, 5, 6, 5)}, consts,
                        ["x", "", "s"] if scales else ["x", "", "", "z"], attrs))
    for mode in ("nearest", "linear"):
        out.append(_g31(f"upsample_opset9_{mode}", "resize", "Upsample", {"x": _n(1, 6, 3, 5)},
                        {"s": np.array([1, 1, 2, 3], np.float32)}, ["x", "s"], {"mode": mode}, opset=9))
    # ONNX allows weights as graph inputs: packed on the host at upload, one upload each
    out.append(_g31("conv_runtime_weights", None, "Conv", {"x": _n(1, 5, 6, 7), "w": _n(6, 5, 3, 3), "b": _n(6)},
                    {}, ["x", "w", "b"], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}))
    out.append(_g31("gemm_runtime_weights", None, "Gemm", {"a": _n(3, 9), "bm": _n(4, 9), "c": _n(4)}, {},
                    ["a", "bm", "c"], {"transB": 1, "alpha": 0.5}))
    for op, shape, axis in [("Softmax", (3, 10), -1), ("Softmax", (1, 7, 3, 2), 1), ("LogSoftmax", (2, 4, 5), -1)]:
        out.append(_g31(f"{op}_{'x'.join(map(str, shape))}", "softmax", op, {"x": _n(*shape, scale=3.0)}, {}, ["x"],
                        {"axis": axis}))
    for mode in ("constant", "reflect", "edge"):
        out.append(_g31(f"pad_{mode}", "pad", "Pad", {"x": _n(1, 5, 4, 5)},
                        {"p": np.array([0, 0, 2, 1, 0, 0, 1, 3], np.int64), "v": np.array(1.5, np.float32)},
                        ["x", "p", "v"], {"mode": mode}))
    for i, (op, shape, extra, attrs) in enumerate([
            ("Flatten", (2, 6, 1, 1), None, {"axis": 1}),  # zero-copy
            ("Flatten", (2, 5, 3, 2), None, {"axis": 1}),  # relayout kernel
            ("Reshape", (1, 6, 4, 2), np.array([1, 12, 4], np.int64), {}),
            ("Transpose", (2, 3, 4, 5), None, {"perm": [0, 2, 3, 1]}),
            ("Transpose", (3, 5), None, {}),
            ("Squeeze", (1, 7, 1, 1), np.array([2, 3], np.int64), {}),
            ("Unsqueeze", (1, 7), np.array([2, 3], np.int64), {})]):
        consts = {"s": extra} if extra is not None else {}
        out.append(_g31(f"layout{i}_{op}", "layout", op, {"x": _n(*shape)}, consts,
                        ["x", "s"] if extra is not None else ["x"], attrs))
    fp16 = [
        ("Conv", {"x": (1, 5, 9, 7)}, {"w": (6, 5, 3, 3), "b": (6,)},
         {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "_act": ("Relu", {})}),
        ("Conv", {"x": (1, 6, 8, 5)}, {"w": (6, 1, 3, 3)}, {"kernel_shape": [3, 3], "group": 6, "strides": [2, 2]}),
        ("Conv", {"x": (1, 7, 4, 4)}, {"w": (9, 7, 1, 1)}, {"kernel_shape": [1, 1]}),
        ("Gemm", {"x": (2, 21)}, {"w": (21, 10)}, {}),
        ("ConvTranspose", {"x": (1, 6, 3, 4)}, {"w": (6, 5, 2, 2)}, {"kernel_shape": [2, 2], "strides": [2, 2]}),
        ("Mul", {"x": (1, 6, 3, 4), "s": (1, 6, 1, 1)}, {}, {}),
        ("Resize", {"x": (1, 5, 3, 4)}, {"": None, "sc": np.array([1, 1, 2, 2], np.float32)}, {"mode": "linear"}),
        ("Concat", {"x": (1, 3, 2, 2), "z": (1, 6, 2, 2)}, {}, {"axis": 1}),
        ("GlobalAveragePool", {"x": (1, 9, 5, 5)}, {}, {}),
        ("Softmax", {"x": (2, 11)}, {}, {}),
    ]
    for i, (op, runtime, consts, attrs) in enumerate(fp16):
        rt = {k: _n(*s) for k, s in runtime.items()}
        cs = {k: (v if isinstance(v, np.ndarray) else _n(*v, scale=0.3)) for k, v in consts.items() if k}
        out.append(_g31(f"fp16_{i}_{op}", None, op, rt, cs, list(runtime) + list(consts), attrs,
                        precisions=("fp16",)))
    return out


def _gl3(id: str, op: str, runtime: dict[str, np.ndarray], consts: dict[str, Any] | None = None,
         attrs: dict[str, Any] | None = None, order: list[str] | None = None, opset: int = 17,
         precisions: tuple[str, ...] = ("fp32",)) -> Case:
    consts = {k: np.asarray(v) for k, v in (consts or {}).items()}
    return Case(id, op, attrs or {}, runtime, consts, tuple(order) if order else None, opset, paths=("gles3",),
                precisions=precisions, metric="norm")


def _gles3_cases() -> list[Case]:
    out = []
    for n, cin, h, w, cout, k, s, p, d, g in [  # (N, Cin, H, W, Cout, k, stride, pad, dilation, group)
            (1, 3, 9, 7, 5, 3, 1, 1, 1, 1), (2, 6, 8, 8, 10, 3, 2, 1, 1, 1), (1, 5, 1, 1, 7, 1, 1, 0, 1, 1),
            (1, 17, 6, 5, 33, 1, 1, 0, 1, 1), (1, 8, 11, 9, 12, 3, 1, 2, 2, 1), (1, 7, 10, 8, 3, 5, 2, 2, 1, 1),
            (1, 12, 7, 9, 12, 3, 1, 1, 1, 12), (2, 10, 9, 6, 10, 3, 2, 1, 1, 10), (1, 8, 6, 6, 12, 3, 1, 1, 1, 4),
            (1, 6, 5, 7, 9, 3, 1, 1, 1, 3), (1, 40, 5, 5, 70, 3, 1, 1, 1, 1),
            # input slices filling every plane of the last slot (32, 64 channels): one loop, no tail copy
            (1, 32, 5, 6, 20, 3, 1, 1, 1, 1), (2, 64, 4, 3, 9, 1, 1, 0, 1, 1)]:
        attrs = {"kernel_shape": [k, k], "strides": [s, s], "pads": [p, p, p, p], "dilations": [d, d], "group": g}
        out.append(_gl3(f"conv_{n}x{cin}x{h}x{w}_{cout}_k{k}s{s}p{p}d{d}g{g}", "Conv", {"x": _n(n, cin, h, w)},
                        {"w": _n(cout, cin // g, k, k, scale=0.3), "b": _n(cout)}, attrs))
    for act in [("Relu", {}), ("Clip", {"min": 0.0, "max": 6.0}), ("LeakyRelu", {"alpha": 0.1}),
                ("HardSigmoid", {"alpha": 0.2, "beta": 0.5}), ("HardSwish", {}), ("Sigmoid", {}), ("Tanh", {})]:
        out.append(_gl3(f"conv_fused_{act[0]}", "Conv", {"x": _n(1, 5, 7, 6)}, {"w": _n(6, 5, 3, 3, scale=0.5)},
                        {"kernel_shape": [3, 3], "pads": [1, 0, 1, 2], "_act": act}))
    out.append(_gl3("conv_auto_pad_same_asymmetric_stride", "Conv", {"x": _n(1, 4, 9, 8)}, {"w": _n(6, 4, 3, 2)},
                    {"kernel_shape": [3, 2], "strides": [2, 1], "auto_pad": "SAME_UPPER"}))
    for n, cin, h, w, cout, k, s, p in [(1, 6, 5, 4, 3, 2, 2, 0), (1, 8, 4, 5, 5, 3, 2, 1), (2, 3, 3, 3, 4, 2, 2, 0),
                                        (1, 5, 4, 4, 6, 3, 1, 1)]:
        out.append(_gl3(f"convtranspose_{n}x{cin}x{h}x{w}_{cout}_k{k}s{s}p{p}", "ConvTranspose",
                        {"x": _n(n, cin, h, w)}, {"w": _n(cin, cout, k, k), "b": _n(cout)},
                        {"kernel_shape": [k, k], "strides": [s, s], "pads": [p, p, p, p]}))
    out.append(_gl3("convtranspose_output_padding", "ConvTranspose", {"x": _n(1, 4, 5, 5)}, {"w": _n(4, 3, 3, 3)},
                    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "output_padding": [1, 1]}))
    for m, k, n in [(1, 10, 5), (3, 17, 9), (2, 64, 33)]:
        out.append(_gl3(f"gemm_{m}x{k}x{n}", "Gemm", {"a": _n(m, k)}, {"b": _n(n, k), "c": _n(n)},
                        {"transB": 1, "alpha": 0.5, "beta": 2.0}))
        out.append(_gl3(f"matmul_{m}x{k}x{n}", "MatMul", {"a": _n(m, k)}, {"b": _n(k, n)}))
    for op in ["Add", "Sub", "Mul", "Div", "Max", "Min"]:
        b = _n(2, 7, 5, 3)
        if op == "Div":
            b = np.abs(b) + 0.5
        out.append(_gl3(f"binary_same_shape_{op}", op, {"a": _n(2, 7, 5, 3), "b": b}))
    for bshape in [(1, 6, 1, 1), (1, 1, 5, 4), (1, 1, 1, 1), (1, 6, 5, 1), (2, 6, 5, 4)]:
        tag = "x".join(map(str, bshape))
        out.append(_gl3(f"binary_broadcast_mul_{tag}", "Mul", {"a": _n(1, 6, 5, 4), "b": _n(*bshape)}))
        out.append(_gl3(f"binary_broadcast_sub_{tag}", "Sub", {"b": _n(*bshape), "a": _n(1, 6, 5, 4)}))
    for bshape in [(6, 1, 1), (4,), (5, 1), (1, 1, 4)]:
        out.append(_gl3(f"binary_lower_rank_const_{'x'.join(map(str, bshape))}", "Add", {"a": _n(1, 6, 5, 4)},
                        {"b": _n(*bshape)}))
    out.append(_gl3("binary_se_scale", "Mul", {"a": _n(2, 9, 4, 3), "s": _n(2, 9, 1, 1)}))
    out.append(_gl3("binary_const_channels", "Add", {"a": _n(1, 9, 4, 3)}, {"c": _n(9, 1, 1)}))
    out.append(_gl3("binary_scalar_const_first", "Sub", {"a": _n(1, 9, 4, 3)}, {"c": np.float32(0.25)},
                    order=["c", "a"]))
    out.append(_gl3("prelu_channel_slope", "PRelu", {"a": _n(1, 5, 4, 3)}, {"slope": _n(5, 1, 1)}))
    for op, attrs in [("Relu", {}), ("Sigmoid", {}), ("Tanh", {}), ("HardSwish", {}), ("HardSigmoid", {"alpha": 0.3}),
                      ("LeakyRelu", {"alpha": 0.2}), ("Abs", {}), ("Neg", {}), ("Exp", {}), ("Floor", {}),
                      ("Elu", {"alpha": 0.7}), ("Softplus", {}), ("Selu", {})]:
        out.append(_gl3(f"unary_{op}", op, {"x": _n(1, 7, 5, 3, scale=2.0)}, attrs=attrs))
    out.append(_gl3("clip_inputs_rank2", "Clip", {"x": _n(3, 9)}, {"lo": np.float32(-0.5), "hi": np.float32(0.7)}))
    out.append(_gl3("sqrt_rank3", "Sqrt", {"x": np.abs(_n(2, 5, 3)) + 0.1}))
    for i, (op, attrs) in enumerate([
            ("MaxPool", {"kernel_shape": [2, 2], "strides": [2, 2]}),
            ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
            ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
            ("MaxPool", {"kernel_shape": [2, 2], "dilations": [2, 2]}),
            ("AveragePool", {"kernel_shape": [3, 3], "strides": [1, 1], "pads": [1, 1, 1, 1]}),
            ("AveragePool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "count_include_pad": 1}),
            ("AveragePool", {"kernel_shape": [2, 3], "strides": [2, 2], "auto_pad": "SAME_UPPER"})]):
        out.append(_gl3(f"pool{i}_{op}", op, {"x": _n(2, 6, 9, 7)}, attrs=attrs))
    for op in ("GlobalAveragePool", "GlobalMaxPool"):
        out.append(_gl3(f"globalpool_{op}", op, {"x": _n(2, 11, 7, 5)}))
    out.append(_gl3("reducemean_hw_is_global_pool", "ReduceMean", {"x": _n(1, 6, 5, 4)},
                    attrs={"axes": [2, 3], "keepdims": 1}, opset=13))
    for mode, ct, scales in [("linear", "half_pixel", [1, 1, 2, 2]), ("linear", "align_corners", [1, 1, 2, 3]),
                             ("linear", "pytorch_half_pixel", [1, 1, 0.5, 2]), ("linear", "asymmetric", [1, 1, 2, 2]),
                             ("nearest", "asymmetric", [1, 1, 2, 2]), ("nearest", "half_pixel", [1, 1, 3, 2])]:
        out.append(_gl3(f"resize_{mode}_{ct}", "Resize", {"x": _n(1, 5, 4, 6)},
                        {"roi": np.zeros(0, np.float32), "scales": np.array(scales, np.float32)},
                        {"mode": mode, "coordinate_transformation_mode": ct}))
    out.append(_gl3("resize_sizes", "Resize", {"x": _n(2, 3, 5, 4)}, {"sizes": np.array([2, 3, 9, 7], np.int64)},
                    {"mode": "linear"}, order=["x", "", "", "sizes"]))
    for chans in [(4, 8), (3, 6), (5, 2, 7), (1, 1)]:
        out.append(_gl3(f"concat_{'_'.join(map(str, chans))}", "Concat",
                        {f"x{i}": _n(2, c, 4, 3) for i, c in enumerate(chans)}, attrs={"axis": 1}))
    for shape in [(2, 10), (1, 7, 3, 2), (3, 4)]:
        out.append(_gl3(f"softmax_{'x'.join(map(str, shape))}", "Softmax", {"x": _n(*shape, scale=3.0)},
                        attrs={"axis": 1}))
    for mode in ("constant", "reflect", "edge"):
        out.append(_gl3(f"pad_{mode}", "Pad", {"x": _n(1, 5, 4, 6)},
                        {"pads": np.array([0, 0, 1, 2, 0, 0, 2, 1], np.int64), "v": np.float32(0.5)}, {"mode": mode}))
    out.append(_gl3("fp16_conv", "Conv", {"x": _n(1, 9, 6, 5)}, {"w": _n(13, 9, 3, 3, scale=0.3)},
                    {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, precisions=("fp16",)))
    out.append(_gl3("fp16_add_channel", "Add", {"a": _n(1, 6, 5, 4), "b": _n(1, 6, 1, 1)}, precisions=("fp16",)))
    return out


def _gl2(id: str, op: str, runtime: dict[str, np.ndarray], consts: dict[str, Any] | None = None,
         attrs: dict[str, Any] | None = None, order: list[str] | None = None, opset: int = 17,
         precisions: tuple[str, ...] = ("fp32",), kernel: str | None = None) -> Case:
    consts = {k: np.asarray(v) for k, v in (consts or {}).items()}
    return Case(id, op, attrs or {}, runtime, consts, tuple(order) if order else None, opset, paths=("gles2",),
                precisions=precisions, kernel=kernel, metric="gles2")


def _gles2_cases() -> list[Case]:
    both = ("fp32", "fp16")
    out = []
    for n, cin, h, w, cout, k, s, p, d, g in [
            # (N, Cin, H, W, Cout, kernel (kh, kw), stride (sh, sw), pads (t, l, b, r), dilation, group)
            (1, 3, 9, 7, 5, (3, 3), (1, 1), (1, 1, 1, 1), 1, 1),
            (2, 6, 8, 8, 10, (3, 3), (2, 2), (1, 1, 1, 1), 1, 1),
            (1, 5, 1, 1, 7, (1, 1), (1, 1), (0, 0, 0, 0), 1, 1),
            (1, 17, 6, 5, 33, (1, 1), (1, 1), (0, 0, 0, 0), 1, 1),
            (1, 8, 11, 9, 12, (3, 3), (1, 1), (2, 2, 2, 2), 2, 1),
            (1, 7, 10, 8, 3, (5, 5), (2, 2), (2, 2, 2, 2), 1, 1),
            (1, 3, 16, 16, 16, (3, 3), (2, 2), (0, 0, 1, 1), 1, 1),  # the selfie stem: asymmetric pads
            (1, 12, 7, 9, 12, (3, 3), (1, 1), (1, 1, 1, 1), 1, 12),
            (2, 10, 9, 6, 10, (3, 3), (2, 2), (0, 0, 1, 1), 1, 10),  # strided depthwise, asymmetric pads
            (1, 9, 11, 11, 9, (5, 5), (2, 2), (1, 1, 2, 2), 1, 9),  # selfie's 5x5 strided depthwise
            (1, 8, 6, 6, 12, (3, 3), (1, 1), (1, 1, 1, 1), 1, 4),
            (1, 6, 5, 7, 9, (3, 2), (2, 1), (1, 0, 0, 1), 1, 3),
            (1, 7, 4, 3, 5, (1, 1), (2, 2), (0, 0, 0, 0), 1, 1)]:
        attrs = {"kernel_shape": list(k), "strides": list(s), "pads": list(p), "dilations": [d, d], "group": g}
        out.append(_gl2(f"conv_{n}x{cin}x{h}x{w}_{cout}_k{k[0]}{k[1]}s{s[0]}{s[1]}p{''.join(map(str, p))}d{d}g{g}",
                        "Conv", {"x": _n(n, cin, h, w)}, {"w": _n(cout, cin // g, *k, scale=0.3), "b": _n(cout)},
                        attrs, precisions=both))
    out.append(_gl2("conv_name_conv1x1", "Conv", {"x": _n(1, 4, 5, 5)}, {"w": _n(6, 4, 1, 1)},
                    {"kernel_shape": [1, 1]}, kernel="conv1x1"))
    out.append(_gl2("conv_name_depthwise", "Conv", {"x": _n(1, 4, 5, 5)}, {"w": _n(4, 1, 3, 3)},
                    {"kernel_shape": [3, 3], "group": 4}, kernel="depthwise"))
    for act in [("Relu", {}), ("Clip", {"min": 0.0, "max": 6.0}), ("LeakyRelu", {"alpha": 0.1}),
                ("HardSigmoid", {"alpha": 0.2, "beta": 0.5}), ("HardSwish", {}), ("Sigmoid", {}), ("Tanh", {})]:
        out.append(_gl2(f"conv_fused_{act[0]}", "Conv", {"x": _n(1, 5, 7, 6, scale=2.0)},
                        {"w": _n(6, 5, 3, 3, scale=0.5)}, {"kernel_shape": [3, 3], "pads": [1, 0, 1, 2], "_act": act}))
    out.append(_gl2("conv_same_upper", "Conv", {"x": _n(1, 4, 9, 8)}, {"w": _n(6, 4, 3, 2)},
                    {"kernel_shape": [3, 2], "strides": [2, 1], "auto_pad": "SAME_UPPER"}))
    out.append(_gl2("conv_same_lower", "Conv", {"x": _n(1, 4, 9, 8)}, {"w": _n(6, 4, 3, 3)},
                    {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_LOWER"}))
    out.append(_gl2("conv_1d", "Conv", {"x": _n(2, 3, 11)}, {"w": _n(5, 3, 3), "b": _n(5)},
                    {"kernel_shape": [3], "strides": [2], "pads": [1, 0]}))
    for n, cin, h, w, cout, k, s, p, g, d, opad in [
            # (N, Cin, H, W, Cout, k, stride, pads, group, dilation, output_padding)
            (1, 16, 8, 8, 1, 2, 2, 0, 1, 1, 0),  # the selfie head: 2x2 stride 2 with bias
            (1, 6, 5, 4, 3, 2, 2, 0, 1, 1, 0), (1, 8, 4, 5, 5, 3, 2, 1, 1, 1, 1), (2, 3, 3, 3, 4, 2, 2, 0, 1, 1, 0),
            (1, 5, 4, 4, 6, 3, 1, 1, 1, 1, 0), (1, 6, 3, 4, 4, 3, 2, 1, 2, 1, 0), (1, 3, 4, 3, 2, 3, 1, 0, 1, 2, 0)]:
        attrs = {"kernel_shape": [k, k], "strides": [s, s], "pads": [p, p, p, p], "group": g, "dilations": [d, d],
                 "output_padding": [opad, opad]}
        out.append(_gl2(f"convtranspose_{n}x{cin}x{h}x{w}_{cout}_k{k}s{s}p{p}g{g}d{d}o{opad}", "ConvTranspose",
                        {"x": _n(n, cin, h, w)}, {"w": _n(cin, cout // g, k, k), "b": _n(cout)}, attrs,
                        kernel="convtranspose_tap" if k == s and d == 1 else "convtranspose"))
    out.append(_gl2("convtranspose_fused_sigmoid", "ConvTranspose", {"x": _n(1, 16, 6, 7)},
                    {"w": _n(16, 1, 2, 2), "b": _n(1)}, {"kernel_shape": [2, 2], "strides": [2, 2],
                                                         "_act": ("Sigmoid", {})}, precisions=("fp16",)))
    for m, k, n in [(1, 10, 5), (3, 17, 9), (2, 64, 33)]:
        tag = f"{m}x{k}x{n}"
        out.append(_gl2(f"gemm_transb_{tag}", "Gemm", {"a": _n(m, k)}, {"b": _n(n, k), "c": _n(n)},
                        {"transB": 1, "alpha": 0.5, "beta": 2.0}))
        out.append(_gl2(f"gemm_transa_{tag}", "Gemm", {"a": _n(k, m)}, {"b": _n(k, n), "c": _n(m, 1)}, {"transA": 1}))
        out.append(_gl2(f"gemm_runtime_relu_{tag}", "Gemm", {"a": _n(m, k), "b": _n(k, n)},
                        attrs={"_act": ("Relu", {})}))
        out.append(_gl2(f"matmul_{tag}", "MatMul", {"a": _n(m, k)}, {"b": _n(k, n)}))
    out.append(_gl2("matmul_batched_broadcast", "MatMul", {"a": _n(2, 3, 4, 5), "b": _n(3, 5, 6)}))
    out.append(_gl2("matmul_const_b_rank3", "MatMul", {"a": _n(3, 4, 5)}, {"b": _n(5, 7)}, precisions=("fp16",)))
    for op in ["Add", "Sub", "Mul", "Div", "Max", "Min", "Pow", "PRelu"]:
        a, b = _n(2, 7, 5, 3), _n(2, 7, 5, 3)
        if op in ("Div", "Pow"):
            b = np.abs(b) + 0.5
        if op == "Pow":
            a = np.abs(a) + 0.1
        out.append(_gl2(f"binary_{op}", op, {"a": a, "b": b}))
    for bshape in [(1, 6, 1, 1), (1, 1, 5, 4), (1, 1, 1, 1), (6, 1, 1), (4,), (2, 6, 5, 4)]:
        tag = "x".join(map(str, bshape))
        out.append(_gl2(f"broadcast_mul_{tag}", "Mul", {"a": _n(2, 6, 5, 4), "b": _n(*bshape)}, precisions=both))
        c = _n(*bshape)[:1] if len(bshape) == 4 else _n(*bshape)
        out.append(_gl2(f"broadcast_add_const_{tag}", "Add", {"a": _n(1, 6, 5, 4)}, {"c": c}, precisions=both))
        out.append(_gl2(f"broadcast_sub_{tag}", "Sub", {"b": _n(*bshape), "a": _n(2, 6, 5, 4)}, order=["b", "a"],
                        precisions=both))
    out.append(_gl2("sum_variadic", "Sum", {"a": _n(3, 4), "b": _n(3, 4), "c": _n(1, 4)}))
    out.append(_gl2("mean_variadic", "Mean", {"a": _n(3, 4), "b": _n(3, 1)}))
    out.append(_gl2("mul_scalar_const", "Mul", {"a": _n(3, 5)}, {"s": np.array(1.5, np.float32)}))
    for op, attrs in [("Relu", {}), ("Sigmoid", {}), ("Tanh", {}), ("HardSwish", {}),
                      ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}), ("LeakyRelu", {"alpha": 0.05}),
                      ("Elu", {"alpha": 0.7}), ("Selu", {}), ("Neg", {}), ("Abs", {}), ("Exp", {}), ("Softplus", {}),
                      ("Softsign", {}), ("Floor", {}), ("Ceil", {}), ("Sin", {}), ("Cos", {}), ("Identity", {}),
                      ("ThresholdedRelu", {"alpha": 0.3}), ("Sign", {})]:
        out.append(_gl2(f"unary_{op}", op, {"x": _n(2, 5, 3, 7, scale=3.0)}, attrs=attrs))
    for op in ("Log", "Sqrt", "Reciprocal"):
        out.append(_gl2(f"unary_positive_{op}", op, {"x": np.abs(_n(3, 5, 7)) + 0.1}))
    out.append(_gl2("clip_constant_bounds", "Clip", {"x": _n(2, 3, 4, 5, scale=4.0)},
                    {"lo": np.array(-1.0, np.float32), "hi": np.array(2.5, np.float32)}))
    for shape in [(1, 16, 13, 9), (2, 5, 1, 1), (1, 3, 64, 64)]:
        tag = "x".join(map(str, shape))
        out.append(_gl2(f"globalavgpool_{tag}", "GlobalAveragePool", {"x": _n(*shape)}, precisions=both,
                        kernel="globalpool"))
        out.append(_gl2(f"globalmaxpool_{tag}", "GlobalMaxPool", {"x": _n(*shape)}, precisions=both))
    for i, (op, attrs) in enumerate([
            ("MaxPool", {"kernel_shape": [2, 2], "strides": [2, 2]}),
            ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
            ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
            ("MaxPool", {"kernel_shape": [2, 2], "dilations": [2, 2]}),
            ("AveragePool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
            ("AveragePool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "count_include_pad": 1}),
            ("AveragePool", {"kernel_shape": [2, 3], "strides": [1, 2], "ceil_mode": 1})]):
        out.append(_gl2(f"pool{i}_{op}", op, {"x": _n(2, 5, 9, 8)}, attrs=attrs, kernel="pool"))
    for i, (attrs, scales, sizes) in enumerate([
            ({"mode": "linear", "coordinate_transformation_mode": "half_pixel"}, [1, 1, 2, 2], None),
            ({"mode": "linear", "coordinate_transformation_mode": "half_pixel"}, None, [2, 5, 15, 7]),
            ({"mode": "linear", "coordinate_transformation_mode": "align_corners"}, [1, 1, 2.0, 1.5], None),
            ({"mode": "linear", "coordinate_transformation_mode": "asymmetric"}, [1, 1, 0.5, 0.75], None),
            ({"mode": "linear", "coordinate_transformation_mode": "pytorch_half_pixel"}, [1, 1, 1.7, 2.0], None),
            ({"mode": "nearest"}, [1, 1, 2, 3], None),
            ({"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"},
             [1, 1, 1.5, 2], None),
            ({"mode": "nearest", "coordinate_transformation_mode": "align_corners",
              "nearest_mode": "round_prefer_ceil"}, None, [2, 5, 9, 4])]):
        consts: dict[str, Any] = {"roi": np.zeros(0, np.float32)}
        order = ["x", "roi"]
        if scales is not None:
            consts["scales"] = np.array(scales, np.float32)
            order.append("scales")
        else:
            consts["sizes"] = np.array(sizes, np.int64)
            order += ["", "sizes"]
        out.append(_gl2(f"resize{i}_{attrs['mode']}", "Resize", {"x": _n(2, 5, 6, 4)}, consts, attrs, order=order,
                        kernel="resize"))
    for axis in (0, 1, 2, -1):
        shapes = []
        for i in range(3):
            s = [2, 3, 4, 5]
            s[axis] = [1, 3, 2][i]
            shapes.append(s)
        out.append(_gl2(f"concat_axis{axis}", "Concat", {f"x{i}": _n(*s) for i, s in enumerate(shapes)},
                        attrs={"axis": axis}, kernel="concat"))
    p1 = np.array([0, 0, 1, 2, 0, 0, 2, 1], np.int64)
    out += [
        _gl2("softmax_rank2", "Softmax", {"x": _n(3, 37)}, attrs={"axis": 1}, kernel="softmax"),
        _gl2("softmax_rank3", "Softmax", {"x": _n(2, 4, 5)}, attrs={"axis": 1}),
        _gl2("logsoftmax", "LogSoftmax", {"x": _n(2, 9)}, attrs={"axis": -1}),
        _gl2("reducemean_hw", "ReduceMean", {"x": _n(2, 4, 5, 3)}, attrs={"axes": [2, 3], "keepdims": 1}, opset=13),
        _gl2("reducesum_axes_input", "ReduceSum", {"x": _n(2, 4, 5)}, {"axes": np.array([1], np.int64)},
             attrs={"keepdims": 0}),
        _gl2("reducemax_opset18", "ReduceMax", {"x": _n(2, 4, 5)}, {"axes": np.array([0, 2], np.int64)}, opset=18),
        _gl2("reducemin", "ReduceMin", {"x": _n(2, 4, 5)}, attrs={"axes": [1], "keepdims": 0}),
        _gl2("flatten", "Flatten", {"x": _n(2, 3, 4, 5)}, attrs={"axis": 1}, kernel="layout"),
        _gl2("reshape_2d", "Reshape", {"x": _n(2, 3, 4, 5)}, {"s": np.array([6, 20], np.int64)}),
        _gl2("reshape_4d", "Reshape", {"x": _n(2, 3, 4, 5)}, {"s": np.array([4, 3, 5, 2], np.int64)}),
        _gl2("transpose_nhwc", "Transpose", {"x": _n(2, 3, 4, 5)}, attrs={"perm": [0, 2, 3, 1]}),
        _gl2("transpose_rank2", "Transpose", {"x": _n(3, 7)}),
        _gl2("unsqueeze", "Unsqueeze", {"x": _n(3, 7)}, {"axes": np.array([0, 2], np.int64)}),
        _gl2("squeeze", "Squeeze", {"x": _n(3, 1, 7)}, {"axes": np.array([1], np.int64)}),
        _gl2("pad_default", "Pad", {"x": _n(1, 3, 4, 5)}, {"p": p1}, kernel="pad"),
        _gl2("pad_reflect", "Pad", {"x": _n(1, 3, 4, 5)}, {"p": p1}, attrs={"mode": "reflect"}),
        _gl2("pad_constant_channels", "Pad", {"x": _n(1, 3, 4, 5)},
             {"p": np.array([0, 1, 1, 2, 0, 0, 2, 1], np.int64), "v": np.array(0.5, np.float32)},
             attrs={"mode": "constant"}),
        _gl2("pad_edge", "Pad", {"x": _n(1, 3, 4, 5)}, {"p": np.array([0, 0, 3, 2, 0, 0, 2, 1], np.int64)},
             attrs={"mode": "edge"}),
    ]
    return out


KERNEL_CASES = VULKAN_CASES + _gles31_cases() + _gles3_cases() + _gles2_cases()

_PATHS: dict[tuple[str, str], Any] = {}
_ZERO_COPY_OPS = ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout")  # may be a view


def _path(key: str, precision: str) -> Any:
    from capability_probe.errors import DriverUnavailable

    if (key, precision) not in _PATHS:
        try:
            p = path_module(key).create(precision)
        except DriverUnavailable as exc:
            pytest.fail(f"the {key} path cannot be created here: {exc}")
        p.poison = True  # every tensor a segment produces starts as NaN
        _PATHS[key, precision] = p
    return _PATHS[key, precision]


def _round(x: np.ndarray, precision: str) -> np.ndarray:
    with np.errstate(over="ignore"):
        return x.astype(np.float16).astype(np.float32) if precision == "fp16" else x


def _feeds(case: Case, precision: str) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    feeds = {n: (np.asarray(s, np.float32) if isinstance(s, np.ndarray) else rng.standard_normal(s).astype(np.float32))
             for n, s in case.runtime.items()}
    return {n: _round(a, precision) for n, a in feeds.items()}  # both sides see the same fp16-rounded data


def run_case(case: Case, path: str, precision: str) -> tuple[np.ndarray | None, np.ndarray, str | None]:
    """(output or None when declined, fallback's output, decline reason), after the checks every
    run must pass: the kernel name, feeds left unchanged, one download, an upload per input."""
    feeds = _feeds(case, precision)
    consts = {n: _round(a, precision) if a.dtype == np.float32 else a for n, a in case.consts.items()}
    arrays = {**feeds, **consts}
    order = list(case.order) if case.order is not None else list(case.runtime) + list(case.consts)
    want = np.asarray(fallback.run_node(case.op, [arrays[n] if n else None for n in order], dict(case.attrs),
                                        case.opset)[0])
    shapes = {n: tuple(a.shape) for n, a in arrays.items()} | {"y": tuple(want.shape)}
    dtypes = {n: np.asarray(a).dtype for n, a in arrays.items()} | {"y": np.dtype(np.float32)}
    node = Node("n", case.op, order, ["y"], dict(case.attrs))
    graph = Graph([node], list(feeds), ["y"], dict(consts), shapes, dtypes, case.opset,
                  {n: tuple(a.shape) for n, a in feeds.items()})
    if case.kernel is not None:
        assert path_module(path).kernel_name(node, graph) == case.kernel
    p = _path(path, precision)
    why = p.decline(node, graph)
    if why is not None:
        return None, want, why
    seg = p.compile([node], graph, list(feeds), ["y"])
    saved = {n: a.copy() for n, a in feeds.items()}
    stats = RunStats()
    try:
        got = seg.run(feeds, stats)["y"]
    finally:
        seg.close()
    for n, a in feeds.items():
        np.testing.assert_array_equal(a, saved[n], err_msg="feeds were modified")
    assert stats.downloads >= 1 and stats.uploads >= len(feeds)
    assert stats.dispatches >= 1 or case.op in _ZERO_COPY_OPS
    if path in ("gles31", "vulkan", "gles2"):  # one buffer (texture) per input and output, nothing else crosses
        assert stats.uploads == len(feeds) and stats.downloads == 1
    if path == "gles2" and len(seg.steps) == 1 and not seg.steps[0].quad_draws:
        # one draw per node, or per output channel of a Conv with uniform weights
        bands = getattr(seg.steps[0].kernel, "channel_uniforms", None)
        assert stats.dispatches == (1 if bands is None else want.shape[0] * len(bands))
    elif path == "gles2":  # several draws (Winograd's passes, quad GEMMs): as the segment planned them
        assert stats.dispatches == seg.draws
    return got, want, None


def _params(table: list[Case]) -> list:
    return [pytest.param(c, path, prec, id=f"{c.id}-{path}-{prec}")
            for c in table for path in c.paths for prec in c.precisions]


def _check(case: Case, path: str, precision: str) -> None:
    got, want, why = run_case(case, path, precision)
    if path in case.declines:
        assert got is None, f"{path} now runs {case.id}: remove it from the case's declines"
        return
    assert got is not None, f"{path} declined {case.id}: {why}"
    assert got.shape == want.shape and got.dtype == np.float32
    assert np.isfinite(got).all() or not np.isfinite(want).all(), "unwritten (poisoned) or non-finite output"
    tol = case.tol or TOL[precision]
    diff = float(np.abs(got - want).max())
    err = diff / max(1.0, float(np.abs(want).max()))
    assert err <= tol, f"{case.id} on {path} {precision}: error {err:.3g}"
    if case.metric == "max":
        err = diff / (float(np.abs(want).max()) or 1.0)
    elif case.metric in ("norm", "gles2"):
        err = float(np.linalg.norm((got.astype(np.float64) - want).ravel()) / max(np.linalg.norm(want.ravel()), 1e-30))
        if case.metric == "gles2" and precision == "fp32":  # norm within 1e-5 and every element within 1e-4
            tol = 1e-5
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * max(float(np.abs(want).max()), 1.0))
    assert err <= tol, f"{case.id} on {path} {precision}: {case.metric} error {err:.3g}"


@pytest.mark.parametrize("case,path,precision", _params(CASES))
def test_op_on_every_path(case: Case, path: str, precision: str) -> None:
    _check(case, path, precision)


@pytest.mark.parametrize("case,path,precision", _params(KERNEL_CASES))
def test_kernel(case: Case, path: str, precision: str) -> None:
    _check(case, path, precision)


# ---- the elementwise table ------------------------------------------------------------------------

SHAPE = (1, 6, 5, 3)  # 6 channels: one full vec4 and a half-empty one
SPECIALS = np.array([np.nan, np.inf, -np.inf, 1e38, -1e38, 0.0, -0.0, 0.5, -0.5, 2.5, -2.5, 1.0], np.float32)
# Non-default parameters, so a parameter that does not reach the kernel fails the comparison.
UNARY_ATTRS = {"Clip": {}, "LeakyRelu": {"alpha": 0.3}, "HardSigmoid": {"alpha": 0.3, "beta": 0.4},
               "Elu": {"alpha": 0.7}, "Celu": {"alpha": 0.8}, "Selu": {"alpha": 1.5, "gamma": 1.2},
               "ThresholdedRelu": {"alpha": 0.4},
               "GeluTanh": {"approximate": "tanh"}}
CLIP_BOUNDS = (-0.6, 0.8)


# GLSL's sin / cos / tan reduce their argument in fp32: only moderate arguments are exact enough
PERIODIC_LIMIT = {"Sin": 1e4, "Cos": 1e4, "Tan": 1e4}


def _input(rng: np.random.Generator, op: ew.Op, shape: tuple[int, ...] = SHAPE) -> np.ndarray:
    lo, hi = (max(op.domain[0], -4.0), min(op.domain[1], 4.0))
    x = rng.uniform(lo, hi, size=shape).astype(np.float32)
    flat = x.reshape(-1)
    idx = rng.choice(flat.size, size=len(SPECIALS), replace=False)
    limit = PERIODIC_LIMIT.get(op.name)
    with np.errstate(invalid="ignore"):  # Inf % 7 is NaN, as wanted
        flat[idx] = SPECIALS if limit is None else np.where(np.abs(SPECIALS) > limit, SPECIALS * 0.25, SPECIALS) % 7
    return x


def _model(nodes: list, inputs: dict[str, np.ndarray], outputs: list[str], inits: list | None = None):
    vis = [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(v.shape)) for n, v in inputs.items()]
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs]
    graph = helper.make_graph(nodes, "elementwise", vis, outs, inits or [])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])


def _as_stored(x: np.ndarray, path: str, precision: str) -> np.ndarray:
    """The input as the path stores it: fp16 rounding; gles2's RGBA8 encoding also keeps no
    negative zero and no denormals (docs/gles2_encoding.md), so both sides get +0 there."""
    x = _round(x, precision)
    if path == "gles2":
        tiny = np.finfo(np.float16 if precision == "fp16" else np.float32).tiny
        x = np.where(np.abs(x) < tiny, np.float32(0.0), x).astype(np.float32)
    return x


def _compare(name: str, got: np.ndarray, want: np.ndarray, precision: str, x: list[np.ndarray]) -> list[str]:
    """The problems of one output: nonfinite values must match exactly (NaN where NaN, Inf of the
    same sign), finite ones within the precision's tolerance of max(1, max|ref|)."""
    want = _round(want.astype(np.float32), precision)
    if got.shape != want.shape:
        return [f"{name}: shape {got.shape} != {want.shape}"]
    bad = []
    fin = np.isfinite(want)
    wrong_special = ~fin & ~((np.isnan(want) & np.isnan(got)) | (want == got))
    if wrong_special.any():
        i = np.flatnonzero(wrong_special.reshape(-1))[:4]
        ins = [a.reshape(-1)[i] if a.size == want.size else a for a in x]
        bad.append(f"{name}: nonfinite mismatch at {i}: got {got.reshape(-1)[i]}, want {want.reshape(-1)[i]}, "
                   f"inputs {ins}")
    if fin.any():
        scale = max(1.0, float(np.abs(want[fin]).max()))
        with np.errstate(invalid="ignore"):
            diff = np.where(fin, np.abs(got - want), 0.0)
        diff[fin & ~np.isfinite(got)] = np.inf
        err = float(diff.max()) / scale
        if not err <= TOL[precision]:
            i = int(np.argmax(diff))
            ins = [a.reshape(-1)[i] if a.size == want.size else a for a in x]
            bad.append(f"{name}: error {err:.3g} at {i}: got {got.reshape(-1)[i]}, want {want.reshape(-1)[i]}, "
                       f"inputs {ins}")
    return bad


def _run_both(model, feeds: dict[str, np.ndarray], path: str, precision: str) -> tuple[list, list, object]:
    feeds = {k: _as_stored(v, path, precision) for k, v in feeds.items()}
    with np.errstate(all="ignore"):
        want = gpubackend.Session(model, path="cpu").run(feeds)
    sess = gpubackend.Session(model, path=path, precision=precision, fallback=False)
    got = sess.run(feeds)
    return got, want, sess


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("path", GPU_PATHS)
def test_unary_table_ops(path: str, precision: str) -> None:
    rng = np.random.default_rng(1)
    nodes, feeds, outs, inits = [], {}, [], []
    for op in ew.UNARY:
        onnx_op = "Gelu" if op.name == "GeluTanh" else op.name
        x = f"x_{op.name}"
        feeds[x] = _input(rng, op)
        ins = [x]
        if op.name == "Clip":
            inits += [numpy_helper.from_array(np.float32(CLIP_BOUNDS[0]), "clip_lo"),
                      numpy_helper.from_array(np.float32(CLIP_BOUNDS[1]), "clip_hi")]
            ins += ["clip_lo", "clip_hi"]
        nodes.append(helper.make_node(onnx_op, ins, [f"y_{op.name}"], name=op.name, **UNARY_ATTRS.get(op.name, {})))
        outs.append(f"y_{op.name}")
    model = _model(nodes, feeds, outs, inits)
    got, want, sess = _run_both(model, feeds, path, precision)
    feeds = {k: _as_stored(v, path, precision) for k, v in feeds.items()}
    assert set(sess.placement.values()) == {path}
    problems = []
    for op, g, w in zip(ew.UNARY, got, want):
        problems += _compare(op.name, g, w, precision, [feeds[f"x_{op.name}"]])
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("path", GPU_PATHS)
def test_binary_table_ops(path: str, precision: str) -> None:
    """Every binary entry with a runtime operand broadcast along H, and Pow by a constant scalar."""
    rng = np.random.default_rng(2)
    nodes, feeds, outs = [], {}, []
    b_shape = (SHAPE[0], SHAPE[1], 1, SHAPE[3])
    for op in ew.BINARY:
        a, b = f"a_{op.name}", f"b_{op.name}"
        feeds[a] = _input(rng, op)
        bv = _input(rng, op, b_shape)
        if op.name == "Pow":  # integers and halves: negative bases with integer exponents are real
            bv = np.where(np.isfinite(bv), np.round(bv * 2) / 2, bv).astype(np.float32)
        feeds[b] = bv
        nodes.append(helper.make_node(op.name, [a, b], [f"y_{op.name}"], name=op.name))
        outs.append(f"y_{op.name}")
    feeds["a_pow2"] = _input(rng, ew.binary_op("Pow"))
    nodes.append(helper.make_node("Pow", ["a_pow2", "two"], ["y_pow2"], name="pow2"))
    outs.append("y_pow2")
    nodes.append(helper.make_node("Sum", ["a_Add", "b_Add"], ["y_sum"], name="sum"))
    outs.append("y_sum")
    model = _model(nodes, feeds, outs, [numpy_helper.from_array(np.float32(2.0), "two")])
    got, want, sess = _run_both(model, feeds, path, precision)
    feeds = {k: _as_stored(v, path, precision) for k, v in feeds.items()}
    assert set(sess.placement.values()) == {path}
    problems = []
    names = [op.name for op in ew.BINARY] + ["pow2", "sum"]
    args = [(f"a_{n}", f"b_{n}") for n in names[:-2]] + [("a_pow2",), ("a_Add", "b_Add")]
    for name, ins, g, w in zip(names, args, got, want):
        problems += _compare(name, g, w, precision, [feeds[i] for i in ins])
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("path", GPU_PATHS)
def test_fused_activations_keep_nan_and_inf(path: str, precision: str) -> None:
    """Conv 1x1 with each fusable activation fused into it (the loader fuses them), on an input
    holding NaN and infinities: a NaN pixel must stay NaN through every activation."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 3, 4, 5)).astype(np.float32)
    x[0, :, 0, 0] = np.nan
    x[0, 0, 1, 1] = np.inf
    x[0, 1, 2, 2] = -np.inf
    w = np.abs(rng.standard_normal((5, 3, 1, 1))).astype(np.float32) + 0.1
    nodes, outs = [], []
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.float32(-0.5), "lo"),
             numpy_helper.from_array(np.float32(0.7), "hi")]
    for act in ew.FUSABLE:
        nodes.append(helper.make_node("Conv", ["x", "w"], [f"c_{act}"], name=f"conv_{act}"))
        ins = [f"c_{act}"] + (["lo", "hi"] if act == "Clip" else [])
        nodes.append(helper.make_node(act, ins, [f"y_{act}"], name=act, **UNARY_ATTRS.get(act, {})))
        outs.append(f"y_{act}")
    model = _model(nodes, {"x": x}, outs, inits)
    got, want, sess = _run_both(model, {"x": x}, path, precision)
    assert set(sess.placement.values()) == {path}
    problems = []
    for act, g, w_ in zip(ew.FUSABLE, got, want):
        assert np.isnan(w_[0, :, 0, 0]).all()
        problems += _compare(act, g, w_, precision, [x])
    assert not problems, "\n".join(problems)


def test_library_is_generated_from_the_table() -> None:
    """shaders/common/elementwise.glsl is the rendering of the table (regenerate with
    ``python -m gpubackend.shaders.build_spirv``)."""
    assert ew.LIBRARY.read_text() == ew.glsl_library()


def test_every_table_op_renders_in_both_dialects() -> None:
    for op in ew.UNARY:
        assert "activate" not in ew.render_vec4(op, {"x": "x"})
        expr, helpers = ew.render_scalar(op, {"x": "x"}, (0.5, 1.5))
        assert "vec4" not in expr + helpers and "mix(" not in expr + helpers
    for op in ew.BINARY:
        ew.render_scalar(op, {"a": "a", "b": "b"})
    with pytest.raises(ew.ExpressionError):
        ew.render_vec4(ew.Op("Bad", "max(x, 0.0)"), {"x": "x"})  # max is undefined for NaN: not in the form
