"""Resource limits: a model that would blow up memory or work is refused, naming the node, before
anything is allocated (issue 18's unbounded-work reproducers), on every path."""

from __future__ import annotations

import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import gpubackend
from gpubackend.errors import OptionError, ResourceLimitError

PATHS = ["cpu", "gles2", "gles3", "gles31", "vulkan"]


def _resize(scales: list[float] | None = None, sizes: list[int] | None = None) -> onnx.ModelProto:
    inits = [numpy_helper.from_array(np.array(scales or [], np.float32), "scales")]
    inputs = ["x", "", "scales"]
    if sizes is not None:
        inits.append(numpy_helper.from_array(np.array(sizes, np.int64), "sizes"))
        inputs = ["x", "", "", "sizes"]
    node = helper.make_node("Resize", inputs, ["y"], mode="nearest")
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 4, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("kind", ["scales", "sizes"])
def test_huge_resize_is_refused_quickly(path: str, kind: str) -> None:
    model = _resize(scales=[1, 1, 1e5, 1e5]) if kind == "scales" else _resize(sizes=[1, 1, 65536, 65536])
    t = time.perf_counter()
    with pytest.raises(ResourceLimitError, match=r"Resize.*elements") as info:
        gpubackend.Session(model, path=path)
    assert info.value.op_type == "Resize"
    assert time.perf_counter() - t < 30


def test_limits_are_options_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    model = _resize(scales=[1, 1, 4, 4])  # 256 output elements
    x = np.ones((1, 1, 4, 4), np.float32)
    opts = gpubackend.SessionOptions(max_tensor_elements=100)
    with pytest.raises(ResourceLimitError, match="max_tensor_elements"):
        gpubackend.Session(model, path="cpu", options=opts)
    monkeypatch.setenv("GPUBACKEND_MAX_TENSOR_ELEMENTS", "0")  # 0: no limit
    with gpubackend.Session(model, path="cpu", options=opts) as sess:
        assert sess.run({"x": x})[0].shape == (1, 1, 16, 16)
    monkeypatch.setenv("GPUBACKEND_MAX_TENSOR_ELEMENTS", "lots")
    with pytest.raises(OptionError, match="GPUBACKEND_MAX_TENSOR_ELEMENTS"):
        gpubackend.Session(model, path="cpu")


def test_work_and_total_memory_limits() -> None:
    w = numpy_helper.from_array(np.ones((64, 64, 3, 3), np.float32), "w")
    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 64, 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    macs = 64 * 64 * 64 * 64 * 9
    with pytest.raises(ResourceLimitError, match=f"{macs:,} multiply-adds"):
        gpubackend.Session(model, path="cpu", options=gpubackend.SessionOptions(max_node_macs=macs - 1))
    with pytest.raises(ResourceLimitError, match="GiB"):
        gpubackend.Session(model, path="cpu", options=gpubackend.SessionOptions(max_total_bytes=1 << 20))
    with gpubackend.Session(model, path="cpu", options=gpubackend.SessionOptions(max_node_macs=macs)) as sess:
        assert sess.run({"x": np.ones((1, 64, 64, 64), np.float32)})[0].shape == (1, 64, 64, 64)
