"""Which compute shader a node gets (the specialised kernels of issue 16 must be the ones that run;
their results are checked in tests/test_ops.py and tests/test_tuning.py)."""

from __future__ import annotations

import numpy as np

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
