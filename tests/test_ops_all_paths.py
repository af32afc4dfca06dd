"""Op cases written once and run on every GPU path in fp32 and fp16 against ``fallback``, with the
outputs poisoned (NaN) before the run so an unwritten element fails.

To add a case, append a :class:`Case` to ``CASES``: an op, its attributes, its inputs (runtime
tensors are fed, constant ones are graph constants) and the paths expected to decline it (a case
a path should run but declines fails, and so does one it runs but is listed as declining)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

import fallback
from gpubackend.graph import Graph, Node
from gpubackend.paths.base import RunStats

GPU_PATHS = ["gles31", "vulkan", "gles3", "gles2"]
PRECISIONS = ["fp32", "fp16"]
TOL = {"fp32": 1e-4, "fp16": 1e-2}  # max|got - ref| / max(1, max|ref|)


@dataclass(frozen=True)
class Case:
    id: str
    op: str
    attrs: dict[str, Any]
    runtime: dict[str, tuple[int, ...]]  # fed inputs (name -> shape), in input order before consts
    consts: dict[str, np.ndarray] = field(default_factory=dict)
    order: tuple[str, ...] | None = None  # input order when not runtime then consts ("" = absent)
    opset: int = 17
    declines: frozenset[str] = frozenset()  # paths that decline this case (by design, today)


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
         {"starts": _i64(1, -1, 0), "ends": _i64(5, -8, 6), "axes": _i64(1, 3, 2), "steps": _i64(2, -2, 3)},
         declines=frozenset({"gles2"})),
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
         {"scale": _w(5), "b": _w(5, seed=2), "mean": _w(5, seed=3), "var": np.abs(_w(5, seed=4)) + 0.5},
         declines=frozenset({"gles2"})),
    Case("batchnorm_rank3", "BatchNormalization", {}, {"x": (2, 5, 7)},
         {"scale": _w(5), "b": _w(5, seed=2), "mean": _w(5, seed=3), "var": np.abs(_w(5, seed=4)) + 0.5},
         declines=frozenset({"gles2"})),
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


_PATHS: dict[tuple[str, str], Any] = {}


def _path(key: str, precision: str) -> Any:
    from capability_probe.errors import DriverUnavailable
    from gpubackend.paths import path_module

    if (key, precision) not in _PATHS:
        try:
            p = path_module(key).create(precision)
        except DriverUnavailable as exc:
            pytest.fail(f"the {key} path cannot be created here: {exc}")
        if key == "gles2":
            p.poison = True
        _PATHS[key, precision] = p
    return _PATHS[key, precision]


def run_case(case: Case, path: str, precision: str) -> tuple[np.ndarray | None, np.ndarray, str | None]:
    """(output or None when declined, fallback's output, decline reason)."""
    rng = np.random.default_rng(7)
    feeds = {n: rng.standard_normal(s).astype(np.float32) for n, s in case.runtime.items()}
    if precision == "fp16":  # both sides see the same fp16-rounded data
        feeds = {n: a.astype(np.float16).astype(np.float32) for n, a in feeds.items()}
    arrays = {**feeds, **case.consts}
    order = list(case.order) if case.order is not None else list(case.runtime) + list(case.consts)
    want = np.asarray(fallback.run_node(case.op, [arrays[n] if n else None for n in order], dict(case.attrs),
                                        case.opset)[0])
    shapes = {n: tuple(a.shape) for n, a in arrays.items()} | {"y": tuple(want.shape)}
    dtypes = {n: np.asarray(a).dtype for n, a in arrays.items()} | {"y": np.dtype(np.float32)}
    node = Node("n", case.op, order, ["y"], dict(case.attrs))
    graph = Graph([node], list(feeds), ["y"], dict(case.consts), shapes, dtypes, case.opset,
                  {n: tuple(a.shape) for n, a in feeds.items()})
    if path == "gles31":
        from gpubackend.paths import gles31

        why = gles31.create(precision).decline(node, graph)
        if why is not None:
            return None, want, why
        got, _ = gles31.run_nodes([node], graph, feeds, precision)  # outputs poisoned with NaN
        return got["y"], want, None
    p = _path(path, precision)
    why = p.decline(node, graph)
    if why is not None:
        return None, want, why
    seg = p.compile([node], graph, list(feeds), ["y"])
    if path == "gles3":
        seg.poison = float("nan")
    try:
        got = seg.run(feeds, RunStats())["y"]  # vulkan poisons every output buffer at creation
    finally:
        seg.close()
    return got, want, None


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("path", GPU_PATHS)
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_op_on_every_path(case: Case, path: str, precision: str) -> None:
    got, want, why = run_case(case, path, precision)
    if path in case.declines:
        assert got is None, f"{path} now runs {case.id}: remove it from the case's declines"
        return
    assert got is not None, f"{path} declined {case.id}: {why}"
    assert got.shape == want.shape
    assert np.isfinite(got).all(), "unwritten (poisoned) or non-finite output"
    err = float(np.abs(got - want).max()) / max(1.0, float(np.abs(want).max()))
    assert err <= TOL[precision], f"{case.id} on {path} {precision}: error {err:.3g}"
