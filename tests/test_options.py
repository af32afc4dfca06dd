"""SessionOptions: fields, environment overrides, free-dimension overrides, provider order
(CPU only; the GPU paths' provider test is in test_onnxruntime_api.py)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import gpubackend
from gpubackend import SessionOptions


def _dynamic_model() -> onnx.ModelProto:
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"), helper.make_node("Neg", ["r"], ["y"], name="neg")]
    graph = helper.make_graph(nodes, "dyn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_environment_overrides_fields() -> None:
    opts = SessionOptions(vulkan_record_once=True, gles3_render_targets=2)
    got = opts.resolved({"GPUBACKEND_VULKAN_RECORD": "0", "GPUBACKEND_GLES3_TARGETS": "8",
                         "GPUBACKEND_PATH": "gles2", "GPUBACKEND_BLAS_THREADS": "3",
                         "GPUBACKEND_DISABLE": "vulkan, gles31"})
    assert (got.vulkan_record_once, got.gles3_render_targets, got.path, got.blas_threads) == (False, 8, "gles2", 3)
    assert got.disabled_paths == {"vulkan", "gles31"}
    assert opts.path == "auto" and opts.vulkan_record_once  # resolved() copies
    # GPUBACKEND_PATH only replaces "auto", as before
    assert SessionOptions(path="cpu").resolved({"GPUBACKEND_PATH": "gles2"}).path == "cpu"
    # onnxruntime's thread count is also the numpy engine's kernel threads; BLAS stays at its own
    opts = SessionOptions(intra_op_num_threads=2).resolved({})
    assert opts.blas_threads is None
    from gpubackend.paths import create_path

    assert create_path("cpu", options=opts).ort_threads == 2


@pytest.mark.parametrize("bad", [dict(path="metal"), dict(precision="fp8"), dict(providers=["opencl"]),
                                 dict(providers="cpu"), dict(gles3_render_targets=9), dict(blas_threads=0),
                                 dict(free_dimension_overrides={"batch": 0}), dict(disabled_paths={"cpu"})])
def test_bad_values_raise_option_error(bad: dict) -> None:
    with pytest.raises(gpubackend.OptionError):
        gpubackend.Session(_dynamic_model(), options=SessionOptions(**bad))


def test_bad_environment_raises_option_error() -> None:
    with pytest.raises(gpubackend.OptionError, match="GPUBACKEND_GLES3_TARGETS"):
        SessionOptions().resolved({"GPUBACKEND_GLES3_TARGETS": "many"})
    with pytest.raises(gpubackend.OptionError, match="unknown session option"):
        SessionOptions().with_keywords(colour="blue")


def test_keywords_replace_option_fields() -> None:
    opts = SessionOptions(path="gles2", precision="fp16", fallback=False)
    sess = gpubackend.Session(_dynamic_model(), path="cpu", options=opts)
    assert (sess.path, sess.precision, sess.fallback) == ("cpu", "fp16", False)
    assert opts.path == "gles2"  # the caller's object is not modified


def test_free_dimension_override() -> None:
    opts = SessionOptions(path="cpu")
    opts.add_free_dimension_override_by_name("batch", 2)
    sess = gpubackend.Session(_dynamic_model(), options=opts)
    x = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
    (y,) = sess.run({"x": x})
    np.testing.assert_array_equal(y, -np.maximum(x, 0))
    with pytest.raises(gpubackend.InputError, match="expects \\[2, 3\\]"):
        sess.run({"x": np.zeros((3, 3), np.float32)})
    with pytest.raises(gpubackend.OptionError, match="'btach'.*\\['batch'\\]"):
        gpubackend.Session(_dynamic_model(), options=SessionOptions(free_dimension_overrides={"btach": 2}))


def test_disabled_path_is_not_used() -> None:
    sess = gpubackend.Session(_dynamic_model(), options=SessionOptions(path="gles2", disabled_paths={"gles2"}))
    assert sess.path == "cpu" and "disabled by the session options" in sess.explain()
    with pytest.raises(gpubackend.PathUnavailableError, match="disabled"):
        gpubackend.Session(_dynamic_model(), options=SessionOptions(path="gles2", disabled_paths={"gles2"},
                                                                    fallback=False))


def test_path_that_cannot_be_created_falls_back(monkeypatch) -> None:
    """The probe verified gles3, but this process cannot make its gles3 context: fallback runs the
    nodes on the next path (gles2 or cpu); without fallback the error is a GpuBackendError, not the driver's."""
    healthy = gpubackend.probe()
    if not healthy.usable("gles3"):
        pytest.skip(f"gles3 is not verified here: {healthy.paths['gles3'].reason}")
    monkeypatch.setattr(gpubackend.Session, "_probe", lambda self: healthy)  # verdict from before the fault
    monkeypatch.setenv("GPUBACKEND_FAULT", "absent@gles3")
    sess = gpubackend.Session(_dynamic_model(), path="gles3", input_shapes={"x": (2, 3)})
    x = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
    np.testing.assert_array_equal(sess.run({"x": x})[0], -np.maximum(x, 0))
    assert "gles3" not in set(sess.placement.values()) and "could not be created" in sess.explain()
    with pytest.raises(gpubackend.PathUnavailableError, match="could not be created"):
        gpubackend.Session(_dynamic_model(), path="gles3", fallback=False, input_shapes={"x": (2, 3)})


def test_caller_bound_session_names_the_fix_from_another_thread() -> None:
    import threading

    if not gpubackend.probe().usable("gles3"):
        pytest.skip("gles3 is not verified here")
    sess = gpubackend.Session(_dynamic_model(), path="gles3", input_shapes={"x": (2, 3)},
                              options=SessionOptions(thread="caller"))
    assert sess.thread_mode == "caller"
    errors: list[BaseException] = []

    def other() -> None:
        try:
            sess.run({"x": np.zeros((2, 3), np.float32)})
        except BaseException as exc:  # noqa: BLE001 - the test inspects it
            errors.append(exc)

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert len(errors) == 1 and isinstance(errors[0], gpubackend.GpuBackendError)
    assert "thread='worker'" in str(errors[0])
    sess.close()
