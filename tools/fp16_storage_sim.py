"""The error a zoo model gets from fp16 *storage* alone: onnxruntime (CPU, fp32 arithmetic) on the
model with every float graph input and node output rounded through float16 (Cast to FLOAT16 and
back), against onnxruntime in fp32 on the same input. Constants stay fp32, as the GPU paths keep
weights and biases in fp32 (``Binding.fp32``).

This is the floor of ``precision="fp16"``: a GPU path stores every activation in fp16 (it fuses
some nodes, so it rounds at fewer places, and its error can come out below this figure), so a
path whose fp16 error is far above it loses precision somewhere else (an fp16 accumulation, a
constant stored in fp16), while a figure above 2e-2 here means the model itself is not
fp16-safe on this input.

``python tools/fp16_storage_sim.py [--small] [--models a,b] [--keep-small N]``; ``--keep-small N``
leaves tensors of at most N elements (squeeze-excite vectors, pooled features) in fp32;
``--keep-small 4096`` is the floor under ``gpubackend.mixed_precision``'s rule.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper


def rounded_model(model: onnx.ModelProto, keep: set[str]) -> onnx.ModelProto:
    """``model`` with a float16 round trip after every float graph input and node output (except
    the outputs of Constant nodes, the graph outputs and the names in ``keep``)."""
    inferred = onnx.shape_inference.infer_shapes(model)
    g = inferred.graph
    float_names = {v.name for v in (*g.value_info, *g.input) if v.type.tensor_type.elem_type == TensorProto.FLOAT}
    outputs = {o.name for o in g.output}
    rename: dict[str, str] = {}
    nodes: list[onnx.NodeProto] = []

    def round_trip(name: str) -> None:
        half, back = f"{name}__fp16", f"{name}__fp16_back"
        nodes.append(helper.make_node("Cast", [name], [half], to=TensorProto.FLOAT16))
        nodes.append(helper.make_node("Cast", [half], [back], to=TensorProto.FLOAT))
        rename[name] = back

    initializers = {i.name for i in g.initializer}
    for inp in g.input:
        if inp.name in float_names and inp.name not in initializers:
            round_trip(inp.name)
    for node in g.node:
        copy = onnx.NodeProto()
        copy.CopyFrom(node)
        copy.input[:] = [rename.get(i, i) for i in node.input]
        nodes.append(copy)
        if node.op_type == "Constant":
            continue
        for out in node.output:
            if out in float_names and out not in outputs and out not in keep:
                round_trip(out)
    del g.node[:]
    g.node.extend(nodes)
    return inferred


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray], outputs: list[str] | None = None) -> list[np.ndarray]:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # no fusion: round where asked
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess.run(outputs, feeds)


def small_tensors(model: onnx.ModelProto, feeds: dict[str, np.ndarray], limit: int) -> set[str]:
    """Node outputs of at most ``limit`` elements on ``feeds`` (their shapes, run in fp32)."""
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    names = [o for n in probe.graph.node if n.op_type != "Constant" for o in n.output if o]
    known = {o.name for o in probe.graph.output}
    # typed outputs: onnxruntime refuses an output of undefined element type
    types = {v.name: v.type.tensor_type.elem_type for v in onnx.shape_inference.infer_shapes(probe).graph.value_info}
    probe.graph.output.extend([helper.make_tensor_value_info(n, types.get(n, TensorProto.FLOAT), None)
                               for n in names if n not in known])
    values = _run(probe, feeds)
    return {o.name for o, v in zip(probe.graph.output, values) if np.asarray(v).size <= limit}


def storage_error(name: str, small: bool = False, keep_small: int = 0) -> tuple[float, float]:
    """(error of the fp16-storage run against fp32, share of output elements off by more than
    0.02 times max(1, max|ref|)) for zoo model ``name`` on its realistic input."""
    from gpubackend import zoo
    from gpubackend.zoo.check import rel_error
    from gpubackend.zoo.inputs import make_input

    model = onnx.load(str(zoo.fetch(name)))
    feeds = make_input(zoo.BY_NAME[name], small=small)
    keep = small_tensors(model, feeds, keep_small) if keep_small else set()
    ref = _run(model, feeds)
    got = _run(rounded_model(model, keep), feeds)
    err = max(rel_error(a, b) for a, b in zip(got, ref))
    over = sum(int((np.abs(a - b) > 0.02 * max(1.0, float(np.abs(b).max()))).sum()) for a, b in zip(got, ref))
    return err, over / sum(b.size for b in ref)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--small", action="store_true", help="reduced input sizes where the zoo defines them")
    ap.add_argument("--models", default="", help="comma list (default: all)")
    ap.add_argument("--keep-small", type=int, default=0, metavar="N",
                    help="keep tensors of at most N elements in fp32")
    args = ap.parse_args()
    from gpubackend import zoo

    for name in [m for m in args.models.split(",") if m] or [m.name for m in zoo.MODELS]:
        err, share = storage_error(name, args.small, args.keep_small)
        print(f"{name:26s} fp16-storage error {err:.1e}  elements past 2e-2: {share:.3%}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
