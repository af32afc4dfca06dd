"""gles31's TEXW kernels (conv and gemm weights read through a buffer texture; the llvmpipe
default): the default on llvmpipe, the same SPIR-V as the storage-buffer form on Vulkan, and the
storage-buffer form where the weights exceed the driver's buffer-texture limit. That every TEXW
variant matches the reference is in tests/test_tuning.py (every registered variant)."""

from __future__ import annotations

import numpy as np
import pytest

from gpubackend import fallback, tuning
from gpubackend.graph import Graph, Node
from gpubackend.paths import compute_kernels  # noqa: F401 - registers the conv and gemm variants
from gpubackend.shaders import build_spirv


def test_llvmpipe_defaults_read_weights_through_a_texture() -> None:
    for unit in ("conv", "gemm"):
        variant = tuning.units()[unit].default_for("llvmpipe")
        assert variant.define("TEXW") == 1
        assert "TEXW" not in dict(tuning.units()[unit].default_for("lavapipe").defines)


def test_vulkan_build_ignores_texw() -> None:
    plain = (("ACT", 0), ("BX", 4), ("CB", 4))
    assert build_spirv.spv_name("compute/conv.comp", plain + (("TEXW", 1),)) == build_spirv.spv_name(
        "compute/conv.comp", plain)
    assert build_spirv.source_hash("compute/conv.comp", plain + (("TEXW", 1),)) == build_spirv.source_hash(
        "compute/conv.comp", plain)


def _conv_graph() -> tuple[list[Node], Graph, dict[str, np.ndarray], np.ndarray]:
    rng = np.random.default_rng(16)
    x = rng.standard_normal((1, 6, 7, 9)).astype(np.float32)
    consts = {"w": rng.standard_normal((10, 6, 3, 3)).astype(np.float32) * 0.3,
              "b": rng.standard_normal(10).astype(np.float32)}
    attrs = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}
    nodes = [Node("conv", "Conv", ["x", "w", "b"], ["y"], attrs)]
    want = fallback.run_node("Conv", [x, consts["w"], consts["b"]], attrs, 17)[0]
    graph = Graph(nodes, ["x"], ["y"], consts, shapes={"x": x.shape, "y": want.shape}, opset=17)
    return nodes, graph, {"x": x}, want


@pytest.mark.parametrize("limit", [0, 1 << 20], ids=["over-the-limit", "within"])
def test_weights_over_the_buffer_texture_limit_use_the_storage_buffer(gles31, monkeypatch, limit: int) -> None:
    nodes, graph, feeds, want = _conv_graph()
    _, programs = gles31.device_and_programs()
    monkeypatch.setattr(programs, "max_texture_buffer_texels", limit)
    path = gles31.create()
    with tuning.forced(conv="bx4cb4tex"):
        seg = path.compile(nodes, graph, ["x"], ["y"])
    try:
        got = seg.run(feeds, gles31.RunStats())["y"]
        fell_back = any("reads its weights as a storage buffer" in n for n in seg.notes)
        assert fell_back == (limit == 0)
        assert sum(d.texture != 0 for d in seg.dispatches) == (0 if limit == 0 else 1)
    finally:
        seg.close()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
