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


def _conv_model(size: int) -> onnx.ModelProto:
    w = numpy_helper.from_array(np.ones((16, 16, 3, 3), np.float32) / 144, "w")
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="conv", pads=[1, 1, 1, 1])
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, size, size])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture
def device_allocations(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """Every buffer/texture the GPU paths allocate in this process (their one allocation hook)."""
    from capability_probe import faults

    seen: list[tuple[str, int]] = []
    real = faults.on_alloc

    def counting(path: str, nbytes: int) -> None:
        seen.append((path, int(nbytes)))
        real(path, nbytes)

    monkeypatch.setattr(faults, "on_alloc", counting)
    return seen


@pytest.mark.parametrize("path", PATHS)
def test_each_limit_is_enforced_before_allocation_on_every_path(path: str, device_allocations) -> None:
    """Work per node, total memory and tensor size: each refused with the node and op named before
    the path allocates anything; at the limit the model runs on that path."""
    if path != "cpu" and not gpubackend.probe().usable(path):
        pytest.skip(f"{path} is not usable here")
    size = 32
    model = _conv_model(size)
    macs = size * size * 16 * 16 * 9
    elements = 16 * size * size
    total = 2 * elements * 4 + 16 * 16 * 9 * 4  # the input, the output and the weights
    over = {"max_node_macs": (macs - 1, f"{macs:,} multiply-adds"),
            "max_tensor_elements": (elements - 1, f"{elements:,} elements"),
            "max_total_bytes": (total - 1, "GiB")}
    for option, (limit, message) in over.items():
        opts = gpubackend.SessionOptions(**{option: limit})
        with pytest.raises(ResourceLimitError, match=message) as info:
            gpubackend.Session(model, path=path, fallback=False, options=opts)
        assert option in str(info.value)
        if option != "max_total_bytes":
            assert info.value.node == "conv" and info.value.op_type == "Conv"
        assert device_allocations == [], f"{option}: {path} allocated before the limit was checked"
    x = np.random.default_rng(0).uniform(-1, 1, (1, 16, size, size)).astype(np.float32)
    at_limit = gpubackend.SessionOptions(max_node_macs=macs, max_tensor_elements=elements,
                                         max_total_bytes=total)
    with gpubackend.Session(model, path=path, fallback=False, options=at_limit) as sess:
        got = sess.run({"x": x})[0]
        assert set(sess.placement.values()) == {path}
    want = gpubackend.Session(model, path="cpu").run({"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    assert (path == "cpu") == (device_allocations == [])  # the counter sees the path's allocations
