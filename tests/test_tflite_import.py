"""The TFLite importer against the official TFLite interpreter (ai-edge-litert), on every path.

Models: every ``.tflite`` in the mediapipe 0.10.14 wheel (fetched with pip by
``gpubackend.importers.mediapipe_models``). Inputs: scikit-image's astronaut photo resized to the
model's input. The default run covers the small face detector on cpu, gles31 and vulkan, the selfie
model on cpu, and a small int8-weight model written here on every path; the rest are ``-m slow``.
"""

from __future__ import annotations

import numpy as np
import pytest

import gpubackend
from gpubackend.errors import ModelError
from gpubackend.importers import is_tflite, tflite_to_onnx
from gpubackend.importers.mediapipe_models import interpreter_reference, mediapipe_models

PATHS = ["cpu", "gles2", "gles3", "gles31", "vulkan"]
TOL = 1e-4
# gles2 / gles3 take minutes per MediaPipe model here (face_detection_short_range: 190 s / 420 s under load).
DEFAULT_CASES = [("face_detection_short_range", "cpu"), ("face_detection_short_range", "gles31"),
                 ("face_detection_short_range", "vulkan"), ("selfie_segmentation", "cpu")]
SLOW_MODELS = ["face_detection_short_range", "selfie_segmentation", "selfie_segmentation_landscape",
               "face_detection_full_range_sparse",
               "face_landmark", "hand_landmark_lite", "hand_landmark_full", "hand_recrop", "iris_landmark",
               "palm_detection_lite", "palm_detection_full", "pose_detection", "pose_landmark_full"]
# Ops of MediaPipe's own TFLite runtime that neither the importer nor the reference interpreter know.
NOT_IMPORTABLE = {"face_landmark_with_attention": ["Landmarks2TransformMatrix", "TransformLandmarks",
                                                   "TransformTensorBilinear"]}
# pose_landmark_full's segmentation logits reach |x| ~ 1e3 through cancelling sums; onnxruntime running
# the imported graph differs from the TFLite interpreter by the same ~5e-4, so this is the reference's
# own rounding spread, not an import error. Every other output of that model meets TOL.
LOOSE = {("pose_landmark_full", 2): 2e-3}


@pytest.fixture(scope="module")
def models() -> dict:
    return mediapipe_models()


def _reference(path) -> tuple[dict[str, np.ndarray], list[np.ndarray]]:
    pytest.importorskip("ai_edge_litert.interpreter")
    pytest.importorskip("skimage.data")
    return interpreter_reference(path)


_REFS: dict[str, tuple] = {}


def _check(models: dict, name: str, path: str) -> None:
    if name not in _REFS:
        _REFS[name] = _reference(models[name])
    feeds, refs = _REFS[name]
    sess = gpubackend.Session(models[name], path=path, fallback=True)
    outs = sess.run(feeds)
    assert len(outs) == len(refs)
    on_path = sum(1 for p in sess.placement.values() if p == path)
    assert on_path > 0, f"{name}: nothing ran on {path}: {sess.placement}"
    for k, (got, ref) in enumerate(zip(outs, refs)):
        assert got.shape == ref.shape
        err = float(np.max(np.abs(got - ref)) / max(1.0, float(np.max(np.abs(ref)))))
        assert err <= LOOSE.get((name, k), TOL), f"{name} output {k} on {path}: error {err:.3g}"


@pytest.mark.parametrize(("name", "path"), DEFAULT_CASES)
def test_mediapipe_model_matches_tflite(models: dict, name: str, path: str) -> None:
    _check(models, name, path)


@pytest.mark.slow
@pytest.mark.parametrize(("name", "path"), [(n, p) for n in SLOW_MODELS for p in PATHS if (n, p) not in DEFAULT_CASES])
def test_mediapipe_model_matches_tflite_slow(models: dict, name: str, path: str) -> None:
    _check(models, name, path)


def test_every_wheel_model_is_listed(models: dict) -> None:
    assert set(models) == {n for n, _ in DEFAULT_CASES} | set(SLOW_MODELS) | set(NOT_IMPORTABLE)


@pytest.mark.parametrize("name", sorted(NOT_IMPORTABLE))
def test_unknown_ops_are_named(models: dict, name: str) -> None:
    with pytest.raises(ModelError) as exc:
        gpubackend.Session(models[name], path="cpu")
    for op in NOT_IMPORTABLE[name]:
        assert op in str(exc.value)


def test_selfie_graph_is_nchw_inside(models: dict) -> None:
    """Only the two edge Transposes; every convolution runs NCHW with weights permuted at import."""
    proto = tflite_to_onnx(models["selfie_segmentation"])
    ops = [n.op_type for n in proto.graph.node]
    assert ops.count("Transpose") == 2
    assert "DequantizeLinear" not in ops
    assert [d.dim_value for d in proto.graph.input[0].type.tensor_type.shape.dim] == [1, 256, 256, 3]
    assert proto.graph.input[0].name == "input_1"
    # the face detector's channel-widening PADs become Concats with constant fill (kept on the GPU segment)
    face_ops = [n.op_type for n in tflite_to_onnx(models["face_detection_short_range"]).graph.node]
    assert "Pad" not in face_ops and face_ops.count("Concat") >= 11


def test_detection_and_bad_files(tmp_path, models: dict) -> None:
    data = models["selfie_segmentation"].read_bytes()
    assert is_tflite(data) and is_tflite(models["selfie_segmentation"])
    bad = tmp_path / "broken.tflite"
    bad.write_bytes(data[:1000])
    with pytest.raises(ModelError):
        gpubackend.Session(bad, path="cpu")
    notflite = tmp_path / "x.tflite"
    notflite.write_bytes(b"\0" * 64)
    with pytest.raises(ModelError, match="not a TFLite"):
        gpubackend.Session(notflite, path="cpu")
    with pytest.raises(ModelError):
        gpubackend.Session(tmp_path / "missing.tflite", path="cpu")


def test_selfie_tflite_matches_the_bundled_onnx(models: dict) -> None:
    """The demo's bundled NCHW ONNX and the importer's NCHW form of MediaPipe's file compute the same."""
    import sys
    from pathlib import Path

    from gpubackend.models import selfie_model_path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
    try:
        from convert_selfie_tflite import convert
    finally:
        sys.path.pop(0)
    proto = convert(models["selfie_segmentation"].read_bytes())
    assert "Transpose" not in {n.op_type for n in proto.graph.node}
    x = np.random.default_rng(0).random((1, 3, 256, 256), dtype=np.float32)
    (a,) = gpubackend.Session(proto, path="cpu").run({"input": x})
    (b,) = gpubackend.Session(selfie_model_path(), path="cpu").run({"input": x})
    assert a.shape == b.shape == (1, 1, 256, 256)
    assert float(np.abs(a - b).max()) < 1e-5


INT8_CASES = [  # (per-axis?, SAME?, relu6?, stride)
    (True, True, True, 2),
    (False, False, False, 1),
]


@pytest.mark.parametrize(("case", "path"), [(0, p) for p in PATHS] + [(1, "cpu")])
def test_int8_weights_dequantised_like_tflite(case: int, path: str) -> None:
    """int8 weights behind DEQUANTIZE (per-axis and per-tensor with a zero point), in a model written here;
    the per-tensor case is a property of the importer alone, so it runs on cpu only."""
    litert = pytest.importorskip("ai_edge_litert.interpreter")
    from tflite_builder import int8_conv_model

    per_axis, same, relu6, stride = INT8_CASES[case]
    rng = np.random.default_rng(case)
    w = rng.integers(-127, 128, (3, 3, 3, 2)).astype(np.int8)
    scales = np.array([0.01, 0.02, 0.005], np.float32) if per_axis else np.array([0.01], np.float32)
    zero = np.zeros(3, np.int64) if per_axis else np.array([7], np.int64)
    out_hw = (5 + stride - 1) // stride if same else (5 - 3) // stride + 1
    data = int8_conv_model(w, scales, zero, rng.standard_normal(3).astype(np.float32), (1, 5, 5, 2),
                           (1, out_hw, out_hw, 3), stride, same, relu6)
    it = litert.Interpreter(model_content=data)
    it.allocate_tensors()
    x = rng.standard_normal((1, 5, 5, 2)).astype(np.float32)
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    ref = it.get_tensor(it.get_output_details()[0]["index"])
    (y,) = gpubackend.Session(data, path=path).run({"x": x})
    assert y.shape == ref.shape
    assert float(np.max(np.abs(y - ref)) / max(1.0, float(np.max(np.abs(ref))))) <= TOL


def test_inference_session_reads_tflite(models: dict) -> None:
    sess = gpubackend.InferenceSession(str(models["hand_recrop"]), providers=["CPUExecutionProvider"])
    assert [(i.name, list(i.shape)) for i in sess.get_inputs()] == [("input_1", [1, 256, 256, 3])]
    feeds, refs = _REFS.get("hand_recrop") or _reference(models["hand_recrop"])
    (got,) = sess.run(None, feeds)
    assert float(np.abs(got - refs[0]).max()) / max(1.0, float(np.abs(refs[0]).max())) <= TOL


def _float64_outputs(proto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """The imported graph evaluated node by node in float64 by the reference kernels: what an
    fp32 runtime approximates, free of fp32 rounding."""
    import onnx
    from onnx import numpy_helper

    from gpubackend import fallback

    env: dict[str, np.ndarray] = {k: v.astype(np.float64) for k, v in feeds.items()}
    for init in proto.graph.initializer:
        arr = numpy_helper.to_array(init)
        env[init.name] = arr.astype(np.float64) if arr.dtype == np.float32 else arr
    for node in proto.graph.node:
        args = [env[i] if i else None for i in node.input]
        if node.op_type == "Resize":  # roi/scales stay float32 (their ONNX type)
            args = args[:1] + [a if a is None or a.dtype != np.float64 else a.astype(np.float32) for a in args[1:]]
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        for out, value in zip(node.output, fallback.run_node(node.op_type, args, attrs, proto.opset_import[0].version)):
            env[out] = value
    return [env[o.name] for o in proto.graph.output]


@pytest.mark.slow
def test_pose_landmark_logits_spread_is_the_interpreters(models: dict) -> None:
    """pose_landmark_full's segmentation logits (output 2, |x| ~ 1.7e3 after cancelling sums) differ
    from the interpreter by ~5e-4. Against the same graph evaluated in float64, our NumPy engine
    (fp32) is within 1e-4 on every other output and 1.1e-4 on the logits (fp32 rounding of this
    output), less than half the interpreter's 5.0e-4 there: the spread is the interpreter's fp32
    rounding (XNNPACK), not an import or kernel error."""
    feeds, refs = _reference(models["pose_landmark_full"])
    exact = _float64_outputs(tflite_to_onnx(models["pose_landmark_full"]), feeds)
    ours = gpubackend.Session(models["pose_landmark_full"], path="cpu", cpu_engine="numpy").run(feeds)

    def err(got: np.ndarray, ref: np.ndarray) -> float:
        return float(np.max(np.abs(got - ref)) / max(1.0, float(np.max(np.abs(ref)))))

    for k, (mine, want) in enumerate(zip(ours, exact)):
        bound = 2e-4 if k == 2 else TOL
        assert err(mine, want) <= bound, f"output {k}: ours {err(mine, want):.3g} from the float64 evaluation"
    assert err(refs[2], exact[2]) > 2 * err(ours[2], exact[2]), "the interpreter is not the one further off"


@pytest.mark.parametrize("name", ["pose_detection", "face_detection_full_range_sparse"])
def test_rank4_pad_is_imported_in_nchw(models: dict, name: str) -> None:
    """ZeroPadding2D on an NHWC graph input was imported as a Pad over ONNX axes 1 and 2, which every
    GPU path but gles2 declined (pose_detection: 4 nodes off gles3/gles31/vulkan)."""
    from onnx import numpy_helper

    proto = tflite_to_onnx(models[name])
    consts = {i.name: numpy_helper.to_array(i) for i in proto.graph.initializer}
    pads = [consts[n.input[1]].reshape(2, -1) for n in proto.graph.node if n.op_type == "Pad"]
    assert pads and all(p.shape[1] == 4 and not p[:, :2].any() and p[:, 2:].any() for p in pads), pads
