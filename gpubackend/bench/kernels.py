"""Large single-kernel benchmarks for the roofline target: one-node models (a square MatMul,
a Gemm, a 3x3 and a 1x1 Conv) big enough that dispatch overhead vanishes, run through a
session on each path with per-node timing, and compared with the path's measured FMA peak."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from . import roofline
from .micro import Peak


def _model(node: onnx.NodeProto, x_shape: list[int], y_shape: list[int], inits: list[np.ndarray],
           names: list[str]) -> bytes:
    graph = helper.make_graph(
        [node], "kernel", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)],
        [numpy_helper.from_array(a, n) for a, n in zip(inits, names)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="gpubackend-bench")
    model.ir_version = 8
    return model.SerializeToString()


def matmul(n: int) -> bytes:
    w = (np.random.default_rng(0).standard_normal((n, n)) / np.sqrt(n)).astype(np.float32)
    return _model(helper.make_node("MatMul", ["x", "w"], ["y"], name=f"matmul_{n}"), [n, n], [n, n], [w], ["w"])


def gemm(m: int, k: int, n: int) -> bytes:
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    return _model(helper.make_node("Gemm", ["x", "w", "b"], ["y"], name=f"gemm_{m}x{k}x{n}"), [m, k], [m, n],
                  [w, b], ["w", "b"])


def conv(c: int, size: int, k: int) -> bytes:
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((c, c, k, k)) / np.sqrt(c * k * k)).astype(np.float32)
    b = rng.standard_normal(c).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], name=f"conv{k}x{k}_{c}ch_{size}px",
                            kernel_shape=[k, k], pads=[k // 2] * 4)
    return _model(node, [1, c, size, size], [1, c, size, size], [w, b], ["w", "b"])


# gles3 takes about 100 s for the four (compile included) on llvmpipe; gles2 takes many minutes
SWEEP_PATHS = ("vulkan", "gles31", "gles3", "cpu")
KERNELS: dict[str, Callable[[], bytes]] = {
    "matmul 512^3": lambda: matmul(512),
    "gemm 256x1024x1024": lambda: gemm(256, 1024, 1024),
    "conv 3x3 64ch 128x128": lambda: conv(64, 128, 3),
    "conv 1x1 128ch 64x64": lambda: conv(128, 64, 1),
}


def kernel_sweep(path: str, peak: Peak | None, precision: str = "fp32", runs: int = 5) -> list[dict[str, Any]]:
    """Each large kernel on ``path``: median per-node seconds over ``runs`` profiled runs after
    one untimed profiled run, and its roofline point against ``peak``. A kernel the path declines
    is reported, not timed. (The first profiled runs after the compile run slower: lavapipe's
    1x1 128-channel conv read 5.2 ms as the median of the first three and 2.8 ms after.)"""
    import gpubackend

    from ..model import load_model, to_graph
    from .runner import make_inputs

    rows = []
    for label, build in KERNELS.items():
        data = build()
        graph = to_graph(load_model(data))
        costs = roofline.graph_costs(graph, 2 if precision == "fp16" and path != "cpu" else 4)
        row: dict[str, Any] = {"kernel": label, "path": path}
        try:
            sess = gpubackend.Session(data, path=path, precision=precision)
            try:
                placed = set(sess.placement.values())
                if sess.path != path or placed != {path}:
                    why = [ln.split(": ", 1)[-1] for ln in sess.explain().splitlines() if " -> " in ln][:1]
                    row["error"] = f"ran on {', '.join(sorted(placed))}, not {path}" + (f": {why[0]}" if why else "")
                    rows.append(row)
                    continue
                feeds = make_inputs(data)
                t0 = time.perf_counter()
                sess.run(feeds)
                first = time.perf_counter() - t0
                samples: dict[str, list[float]] = {}
                n_runs = runs if first < 5.0 else 1  # a very slow kernel: one profiled run
                if n_runs > 1:
                    sess.run(feeds, profile=True)
                for _ in range(n_runs):
                    sess.run(feeds, profile=True)
                    for n, s in sess.stats.node_seconds.items():
                        samples.setdefault(n, []).append(s)
                row["timing"] = f"{sess.stats.timing}, per node"
                if not samples:  # the path records no per-node times: time whole runs (an upper bound)
                    whole = []
                    for _ in range(n_runs):
                        t0 = time.perf_counter()
                        sess.run(feeds)
                        whole.append(time.perf_counter() - t0)
                    samples = {n: whole for n in costs}
                    row["timing"] = "host, whole run including transfers"
            finally:
                sess.close()
        except Exception as exc:  # noqa: BLE001 - report, do not abort the sweep
            row["error"] = f"{type(exc).__name__}: {exc}"
            rows.append(row)
            continue
        seconds = {n: float(np.median(v)) for n, v in samples.items()}
        pts = roofline.points(costs, seconds, peak)
        if pts:
            row.update(pts[0].as_dict())
        else:
            row["error"] = "no time recorded"
        rows.append(row)
    return rows
