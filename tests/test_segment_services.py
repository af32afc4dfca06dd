"""The segment services every GPU path shares (``gpubackend/paths/segment_services.py``): storage
reuse by liveness, the profiling loop, and output poisoning, checked on each path's real segments."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from gpubackend.graph import Graph, Node
from gpubackend.paths import path_module
from gpubackend.paths.base import RunStats
from gpubackend.paths.segment_services import plan_storage, run_steps, time_steps

GPU_PATHS = ["gles31", "vulkan", "gles3", "gles2"]


# ---- liveness and reuse ------------------------------------------------------------------------------

def test_storage_is_shared_once_the_last_reader_ran() -> None:
    steps = [["x", "a"], ["a", "b"], ["b", "c"], ["c", "y"]]
    slot_of, sizes = plan_storage(steps, lambda n: 8, managed=lambda n: True, preloaded=["x"], keep=["y"])
    # a step never writes into storage it reads: a cannot take x's slot, b takes it after step 0
    assert slot_of["a"] != slot_of["x"] and slot_of["b"] == slot_of["x"]
    assert slot_of["c"] == slot_of["a"] and slot_of["y"] == slot_of["b"]
    assert sizes == [8, 8]


def test_kept_and_unmanaged_tensors_are_never_shared() -> None:
    steps = [["x", "w", "a"], ["a", "y"], ["y", "b"], ["b", "z"]]
    slot_of, sizes = plan_storage(steps, lambda n: 4, managed=lambda n: n != "w", preloaded=["x"], keep=["y", "z"])
    assert "w" not in slot_of
    assert len({slot_of["y"], slot_of["z"]}) == 2
    assert slot_of["b"] in (slot_of["x"], slot_of["a"])  # y stays live to the end, b takes a freed slot
    assert len(sizes) == 4 - 1


def test_best_fit_takes_the_smallest_free_slot_that_fits() -> None:
    size = {"big": 100, "small": 10, "mid": 50, "p": 1, "q": 1, "out": 40}
    steps = [["p", "big"], ["p", "small"], ["big", "small", "q"], ["q", "mid"], ["mid", "out"]]
    slot_of, sizes = plan_storage(steps, size.__getitem__, managed=lambda n: True, keep=["out"],
                                  fits=int.__ge__)
    # after step 2 big (100) and small (10) are free: mid (50) takes big's, out (40) cannot take
    # small's and mid's is in use, so it gets a new slot
    assert slot_of["mid"] == slot_of["big"]
    assert sizes[slot_of["out"]] == 40
    assert max(sizes) == 100 and len(sizes) == 4


def test_exact_fit_by_default() -> None:
    steps = [["a"], ["b"]]
    slot_of, sizes = plan_storage(steps, {"a": (4, 4), "b": (4, 8)}.__getitem__, managed=lambda n: True)
    assert slot_of["a"] != slot_of["b"] and sizes == [(4, 4), (4, 8)]


def test_run_steps_profiles_per_node_and_time_steps_gives_one_median_per_step() -> None:
    finishes: list[int] = []
    ran: list[str] = []
    steps = ["n1", "n2", "n1"]
    stats = RunStats(profile=True)
    run_steps(steps, ran.append, stats, lambda: finishes.append(1), lambda s: s)
    assert ran == steps and len(finishes) == 2 * len(steps)
    assert set(stats.node_seconds) == {"n1", "n2"} and all(v >= 0 for v in stats.node_seconds.values())
    plain = RunStats()
    run_steps(steps, ran.append, plain, lambda: finishes.append(1), lambda s: s)
    assert plain.node_seconds == {} and len(finishes) == 6
    assert len(time_steps(["a", "b"], lambda s: None, lambda: None, repeat=3)) == 2


# ---- the services on each path's real segments ------------------------------------------------------

def _chain() -> tuple[list[Node], Graph]:
    """x -> relu -> sigmoid -> neg -> tanh -> y: four same-shape tensors, two of which can share."""
    ops = ["Relu", "Sigmoid", "Neg", "Tanh"]
    names = ["x", "t1", "t2", "t3", "y"]
    nodes = [Node(f"n{i}", op, [names[i]], [names[i + 1]]) for i, op in enumerate(ops)]
    shape = (1, 5, 3, 4)
    f32 = np.dtype(np.float32)
    return nodes, Graph(nodes, ["x"], ["y"], {}, {n: shape for n in names}, {n: f32 for n in names}, 17,
                        {"x": shape})


def _want(x: np.ndarray) -> np.ndarray:
    return np.tanh(-(1 / (1 + np.exp(-np.maximum(x, 0)))))


def _devices_in_use(seg: Any, key: str) -> int:
    """How many distinct storages the segment's intermediates and output occupy."""
    if key == "gles2":
        return len({id(seg.textures[n]) for n in ("t1", "t2", "t3", "y")})
    if key == "gles3":
        return len({id(seg.storage[n]) for n in ("t1", "t2", "t3", "y")})
    if key == "gles31":
        return len({id(b) for d in seg.dispatches for b in d.buffers})
    return len({b for step in seg.program.steps for b in step.bindings if seg.program.buffers[b].kind != "input"})


@pytest.mark.parametrize("key", GPU_PATHS)
def test_every_path_reuses_storage_and_profiles_per_node(key: str) -> None:
    nodes, graph = _chain()
    path = path_module(key).create("fp32")
    assert all(path.decline(n, graph) is None for n in nodes)
    seg = path.compile(nodes, graph, ["x"], ["y"])
    try:
        x = np.random.default_rng(0).standard_normal((1, 5, 3, 4)).astype(np.float32)
        stats = RunStats(profile=True)
        got = seg.run({"x": x}, stats)["y"]
        np.testing.assert_allclose(got, _want(x), rtol=1e-4, atol=1e-5)
        assert set(stats.node_seconds) == {n.name for n in nodes}
        # t1 .. t3 and y (and x on gles31) fit in two or three storages, not one each
        assert _devices_in_use(seg, key) <= 3
    finally:
        seg.close()


class _NoDraw:
    """A vertex array whose draws do nothing: the kernel 'forgets' every element."""

    def render(self, *args: Any, **kwargs: Any) -> None:
        pass


@pytest.mark.parametrize("key", GPU_PATHS)
def test_poisoned_outputs_show_an_unwritten_element_on_every_path(key: str) -> None:
    nodes, graph = _chain()
    path = path_module(key).create("fp32")
    path.poison = True
    for n in nodes:
        assert path.decline(n, graph) is None
    seg = path.compile(nodes[-1:], graph, ["t3"], ["y"])
    try:
        if key in ("gles2", "gles3"):
            for step in seg.steps:
                step.vao = _NoDraw()
        elif key == "gles31":
            for d in seg.dispatches:
                d.groups = (0, 0, 0)  # a dispatch with no work groups writes nothing
        else:  # vulkan poisons every buffer once at creation; read it back before any dispatch
            name = seg.program.outputs[0].buffer
            words = np.array(seg.compiled.tensors[name].data(), copy=True)
            assert np.isnan(words).all()
            return
        got = seg.run({"t3": np.ones((1, 5, 3, 4), np.float32)}, RunStats())["y"]
        assert np.isnan(got).all()
    finally:
        seg.close()
