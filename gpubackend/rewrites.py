"""Graph rewrites that take elementwise tails into the producing convolution, run by
``model.optimize`` for every path: fewer passes over large tensors.

- :func:`fold_channel_affine`: a constant per-channel (or scalar) Mul, Add, Sub or inference
  BatchNormalization right after a Conv / ConvTranspose goes into its weights and bias (PP-OCR's
  "learnable affine" blocks: a scalar Mul and Add after every conv; DBNet's ConvTranspose, bias
  Add, BatchNormalization).
- :func:`fold_input_affine`: the same kind of tail when it feeds an unpadded, ungrouped Conv (PP-OCR's
  affine block after the activation, before a 1x1 conv) goes into that conv's weights and bias.
- :func:`fuse_decomposed_hardswish`: ``x * Clip(x + 3, 0, 6) / 6`` (four nodes, as exporters write
  HardSwish below opset 14) becomes one HardSwish node, which ``fuse_activations`` then fuses
  into the conv's epilogue.
- :func:`conv_before_upsample`: a linear or nearest upsampling Resize read only by a 1x1 Conv
  (no activation) swaps places with it: the conv runs on the small image (the selfie model's
  decoder: 4x fewer multiply-adds in three convs).
"""

from __future__ import annotations

import numpy as np

from . import ops
from .graph import Graph, Node
from .model import _single_consumer as _sole_reader
from .model import is_standard as _standard

_CONVS = ("Conv", "ConvTranspose")


def _float_const(graph: Graph, name: str) -> np.ndarray | None:
    v = graph.constants.get(name)
    return v if v is not None and v.dtype == np.float32 else None


def _per_channel(graph: Graph, name: str, channels: int) -> np.ndarray | None:
    """The constant ``name`` as a float64 vector over the ``channels`` of a rank-4 tensor when it
    broadcasts along the channel axis only (scalar, (C,1,1), (1,C,1,1)), else None."""
    v = _float_const(graph, name)
    if v is None or v.ndim > 4:
        return None
    shape = (1,) * (4 - v.ndim) + v.shape
    if shape[0] != 1 or shape[2:] != (1, 1) or shape[1] not in (1, channels):
        return None
    return np.broadcast_to(v.reshape(-1).astype(np.float64), (channels,))


def _affine_of(node: Node, graph: Graph, y: str, channels: int) -> tuple[np.ndarray, np.ndarray] | None:
    """(scale, shift) per channel when ``node`` computes ``y * scale + shift`` from the conv
    output ``y`` with constants that keep its shape, else None."""
    if not _standard(node) or graph.shapes.get(node.outputs[0]) != graph.shapes.get(y):
        return None
    ones, zeros = np.ones(channels), np.zeros(channels)
    if node.op_type in ("Mul", "Add", "Sub") and len(node.inputs) == 2 and y in node.inputs:
        other = node.inputs[1 - node.inputs.index(y)]
        if other == y:
            return None
        v = _per_channel(graph, other, channels)
        if v is None:
            return None
        if node.op_type == "Mul":
            return v, zeros
        if node.op_type == "Add":
            return ones, v
        return (ones, -v) if node.inputs[0] == y else (-ones, v)
    if node.op_type == "BatchNormalization" and node.inputs[0] == y and not any(node.outputs[1:]):
        vecs = [_float_const(graph, i) for i in node.inputs[1:5]]
        if any(v is None or v.shape != (channels,) for v in vecs):
            return None
        scale, beta, mean, var = (v.astype(np.float64) for v in vecs)
        norm = ops.lower(node, graph)
        eps = norm.epsilon if isinstance(norm, ops.NormRecord) else 1e-5
        s = scale / np.sqrt(var + eps)
        return s, beta - mean * s
    return None


def fold_channel_affine(graph: Graph) -> None:
    """Conv / ConvTranspose followed by constant per-channel Mul / Add / Sub / BatchNormalization
    (as many as follow, each the only reader of the one before) becomes one node with adjusted
    weights and bias. The fold is exact up to float32 rounding of the new weights."""
    consumers = graph.consumers()
    removed: set[str] = set()
    for conv in graph.nodes:
        if conv.op_type not in _CONVS or not _standard(conv) or conv.name in removed \
                or len(conv.inputs) < 2 or len(conv.outputs) != 1:
            continue
        w = _float_const(graph, conv.inputs[1])
        bias_name = conv.inputs[2] if len(conv.inputs) > 2 and conv.inputs[2] else ""
        b = _float_const(graph, bias_name) if bias_name else None
        shape = graph.shapes.get(conv.outputs[0])
        if w is None or conv.inputs[1] in graph.dequantized or (bias_name and b is None) \
                or shape is None or len(shape) != 4:
            continue
        rec = ops.lower(conv, graph)
        if not isinstance(rec, ops.ConvRecord) or rec.act is not None:
            continue
        channels = shape[1]
        if rec.transpose and rec.group != 1:
            continue  # output channel c's weights are spread over groups: not a plain axis scale
        scale, shift = np.ones(channels), np.zeros(channels)
        absorbed: list[Node] = []
        y = conv.outputs[0]
        while True:
            nxt = _sole_reader(graph, y, consumers)
            aff = None if nxt is None or nxt.name in removed else _affine_of(nxt, graph, y, channels)
            if aff is None:
                break
            s, t = aff
            scale, shift = scale * s, shift * s + t
            absorbed.append(nxt)
            y = nxt.outputs[0]
        if not absorbed:
            continue
        axis = 1 if conv.op_type == "ConvTranspose" else 0
        sw = scale.reshape([-1 if a == axis else 1 for a in range(w.ndim)])
        new_w = w.astype(np.float64) * sw
        new_b = (np.zeros(channels) if b is None else b.astype(np.float64)) * scale + shift
        w_name, b_name = conv.name + "/affine_folded_W", conv.name + "/affine_folded_B"
        graph.constants[w_name] = new_w.astype(np.float32)
        graph.constants[b_name] = new_b.astype(np.float32)
        conv.inputs = [conv.inputs[0], w_name, b_name]
        graph.shapes.setdefault(y, shape)
        conv.outputs = [y]
        graph.fused.setdefault(conv.name, []).extend(n.name for n in absorbed)
        removed.update(n.name for n in absorbed)
    graph.nodes = [n for n in graph.nodes if n.name not in removed]


def fold_input_affine(graph: Graph) -> None:
    """``Conv(h * scale + shift)`` with per-channel constants (a chain of Mul / Add / Sub, each the
    only reader of the one before, the last read only by the Conv) becomes ``Conv'(h)`` with the
    weights scaled per input channel and ``shift`` pushed through them into the bias, for a Conv
    without padding (a padded border would see zeros, not ``shift``) and with one group."""
    consumers = graph.consumers()
    producers = graph.producers()
    removed: set[str] = set()
    for conv in graph.nodes:
        if conv.op_type != "Conv" or not _standard(conv) or len(conv.inputs) < 2 or len(conv.outputs) != 1:
            continue
        w = _float_const(graph, conv.inputs[1])
        bias_name = conv.inputs[2] if len(conv.inputs) > 2 and conv.inputs[2] else ""
        b = _float_const(graph, bias_name) if bias_name else None
        if w is None or w.ndim != 4 or conv.inputs[1] in graph.dequantized or (bias_name and b is None):
            continue
        rec = ops.lower(conv, graph)
        if not isinstance(rec, ops.ConvRecord) or rec.group != 1 or any(rec.pads_begin) or any(rec.pads_end):
            continue
        channels = w.shape[1]
        scale, shift = np.ones(channels), np.zeros(channels)  # from the chain's input to the conv's input
        absorbed: list[Node] = []
        x = conv.inputs[0]
        while True:
            node = producers.get(x)
            if node is None or node.name in removed or _sole_reader(graph, x, consumers) is None:
                break
            runtime = [i for i in node.inputs if i not in graph.constants]
            aff = _affine_of(node, graph, runtime[0], channels) if len(runtime) == 1 else None
            if aff is None:
                break
            s, t = aff
            scale, shift = s * scale, t * scale + shift
            absorbed.append(node)
            x = runtime[0]
        if not absorbed:
            continue
        w64 = w.astype(np.float64)
        new_b = (np.zeros(w.shape[0]) if b is None else b.astype(np.float64)) + np.einsum("oikl,i->o", w64, shift)
        w_name, b_name = conv.name + "/input_affine_W", conv.name + "/input_affine_B"
        graph.constants[w_name] = (w64 * scale.reshape(1, -1, 1, 1)).astype(np.float32)
        graph.constants[b_name] = new_b.astype(np.float32)
        conv.inputs = [x, w_name, b_name]
        graph.fused.setdefault(conv.name, []).extend(n.name for n in absorbed)
        removed.update(n.name for n in absorbed)
    graph.nodes = [n for n in graph.nodes if n.name not in removed]


def _scalar(graph: Graph, name: str) -> float | None:
    v = _float_const(graph, name)
    return float(v.reshape(-1)[0]) if v is not None and v.size == 1 else None


def _clip_bounds(node: Node, graph: Graph) -> tuple[float, float] | None:
    act = ops.activation(node, graph) if node.op_type == "Clip" and _standard(node) else None
    return None if act is None else (act.min, act.max)


def fuse_decomposed_hardswish(graph: Graph) -> None:
    """``a = x + 3; c = Clip(a, 0, 6); m = x * c; y = m / 6`` (or ``m * (1/6)``, either operand
    order), each intermediate read only by the next, becomes ``y = HardSwish(x)``."""
    consumers = graph.consumers()
    replaced: dict[str, Node] = {}  # name of the last node -> the HardSwish node
    removed: set[str] = set()
    for add in graph.nodes:
        if add.op_type != "Add" or not _standard(add) or len(add.inputs) != 2 or add.name in removed:
            continue
        for k in (0, 1):
            x, three = add.inputs[k], add.inputs[1 - k]
            if _scalar(graph, three) == 3.0 and x not in graph.constants:
                break
        else:
            continue
        clip = _sole_reader(graph, add.outputs[0], consumers)
        if clip is None or clip.inputs[0] != add.outputs[0] or _clip_bounds(clip, graph) != (0.0, 6.0):
            continue
        mul = _sole_reader(graph, clip.outputs[0], consumers)
        if mul is None or mul.op_type != "Mul" or not _standard(mul) \
                or sorted(mul.inputs) != sorted([x, clip.outputs[0]]):
            continue
        div = _sole_reader(graph, mul.outputs[0], consumers)
        if div is None or not _standard(div) or len(div.inputs) != 2:
            continue
        if div.op_type == "Div" and div.inputs[0] == mul.outputs[0] and _scalar(graph, div.inputs[1]) == 6.0:
            pass
        elif div.op_type == "Mul" and mul.outputs[0] in div.inputs \
                and _scalar(graph, div.inputs[1 - div.inputs.index(mul.outputs[0])]) == np.float32(1 / 6):
            pass
        else:
            continue
        shape = graph.shapes.get(x)
        if shape is None or any(graph.shapes.get(n.outputs[0]) != shape for n in (add, clip, mul, div)):
            continue  # a broadcasting operand would change the shape: not HardSwish of x
        replaced[div.name] = Node(div.name, "HardSwish", [x], [div.outputs[0]])
        graph.fused.setdefault(div.name, []).extend(n.name for n in (add, clip, mul))
        removed.update(n.name for n in (add, clip, mul))
    graph.nodes = [replaced.get(n.name, n) for n in graph.nodes if n.name not in removed]


def _upsample_cost(rec: ops.ResizeRecord, channels: int) -> float | None:
    """Reads per output element times the output's elements per channel, for a linear or
    nearest Resize over the spatial axes of a 4-D tensor that enlarges it; None for any other."""
    taps_per_axis = {"linear": 2, "nearest": 1}.get(rec.mode)
    if taps_per_axis is None or rec.coordinate_mode == "tf_crop_and_resize" or len(rec.out_shape) != 4 \
            or rec.scales[:2] != (1.0, 1.0):
        return None
    grown = [a for a in (2, 3) if rec.scales[a] != 1.0]
    if not grown or any(rec.scales[a] < 1.0 for a in grown):
        return None
    return float(taps_per_axis ** len(grown) * channels * rec.out_shape[2] * rec.out_shape[3])


def conv_before_upsample(graph: Graph) -> None:
    """``Conv1x1(Resize(x))`` becomes ``Resize(Conv1x1(x))`` where the Resize enlarges the image
    by linear or nearest interpolation and the Conv (stride 1, no padding, no activation) is its
    only reader, when that takes fewer reads. A 1x1 conv is the same linear map at every pixel and
    the interpolation weights of each output pixel sum to one, so the bias passes through too;
    the sums are only taken in another order. The Resize's constant ``sizes`` gets the conv's
    channel count; a Resize whose sizes are computed at run time stays where it is."""
    consumers = graph.consumers()
    producers = graph.producers()
    replaced: dict[str, list[Node]] = {}  # the conv's name -> the conv on the small image, the Resize
    removed: set[str] = set()
    for conv in graph.nodes:
        if conv.op_type != "Conv" or not _standard(conv) or len(conv.outputs) != 1 or not conv.inputs:
            continue
        resize = producers.get(conv.inputs[0])
        if resize is None or resize.op_type not in ("Resize", "Upsample") or not _standard(resize) \
                or resize.name in removed or _sole_reader(graph, resize.outputs[0], consumers) is not conv:
            continue
        if any(i == resize.outputs[0] for i in conv.inputs[1:]) or any(
                ops.activation(reader, graph) is not None for reader in consumers.get(conv.outputs[0], [])):
            continue  # an activation after the conv would stay in its epilogue only without the swap
        crec, rrec = ops.lower(conv, graph), ops.lower(resize, graph)
        if not isinstance(crec, ops.ConvRecord) or not isinstance(rrec, ops.ResizeRecord):
            continue
        if crec.kernel != (1, 1) or crec.strides != (1, 1) or any(crec.pads_begin) or any(crec.pads_end) \
                or crec.act is not None:
            continue
        cin, cout = crec.in_channels, crec.out_channels
        before, after = _upsample_cost(rrec, cin), _upsample_cost(rrec, cout)
        small = graph.shapes.get(resize.inputs[0])
        if before is None or after is None or small is None or len(small) != 4:
            continue
        out_pixels, in_pixels = rrec.out_shape[2] * rrec.out_shape[3], small[2] * small[3]
        if after + cin * cout * in_pixels >= before + cin * cout * out_pixels:
            continue
        resize_inputs = list(resize.inputs)
        if resize.op_type == "Resize" and graph.opset >= 11 and len(resize_inputs) > 3 and resize_inputs[3]:
            sizes = graph.constants.get(resize_inputs[3])
            if sizes is None:
                continue
            channel = 1 if rrec.axes is None else next((k for k, a in enumerate(rrec.axes) if a == 1), None)
            if channel is not None:
                new_sizes = np.array(sizes, copy=True)
                new_sizes.reshape(-1)[channel] = cout
                resize_inputs[3] = conv.name + "/upsample_sizes"
                graph.constants[resize_inputs[3]] = new_sizes
        y = conv.outputs[0]
        t = conv.name + "/before_upsample"
        graph.shapes[t] = (small[0], cout, small[2], small[3])
        graph.dtypes[t] = graph.dtypes.get(y, np.dtype(np.float32))
        # fp16 would round these values twice (here and in y, which a precision plan decides about);
        # smaller than y by the upsampling factor
        graph.fp32_rewritten[t] = "a conv output enlarged by the Resize after it (rounded once, in the Resize's output)"
        replaced[conv.name] = [
            Node(conv.name, "Conv", [resize.inputs[0], *conv.inputs[1:]], [t], dict(conv.attrs), conv.domain),
            Node(resize.name, resize.op_type, [t, *resize_inputs[1:]], [y], dict(resize.attrs), resize.domain)]
        removed.add(resize.name)
        graph.conv_before_upsample[conv.name] = resize.name
    graph.nodes = [m for n in graph.nodes if n.name not in removed for m in replaced.get(n.name, [n])]
