"""More compute kernels for the ``gles31`` and ``vulkan`` paths, registered into
:data:`compute_kernels.REGISTRY` (same record types, same packed layout, see that module).

Layout ops as one index map: every op that only moves elements of one input (Slice, Split,
Transpose, Reshape/Squeeze/Unsqueeze/Flatten above rank 4, Gather with constant indices, Expand,
Tile, DepthToSpace, SpaceToDepth) is applied on the host to the array of the input's packed
scalar addresses; the result, packed in the output's layout, is a constant int32 buffer that
``gather.comp`` follows. The ONNX semantics stay in the op records and in NumPy's own indexing,
and one small shader serves every such op at any rank (tensors above rank 4 keep the last axis
packed, see :func:`compute_kernels.view4`).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from .. import ops
from ..graph import Graph, Node
from . import compute_kernels as ck
from .compute_kernels import Binding, Decline, Kernel, Record

MAX_RANK = 6  # index maps work at any rank; this bounds what the other kernels are handed

_RESHAPES = ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity")


def addresses(shape: tuple[int, ...]) -> np.ndarray:
    """For each element of a tensor of ``shape``, its scalar address in the packed layout
    (vec4 index * 4 + lane), as an int64 array of that shape."""
    n = math.prod(shape)
    slots = ck.pack(np.arange(1, n + 1, dtype=np.int64).reshape(shape), np.int64).reshape(-1)
    addr = np.empty(n, np.int64)
    used = np.flatnonzero(slots)
    addr[slots[used] - 1] = used
    return addr.reshape(shape)


def map_binding(key: str, mapped: np.ndarray) -> tuple[Binding, int]:
    """The packed int32 map (-1 in padding lanes) as a constant binding, and its vec4 count."""
    packed = ck.pack(mapped + 1, np.int64) - 1
    if packed.size and packed.max() >= 2**31:
        raise Decline("tensor too large for a 32-bit index map")
    data = np.ascontiguousarray(packed.astype(np.int32)).view(np.float32)  # bits travel unchanged
    return Binding("const", key, data, True), packed.shape[0]


def _depth_space(a: np.ndarray, rec: ops.DepthSpaceRecord) -> np.ndarray:
    n, c, h, w = a.shape
    bs = rec.blocksize
    if rec.op == "SpaceToDepth":
        if h % bs or w % bs:
            raise Decline(f"spatial size {h}x{w} is not a multiple of blocksize {bs}")
        order = (0, 3, 5, 1, 2, 4) if rec.mode == "DCR" else (0, 1, 3, 5, 2, 4)
        a = a.reshape(n, c, h // bs, bs, w // bs, bs).transpose(order)
        return a.reshape(n, c * bs * bs, h // bs, w // bs)
    if c % (bs * bs):
        raise Decline(f"{c} channels are not a multiple of blocksize {bs} squared")
    if rec.mode == "DCR":
        a = a.reshape(n, bs, bs, c // (bs * bs), h, w).transpose(0, 3, 4, 1, 5, 2)
    else:
        a = a.reshape(n, c // (bs * bs), bs, bs, h, w).transpose(0, 1, 4, 2, 5, 3)
    return a.reshape(n, c // (bs * bs), h * bs, w * bs)


def _moved(node: Node, graph: Graph, a: np.ndarray) -> list[tuple[str, np.ndarray]]:
    """(output, the input's addresses moved as ``node`` moves elements) for each output."""
    op, y = node.op_type, node.outputs[0]
    if op == "Slice":
        rec = ops.require(node, graph, ops.SliceRecord)
        for start, end, axis, step in zip(rec.starts, rec.ends, rec.axes, rec.steps):
            a = np.take(a, np.arange(start, end, step), axis=axis)
        return [(y, a)]
    if op == "Split":
        rec = ops.require(node, graph, ops.SplitRecord)
        pieces = np.split(a, np.cumsum(rec.sizes)[:-1], axis=rec.axis)
        return [(o, piece) for o, piece in zip(node.outputs, pieces) if o]
    if op == "Transpose":
        return [(y, a.transpose(ops.require(node, graph, ops.TransposeRecord).perm))]
    if op in _RESHAPES:
        return [(y, a.reshape(ops.require(node, graph, ops.ReshapeRecord).out_shape))]
    if op == "Gather":
        rec = ops.require(node, graph, ops.GatherRecord)
        if rec.indices is None:
            raise Decline("Gather with run-time indices")
        return [(y, np.take(a, np.asarray(rec.indices, np.int64).reshape(rec.indices_shape), axis=rec.axis))]
    ys = ck._shape(graph, y)
    if op == "Expand":
        try:
            return [(y, np.broadcast_to(a, ys))]
        except ValueError as exc:
            raise Decline(f"cannot broadcast {a.shape} to {ys}") from exc
    if op == "Tile":
        if len(ys) != a.ndim or any(o % max(i, 1) for o, i in zip(ys, a.shape)):
            raise Decline(f"output shape {ys} is not a tiling of {a.shape}")
        return [(y, np.tile(a, [o // i for o, i in zip(ys, a.shape)]))]
    if op in ("DepthToSpace", "SpaceToDepth"):
        if a.ndim != 4:
            raise Decline(f"{op} of a rank {a.ndim} tensor")
        return [(y, _depth_space(a, ops.require(node, graph, ops.DepthSpaceRecord)))]
    raise Decline(f"{op} is not a layout op")


def _gather_map(node: Node, graph: Graph, precision: str) -> list[Record]:
    x = node.inputs[0]
    for i, name in enumerate(node.inputs[1:], 1):
        if name and name not in graph.constants:
            raise Decline(f"input {i} ({name!r}) must be a constant")
    a = addresses(ck._float_tensor(graph, x, MAX_RANK))
    out: list[Record] = []
    for y, mapped in _moved(node, graph, a):
        ys = ck._shape(graph, y)
        if tuple(mapped.shape) != ys:
            raise Decline(f"output {y!r}: the graph says {ys}, the op gives {tuple(mapped.shape)}")
        if len(ys) > MAX_RANK or mapped.size == 0:
            raise Decline(f"output {y!r} of shape {ys}")
        binding, total = map_binding(f"{node.name}/map:{y}", mapped)
        groups, local = ck._grid_flat(total)
        out.append(Kernel("gather", "compute/gather.comp", ck._variant(precision), (("total", total),),
                          (Binding("in", x), binding, Binding("out", y)), groups, local, node.name))
    return out


_REDUCE_OPS = {"ReduceSum": 0, "ReduceMean": 1, "ReduceMax": 2, "ReduceMin": 3, "ReduceProd": 4, "ReduceL1": 5,
               "ReduceL2": 6, "ReduceLogSum": 7, "ReduceLogSumExp": 8, "ReduceSumSquare": 9}


def _reduce(node: Node, graph: Graph, precision: str) -> list[Record]:
    x, y = node.inputs[0], node.outputs[0]
    if len(node.inputs) > 1 and node.inputs[1] and node.inputs[1] not in graph.constants:
        raise Decline("run-time axes")
    xs = ck._float_tensor(graph, x, MAX_RANK)
    rec = ops.require(node, graph, ops.ReduceRecord)
    if rec.noop:
        if x in graph.constants:
            raise Decline("identity of a constant (folded on the host)")
        return [ck.Alias(x, y, "reduce", node.name)]
    if node.op_type in ("ReduceMean", "ReduceMax") and len(xs) == 4 and sorted(rec.axes) == [2, 3] \
            and ck._shape(graph, y) == (xs[0], xs[1], 1, 1):
        # a squeeze-excite mean over H x W: globalpool loops H*W times per invocation for four
        # channels, where reduce.comp loops 4 * H * W times, which went wrong on llvmpipe / lavapipe
        # past ~2^14 pixels (PP-OCRv6 det at 480x640: its first ReduceMean off by 0.19 of 0.9)
        return [ck.globalpool_record(node, graph, precision, node.op_type == "ReduceMax")]
    return [reduce_record(node, graph, precision, xs, rec.axes, _REDUCE_OPS[node.op_type])]


def reduce_record(node: Node, graph: Graph, precision: str, xs: tuple[int, ...], axes: tuple[int, ...],
                  op: int) -> Kernel:
    """``reduce.comp`` over ``axes`` of input 0 (shape ``xs``) into output 0 with op code ``op``."""
    x, y = node.inputs[0], node.outputs[0]
    a = addresses(xs)
    base = a[tuple(0 if k in axes else slice(None) for k in range(len(xs)))]
    ys = ck._shape(graph, y)
    if base.size != math.prod(ys) or len(ys) > MAX_RANK:
        raise Decline(f"output shape {ys} does not match reducing {xs} over {axes}")
    origin = (0,) * len(xs)
    loops: list[list[int]] = []  # [length, address stride] per reduced axis of length > 1, merged where they chain
    for k in axes:
        if xs[k] > 1:
            stride = int(a[tuple(1 if j == k else 0 for j in range(len(xs)))] - a[origin])
            if loops and loops[-1][1] == xs[k] * stride:
                loops[-1] = [loops[-1][0] * xs[k], stride]
            else:
                loops.append([xs[k], stride])
    if len(loops) > 4:
        raise Decline(f"reduction over {len(loops)} separate axes (at most 4)")
    loops = [[1, 0]] * (4 - len(loops)) + loops
    lens, strides = [n for n, _ in loops], [st for _, st in loops]
    binding, total = map_binding(f"{node.name}/base", base.reshape(ys))
    groups, local = ck._grid_flat(total)
    params = (("total", total), ("op", op), *zip(("l0", "l1", "l2", "l3"), lens),
              *zip(("s0", "s1", "s2", "s3"), strides), ("count", float(math.prod(xs[k] for k in axes))))
    return Kernel("reduce", "compute/reduce.comp", ck._variant(precision), params,
                  (Binding("in", x), binding, Binding("out", y)), groups, local, node.name)


def _softmax_axis(node: Node, graph: Graph, precision: str) -> list[Record]:
    x = node.inputs[0]
    xs = ck._float_tensor(graph, x)
    axis = ops.require(node, graph, ops.AxisRecord).axis
    if graph.opset < 13 and any(d != 1 for d in xs[axis + 1:]):
        raise Decline("opset < 13 softmax flattens the trailing axes")
    s4, pa = ck.view4(xs)
    ax4 = axis + 4 - len(xs)
    if ax4 == pa:
        raise Decline("along the packed axis (the softmax kernel's case)")
    mem = [k for k in range(4) if k != pa]
    dims = [s4[k] for k in mem]
    j = mem.index(ax4)
    c4 = (s4[pa] + 3) // 4
    outer, inner = math.prod(dims[:j]), math.prod(dims[j + 1:]) * c4
    groups, local = ck._grid_flat(outer * inner)
    params = (("outer", outer), ("len", dims[j]), ("inner", inner), ("c4s", c4), ("c", s4[pa]),
              ("log_out", int(node.op_type == "LogSoftmax")))
    return [Kernel("softmax_axis", "compute/softmax_axis.comp", ck._variant(precision), params,
                   (Binding("in", x), Binding("out", node.outputs[0])), groups, local, node.name)]


def _batchnorm(node: Node, graph: Graph, precision: str) -> list[Record]:
    x, y = node.inputs[0], node.outputs[0]
    if len([o for o in node.outputs if o]) > 1:
        raise Decline("training-mode outputs (running mean / variance)")
    if len(node.inputs) != 5:
        raise Decline(f"{len(node.inputs)} inputs (5 expected)")
    xs = ck._float_tensor(graph, x, MAX_RANK)
    if len(xs) < 2:
        raise Decline("input of rank < 2")
    eps = ops.require(node, graph, ops.NormRecord).epsilon
    scale, bias, mean, var = (np.asarray(ck._const(graph, node, i, what), np.float64).reshape(-1)
                              for i, what in ((1, "scale"), (2, "B"), (3, "mean"), (4, "var")))
    if not scale.size == bias.size == mean.size == var.size == xs[1]:
        raise Decline(f"per-channel inputs do not all have {xs[1]} values")
    mul = scale / np.sqrt(var + eps)
    add = bias - mean * mul
    d0, d1, d2, c4, c = ck.mem_dims(xs)
    total = d0 * d1 * d2 * c4
    packed = ck.view4(xs)[1] == 1 or len(xs) == 2  # the channel axis is the packed one
    inner = math.prod(xs[2:-1]) * c4 if not packed else 1
    groups, local = ck._grid_flat(total)
    params = (("total", total), ("c4s", c4), ("c", c), ("ch_packed", int(packed)), ("inner", inner), ("nch", xs[1]))
    return [Kernel("affine", "compute/affine.comp", ck._variant(precision), params,
                   (Binding("in", x), Binding("const", f"{node.name}/mul", ck.pack(mul), True),
                    Binding("const", f"{node.name}/add", ck.pack(add), True), Binding("out", y)),
                   groups, local, node.name)]


def _matmul4(node: Node, graph: Graph, precision: str) -> list[Record]:
    """Both operands rank 4 and packed on axis 1 (attention heads): heads multiply lane by lane."""
    a, b, y = node.inputs[0], node.inputs[1], node.outputs[0]
    sa, sb, sy = ck._float_tensor(graph, a), ck._float_tensor(graph, b), ck._shape(graph, y)
    if ops.require(node, graph, ops.MatMulRecord).act is not None:
        raise Decline("a fused activation")
    if not len(sa) == len(sb) == 4:
        raise Decline("not two rank-4 operands")
    n, h, m, pn, k = sy[0], sy[1], sa[2], sb[3], sa[3]
    if sb[2] != k or sy != (n, h, m, pn) or sa[0] not in (1, n) or sb[0] not in (1, n) \
            or sa[1] not in (1, h) or sb[1] not in (1, h):
        raise Decline(f"shapes {sa} x {sb} -> {sy}")
    h4 = (h + 3) // 4
    groups, local = ck._grid_flat(n * m * pn * h4)
    params = (("n", n), ("h4", h4), ("h", h), ("m", m), ("k", k), ("pn", pn), ("a_n", int(sa[0] > 1)),
              ("b_n", int(sb[0] > 1)), ("a_splat", int(sa[1] == 1 < h)), ("b_splat", int(sb[1] == 1 < h)))
    return [Kernel("matmul4", "compute/matmul4.comp", ck._variant(precision), params,
                   (Binding("in", a), Binding("in", b), Binding("out", y)), groups, local, node.name)]


def _scale_record(node: Node, graph: Graph, precision: str, x: str, y: str, factor: float) -> Kernel:
    """y = x * factor (the affine kernel with one channel)."""
    d0, d1, d2, c4, c = ck.mem_dims(ck._shape(graph, x))
    total = d0 * d1 * d2 * c4
    groups, local = ck._grid_flat(total)
    params = (("total", total), ("c4s", c4), ("c", c), ("ch_packed", 0), ("inner", 1), ("nch", 1))
    return Kernel("affine", "compute/affine.comp", ck._variant(precision), params,
                  (Binding("in", x), Binding("const", f"{node.name}/scale", ck.pack(np.full(1, factor)), True),
                   Binding("const", f"{node.name}/zero", ck.pack(np.zeros(1)), True), Binding("out", y)),
                  groups, local, node.name)


def _nary(node: Node, graph: Graph, precision: str) -> list[Record]:
    """Sum / Mean / Max / Min of 1 or 3+ inputs: a chain of binary kernels accumulating into the
    output (each reads and writes its own element only), Mean scaled by 1 / n at the end."""
    names = [n for n in node.inputs if n]
    y = node.outputs[0]
    ys = ck._shape(graph, y)
    if len(names) == 1:
        if names[0] in graph.constants:
            raise Decline("one constant input (folded on the host)")
        if ck._float_tensor(graph, names[0]) != ys:
            raise Decline("one input of a different shape than the output")
        return [ck.Alias(names[0], y, "layout", node.name)]
    if len(names) == 2:
        raise Decline("two inputs (the binary kernel's case)")
    step_op = "Sum" if node.op_type == "Mean" else node.op_type
    out: list[Record] = []
    acc = names[0]
    for name in names[1:]:
        step = Node(node.name, step_op, [acc, name], [y])
        out += ck._binary(step, graph, precision)
        acc = y
    if node.op_type == "Mean":
        out.append(_scale_record(node, graph, precision, y, y, 1.0 / len(names)))
    return out


def _norm(node: Node, graph: Graph, precision: str) -> list[Record]:
    """LayerNormalization (axes >= axis) and InstanceNormalization (axes >= 2) up to rank 4: the
    normalised axes are, in memory order, either a suffix holding the packed axis (mode 0) or the
    innermost non-packed axes (mode 1, lanes are separate groups)."""
    x, y = node.inputs[0], node.outputs[0]
    stats = [o for o in node.outputs[1:] if o]
    if stats and len(stats) != 2:
        raise Decline("only one of the Mean / InvStdDev outputs")
    for o in stats:
        if np.dtype(graph.dtypes.get(o, np.float32)) != np.float32:
            raise Decline(f"output {o!r} is not float32")
    xs = ck._float_tensor(graph, x)
    rec = ops.require(node, graph, ops.NormRecord)
    r = len(xs)
    first = rec.axis if node.op_type == "LayerNormalization" else 2
    if r < 2 or first >= r:
        raise Decline(f"nothing to normalise over in rank {r}")
    region = xs[first:]
    s4, pa = ck.view4(xs)
    normed = {k + 4 - r for k in range(first, r)}
    mem = [k for k in range(4) if k != pa]
    d0, d1, d2, c4, c = ck.mem_dims(xs)
    total = d0 * d1 * d2 * c4
    count = math.prod(region)
    layer = node.op_type == "LayerNormalization"
    if pa in normed:
        if set(mem[len(mem) - len(normed) + 1:]) != normed - {pa}:
            raise Decline(f"normalised axes {sorted(normed)} are not a suffix in memory order")
        mode, length = 0, math.prod(s4[k] for k in normed - {pa}) * c4
        smode = 0 if layer else 3
    else:
        if set(mem[len(mem) - len(normed):]) != normed:
            raise Decline(f"normalised axes {sorted(normed)} are not the innermost non-packed axes")
        mode, length = 1, math.prod(s4[k] for k in normed)
        smode = 1 if layer else 2
    groups_n = total // length
    def packer(default: float) -> Callable[[np.ndarray | None], np.ndarray]:
        def pack(v: np.ndarray | None) -> np.ndarray:
            v = np.full(1, default, np.float32) if v is None else np.asarray(v, np.float32)
            if layer:
                full = np.broadcast_to(v, region)
                return ck.pack(full.reshape((1,) * first + region) if mode == 0 else full.reshape(-1))
            return ck.pack(np.broadcast_to(v.reshape(-1), (xs[1],)))
        return pack

    for i, what in ((1, "scale"), (2, "B")):
        name = node.inputs[i] if i < len(node.inputs) else ""
        vs = ck._shape(graph, name) if name else (1,)
        if layer and not _broadcasts(vs, region) or not layer and math.prod(vs) not in (1, xs[1]):
            raise Decline(f"{what} of shape {vs} does not fit {region if layer else xs[1]}")
    sources = [ck._source(graph, node, i, what, f"{node.name}/{what}", packer(default))
               for i, what, default in ((1, "scale", 1.0), (2, "B", 0.0))]
    groups, local = ck._grid_flat(groups_n)
    params = (("groups", groups_n), ("mode", mode), ("smode", smode), ("len", length), ("c4s", c4), ("c", c),
              ("nch", xs[1]), ("count", float(count)), ("eps", float(rec.epsilon)))
    outs = tuple(Binding("out", o) for o in [y, *stats])
    return [Kernel("norm", "compute/norm.comp", ck._variant(precision, **({"STATS": 1} if stats else {})), params,
                   (Binding("in", x), *sources, *outs), groups, local, node.name)]


def _broadcasts(shape: tuple[int, ...], to: tuple[int, ...]) -> bool:
    try:
        return np.broadcast_shapes(shape, to) == tuple(to)
    except ValueError:
        return False


def variants() -> list[tuple[str, tuple[tuple[str, int], ...]]]:
    """Every (shader, defines) variant this module's generators emit."""
    out = []
    for prec in ck.PRECISIONS:
        for shader in ("gather", "reduce", "softmax_axis", "affine", "matmul4", "norm"):
            out.append((f"compute/{shader}.comp", ck._variant(prec)))
        out.append(("compute/norm.comp", ck._variant(prec, STATS=1)))
    out.append(("compute/reduce.comp", ck._variant("fp16", Y32=1)))  # a kept statistic (compute_mixed)
    return out


def _register() -> None:
    reg = ck.REGISTRY
    for op in ("Slice", "Split", "Gather", "Expand", "Tile", "DepthToSpace", "SpaceToDepth"):
        reg[op] = [("gather", _gather_map)]
    for op in (*_RESHAPES, "Transpose"):  # the relayout kernel first (or a zero-copy alias) up to rank 4
        reg[op] = [c for c in reg.get(op, []) if c[0] != "gather"] + [("gather", _gather_map)]
    reg["BatchNormalization"] = [("affine", _batchnorm)]
    reg["LayerNormalization"] = reg["InstanceNormalization"] = [("norm", _norm)]
    for op in ("Sum", "Mean", "Max", "Min"):
        reg[op] = [c for c in reg.get(op, []) if c[0] != "nary"] + [("nary", _nary)]
    reg["MatMul"] = [c for c in reg.get("MatMul", []) if c[0] != "matmul4"] + [("matmul4", _matmul4)]
    for op in _REDUCE_OPS:
        reg[op] = [("reduce", _reduce)]
    for op in ("Softmax", "LogSoftmax"):
        reg[op] = [c for c in reg.get(op, []) if c[0] != "softmax_axis"] + [("softmax_axis", _softmax_axis)]


_register()
