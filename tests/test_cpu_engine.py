"""The CPU path's two engines (onnxruntime subgraphs and the NumPy kernels), and that importing the
packages changes no process-wide setting."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import gpubackend
from gpubackend.errors import GpuBackendError, OptionError

ort = pytest.importorskip("onnxruntime")


def _conv_act_model(act: str, opset: int = 17, **act_attrs: object):
    rng = np.random.default_rng(1)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    inits = [numpy_helper.from_array(w, "w")]
    act_inputs = ["c"]
    if act == "Clip" and opset >= 11:
        inits += [numpy_helper.from_array(np.float32(-0.5), "lo"), numpy_helper.from_array(np.float32(0.7), "hi")]
        act_inputs += ["lo", "hi"]
    elif act == "Clip":
        act_attrs = {"min": -0.5, "max": 0.7}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node(act, act_inputs, ["y"], **act_attrs)]
    graph = helper.make_graph(nodes, "conv_act", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 6, 6])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize(("act", "opset", "attrs"), [
    ("Relu", 17, {}), ("Clip", 17, {}), ("Clip", 6, {}), ("LeakyRelu", 17, {"alpha": 0.2}),
    ("HardSigmoid", 17, {"alpha": 0.3, "beta": 0.4}), ("HardSwish", 17, {}), ("Sigmoid", 17, {}), ("Tanh", 17, {}),
])
def test_fused_activation_is_unfused_for_onnxruntime(act: str, opset: int, attrs: dict) -> None:
    model = _conv_act_model(act, opset, **attrs)
    x = np.random.default_rng(2).standard_normal((1, 3, 6, 6)).astype(np.float32) * 2
    sess = gpubackend.Session(model, path="cpu", cpu_engine="onnxruntime")
    assert sess._base_graph.fused, "the activation should have been fused into the Conv"
    (got,) = sess.run({"x": x})
    (want,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    (ref,) = gpubackend.Session(model, path="cpu", cpu_engine="numpy").run({"x": x})
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ref, want, rtol=1e-5, atol=1e-5)
    assert "cpu:onnxruntime[1]" in sess.explain()


def _dynamic_gather_model():
    nodes = [helper.make_node("Gather", ["x", "i"], ["g"], axis=0), helper.make_node("Relu", ["g"], ["y"])]
    graph = helper.make_graph(nodes, "gather", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3]),
                                                helper.make_tensor_value_info("i", TensorProto.INT64, ["k"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_one_onnxruntime_session_per_shape_signature() -> None:
    sess = gpubackend.Session(_dynamic_gather_model(), path="cpu", cpu_engine="onnxruntime")
    rng = np.random.default_rng(0)
    for n, k in ((5, 2), (7, 4), (5, 2)):
        x = rng.standard_normal((n, 3)).astype(np.float32)
        i = np.arange(k, dtype=np.int64)[::-1].copy()
        (y,) = sess.run({"x": x, "i": i})
        np.testing.assert_array_equal(y, np.maximum(x[i], 0))
    segments = [seg for v in sess._variants.values() for seg in v.segments]
    assert len(segments) == 2 and all(len(seg._sessions) == 1 for seg in segments)


def test_session_config_entries_reach_the_onnxruntime_engine() -> None:
    opts = gpubackend.SessionOptions()
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    sess = gpubackend.Session(_conv_act_model("Relu"), path="cpu", cpu_engine="onnxruntime", options=opts)
    x = np.random.default_rng(0).standard_normal((1, 3, 6, 6)).astype(np.float32)
    sess.run({"x": x})
    (ort_sess,) = [s for v in sess._variants.values() for seg in v.segments for s in seg._sessions.values()]
    assert ort_sess.get_session_options().get_session_config_entry("session.intra_op.allow_spinning") == "0"


@pytest.mark.parametrize("engine", ["numpy", "onnxruntime"])
def test_run_time_node_failure_is_a_gpubackend_error(engine: str) -> None:
    sess = gpubackend.Session(_dynamic_gather_model(), path="cpu", cpu_engine=engine)
    x = np.zeros((3, 3), np.float32)
    with pytest.raises(GpuBackendError, match="Gather"):
        sess.run({"x": x, "i": np.array([7], np.int64)})


def test_engine_option_is_checked() -> None:
    with pytest.raises(OptionError, match="cpu_engine"):
        gpubackend.Session(_conv_act_model("Relu"), path="cpu", cpu_engine="tensorflow")
    sess = gpubackend.Session(_conv_act_model("Relu"), path="cpu", cpu_engine="auto")
    assert sess.cpu_engine == "onnxruntime" and "cpu engine: onnxruntime" in sess.explain()


_STATE_SCRIPT = textwrap.dedent("""
    import ctypes, json, sys
    import numpy  # the packages' own dependencies may be loaded first
    import onnx
    from threadpoolctl import threadpool_info

    libc = ctypes.CDLL("libc.so.6")

    class Mallinfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in
                    ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                     "keepcost")]

    libc.mallinfo2.restype = Mallinfo2
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]

    def mmapped(nbytes):
        # glibc serves a block above its mmap threshold with its own mapping (hblks counts them);
        # freeing one raises the dynamic threshold to that size, so each probe asks for more than the last.
        # mallopt(M_MMAP_THRESHOLD, ...) fixes the threshold and the next probe would come from the heap.
        before = libc.mallinfo2().hblks
        p = libc.malloc(nbytes)
        during = libc.mallinfo2().hblks
        libc.free(p)
        return during > before

    def blas():  # library file -> threads, for the BLAS libraries loaded so far
        return {i["filepath"]: i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"}

    state = {"before": {"blas": blas(), "mmapped": mmapped(20 << 20)}}
    import capability_probe, gpubackend, gpubackend.fallback, gpubackend.session, gpubackend.paths.cpu  # noqa: F401
    after = blas()  # libraries loaded by the imports themselves (e.g. scipy's BLAS) keep their own default
    state["after"] = {"blas": {k: after.get(k) for k in state["before"]["blas"]}, "mmapped": mmapped(24 << 20)}
    print(json.dumps(state))
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="observes glibc's allocator")
def test_import_changes_no_process_wide_setting() -> None:
    env = {k: v for k, v in os.environ.items()
           if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "GPUBACKEND_BLAS_THREADS")}
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = root
    proc = subprocess.run([sys.executable, "-c", _STATE_SCRIPT], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    state = json.loads(proc.stdout.strip().splitlines()[-1])
    assert state["before"]["mmapped"], "the probe itself does not see glibc's mmap threshold"
    assert state["before"]["blas"], "threadpoolctl sees no BLAS library after importing numpy"
    assert state["after"] == state["before"], state


def test_blas_threads_are_scoped_to_a_run() -> None:
    from gpubackend import fallback

    before = fallback.get_blas_threads()
    if before is None:
        pytest.skip("threadpoolctl sees no BLAS library")
    with fallback.blas_threads(1):
        assert fallback.get_blas_threads() == 1
    assert fallback.get_blas_threads() == before


def test_subgraph_outputs_get_types_when_the_model_left_them_open() -> None:
    from gpubackend.model import to_graph
    from gpubackend.paths.cpu import subgraph_model

    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Cast", ["a"], ["b"], to=TensorProto.INT32)]
    graph = helper.make_graph(nodes, "cast", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("b", TensorProto.INT32, [2, 3])])
    g = to_graph(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    g.dtypes.clear()  # as for a model whose shape inference failed
    x = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
    sub = subgraph_model(g.nodes, g, {"x": x}, ["a", "b"])
    a, b = ort.InferenceSession(sub.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_array_equal(a, np.maximum(x, 0))
    assert b.dtype == np.int32 and b.tolist() == [[0, 2, 0], [4, 0, 6]]


@pytest.mark.parametrize("engine", ["numpy", "onnxruntime"])
def test_cpu_segment_between_gpu_segments(engine: str) -> None:
    """An opset-11 Softmax (over C*H*W at once) has no gles31 kernel: it runs as a CPU segment between
    two GPU segments, on either engine."""
    if not gpubackend.probe().usable("gles31"):
        pytest.skip("gles31 is not verified on this machine")
    nodes = [helper.make_node("Relu", ["x0"], ["x"]), helper.make_node("Softmax", ["x"], ["y"], axis=1),
             helper.make_node("Relu", ["y"], ["z"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x0", TensorProto.FLOAT, [1, 3, 4, 4])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 3, 4, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    x = np.random.default_rng(22).standard_normal((1, 3, 4, 4)).astype(np.float32)
    sess = gpubackend.Session(model, path="gles31", cpu_engine=engine)
    (got,) = sess.run({"x0": x})
    e = np.exp(np.maximum(x, 0))
    np.testing.assert_allclose(got, e / e.sum(), rtol=1e-5, atol=1e-6)
    assert f"gles31[1] -> cpu:{engine}[1] -> gles31[1]" in sess.explain()


def test_numpy_plan_reads_a_tensor_twice_and_releases_it_once() -> None:
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Add", ["a", "a"], ["b"]),
             helper.make_node("Mul", ["b", "b"], ["y"])]
    graph = helper.make_graph(nodes, "twice", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
    sess = gpubackend.Session(model, path="cpu", cpu_engine="numpy")
    for _ in range(2):
        (y,) = sess.run({"x": x})
        np.testing.assert_array_equal(y, (2 * np.maximum(x, 0)) ** 2)


def test_numpy_plan_writes_in_place_only_into_buffers_nobody_else_reads() -> None:
    """conv -> Add(residual) may reuse the Conv output; a Conv output read twice, a broadcast that
    grows the operand, and the feeds must stay untouched."""
    rng = np.random.default_rng(3)
    w = rng.standard_normal((3, 3, 1, 1)).astype(np.float32)
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.float32(0.5), "half"),
             numpy_helper.from_array(rng.standard_normal((1, 3, 4, 4)).astype(np.float32), "big")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c1"]), helper.make_node("Add", ["c1", "x"], ["r1"]),
             helper.make_node("Conv", ["r1", "w"], ["c2"]), helper.make_node("Mul", ["c2", "half"], ["m"]),
             helper.make_node("Sub", ["c2", "m"], ["s"]),  # c2 is read twice: no in-place on it
             helper.make_node("Conv", ["s", "w"], ["p"], strides=[4, 4]),  # (1, 3, 1, 1)
             helper.make_node("Div", ["p", "big"], ["y"])]  # p broadcasts up to (1, 3, 4, 4): not in place
    graph = helper.make_graph(nodes, "inplace", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 4, 4]),
                               helper.make_tensor_value_info("r1", TensorProto.FLOAT, [1, 3, 4, 4])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = rng.standard_normal((1, 3, 4, 4)).astype(np.float32)
    x0 = x.copy()
    sess = gpubackend.Session(model, path="cpu", cpu_engine="numpy")
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    for _ in range(2):
        got = sess.run({"x": x})
        for g, w_ in zip(got, want):
            np.testing.assert_allclose(g, w_, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(x, x0)


def test_numpy_plan_fuses_sigmoid_mul_into_one_step() -> None:
    """x * Sigmoid(x) runs as one step: in the epilogue of the Conv that makes x when nothing else
    reads x, else on its own; a Sigmoid whose output is also read elsewhere is not fused. NaN and
    +-inf come out as the two ops give them."""
    rng = np.random.default_rng(5)
    inits = [numpy_helper.from_array(rng.standard_normal((3, 3, 3, 3)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(3).astype(np.float32), "b")]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Sigmoid", ["c1"], ["s1"]), helper.make_node("Mul", ["c1", "s1"], ["m1"]),
             helper.make_node("Conv", ["m1", "w"], ["c2"], pads=[1, 1, 1, 1]),  # c2 is a graph output too
             helper.make_node("Sigmoid", ["c2"], ["s2"]), helper.make_node("Mul", ["s2", "c2"], ["m2"]),
             helper.make_node("Add", ["m2", "x"], ["a"]),
             helper.make_node("Sigmoid", ["a"], ["s3"]), helper.make_node("Mul", ["a", "s3"], ["m3"]),
             helper.make_node("Sigmoid", ["m3"], ["s4"]),  # s4 is a graph output: not fused
             helper.make_node("Mul", ["m3", "s4"], ["y"])]
    shape = [1, 3, 5, 5]
    graph = helper.make_graph(nodes, "silu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in ("y", "c2", "s4")],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = (rng.standard_normal(shape) * 30).astype(np.float32)
    x[0, 0, 0, :4] = [np.nan, np.inf, -np.inf, -100.0]
    sess = gpubackend.Session(model, path="cpu", cpu_engine="numpy")
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    for _ in range(2):
        got = sess.run({"x": x})
        for g, w_ in zip(got, want):
            np.testing.assert_allclose(g, w_, rtol=1e-5, atol=1e-5)
    (segment,) = sess._current.segments
    assert [step.node.op_type for step in segment._plan] == ["Conv", "Conv", "Sigmoid", "Add", "Sigmoid",
                                                               "Sigmoid", "Mul"]


def test_numpy_runs_time_blas_threads_and_agree_either_way() -> None:
    """A NumPy-engine segment with two kernel threads times its runs with and without BLAS's own
    threads in the GEMMs (per input shapes); the outputs agree within rounding either way, and BLAS
    is back at its previous thread count after each run."""
    from gpubackend import fallback
    from gpubackend.paths.cpu import NumpySegment

    rng = np.random.default_rng(2)
    w = (rng.standard_normal((48, 32, 3, 3)) * 0.1).astype(np.float32)  # a full-columns 3x3 conv
    b = rng.standard_normal(48).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 40, 40])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    sess = gpubackend.Session(model, path="cpu", options=gpubackend.SessionOptions(cpu_engine="numpy",
                                                                                  intra_op_num_threads=2))
    x = rng.standard_normal((1, 32, 40, 40)).astype(np.float32)
    before = fallback.get_blas_threads()
    outs = [sess.run({"x": x})[0] for _ in range(4)]
    assert fallback.get_blas_threads() == before
    (seg,) = [s for s in sess._current.segments if isinstance(s, NumpySegment)]
    (ways,) = seg._run_ways.values()
    assert None not in ways.seconds and ways.current in (0, 1)
    assert "x 1x32x40x40): runs timed with BLAS's own threads" in sess.explain()
    ref = fallback.run_node("Conv", [x, w, b], {"pads": [1, 1, 1, 1]}, 13)[0]
    for got in outs:
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    # one BLAS thread asked for explicitly is kept: no run timed with BLAS's threads
    strict = gpubackend.Session(model, path="cpu", options=gpubackend.SessionOptions(
        cpu_engine="numpy", intra_op_num_threads=2, blas_threads=1))
    for _ in range(3):
        np.testing.assert_allclose(strict.run({"x": x})[0], ref, rtol=1e-5, atol=1e-5)
    (seg,) = [s for s in strict._current.segments if isinstance(s, NumpySegment)]
    assert not seg._run_ways
