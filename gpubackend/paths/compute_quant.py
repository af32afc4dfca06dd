"""Quantized (QDQ) kernels of the ``gles31`` and ``vulkan`` compute paths, registered into
:data:`compute_kernels.REGISTRY`.

- ``conv_q8``, ``conv1x1_q8``, ``depthwise_q8``, ``convtranspose_q8``, ``gemm_q8``, ``matmul_q8``:
  the float kernels' candidates for a node whose weight is a folded DequantizeLinear of 8-bit
  integers (``graph.dequantized``), with the weights kept as signed 8-bit integers packed four to
  a 32-bit word (a quarter of the float weights' bytes) and the per-output-channel scale applied
  to the fp32 accumulator (``QW`` in ``shaders/compute/weights.glsl``). They are tried before the
  float candidates; a weight that is not exactly ``q * scale[output channel]`` with ``q`` in
  [-128, 127] (e.g. uint8 weights with a zero point other than 128) declines to the float kernel.
- ``quantize`` / ``dequantize``: QuantizeLinear and DequantizeLinear on activations
  (``shaders/compute/quantize.comp``). Integer activations travel on the device as floats holding
  the integer values (exact); segment edges convert to and from the graph's integer type.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np

from .. import ops
from ..graph import Graph, Node
from . import compute_kernels as ck

Decline = ck.Decline

# op -> candidates tried before the float ones: (kernel name, float kernel name it replaces)
_WEIGHT_KERNELS = {
    "Conv": [("conv1x1_q8", "conv1x1"), ("depthwise_q8", "depthwise"), ("conv_q8", "conv")],
    "ConvTranspose": [("convtranspose_q8", "convtranspose")],
    "Gemm": [("gemm_q8", "gemm")],
    "MatMul": [("matmul_q8", "matmul")],
}
INTEGER_OUTPUT_OPS = frozenset({"QuantizeLinear"})
_REQUANT_SHADERS = frozenset({"compute/conv.comp", "compute/gemm.comp", "compute/depthwise.comp"})


def pack_int8_words(q: np.ndarray) -> np.ndarray:
    """Integers in [-128, 127] of shape (n, 4) (one float weight vector each) as n little-endian
    words (lane k in byte k), padded to a multiple of 4 words and viewed as float32 (n4, 4): the
    shape every constant binding has; the bytes are what the shader reads as ``uint``."""
    words = np.ascontiguousarray(q.astype(np.int8)).view(np.uint32).reshape(-1)
    words = np.concatenate([words, np.zeros((-words.size) % 4, np.uint32)])
    return words.view(np.float32).reshape(-1, 4)


def unpack_int8_words(data: np.ndarray, n: int) -> np.ndarray:
    """Inverse of :func:`pack_int8_words`: the first ``n`` weight vectors as int8 (n, 4)."""
    return np.ascontiguousarray(data).view(np.uint32).reshape(-1)[:n].view(np.int8).reshape(n, 4)


def _quantize_weights(k: ck.Kernel, scale: np.ndarray, name: str) -> ck.Kernel:
    """The int8-weight version of a float record whose binding 1 holds the weights as (rows, 4)
    vectors of 4 output channels grouped per output block, and binding 2 the bias per block."""
    w, b = k.bindings[1], k.bindings[2]
    if w.role != "const" or b.role != "const" or w.data is None or b.data is None:
        raise Decline("runtime weights")
    co4p = b.data.shape[0]
    rows = w.data.shape[0]
    if rows % co4p:
        raise Decline("weight layout not grouped per output block")
    lane_scale = np.zeros(co4p * 4, np.float32)
    lane_scale[:scale.size] = scale
    lane_scale = lane_scale.reshape(co4p, 4)
    per_row = np.repeat(lane_scale, rows // co4p, axis=0)
    divisor = np.where(per_row == 0, np.float32(1), per_row)
    q = np.rint(w.data / divisor)
    if np.any(q < -128) or np.any(q > 127) or not np.array_equal(q.astype(np.float32) * per_row, w.data):
        raise Decline("the weights are not int8 multiples of one scale per output channel")
    # A channel whose weights reach 64 but not -64 (reduce_range weights are in [-64, 64]) is
    # stored negated with its scale negated: the same float32 products and sums, sign for sign,
    # and every weight fits 7 bits (QW 3: fuse_requantize).
    lanes = q.reshape(co4p, rows // co4p, 4)
    flip = (lanes.max(axis=1) > 63) & (lanes.min(axis=1) > -64)
    if np.any(flip):
        sign = np.where(flip, np.float32(-1), np.float32(1))
        q = (lanes * sign[:, None, :]).reshape(q.shape)
        lane_scale = lane_scale * sign
    bias_scale = np.stack([b.data, lane_scale], axis=1).reshape(-1, 4)
    bindings = (k.bindings[0], ck.Binding("const", w.name, pack_int8_words(q), True),
                ck.Binding("const", b.name, bias_scale, True)) + k.bindings[3:]
    return replace(k, kernel=name, defines=tuple(sorted(k.defines + (("QW", 1),))), bindings=bindings)


def _weight_candidate(name: str, float_gen: ck.Generator) -> ck.Generator:
    def gen(node: Node, graph: Graph, precision: str) -> list[ck.Record]:
        scale = ops.quant.weight_scale(node, graph)
        if isinstance(scale, str):
            raise Decline(scale)
        records = float_gen(node, graph, precision)
        if len(records) != 1 or not isinstance(records[0], ck.Kernel) or records[0].shader == "compute/matmul.comp":
            raise Decline("no single weight kernel")
        return [_quantize_weights(records[0], scale, name)]

    return gen


# ---- the requantisation fused into the producing kernel ----------------------------------------
def fuse_requantize(records: list[ck.Record], graph: Graph, keep: set[str]) -> list[ck.Record]:
    """One pass per quantized layer instead of three: the integer form of a layer
    (``ops.quant.requantize_in_integers``: an int8-weight kernel with scale 1, then ``Mul`` by the
    multiplier per output channel, then ``QuantizeLinear`` at scale 1) becomes the int8-weight
    kernel with ``QW`` 2, which adds the integer bias, multiplies, rounds half to even, adds the
    zero point and saturates in its epilogue and writes the quantized tensor (the same float32
    operations in the same order, so the same integers). The multiplier takes the place of the
    weight scale (all ones) in the bias buffer, so the Mul's constant and the Quantize's
    parameters leave the device. Applies where the sum and the product are read by nothing else
    and are not in ``keep`` (tensors needed outside the segment)."""
    readers: dict[str, list[int]] = {}
    for i, r in enumerate(records):
        srcs = [r.src] if isinstance(r, ck.Alias) else [b.name for b in r.bindings if b.role == "in"]
        for name in srcs:
            readers.setdefault(name, []).append(i)
    nodes = {n.name: n for n in graph.nodes}

    def only_reader(name: str) -> ck.Kernel | None:
        got = readers.get(name, [])
        if name in keep or len(got) != 1 or not isinstance(records[got[0]], ck.Kernel):
            return None
        return records[got[0]]

    out: list[ck.Record | None] = list(records)
    for i, k in enumerate(records):
        if (not isinstance(k, ck.Kernel) or k.shader not in _REQUANT_SHADERS or dict(k.defines).get("QW") != 1
                or dict(k.defines).get("ACT", 0)):
            continue
        outs = [b for b in k.bindings if b.role == "out"]
        mul = only_reader(outs[0].name) if len(outs) == 1 else None
        if mul is None or mul.kernel != "binary" or mul.node != k.node + ops.quant.REQUANTIZE_SUFFIX:
            continue
        mul_node = nodes.get(mul.node)
        mult = graph.constants.get(mul_node.inputs[1]) if mul_node is not None else None
        quant = only_reader(mul.bindings[-1].name)
        if mult is None or quant is None or quant.kernel != "quantize" or dict(quant.defines).get("PER_AXIS"):
            continue
        bias_scale = k.bindings[2].data
        q = dict(quant.params)
        flat = np.asarray(mult, np.float32).reshape(-1)
        scales = bias_scale[1::2].reshape(-1)
        # weight scale 1 on the layer's channels (-1 where _quantize_weights negated one, 0 on
        # padding lanes), Quantize at scale 1
        if flat.size > scales.size or np.any(np.abs(scales[:flat.size]) != 1) or np.any(scales[flat.size:]) \
                or q["scale"] != 1:
            continue
        lanes = np.zeros(scales.size, np.float32)
        lanes[:flat.size] = flat
        # a negated channel sums -(sum + bias): its bias and multiplier negated give the same product
        lanes = (lanes * scales).reshape(-1, 4)
        bias = bias_scale[0::2] * scales.reshape(-1, 4)
        head = np.array([[q["zp"], q["lo"], q["hi"], 0]], np.float32)
        bindings = list(k.bindings)
        spare = bias_in_spare_bits(k.bindings[1].data, bias)
        if spare is None:
            qw = 2
            requant = np.concatenate([head, np.stack([bias, lanes], axis=1).reshape(-1, 4)])
        else:
            qw = 3
            bindings[1] = replace(bindings[1], data=spare[0])
            requant = np.concatenate([head + spare[1][:1], spare[1][1:], lanes])
        bindings[2] = ck.Binding("const", f"{k.node}/requantize", requant, True)
        bindings[bindings.index(outs[0])] = ck.Binding("out", quant.bindings[-1].name)
        out[i] = replace(k, defines=tuple(sorted({**dict(k.defines), "QW": qw}.items())), bindings=tuple(bindings))
        out[readers[outs[0].name][0]] = None
        out[readers[mul.bindings[-1].name][0]] = None
    return [r for r in out if r is not None]


def bias_in_spare_bits(packed: np.ndarray, bias: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """The int8 weight words ``packed`` (:func:`pack_int8_words`) with the integer ``bias`` of each
    output block (``bias[i]``: 4 lanes) in their spare bits, and the two head rows that tell the
    shader where (``QW`` 3 in ``shaders/compute/weights.glsl``): bit j of block i's bias in bit 7 of
    its lane's byte of word ``A + j * blocks + i``, the first run of words whose weights all fit 7
    bits (a channel quantized over [-64, 64] that reaches both ends needs 8 in a few). None where
    no run is long enough for the bias's two's complement bits."""
    words = np.ascontiguousarray(packed).view(np.uint32).reshape(-1)
    ints = bias.astype(np.int64)
    if not np.array_equal(ints, bias):
        return None
    blocks = ints.shape[0]
    bits = max(1, int(np.max(np.where(ints < 0, ~ints, ints))).bit_length() + 1)
    need = bits * blocks
    q = words.view(np.int8).reshape(-1, 4)
    unfit = np.concatenate([[0], np.cumsum(~np.all((q >= -64) & (q <= 63), axis=1))])
    runs = np.flatnonzero(unfit[need:] == unfit[:-need]) if need <= words.size else []
    if bits > 32 or not len(runs) or words.size >= 2 ** 24:
        return None
    at = int(runs[0])
    lanes = (ints & 0xFFFFFFFF).astype(np.uint32)  # (blocks, 4) two's complement
    j = np.arange(bits, dtype=np.uint32)
    spare = ((lanes[None, :, :] >> j[:, None, None]) & 1) << (np.arange(4, dtype=np.uint32) * 8 + 7)
    out = words.copy()
    out[at:at + need] = (out[at:at + need] & np.uint32(0x7F7F7F7F)) | np.bitwise_or.reduce(spare, axis=2).reshape(-1)
    head = np.array([[0, 0, 0, bits], [at, blocks, 0, 0]], np.float32)
    return out.view(np.float32).reshape(-1, 4), head


def fuse_quantize_dequantize(records: list[ck.Record], keep: set[str]) -> list[ck.Record]:
    """A per-tensor QuantizeLinear pass whose integers are read only by a per-tensor
    DequantizeLinear pass (a float op's result quantized and dequantized again for the next float
    op) becomes one pass (``THEN_DEQUANT`` in ``quantize.comp``): the same float32 operations on the
    same values (8-bit integers are exact in fp32 and fp16 storage), one dispatch and one
    activation write and read fewer. Not where the integers are in ``keep``."""
    readers: dict[str, list[int]] = {}
    for i, r in enumerate(records):
        srcs = [r.src] if isinstance(r, ck.Alias) else [b.name for b in r.bindings if b.role == "in"]
        for name in srcs:
            readers.setdefault(name, []).append(i)
    out: list[ck.Record | None] = list(records)
    for i, k in enumerate(records):
        if not isinstance(k, ck.Kernel) or k.kernel != "quantize" or dict(k.defines).get("PER_AXIS"):
            continue
        q_out = k.bindings[-1].name
        got = readers.get(q_out, [])
        dq = records[got[0]] if len(got) == 1 and q_out not in keep else None
        if not isinstance(dq, ck.Kernel) or dq.kernel != "dequantize" or dict(dq.defines).get("PER_AXIS"):
            continue
        dq_params = dict(dq.params)
        params = tuple((n, dq_params["scale"] if n == "dq_scale" else dq_params["zp"] if n == "dq_zp" else v)
                       for n, v in k.params)
        out[i] = replace(k, defines=tuple(sorted({**dict(k.defines), "THEN_DEQUANT": 1}.items())),
                         params=params, bindings=k.bindings[:-1] + (ck.Binding("out", dq.bindings[-1].name),))
        out[got[0]] = None
    return [r for r in out if r is not None]


# ---- QuantizeLinear / DequantizeLinear ---------------------------------------------------------
def _qdq(node: Node, graph: Graph, precision: str) -> list[ck.Record]:
    rec = ops.require(node, graph, ops.QuantRecord)
    x, y = node.inputs[0], node.outputs[0]
    if x in graph.constants:
        raise Decline("a constant (folded on the host)")
    if precision == "fp16" and rec.int_type.itemsize > 1:
        raise Decline(f"{rec.int_type} values are not exact in fp16 storage")
    xs = ck._shape(graph, x)
    if len(xs) > 4 or not xs or 0 in xs:
        raise Decline(f"shape {xs}: ranks 1 to 4, not empty")
    _, pa = ck.view4(xs)
    if rec.axis is not None and rec.axis + 4 - len(xs) != pa:
        raise Decline(f"per-axis quantization along axis {rec.axis} (only the packed axis is supported)")
    if rec.quantize:
        dt = graph.dtypes.get(x, np.dtype(np.float32))
        if np.dtype(dt) != np.float32:
            raise Decline(f"{x!r} is {np.dtype(dt)}")
    if not rec.quantize and rec.axis is None and rec.scale[0] == 1 and rec.zero_point[0] == 0:
        # the integers as floats: what the device already holds (ops.quant._zero_point_in_bias)
        return [ck.Alias(x, y, "dequantize", node.name)]
    c4s = ck.mem_dims(xs)[3]
    total = ck.vec4_count(xs)
    groups, local = ck._grid_flat(total)
    extra = {} if rec.quantize else {"DEQUANT": 1}
    params = (("total", total), ("c4s", c4s), ("c", ck.mem_dims(xs)[4]), ("lo", float(rec.lo)), ("hi", float(rec.hi)),
              ("scale", float(rec.scale[0])), ("zp", float(rec.zero_point[0])), ("dq_scale", 1.0), ("dq_zp", 0.0))
    bindings: tuple[ck.Binding, ...] = (ck.Binding("in", x), ck.Binding("out", y))
    if rec.axis is not None:  # per-axis scales in a buffer; per tensor they are two parameters
        n = len(rec.scale)
        scale = np.ones(c4s * 4, np.float32)
        zp = np.zeros(c4s * 4, np.float32)
        scale[:n] = rec.scale
        zp[:n] = rec.zero_point
        qp = np.stack([scale.reshape(-1, 4), zp.reshape(-1, 4)], axis=1).reshape(-1, 4)
        bindings = (bindings[0], ck.Binding("const", f"{node.name}/qp", qp, True), bindings[1])
        extra["PER_AXIS"] = 1
    return [ck.Kernel("quantize" if rec.quantize else "dequantize", "compute/quantize.comp",
                      ck._variant(precision, **extra), params, bindings, groups, local, node.name)]


def register(registry: dict[str, list[tuple[str, ck.Generator]]]) -> None:
    """Put the quantized candidates into the compute registry (before the float ones)."""
    for op, names in _WEIGHT_KERNELS.items():
        # every float generator of that name, in the registry's order (ConvTranspose has two: the
        # per-tap GEMM, then the generic gather, 4x slower on selfie's layer when it ran alone)
        quantized = [(qname, _weight_candidate(qname, gen)) for qname, fname in names
                     for cname, gen in registry[op] if cname == fname]
        registry[op] = quantized + [c for c in registry[op] if c[0] not in {q for q, _ in quantized}]
    registry["QuantizeLinear"] = [("quantize", _qdq)]
    registry["DequantizeLinear"] = [("dequantize", _qdq)]


def variants(precisions: tuple[str, ...], act_codes: list[int]) -> list[tuple[str, tuple[tuple[str, int], ...]]]:
    """The shader variants the quantized generators emit (precompiled SPIR-V)."""
    out = []
    for prec in precisions:
        for qw, acts in ((1, act_codes), (2, [0]), (3, [0])):  # QW 2, 3: fuse_requantize (no activation)
            for act in acts:
                for blocking in ck.default_blockings("conv"):
                    out.append(("compute/conv.comp", ck._variant(prec, ACT=act, QW=qw, **dict(blocking))))
                for blocking in ck.default_blockings("gemm"):
                    out.append(("compute/gemm.comp", ck._variant(prec, ACT=act, QW=qw, **dict(blocking))))
                out.append(("compute/depthwise.comp", ck._variant(prec, ACT=act, BX=ck.DW_BX, QW=qw)))
                for stride in (1, 2):
                    out.append(("compute/depthwise.comp", ck._variant(prec, ACT=act, BX=ck.DW3_BX, K3S=stride,
                                                                      QW=qw)))
        for act in act_codes:
            out.append(("compute/convtranspose.comp", ck._variant(prec, ACT=act, CB=ck.CONVT_CB, QW=1)))
            out += [("compute/convtranspose_tap.comp", ck._variant(prec, ACT=act, PX=ck.CONVT_PX, CB=cb, QW=1))
                    for cb in (1, ck.CONVT_CB)]
        for per_axis in ({}, {"PER_AXIS": 1}):
            out.append(("compute/quantize.comp", ck._variant(prec, **per_axis)))
            out.append(("compute/quantize.comp", ck._variant(prec, DEQUANT=1, **per_axis)))
        out.append(("compute/quantize.comp", ck._variant(prec, THEN_DEQUANT=1)))
    return out


def weight_bytes(records: list[ck.Record]) -> int:
    """Bytes of constant buffers (weights, biases, scales) the records put on the device."""
    return sum(b.data.nbytes for r in records if isinstance(r, ck.Kernel) for b in r.bindings
               if b.role == "const" and b.data is not None)


def canary(run: Callable[[list[Node], Graph, dict[str, np.ndarray], str], dict[str, np.ndarray]],
           precision: str = "fp32", kernel_of: Callable[[Node, Graph], str | None] | None = None) -> float:
    """The int8 canary of a GPU path: Quantize -> Dequantize -> Conv with int8 weights (3x3,
    per-channel scales, extreme weights) -> Quantize, run by ``run(nodes, graph, feeds,
    precision)``, against ``fallback``. Returns the conv's max relative error (the probe's
    tolerance applies); raises if the quantized output is more than one step away or the conv did
    not run with int8 weights (``kernel_of(node, graph)``: the path's kernel name; default the
    compute paths')."""
    from gpubackend import fallback

    from ..model import fold_constants

    rng = np.random.default_rng(17)
    x = rng.standard_normal((1, 5, 7, 9)).astype(np.float32)
    wq = rng.integers(-128, 128, (6, 5, 3, 3)).astype(np.int8)
    wq[0, 0, 0, :3] = (-128, 127, -1)
    consts = {"wq": wq, "ws": (rng.random(6).astype(np.float32) + 0.5) * 1e-3,
              "b": rng.standard_normal(6).astype(np.float32), "xs": np.float32(0.02), "xz": np.int8(3),
              "ys": np.float32(0.05), "yz": np.uint8(128)}
    nodes = [
        Node("q_x", "QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
        Node("dq_x", "DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
        Node("dq_w", "DequantizeLinear", ["wq", "ws"], ["w"], {"axis": 0}),
        Node("conv", "Conv", ["xd", "w", "b"], ["c"], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
        Node("q_y", "QuantizeLinear", ["c", "ys", "yz"], ["y"]),
    ]
    shapes = {"x": x.shape, "xq": x.shape, "xd": x.shape, "c": (1, 6, 7, 9), "y": (1, 6, 7, 9)}
    dtypes = {"xq": np.dtype(np.int8), "y": np.dtype(np.uint8)}
    graph = Graph(list(nodes), ["x"], ["c", "y"], dict(consts), shapes=shapes, dtypes=dtypes, opset=19)
    fold_constants(graph)  # folds dq_w, recording its scale
    if kernel_of is None:
        kernels = [got if isinstance(got, str) else got.kernel for got in (ck.generate(n, graph, precision)
                                                                              for n in graph.nodes)]
    else:
        kernels = [kernel_of(n, graph) for n in graph.nodes]
    if "conv_q8" not in kernels:
        raise AssertionError(f"int8 canary: the conv ran as {kernels}, not conv_q8")
    got = run(graph.nodes, graph, {"x": x}, precision)
    env: dict[str, np.ndarray] = {"x": x, **consts}
    for n in nodes:
        env[n.outputs[0]] = fallback.run_node(n.op_type, [env[i] for i in n.inputs], n.attrs, 19)[0]
    steps = float(np.max(np.abs(got["y"].astype(np.int32) - env["y"].astype(np.int32))))
    if got["y"].dtype != np.uint8 or not steps <= 1:
        raise AssertionError(f"int8 canary ({precision}): {steps} output steps from fallback, "
                             f"dtype {got['y'].dtype}")
    ref = env["c"]
    return float(np.max(np.abs(got["c"] - ref)) / max(1.0, float(np.max(np.abs(ref)))))


register(ck.REGISTRY)

__all__ = ["INTEGER_OUTPUT_OPS", "bias_in_spare_bits", "canary", "fuse_quantize_dequantize", "fuse_requantize",
           "pack_int8_words", "register", "unpack_int8_words", "variants", "weight_bytes"]
