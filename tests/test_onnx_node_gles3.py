"""ONNX's backend node tests for issue 14's float operators, forced onto gles3 (fallback=False):
every node of a case must run on the gles3 path and match ONNX's expected outputs. Inclusion by
anchored patterns; every exclusion carries its reason. A quick sample runs by default, the
rest under ``-m slow`` (llvmpipe compiles each case's shaders at its first draw).
The gles31/vulkan columns can reuse INCLUDE with their own exclusions."""

from __future__ import annotations

import pytest
from onnx_nodes import all_cases, node_cases, run_node_case

INCLUDE = [
    r"test_split_(equal|variable|zero|1d|2d).*", r"test_slice(_.*)?", r"test_transpose_.*", r"test_reshape_.*",
    r"test_flatten_.*", r"test_squeeze(_.*)?", r"test_unsqueeze_.*", r"test_concat_.*",
    r"test_gather_(0|1|2d_indices|negative_indices)", r"test_expand_.*", r"test_tile(_.*)?",
    r"test_pow(_.*)?", r"test_sqrt(_.*)?", r"test_exp(_example)?", r"test_log(_example)?", r"test_erf",
    r"test_abs", r"test_neg(_example)?", r"test_reciprocal(_example)?", r"test_floor(_example)?",
    r"test_ceil(_example)?", r"test_round", r"test_sign", r"test_(min|max)_.*", r"test_(sum|mean)_.*",
    r"test_where_.*", r"test_(equal|greater|less|greater_equal|less_equal)(_.*)?",
    r"test_cast_(FLOAT|DOUBLE|FLOAT16)_to_(FLOAT|DOUBLE|FLOAT16)",
    r"test_batchnorm_.*", r"test_instancenorm_.*", r"test_layer_normalization_.*", r"test_gelu_.*",
    r"test_(log)?softmax_.*", r"test_reduce_(mean|sum|max|min|prod|l1|l2|log_sum|log_sum_exp|sum_square)_.*",
    r"test_arg(max|min)_.*", r"test_depthtospace_.*", r"test_spacetodepth(_.*)?",
    r"test_prelu_.*", r"test_elu(_.*)?", r"test_selu(_.*)?", r"test_softplus(_.*)?", r"test_softsign(_.*)?",
    r"test_mish", r"test_hardsigmoid(_.*)?", r"test_hardswish",
]

NOT_FLOAT32 = ("gles3 textures hold float32 (RGBA32F, or RGBA16F storage in fp16); tensors of other types "
               "(integers, float16, float64, strings, bool data) stay on the CPU")
EXCLUDE = {
    r".*_expanded(_ver\d+)?": "function-body expansions test other operators",
    r"test_cast_.*": NOT_FLOAT32 + " (each Cast here has a non-float32 side)",
    r"test_(max|min)_(u?int\d+|float16|float64)": NOT_FLOAT32,
    r"test_(equal|greater|less|greater_equal|less_equal)(_u?int\d+|_string.*)?": NOT_FLOAT32,
    r"test_equal(_bcast)?": NOT_FLOAT32 + " (int32 inputs)",
    r"test_pow_types_(int|float32_u?int).*": NOT_FLOAT32,
    r"test_reduce_(max|min)_(bool_inputs|empty_set_bool)": NOT_FLOAT32,
    r"test_reduce_log_sum_exp_(keepdims|do_not_keepdims|default_axes_keepdims|negative_axes_keepdims)_.*":
        NOT_FLOAT32 + " (float64 data)",
    r"test_where_long_example": NOT_FLOAT32 + " (int64 values)",
    r"test_reduce_.*_empty_set(_.*)?|test_reshape_allowzero_reordered|test_split_zero_size_splits_.*|"
    r"test_slice_start_out_of_bounds": "empty tensors (reductions over an empty axis, 0-length Reshape, "
                                       "Split and Slice results) have no texture",
    r"test_gather_(0|1|2d_indices|negative_indices)": "the indices are a graph input; gles3 bakes constant "
                                                      "indices into the shader (index_ops.gather)",
    r"test_batchnorm_.*_training_mode": "training_mode needs the batch's own statistics and the running-mean "
                                        "outputs; gles3 runs inference BatchNormalization",
    r"test_prelu_broadcast": "a runtime rank-1 slope [5] against [3,4,5] is stored in another NCHW view (the "
                             "binary kernel; the same slope as a constant runs)",
}

CASES = node_cases(INCLUDE, EXCLUDE)
# the float32 cases of the selection: the 90% bar of issue 14 is over these
FLOAT32_SELECTED = node_cases(INCLUDE, {p: why for p, why in EXCLUDE.items()
                                        if why.startswith(NOT_FLOAT32) or p.startswith(".*_expanded")})
QUICK = [c for c in CASES if c in (
    "test_transpose_all_permutations_3", "test_slice_neg_steps", "test_split_variable_parts_2d_opset18",
    "test_concat_3d_axis_negative_2", "test_reduce_l2_keep_dims_random", "test_softmax_axis_0",
    "test_layer_normalization_4d_axis1", "test_argmax_keepdims_random_select_last_index", "test_where_example",
    "test_depthtospace_crd_mode_example", "test_tile_precomputed", "test_greater_equal_bcast",
    "test_spacetodepth_crd_mode_example")]


def test_at_least_90_percent_of_the_selected_float_cases_run() -> None:
    assert len(all_cases()) > 1000
    share = len(CASES) / len(FLOAT32_SELECTED)
    assert share >= 0.9, f"{len(CASES)} of {len(FLOAT32_SELECTED)} selected float32 cases run on gles3"


@pytest.mark.parametrize("name", QUICK)
def test_onnx_node_gles3_quick(name: str) -> None:
    sess = run_node_case(name, "gles3", fallback=False)
    assert set(sess.placement.values()) <= {"gles3"}, sess.explain()


@pytest.mark.slow
@pytest.mark.parametrize("name", [c for c in CASES if c not in QUICK])
def test_onnx_node_gles3(name: str) -> None:
    run_node_case(name, "gles3", fallback=False)
