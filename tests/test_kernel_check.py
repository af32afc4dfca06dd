"""The per-kernel first-run check (gpubackend.kernel_check): a driver fault scoped to one kernel
passes the probe; the check catches it before the session returns a wrong answer, moves that
kernel's nodes to the CPU, says why in explain(), and caches the verdict per driver."""

from __future__ import annotations

import json

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import gpubackend
from gpubackend.kernel_check import FILE_PREFIX, TOLERANCE, CheckedPath, VerdictStore, compare


def _conv_relu_model():
    rng = np.random.default_rng(3)
    w = rng.standard_normal((8, 3, 3, 3)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Abs", ["c"], ["y"], name="abs")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 8])],
                              [numpy_helper.from_array(w, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture
def fault_env(monkeypatch: pytest.MonkeyPatch, tmp_path):
    def apply(spec: str) -> None:
        monkeypatch.setenv("GPUBACKEND_CACHE_DIR", str(tmp_path / "cache"))
        monkeypatch.setenv("GPUBACKEND_PROBE_TIMEOUT", "30")
        monkeypatch.setenv("GPUBACKEND_PROBE_CANARIES", "none")
        monkeypatch.setenv("GPUBACKEND_FAULT", spec)
        monkeypatch.delenv("GPUBACKEND_KERNEL_CHECK", raising=False)
        VerdictStore.forget_memory()
    yield apply
    VerdictStore.forget_memory()


def _need(path: str) -> None:
    report = gpubackend.probe()
    if not report.usable(path):
        pytest.skip(f"{path} is not usable here: {report.paths[path].reason}")


X = np.random.default_rng(4).uniform(-1, 1, (1, 3, 8, 8)).astype(np.float32)


def _reference():
    return gpubackend.Session(_conv_relu_model(), path="cpu", cpu_engine="numpy").run({"x": X})[0]


@pytest.mark.parametrize("fault", ["wrong@vulkan:conv", "nan@gles31:conv"])
def test_a_one_kernel_fault_is_caught_before_a_wrong_answer(fault: str, fault_env) -> None:
    path = fault.split("@")[1].split(":")[0]
    fault_env(fault)
    _need(path)  # the probe does not see a fault scoped to one kernel
    want = _reference()
    sess = gpubackend.Session(_conv_relu_model(), path=path)
    (got,) = sess.run({"x": X})
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    assert sess.placement == {"conv": "cpu", "abs": path}, sess.explain()
    assert "kernel 'conv' failed its first-run check" in sess.explain()
    # the verdict is cached for this driver state: a new process (memory forgotten) reads it
    VerdictStore.forget_memory()
    again = gpubackend.Session(_conv_relu_model(), path=path)
    assert again.placement["conv"] == "cpu"
    assert "(cached)" in again.explain()


def test_without_the_check_the_fault_gives_a_wrong_answer(fault_env) -> None:
    # the fault really strikes the conv kernel: this is what the check protects against
    fault_env("wrong@vulkan:conv")
    _need("vulkan")
    sess = gpubackend.Session(_conv_relu_model(), path="vulkan", options=gpubackend.SessionOptions(kernel_check=False))
    (got,) = sess.run({"x": X})
    assert compare(got, _reference()) > 1e-2
    assert sess.placement["conv"] == "vulkan"


@pytest.mark.parametrize("precision", ["fp16", "fp16-compute"])
def test_an_fp16_kernel_two_percent_off_is_caught(precision: str, fault_env) -> None:
    """A conv kernel whose every output is 2% too large (the size of the ReduceMean-over-a-large-
    plane bug, 1.8e-2) passed the old fp16 bound of 5e-2; the check now compares with the fp16-
    rounded reference at a bound honest fp16 rounding stays under, and declines it."""
    fault_env("skew@vulkan:conv")
    _need("vulkan")
    want = _reference()
    unchecked = gpubackend.Session(_conv_relu_model(), path="vulkan", precision=precision,
                                   options=gpubackend.SessionOptions(kernel_check=False))
    off = compare(unchecked.run({"x": X})[0], want)
    assert TOLERANCE[precision] < off < 5e-2  # the fault strikes, and the old bound let it through
    sess = gpubackend.Session(_conv_relu_model(), path="vulkan", precision=precision)
    assert sess.placement == {"conv": "cpu", "abs": "vulkan"}, sess.explain()
    assert compare(sess.run({"x": X})[0], want) < 2e-3  # abs alone, in fp16
    assert "kernel 'conv' failed its first-run check" in sess.explain()


@pytest.mark.parametrize("precision", ["fp16", "fp16-compute"])
def test_healthy_fp16_kernels_pass_the_check(precision: str, fault_env) -> None:
    fault_env("")
    _need("vulkan")
    sess = gpubackend.Session(_conv_relu_model(), path="vulkan", precision=precision)
    assert set(sess.placement.values()) == {"vulkan"}, sess.explain()
    assert compare(sess.run({"x": X})[0], _reference()) < 2e-3


def test_healthy_kernels_pass_once_and_are_cached(fault_env, tmp_path) -> None:
    fault_env("")
    _need("gles31")
    sess = gpubackend.Session(_conv_relu_model(), path="gles31")
    (got,) = sess.run({"x": X})
    np.testing.assert_allclose(got, _reference(), rtol=1e-4, atol=1e-5)
    assert set(sess.placement.values()) == {"gles31"}
    checked = sess._path("gles31")
    assert isinstance(checked, CheckedPath) and {"conv"} <= set(checked.checked)
    assert all(ok for ok, _ in checked.checked.values())
    files = list((tmp_path / "cache").glob(f"{FILE_PREFIX}*.json"))
    assert len(files) == 1
    stored = json.loads(files[0].read_text())["kernels"]
    assert stored["gles31/fp32/conv"]["ok"] is True
    VerdictStore.forget_memory()
    second = gpubackend.Session(_conv_relu_model(), path="gles31")
    assert second._path("gles31").seconds == 0.0  # answered from the file


def test_a_corrupt_verdict_file_is_checked_again(fault_env, tmp_path) -> None:
    fault_env("")
    _need("gles31")
    gpubackend.Session(_conv_relu_model(), path="gles31")
    (file,) = (tmp_path / "cache").glob(f"{FILE_PREFIX}*.json")
    file.write_text(json.dumps({"key": "other", "kernels": {"gles31/fp32/conv": {"ok": False, "detail": "x"}}}))
    VerdictStore.forget_memory()
    sess = gpubackend.Session(_conv_relu_model(), path="gles31")
    assert sess.placement["conv"] == "gles31", sess.explain()
    assert sess._path("gles31").seconds > 0


def test_compare_measure() -> None:
    ref = np.array([1.0, np.nan, np.inf, -2.0], np.float32)
    assert compare(ref.copy(), ref) == 0.0
    assert compare(np.array([1.0, 0.0, np.inf, -2.0], np.float32), ref) == float("inf")
    assert compare(np.array([1.0, np.nan, -np.inf, -2.0], np.float32), ref) == float("inf")
    assert compare(np.array([1.0, np.nan, np.inf, -2.5], np.float32), ref) == pytest.approx(0.25)
    assert compare(np.array([1, 2]), np.array([1, 3])) == float("inf")


def test_a_large_node_is_checked_at_a_small_size(fault_env) -> None:
    fault_env("")
    _need("gles31")
    from gpubackend.kernel_check import SMALL_EXTENT, shrunk
    from gpubackend.model import to_graph
    from gpubackend.paths.gles31 import kernel_name

    model = _conv_relu_model()
    model.graph.input[0].type.tensor_type.shape.dim[2].dim_value = 200
    model.graph.input[0].type.tensor_type.shape.dim[3].dim_value = 120
    model.graph.output[0].type.tensor_type.shape.dim[2].dim_value = 200
    model.graph.output[0].type.tensor_type.shape.dim[3].dim_value = 120
    graph = to_graph(model)
    conv = next(n for n in graph.nodes if n.op_type == "Conv")
    node, small = shrunk(conv, graph, kernel_name, kernel_name(conv, graph))
    assert small.shape(node.inputs[0]) == (1, 3, SMALL_EXTENT, SMALL_EXTENT)
    assert small.shape(node.outputs[0]) == (1, 8, SMALL_EXTENT, SMALL_EXTENT)
    np.testing.assert_array_equal(small.constants[node.inputs[1]], graph.constants[conv.inputs[1]])
    assert node.attrs == conv.attrs


def _softmax_model(length: int):
    node = helper.make_node("Softmax", ["x"], ["y"], name="sm", axis=-1)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, length])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, length])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("path", ["gles2", "vulkan"])
def test_a_fault_only_on_long_axes_is_caught_at_the_real_loop_length(path: str, fault_env) -> None:
    """The first-run check cuts axes to 32; a Softmax kernel that goes wrong only on readbacks past
    2048 words (as gles2's mediump loop counter did past 2048 elements) passes that check, and the
    second check at the node's real axis length catches it."""
    fault_env(f"wrong@{path}:softmax>2048")
    _need(path)
    x = np.random.default_rng(5).uniform(-3, 3, (1, 4, 3000)).astype(np.float32)
    want = gpubackend.Session(_softmax_model(3000), path="cpu", cpu_engine="numpy").run({"x": x})[0]
    unchecked = gpubackend.Session(_softmax_model(3000), path=path,
                                   options=gpubackend.SessionOptions(kernel_check=False))
    assert compare(unchecked.run({"x": x})[0], want) > 1e-2  # the fault strikes at this length
    sess = gpubackend.Session(_softmax_model(3000), path=path)
    assert compare(sess.run({"x": x})[0], want) < 1e-5
    assert sess.placement == {"sm": "cpu"}, sess.explain()
    assert "failed its check at the node's real loop length" in sess.explain()
    assert "loop length 3000" in sess.explain()
    # a short Softmax (its whole readback under the fault's threshold) stays on the path
    short = gpubackend.Session(_softmax_model(300), path=path)
    assert short.placement == {"sm": path}, short.explain()
    # the failure is cached for this driver: a new process skips the long run
    VerdictStore.forget_memory()
    again = gpubackend.Session(_softmax_model(4000), path=path)
    assert again.placement == {"sm": "cpu"} and "(cached)" in again.explain()


def test_long_variant_keeps_only_loop_axes_whole() -> None:
    from gpubackend.kernel_check import long_variant, loop_length
    from gpubackend.model import to_graph

    graph = to_graph(_softmax_model(3000))
    node = graph.nodes[0]
    _, g = long_variant(node, graph, lambda n, gr: "softmax", "softmax")
    assert g.shape("x") == (1, 4, 3000) and loop_length(node, graph) == 3000
    short = to_graph(_softmax_model(20))
    assert loop_length(short.nodes[0], short) is None
    # a Reduce over the channels (never cut) needs no second check; over a long spatial axis it does
    reduce = helper.make_node("ReduceMax", ["x"], ["y"], name="r", axes=[2], keepdims=1)
    model = helper.make_model(helper.make_graph(
        [reduce], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8, 5000, 40])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8, 1, 40])]),
        opset_imports=[helper.make_opsetid("", 17)])
    rg = to_graph(model)
    _, g = long_variant(rg.nodes[0], rg, lambda n, gr: "reduce", "reduce")
    assert g.shape("x") == (2, 8, 5000, 32) and loop_length(rg.nodes[0], rg) == 5000
