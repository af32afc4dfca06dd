"""ONNX's own backend node tests (``onnx.backend.test``), run through gpubackend.Session on a
chosen path. Test files select cases with anchored regular expressions and list every
exclusion with its reason."""

from __future__ import annotations

import re
import warnings
from functools import cache

import numpy as np
import onnx
import onnx.backend.test.loader as loader
from onnx import numpy_helper

import gpubackend
from gpubackend.graph import Graph


@cache
def all_cases() -> dict:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {c.name: c for c in loader.load_model_tests(kind="node")}


def node_cases(include: list[str], exclude: dict[str, str] | None = None) -> list[str]:
    """Names of node test cases matching one of the ``include`` patterns in full and no
    ``exclude`` pattern (pattern -> reason)."""
    inc = [re.compile(p) for p in include]
    exc = [re.compile(p) for p in (exclude or {})]
    return sorted(n for n in all_cases() if any(p.fullmatch(n) for p in inc) and not any(p.fullmatch(n) for p in exc))


def _array(value: object) -> np.ndarray:
    return numpy_helper.to_array(value) if isinstance(value, onnx.TensorProto) else np.asarray(value)


def run_node_case(name: str, path: str, precision: str = "fp32", fallback: bool = False,
                  rtol: float | None = None, atol: float | None = None) -> gpubackend.Session:
    """Run every data set of case ``name`` on ``path`` and compare with ONNX's expected outputs
    (the case's own tolerances unless given). Returns the last session for further checks. CPU
    nodes run on the NumPy kernels (``cpu_engine="numpy"``): these cases test them, not onnxruntime."""
    case = all_cases()[name]
    sess = gpubackend.Session(case.model, path=path, precision=precision, fallback=fallback, cpu_engine="numpy")
    for inputs, expected in case.data_sets:
        inputs, expected = [_array(x) for x in inputs], [_array(x) for x in expected]
        feeds = dict(zip(sess.input_names, inputs))
        outputs = sess.run(feeds)
        assert len(outputs) == len(expected), f"{name}: {len(outputs)} outputs, expected {len(expected)}"
        for i, (got, want) in enumerate(zip(outputs, expected)):
            want = np.asarray(want)
            assert got.dtype == want.dtype, f"{name} output {i}: dtype {got.dtype}, expected {want.dtype}"
            assert got.shape == want.shape, f"{name} output {i}: shape {got.shape}, expected {want.shape}"
            if want.dtype.kind in "fc":
                np.testing.assert_allclose(got, want, rtol=case.rtol if rtol is None else rtol,
                                           atol=case.atol if atol is None else atol, equal_nan=True,
                                           err_msg=f"{name} output {i} on {path}/{precision}")
            else:
                np.testing.assert_array_equal(got, want, err_msg=f"{name} output {i} on {path}")
    return sess


def planned_graph(name: str) -> Graph:
    """The graph a session plans for case ``name``'s first data set: input shapes pinned, and
    small shape-defining inputs (a Reshape's shape, Unsqueeze's axes, ...) made constants."""
    from gpubackend.model import to_graph
    from gpubackend.session import SHAPE_VALUE_LIMIT, shape_value_inputs

    case = all_cases()[name]
    base = to_graph(case.model)
    feeds = dict(zip(base.inputs, (_array(x) for x in case.data_sets[0][0])))
    values = {n: feeds[n] for n in shape_value_inputs(base) if feeds[n].size <= SHAPE_VALUE_LIMIT}
    return to_graph(case.model, {n: v.shape for n, v in feeds.items()}, values)


def check_node_case_on_path(name: str, path: str, precision: str = "fp32",
                            rtol: float | None = None, atol: float | None = None) -> bool:
    """Run case ``name`` on a GPU ``path``: with ``fallback=False`` when the path accepts every node
    (returns True); when it declines some (a placement decision, with a reason), check instead that
    with ``fallback=True`` exactly the declined nodes run on cpu and the results still match
    (returns False)."""
    from gpubackend.paths import create_path

    graph = planned_graph(name)
    gpu = create_path(path, precision)
    declined = {n.name for n in graph.nodes if gpu.decline(n, graph) is not None}
    if not declined:
        run_node_case(name, path, precision, fallback=False, rtol=rtol, atol=atol)
        return True
    sess = run_node_case(name, path, precision, fallback=True, rtol=rtol, atol=atol)
    on_cpu = {n for n, k in sess.placement.items() if k == "cpu"}
    assert declined <= on_cpu, f"{name}: declined nodes {declined - on_cpu} did not go to cpu"
    return False
