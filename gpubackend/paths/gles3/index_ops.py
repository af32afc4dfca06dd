"""gles3 kernels that compute each output element from input elements found by index arithmetic:
layout ops (Transpose, Slice, Split, Reshape across texture layouts, Concat on any axis, Gather
with constant indices, Expand, Tile, DepthToSpace / SpaceToDepth), reductions on any axes,
Softmax / LogSoftmax on any axis, the three normalisations, n-ary Sum / Mean / Max / Min and
batched MatMul.

All share one shader, ``shaders/gles3/index.frag``, which asks the generated
``float value_at(int l)`` for each of a texel's four output elements by linear index (the NCHW
texture view of :mod:`.layout` is a row-major reshape, so linear indices agree with ONNX's).
The generators write ``value_at`` from *index maps*: a map is a list of digits (size, stride),
outermost first; it splits an index into mixed-radix digits and sums digit * stride. A Transpose
is one map with permuted strides, a Slice adds a base and scales strides by the steps, Expand uses
stride 0, Gather a table. Reading an input element by linear index is ``<prefix>_at(m)``.

Semantics come from the op layer's records (:mod:`gpubackend.ops`); nothing here reads attributes.
Everything is baked into the shader text, so a program holds no per-node state."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ... import ops
from ...gl.device import LLVMPIPE_LOOP_LIMIT, LOOP_BUDGET
from ...graph import Graph, Node
from ...ops import elementwise as ew
from .kernels import LONG_SOFTMAX, Kernel, Limits, _check_float, _record, _shape, _source, layout_of
from .layout import TexLayout, to4d

Digit = tuple[int, int]  # (size, stride)
UNROLL = 8  # reduction loops: steps per loop iteration (llvmpipe caps a fragment's loop iterations)
MAX_TABLE = 4096  # Gather: most constant indices baked into one shader
MAX_ELEMENTS = (1 << 31) - 1  # linear indices are 32-bit ints

NAN = "uintBitsToFloat(0x7fc00000u)"
POS_INF = "uintBitsToFloat(0x7f800000u)"
NEG_INF = "uintBitsToFloat(0xff800000u)"

HELPERS = f"""bool is_nan(float v) {{ return (floatBitsToUint(v) & 0x7fffffffu) > 0x7f800000u; }}
bool is_inf(float v) {{ return (floatBitsToUint(v) & 0x7fffffffu) == 0x7f800000u; }}
float log_ieee(float v) {{ return is_nan(v) ? v : v < 0.0 ? {NAN} : v == 0.0 ? {NEG_INF} : log(v); }}
float sqrt_ieee(float v) {{ return v < 0.0 ? {NAN} : sqrt(v); }}"""


# ---- index maps ----------------------------------------------------------------------------------

def strides(shape: Sequence[int]) -> list[int]:
    """Row-major element strides."""
    out = [1] * len(shape)
    for i in range(len(shape) - 2, -1, -1):
        out[i] = out[i + 1] * int(shape[i + 1])
    return out


def simplify(digits: Sequence[Digit]) -> list[Digit]:
    """Drop size-1 digits and merge neighbours that step contiguously (fewer divisions)."""
    out: list[Digit] = []
    for size, stride in digits:
        if size == 1:
            continue
        if out and out[-1][1] == size * stride:
            out[-1] = (out[-1][0] * size, stride)
        else:
            out.append((size, stride))
    return out


def map_fn(name: str, digits: Sequence[Digit], base: int = 0, table: tuple[int, str] | None = None) -> str:
    """GLSL ``int name(int q)``: ``base`` + sum of digit * stride over ``digits``. ``table``
    (position, array name) makes that digit (not simplified away) index a constant array and add
    the entry times its stride."""
    if table is None:
        digits = simplify(digits)
    lines = [f"int {name}(int q) {{", f"    int m = {base};"]
    order = list(enumerate(digits))[::-1]  # innermost first
    for k, (pos, (size, stride)) in enumerate(order):
        digit = "q" if k == len(order) - 1 else f"(q - d * {size})"
        if table is not None and pos == table[0]:
            digit = f"{table[1]}[{digit}]"
        if k == len(order) - 1:
            if stride:
                lines.append(f"    m += {digit} * {stride};")
        else:
            lines.append(f"    {{ int d = q / {size}; {f'm += {digit} * {stride}; ' if stride else ''}q = d; }}")
    lines.append("    return m;\n}")
    return "\n".join(lines)


def at_fn(prefix: str, lay: TexLayout) -> str:
    """GLSL ``float <prefix>_at(int m)``: the element at linear index m of a tensor in ``lay``."""
    lines = [f"float {prefix}_at(int m) {{"]
    coords = {}
    rest = "m"
    for axis, size in (("x", lay.w), ("y", lay.h), ("c", lay.c)):
        if size == 1:
            coords[axis] = "0"
            continue
        lines.append(f"    int {axis}q = {rest} / {size}; int {axis} = {rest} - {axis}q * {size};")
        coords[axis] = axis
        rest = f"{axis}q"
    n = rest if lay.n > 1 else "0"
    c = coords["c"]
    lines.append(f"    return {prefix}_get({n}, {c} / 4, {coords['y']}, {coords['x']})[{c} - ({c} / 4) * 4];\n}}")
    return "\n".join(lines)


def loop(count: int, body: str, unroll: int = UNROLL) -> str:
    """GLSL running ``body`` (which reads ``int j``) for j in [0, count): a loop of ``unroll``
    steps, then the remaining steps written out."""
    main = count // unroll * unroll
    parts = []
    if main:
        steps = " ".join(f"{{ int j = j0 + {k}; {body} }}" for k in range(unroll))
        parts.append(f"for (int j0 = 0; j0 < {main}; j0 += {unroll}) {{ {steps} }}")
    parts += [f"{{ int j = {k}; {body} }}" for k in range(main, count)]
    return "\n    ".join(parts)


def loop_edges(count: int, unroll: int = UNROLL) -> int:
    """Loop back-edges one :func:`loop` takes (see ``gl.device.LOOP_BUDGET``)."""
    return count // unroll + 1


def fragment_loop_edges(planes: int, passes: int, count: int, unroll: int = UNROLL) -> int:
    """Loop back-edges of one index.frag fragment whose value_at runs ``passes`` loops over
    ``count`` elements: value_at runs for each of the 4 lanes of each of the ``planes`` render
    targets (main.glsl's loop over R_OUT, whose own edges count too)."""
    return planes * 4 * passes * loop_edges(count, unroll) + planes + 1


def _check_loops(passes: int, count: int, out_shape: tuple[int, ...], lim: Limits) -> int | str:
    """The steps per loop iteration (a multiple of UNROLL) that keep one fragment of an index
    kernel over ``out_shape`` under the loop budget, or why none does. llvmpipe silently skips the
    iterations past its limit: a 4-plane Softmax over 18710 classes (PP-OCRv6 rec) gave 0.39 off
    when the budget counted one plane."""
    out = layout_of(out_shape, lim)
    if isinstance(out, str):
        return out
    for unroll in (UNROLL, 2 * UNROLL, 4 * UNROLL):
        edges = fragment_loop_edges(out.planes, passes, count, unroll)
        if edges <= LOOP_BUDGET:
            return unroll
    return (f"{count} elements per reduction is too long for one fragment ({edges} loop iterations "
            f"over {out.planes} render targets; llvmpipe stops loops after {LLVMPIPE_LOOP_LIMIT})")


def index_kernel(name: str, node: Node, graph: Graph, lim: Limits, out_shape: tuple[int, ...],
                 reads: Sequence[tuple[str, str]], code: str, flops: int = 0,
                 act: ops.Activation | None = None, flags: Sequence[str] = (),
                 passes: dict[str, tuple[int, ...]] | None = None) -> Kernel | str:
    """The kernel drawing ``index.frag`` with ``code`` (which defines ``value_at``) over an output
    of ``out_shape``; ``reads`` are the (prefix, tensor) it reads, runtime tensors or constants,
    float32 except the prefixes in ``flags`` (bool tensors, held as 0.0 / 1.0). ``passes``: the
    float32 tensors (name -> shape) an earlier pass of the same node writes (``Kernel.writes``)."""
    if math.prod(out_shape) == 0:
        return f"empty output {out_shape}"
    out = layout_of(out_shape, lim)
    if isinstance(out, str):
        return out
    layouts: dict[str, TexLayout] = {}
    tensors: list[tuple[str, str]] = []
    consts: dict[str, tuple[np.ndarray, TexLayout]] = {}
    units = 0
    for prefix, tname in reads:
        if passes and tname in passes:
            s: tuple[int, ...] | None = passes[tname]
        else:
            bad = _bool_check(graph, tname) if prefix in flags else _check_float(graph, [tname])
            if bad:
                return bad
            s = _shape(graph, tname)
        if s is None:
            return f"shape of {tname!r} not static"
        if math.prod(s) > MAX_ELEMENTS or math.prod(out_shape) > MAX_ELEMENTS:
            return "more than 2^31 elements"
        lay = layout_of(s, lim)
        if isinstance(lay, str):
            return lay
        layouts[prefix] = lay
        units += lay.planes
        if tname in graph.constants:
            consts[prefix] = (np.asarray(graph.constants[tname], np.float32).reshape(to4d(s)), lay)
        else:
            tensors.append((prefix, tname))
    if units > lim.max_texture_units:
        return f"{units} input textures exceed the {lim.max_texture_units} texture units"
    decls = "\n".join([HELPERS, *(at_fn(p, lay) for p, lay in layouts.items()), code])
    defines = ew.activation_defines(None if act is None else act.spec)
    src = _source("index.frag", out, layouts, False, defines, decls)
    return Kernel(name, src, tensors, out, False, consts=consts, in_layouts=layouts,
                  flops=flops or math.prod(out_shape))


def _dtype(graph: Graph, name: str) -> np.dtype | None:
    dt = graph.constants[name].dtype if name in graph.constants else graph.dtypes.get(name)
    return None if dt is None else np.dtype(dt)


def _bool_check(graph: Graph, name: str) -> str | None:
    dt = _dtype(graph, name)
    return None if dt is None or dt == np.bool_ else f"tensor {name!r} is {dt}, expected bool"


# Ops whose output is not float32: the texture holds it as exact small floats (0/1, indices) and
# the segment converts it to the graph's type when it leaves the GPU.
EXACT_OUTPUTS = {"ArgMax": np.int64, "ArgMin": np.int64, "Equal": np.bool_, "Greater": np.bool_, "Less": np.bool_,
                 "GreaterOrEqual": np.bool_, "LessOrEqual": np.bool_}
FP16_MAX = 65504
MAX_EXACT_INDEX = 2048  # fp16 textures hold integers exactly up to 2048


def float_checked(node: Node) -> list[str]:
    """The tensors of ``node`` that must be float32 for gles3 (kernels.build checks them)."""
    if node.op_type in EXACT_OUTPUTS:
        return node.inputs[:1]
    if node.op_type == "Where":
        return node.outputs[:1]
    return node.inputs[:1] + node.outputs[:1]


def _io(node: Node, graph: Graph) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The static shapes of the first input and output (declines when either is unknown)."""
    xs, ys = _shape(graph, node.inputs[0]), _shape(graph, node.outputs[0])
    if xs is None or ys is None:
        raise ops.Decline("shape not static")
    return xs, ys


def _rec(node: Node, graph: Graph, kind: type) -> Any:
    """The op layer's record of ``node`` (declines with the op layer's reason when there is none)."""
    rec = _record(node, graph, kind)
    if isinstance(rec, str):
        raise ops.Decline(rec)
    return rec


def _copy(name: str, node: Node, graph: Graph, lim: Limits, ys: tuple[int, ...], digits: Sequence[Digit],
          base: int = 0, output: int = 0) -> Kernel | str:
    """Output element l is input element ``map(l)``."""
    code = map_fn("src", digits, base) + "\nfloat value_at(int l) { return X_at(src(l)); }"
    return index_kernel(name, node, graph, lim, ys, [("X", node.inputs[0])], code)


# ---- layout ops ----------------------------------------------------------------------------------

def transpose(node: Node, graph: Graph, lim: Limits) -> Kernel | str:
    xs, ys = _io(node, graph)
    rec = _rec(node, graph, ops.TransposeRecord)
    st = strides(xs)
    return _copy("transpose", node, graph, lim, ys, [(xs[p], st[p]) for p in rec.perm])


def reshape(node: Node, graph: Graph, lim: Limits) -> Kernel | str:
    """Reshape / Flatten / Squeeze / Unsqueeze / Identity whose texture layout changes (the same
    layout is an alias, see kernels.alias): a copy in linear order."""
    xs, ys = _io(node, graph)
    if math.prod(xs) != math.prod(ys):
        return f"{xs} -> {ys} changes the element count"
    return _copy("relayout", node, graph, lim, ys, [(math.prod(ys), 1)])


def cast(node: Node, graph: Graph, lim: Limits) -> Kernel | str:
    rec = _rec(node, graph, ops.CastRecord)
    if rec.to != np.float32:
        return f"Cast to {rec.to}: gles3 textures hold float32 only"
    return reshape(node, graph, lim)


def _slice_digits(xs: tuple[int, ...], ys: tuple[int, ...], starts: dict[int, int],
                  steps: dict[int, int]) -> tuple[list[Digit], int]:
    st = strides(xs)
    base = sum(starts.get(a, 0) * st[a] for a in range(len(xs)))
    return [(ys[a], st[a] * steps.get(a, 1)) for a in range(len(xs))], base


def slice_(node: Node, graph: Graph, lim: Limits) -> Kernel | str:
    xs, ys = _io(node, graph)
    rec = _rec(node, graph, ops.SliceRecord)
    want = list(xs)
    for s, e, a, step in zip(rec.starts, rec.ends, rec.axes, rec.steps):
        want[a] = len(range(s, e, step))
    if tuple(want) != ys:
        return f"the graph's output shape {ys} does not match the slice's {tuple(want)}"
    digits, base = _slice_digits(xs, ys, dict(zip(rec.axes, rec.starts)), dict(zip(rec.axes, rec.steps)))
    return _copy("slice", node, graph, lim, ys, digits, base)


def split(node: Node, graph: Graph, lim: Limits) -> list[Kernel] | str:
    """One kernel per output (the path draws each as its own step)."""
    xs = _shape(graph, node.inputs[0])
    if xs is None:
        return "shape not static"
    rec = _rec(node, graph, ops.SplitRecord)
    if len(rec.sizes) != len(node.outputs):
        return f"{len(rec.sizes)} split sizes for {len(node.outputs)} outputs"
    kernels = []
    start = 0
    for size, name in zip(rec.sizes, node.outputs):
        ys = xs[:rec.axis] + (size,) + xs[rec.axis + 1:]
        if name:
            if _shape(graph, name) not in (None, ys):
                return f"output {name!r} has shape {_shape(graph, name)}, the split gives {ys}"
            digits, base = _slice_digits(xs, ys, {rec.axis: start}, {})
            k = _copy("split", node, graph, lim, ys, digits, base)
            if isinstance(k, str):
                return k
            kernels.append(k)
        start += size
    return kernels


def concat(node: Node, graph: Graph, lim: Limits) -> Kernel | str:
    ys = _shape(graph, node.outputs[0])
    if ys is None:
        return "shape not static"
    rec = _rec(node, graph, ops.AxisRecord)
    axis = rec.axis
    inner = math.prod(ys[axis + 1:])
    reads, chain, off = [], [], 0
    for i, name in enumerate(node.inputs):
        s = _shape(graph, name)
        if s is None:
            return "shape not static"
        if s[axis] == 0:
            continue
        reads.append((f"X{i}", name))
        cond = f"if (a >= {off}) " if off else ""
        chain.append(f"    {cond}return X{i}_at((o * {s[axis]} + a - {off}) * {inner} + r);")
        off += s[axis]
    if off != ys[axis]:
        return f"inputs add up to {off} along axis {axis}, the output has {ys[axis]}"
    code = "\n".join(["float value_at(int l) {", f"    int q = l / {inner}; int r = l - q * {inner};",
                      f"    int o = q / {ys[axis]}; int a = q - o * {ys[axis]};", *chain[::-1], "}"])
    return index_kernel("concat_any", node, graph, lim, ys, reads, code)


def gather(node: Node, graph: Graph, lim: Limits) -> Kernel | str:
    xs, ys = _io(node, graph)
    rec = _rec(node, graph, ops.GatherRecord)
    if rec.indices is None or rec.indices_shape is None:
        return "indices arrive at run time"
    axis, idx = rec.axis, rec.indices
    if ys != xs[:axis] + rec.indices_shape + xs[axis + 1:]:
        return f"the graph's output shape {ys} does not match the gather's"
    st = strides(xs)
    outer = [(xs[a], st[a]) for a in range(axis)]
    inner = [(xs[a], st[a]) for a in range(axis + 1, len(xs))]
    steps = {b - a for a, b in zip(idx, idx[1:])}
    if len(idx) <= 1 or len(steps) == 1:  # an arithmetic progression: a strided digit
        step = steps.pop() if steps else 0
        code = map_fn("src", outer + [(len(idx), step * st[axis])] + inner, (idx[0] if idx else 0) * st[axis])
    else:
        if len(idx) > MAX_TABLE:
            return f"{len(idx)} indices (at most {MAX_TABLE} are baked into a shader)"
        table = f"const int GI[{len(idx)}] = int[{len(idx)}]({', '.join(str(i) for i in idx)});"
        code = table + "\n" + map_fn("src", outer + [(len(idx), st[axis])] + inner, 0, (len(outer), "GI"))
    code += "\nfloat value_at(int l) { return X_at(src(l)); }"
    return index_kernel("gather", node, graph, lim, ys, [("X", node.inputs[0])], code)


def _broadcast_digits(xs: tuple[int, ...], ys: tuple[int, ...]) -> list[Digit] | str:
    """The map from an output index to the element of ``xs`` that broadcasts to it."""
    if len(xs) > len(ys):
        return f"{xs} has more axes than {ys}"
    aligned = (1,) * (len(ys) - len(xs)) + tuple(xs)
    st = strides(aligned)
    if any(a not in (1, y) for a, y in zip(aligned, ys)):
        return f"{xs} does not broadcast to {ys}"
    return [(y, 0 if a == 1 else s) for a, y, s in zip(aligned, ys, st)]


def expand(node: Node, graph: Graph, lim: Limits) -> Kernel | str:
    xs, ys = _io(node, graph)
    digits = _broadcast_digits(xs, ys)
    if isinstance(digits, str):
        return digits
    return _copy("expand", node, graph, lim, ys, digits)


def tile(node: Node, graph: Graph, lim: Limits) -> Kernel | str:
    """Output axis a of length reps * n splits into (rep, i): stride 0 for rep (the repeats are
    read off the static shapes)."""
    xs, ys = _io(node, graph)
    if len(xs) != len(ys) or any(x == 0 or y % x for x, y in zip(xs, ys)):
        return f"{ys} is not a tiling of {xs}"
    st = strides(xs)
    digits: list[Digit] = []
    for x, y, s in zip(xs, ys, st):
        digits += [(y // x, 0), (x, s)]
    return _copy("tile", node, graph, lim, ys, digits)


def depth_space(node: Node, graph: Graph, lim: Limits) -> Kernel | str:
    xs, ys = _io(node, graph)
    if len(xs) != 4:
        return "only 4-D tensors"
    rec = _rec(node, graph, ops.DepthSpaceRecord)
    b = rec.blocksize
    n, c, h, w = xs
    if rec.op == "DepthToSpace":
        co = c // (b * b)
        if ys != (n, co, h * b, w * b):
            return f"output {ys} is not the DepthToSpace of {xs}"
        hw = h * w
        # output (n, co, h, i, w, j) <- input channel (i*b + j)*co + c (DCR) or c*b*b + i*b + j (CRD)
        if rec.mode == "DCR":
            digits = [(n, c * hw), (co, hw), (h, w), (b, b * co * hw), (w, 1), (b, co * hw)]
        else:
            digits = [(n, c * hw), (co, b * b * hw), (h, w), (b, b * hw), (w, 1), (b, hw)]
    else:
        if h % b or w % b or ys != (n, c * b * b, h // b, w // b):
            return f"output {ys} is not the SpaceToDepth of {xs}"
        # output channel (i*b + j)*c + ci (DCR) or ci*b*b + i*b + j (CRD), pixel (y, x)
        # <- input (ci, y*b + i, x*b + j)
        if rec.mode == "DCR":
            digits = [(n, c * h * w), (b, w), (b, 1), (c, h * w), (h // b, b * w), (w // b, b)]
        else:
            digits = [(n, c * h * w), (c, h * w), (b, w), (b, 1), (h // b, b * w), (w // b, b)]
    return _copy("depthspace", node, graph, lim, ys, digits)


# ---- reductions ----------------------------------------------------------------------------------

def _reduce_maps(xs: tuple[int, ...], axes: Sequence[int], keep_shape: bool) -> tuple[str, str, int]:
    """(``base(l)``, ``off(j)``, count): the first reduced element of output element l and the
    offset of the j-th reduced element. ``keep_shape``: l indexes the input's shape (Softmax,
    normalisations), else the shape with the reduced axes removed."""
    st = strides(xs)
    kept = [(xs[a], 0 if a in axes else st[a]) for a in range(len(xs)) if keep_shape or a not in axes]
    red = [(xs[a], st[a]) for a in axes]
    return map_fn("base", kept), map_fn("off", red), math.prod(xs[a] for a in axes)


_REDUCE = {  # op: (init, step on acc with v, result from acc and the count R)
    "ReduceSum": ("0.0", "acc += v;", "acc"),
    "ReduceMean": ("0.0", "acc += v;", "acc / float(R)"),
    "ReduceMax": (NEG_INF, "if (is_nan(v) || v > acc) acc = v;", "acc"),
    "ReduceMin": (POS_INF, "if (is_nan(v) || v < acc) acc = v;", "acc"),
    "ReduceProd": ("1.0", "acc *= v;", "acc"),
    "ReduceL1": ("0.0", "acc += abs(v);", "acc"),
    "ReduceL2": ("0.0", "acc += v * v;", "sqrt(acc)"),
    "ReduceSumSquare": ("0.0", "acc += v * v;", "acc"),
    "ReduceLogSum": ("0.0", "acc += v;", "log_ieee(acc)"),
}
REDUCE_OPS = (*_REDUCE, "ReduceLogSumExp")


def reduce(node: Node, graph: Graph, lim: Limits) -> Kernel | str:
    xs, ys = _io(node, graph)
    rec = _rec(node, graph, ops.ReduceRecord)
    if rec.noop:
        return reshape(node, graph, lim)
    base, off, count = _reduce_maps(xs, rec.axes, False)
    if count == 0:
        return "reduction over an empty axis"
    passes = 2 if node.op_type == "ReduceLogSumExp" else 1
    unroll = _check_loops(passes, count, ys, lim)
    if isinstance(unroll, str):
        return unroll
    read = "float v = X_at(b + off(j));"
    if node.op_type == "ReduceLogSumExp":  # max first, as fallback does: exp never overflows
        body = [f"float m = {NEG_INF};", loop(count, f"{read} if (is_nan(v) || v > m) m = v;", unroll),
                "if (is_inf(m)) m = 0.0;", "float acc = 0.0;", loop(count, f"{read} acc += exp(v - m);", unroll),
                "return log_ieee(acc) + m;"]
    else:
        init, step, result = _REDUCE[node.op_type]
        body = [f"float acc = {init};", loop(count, f"{read} {step}", unroll), f"return {result};"]
    code = "\n".join([base, off, f"const int R = {count};", "float value_at(int l) {", "    int b = base(l);",
                      *(f"    {line}" for line in body), "}"])
    return index_kernel("reduce", node, graph, lim, ys, [("X", node.inputs[0])], code,
                        flops=math.prod(xs) * passes)


def softmax(node: Node, graph: Graph, lim: Limits) -> Kernel | list[Kernel] | str:
    """Softmax / LogSoftmax on any axis (before opset 13: over every axis from ``axis`` on)."""
    xs, ys = _io(node, graph)
    rec = _rec(node, graph, ops.AxisRecord)
    if not xs:
        return "a scalar input"
    axes = [rec.axis] if graph.opset >= 13 else list(range(rec.axis, len(xs)))
    base, off, count = _reduce_maps(xs, axes, True)
    result = "x - m - log(s)" if node.op_type == "LogSoftmax" else "exp(x - m) / s"
    read = "float v = X_at(b + off(j));"
    max_step = f"{read} if (is_nan(v) || v > m) m = v;"
    sum_step = f"{read} s += exp(v - m);"
    if count >= LONG_SOFTMAX:
        return _softmax_passes(node, graph, lim, xs, axes, result, max_step, sum_step)
    unroll = _check_loops(2, count, ys, lim)
    if isinstance(unroll, str):
        return unroll
    code = "\n".join([base, off, "float value_at(int l) {", "    int b = base(l);",
                      f"    float m = {NEG_INF};", "    " + loop(count, max_step, unroll),
                      "    float s = 0.0;", "    " + loop(count, sum_step, unroll),
                      "    float x = X_at(l);", f"    return {result};", "}"])
    return index_kernel("softmax_any", node, graph, lim, ys, [("X", node.inputs[0])], code,
                        flops=math.prod(xs) * 3 * count)


def _softmax_passes(node: Node, graph: Graph, lim: Limits, xs: tuple[int, ...], axes: list[int], result: str,
                    max_step: str, sum_step: str) -> list[Kernel] | str:
    """A long-axis Softmax as three draws: the max of each row, the sum of exp(v - max) of each
    row (both shaped as the input with the axes kept as 1), then every element from its row's two."""
    rows = tuple(1 if a in axes else d for a, d in enumerate(xs))
    base, off, count = _reduce_maps(xs, axes, False)  # a row's linear index is its index in ``rows``
    if lim.fp16 and count > FP16_MAX:
        return f"a row sum over {count} elements may overflow fp16 storage"
    unroll = _check_loops(1, count, rows, lim)
    if isinstance(unroll, str):
        return unroll
    x, y = node.inputs[0], node.outputs[0]
    row_max, row_sum = f"{y}#softmax_max", f"{y}#softmax_sum"
    made = {row_max: rows, row_sum: rows}
    row_st = strides(rows)
    row_of = map_fn("row", [(d, 0 if a in axes else row_st[a]) for a, d in enumerate(xs)])
    kernels: list[Kernel] = []
    for writes, reads, body in (
            (row_max, [("X", x)], [f"float m = {NEG_INF};", loop(count, max_step, unroll), "return m;"]),
            (row_sum, [("X", x), ("M", row_max)],
             ["float m = M_at(l);", "float s = 0.0;", loop(count, sum_step, unroll), "return s;"])):
        code = "\n".join([base, off, "float value_at(int l) {", "    int b = base(l);",
                          *(f"    {line}" for line in body), "}"])
        k = index_kernel("softmax_any", node, graph, lim, rows, reads, code, flops=math.prod(xs), passes=made)
        if isinstance(k, str):
            return k
        k.writes = writes
        kernels.append(k)
    code = "\n".join([row_of, "float value_at(int l) {", "    int r = row(l);",
                      "    float m = M_at(r);", "    float s = S_at(r);", "    float x = X_at(l);",
                      f"    return {result};", "}"])
    k = index_kernel("softmax_any", node, graph, lim, xs, [("X", x), ("M", row_max), ("S", row_sum)], code,
                     flops=math.prod(xs) * 2, passes=made)
    if isinstance(k, str):
        return k
    return [*kernels, k]


def arg(node: Node, graph: Graph, lim: Limits) -> Kernel | str:
    """ArgMax / ArgMin: the index of the first (last with select_last_index) extreme; a NaN
    counts as the extreme, as numpy's argmax does."""
    xs, ys = _io(node, graph)
    rec = _rec(node, graph, ops.ArgRecord)
    if _dtype(graph, node.outputs[0]) != np.int64:
        return "output is not int64"
    count = xs[rec.axis] if xs else 1
    if count > MAX_EXACT_INDEX:
        return f"axis of {count} elements: indices past {MAX_EXACT_INDEX} are not exact in fp16 textures"
    unroll = _check_loops(1, count, ys, lim)
    if isinstance(unroll, str):
        return unroll
    base, off, _ = _reduce_maps(xs, [rec.axis], False)
    better = ">" if rec.op == "ArgMax" else "<"
    if rec.select_last_index:  # ties and NaNs: the last one
        cond = f"is_nan(v) || (!is_nan(best) && v {better}= best)"
    else:
        cond = f"!is_nan(best) && (is_nan(v) || v {better} best)"
    step = f"float v = X_at(b + off(j)); if ({cond}) {{ best = v; at = j; }}"
    code = "\n".join([base, off, "float value_at(int l) {", "    int b = base(l);",
                      "    float best = X_at(b);", "    int at = 0;", "    " + loop(count, step, unroll),
                      "    return float(at);", "}"])
    return index_kernel("argreduce", node, graph, lim, ys, [("X", node.inputs[0])], code)


def _broadcast_maps(graph: Graph, names: list[str], ys: tuple[int, ...]) -> list[str] | str:
    """``srcI(l)`` functions mapping an output index to each input's broadcast element, or a reason."""
    maps = []
    for i, name in enumerate(names):
        s = _shape(graph, name)
        if s is None:
            return "shape not static"
        digits = _broadcast_digits(s, ys)
        if isinstance(digits, str):
            return digits
        maps.append(map_fn(f"src{i}", digits))
    return maps


_COMPARE = {"Equal": "==", "Greater": ">", "Less": "<", "GreaterOrEqual": ">=", "LessOrEqual": "<="}


def compare(node: Node, graph: Graph, lim: Limits) -> Kernel | str:
    """Comparisons of float tensors (broadcasting); the bool result is held as 0.0 / 1.0."""
    ys = _shape(graph, node.outputs[0])
    if ys is None or len(node.inputs) != 2:
        return "shape not static"
    maps = _broadcast_maps(graph, list(node.inputs), ys)
    if isinstance(maps, str):
        return maps
    code = "\n".join([*maps, f"float value_at(int l) {{ return X0_at(src0(l)) {_COMPARE[node.op_type]} "
                              "X1_at(src1(l)) ? 1.0 : 0.0; }"])
    return index_kernel("compare", node, graph, lim, ys, [("X0", node.inputs[0]), ("X1", node.inputs[1])], code)


def where(node: Node, graph: Graph, lim: Limits) -> Kernel | str:
    ys = _shape(graph, node.outputs[0])
    if ys is None or len(node.inputs) != 3:
        return "shape not static"
    maps = _broadcast_maps(graph, list(node.inputs), ys)
    if isinstance(maps, str):
        return maps
    code = "\n".join([*maps, "float value_at(int l) { return X0_at(src0(l)) != 0.0 ? X1_at(src1(l)) : "
                              "X2_at(src2(l)); }"])
    reads = [("X0", node.inputs[0]), ("X1", node.inputs[1]), ("X2", node.inputs[2])]
    return index_kernel("where", node, graph, lim, ys, reads, code, flags=("X0",))


# ---- normalisations ------------------------------------------------------------------------------

def _param(graph: Graph, node: Node, i: int, prefix: str, count: int, index: str) -> tuple[str, str] | str | None:
    """(prefix, tensor) and the GLSL reading parameter input ``i`` at ``index`` (one value per
    normalised position; a single value broadcasts); None when the input is absent."""
    if i >= len(node.inputs) or not node.inputs[i]:
        return None
    s = _shape(graph, node.inputs[i])
    if s is None:
        return "shape not static"
    size = math.prod(s)
    if size not in (count, 1):
        return f"input {i} has {size} values for {count} positions"
    return prefix, f"{prefix}_at({index if size > 1 else '0'})"


def normalization(node: Node, graph: Graph, lim: Limits) -> Kernel | list[Kernel] | str:
    xs, ys = _io(node, graph)
    rec = _rec(node, graph, ops.NormRecord)
    if len(xs) < 2:
        return "input of rank < 2"
    eps = ew.glsl_float(float(np.float32(rec.epsilon)), True)
    st = strides(xs)
    reads = [("X", node.inputs[0])]
    if rec.op == "BatchNormalization":
        if rec.training:
            return "training_mode (statistics of the batch)"
        channel = f"(l / {st[1]}) - (l / {st[1] * xs[1]}) * {xs[1]}"
        params = []
        for i, prefix in ((1, "S"), (2, "B"), (3, "M"), (4, "V")):
            p = _param(graph, node, i, prefix, xs[1], channel)
            if not isinstance(p, tuple):
                return p or f"input {i} is missing"
            reads.append((prefix, node.inputs[i]))
            params.append(p[1])
        s, b, mean, var = params
        code = (f"float value_at(int l) {{ float x = X_at(l); "
                f"return (x - {mean}) / sqrt({var} + {eps}) * {s} + {b}; }}")
        return index_kernel("batchnorm", node, graph, lim, ys, reads, code)
    axes = list(range(rec.axis, len(xs))) if rec.op == "LayerNormalization" else list(range(2, len(xs)))
    base, off, count = _reduce_maps(xs, axes, True)
    unroll = _check_loops(2, count, ys, lim)
    if isinstance(unroll, str):
        return unroll
    if rec.op == "LayerNormalization":
        where = f"l - (l / {count}) * {count}"  # position inside the normalised axes
        size = count
    else:
        where = f"(l / {st[1]}) - (l / {st[1] * xs[1]}) * {xs[1]}"  # the channel
        size = xs[1]
    affine = []
    for i, prefix, op in ((1, "S", "*"), (2, "B", "+")):
        p = _param(graph, node, i, prefix, size, where)
        if isinstance(p, str):
            return p
        if p is not None:
            reads.append((prefix, node.inputs[i]))
            affine.append(f"y = y {op} {p[1]};")
    read = "float v = X_at(b + off(j));"
    stats = ["    int b = base(l);", "    float mean = 0.0;", "    " + loop(count, f"{read} mean += v;", unroll),
             f"    mean /= float({count});", "    float var = 0.0;",
             "    " + loop(count, f"{read} var += (v - mean) * (v - mean);", unroll),
             f"    float inv_std = 1.0 / sqrt(var / float({count}) + {eps});"]
    code = "\n".join([base, off, "float value_at(int l) {", *stats, "    float y = (X_at(l) - mean) * inv_std;",
                      *(f"    {a}" for a in affine), "    return y;", "}"])
    name = "layernorm" if rec.op == "LayerNormalization" else "instancenorm"
    y = index_kernel(name, node, graph, lim, ys, reads, code, flops=math.prod(xs) * 4 * count)
    if len([o for o in node.outputs if o]) == 1 or isinstance(y, str):
        return y
    if rec.op != "LayerNormalization":
        return f"{rec.op} with more than one output"
    # LayerNormalization's optional Mean and InvStdDev outputs: one kernel each, indexed by the
    # kept axes (the normalised axes are 1 in their shapes)
    kernels: list[Kernel] = [y]
    stat_base, _, _ = _reduce_maps(xs, axes, False)
    for i, result in ((1, "mean"), (2, "inv_std")):
        if i >= len(node.outputs) or not node.outputs[i]:
            continue
        shape = _shape(graph, node.outputs[i])
        if shape is None or _dtype(graph, node.outputs[i]) != np.float32:
            return f"output {i} is not a static float32 tensor"
        code = "\n".join([stat_base, off, "float value_at(int l) {", *stats, f"    return {result};", "}"])
        k = index_kernel(name, node, graph, lim, shape, [("X", node.inputs[0])], code)
        if isinstance(k, str):
            return k
        kernels.append(k)
    return kernels


# ---- n-ary elementwise and MatMul ----------------------------------------------------------------

_NARY = {  # op: (combine acc with v, final)
    "Sum": ("acc += v;", "acc"),
    "Mean": ("acc += v;", "acc / float(K)"),
    "Max": ("if (is_nan(v) || v > acc) acc = v;", "acc"),
    "Min": ("if (is_nan(v) || v < acc) acc = v;", "acc"),
}


def nary(node: Node, graph: Graph, lim: Limits) -> Kernel | str:
    """Sum / Mean / Max / Min over any number of broadcasting inputs."""
    ys = _shape(graph, node.outputs[0])
    if ys is None:
        return "shape not static"
    names = [n for n in node.inputs if n]
    if not names:
        return "no inputs"
    step, final = _NARY[node.op_type]
    lines = _broadcast_maps(graph, names, ys)
    if isinstance(lines, str):
        return lines
    reads = [(f"X{i}", name) for i, name in enumerate(names)]
    body = ["float acc = X0_at(src0(l));"] + [f"{{ float v = X{i}_at(src{i}(l)); {step} }}"
                                                for i in range(1, len(names))]
    code = "\n".join([*lines, f"const int K = {len(names)};", "float value_at(int l) {",
                      *(f"    {b}" for b in body), f"    return {final};", "}"])
    return index_kernel("nary", node, graph, lim, ys, reads, code, flops=math.prod(ys) * len(names))


def matmul(node: Node, graph: Graph, lim: Limits) -> Kernel | str:
    """MatMul of any ranks (batch axes broadcast; 1-D operands promoted as numpy does), either
    operand a runtime tensor or a constant."""
    a_name, b_name = node.inputs[0], node.inputs[1]
    ys, sa, sb = _shape(graph, node.outputs[0]), _shape(graph, a_name), _shape(graph, b_name)
    if ys is None or sa is None or sb is None:
        return "shape not static"
    rec = _rec(node, graph, ops.MatMulRecord)
    a2 = (1,) + sa if len(sa) == 1 else sa
    b2 = sb + (1,) if len(sb) == 1 else sb
    m, k = a2[-2:]
    k2, n = b2[-2:]
    if k != k2:
        return f"inner dimensions differ ({k} vs {k2})"
    rank = max(len(a2), len(b2)) - 2
    batch = []
    for da, db in zip((1,) * (rank - len(a2) + 2) + a2[:-2], (1,) * (rank - len(b2) + 2) + b2[:-2]):
        if da != db and 1 not in (da, db):
            return f"batch axes of {sa} and {sb} do not broadcast"
        batch.append(max(da, db))
    if math.prod(batch) * m * n != math.prod(ys):
        return f"the graph's output shape {ys} does not match the product's"
    if k == 0:
        return "empty inner dimension"
    unroll = _check_loops(1, k, ys, lim)
    if isinstance(unroll, str):
        return unroll
    out_batch = tuple(batch)

    def operand(shape: tuple[int, ...], mk: tuple[int, int]) -> list[Digit]:
        st = strides(shape)
        aligned = (1,) * (rank - len(shape) + 2) + shape[:-2]
        bst = (0,) * (rank - len(shape) + 2) + tuple(st[:-2])
        return [(d, 0 if a == 1 else s) for d, a, s in zip(out_batch, aligned, bst)] + [(m, mk[0]), (n, mk[1])]

    code = "\n".join([map_fn("abase", operand(a2, (k, 0))), map_fn("bbase", operand(b2, (0, 1))),
                      "float value_at(int l) {", "    int a = abase(l);", "    int b = bbase(l);",
                      "    float acc = 0.0;", "    " + loop(k, f"acc += A_at(a + j) * B_at(b + j * {n});", unroll),
                      "    return acc;", "}"])
    return index_kernel("matmul_any", node, graph, lim, ys, [("A", a_name), ("B", b_name)], code,
                        flops=2 * math.prod(ys) * k, act=rec.act)


# op -> (kernel name, generator); kernels.build tries a specialised kernel of kernels.py first.
GENERATORS: dict[str, tuple[str, Callable[[Node, Graph, Limits], Kernel | list[Kernel] | str]]] = {
    "Transpose": ("transpose", transpose), "Slice": ("slice", slice_), "Split": ("split", split),
    "Concat": ("concat_any", concat), "Gather": ("gather", gather), "Expand": ("expand", expand),
    "Tile": ("tile", tile), "DepthToSpace": ("depthspace", depth_space), "SpaceToDepth": ("depthspace", depth_space),
    **{op: ("relayout", reshape) for op in ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity")},
    "Cast": ("relayout", cast),
    **{op: ("reduce", reduce) for op in REDUCE_OPS},
    "Softmax": ("softmax_any", softmax), "LogSoftmax": ("softmax_any", softmax),
    "BatchNormalization": ("batchnorm", normalization), "InstanceNormalization": ("instancenorm", normalization),
    "LayerNormalization": ("layernorm", normalization),
    **{op: ("nary", nary) for op in _NARY},
    "MatMul": ("matmul_any", matmul),
    "ArgMax": ("argreduce", arg), "ArgMin": ("argreduce", arg),
    **{op: ("compare", compare) for op in _COMPARE},
    "Where": ("where", where),
}
