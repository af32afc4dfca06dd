"""Which compute shader a node gets (the specialised kernels of issue 16 must be the ones that run;
their results are checked in tests/test_ops.py and tests/test_tuning.py)."""

from __future__ import annotations

import numpy as np
import pytest

from gpubackend.graph import Graph, Node
from gpubackend.paths import compute_kernels as ck


def _convtranspose(kernel: list[int], strides: list[int], pads: list[int]) -> tuple[Node, Graph]:
    w = np.zeros((8, 4) + tuple(kernel), np.float32)
    oh = (6 - 1) * strides[0] + kernel[0] - pads[0] - pads[2]
    ow = (7 - 1) * strides[1] + kernel[1] - pads[1] - pads[3]
    node = Node("ct", "ConvTranspose", ["x", "w"], ["y"], {"kernel_shape": kernel, "strides": strides, "pads": pads})
    shapes = {"x": (1, 8, 6, 7), "w": w.shape, "y": (1, 4, oh, ow)}
    graph = Graph([node], ["x"], ["y"], {"w": w}, shapes, {}, 17, {"x": (1, 8, 6, 7)})
    return node, graph


def test_convtranspose_with_kernel_equal_to_stride_runs_the_taps_kernel() -> None:
    taps, generic = ("convtranspose", "compute/convtranspose_tap.comp"), ("convtranspose", "compute/convtranspose.comp")
    for kernel, strides, pads, want in [([2, 2], [2, 2], [0, 0, 0, 0], taps), ([3, 2], [3, 2], [0, 0, 0, 0], taps),
                                        ([3, 3], [2, 2], [0, 0, 0, 0], generic),
                                        ([2, 2], [2, 2], [1, 1, 1, 1], generic)]:
        got = ck.generate(*_convtranspose(kernel, strides, pads))
        assert not isinstance(got, str), got
        assert (got.kernel, got.payload[0].shader) == want, (kernel, strides, pads)


def _binary_graph(op: str, sa: tuple[int, ...], sb: tuple[int, ...]) -> tuple[Node, Graph]:
    y = tuple(np.broadcast_shapes(sa, sb))
    node = Node("bin", op, ["a", "b"], ["y"])
    graph = Graph([node], ["a", "b"], ["y"], {}, {"a": sa, "b": sb, "y": y}, {}, 17, {"a": sa, "b": sb})
    return node, graph


def test_same_layout_binary_ops_index_flat() -> None:
    """FLAT (no index arithmetic) only where both operands have the output's packed layout and
    no lane is padding."""
    for sa, sb, flat in [((1, 8, 5, 7), (1, 8, 5, 7), True), ((2, 3, 4), (2, 3, 4), True),
                         ((1, 6, 5, 7), (1, 6, 5, 7), False),  # 6 channels: padded lanes need tail_zero
                         ((1, 8, 5, 7), (1, 8, 1, 1), False), ((1, 8, 5, 7), (1, 1, 5, 7), False),
                         ((1, 8, 1, 7), (1, 8, 5, 7), False)]:
        got = ck.generate(*_binary_graph("Add", sa, sb))
        assert not isinstance(got, str), got
        (rec,) = got.payload
        assert ("FLAT", 1) in rec.defines if flat else ("FLAT", 1) not in rec.defines, (sa, sb, rec.defines)


@pytest.mark.parametrize("path", ["gles31", "vulkan"])
def test_flat_binary_ops_keep_ieee_specials(path: str) -> None:
    from onnx import TensorProto, helper

    import gpubackend

    shape = [1, 8, 3, 5]
    rng = np.random.default_rng(3)
    a = rng.standard_normal(shape).astype(np.float32)
    b = rng.standard_normal(shape).astype(np.float32)
    a.flat[:6] = [0.0, 1.0, -1.0, np.inf, np.nan, -np.inf]
    b.flat[:6] = [0.0, 0.0, 0.0, np.inf, 1.0, 2.0]
    with np.errstate(all="ignore"):
        refs = {"Add": a + b, "Div": a / b, "Mul": a * b}
    for op, ref in refs.items():
        graph = helper.make_graph([helper.make_node(op, ["a", "b"], ["y"])], "g",
                                  [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in "ab"],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        sess = gpubackend.Session(model.SerializeToString(), path=path, fallback=False)
        (got,) = sess.run({"a": a, "b": b})
        np.testing.assert_array_equal(got, ref, err_msg=f"{op} on {path}")
        sess.close()
