"""ONNX's backend node tests for every operator of the CPU path, through gpubackend.backend's
Session on path="cpu". Inclusion by anchored patterns; every exclusion carries its reason."""

from __future__ import annotations

import pytest
from onnx_nodes import node_cases, run_node_case

INCLUDE = [
    r"test_(basic_)?conv_.*", r"test_convtranspose(_.*)?", r"test_basic_convtranspose",
    r"test_gemm_.*", r"test_matmul_.*",
    r"test_relu", r"test_clip(_.*)?", r"test_leakyrelu(_.*)?", r"test_prelu_.*", r"test_sigmoid(_.*)?",
    r"test_hardsigmoid(_.*)?", r"test_hardswish", r"test_tanh(_.*)?",
    r"test_(add|sub|mul|div)(_.*)?", r"test_concat_.*", r"test_reshape_.*", r"test_flatten_.*",
    r"test_transpose_.*", r"test_squeeze(_.*)?", r"test_unsqueeze_.*",
    r"test_maxpool_.*", r"test_averagepool_.*", r"test_globalaveragepool(_.*)?", r"test_globalmaxpool(_.*)?",
    r"test_batchnorm_.*", r"test_softmax_.*", r"test_resize_.*", r"test_upsample_nearest",
    r"test_(constant|edge|reflect|wrap)_pad(_.*)?", r"test_reduce_mean_.*",
    r"test_constant", r"test_identity", r"test_shape(_.*)?", r"test_gather_(0|1|2d_indices|negative_indices)",
    r"test_slice(_.*)?", r"test_cast_(FLOAT|DOUBLE|FLOAT16)_to_(FLOAT|DOUBLE|FLOAT16)",
    r"test_constantofshape_.*", r"test_dropout_default(_.*)?", r"test_dropout_random_old",
    r"test_training_dropout.*",
    r"test_layer_normalization_.*", r"test_instancenorm_.*", r"test_group_normalization_.*",
    r"test_depthtospace_.*", r"test_spacetodepth(_.*)?", r"test_arg(max|min)_.*",
]

EXCLUDE = {
    r".*_expanded(_ver\d+)?": "function-body expansions exercise other operators (ReduceMax, Exp, Where...), "
                              "not the operator under test",
    r"test_identity_(opt|sequence)": "optional and sequence types are not supported",
}

CASES = node_cases(INCLUDE, EXCLUDE)


def test_case_selection_is_not_empty() -> None:
    assert len(CASES) > 200, len(CASES)


@pytest.mark.parametrize("name", CASES)
def test_onnx_node(name: str) -> None:
    run_node_case(name, "cpu")
