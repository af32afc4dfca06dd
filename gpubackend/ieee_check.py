"""The probe's NaN/Inf check: does a GPU path give NaN and infinities back where IEEE puts them?

Run in the probe's child after a path's canaries (which hold no NaN): a Relu and an Add of
inputs holding NaN, +Inf and -Inf, on the path alone, against NumPy. A driver can lose them while
every finite value is right: NVIDIA's gles2 compiler folds the ``isnan`` emulation and
``inf - inf`` that the RGBA8 decoding relies on, so NaN decodes as 0 there.

Such a driver still verifies its path (finite results are right, and models rarely see NaN),
but the loss is reported: the probe's reason ends in "gles2: NaN not preserved",
``PathVerdict.ieee_lost`` holds it, and a session placing nodes on that path says so in
``explain()``.
"""

from __future__ import annotations

import numpy as np


def _model() -> object:
    from onnx import TensorProto, helper, numpy_helper

    nodes = [helper.make_node("Relu", ["x"], ["relu"], name="relu"),
             helper.make_node("Add", ["x", "one"], ["add"], name="add")]
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 2, 4, 4]) for n in ("relu", "add")]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])
    graph = helper.make_graph(nodes, "ieee_check", [x], outs,
                              [numpy_helper.from_array(np.ones((1, 2, 4, 4), np.float32), "one")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _input() -> np.ndarray:
    x = np.linspace(-3.0, 3.0, 32, dtype=np.float32).reshape(1, 2, 4, 4)
    flat = x.reshape(-1)
    flat[[1, 9, 20]] = np.nan
    flat[[3, 14]] = np.inf
    flat[[6, 27]] = -np.inf
    return x


def lost_values(path: str) -> str | None:
    """None when NaN and +-Inf come back from ``path`` where IEEE puts them; else what was lost,
    in words ("NaN not preserved", "Inf not preserved", or both)."""
    from .options import SessionOptions
    from .session import Session

    x = _input()
    want = [np.maximum(x, 0), x + 1]  # np.maximum propagates NaN
    sess = Session(_model(), path=path, fallback=False, options=SessionOptions(kernel_check=False))
    try:
        got = sess.run({"x": x})
    finally:
        sess.close()
    nan_lost = inf_lost = False
    for g, w in zip(got, want):
        g = np.asarray(g, np.float64)
        nan_lost |= not np.array_equal(np.isnan(g), np.isnan(w))
        w_inf = np.isinf(w)
        inf_lost |= not (np.array_equal(np.isinf(g), w_inf) and np.array_equal(g[w_inf], w[w_inf]))
    lost = [what for what, flag in (("NaN", nan_lost), ("Inf", inf_lost)) if flag]
    return f"{' and '.join(lost)} not preserved" if lost else None
