"""The whole test models on the CPU path, both engines, against onnxruntime (fp32, 1e-4 relative)."""

from __future__ import annotations

import numpy as np
import pytest
from models import assert_close, mobilenet_v2_like, onnxruntime_outputs, random_inputs, unet_like

import gpubackend


@pytest.fixture(scope="module", params=["mobilenet_v2_like", "unet_like"])
def model_case(request: pytest.FixtureRequest):
    model = {"mobilenet_v2_like": mobilenet_v2_like, "unet_like": unet_like}[request.param]()
    feeds = random_inputs(model, seed=3)
    return request.param, model, feeds, onnxruntime_outputs(model, feeds)


ENGINES = ["numpy", "onnxruntime"]


@pytest.mark.parametrize("engine", ENGINES)
def test_matches_onnxruntime(model_case, engine: str) -> None:
    name, model, feeds, want = model_case
    sess = gpubackend.Session(model, path="cpu", cpu_engine=engine)
    got = sess.run(feeds)
    assert set(sess.placement.values()) == {"cpu"}
    assert f"cpu:{engine}[" in sess.explain()
    for g, w in zip(got, want):
        assert_close(g, w, 1e-4, name)


@pytest.mark.parametrize("engine", ENGINES)
def test_inputs_untouched_and_repeatable(model_case, engine: str) -> None:
    _, model, feeds, _ = model_case
    copies = {k: v.copy() for k, v in feeds.items()}
    sess = gpubackend.Session(model, path="cpu", cpu_engine=engine)
    first = sess.run(feeds)
    second = sess.run(feeds)
    for k in feeds:
        np.testing.assert_array_equal(feeds[k], copies[k])
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)


def test_batchnorm_and_activations_are_folded(model_case) -> None:
    _, model, _, _ = model_case
    sess = gpubackend.Session(model, path="cpu")
    ops = {n.op_type for n in sess._base_graph.nodes}
    assert "BatchNormalization" not in ops
    assert "Clip" not in ops  # every Clip follows a Conv and is fused into it
    assert len(sess.placement) == len(model.graph.node)  # fused nodes still report their placement
