"""The GL program caches are bounded (GPUBACKEND_MAX_PROGRAMS, least recently used out), and an
evicted program stays valid while a segment still uses it."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import gpubackend
from gpubackend import worker
from gpubackend.gl.device import DEFAULT_MAX_PROGRAMS, ENV_MAX_PROGRAMS, GLDevice, max_programs

SRC = """#version 310 es
layout(local_size_x = 1) in;
layout(std430, binding = 0) buffer B { float v[]; };
void main() { v[0] = float(%d); }
"""


def _need(path: str) -> None:
    report = gpubackend.probe()
    if not report.usable(path):
        pytest.skip(f"{path} is not usable here: {report.paths[path].reason}")


def test_max_programs_from_the_environment(monkeypatch) -> None:
    monkeypatch.delenv(ENV_MAX_PROGRAMS, raising=False)
    assert max_programs() == DEFAULT_MAX_PROGRAMS
    monkeypatch.setenv(ENV_MAX_PROGRAMS, "7")
    assert max_programs() == 7
    monkeypatch.setenv(ENV_MAX_PROGRAMS, "0")
    assert max_programs() == 0  # no bound
    monkeypatch.setenv(ENV_MAX_PROGRAMS, "lots")
    assert max_programs() == DEFAULT_MAX_PROGRAMS


def test_the_device_cache_holds_its_bound_and_keeps_programs_in_use(monkeypatch) -> None:
    _need("gles31")
    monkeypatch.setenv(ENV_MAX_PROGRAMS, "4")

    def work() -> tuple[int, int, bool, bool]:
        dev = GLDevice.shared("gles31")
        before = dev._programs.evicted
        held = dev.compute(SRC % 1000)  # a segment's reference
        dropped = weakref.ref(dev.compute(SRC % 1001))
        for i in range(10):
            dev.compute(SRC % i)
        gc.collect()
        # the held program was evicted but is still a working program: run it
        buf = dev.buffer(np.zeros(1, np.float32))
        buf.bind_to_storage_buffer(0)
        held.run(1, 1, 1)
        value = float(np.frombuffer(buf.read(), np.float32)[0])
        dev.release(buf)
        return dev.cached_programs, dev._programs.evicted - before, value == 1000.0, dropped() is None

    cached, evicted, held_works, dropped_gone = worker.call_on_gpu_thread(work)
    assert cached <= 4
    assert evicted >= 8
    assert held_works
    assert dropped_gone  # nothing keeps an evicted, unused program alive: it is released


def _chain_model(n: int) -> object:
    # n convolutions of different kernel sizes: n distinct programs per GL path
    rng = np.random.default_rng(1)
    nodes, inits, prev = [], [], "x"
    for i in range(n):
        k = 1 + 2 * (i % 3)
        inits.append(numpy_helper.from_array((rng.standard_normal((4, 4, k, k)) * 0.3).astype(np.float32), f"w{i}"))
        nodes.append(helper.make_node("Conv", [prev, f"w{i}"], [f"c{i}"], pads=[k // 2] * 4, name=f"conv{i}"))
        nodes.append(helper.make_node("Tanh", [f"c{i}"], [f"t{i}"], name=f"tanh{i}"))
        prev = f"t{i}"
    nodes.append(helper.make_node("Identity", [prev], ["y"]))
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("path", ["gles31", "gles3", "gles2"])
def test_sessions_stay_right_when_their_programs_are_evicted(path: str, monkeypatch) -> None:
    _need(path)
    monkeypatch.setenv(ENV_MAX_PROGRAMS, "1")
    model = _chain_model(3)
    x = np.random.default_rng(2).standard_normal((1, 4, 8, 8)).astype(np.float32)
    (want,) = gpubackend.Session(model, path="cpu", cpu_engine="numpy").run({"x": x})
    first = gpubackend.Session(model, path=path, options=gpubackend.SessionOptions(thread="worker"))
    assert set(first.placement.values()) == {path}, first.explain()
    (a,) = first.run({"x": x})
    other = gpubackend.Session(_chain_model(2), path=path, options=gpubackend.SessionOptions(thread="worker"))
    other.run({"x": x})  # its programs push the first session's out of the cache
    gc.collect()
    (b,) = first.run({"x": x})
    np.testing.assert_allclose(a, want, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(a, b)
    if path == "gles31":  # its own cache (programs may come from stored binaries, not the device's)
        from gpubackend.paths.gles31 import device_and_programs

        assert worker.call_on_gpu_thread(lambda: len(device_and_programs()[1].programs)) <= 1
    else:
        assert worker.call_on_gpu_thread(lambda: GLDevice.shared(path).cached_programs) <= 1
    if path == "gles2":  # its VAO per program (which keeps the program alive) leaves with the program
        assert worker.call_on_gpu_thread(lambda: len(GLDevice.shared(path).state["gles2.quad"][1])) <= 1
    first.close()
    other.close()
