"""gles2 kernels for Slice and Split (rank <= 4) and inference-mode BatchNormalization, added to
``kernels.REGISTRY``.

Both read their semantics from the op layer's records; the generated bodies follow the same
``float compute(n, c, h, w)`` convention as ``kernels.py``."""

from __future__ import annotations

import numpy as np

from ... import ops
from ...graph import Graph, Node
from .kernels import REGISTRY, Config, Decline, Kernel, _Gen, lit


def gen_slice(node: Node, graph: Graph, cfg: Config) -> Kernel:
    """Every output element reads input[start + i * step] along the sliced axes (any sign of step)."""
    g = _Gen(node, graph, cfg)
    x = node.inputs[0]
    g.check_float(x, node.outputs[0])
    xs, ys = g.shape(x), g.shape(node.outputs[0])
    if len(xs) > 4:
        raise Decline("Slice of more than 4 dimensions")
    rec = ops.require(node, graph, ops.SliceRecord)
    off = 4 - len(xs)
    src = list("nchw")
    for start, axis, step in zip(rec.starts, rec.axes, rec.steps):
        src[axis + off] = f"({lit(start)} + {src[axis + off]} * {lit(step)})"
    return g.gather(x, src, ys)


def gen_split(node: Node, graph: Graph, cfg: Config) -> list[Kernel]:
    """One draw per output (a gles2 draw writes one texture): output k reads the input shifted by
    the sizes of the outputs before it along the split axis."""
    x = node.inputs[0]
    rec = ops.require(node, graph, ops.SplitRecord)
    kernels = []
    offset = 0
    for y, size in zip(node.outputs, rec.sizes):
        if y:
            g = _Gen(node, graph, cfg)
            g.check_float(x, y)
            xs, ys = g.shape(x), g.shape(y)
            if len(xs) > 4:
                raise Decline("Split of more than 4 dimensions")
            if size == 0:
                raise Decline(f"output {y!r} is empty")
            src = list("nchw")
            axis = rec.axis + 4 - len(xs)
            src[axis] = f"({lit(offset)} + {src[axis]})"
            kernels.append(g.gather(x, src, ys, output=y))
        offset += size
    return kernels


def gen_batchnorm(node: Node, graph: Graph, cfg: Config) -> Kernel:
    """y = x * a[c] + b[c] with a = scale / sqrt(var + eps), b = bias - mean * a, folded at generation."""
    g = _Gen(node, graph, cfg)
    x = node.inputs[0]
    g.check_float(x, node.outputs[0])
    xs = g.shape(x)
    if not 2 <= len(xs) <= 4:
        raise Decline(f"BatchNormalization of rank {len(xs)} (2 to 4 supported)")
    params = node.inputs[1:5]
    if len(params) != 4 or any(p not in graph.constants for p in params):
        raise Decline("scale, bias, mean and variance must be constants")
    rec = ops.require(node, graph, ops.NormRecord)
    scale, bias, mean, var = (graph.constants[p].astype(np.float64).reshape(-1) for p in params)
    a = scale / np.sqrt(var + rec.epsilon)
    folded = np.stack([a, bias - mean * a], axis=1)  # (C, 2): row c holds a[c], b[c]
    ld_ab = g.const(node.name + "/gles2_bn", folded)
    ld = g.load(x)
    ch = "nchw"[5 - len(xs)]  # ONNX axis 1 among the 4-D coordinates
    body = (f"float compute(float n, float c, float h, float w) {{ "
            f"return {ld}(n, c, h, w) * {ld_ab}(0.0, 0.0, {ch}, 0.0) + {ld_ab}(0.0, 0.0, {ch}, 1.0); }}")
    return g.finish("batchnorm", body, xs)


REGISTRY.add("Slice", "layout", gen_slice)
REGISTRY.add("Split", "layout", gen_split)
REGISTRY.add("BatchNormalization", "batchnorm", gen_batchnorm)
