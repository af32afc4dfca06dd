"""Loading an ONNX model into a :class:`Graph`: check it, decode attributes, infer shapes, fold
constant subgraphs, fold BatchNormalization into Conv, fuse activations, drop dead nodes."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from gpubackend import fallback

from . import ops
from .errors import GpuBackendError, ModelError, OptionError
from .graph import Graph, Node
from .ops import elementwise as ew

ModelLike = str | bytes | os.PathLike | onnx.ModelProto

# Ops never folded even when every input is constant (random or stateful).
# producer_name of the models gpubackend.importers.tflite writes
TFLITE_IMPORTER = "gpubackend.importers.tflite"
_NOT_FOLDABLE = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial"}
# Activations that Conv / ConvTranspose / Gemm / MatMul kernels apply in the same pass.
FUSABLE_ACTIVATIONS = frozenset(ew.FUSABLE)  # the op layer's list: every GPU path's conv/gemm kernels apply them
_FUSING_PRODUCERS = {"Conv", "ConvTranspose", "Gemm", "MatMul"}


def load_model(model: ModelLike) -> onnx.ModelProto:
    """Read a model from a path, bytes or ModelProto (ONNX, or TFLite through the importer) and check it;
    ModelError if that fails."""
    from .importers import is_tflite, tflite_to_onnx

    if is_tflite(model):
        return tflite_to_onnx(model)  # type: ignore[arg-type]
    try:
        if isinstance(model, onnx.ModelProto):
            proto = model
        elif isinstance(model, (bytes, bytearray, memoryview)):
            proto = onnx.load_model_from_string(bytes(model))
        elif isinstance(model, (str, os.PathLike)):
            if not os.path.isfile(model):
                raise ModelError(f"model file not found: {os.fspath(model)}")
            proto = onnx.load(os.fspath(model))
        else:
            raise ModelError(f"a model must be a path, bytes or onnx.ModelProto, not {type(model).__name__}")
    except ModelError:
        raise
    except Exception as exc:  # protobuf raises DecodeError, RuntimeWarning-free garbage etc.
        raise ModelError(f"cannot parse the model as ONNX: {exc}") from exc
    if not proto.graph.node and not proto.graph.output:
        raise ModelError("the model has an empty graph (is this an ONNX file?)")
    newest = onnx.defs.onnx_opset_version()
    for imp in proto.opset_import:
        if imp.domain in ("", "ai.onnx") and not 1 <= imp.version <= newest:
            raise ModelError(f"the model imports ONNX opset {imp.version}; this onnx package knows opsets 1-{newest}")
    _check_types(proto)
    if not isinstance(model, (str, os.PathLike)) and _external_tensors(proto):
        # a path anchors relative locations at the model's folder; bytes and ModelProto have none, and
        # resolving against the current directory would read whatever file happens to sit there
        raise ModelError(f"initializer {_external_tensors(proto)[0]!r} keeps its data in an external file; "
                         "load such a model from its path (or with onnx.load, which brings the data in)")
    _check_model(proto)
    return proto


_TYPE_ERROR = re.compile(r"Type Error|bound to different types|has unsupported type|has inconsistent type", re.I)


def _check_types(proto: onnx.ModelProto) -> None:
    """Refuse a model whose operand types break an operator's type constraints (e.g. a Conv with
    int32 or float16 weights on a float32 input): running it would mean silently casting. Other
    complaints of strict inference (unknown shapes and the like) are left to the loader."""
    try:
        inferred = onnx.shape_inference.infer_shapes(proto, check_type=True, strict_mode=True)
    except Exception as exc:  # noqa: BLE001 - onnx raises InferenceError and friends
        if _TYPE_ERROR.search(str(exc)):
            raise ModelError(f"the model breaks an operator's type constraints: {exc}") from exc
        try:
            inferred = onnx.shape_inference.infer_shapes(proto, strict_mode=False)
        except Exception:  # noqa: BLE001 - the checker reports what is wrong
            return
    _check_schema_types(inferred)


def _tensor_types(graph: onnx.GraphProto) -> dict[str, str]:
    """Tensor name -> ONNX type string (``tensor(float16)``) wherever the graph says it."""
    types: dict[str, str] = {}
    for vi in [*graph.input, *graph.value_info, *graph.output]:
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type:
            types[vi.name] = _type_string(vi.type.tensor_type.elem_type)
    for init in graph.initializer:
        types[init.name] = _type_string(init.data_type)
    return types


def _type_string(elem_type: int) -> str:
    try:
        return f"tensor({onnx.TensorProto.DataType.Name(elem_type).lower()})"
    except ValueError:  # a number no ONNX type has: no schema allows it
        return f"tensor(<unknown type {elem_type}>)"


def _allowed_input_types(op_type: str, opset: int, domain: str) -> tuple[list[frozenset[str] | None], bool] | None:
    """Per formal input of the op's schema, the tensor types it accepts (None: no tensor constraint
    to check), and whether the last input is variadic; None when onnx has no schema for the op."""
    key = (op_type, opset, domain)
    if key not in _SCHEMA_TYPES:
        try:
            schema = onnx.defs.get_schema(op_type, opset, domain)
        except Exception:  # noqa: BLE001 - unknown op: the checker and the planner say so
            _SCHEMA_TYPES[key] = None
            return None
        constraints = {c.type_param_str: c.allowed_type_strs for c in schema.type_constraints}
        allowed: list[frozenset[str] | None] = []
        for formal in schema.inputs:
            types = constraints.get(formal.type_str, [formal.type_str])
            tensors = frozenset(t for t in types if t.startswith("tensor("))
            allowed.append(tensors or None)
        variadic = bool(schema.inputs) and schema.inputs[-1].option == onnx.defs.OpSchema.FormalParameterOption.Variadic
        _SCHEMA_TYPES[key] = (allowed, variadic)
    return _SCHEMA_TYPES[key]


_SCHEMA_TYPES: dict[tuple[str, int, str], tuple[list[frozenset[str] | None], bool] | None] = {}


def _check_schema_types(proto: onnx.ModelProto) -> None:
    """Each node input's element type must be one its op schema allows (``onnx.defs``): strict type
    inference checks only that operands sharing a type variable agree, so e.g. Resize ``scales``
    given as float16 (onnxruntime refuses it) would otherwise be read as float."""
    opsets = {imp.domain or "": imp.version for imp in proto.opset_import}
    opsets.setdefault("", opsets.get("ai.onnx", 1))
    types = _tensor_types(proto.graph)
    for idx, node in enumerate(proto.graph.node):
        domain = "" if node.domain in ("", "ai.onnx") else node.domain
        if domain != "" or node.op_type == "Constant":
            continue
        schema = _allowed_input_types(node.op_type, opsets[""], domain)
        if schema is None:
            continue
        allowed, variadic = schema
        for i, name in enumerate(node.input):
            slot = allowed[i] if i < len(allowed) else allowed[-1] if variadic else None
            if not name or name not in types or slot is None:
                continue
            if types[name] not in slot:
                raise ModelError(
                    f"node {node.name or f'#{idx}'} ({node.op_type}): input {i} {name!r} is {types[name]}; the "
                    f"{node.op_type} schema (opset {opsets['']}) allows {', '.join(sorted(slot))}")


def _check_topology(nodes: list[Node], available: set[str], outputs: list[str]) -> None:
    """Every node input must be a graph input, an initializer or an earlier node's output (ONNX
    keeps nodes in topological order), and every graph output must be produced: a dangling name or
    a cycle is a ModelError naming the node, not a KeyError at run time."""
    known = set(available)
    for node in nodes:
        for name in node.inputs:
            if name and name not in known:
                raise ModelError(f"node {node.name} ({node.op_type}): input {name!r} is neither a graph input, an "
                                 "initializer nor the output of an earlier node (dangling name, or a cycle)")
        known.update(o for o in node.outputs if o)
    missing = [o for o in outputs if o not in known]
    if missing:
        raise ModelError(f"graph output(s) {missing} are produced by no node")
    if not outputs:
        raise ModelError("the graph declares no outputs")


def _external_tensors(proto: onnx.ModelProto) -> list[str]:
    """Names of initializers whose data still lives in an external file."""
    return [t.name for t in proto.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]


def _check_model(proto: onnx.ModelProto) -> None:
    """onnx.checker, ModelError when it fails. The checker insists on a type and shape for every
    graph output and value_info and stops at the first complaint; a model that leaves them out is
    still runnable (shape inference fills them in), so such a model is checked again with those
    entries completed, so that its nodes are checked too."""
    try:
        onnx.checker.check_model(proto)
        return
    except Exception as exc:  # noqa: BLE001 - onnx raises ValidationError and friends
        if not _BENIGN_CHECK.search(str(exc)):
            raise ModelError(f"the model does not pass onnx.checker: {exc}") from exc
    completed = onnx.ModelProto()
    completed.CopyFrom(proto)
    kept = [vi for vi in completed.graph.value_info if vi.type.HasField("tensor_type")]
    del completed.graph.value_info[:]
    completed.graph.value_info.extend(kept)
    for vi in list(completed.graph.output) + list(completed.graph.input) + kept:
        tt = vi.type.tensor_type
        if not tt.HasField("shape"):
            tt.shape.SetInParent()
    try:
        onnx.checker.check_model(completed)
    except Exception as exc:  # noqa: BLE001
        if not _BENIGN_CHECK.search(str(exc)):
            raise ModelError(f"the model does not pass onnx.checker: {exc}") from exc


_BENIGN_CHECK = re.compile(r"Field '(shape|type)' of '(type|value_info)' is required but missing")


def default_opset(proto: onnx.ModelProto) -> int:
    for imp in proto.opset_import:
        if imp.domain in ("", "ai.onnx"):
            return int(imp.version)
    return 1


def decode_attribute(attr: onnx.AttributeProto) -> Any:
    value = onnx.helper.get_attribute_value(attr)
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    if isinstance(value, list) and value and isinstance(value[0], bytes):
        return [v.decode("utf-8") for v in value]
    if isinstance(value, list) and value and isinstance(value[0], onnx.TensorProto):
        return [numpy_helper.to_array(v) for v in value]
    return value


def _static_shape(type_proto: onnx.TypeProto) -> tuple[int | None, ...] | None:
    """The dims of a tensor type, None for each one not known (named, absent, or negative)."""
    if not type_proto.HasField("tensor_type") or not type_proto.tensor_type.HasField("shape"):
        return None
    return tuple(d.dim_value if d.HasField("dim_value") and d.dim_value >= 0 else None
                 for d in type_proto.tensor_type.shape.dim)


def declared_shape(name: str, type_proto: onnx.TypeProto) -> tuple[int | None, ...] | None:
    """A graph input's declared shape. -1, 0 and named dims are symbolic (exporters write all three
    for "any size"); another negative number is not a shape, so ModelError."""
    if not type_proto.HasField("tensor_type") or not type_proto.tensor_type.HasField("shape"):
        return None
    dims: list[int | None] = []
    for d in type_proto.tensor_type.shape.dim:
        if not d.HasField("dim_value") or d.dim_value in (-1, 0):
            dims.append(None)
        elif d.dim_value < 0:
            raise ModelError(f"input {name!r} declares dimension {d.dim_value} in its shape; "
                             "a dimension is a size >= 1, or -1, 0 or a name for a symbolic one")
        else:
            dims.append(int(d.dim_value))
    return tuple(dims)


def pin_shape(name: str, declared: tuple[int | None, ...] | None, given: Any) -> tuple[int, ...]:
    """``given`` (a shape for input ``name``) checked against the declared one; OptionError if it is
    not a shape of non-negative integers of the declared rank that agrees with every static dim."""
    try:
        shape = tuple(int(d) for d in given)
        if any(isinstance(d, bool) or int(d) != d for d in given):
            raise TypeError
    except (TypeError, ValueError):
        raise OptionError(f"the shape given for input {name!r} must be a sequence of integers, not {given!r}") from None
    if any(d < 0 for d in shape):
        raise OptionError(f"the shape given for input {name!r} has a negative dimension: {list(shape)}")
    if declared is not None:
        shown = ["?" if d is None else d for d in declared]
        if len(declared) != len(shape) or any(d is not None and d != v for d, v in zip(declared, shape)):
            raise OptionError(f"the shape given for input {name!r}, {list(shape)}, does not fit its declared "
                              f"shape {shown}")
    return shape


def _np_dtype(type_proto: onnx.TypeProto) -> np.dtype | None:
    if not type_proto.HasField("tensor_type"):
        return None
    try:
        return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(type_proto.tensor_type.elem_type))
    except Exception:
        return None


def to_graph(proto: onnx.ModelProto, input_shapes: Mapping[str, Any] | None = None,
             input_values: Mapping[str, np.ndarray] | None = None) -> Graph:
    """Build and optimise the graph. ``input_shapes`` pins symbolic input dimensions;
    ``input_values`` makes inputs constants (shape-defining integers given at run time), so
    that everything they define folds like shape plumbing does. Every failure is a
    GpuBackendError; one inside a node names the node and its op."""
    try:
        return _to_graph(proto, input_shapes or {}, input_values or {})
    except GpuBackendError:
        raise
    except Exception as exc:  # an unforeseen failure in our own passes: still a GpuBackendError
        raise ModelError(f"preparing the model failed: {type(exc).__name__}: {exc}") from exc


def _to_graph(proto: onnx.ModelProto, input_shapes: Mapping[str, Any], input_values: Mapping[str, np.ndarray]) -> Graph:
    g = proto.graph
    opset = default_opset(proto)
    try:
        constants = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    except Exception as exc:
        raise ModelError(f"cannot read the model's initializers: {exc}") from exc
    inputs = [i.name for i in g.input if i.name not in constants]
    declared = {i.name: declared_shape(i.name, i.type) for i in g.input if i.name not in constants}
    unknown = [n for n in list(input_shapes) + list(input_values) if n not in declared]
    if unknown:
        raise OptionError(f"no model input named {', '.join(map(repr, unknown))}; the inputs are {inputs}")
    dtypes: dict[str, np.dtype] = {}
    for vi in list(g.input) + list(g.output) + list(g.value_info):
        dt = _np_dtype(vi.type)
        if dt is not None:
            dtypes[vi.name] = dt
    nodes = []
    protos: dict[int, onnx.NodeProto] = {}  # id(Node) -> its proto
    seen: set[str] = set()
    for i, n in enumerate(g.node):
        name = n.name or f"{n.op_type}_{i}"
        if name in seen:  # ONNX asks for unique node names but its checker does not insist
            name = f"{name}#{i}"
        seen.add(name)
        try:
            attrs = {a.name: decode_attribute(a) for a in n.attribute}
        except Exception as exc:
            raise ModelError(f"node {name} ({n.op_type}): unreadable attribute: {exc}") from exc
        if len(n.output) > 1:
            attrs["_num_outputs"] = len(n.output)  # e.g. MaxPool computes Indices only when asked
        nodes.append(Node(name, n.op_type, list(n.input), list(n.output), attrs, n.domain))
        protos[id(nodes[-1])] = n
    _check_topology(nodes, set(constants) | {i.name for i in g.input}, [o.name for o in g.output])
    pinned = {k: v for k, v in declared.items() if v is not None}
    for name, shape in input_shapes.items():
        pinned[name] = pin_shape(name, declared[name], shape)
    for name, value in input_values.items():
        value = np.asarray(value)
        pinned[name] = pin_shape(name, declared[name], value.shape)
        constants[name] = value
    graph = Graph(nodes, [n for n in inputs if n not in input_values], [o.name for o in g.output], constants,
                  dtypes=dtypes, opset=opset, input_shapes=pinned)
    rewritten = ops.quant.qoperators_as_qdq(graph)
    # onnxruntime quantizes float weights behind a DequantizeLinear itself; a model from our TFLite
    # importer carries TFLite's int8 weights already dequantised, and TFLite computes them as they are
    if proto.producer_name != TFLITE_IMPORTER:
        rewritten += ops.quant.quantize_float_weights(graph)
    for node, node_proto in rewritten:
        protos[id(node)] = node_proto
    specialise(proto, graph, protos)
    optimize(graph)
    return graph



# Shape inference and constant folding take turns until nothing more folds: folding a Shape node
# turns the Reshape / Expand / Slice operands computed from it into constants, which lets the next
# round of shape inference see through them. Real models settle in two or three rounds.
_MAX_SPECIALISE_ROUNDS = 16
# Constants up to this many elements are handed to ONNX shape inference by value (it propagates
# shape values through them); larger ones only by type and shape.
_INFERENCE_VALUE_LIMIT = 4096


def specialise(proto: onnx.ModelProto, graph: Graph, protos: Mapping[int, onnx.NodeProto]) -> None:
    """Make every shape static that the pinned input shapes and the constants determine, folding
    the shape plumbing (Shape, Gather, Slice, Concat, Cast, Range, ConstantOfShape, ...) away."""
    # Folding first also checks the size of every constant Range / ConstantOfShape before ONNX's
    # data propagation sees it (a Range to 1e12 there allocates until the process is killed).
    fold_constants(graph)
    for _ in range(_MAX_SPECIALISE_ROUNDS):
        infer_shapes(proto, graph, protos)
        if not fold_constants(graph):
            break


def infer_shapes(proto: onnx.ModelProto, graph: Graph, protos: Mapping[int, onnx.NodeProto]) -> None:
    """Static shapes from ONNX shape inference over the graph's current nodes and constants, with
    its pinned input shapes (symbolic dims stay symbolic)."""
    model = onnx.ModelProto()
    model.ir_version = proto.ir_version
    model.opset_import.extend(proto.opset_import)
    model.functions.extend(proto.functions)
    mg = model.graph
    mg.node.extend(protos[id(n)] for n in graph.nodes)
    for vi in proto.graph.input:
        if vi.name in graph.constants:
            continue
        new = mg.input.add()
        new.CopyFrom(vi)
        shape = graph.input_shapes.get(vi.name)
        if shape is not None and new.type.HasField("tensor_type"):
            dims = new.type.tensor_type.shape.dim
            del dims[:]
            for i, d in enumerate(shape):
                if d is None:
                    dims.add().dim_param = f"{vi.name}_dim{i}"
                else:
                    dims.add().dim_value = int(d)
    used = {i for n in graph.nodes for i in n.inputs if i}
    if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for n in mg.node for a in n.attribute):
        used = set(graph.constants)  # If / Loop / Scan bodies read outer tensors that are not node inputs
    for name in used & graph.constants.keys():
        arr = graph.constants[name]
        if arr.size <= _INFERENCE_VALUE_LIMIT and arr.dtype != object:
            mg.initializer.append(numpy_helper.from_array(arr, name))
        else:  # shape inference needs only the type and shape of big weights
            try:
                elem = onnx.helper.np_dtype_to_tensor_dtype(arr.dtype)
            except Exception:
                continue
            mg.input.append(onnx.helper.make_tensor_value_info(name, elem, arr.shape))
    for vi in proto.graph.output:  # declared output dims (often -1) would only blur the inferred ones
        out = mg.output.add()
        out.name = vi.name
        if vi.type.HasField("tensor_type"):
            out.type.tensor_type.elem_type = vi.type.tensor_type.elem_type
    try:
        model = onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
    except Exception:
        return  # shapes stay unknown; paths that need them decline
    for vi in list(model.graph.input) + list(model.graph.value_info) + list(model.graph.output):
        if vi.name in graph.constants:
            continue
        shape = _static_shape(vi.type)
        if shape is not None and all(d is not None for d in shape):
            graph.shapes[vi.name] = tuple(int(d) for d in shape)  # type: ignore[arg-type]
        dt = _np_dtype(vi.type)
        if dt is not None:
            graph.dtypes.setdefault(vi.name, dt)


def optimize(graph: Graph) -> None:
    from . import rewrites  # imports this module's helpers

    fold_constants(graph)
    fold_batchnorm(graph)
    remove_identities(graph)
    ops.quant.requantize_in_integers(graph)
    rewrites.fold_channel_affine(graph)
    rewrites.fold_input_affine(graph)
    rewrites.fuse_decomposed_hardswish(graph)
    rewrites.conv_before_upsample(graph)
    fuse_activations(graph)
    remove_dead_nodes(graph)


# A folded constant is held in memory for the session's life: an operand that asks for more
# than this (Range to 1e12, ConstantOfShape of a huge shape) is a broken model, not a constant.
FOLD_LIMIT_BYTES = 1 << 30


def _folded_elements(node: Node, values: list[np.ndarray | None]) -> int | None:
    """How many elements folding ``node`` would make, computed before making them, for the ops
    whose output size is set by an operand's value; None for other ops."""
    op = node.op_type
    try:
        if op == "Range" and len(values) == 3 and all(v is not None for v in values):
            start, limit, delta = (float(np.asarray(v).reshape(-1)[0]) for v in values)  # type: ignore[union-attr]
            return 0 if delta == 0 else max(0, int(np.ceil((limit - start) / delta)))
        if op == "ConstantOfShape" and values and values[0] is not None:
            return int(np.prod([max(int(d), 0) for d in np.asarray(values[0]).reshape(-1)], dtype=np.float64))
        if op == "Expand" and len(values) == 2 and values[0] is not None and values[1] is not None:
            dims = [int(d) for d in np.asarray(values[1]).reshape(-1)]
            shape = np.broadcast_shapes(values[0].shape, tuple(max(d, 1) for d in dims))
            return int(np.prod(shape, dtype=np.float64))
        if op == "Tile" and len(values) == 2 and values[0] is not None and values[1] is not None:
            reps = [max(int(r), 0) for r in np.asarray(values[1]).reshape(-1)]
            return int(values[0].size * np.prod(reps, dtype=np.float64))
    except (ValueError, OverflowError, TypeError):
        return None  # not a valid operand: left to run time, where the error names the node
    return None


def fold_constants(graph: Graph) -> bool:
    """Evaluate on the CPU, once, every node whose inputs are all known at load time (and Shape /
    Size of a tensor whose shape is static). Returns whether any node was folded. ModelError
    names a node whose folded output would be larger than ``FOLD_LIMIT_BYTES``."""
    kept = []
    for node in graph.nodes:
        value = None
        if node.op_type in ("Constant", "Shape", "Size") and node.domain in ("", "ai.onnx"):
            shape = graph.shape(node.inputs[0]) if node.op_type != "Constant" and node.inputs else None
            if node.op_type == "Constant" or shape is not None:
                # Shape and Size read only the shape: a zero-stride view allocates nothing
                operands = [] if shape is None else [np.lib.stride_tricks.as_strided(np.zeros(1, np.uint8), shape,
                                                                                     (0,) * len(shape))]
                try:
                    value = fallback.run_node(node.op_type, operands, node.attrs, graph.opset)
                except Exception as exc:
                    raise ModelError(f"node {node.name} ({node.op_type}): {exc}") from exc
        elif (node.op_type == "CastLike" and node.domain in ("", "ai.onnx") and len(node.inputs) == 2
              and node.inputs[0] in graph.constants and graph.dtypes.get(node.inputs[1]) is not None):
            # only the type of the second input matters: a constant cast to a runtime tensor's type folds
            like = np.zeros(0, graph.dtypes[node.inputs[1]])
            value = fallback.run_node("CastLike", [graph.constants[node.inputs[0]], like], node.attrs, graph.opset)
        elif (node.domain in ("", "ai.onnx") and node.op_type not in _NOT_FOLDABLE
              and node.op_type in fallback.supported_ops()
              and all(i == "" or i in graph.constants for i in node.inputs) and node.outputs):
            operands = [graph.constants.get(i) if i else None for i in node.inputs]
            count = _folded_elements(node, operands)
            if count is not None and count * 8 > FOLD_LIMIT_BYTES:
                raise ModelError(f"node {node.name} ({node.op_type}): its output would have {count:.4g} elements, "
                                 f"more than the {FOLD_LIMIT_BYTES >> 20} MiB a constant may take")
            try:
                value = fallback.run_node(node.op_type, operands, node.attrs, graph.opset)
            except Exception:
                value = None  # leave it to run time, where the error reaches the user with context
            if value is not None and sum(v.nbytes for v in value) > FOLD_LIMIT_BYTES:
                raise ModelError(f"node {node.name} ({node.op_type}): its folded output takes "
                                 f"{sum(v.nbytes for v in value) >> 20} MiB, more than the "
                                 f"{FOLD_LIMIT_BYTES >> 20} MiB a constant may take")
        if value is None:
            kept.append(node)
            continue
        if node.op_type == "DequantizeLinear" and node.domain in ("", "ai.onnx"):
            ops.quant.note_dequantized(graph, node, operands)
        for name, arr in zip(node.outputs, value):
            if name:
                graph.constants[name] = np.asarray(arr)
                graph.shapes.pop(name, None)
    folded = len(kept) != len(graph.nodes)
    graph.nodes = kept
    return folded


def is_standard(node: Node) -> bool:
    """A node of the default ONNX domain: the only ones the rewrites below may reinterpret."""
    return node.domain in ("", "ai.onnx")


def _single_consumer(graph: Graph, name: str, consumers: dict[str, list[Node]]) -> Node | None:
    users = consumers.get(name, [])
    if len(users) != 1 or name in graph.outputs:
        return None
    return users[0]


def fold_batchnorm(graph: Graph) -> None:
    """Conv followed by inference BatchNormalization becomes one Conv with adjusted weights."""
    consumers = graph.consumers()
    removed: set[str] = set()
    for conv in graph.nodes:
        if conv.op_type != "Conv" or not is_standard(conv) or len(conv.inputs) < 2 \
                or conv.inputs[1] not in graph.constants:
            continue
        if len(conv.inputs) > 2 and conv.inputs[2] and conv.inputs[2] not in graph.constants:
            continue
        bn = _single_consumer(graph, conv.outputs[0], consumers)
        if bn is None or bn.op_type != "BatchNormalization" or not is_standard(bn) \
                or len(bn.outputs) > 1 and any(bn.outputs[1:]):
            continue
        if bn.inputs[0] != conv.outputs[0] or not all(i in graph.constants for i in bn.inputs[1:5]):
            continue
        scale, beta, mean, var = (graph.constants[i].astype(np.float64) for i in bn.inputs[1:5])
        norm = ops.lower(bn, graph)
        eps = norm.epsilon if isinstance(norm, ops.NormRecord) else 1e-5
        s = scale / np.sqrt(var + eps)
        w = graph.constants[conv.inputs[1]]
        b = graph.constants[conv.inputs[2]] if len(conv.inputs) > 2 and conv.inputs[2] else np.zeros(w.shape[0])
        w_name, b_name = conv.name + "/bn_folded_W", conv.name + "/bn_folded_B"
        graph.constants[w_name] = (w * s.reshape((-1,) + (1,) * (w.ndim - 1))).astype(w.dtype)
        graph.constants[b_name] = ((b - mean) * s + beta).astype(w.dtype)
        conv.inputs = [conv.inputs[0], w_name, b_name]
        conv.outputs = [bn.outputs[0]]
        graph.fused.setdefault(conv.name, []).append(bn.name)
        removed.add(bn.name)
    graph.nodes = [n for n in graph.nodes if n.name not in removed]


def remove_identities(graph: Graph) -> None:
    """Identity and inference Dropout are rewired away unless they produce a graph output."""
    rename: dict[str, str] = {}
    kept = []
    for node in graph.nodes:
        node.inputs = [rename.get(i, i) for i in node.inputs]
        single = is_standard(node) and (node.op_type == "Identity"
                                        or (node.op_type == "Dropout" and not any(node.outputs[1:])))
        if single and node.outputs[0] not in graph.outputs and node.inputs[0] not in graph.constants:
            rename[node.outputs[0]] = node.inputs[0]
            continue
        kept.append(node)
    graph.nodes = kept


def activation_of(node: Node, graph: Graph) -> tuple[str, dict[str, float]] | None:
    """The ``_act`` form of an activation node (see ``ops.Activation``), or None if it cannot be fused."""
    act = ops.activation(node, graph)
    return None if act is None else act.spec


def fuse_activations(graph: Graph) -> None:
    consumers = graph.consumers()
    removed: set[str] = set()
    for node in graph.nodes:
        if node.op_type not in _FUSING_PRODUCERS or not is_standard(node) or "_act" in node.attrs \
                or node.name in removed:
            continue
        act = _single_consumer(graph, node.outputs[0], consumers)
        if act is None or act.op_type not in FUSABLE_ACTIVATIONS or not is_standard(act) \
                or act.inputs[0] != node.outputs[0]:
            continue
        if graph.dtypes.get(node.outputs[0], np.dtype(np.float32)) != np.float32:
            continue
        spec = activation_of(act, graph)
        if spec is None:
            continue
        node.attrs = dict(node.attrs, _act=spec)
        if node.outputs[0] in graph.shapes and act.outputs[0] not in graph.shapes:
            graph.shapes[act.outputs[0]] = graph.shapes[node.outputs[0]]
        node.outputs = [act.outputs[0]]
        graph.fused.setdefault(node.name, []).append(act.name)
        removed.add(act.name)
    graph.nodes = [n for n in graph.nodes if n.name not in removed]


def remove_dead_nodes(graph: Graph) -> None:
    needed = set(graph.outputs)
    kept = []
    for node in reversed(graph.nodes):
        if any(o in needed for o in node.outputs if o):
            kept.append(node)
            needed.update(i for i in node.inputs if i)
    graph.nodes = kept[::-1]
