"""gles31's TEX kernels (conv and gemm weights (TEXW) and input (TEXX) read through buffer
textures; the llvmpipe default): the default on llvmpipe, the same SPIR-V as the storage-buffer
form on Vulkan, fp32 and fp16 storage, and the storage-buffer form where a buffer exceeds the
driver's buffer-texture limit. That every TEX variant matches the reference at fp32 is in
tests/test_tuning.py (every registered variant)."""

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
        assert variant.define("TEXW") == 1 and variant.define("TEXX") == 1
        assert "TEXW" not in dict(tuning.units()[unit].default_for("lavapipe").defines)


def test_vulkan_build_ignores_the_texture_defines() -> None:
    plain = (("ACT", 0), ("BX", 4), ("CB", 4))
    tex = plain + (("TEXW", 1), ("TEXX", 1))
    assert build_spirv.spv_name("compute/conv.comp", tex) == build_spirv.spv_name("compute/conv.comp", plain)
    assert build_spirv.source_hash("compute/conv.comp", tex) == build_spirv.source_hash("compute/conv.comp", plain)


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


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("limit", [0, 1 << 20], ids=["over-the-limit", "within"])
def test_texture_reads_and_the_storage_buffer_form_over_the_limit(gles31, monkeypatch, limit: int,
                                                                  precision: str) -> None:
    nodes, graph, feeds, want = _conv_graph()
    _, programs = gles31.device_and_programs()
    monkeypatch.setattr(programs, "max_texture_buffer_texels", limit)
    path = gles31.create(precision)
    with tuning.forced(conv="bx4cb4tex"):
        seg = path.compile(nodes, graph, ["x"], ["y"])
    try:
        got = seg.run(feeds, gles31.RunStats())["y"]
        fell_back = {b for b in (0, 1) if any(f"reads binding {b} as a storage buffer" in n for n in seg.notes)}
        assert fell_back == ({0, 1} if limit == 0 else set())
        assert sum(len(d.textures) for d in seg.dispatches) == (0 if limit == 0 else 2)
    finally:
        seg.close()
    tol = 1e-4 if precision == "fp32" else 1e-2
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.abs(want).max())
