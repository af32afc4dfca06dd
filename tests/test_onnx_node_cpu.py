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
    r"test_(constant|edge|reflect)_pad(_.*)?", r"test_reduce_mean_.*",
    r"test_constant", r"test_identity", r"test_shape(_.*)?", r"test_gather_(0|1|2d_indices|negative_indices)",
    r"test_slice(_.*)?", r"test_cast_(FLOAT|DOUBLE|FLOAT16)_to_(FLOAT|DOUBLE|FLOAT16)",
    r"test_constantofshape_.*", r"test_dropout_default(_.*)?", r"test_dropout_random_old",
]

EXCLUDE = {
    r".*_expanded(_ver\d+)?": "function-body expansions exercise other operators (ReduceMax, Exp, Where...), "
                              "not the operator under test",
    r"test_batchnorm_.*_training_mode": "BatchNormalization is supported in inference mode only",
    r"test_(add|sub|mul|div)_u?int(8|16|64)": "integer arithmetic other than int32 is not a target of this "
                                               "float inference backend",
    r"test_(add|sub|mul|div)_uint32": "integer arithmetic other than int32 is not a target of this "
                                      "float inference backend",
    r"test_clip_default_int8_.*": "int8 Clip is not a target of this float inference backend",
    r"test_resize_.*antialias.*": "Resize antialias (opset 18) is not implemented",
    r"test_resize_tf_crop_and_resize.*": "tf_crop_and_resize is not implemented (no mobile exporter emits it)",
    r"test_resize_.*_keep_aspect_ratio.*": "keep_aspect_ratio_policy (opset 18) is not implemented",
    r"test_convtranspose_3d": "3-D transposed convolution is not implemented",
    r"test_maxpool_with_argmax_.*": "MaxPool's Indices output is not implemented",
    r"test_maxpool_3d_.*|test_averagepool_3d_.*": "3-D pooling is not implemented",
    r"test_identity_(opt|sequence)": "optional and sequence types are not supported",
    r"test_dropout_random_old": "training-mode Dropout draws random numbers; the result cannot be compared",
}

CASES = node_cases(INCLUDE, EXCLUDE)


def test_case_selection_is_not_empty() -> None:
    assert len(CASES) > 200, len(CASES)


@pytest.mark.parametrize("name", CASES)
def test_onnx_node(name: str) -> None:
    run_node_case(name, "cpu")
