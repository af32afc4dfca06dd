"""The one kernel contract (``gpubackend/paths/kernel_contract.py``): the candidate loop, declines
as returned reasons, a generator bug as a decline on every GPU path, and memoisation that keeps no
graph alive."""

from __future__ import annotations

import gc
import weakref
from typing import Any

import numpy as np
import pytest

from gpubackend.errors import ModelError
from gpubackend.graph import Graph, Node
from gpubackend.ops import Decline
from gpubackend.paths import path_module
from gpubackend.paths.kernel_contract import (
    Generated,
    KernelCache,
    KernelRecord,
    KernelRegistry,
    generate,
)

GPU_PATHS = ["gles31", "vulkan", "gles3", "gles2"]


def _registry(key: str) -> KernelRegistry:
    if key in ("gles31", "vulkan"):
        from gpubackend.paths import compute_kernels

        return compute_kernels.REGISTRY
    from importlib import import_module

    return import_module(f"gpubackend.paths.{key}.kernels").REGISTRY


def _relu(shape: tuple[int, ...] = (1, 3, 4, 5)) -> tuple[Node, Graph]:
    node = Node("relu", "Relu", ["x"], ["y"])
    f32 = np.dtype(np.float32)
    return node, Graph([node], ["x"], ["y"], {}, {"x": shape, "y": shape}, {"x": f32, "y": f32}, 17, {"x": shape})


def _reshaped(node: Node, shape: tuple[int, ...]) -> Graph:
    f32 = np.dtype(np.float32)
    return Graph([node], ["x"], ["y"], {}, {"x": shape, "y": shape}, {"x": f32, "y": f32}, 17, {"x": shape})


# ---- the loop itself, no driver --------------------------------------------------------------------

class _Rec(KernelRecord):
    def __init__(self, name: str):
        self.name = name

    @property
    def kernel_name(self) -> str:
        return self.name


def _declines(node: Node, graph: Graph, ctx: Any) -> Any:
    raise Decline("too wide")


def _says_no(node: Node, graph: Graph, ctx: Any) -> Any:
    return "stride not supported"


def _bug(node: Node, graph: Graph, ctx: Any) -> Any:
    return {}["missing key"]


def test_every_candidate_reason_is_returned_with_its_name() -> None:
    reg = KernelRegistry("test", {"Relu": [("a", _declines), ("b", _says_no), ("c", _bug)]})
    node, graph = _relu()
    why = generate(reg, node, graph, None)
    assert isinstance(why, str)
    assert "a: too wide" in why and "b: stride not supported" in why
    assert "c: the 'c' generator failed (KeyError: 'missing key')" in why
    assert generate(reg, Node("s", "Sigmoid", ["x"], ["y"]), graph, None) == "no test kernel for Sigmoid"
    assert generate(reg, Node("r", "Relu", ["x"], ["y"], domain="com.example"), graph, None) == \
        "domain 'com.example'"


def test_first_accepting_candidate_wins_and_disabled_goes_by_the_reported_name() -> None:
    reg = KernelRegistry("test", {"Relu": [("a", _says_no), ("b", lambda n, g, c: _Rec("b_fast")),
                                           ("c", lambda n, g, c: _Rec("c"))]})
    node, graph = _relu()
    assert generate(reg, node, graph, None).kernel == "b_fast"
    # disabling the candidate's family name does not refuse the kernel it reports...
    assert generate(reg, node, graph, None, frozenset({"b"})).kernel == "b_fast"
    # ...disabling the reported name does, and the next candidate runs
    got = generate(reg, node, graph, None, frozenset({"b_fast"}))
    assert isinstance(got, Generated) and got.kernel == "c"
    why = generate(reg, node, graph, None, frozenset({"b_fast", "c"}))
    assert isinstance(why, str) and "kernel 'b_fast' disabled by the probe" in why


def test_path_check_runs_before_candidates_and_model_errors_pass_through() -> None:
    calls = []

    def gen(node: Node, graph: Graph, ctx: Any) -> Any:
        calls.append(node.name)
        raise ModelError("bad attribute")

    reg = KernelRegistry("test", {"Relu": [("a", gen)]}, check=lambda n, g: "int64 input" if n.name == "i" else None)
    _, graph = _relu()
    assert generate(reg, Node("i", "Relu", ["x"], ["y"]), graph, None) == "int64 input"
    assert calls == []
    with pytest.raises(ModelError):
        generate(reg, Node("r", "Relu", ["x"], ["y"]), graph, None)


def test_registry_add_orders_candidates() -> None:
    reg = KernelRegistry("test")
    reg.add(("Relu", "Sigmoid"), "generic", _says_no)
    reg.add("Relu", "special", _declines, first=True)
    assert [name for name, _ in reg["Relu"]] == ["special", "generic"]
    assert [name for name, _ in reg["Sigmoid"]] == ["generic"]


def test_cache_memoises_per_node_and_shapes_and_keeps_no_graph_alive() -> None:
    calls: list[tuple[int, ...] | None] = []

    def gen(node: Node, graph: Graph, ctx: Any) -> Any:
        calls.append(graph.shape("x"))
        return _Rec("k")

    cache = KernelCache(KernelRegistry("test", {"Relu": [("k", gen)]}), None)
    node, graph = _relu()
    assert cache.decline(node, graph) is None and cache.decline(node, graph) is None
    assert len(calls) == 1
    other = _reshaped(node, (1, 3, 8, 8))  # the same node object under other shapes: generated again
    assert cache.decline(node, other) is None and cache.decline(node, graph) is None
    assert calls == [(1, 3, 4, 5), (1, 3, 8, 8)] and len(cache) == 2
    refs = [weakref.ref(graph), weakref.ref(other), weakref.ref(node)]
    del node, graph, other
    gc.collect()
    assert [r() for r in refs] == [None, None, None]
    assert len(cache) == 0


# ---- the contract on every GPU path ------------------------------------------------------------------

@pytest.fixture(scope="module")
def paths() -> dict[str, Any]:
    from capability_probe.errors import DriverUnavailable

    made = {}
    for key in GPU_PATHS:
        try:
            made[key] = path_module(key).create("fp32")
        except DriverUnavailable as exc:
            pytest.fail(f"the {key} path cannot be created here: {exc}")
    return made


def _fresh(key: str) -> Any:
    return path_module(key).create("fp32")


@pytest.mark.parametrize("key", GPU_PATHS)
def test_generator_bug_is_a_decline_with_its_text_on_every_path(key: str, paths: dict[str, Any],
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(node: Node, graph: Graph, ctx: Any) -> Any:
        raise ZeroDivisionError("deliberate generator bug")

    reg = _registry(key)
    real = list(reg["Relu"])
    node, graph = _relu()
    monkeypatch.setitem(reg, "Relu", [("broken", broken)])
    why = _fresh(key).decline(node, graph)
    assert why is not None and "ZeroDivisionError" in why and "deliberate generator bug" in why, why
    # a later candidate still takes the node when an earlier one is broken
    monkeypatch.setitem(reg, "Relu", [("broken", broken), *real])
    assert _fresh(key).decline(node, graph) is None


@pytest.mark.parametrize("key", GPU_PATHS)
def test_a_session_survives_a_broken_generator(key: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from onnx import TensorProto, helper

    import gpubackend

    def broken(node: Node, graph: Graph, ctx: Any) -> Any:
        raise RuntimeError("generator exploded")

    monkeypatch.setitem(_registry(key), "Sigmoid", [("broken", broken)])
    model = helper.make_model(helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"], name="relu"), helper.make_node("Sigmoid", ["r"], ["y"], name="sig")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 4, 4])]),
        opset_imports=[helper.make_opsetid("", 17)])
    sess = gpubackend.Session(model, path=key, fallback=True, cpu_engine="numpy")
    x = np.random.default_rng(3).standard_normal((1, 3, 4, 4)).astype(np.float32)
    got = sess.run({"x": x})[0]
    assert sess.placement == {"relu": key, "sig": "cpu"}
    assert "generator exploded" in sess.explain(verbose=True)
    np.testing.assert_allclose(got, 1 / (1 + np.exp(-np.maximum(x, 0))), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("key", GPU_PATHS)
def test_path_memo_keeps_no_graph_alive(key: str, paths: dict[str, Any]) -> None:
    path = _fresh(key)
    node, graph = _relu()
    assert path.decline(node, graph) is None
    assert len(path.kernels) == 1
    refs = [weakref.ref(graph), weakref.ref(node)]
    del node, graph
    gc.collect()
    assert [r() for r in refs] == [None, None]
    assert len(path.kernels) == 0


@pytest.mark.parametrize("key", GPU_PATHS)
def test_disabled_kernel_declines_on_every_path(key: str, paths: dict[str, Any]) -> None:
    node, graph = _relu()
    why = path_module(key).create("fp32", frozenset({"unary"})).decline(node, graph)
    assert why is not None and "'unary' disabled by the probe" in why
