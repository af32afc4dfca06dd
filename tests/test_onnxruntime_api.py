"""gpubackend.InferenceSession against onnxruntime: the same onnxruntime-style code runs with
either module on every path and gets onnxruntime's results."""

from __future__ import annotations

import threading
import types

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

import gpubackend

PROVIDERS = {"vulkan": "VulkanExecutionProvider", "gles31": "GLES31ExecutionProvider",
             "gles3": "GLES3ExecutionProvider", "gles2": "GLES2ExecutionProvider", "cpu": "CPUExecutionProvider"}


def _two_headed_model() -> onnx.ModelProto:
    """Conv+Relu (output "features") -> GlobalAveragePool -> Flatten -> Gemm -> Softmax
    (output "probs"); the batch dimension is symbolic ("N")."""
    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array((rng.standard_normal((4, 3, 3, 3)) * 0.4).astype(np.float32), "w"),
             numpy_helper.from_array((rng.standard_normal(4) * 0.1).astype(np.float32), "b"),
             numpy_helper.from_array((rng.standard_normal((5, 4)) * 0.5).astype(np.float32), "fc_w"),
             numpy_helper.from_array((rng.standard_normal(5) * 0.1).astype(np.float32), "fc_b")]
    nodes = [helper.make_node("Conv", ["image", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["features"], name="relu"),
             helper.make_node("GlobalAveragePool", ["features"], ["g"], name="gap"),
             helper.make_node("Flatten", ["g"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["logits"], name="fc", transB=1),
             helper.make_node("Softmax", ["logits"], ["probs"], name="softmax", axis=1)]
    graph = helper.make_graph(nodes, "two_headed",
                              [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 3, 8, 8])],
                              [helper.make_tensor_value_info("features", TensorProto.FLOAT, ["N", 4, 8, 8]),
                               helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["N", 5])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="api-test")
    model.ir_version = 8
    helper.set_model_props(model, {"author": "tests"})
    return model


def onnxruntime_style_code(ort: types.ModuleType, model_path: str, providers: list[str]) -> dict:
    """Written against onnxruntime's API; run unchanged with ``ort`` = onnxruntime or gpubackend."""
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.intra_op_num_threads = 1
    so.log_severity_level = 3
    so.add_free_dimension_override_by_name("N", 2)
    sess = ort.InferenceSession(model_path, sess_options=so, providers=providers)
    inp = sess.get_inputs()[0]
    outs = [o.name for o in sess.get_outputs()]
    x = np.random.default_rng(7).standard_normal((2, 3, 8, 8)).astype(np.float32)
    every = sess.run(None, {inp.name: x})
    only_probs = sess.run([outs[1]], {inp.name: x})
    reversed_order = sess.run(outs[::-1], {inp.name: x}, ort.RunOptions())
    meta = sess.get_modelmeta()
    return {"input": (inp.name, inp.type, list(inp.shape)),
            "outputs": [(o.name, o.type, list(o.shape)) for o in sess.get_outputs()],
            "every": every, "only_probs": only_probs, "reversed": reversed_order,
            "meta": (meta.producer_name, meta.graph_name, meta.custom_metadata_map),
            "providers": sess.get_providers(), "session": sess}


@pytest.fixture(scope="module")
def probe_report():
    return gpubackend.probe()


@pytest.fixture(scope="module")
def model_path(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("ort") / "two_headed.onnx"
    onnx.save(_two_headed_model(), path)
    return str(path)


@pytest.fixture(scope="module")
def reference(model_path: str) -> dict:
    return onnxruntime_style_code(onnxruntime, model_path, ["CPUExecutionProvider"])


@pytest.mark.parametrize("path", list(PROVIDERS))
def test_onnxruntime_code_runs_unchanged(path: str, model_path: str, reference: dict, probe_report) -> None:
    if path != "cpu" and not probe_report.usable(path):
        pytest.skip(f"the probe did not verify {path} on this machine: {probe_report.paths[path].reason}")
    got = onnxruntime_style_code(gpubackend, model_path, [PROVIDERS[path], "CPUExecutionProvider"])
    assert got["input"] == reference["input"] == ("image", "tensor(float)", [2, 3, 8, 8])
    assert got["outputs"] == reference["outputs"]
    assert got["meta"] == reference["meta"]
    assert got["providers"] == [PROVIDERS[path]] + (["CPUExecutionProvider"] if path != "cpu" else [])
    for key in ("every", "only_probs", "reversed"):
        assert len(got[key]) == len(reference[key])
        for g, r in zip(got[key], reference[key]):
            assert g.shape == r.shape and g.dtype == r.dtype
            err = np.max(np.abs(g - r)) / max(1.0, float(np.max(np.abs(r))))
            assert err < 1e-4, f"{path} {key}: error {err}"
    native = got["session"].session
    if path != "cpu":
        assert path in native.placement.values(), native.explain()


def test_output_selection_runs_only_needed_nodes(model_path: str) -> None:
    sess = gpubackend.InferenceSession(model_path, providers=["CPUExecutionProvider"])
    x = np.ones((1, 3, 8, 8), np.float32)
    sess.run(["features"], {"image": x})
    assert set(sess.session.placement) == {"conv", "relu"}
    sess.run(None, {"image": x})
    assert {"gap", "fc", "softmax"} <= set(sess.session.placement)


def test_swapped_argument_order_hints() -> None:
    sess = gpubackend.InferenceSession(_two_headed_model().SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {"image": np.ones((1, 3, 8, 8), np.float32)}
    with pytest.raises(gpubackend.GpuBackendError, match="run\\(output_names, feeds\\)|order"):
        sess.session.run(None, feeds)
    with pytest.raises(gpubackend.GpuBackendError, match="order"):
        sess.session.run(["probs"], feeds)
    with pytest.raises(gpubackend.GpuBackendError, match="output_names, input_feed"):
        sess.run(feeds, ["probs"])
    with pytest.raises(gpubackend.InputError, match="unknown output"):
        sess.run(["nope"], feeds)


def test_unknown_providers_are_skipped_like_onnxruntime() -> None:
    with pytest.warns(UserWarning, match="CUDAExecutionProvider"):
        sess = gpubackend.InferenceSession(_two_headed_model(), providers=["CUDAExecutionProvider",
                                                                           ("CPUExecutionProvider", {})])
    assert sess.get_providers() == ["CPUExecutionProvider"]
    with pytest.raises(gpubackend.OptionError):
        gpubackend.InferenceSession(_two_headed_model(), providers="CPUExecutionProvider")
    assert gpubackend.get_all_providers()[-1] == "CPUExecutionProvider"


def test_run_async_calls_back_like_onnxruntime() -> None:
    sess = gpubackend.InferenceSession(_two_headed_model(), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32)
    want = sess.run(["probs"], {"image": x})
    done = threading.Event()
    got: list = []

    def callback(outputs, user_data, err) -> None:
        got.append((outputs, user_data, err))
        done.set()

    sess.run_async(["probs"], {"image": x}, callback, "tag")
    assert done.wait(60)
    outputs, user_data, err = got[0]
    assert user_data == "tag" and err == "" and np.array_equal(outputs[0], want[0])
    done.clear()
    sess.run_async(["probs"], {"image": x[:, :2]}, callback, None)
    assert done.wait(60)
    assert got[1][0] is None and "InputError" in got[1][2]
