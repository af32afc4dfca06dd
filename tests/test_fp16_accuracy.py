"""fp16 accuracy on the compute paths (issue 14): the kernels may lose no more than fp16 storage
does. ``tools/fp16_storage_sim.py`` gives each zoo model's floor (onnxruntime with every
activation rounded through float16); docs/zoo.md has the per-model figures."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import gpubackend


def _reduce_mean_model(shape: tuple[int, ...], op: str = "ReduceMean") -> bytes:
    node = helper.make_node(op, ["x"], ["y"], axes=[2, 3], keepdims=1)
    graph = helper.make_graph([node], "se_mean", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()


@pytest.mark.parametrize("path", ["gles31", "vulkan"])
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("op", ["ReduceMean", "ReduceMax"])
def test_squeeze_excite_mean_over_a_large_plane(path: str, precision: str, op: str) -> None:
    """A ReduceMean over H x W of 4 channels and 120 x 160 pixels (PP-OCRv6 det's first
    squeeze-excite block at 480x640): reduce.comp's 4 * H * W loop went wrong there on llvmpipe
    and lavapipe (0.19 off a mean of 0.9 in fp16, past the kernel check's 5e-2 on random data).
    Values of both signs around a small mean, as in the model."""
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((1, 6, 120, 160)) * 3.0 + 0.9).astype(np.float32)
    if precision == "fp16":
        x = x.astype(np.float16).astype(np.float32)
    with gpubackend.Session(_reduce_mean_model(x.shape, op), path=path, precision=precision, fallback=False) as sess:
        got = sess.run({"x": x})[0]
    want = x.mean(axis=(2, 3), keepdims=True) if op == "ReduceMean" else x.max(axis=(2, 3), keepdims=True)
    tol = 2e-3 if precision == "fp16" else 1e-5  # the mean of ~0.9 stored in fp16: 4.9e-4 per ulp
    assert np.abs(got - want).max() <= tol * max(1.0, float(np.abs(want).max())), (got.ravel(), want.ravel())


@pytest.mark.slow  # 3.5 min under load (first compile of the whole model plus its kernel checks)
def test_selfie_fp16_is_within_its_fp16_storage_floor_on_gles31() -> None:
    """selfie_segmentation misses 2e-2 in fp16 on every path because of fp16 storage itself:
    onnxruntime with every activation rounded through float16 is 5.0e-2 off (a few boundary
    pixels of the mask). gles31 (fusing, so rounding at fewer places) must stay within that floor,
    so a kernel that loses more than storage does fails here."""
    import onnx

    from gpubackend import zoo
    from gpubackend.fp16_calibration import storage_error
    from gpubackend.zoo.check import reference, rel_error
    from gpubackend.zoo.inputs import make_input

    model = zoo.BY_NAME["selfie_segmentation"]
    feeds = make_input(model)
    floor = storage_error(onnx.load(str(zoo.fetch(model.name))), feeds)
    assert 2e-2 < floor < 8e-2, floor  # the figure docs/zoo.md explains
    with gpubackend.Session(str(zoo.fetch(model.name)), path="gles31", precision="fp16", fallback=False) as sess:
        got = sess.run(feeds)
    err = max(rel_error(g, r) for g, r in zip(got, reference(model, feeds)))
    assert err <= floor, (err, floor)


def _channel_gate_model() -> bytes:
    """A squeeze-excite-like gate: a channel's mean (about 1.0) minus 1.0, amplified 1000x,
    through a Sigmoid, scales the channel's plane. The mean stored in fp16 is up to 4.9e-4 off,
    which the gate turns into about 0.1 at the output."""
    from onnx import numpy_helper

    nodes = [helper.make_node("GlobalAveragePool", ["x"], ["m"], name="gap"),
             helper.make_node("Sub", ["m", "c"], ["d"], name="sub"),
             helper.make_node("Mul", ["d", "k"], ["z"], name="mul"),
             helper.make_node("Sigmoid", ["z"], ["g"], name="gate"),
             helper.make_node("Mul", ["x", "g"], ["y"], name="scale")]
    consts = [numpy_helper.from_array(np.ones((1, 8, 1, 1), np.float32), "c"),
              numpy_helper.from_array(np.array(1000.0, np.float32), "k")]
    graph = helper.make_graph(nodes, "gate", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 32, 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 32, 32])], consts)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


@pytest.mark.parametrize("path", ["gles2", "gles3", "gles31", "vulkan"])
def test_the_mixed_precision_policy_keeps_a_channel_gate_in_fp32(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under precision="fp16", tensors of at most 4096 elements (the pooled mean and the gate
    here) stay fp32 (gles2: one fp32 per RGBA8 texel beside two fp16 per texel; gles3: RGBA32F;
    gles31 / vulkan: fp32 kernels, and globalpool / binary with one fp32 binding,
    paths/compute_mixed.py): the result meets the fp16 bar, and without the policy it does not."""
    from gpubackend import mixed_precision
    from gpubackend.kernel_check import compare

    report = gpubackend.probe()
    if not report.usable(path):
        pytest.skip(f"{path} is not usable here: {report.paths[path].reason}")
    rng = np.random.default_rng(0)
    x = (1.0 + rng.uniform(-0.02, 0.02, (1, 8, 32, 32)) + rng.uniform(-0.01, 0.01, (1, 8, 1, 1))).astype(np.float32)
    want = gpubackend.Session(_channel_gate_model(), path="cpu", cpu_engine="numpy").run({"x": x})[0]
    with gpubackend.Session(_channel_gate_model(), path=path, precision="fp16", fallback=False) as sess:
        assert compare(sess.run({"x": x})[0], want) < 5e-3
        assert "mixed precision: 4 of 5 activations kept fp32" in sess.explain(), sess.explain()
    monkeypatch.setattr(mixed_precision, "SMALL_TENSOR_ELEMENTS", 0)
    with gpubackend.Session(_channel_gate_model(), path=path, precision="fp16", fallback=False) as sess:
        assert compare(sess.run({"x": x})[0], want) > 2e-2
        assert "every activation in fp16" in sess.explain()


def test_gles2_stores_the_kept_gate_as_fp32_texels_and_nan_inf_travel() -> None:
    """gles2 under fp16: the pooled mean and the gate (8 values each) are RGBA8 textures of one
    fp32 per texel (pack 1), x and y two fp16 per texel (pack 2), and every generated kernel reads
    and writes them in that format. A NaN and a +Inf in x travel through the kept fp32 tensors
    as on the CPU: the NaN makes its channel's mean and gate NaN (the whole plane NaN); the +Inf
    makes its channel's mean +Inf and the gate 1 (the plane x itself, +Inf where x is)."""
    from gpubackend.kernel_check import compare

    report = gpubackend.probe()
    if not report.usable("gles2"):
        pytest.skip(f"gles2 is not usable here: {report.paths['gles2'].reason}")
    rng = np.random.default_rng(1)
    x = (1.0 + rng.uniform(-0.02, 0.02, (1, 8, 32, 32)) + rng.uniform(-0.01, 0.01, (1, 8, 1, 1))).astype(np.float32)
    x[0, 2, 5, 7] = np.nan
    x[0, 5, 1, 1] = np.inf
    cpu = gpubackend.Session(_channel_gate_model(), path="cpu", cpu_engine="numpy")
    want = cpu.run({"x": x})[0]
    with gpubackend.Session(_channel_gate_model(), path="gles2", precision="fp16", fallback=False) as sess:
        got = sess.run({"x": x})[0]
        (seg,) = sess._current.segments
        packs = {name: seg.layouts[name].pack for name in ("x", "m", "d", "z", "g", "y")}
        assert packs == {"x": 2, "m": 1, "d": 1, "z": 1, "g": 1, "y": 2}, packs
        assert "mixed precision: 4 of 5 activations kept fp32" in sess.explain(), sess.explain()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got) & (got > 0), np.isinf(want) & (want > 0))
    finite = np.isfinite(want)
    assert finite[0, 0].all() and not finite[0, 2].all() and not finite[0, 5].all()
    assert compare(np.where(finite, got, 0.0), np.where(finite, want, 0.0)) < 5e-3


def test_the_mixed_precision_policy_counts_bytes() -> None:
    import onnx

    from gpubackend import mixed_precision
    from gpubackend.model import to_graph

    graph = to_graph(onnx.load_from_string(_channel_gate_model()))
    keep = mixed_precision.fp32_tensors(graph.nodes, graph)
    assert set(keep) == {"m", "d", "z", "g"}
    # 4 x 8 fp32 values beside y's 8192 fp16 values
    assert mixed_precision.fp32_byte_share(graph.nodes, graph, keep) == pytest.approx(128 / (128 + 16384))


@pytest.mark.parametrize("path", ["gles3", "gles31", "vulkan"])
def test_fp16_storage_rounds_to_nearest(path: str) -> None:
    """A value stored in fp16 is the nearest fp16 value (ties to even) of x * 1.3 with 1.3 in fp32,
    as IEEE conversion gives. llvmpipe truncates fragment outputs written to RGBA16F (gles3 had 47%
    of these elements one ulp toward zero), a bias that compounded to 9.9e-2 on PP-OCRv6 det.
    gles31 / vulkan had 20% of them one ulp low because the constant 1.3 was stored in fp16
    (1.2998): binary.comp now reads constant operands as fp32 (their packHalf2x16 is exact)."""
    from onnx import numpy_helper

    report = gpubackend.probe()
    if not report.usable(path):
        pytest.skip(f"{path} is not usable here: {report.paths[path].reason}")
    shape = [1, 4, 32, 32]
    graph = helper.make_graph([helper.make_node("Mul", ["x", "k"], ["y"])], "scale",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
                              [numpy_helper.from_array(np.array(1.3, np.float32), "k")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()
    x = np.random.default_rng(0).uniform(-3, 3, shape).astype(np.float16).astype(np.float32)
    with gpubackend.Session(model, path=path, precision="fp16", fallback=False) as sess:
        got = sess.run({"x": x})[0]
    np.testing.assert_array_equal(got, (x * np.float32(1.3)).astype(np.float16).astype(np.float32))


def test_compute_mixed_plan_rewrites_the_kernels_around_a_kept_gate() -> None:
    """paths/compute_mixed.py on the channel gate: the pooled mean is written fp32 (Y32), the
    gate's kernels run as fp32 variants (under fp16-compute too), the final Mul reads the gate
    as an fp32 operand (B32 beside the fp16 x), and the segment's input and output stay fp16."""
    import onnx

    from gpubackend.model import to_graph
    from gpubackend.paths import compute_kernels as ck
    from gpubackend.paths import compute_mixed, fp16_compute

    graph = to_graph(onnx.load_from_string(_channel_gate_model()))
    records = [fp16_compute.mediump_record(r) for n in graph.nodes for r in ck.generate(n, graph, "fp16").payload]
    planned, kept = compute_mixed.plan(records, graph.nodes, graph, {"x", "y"}, "fp16")
    assert kept == {"m", "d", "z", "g"}
    defines = {r.node: dict(r.defines) for r in planned}
    assert defines["gap"].get("Y32") == 1 and defines["gap"].get("FP16") == 1
    for node in ("sub", "mul", "gate"):
        assert "FP16" not in defines[node] and "FP16_COMPUTE" not in defines[node], defines[node]
    assert defines["scale"].get("B32") == 1 and "A32" not in defines["scale"] and "FP16_COMPUTE" not in defines["scale"]
    assert compute_mixed.plan(records, graph.nodes, graph, {"x", "y"}, "fp32") == (records, set())


def test_compute_mixed_plan_keeps_a_layernorm_mean_in_fp32() -> None:
    """A LayerNorm written as ReduceMean / Sub (as PP-OCRv6 rec's): the mean is stored fp32 by
    reduce.comp (Y32) and read fp32 by the Sub (B32); the large tensors stay fp16."""
    from gpubackend.model import to_graph
    from gpubackend.paths import compute_kernels as ck
    from gpubackend.paths import compute_mixed

    nodes = [helper.make_node("ReduceMean", ["x"], ["m"], axes=[-1], keepdims=1, name="mean"),
             helper.make_node("Sub", ["x", "m"], ["y"], name="center")]
    graph = helper.make_graph(nodes, "ln", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64, 32])])
    g = to_graph(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))
    records = [r for n in g.nodes for r in ck.generate(n, g, "fp16").payload]
    planned, kept = compute_mixed.plan(records, g.nodes, g, {"x", "y"}, "fp16")
    assert kept == {"m"}
    defines = {r.node: dict(r.defines) for r in planned}
    assert defines["mean"].get("Y32") == 1 and defines["center"].get("B32") == 1
    assert all(d.get("FP16") == 1 for d in defines.values())


def test_every_variant_compute_mixed_can_emit_is_shipped() -> None:
    """compute_mixed turns fp16 records into fp32 variants (FP16 and the fp32-binding defines
    dropped) or adds A32 / B32 / Y32: the Vulkan path runs shipped SPIR-V only, so each such
    variant must be in the build list (a missing A32+B32 binary once sent a model off vulkan)."""
    from itertools import combinations
    from pathlib import Path

    from gpubackend.paths import compute_kernels as ck
    from gpubackend.paths import compute_mixed
    from gpubackend.shaders import build_spirv

    shipped = set(build_spirv.variants())
    for shader, defines in ck.variants():
        d = dict(defines)
        if d.get("FP16") != 1:
            continue
        fp32 = {k: v for k, v in d.items() if k not in compute_mixed._STORAGE_DEFINES}
        assert (Path(shader).name, build_spirv.normalize(fp32)) in shipped, (shader, fp32)
    for kernel, (_, names) in compute_mixed._MIXED.items():
        shader = f"compute/{kernel}.comp"
        bases = [dict(d) for s, d in ck.variants() if s == shader and dict(d).get("FP16") == 1
                 and not set(dict(d)) & set(names.values())]
        assert bases, shader
        for base in bases:
            for k in range(1, len(names) + 1):
                for wide in combinations(sorted(names.values()), k):
                    want = build_spirv.normalize({**base, **dict.fromkeys(wide, 1)})
                    assert (Path(shader).name, want) in shipped, (shader, want)
