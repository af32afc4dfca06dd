"""Shape plumbing and data movement: Concat, Reshape, Flatten, Transpose, Squeeze, Unsqueeze, Pad,
Constant, Identity, Shape, Size, Gather, Slice, Cast, ConstantOfShape, Dropout, Expand, Range, Split, Tile."""

from __future__ import annotations

import math

import numpy as np

from ._registry import as_int_list, fail, iattr, ints_attr, need, norm_axis, opt, register, sattr

# TensorProto.DataType -> NumPy dtype for the numeric types NumPy has natively
_ONNX_DTYPES = {
    1: np.float32, 2: np.uint8, 3: np.int8, 4: np.uint16, 5: np.int16, 6: np.int32, 7: np.int64,
    9: np.bool_, 10: np.float16, 11: np.float64, 12: np.uint32, 13: np.uint64,
}

_NATIVE = frozenset(np.dtype(t) for t in _ONNX_DTYPES.values())


def onnx_dtype(op: str, to: int) -> np.dtype:
    if to in _ONNX_DTYPES:
        return np.dtype(_ONNX_DTYPES[to])
    if to != 16:  # float8 / 4-bit / 2-bit types have saturation rules this kernel does not implement
        raise fail(op, f"element type {to} is not supported (numeric NumPy types and bfloat16 only)")
    try:  # bfloat16 / float8 / int4 ... where onnx provides a NumPy type (ml_dtypes)
        from onnx import helper

        dt = np.dtype(helper.tensor_dtype_to_np_dtype(to))
    except Exception as e:  # noqa: BLE001
        raise fail(op, f"unsupported element type {to}") from e
    if dt.kind in "OSU" or (dt.kind == "V" and dt.name != "bfloat16"):
        raise fail(op, f"element type {to} is not supported (numeric NumPy types only)")
    return dt


@register("Identity")
def k_identity(inputs: list, attrs: dict, opset: int) -> list:
    return [need("Identity", inputs, 0)]


@register("Concat")
def k_concat(inputs: list, attrs: dict, opset: int) -> list:
    xs = [np.asarray(v) for v in inputs if v is not None]
    if not xs:
        raise fail("Concat", "needs at least one input")
    axis = iattr(attrs, "axis", 1)
    rank = xs[0].ndim
    if any(v.ndim != rank for v in xs):
        raise fail("Concat", f"inputs have different ranks: {[v.shape for v in xs]}")
    axis = norm_axis("Concat", axis, rank)
    for v in xs:
        if v.shape[:axis] != xs[0].shape[:axis] or v.shape[axis + 1:] != xs[0].shape[axis + 1:]:
            raise fail("Concat", f"input shapes {[v.shape for v in xs]} differ outside axis {axis}")
    dt = xs[0].dtype
    return [np.concatenate([v.astype(dt, copy=False) for v in xs], axis=axis)]


@register("Reshape")
def k_reshape(inputs: list, attrs: dict, opset: int) -> list:
    op = "Reshape"
    x = need(op, inputs, 0)
    if opset < 5:
        shape = ints_attr(attrs, "shape")
        if shape is None:
            raise fail(op, "attribute shape is required")
    else:
        shape = as_int_list(op, need(op, inputs, 1, "shape"), "shape")
    allowzero = iattr(attrs, "allowzero", 0)
    new = []
    for i, s in enumerate(shape):
        if s == 0 and not allowzero:
            if i >= x.ndim:
                raise fail(op, f"shape {shape} copies dim {i} (0) but the input {x.shape} has rank {x.ndim}")
            s = x.shape[i]
        new.append(s)
    if new.count(-1) > 1 or any(s < -1 for s in new):
        raise fail(op, f"invalid shape {shape}")
    if -1 in new:
        known = math.prod([s for s in new if s != -1])
        if known == 0 or x.size % known:
            raise fail(op, f"cannot reshape {x.shape} to {shape}")
        new[new.index(-1)] = x.size // known
    if math.prod(new) != x.size:
        raise fail(op, f"cannot reshape {x.shape} ({x.size} elements) to {shape}")
    return [x.reshape(new)]


@register("Flatten")
def k_flatten(inputs: list, attrs: dict, opset: int) -> list:
    x = need("Flatten", inputs, 0)
    axis = iattr(attrs, "axis", 1)
    if not -x.ndim <= axis <= x.ndim:
        raise fail("Flatten", f"axis {axis} out of range for rank {x.ndim}")
    if axis < 0:
        axis += x.ndim
    outer = math.prod(x.shape[:axis])
    inner = math.prod(x.shape[axis:])
    return [x.reshape(outer, inner)]


@register("Transpose")
def k_transpose(inputs: list, attrs: dict, opset: int) -> list:
    x = need("Transpose", inputs, 0)
    perm = ints_attr(attrs, "perm")
    if perm is None:
        perm = list(range(x.ndim))[::-1]
    if sorted(perm) != list(range(x.ndim)):
        raise fail("Transpose", f"perm {perm} is not a permutation of {x.ndim} axes")
    return [np.transpose(x, perm)]


def _axes(op: str, inputs, attrs, opset: int, since: int) -> list[int] | None:
    if opset < since:
        return ints_attr(attrs, "axes")
    return as_int_list(op, opt(inputs, 1), "axes")


@register("Squeeze")
def k_squeeze(inputs: list, attrs: dict, opset: int) -> list:
    op = "Squeeze"
    x = need(op, inputs, 0)
    axes = _axes(op, inputs, attrs, opset, 13)
    if axes is None:
        return [x.reshape([d for d in x.shape if d != 1])]
    axes = sorted({norm_axis(op, a, x.ndim) for a in axes})
    for a in axes:
        if x.shape[a] != 1:
            raise fail(op, f"cannot squeeze axis {a} of size {x.shape[a]} (shape {x.shape})")
    return [x.reshape([d for i, d in enumerate(x.shape) if i not in axes])]


@register("Unsqueeze")
def k_unsqueeze(inputs: list, attrs: dict, opset: int) -> list:
    op = "Unsqueeze"
    x = need(op, inputs, 0)
    axes = _axes(op, inputs, attrs, opset, 13)
    if axes is None:
        raise fail(op, "axes are required")
    rank = x.ndim + len(axes)
    axes_n = sorted(norm_axis(op, a, rank) for a in axes)
    if len(set(axes_n)) != len(axes_n):
        raise fail(op, f"repeated axes {axes}")
    shape = list(x.shape)
    for a in axes_n:
        shape.insert(a, 1)
    return [x.reshape(shape)]


@register("Pad")
def k_pad(inputs: list, attrs: dict, opset: int) -> list:
    op = "Pad"
    x = need(op, inputs, 0)
    if opset < 11:
        pads = ints_attr(attrs, "pads" if opset >= 2 else "paddings") or ints_attr(attrs, "pads")
        if pads is None:
            raise fail(op, "attribute pads is required")
        value = float(attrs.get("value", 0.0))
        axes = None
    else:
        pads = as_int_list(op, need(op, inputs, 1, "pads"), "pads")
        cv = opt(inputs, 2)
        value = cv.reshape(-1)[0] if cv is not None and cv.size else 0
        axes = as_int_list(op, opt(inputs, 3), "axes")
    mode = sattr(attrs, "mode", "constant")
    if mode not in ("constant", "reflect", "edge", "wrap"):
        raise fail(op, f"unknown mode {mode!r}")
    if axes is None:
        axes = list(range(x.ndim))
    else:
        axes = [norm_axis(op, a, x.ndim) for a in axes]
    if len(pads) != 2 * len(axes):
        raise fail(op, f"pads {pads} must have 2 x {len(axes)} values")
    width = [[0, 0] for _ in range(x.ndim)]
    for i, a in enumerate(axes):
        width[a] = [pads[i], pads[i + len(axes)]]
    # negative pads crop
    crop = tuple(slice(max(0, -b), x.shape[a] - max(0, -e)) for a, (b, e) in enumerate(width))
    if any(b < 0 or e < 0 for b, e in width):
        x = x[crop]
    pos = [(max(0, b), max(0, e)) for b, e in width]
    if not any(b or e for b, e in pos):
        return [x.copy() if x.base is None else np.ascontiguousarray(x)]
    if mode == "constant":
        return [np.pad(x, pos, mode="constant", constant_values=np.asarray(value).astype(x.dtype))]
    if mode == "reflect":
        for a, (b, e) in enumerate(pos):
            if (b or e) and (x.shape[a] < 2 or max(b, e) >= x.shape[a]):
                raise fail(op, f"reflect padding {b},{e} needs more than {x.shape[a]} elements on axis {a}")
        return [np.pad(x, pos, mode="reflect")]
    if any((b or e) and x.shape[a] == 0 for a, (b, e) in enumerate(pos)):
        raise fail(op, f"{mode} padding of an empty axis")
    return [np.pad(x, pos, mode="edge" if mode == "edge" else "wrap")]


@register("Constant")
def k_constant(inputs: list, attrs: dict, opset: int) -> list:
    op = "Constant"
    if "value" in attrs:
        v = attrs["value"]
        if not isinstance(v, np.ndarray):
            try:
                from onnx import numpy_helper

                v = numpy_helper.to_array(v)
            except Exception as e:  # noqa: BLE001
                raise fail(op, f"cannot decode value attribute of type {type(v).__name__}") from e
        return [np.asarray(v)]
    if "value_float" in attrs:
        return [np.array(attrs["value_float"], dtype=np.float32)]
    if "value_floats" in attrs:
        return [np.array(list(attrs["value_floats"]), dtype=np.float32).reshape(-1)]
    if "value_int" in attrs:
        return [np.array(attrs["value_int"], dtype=np.int64)]
    if "value_ints" in attrs:
        return [np.array(list(attrs["value_ints"]), dtype=np.int64).reshape(-1)]
    if "value_string" in attrs:
        s = attrs["value_string"]
        return [np.array(s.decode() if isinstance(s, bytes) else s, dtype=object)]
    if "value_strings" in attrs:
        return [np.array([s.decode() if isinstance(s, bytes) else s for s in attrs["value_strings"]],
                         dtype=object)]
    if "sparse_value" in attrs:
        sv = attrs["sparse_value"]
        try:
            from onnx import numpy_helper

            values = numpy_helper.to_array(sv.values)
            indices = numpy_helper.to_array(sv.indices)
            dense = np.zeros(list(sv.dims), dtype=values.dtype)
            if indices.ndim == 2:
                dense[tuple(indices.T)] = values
            else:
                dense.reshape(-1)[indices] = values
            return [dense]
        except Exception as e:  # noqa: BLE001
            raise fail(op, "cannot decode sparse_value") from e
    raise fail(op, "no value attribute")


@register("Shape")
def k_shape(inputs: list, attrs: dict, opset: int) -> list:
    x = need("Shape", inputs, 0)
    shape = x.shape
    start = iattr(attrs, "start", 0)
    end = attrs.get("end")
    return [np.array(shape[start:None if end is None else int(end)], dtype=np.int64)]


@register("Size")
def k_size(inputs: list, attrs: dict, opset: int) -> list:
    return [np.array(need("Size", inputs, 0).size, dtype=np.int64)]


@register("Gather")
def k_gather(inputs: list, attrs: dict, opset: int) -> list:
    op = "Gather"
    x = need(op, inputs, 0)
    idx = need(op, inputs, 1, "indices")
    if idx.dtype.kind not in "iu":
        raise fail(op, f"indices must be integers, got {idx.dtype}")
    axis = norm_axis(op, iattr(attrs, "axis", 0), x.ndim)
    n = x.shape[axis]
    if idx.size and (idx.min() < -n or idx.max() >= n):
        raise fail(op, f"indices out of range [{-n}, {n - 1}] for axis {axis} of shape {x.shape}")
    return [np.take(x, idx.astype(np.int64, copy=False), axis=axis)]


@register("Slice")
def k_slice(inputs: list, attrs: dict, opset: int) -> list:
    op = "Slice"
    x = need(op, inputs, 0)
    if opset < 10:
        starts = ints_attr(attrs, "starts")
        ends = ints_attr(attrs, "ends")
        axes = ints_attr(attrs, "axes")
        steps = None
    else:
        starts = as_int_list(op, need(op, inputs, 1, "starts"), "starts")
        ends = as_int_list(op, need(op, inputs, 2, "ends"), "ends")
        axes = as_int_list(op, opt(inputs, 3), "axes")
        steps = as_int_list(op, opt(inputs, 4), "steps")
    if starts is None or ends is None or len(starts) != len(ends):
        raise fail(op, f"starts {starts} and ends {ends} must be given with equal lengths")
    if axes is None:
        axes = list(range(len(starts)))
    if steps is None:
        steps = [1] * len(starts)
    if len(axes) != len(starts) or len(steps) != len(starts):
        raise fail(op, f"axes {axes} / steps {steps} do not match starts {starts}")
    index = [slice(None)] * x.ndim
    for s, e, a, st in zip(starts, ends, axes, steps):
        a = norm_axis(op, a, x.ndim)
        d = x.shape[a]
        if st == 0:
            raise fail(op, "steps must not be 0")
        if s < 0:
            s += d
        if e < 0:
            e += d
        if st > 0:
            s = min(max(s, 0), d)
            e = min(max(e, 0), d)
            index[a] = slice(s, e, st)
        else:
            s = min(max(s, 0), d - 1)
            e = min(max(e, -1), d - 1)
            index[a] = slice(s, None if e < 0 else e, st)
    return [x[tuple(index)]]


@register("Cast")
def k_cast(inputs: list, attrs: dict, opset: int) -> list:
    x = need("Cast", inputs, 0)
    if "to" not in attrs:
        raise fail("Cast", "attribute 'to' is required")
    to = attrs["to"]
    dt = onnx_dtype("Cast", int(to)) if not isinstance(to, str) else np.dtype(to)
    if x.dtype.kind in "OSU":
        raise fail("Cast", "string tensors are not supported")
    return [x.astype(dt)]


@register("CastLike")
def k_castlike(inputs: list, attrs: dict, opset: int) -> list:
    x = need("CastLike", inputs, 0)
    t = need("CastLike", inputs, 1)
    if (t.dtype not in _NATIVE and t.dtype.name != "bfloat16") or x.dtype.kind in "OSU":
        raise fail("CastLike", f"casting {x.dtype} to {t.dtype} is not supported")
    return [x.astype(t.dtype)]


@register("ConstantOfShape")
def k_constant_of_shape(inputs: list, attrs: dict, opset: int) -> list:
    op = "ConstantOfShape"
    shape = as_int_list(op, need(op, inputs, 0, "shape"), "shape")
    if any(s < 0 for s in shape):
        raise fail(op, f"negative dimension in shape {shape}")
    v = attrs.get("value")
    if v is None:
        return [np.zeros(shape, dtype=np.float32)]
    v = np.asarray(v)
    if v.size != 1:
        raise fail(op, f"value must hold exactly one element, got shape {v.shape}")
    return [np.full(shape, v.reshape(-1)[0], dtype=v.dtype)]


@register("Dropout")
def k_dropout(inputs: list, attrs: dict, opset: int) -> list:
    op = "Dropout"
    x = need(op, inputs, 0)
    if opset >= 12:
        r = opt(inputs, 1)
        ratio = float(r.reshape(-1)[0]) if r is not None else 0.5
        t = opt(inputs, 2)
        training = bool(t.reshape(-1)[0]) if t is not None else False
    else:
        ratio = float(attrs.get("ratio", 0.5))
        training = opset < 7 and not iattr(attrs, "is_test", 0)
    mask_dtype = np.bool_ if opset >= 10 else x.dtype
    if not training or ratio == 0.0:
        return [x, np.ones(x.shape, dtype=mask_dtype)]
    if not 0.0 <= ratio < 1.0:
        raise fail(op, f"ratio {ratio} must be in [0, 1)")
    seed = attrs.get("seed")
    rng = np.random.RandomState(None if seed is None else int(seed))
    keep = rng.uniform(0.0, 1.0, x.shape) >= ratio
    y = (x * keep / x.dtype.type(1.0 - ratio)).astype(x.dtype) if x.dtype.kind == "f" else x * keep
    return [y, keep.astype(mask_dtype)]


@register("Expand")
def k_expand(inputs: list, attrs: dict, opset: int) -> list:
    op = "Expand"
    x = need(op, inputs, 0)
    shape = as_int_list(op, need(op, inputs, 1, "shape"), "shape")
    try:
        out = np.broadcast_shapes(x.shape, tuple(shape))
    except ValueError as e:
        raise fail(op, f"shape {shape} does not broadcast with input {x.shape}") from e
    return [np.broadcast_to(x, out).copy()]


@register("Range")
def k_range(inputs: list, attrs: dict, opset: int) -> list:
    start, limit, delta = (need("Range", inputs, i).reshape(()) for i in range(3))
    if delta == 0:
        raise fail("Range", "delta must not be 0")
    n = max(int(np.ceil((limit - start) / delta)), 0)
    return [(start + np.arange(n, dtype=start.dtype) * delta).astype(start.dtype)]


@register("Split")
def k_split(inputs: list, attrs: dict, opset: int) -> list:
    op = "Split"
    x = need(op, inputs, 0)
    axis = norm_axis(op, iattr(attrs, "axis", 0), x.ndim)
    split = ints_attr(attrs, "split") if opset < 13 else as_int_list(op, opt(inputs, 1), "split")
    n_out = int(attrs.get("_num_outputs", attrs.get("num_outputs", 0)) or 0)
    d = x.shape[axis]
    if split is None:
        if not n_out:
            raise fail(op, "without a split input, the number of outputs must be known (num_outputs)")
        size = -(-d // n_out)
        split = [min(size, d - i * size) for i in range(n_out)]
    if sum(split) != d or any(s < 0 for s in split):
        raise fail(op, f"split {split} does not add up to {d} on axis {axis}")
    cuts = np.cumsum(split)[:-1]
    return [np.ascontiguousarray(p) for p in np.split(x, cuts, axis=axis)]


@register("Tile")
def k_tile(inputs: list, attrs: dict, opset: int) -> list:
    x = need("Tile", inputs, 0)
    reps = as_int_list("Tile", need("Tile", inputs, 1, "repeats"), "repeats")
    if len(reps) != x.ndim:
        raise fail("Tile", f"repeats {reps} must have one value per input axis ({x.ndim})")
    return [np.tile(x, reps)]


def _blocksize(op: str, x: np.ndarray, attrs: dict) -> int:
    if x.ndim != 4:
        raise fail(op, f"input must be 4-D (N, C, H, W), got shape {x.shape}")
    b = int(attrs.get("blocksize", 0))
    if b < 1:
        raise fail(op, f"blocksize must be >= 1, got {b}")
    return b


@register("DepthToSpace")
def k_depth_to_space(inputs: list, attrs: dict, opset: int) -> list:
    op = "DepthToSpace"
    x = need(op, inputs, 0, "input")
    b = _blocksize(op, x, attrs)
    n, c, h, w = x.shape
    if c % (b * b):
        raise fail(op, f"channels {c} are not divisible by blocksize^2 = {b * b}")
    mode = str(attrs.get("mode", "DCR"))
    if mode == "DCR":
        y = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    elif mode == "CRD":
        y = x.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
    else:
        raise fail(op, f"mode must be DCR or CRD, got {mode!r}")
    return [np.ascontiguousarray(y.reshape(n, c // (b * b), h * b, w * b))]


@register("SpaceToDepth")
def k_space_to_depth(inputs: list, attrs: dict, opset: int) -> list:
    op = "SpaceToDepth"
    x = need(op, inputs, 0, "input")
    b = _blocksize(op, x, attrs)
    n, c, h, w = x.shape
    if h % b or w % b:
        raise fail(op, f"height {h} and width {w} must be divisible by blocksize {b}")
    mode = str(attrs.get("mode", "DCR"))
    if mode not in ("DCR", "CRD"):
        raise fail(op, f"mode must be DCR or CRD, got {mode!r}")
    order = (0, 3, 5, 1, 2, 4) if mode == "DCR" else (0, 1, 3, 5, 2, 4)
    y = x.reshape(n, c, h // b, b, w // b, b).transpose(order)
    return [np.ascontiguousarray(y.reshape(n, c * b * b, h // b, w // b))]
