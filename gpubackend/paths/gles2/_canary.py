"""The gles2 canary: real kernels of the path on small random inputs against the CPU reference."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...graph import Graph, Node
from ..base import RunStats


def reference(op: str, inputs: list[np.ndarray | None], attrs: dict[str, Any], opset: int = 17) -> np.ndarray:
    """``fallback.run_node`` (which honours ``_act``); ONNX's reference evaluator while the
    fallback package lacks the op."""
    from gpubackend import fallback

    run_node = getattr(fallback, "run_node", None)
    if run_node is not None:
        try:
            return np.asarray(run_node(op, inputs, attrs, opset)[0])
        except Exception as exc:  # noqa: BLE001 - only an op fallback lacks falls through
            if "no cpu kernel" not in str(exc).lower():
                raise
    import onnx
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    act = attrs.get("_act")
    plain = {k: v for k, v in attrs.items() if not k.startswith("_")}
    names = [f"i{j}" if a is not None else "" for j, a in enumerate(inputs)]
    node = helper.make_node(op, names, ["y"], **plain)
    vis = [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None) for n in names if n]
    graph = helper.make_graph([node], "g", vis, [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    feeds = {n: a for n, a in zip(names, inputs) if n}
    y = np.asarray(ReferenceEvaluator(model).run(None, feeds)[0])
    if act is not None:
        y = apply_act(y, act)
    return y


def apply_act(y: np.ndarray, act: tuple[str, dict[str, float]]) -> np.ndarray:
    from gpubackend.fallback import apply_activation

    return apply_activation(np.array(y, np.float32), act)


def run_single(path: Any, op: str, inputs: list[np.ndarray | None], consts: list[bool], attrs: dict[str, Any],
               out_shape: tuple[int, ...], opset: int = 17,
               stats: RunStats | None = None) -> np.ndarray:
    """Run one node on ``path`` (a Gles2Path): inputs flagged in ``consts`` become graph constants."""
    names = [f"in{j}" if a is not None else "" for j, a in enumerate(inputs)]
    node = Node(f"{op}_0", op, names, ["out"], dict(attrs))
    constants = {n: np.asarray(a) for n, a, c in zip(names, inputs, consts) if n and c}
    feeds = {n: np.asarray(a) for n, a, c in zip(names, inputs, consts) if n and not c}
    shapes = {n: tuple(np.shape(a)) for n, a in zip(names, inputs) if n}
    shapes["out"] = tuple(out_shape)
    dtypes = {n: np.asarray(a).dtype for n, a in zip(names, inputs) if n}
    dtypes["out"] = np.dtype(np.float32)
    graph = Graph([node], list(feeds), ["out"], constants, shapes, dtypes, opset)
    why = path.decline(node, graph)
    if why is not None:
        raise RuntimeError(f"gles2 declined {op}: {why}")
    seg = path.compile([node], graph, list(feeds), ["out"])
    try:
        return seg.run(feeds, stats or RunStats())["out"]
    finally:
        seg.close()


def run_canary(precision: str = "fp32") -> float:
    from . import create

    rng = np.random.default_rng(1234)
    # the Convs run twice: weights from a texture in one draw, and (forced at this small size)
    # from uniforms in one draw per output channel
    paths = [create(precision), create(precision, channel_draw_min_pixels=0)]
    for path in paths:
        path.poison = True
    cases = [
        ("Conv", [rng.standard_normal((1, 5, 7, 6)), rng.standard_normal((6, 5, 3, 3)), rng.standard_normal(6)],
         {"pads": [1, 0, 1, 1], "strides": [2, 1], "_act": ("Relu", {})}),
        ("Conv", [rng.standard_normal((1, 6, 9, 9)), rng.standard_normal((6, 1, 3, 3)), rng.standard_normal(6)],
         {"group": 6, "pads": [0, 0, 1, 1], "strides": [2, 2]}),
        ("Gemm", [rng.standard_normal((3, 10)), rng.standard_normal((7, 10)), rng.standard_normal(7)],
         {"transB": 1}),
    ]
    worst = 0.0
    tol = 1e-4 if precision == "fp32" else 2e-2
    for op, arrays, attrs in cases:
        arrays = [a.astype(np.float32) for a in arrays]
        if precision == "fp16":
            arrays[0] = arrays[0].astype(np.float16).astype(np.float32)
        want = reference(op, list(arrays), attrs)
        for path in paths if op == "Conv" else paths[:1]:
            got = run_single(path, op, list(arrays), [False] + [True] * (len(arrays) - 1), attrs, want.shape)
            if not np.all(np.isfinite(got)):
                raise RuntimeError(f"gles2 canary {op}: non-finite output (an element was not written)")
            err = float(np.max(np.abs(got - want)) / max(float(np.max(np.abs(want))), 1e-6))
            if err > tol:
                raise RuntimeError(f"gles2 canary {op} ({precision}): relative error {err:.3g} > {tol}")
            worst = max(worst, err)
    for path in paths:
        path.close()
    return worst
