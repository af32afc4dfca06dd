"""fp16 accuracy on the compute paths (issue 14): the kernels may lose no more than fp16 storage
does. ``tools/fp16_storage_sim.py`` gives each zoo model's floor (onnxruntime with every
activation rounded through float16); docs/zoo.md has the per-model figures."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import gpubackend


def _reduce_mean_model(shape: tuple[int, ...], op: str = "ReduceMean") -> bytes:
    node = helper.make_node(op, ["x"], ["y"], axes=[2, 3], keepdims=1)
    graph = helper.make_graph([node], "se_mean", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()


@pytest.mark.parametrize("path", ["gles31", "vulkan"])
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("op", ["ReduceMean", "ReduceMax"])
def test_squeeze_excite_mean_over_a_large_plane(path: str, precision: str, op: str) -> None:
    """A ReduceMean over H x W of 4 channels and 120 x 160 pixels (PP-OCRv6 det's first
    squeeze-excite block at 480x640): reduce.comp's 4 * H * W loop went wrong there on llvmpipe
    and lavapipe (0.19 off a mean of 0.9 in fp16, past the kernel check's 5e-2 on random data).
    Values of both signs around a small mean, as in the model."""
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((1, 6, 120, 160)) * 3.0 + 0.9).astype(np.float32)
    if precision == "fp16":
        x = x.astype(np.float16).astype(np.float32)
    with gpubackend.Session(_reduce_mean_model(x.shape, op), path=path, precision=precision, fallback=False) as sess:
        got = sess.run({"x": x})[0]
    want = x.mean(axis=(2, 3), keepdims=True) if op == "ReduceMean" else x.max(axis=(2, 3), keepdims=True)
    tol = 2e-3 if precision == "fp16" else 1e-5  # the mean of ~0.9 stored in fp16: 4.9e-4 per ulp
    assert np.abs(got - want).max() <= tol * max(1.0, float(np.abs(want).max())), (got.ravel(), want.ravel())


@pytest.mark.slow  # 3.5 min under load (first compile of the whole model plus its kernel checks)
def test_selfie_fp16_is_within_its_fp16_storage_floor_on_gles31() -> None:
    """selfie_segmentation misses 2e-2 in fp16 on every path because of fp16 storage itself:
    onnxruntime with every activation rounded through float16 is 5.0e-2 off (a few boundary
    pixels of the mask). gles31 (fusing, so rounding at fewer places) must stay within that floor,
    so a kernel that loses more than storage does fails here."""
    import sys
    from pathlib import Path

    from gpubackend import zoo
    from gpubackend.zoo.check import reference, rel_error
    from gpubackend.zoo.inputs import make_input

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
    from fp16_storage_sim import storage_error

    model = zoo.BY_NAME["selfie_segmentation"]
    floor, _ = storage_error(model.name)
    assert 2e-2 < floor < 8e-2, floor  # the figure docs/zoo.md explains
    feeds = make_input(model)
    with gpubackend.Session(str(zoo.fetch(model.name)), path="gles31", precision="fp16", fallback=False) as sess:
        got = sess.run(feeds)
    err = max(rel_error(g, r) for g, r in zip(got, reference(model, feeds)))
    assert err <= floor, (err, floor)
