"""The gles31 compute path, what is its own: Concat written in place, declines, the shaders as
Vulkan GLSL, parameter blocks and packing, the whole test models against onnxruntime, ONNX's node
tests, fallback behaviour, the program-binary cache. Its per-kernel cases are in tests/test_ops.py."""

from __future__ import annotations

import numpy as np
import pytest

import gpubackend
from gpubackend import fallback
from gpubackend.errors import UnsupportedOperatorError
from gpubackend.graph import Graph, Node
from gpubackend.paths import compute_kernels as ck

TOL = {"fp32": 1e-4, "fp16": 1e-2}


def _rand(rng: np.random.Generator, shape: tuple[int, ...], scale: float = 1.0) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(np.float32)


# ---- every kernel against fallback: tests/test_ops.py (KERNEL_CASES) ----------------------------------

def test_concat_written_in_place(gles31):
    """Producers write straight into the Concat output (no copy) when nothing else reads them."""
    rng = np.random.default_rng(25)
    x = _rand(rng, (1, 5, 6, 7))
    consts = {"w1": _rand(rng, (8, 5, 3, 3)), "w2": _rand(rng, (3, 5, 1, 1)), "w3": _rand(rng, (4, 5, 1, 1))}
    conv3 = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}
    nodes = [Node("c1", "Conv", ["x", "w1"], ["a"], conv3), Node("c3", "Conv", ["x", "w3"], ["c"], {}),
             Node("c2", "Conv", ["x", "w2"], ["b"], {}), Node("cat", "Concat", ["a", "c", "b"], ["y"], {"axis": 1}),
             Node("r", "Relu", ["c"], ["z"])]  # c has a second reader: it keeps its copy
    env = {"x": x, **consts}
    for n in nodes:
        env[n.outputs[0]] = fallback.run_node(n.op_type, [env[i] for i in n.inputs], n.attrs, 17)[0]
    shapes = {k: v.shape for k, v in env.items() if k not in consts}
    graph = Graph(nodes, ["x"], ["y", "z"], consts, shapes=shapes)
    got, stats = gles31.run_nodes(nodes, graph, {"x": x})
    assert stats.dispatches == 5  # 3 convs, 1 copy (c), 1 relu
    for name in ("y", "z"):
        np.testing.assert_allclose(got[name], env[name], rtol=1e-4, atol=1e-4 * np.abs(env[name]).max())


def test_declines_with_reasons(gles31):
    rng = np.random.default_rng(20)
    g = Graph([], ["x"], ["y"], {"w": _rand(rng, (4, 3, 3, 3, 3))}, shapes={"x": (1, 3, 5, 5, 5), "y": (1, 4, 3, 3, 3)})
    node = Node("c3d", "Conv", ["x", "w"], ["y"], {"kernel_shape": [3, 3, 3]})
    path = gles31.create()
    why = path.decline(node, g)
    assert why and "rank" in why
    g2 = Graph([], ["x"], ["y"], {}, shapes={"x": (1, 3, 5, 5), "y": (1, 3, 5, 5)})
    assert "no compute kernel" in path.decline(Node("e", "Einsum", ["x"], ["y"]), g2)
    disabled = gles31.create(disabled_kernels=frozenset({"unary"}))
    assert "disabled" in disabled.decline(Node("r", "Relu", ["x"], ["y"]), g2)
    assert gles31.kernel_name(Node("r", "Relu", ["x"], ["y"]), g2) == "unary"


def _vulkan_variants(everything: bool) -> list:
    if everything:
        return ck.variants()
    picked: dict = {}
    for shader, defines in ck.variants():  # each shader with and without FP16, one activation
        d = dict(defines)
        if d.get("ACT", 5) == 5:
            picked.setdefault((shader, "FP16" in d), (shader, defines))
    return list(picked.values())


@pytest.mark.parametrize("everything", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_shaders_compile_for_vulkan(everything):
    import shutil
    import subprocess

    if shutil.which("glslangValidator") is None:
        pytest.skip("glslangValidator not installed")
    for shader, defines in _vulkan_variants(everything):
        src = ck.glsl_source((shader, defines, (8, 8, 1)), "vulkan")
        r = subprocess.run(["glslangValidator", "--stdin", "-S", "comp", "-V", "--target-env", "vulkan1.1",
                            "-o", "/dev/null"], input=src, capture_output=True, text=True)
        assert r.returncode == 0, f"{shader} {defines}: {r.stdout}"


def test_param_blocks_match_shaders():
    for shader, _ in ck.variants():
        layout = ck.param_layout(shader)
        assert layout and len(layout) <= 32, shader  # push constants: 128 bytes guaranteed


def test_pack_roundtrip_and_layout_rules():
    rng = np.random.default_rng(21)
    for shape in [(2, 5, 3, 4), (3, 7), (2, 3, 9), (6,), ()]:
        x = _rand(rng, shape)
        p = ck.pack(x)
        assert p.shape[1] == 4 and p.shape[0] == ck.vec4_count(shape)
        np.testing.assert_array_equal(ck.unpack(p, shape), x)
    assert ck.same_layout((2, 6, 1, 1), (2, 6))
    assert ck.same_layout((1, 7), (1, 7, 1, 1))
    assert not ck.same_layout((1, 3, 2, 2), (1, 12))
    assert not ck.same_layout((1, 3, 4, 5), (3, 4, 5))


# ---- whole models ------------------------------------------------------------------------------
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_mobilenet_v2_like(gles31, precision):
    import models

    model = models.mobilenet_v2_like(size=96)
    feeds = models.random_inputs(model, 0)
    want = models.onnxruntime_outputs(model, feeds)
    sess = gpubackend.Session(model, path="gles31", precision=precision, fallback=False)
    got = sess.run(feeds)
    assert set(sess.placement.values()) == {"gles31"}
    # no CPU-placed node: exactly one upload per graph input and one download per graph output
    assert (sess.stats.uploads, sess.stats.downloads) == (len(sess.input_names), len(sess.output_names))
    for g, w in zip(got, want):
        models.assert_close(g, w, TOL[precision], f"mobilenet_v2_like {precision}")


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_unet_like(gles31, precision):
    import models

    model = models.unet_like(size=64)
    feeds = models.random_inputs(model, 1)
    want = models.onnxruntime_outputs(model, feeds)
    sess = gpubackend.Session(model, path="gles31", precision=precision, fallback=False)
    got = sess.run(feeds)
    assert set(sess.placement.values()) == {"gles31"}
    assert (sess.stats.uploads, sess.stats.downloads) == (1, 1)
    assert sess.stats.dispatches >= len(sess.placement) // 2
    for g, w in zip(got, want):
        models.assert_close(g, w, TOL[precision], f"unet_like {precision}")


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_full_size_models(gles31, precision):
    import models

    for model in (models.mobilenet_v2_like(224), models.unet_like(256)):
        feeds = models.random_inputs(model, 2)
        want = models.onnxruntime_outputs(model, feeds)
        sess = gpubackend.Session(model, path="gles31", precision=precision, fallback=False)
        for g, w in zip(sess.run(feeds), want):
            models.assert_close(g, w, TOL[precision], f"{model.graph.name} {precision}")


def _model_with(op: str, **attrs):
    from onnx import TensorProto, helper

    node = helper.make_node(op, ["x"], ["y"], **attrs)
    graph = helper.make_graph([helper.make_node("Relu", ["x0"], ["x"]), node, helper.make_node("Relu", ["y"], ["z"])],
                              "g", [helper.make_tensor_value_info("x0", TensorProto.FLOAT, [1, 3, 4, 4])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 3, 4, 4])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_fallback_places_unsupported_on_cpu(gles31):
    model = _model_with("Softmax", axis=1)  # opset 11: over C*H*W at once, which no compute kernel does
    model.opset_import[0].version = 11
    x = np.random.default_rng(22).standard_normal((1, 3, 4, 4)).astype(np.float32)
    sess = gpubackend.Session(model, path="gles31", fallback=True)
    got = sess.run({"x0": x})[0]
    ops = {n.name: n.op_type for n in sess._current.graph.nodes}  # noqa: SLF001
    assert {ops.get(n, n): k for n, k in sess.placement.items() if n in ops} == \
        {"Relu": "gles31", "Softmax": "cpu"}
    e = np.exp(np.maximum(x, 0))
    want = np.maximum(e / e.sum(), 0)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert sess.stats.uploads == 2 and sess.stats.downloads == 2  # two GPU segments around the CPU node
    with pytest.raises(UnsupportedOperatorError):
        gpubackend.Session(model, path="gles31", fallback=False)


def test_program_binary_cache(gles31, tmp_path, monkeypatch):
    monkeypatch.setenv("GPUBACKEND_CACHE_DIR", str(tmp_path))
    dev, _ = gles31.device_and_programs()
    cold = gles31.ProgramCache(dev)
    if cold.dir is None:
        pytest.skip(cold.binary_note)
    src = ck.glsl_source(("compute/unary.comp", (("ACT", 5),), (8, 1, 1)), "gles31") + "\n// cache test\n"
    cold.get(src)
    assert cold.stats["compiled"] == 1 and cold.stats["binary_saved"] == 1
    warm = gles31.ProgramCache(dev)
    warm.get(src)
    assert warm.stats["from_binary"] == 1 and warm.stats["compiled"] == 0
    dev._programs.clear()  # noqa: SLF001 - a new process would not have the moderngl cache either


# ---- ONNX backend node tests ---------------------------------------------------------------------
ONNX_INCLUDE = [r"test_conv_with_strides_.*", r"test_basic_conv_.*", r"test_conv_with_autopad_same",
                r"test_convtranspose(_pad|_pads|_output_shape|_kernel_shape|_1d)?", r"test_convtranspose_dilations",
                r"test_gemm_.*", r"test_matmul_.*", r"test_(add|sub|mul|div)(_bcast)?", r"test_relu",
                r"test_sigmoid(_example)?", r"test_tanh(_example)?", r"test_leakyrelu.*", r"test_hardsigmoid.*",
                r"test_hardswish.*", r"test_clip.*", r"test_maxpool_2d_.*", r"test_averagepool_2d_.*",
                r"test_globalaveragepool.*", r"test_globalmaxpool.*", r"test_concat_.*", r"test_softmax_.*",
                r"test_logsoftmax_.*", r"test_resize_(up|down)sample_.*", r"test_flatten_.*", r"test_reshape_.*",
                r"test_transpose_.*", r"test_squeeze.*", r"test_unsqueeze.*", r"test_edge_pad", r"test_reflect_pad",
                r"test_constant_pad"]


def _onnx_cases() -> list[str]:
    try:
        from onnx_nodes import node_cases
    except Exception:  # noqa: BLE001
        return []
    return node_cases(ONNX_INCLUDE)


_ACCEPTED: list[str] = []


@pytest.mark.parametrize("name", _onnx_cases())
def test_onnx_node(gles31, name):
    from onnx_nodes import check_node_case_on_path

    if check_node_case_on_path(name, "gles31"):  # the case's own tolerances
        _ACCEPTED.append(name)


def test_onnx_node_coverage(gles31):
    """Guards against the path silently declining what it used to run (run after the cases)."""
    from onnx_nodes import check_node_case_on_path

    accepted = _ACCEPTED or [n for n in _onnx_cases() if check_node_case_on_path(n, "gles31")]
    assert len(accepted) >= 110, f"only {len(accepted)} ONNX node cases run fully on gles31"
