"""The Vulkan (Kompute) path on lavapipe, what is its own: the shipped SPIR-V against its sources,
push and specialisation constants, the recorded sequence, transfers, fault hooks, ONNX's node tests
and the whole test models against onnxruntime. Its per-kernel cases are in tests/test_ops.py."""

from __future__ import annotations

import numpy as np
import pytest
from models import assert_close, mobilenet_v2_like, onnxruntime_outputs, random_inputs, unet_like
from onnx_nodes import node_cases, run_node_case

import gpubackend
from capability_probe.errors import ContextLost, DeviceOutOfMemory, DriverUnavailable, ShaderCompileError


def _vulkan_absent() -> str | None:
    try:
        from gpubackend.paths.vulkan.device import VkDevice

        VkDevice()
    except DriverUnavailable as exc:
        return str(exc)
    return None


_ABSENT = _vulkan_absent()
pytestmark = pytest.mark.skipif(_ABSENT is not None, reason=f"no Vulkan device through Kompute: {_ABSENT}")

from gpubackend.paths import vulkan  # noqa: E402
from gpubackend.paths.vulkan.device import VkDevice, params_words  # noqa: E402
from gpubackend.paths.vulkan.program import BufferSpec, Compiled, Edge, Program, Step  # noqa: E402

TOL = {"fp32": 1e-4, "fp16": 1e-2}
rng = np.random.default_rng(20261121)


def r(*shape: int, lo: float = -1.0, hi: float = 1.0) -> np.ndarray:
    return rng.uniform(lo, hi, shape).astype(np.float32)


def rel_err(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.linalg.norm((got.astype(np.float64) - want).ravel()) / max(np.linalg.norm(want.ravel()), 1e-30))


# ---- infrastructure: SPIR-V, push/spec constants, recording ------------------------------------
def _need_glslang():
    from gpubackend.shaders import build_spirv

    if build_spirv.glslang() is None:
        pytest.skip("glslangValidator is not installed; cannot recompile the shipped SPIR-V")
    return build_spirv


def test_spirv_in_sync_one_variant_per_shader() -> None:
    """Quick tier: the most complex variant of every shader recompiled and compared, and the
    shipped file set equal to the variant list (nothing missing, nothing stale)."""
    build_spirv = _need_glslang()
    todo = build_spirv.variants()
    pick: dict[str, tuple] = {}
    for shader, defines in todo:
        if len(defines) >= len(pick.get(shader, ((), ()))[1]):
            pick[shader] = (shader, defines)
    stale = []
    for shader, defines in pick.values():
        name = build_spirv.spv_name(shader, defines)
        shipped = build_spirv.SPIRV_DIR / name
        if not shipped.is_file() or not build_spirv.same_module(shipped.read_bytes(),
                                                                build_spirv.compile_variant(shader, defines)):
            stale.append(name)
    assert not stale, f"{stale} out of date: run `python -m gpubackend.shaders.build_spirv`"
    names = {build_spirv.spv_name(s, d) for s, d in todo}
    assert {p.name for p in build_spirv.SPIRV_DIR.glob("*.spv")} == names


@pytest.mark.slow
def test_spirv_in_sync_with_sources() -> None:
    build_spirv = _need_glslang()
    problems = build_spirv.build(check=True)
    assert not problems, "\n".join(problems) + "\nrun `python -m gpubackend.shaders.build_spirv`"


def test_manifest_matches_sources() -> None:
    """Compiler-free: every variant's GLSL text hashes to what the manifest recorded when its
    .spv was built (the runtime declines a variant whose hash differs)."""
    from gpubackend.shaders import build_spirv

    manifest = build_spirv.read_manifest()
    stale = [build_spirv.spv_name(s, d) for s, d in build_spirv.variants()
             if manifest.get(build_spirv.spv_name(s, d)) != build_spirv.source_hash(s, d)]
    assert not stale, f"{stale}: run `python -m gpubackend.shaders.build_spirv`"


def test_every_generated_variant_is_shipped() -> None:
    from gpubackend.paths import compute_kernels as ck
    from gpubackend.shaders.build_spirv import SPIRV_DIR, spv_name

    missing = [spv_name(s, d) for s, d in ck.variants() if not (SPIRV_DIR / spv_name(s, d)).is_file()]
    assert not missing, missing


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_selftest_kernel_push_and_spec_constants(precision: str) -> None:
    """Two chained dispatches (through a device-only temp) with float and int push constants,
    an odd element count and poisoned outputs."""
    dev = VkDevice()
    n4 = 1001
    fp16 = precision == "fp16"
    x = r(n4, 4, lo=-3, hi=3)
    words = x.astype(np.float16).reshape(-1).view(np.uint32) if fp16 else x.reshape(-1)
    dtype = np.uint32 if fp16 else np.float32
    spv = "vk_selftest__FP16=1.spv" if fp16 else "vk_selftest.spv"
    p = Program()
    p.add_buffer(BufferSpec("x", words.size, dtype, "input"))
    p.add_buffer(BufferSpec("t", words.size, dtype, "temp"))
    p.add_buffer(BufferSpec("y", words.size, dtype, "output"))
    for name, (a, b) in (("s0", ("x", "t")), ("s1", ("t", "y"))):
        p.steps.append(Step(name, spv, [a, b], params_words([n4, 1.5, -0.25, 0.0, 0.0]), (16, 1, 1), (64, 1, 1)))
    p.inputs.append(Edge("x", "x"))
    p.outputs.append(Edge("y", "y"))
    c = Compiled(dev, p)
    try:
        poisoned = np.array(c.tensors["y"].data(), copy=True)
        assert (poisoned == 0x7E007E00).all() if fp16 else np.isnan(poisoned).all()
        (out,) = c.execute([words])
        got = out.view(np.float16).astype(np.float32) if fp16 else out
        xs = x.reshape(-1).astype(np.float16).astype(np.float32) if fp16 else x.reshape(-1)
        want = (xs * 1.5 - 0.25) * 1.5 - 0.25
        assert rel_err(got, want) < TOL[precision]
    finally:
        c.close()


def test_push_constant_words() -> None:
    w = params_words([3, -2, 1.5, True])
    assert w.dtype == np.uint32
    assert w.view(np.int32)[:2].tolist() == [3, -2] and w[2:3].view(np.float32)[0] == 1.5 and w[3] == 1


# ---- every kernel against fallback: tests/test_ops.py (KERNEL_CASES); poisoned outputs:
# tests/test_segment_services.py ----------------------------------------------------------------------
def test_declines_with_reasons() -> None:
    graph, _ = vulkan.single_node_graph("Resize", [r(1, 2, 5, 5), None, np.array([1, 1, 2, 2], np.float32)],
                                        {"mode": "cubic"}, (2,))
    why = vulkan.create().decline(graph.nodes[0], graph)
    assert why and "cubic" in why
    graph, _ = vulkan.single_node_graph("Conv", [r(1, 2, 5, 5), r(3, 2, 3, 3)], {"kernel_shape": [3, 3]})
    why = vulkan.create(disabled_kernels=frozenset({"conv"})).decline(graph.nodes[0], graph)
    assert why and "disabled" in why
    assert vulkan.kernel_name(graph.nodes[0], graph) == "conv"


# ---- a chain on the device: one upload, one download, replay == per-node evals -----------------------
def _chain_model():
    from onnx import TensorProto, helper, numpy_helper

    w1, b1 = r(8, 3, 3, 3), r(8)
    w2 = r(8, 1, 3, 3)
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="c1", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="r1"),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], name="c2", kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=8),
             helper.make_node("Add", ["c2", "r1"], ["a"], name="a"),
             helper.make_node("GlobalAveragePool", ["a"], ["g"], name="g"),
             helper.make_node("Flatten", ["g"], ["y"], name="f")]
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 13, 11])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8]),
                               helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, 8, 13, 11])],
                              [numpy_helper.from_array(a, n) for n, a in (("w1", w1), ("b1", b1), ("w2", w2))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_chain_transfers_and_replay(monkeypatch: pytest.MonkeyPatch) -> None:
    model = _chain_model()
    x = r(1, 3, 13, 11)
    want = onnxruntime_outputs(model, {"x": x})
    sess = gpubackend.Session(model, path="vulkan", fallback=False)
    assert set(sess.placement.values()) == {"vulkan"}
    got = sess.run({"x": x})
    for g, w in zip(got, want):
        assert_close(g, w, 1e-4, "chain")
    st = sess.stats
    assert (st.uploads, st.downloads) == (1, 2)
    assert st.upload_bytes == 1 * 13 * 11 * 4 * 4 and st.download_bytes == 8 * 4 + 13 * 11 * 2 * 16
    assert st.dispatches == 4  # conv+relu fused, depthwise, add, global pool; Flatten is zero-copy
    again = sess.run({"x": x})  # the recorded sequence replayed
    for a, b in zip(got, again):
        np.testing.assert_array_equal(a, b)
    monkeypatch.setenv(vulkan.RECORD_ENV, "0")
    per_node = gpubackend.Session(model, path="vulkan", fallback=False)
    for a, b in zip(got, per_node.run({"x": x})):
        np.testing.assert_array_equal(a, b)


# ---- fault hooks ------------------------------------------------------------------------------------
def test_fault_hooks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUBACKEND_FAULT", "compile@vulkan")
    with pytest.raises(ShaderCompileError):
        vulkan.canary()
    monkeypatch.setenv("GPUBACKEND_FAULT", "oom@vulkan")
    with pytest.raises(DeviceOutOfMemory):
        vulkan.canary()
    monkeypatch.setenv("GPUBACKEND_FAULT", "wrong@vulkan")
    with pytest.raises(RuntimeError, match="relative error"):
        vulkan.canary()
    monkeypatch.setenv("GPUBACKEND_FAULT", "nan@vulkan")
    with pytest.raises(RuntimeError, match="nan"):
        vulkan.canary()
    monkeypatch.setenv("GPUBACKEND_FAULT", "lost@vulkan")
    with pytest.raises(ContextLost):
        vulkan.canary()
    monkeypatch.setenv("GPUBACKEND_FAULT", "absent@vulkan")
    with pytest.raises(DriverUnavailable):
        VkDevice()
    monkeypatch.setenv("GPUBACKEND_FAULT", "compile@gles31")
    assert vulkan.canary() < 1e-4


def test_session_replans_when_the_device_is_lost(monkeypatch: pytest.MonkeyPatch) -> None:
    """A driver fault at run time (context lost) re-plans the nodes onto another path."""
    model = _chain_model()
    x = r(1, 3, 13, 11)
    sess = gpubackend.Session(model, path="vulkan", fallback=True)
    want = sess.run({"x": x})
    monkeypatch.setenv("GPUBACKEND_FAULT", "lost@vulkan")
    got = sess.run({"x": x})
    for a, b in zip(got, want):
        assert_close(a, b, 1e-4, "after fallback")
    assert "vulkan" not in set(sess.placement.values())


def test_without_kompute_the_path_reports_itself_absent() -> None:
    """kp not importable (not built here): the module still imports, plans and declines nothing,
    and the canary raises DriverUnavailable naming kp, which the probe reports as the reason."""
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['kp'] = None\n"
        "from capability_probe.errors import DriverUnavailable\n"
        "from gpubackend.paths import vulkan\n"
        "path = vulkan.create()\n"
        "try:\n"
        "    vulkan.canary()\n"
        "except DriverUnavailable as e:\n"
        "    print('ABSENT', e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "ABSENT" in out.stdout and "kp" in out.stdout


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_canary(precision: str) -> None:
    assert vulkan.canary(precision) < TOL[precision]


# ---- ONNX backend node tests, forced to vulkan ---------------------------------------------------
INCLUDE = [
    r"test_(add|sub|mul|div)(_bcast|_example)?", r"test_relu", r"test_sigmoid(_example)?", r"test_tanh(_example)?",
    r"test_hardsigmoid(_.*)?", r"test_hardswish", r"test_leakyrelu(_.*)?", r"test_clip(_.*)?",
    r"test_(basic_)?conv_.*", r"test_convtranspose(_.*)?", r"test_gemm_.*", r"test_matmul_.*",
    r"test_maxpool_.*", r"test_averagepool_.*", r"test_global(average|max)pool(_precomputed)?",
    r"test_concat_.*", r"test_softmax_.*", r"test_resize_.*", r"test_(constant|edge|reflect)_pad(_.*)?",
    r"test_flatten_.*", r"test_transpose_.*", r"test_identity", r"test_reshape_.*", r"test_(un)?squeeze(_.*)?",
]
EXCLUDE = {
    r".*_expanded(_ver\d+)?": "function-body expansions exercise other operators",
    r"test_convtranspose_(1d|3d)": "only 2-D transposed convolution",
    r"test_gemm_(all_attributes|transposeA)": "transA=1 on a runtime A",
    r"test_gemm_default_matrix_bias": "a full-matrix C (only a per-column bias is fused)",
    r"test_clip_(?!default_inbounds).*|test_clip": "Clip bounds fed as runtime inputs (must be constants), int8",
    r"test_(constant|edge|reflect)_pad.*": "pads fed as a runtime input (must be a constant)",
    r"test_reshape_.*|test_(un)?squeeze.*": "shape / axes fed as a runtime input (must be a constant), "
                                             "rank > 4, empty tensors",
    r"test_matmul_(1d_1d|1d_3d|4d|4d_1d|bcast)": "rank 1 or rank 4 MatMul operands",
    r"test_(max|average)pool_(1d|3d)_.*": "only 2-D pooling",
    r"test_maxpool_2d_uint8|test_maxpool_with_argmax_.*": "uint8 input / Indices output",
    r"test_resize_.*cubic.*": "cubic resize",
    r"test_resize_.*_scales_.*": "Resize scales fed as a runtime input (must be a constant)",
    r"test_resize_.*(not_larger|not_smaller|axes_).*|test_resize_.*antialias.*|test_resize_tf_crop.*":
        "keep_aspect_ratio_policy / axes / antialias / crop",
    r"test_softmax_axis_[01]": "softmax along a non-packed axis",
    r"test_(add|sub|mul|div)_u?int.*": "integer tensors",
    r"test_identity_(opt|sequence)": "optional and sequence types",
}
NODE_CASES = node_cases(INCLUDE, EXCLUDE)


def test_node_case_selection() -> None:
    assert len(NODE_CASES) >= 110, len(NODE_CASES)


@pytest.mark.parametrize("name", NODE_CASES)
def test_onnx_node_on_vulkan(name: str) -> None:
    sess = run_node_case(name, "vulkan", fallback=False)
    assert set(sess.placement.values()) <= {"vulkan"}


# ---- whole models against onnxruntime ---------------------------------------------------------------
@pytest.fixture(scope="module", params=["mobilenet_v2_like", "unet_like"])
def model_case(request: pytest.FixtureRequest):
    model = {"mobilenet_v2_like": mobilenet_v2_like, "unet_like": unet_like}[request.param]()
    feeds = random_inputs(model, seed=3)
    return request.param, model, feeds, onnxruntime_outputs(model, feeds)


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_model_matches_onnxruntime(model_case, precision: str) -> None:
    name, model, feeds, want = model_case
    sess = gpubackend.Session(model, path="vulkan", precision=precision, fallback=False)
    got = sess.run(feeds)
    assert set(sess.placement.values()) == {"vulkan"}, sess.explain()
    for g, w in zip(got, want):
        assert_close(g, w, TOL[precision], f"{name} {precision}")
    assert (sess.stats.uploads, sess.stats.downloads) == (len(feeds), len(want))


@pytest.mark.parametrize("precision,tol", [("fp32", 1e-3), ("fp16", 0.1)])
def test_selfie_model_matches_mediapipe(precision: str, tol: float) -> None:
    """The shipped real model (MediaPipe selfie segmentation) on vulkan against MediaPipe's own
    masks: max abs error (fp32 measured 3e-5; fp16 storage 5e-2, TFLite's GL fp16 delegate 3e-2)."""
    from pathlib import Path

    from gpubackend.models import SELFIE_SEGMENTATION

    with np.load(Path(__file__).parent / "data" / "selfie_reference.npz") as d:
        names, imgs, masks = d["names"], d["inputs"], d["masks"]
    sess = gpubackend.Session(str(SELFIE_SEGMENTATION), path="vulkan", precision=precision, fallback=False)
    assert set(sess.placement.values()) == {"vulkan"}
    for name, img, ref in zip(names, imgs, masks):
        (y,) = sess.run({"input": np.ascontiguousarray((img.astype(np.float32) / 255.0).transpose(2, 0, 1)[None])})
        err = float(np.abs(y[0, 0] - ref).max())
        assert err < tol, f"{name} {precision}: max abs diff {err}"
    assert (sess.stats.uploads, sess.stats.downloads) == (1, 1)


def test_concat_written_in_place() -> None:
    """Two convolutions whose only reader is a channel Concat write straight into its output
    (compute_kernels.elide_concats): two dispatches, no copy, exact against onnxruntime."""
    from onnx import TensorProto, helper, numpy_helper

    inits = {"w1": r(8, 3, 3, 3), "w2": r(5, 3, 1, 1), "b2": r(5)}
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], name="c1", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["x", "w2", "b2"], ["c2"], name="c2", kernel_shape=[1, 1]),
             helper.make_node("Concat", ["c1", "c2"], ["y"], name="cat", axis=1)]
    graph = helper.make_graph(nodes, "cat", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 7, 9])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 13, 7, 9])],
                              [numpy_helper.from_array(a, n) for n, a in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    x = r(2, 3, 7, 9)
    (want,) = onnxruntime_outputs(model, {"x": x})
    for precision in ("fp32", "fp16"):
        sess = gpubackend.Session(model, path="vulkan", precision=precision, fallback=False)
        (got,) = sess.run({"x": x})
        assert_close(got, want, TOL[precision], f"in-place concat {precision}")
        assert sess.stats.dispatches == 2
