"""The per-device tuning (gpubackend.tuning): every registered kernel variant computes the same
as the reference on gles31 and vulkan (so the tuning can only pick a tested variant), records
survive a reload, a corrupt record or file is ignored with a warning, and explain() names the
variant that ran and why."""

from __future__ import annotations

import json

import numpy as np
import pytest
from test_ops import CASES, KERNEL_CASES, Case, _check, _node, _u

import gpubackend
from gpubackend import fallback, tuning
from gpubackend.graph import Graph, Node
from gpubackend.paths import compute_kernels

# Awkward shapes for every blocking: channel counts not a multiple of 4 * CB, widths not a
# multiple of BX, batch 2, stride, dilation, groups, fused activations.
UNIT_CASES = {
    "conv": [
        _node("conv3x3_co21_w19_batch2_relu", "conv", "Conv", [_u(2, 5, 9, 19), _u(21, 5, 3, 3), _u(21)],
              {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "_act": ("Relu", {})}),
        _node("conv_grouped_strided_dilated_hardswish", "conv", "Conv", [_u(1, 6, 11, 23), _u(18, 2, 3, 3), _u(18)],
              {"kernel_shape": [3, 3], "group": 3, "strides": [2, 2], "dilations": [2, 2], "pads": [2, 1, 2, 1],
               "_act": ("HardSwish", {})}),
    ],
    "gemm": [
        _node("conv1x1_co19_rows70_clip", "conv1x1", "Conv", [_u(2, 10, 5, 7), _u(19, 10, 1, 1), _u(19)],
              {"kernel_shape": [1, 1], "_act": ("Clip", {"min": -0.2, "max": 0.5})}),
        _node("gemm_37x29x21_transb", "gemm", "Gemm", [_u(37, 29), _u(21, 29), _u(21)], {"transB": 1}),
        _node("matmul_const_2x5x7_18", "matmul", "MatMul", [_u(2, 5, 7), _u(7, 18)], {}),
    ],
    # Winograd F(2x2, 3x3) or the direct kernel on 3x3 stride-1 layers with enough channels: odd
    # output sizes (partial tiles), asymmetric pads, channels not a multiple of 4, batch 2
    "conv3x3": [
        _node("conv3x3_ci18_co21_h11_w13_batch2_relu", None, "Conv", [_u(2, 18, 11, 13), _u(21, 18, 3, 3),
                                                                               _u(21)],
              {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "_act": ("Relu", {})}),
        _node("conv3x3_ci16_co17_asymmetric_pads_no_bias_hardswish", None, "Conv",
              [_u(1, 16, 12, 11), _u(17, 16, 3, 3)], {"kernel_shape": [3, 3], "pads": [0, 2, 1, 0],
                                                     "_act": ("HardSwish", {})}),
    ],
    "reads": [
        _node("depthwise3x3_stride2_c10_w13_batch2_relu6", "depthwise", "Conv",
              [_u(2, 10, 9, 13), _u(10, 1, 3, 3), _u(10)],
              {"kernel_shape": [3, 3], "group": 10, "strides": [2, 2], "pads": [1, 1, 1, 1],
               "_act": ("Clip", {"min": 0.0, "max": 6.0})}),
        _node("depthwise5x5_dilated_c7_hardswish", "depthwise", "Conv", [_u(1, 7, 11, 10), _u(7, 1, 5, 5), _u(7)],
              {"kernel_shape": [5, 5], "group": 7, "dilations": [2, 1], "pads": [4, 2, 4, 2],
               "_act": ("HardSwish", {})}),
        _node("convtranspose2x2_stride2_ci6_co3_batch2_sigmoid", "convtranspose", "ConvTranspose",
              [_u(2, 6, 5, 7), _u(6, 3, 2, 2), _u(3)], {"kernel_shape": [2, 2], "strides": [2, 2],
                                                         "_act": ("Sigmoid", {})}),
        Case("resize_linear_half_pixel_c6_batch2", "Resize", {"mode": "linear"}, {"x": _u(2, 6, 5, 7)},
             {"roi": np.zeros(0, np.float32), "scales": np.array([1, 1, 2.0, 1.5], np.float32)},
             order=("x", "roi", "scales"), kernel="resize"),
        Case("maxpool3x3_stride2_pads_c6_batch2", "MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2],
                                                           "pads": [1, 0, 1, 1]}, {"x": _u(2, 6, 9, 8)}, kernel="pool"),
        Case("concat_channels_5_3_const", "Concat", {"axis": 1}, {"a": _u(1, 5, 4, 3)}, {"b": _u(1, 3, 4, 3)},
             order=("a", "b"), kernel="concat"),
        _node("convtranspose3x2_stride3x2_ci5_co10", "convtranspose", "ConvTranspose",
              [_u(1, 5, 4, 9), _u(5, 10, 3, 2), _u(10)], {"kernel_shape": [3, 2], "strides": [3, 2]}),
    ],
}
# The default tier runs each variant on the first case at fp32; the rest is slow (minutes on llvmpipe).
VARIANT_PARAMS = [pytest.param(unit, v.name, case, path, prec, id=f"{unit}-{v.name}-{case.id}-{path}-{prec}",
                               marks=() if (i == 0 and prec == "fp32") else pytest.mark.slow)
                  for unit, cases in UNIT_CASES.items() for v in tuning.variants(unit) for i, case in enumerate(cases)
                  for path in ("gles31", "vulkan") for prec in ("fp32", "fp16")]


@pytest.mark.parametrize("unit,variant,case,path,precision", VARIANT_PARAMS)
def test_every_variant_matches_the_reference(unit: str, variant: str, case: Case, path: str, precision: str) -> None:
    with tuning.forced(**{unit: variant}), tuning.recording() as seen:
        _check(case, path, precision)
    assert seen and {v for _, u, _, v in seen if u == unit} == {variant}


# The "loads" unit (Vulkan only: every fp32-storage kernel reads and writes its buffers as 64-bit
# words or as vec4s) on every op case that runs on Vulkan at fp32; the default tier takes one case
# per kernel (each shader's storage declarations differ), the rest is slow.
def _loads_params() -> list:
    out, seen = [], set()
    for case in CASES + KERNEL_CASES:
        if "vulkan" not in case.paths or "fp32" not in case.precisions or "vulkan" in case.declines:
            continue
        first = (case.kernel or case.op) not in seen
        seen.add(case.kernel or case.op)
        out += [pytest.param(case, v.name, id=f"{case.id}-{v.name}", marks=() if first else pytest.mark.slow)
                for v in tuning.variants("loads")]
    return out


@pytest.mark.parametrize("case,variant", _loads_params())
def test_every_loads_variant_matches_the_reference_on_vulkan(case: Case, variant: str) -> None:
    with tuning.forced(loads=variant), tuning.recording() as seen:
        _check(case, "vulkan", "fp32")
    assert {v for _, u, _, v in seen if u == "loads"} == {variant}


def test_lavapipe_reads_wide_and_explain_says_so() -> None:
    table = tuning.load("vulkan", gpubackend.probe().fingerprint)
    model = _conv_model()  # random weights: one model for every session
    with gpubackend.Session(model, path="cpu") as sess:
        want = sess.run({"x": X8})[0]
    with gpubackend.Session(model, path="vulkan", fallback=False) as sess:
        np.testing.assert_allclose(sess.run({"x": X8})[0], want, rtol=1e-5, atol=1e-5)
        wide = f"variant: loads wide x1 (default for {table.device_class})" in sess.explain()
        assert wide == (table.device_class == "lavapipe")
    with tuning.forced(loads="vec4"), gpubackend.Session(model, path="vulkan", fallback=False) as sess:
        np.testing.assert_allclose(sess.run({"x": X8})[0], want, rtol=1e-5, atol=1e-5)
        assert "variant: loads" not in sess.explain()


# A subgroup-broadcast (SG) kernel reads the weights other lanes loaded: with fewer pixels or rows
# than the 8 broadcasting lanes its workgroup must still hold 8 invocations, all active.
SG_SMALL = [("gemm", "px4cb4sg", _node("gemm_3x6x9_sg_fewer_rows_than_lanes", "gemm", "Gemm",
                                       [_u(3, 6), _u(6, 9), _u(9)], {})),
            ("conv", "bx4cb4sg", _node("conv3x3_2x3_sg_fewer_pixels_than_lanes", "conv", "Conv",
                                       [_u(1, 5, 2, 3), _u(9, 5, 3, 3), _u(9)], {"kernel_shape": [3, 3],
                                                                                "pads": [1, 1, 1, 1]}))]


@pytest.mark.parametrize("unit,variant,case", SG_SMALL, ids=[c.id for _, _, c in SG_SMALL])
def test_subgroup_variant_with_fewer_items_than_lanes(unit: str, variant: str, case: Case) -> None:
    with tuning.forced(**{unit: variant}):
        _check(case, "vulkan", "fp32")


# A STRIP variant (conv.comp's K3S) runs only on 3x3 undilated stride-1/2 layers: stride 2, a
# width that leaves a partial pixel block, and a plane smaller than one SG group of 8 lanes.
STRIP_CASES = [_node("conv3x3_stride2_w13_co10_strip", "conv", "Conv", [_u(1, 7, 9, 13), _u(10, 7, 3, 3), _u(10)],
                     {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "_act": ("Sigmoid", {})}),
               _node("conv3x3_2x3_strip_fewer_pixels_than_lanes", "conv", "Conv", [_u(1, 5, 2, 3), _u(9, 5, 3, 3),
                                                                                   _u(9)],
                     {"kernel_shape": [3, 3], "pads": [0, 1, 2, 1]})]


@pytest.mark.parametrize("variant", [v.name for v in compute_kernels.STRIP_VARIANTS])
@pytest.mark.parametrize("case", STRIP_CASES, ids=[c.id for c in STRIP_CASES])
@pytest.mark.parametrize("path", ["vulkan", pytest.param("gles31", marks=pytest.mark.slow)])
def test_strip_variant_on_3x3_layers(variant: str, case: Case, path: str) -> None:
    arrays = {**case.runtime, **case.consts}
    ins = [arrays[n] for n in case.order]
    out = fallback.run_node(case.op, ins, dict(case.attrs), case.opset)[0]
    node = Node("n", case.op, list(case.order), ["y"], dict(case.attrs))
    graph = Graph([node], list(case.runtime), ["y"], dict(case.consts),
                  {n: a.shape for n, a in arrays.items()} | {"y": out.shape},
                  {n: a.dtype for n, a in arrays.items()} | {"y": out.dtype}, case.opset,
                  {n: a.shape for n, a in case.runtime.items()})
    with tuning.forced(conv=variant):
        _, records = compute_kernels.generate(node, graph)
        _check(case, path, "fp32")
    assert dict(records[0].defines)["K3S"] == case.attrs.get("strides", [1])[0]


def test_every_registered_variant_is_tested() -> None:
    assert set(tuning.units()) == set(UNIT_CASES) | {"loads"}  # loads: every op case, below
    assert tuning.units()["loads"].paths == ("vulkan",) and _loads_params()
    for unit in UNIT_CASES:
        assert len(tuning.variants(unit)) >= 2


FP = {"gl": {"vendor": "Mesa/X.org", "renderer": "llvmpipe (LLVM 15.0.6, 256 bits)", "version": "OpenGL ES 3.2"},
      "vulkan": {"vendor": "Mesa", "renderer": "llvmpipe (LLVM 15.0.6, 256 bits)", "driver": "llvmpipe",
                 "source": "vulkaninfo"}}


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUBACKEND_CACHE_DIR", str(tmp_path))
    return tmp_path


def test_default_per_device_class(cache) -> None:
    assert tuning.device_class(FP["gl"]) == "llvmpipe"
    assert tuning.device_class(FP["vulkan"]) == "lavapipe"
    assert tuning.device_class({"renderer": "NVIDIA H100"}) == "gpu"
    table = tuning.load("gles31", FP)
    got = table.choose("conv", "k3x3 s1x1 d1x1 g1 ci64 co64 px16384")
    assert got.why == "default for llvmpipe" and got.variant == tuning.units()["conv"].default_for("llvmpipe")
    assert tuning.load("gles31", {}).choose("gemm", "x").why == "default"


def test_record_survives_a_reload_and_keys_on_path_and_driver(cache) -> None:
    table = tuning.load("vulkan", FP)
    tuning.store(table, "conv", "k3x3 c", "bx4cb4", {"bx8cb2": 2e-3, "bx4cb4": 1e-3})
    again = tuning.load("vulkan", FP)
    got = again.choose("conv", "k3x3 c")
    assert got.variant.name == "bx4cb4" and got.why.startswith("tuned 20")
    assert again.choose("conv", "other class").why == "default for lavapipe"
    assert tuning.load("gles31", FP).choose("conv", "k3x3 c").why == "default for llvmpipe"  # another path
    other = {"vulkan": dict(FP["vulkan"], renderer="llvmpipe (LLVM 16)")}
    assert tuning.load("vulkan", other).choose("conv", "k3x3 c").why == "default for lavapipe"  # another driver


def test_file_of_older_kernels_is_dropped_quietly(cache, recwarn) -> None:
    table = tuning.load("vulkan", FP)
    tuning.store(table, "conv", "a", "bx4cb4", {"bx4cb4": 1e-3})
    data = json.loads(tuning.tuning_file().read_text())
    assert data["version"] == tuning.FORMAT_VERSION
    data["version"] = tuning.FORMAT_VERSION - 1  # measured before the kernels changed
    tuning.tuning_file().write_text(json.dumps(data))
    assert tuning.load("vulkan", FP).choose("conv", "a").why == "default for lavapipe"
    assert not [w for w in recwarn if issubclass(w.category, tuning.TuningWarning)]
    data["version"] = tuning.FORMAT_VERSION + 1  # a newer layout: unknown, with a warning
    tuning.tuning_file().write_text(json.dumps(data))
    with pytest.warns(tuning.TuningWarning, match="unknown layout"):
        assert tuning.load("vulkan", FP).choose("conv", "a").why == "default for lavapipe"


def test_corrupt_record_is_ignored_with_a_warning(cache) -> None:
    table = tuning.load("vulkan", FP)
    tuning.store(table, "conv", "a", "bx4cb4", {"bx4cb4": 1e-3})
    tuning.store(table, "conv", "b", "bx4cb2", {"bx4cb2": 1e-3})
    data = json.loads(tuning.tuning_file().read_text())
    recs = next(iter(data["drivers"].values()))["records"]
    recs["vulkan|conv|a"]["variant"] = "bx16cb1"  # edited without its hash
    tuning.tuning_file().write_text(json.dumps(data))
    with pytest.warns(tuning.TuningWarning, match="content hash"):
        loaded = tuning.load("vulkan", FP)
    assert loaded.choose("conv", "a").why == "default for lavapipe"
    assert loaded.choose("conv", "b").variant.name == "bx4cb2"  # the intact record still counts
    tuning.tuning_file().write_text("{not json")
    with pytest.warns(tuning.TuningWarning, match="unreadable"):
        assert tuning.load("vulkan", FP).choose("conv", "b").why == "default for lavapipe"


def test_record_of_a_removed_variant_falls_back_to_the_default(cache) -> None:
    table = tuning.load("vulkan", FP)
    tuning.store(table, "conv", "a", "bx4cb4", {"bx4cb4": 1e-3})
    table.records["vulkan|conv|a"]["variant"] = "bx99cb9"
    with pytest.warns(tuning.TuningWarning, match="no longer exists"):
        assert table.choose("conv", "a").why == "default for lavapipe"


def _conv_model() -> bytes:
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(_u(12, 8, 3, 3), "w")
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="c0", kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 10, 10])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 12, 10, 10])], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def _conv_line(variant: str, why: str) -> str:
    """explain()'s line for :func:`_conv_model`'s conv when ``variant`` was chosen untuned (a
    default or a device-wide record): narrowed to its 3 output blocks."""
    chosen = tuning.units()["conv"].variant(variant)
    assert chosen is not None
    fit = compute_kernels.narrowed("conv", chosen, 3)
    if fit is chosen:
        return f"variant: conv {variant} x1 ({why})"
    return f"variant: conv {fit.name} x1 ({why}, narrowed from {variant} to 3 output block(s))"


@pytest.mark.parametrize("path", ["gles31", "vulkan"])
def test_explain_names_the_tuned_variant(tmp_path, monkeypatch, path: str) -> None:
    monkeypatch.setattr(tuning, "tuning_file", lambda: tmp_path / "tuning.json")
    model = _conv_model()
    x = np.random.default_rng(0).standard_normal((1, 8, 10, 10)).astype(np.float32)
    table = tuning.load(path, gpubackend.probe().fingerprint)
    default = tuning.units()["conv"].default_for(table.device_class)  # lavapipe: bx4cb2
    fit = compute_kernels.narrowed("conv", default, 3)  # 12 output channels: 3 blocks of 4
    assert dict(fit.defines)["CB"] < dict(default.defines)["CB"]
    with gpubackend.Session(model, path=path, fallback=False) as sess:
        want = sess.run({"x": x})[0]
        assert (f"variant: conv {fit.name} x1 (default for {table.device_class}, narrowed from {default.name} "
                "to 3 output block(s))") in sess.explain()
    cls = "k3x3 s1x1 d1x1 g1 ci8 co16 px128"
    tuning.store(table, "conv", cls, "bx4cb4", {"bx4cb4": 1.0})
    with gpubackend.Session(model, path=path, fallback=False) as sess:
        got = sess.run({"x": x})[0]
        assert "variant: conv bx4cb4 x1 (tuned 20" in sess.explain()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_tune_command_stores_the_fastest_variant_and_sessions_use_it(tmp_path, monkeypatch, capsys) -> None:
    from gpubackend.bench.tune import distinct_variants
    from gpubackend.cli import main

    monkeypatch.setattr(tuning, "tuning_file", lambda: tmp_path / "tuning.json")
    model = tmp_path / "conv.onnx"
    model.write_bytes(_conv_model())
    assert main(["tune", str(model), "--path", "vulkan", "--rounds", "1", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["unit"], r["shape_class"], r["nodes"]) for r in rows] == [("conv", "k3x3 s1x1 d1x1 g1 ci8 co16 px128",
                                                                           ["c0"]), ("loads", "*", ["c0"])]
    row = rows[0]
    assert row["stored"] and set(row["seconds"]) == {v.name for v in distinct_variants(tuning.variants("conv"),
                                                                                           "vulkan")}
    assert row["best"] == min(row["seconds"], key=row["seconds"].get)
    table = tuning.load("vulkan", gpubackend.probe().fingerprint)  # what a later process reads
    assert table.choose("conv", row["shape_class"]).variant.name == row["best"]
    with gpubackend.Session(str(model), path="vulkan", fallback=False) as sess:
        sess.run({"x": np.zeros((1, 8, 10, 10), np.float32)})
        assert f"variant: conv {row['best']} x1 (tuned 20" in sess.explain()


# ---- first-use tuning ---------------------------------------------------------------------------
def test_device_wide_record_serves_classes_without_their_own(cache) -> None:
    table = tuning.load("vulkan", FP)
    tuning.store(table, "conv", tuning.DEVICE_WIDE, "bx8cb2", {"bx8cb2": 1e-3, "bx4cb4sgk3": 2e-3})
    tuning.store(table, "conv", "k3x3 c", "bx4cb4", {"bx4cb4": 1e-3})
    again = tuning.load("vulkan", FP)
    assert again.choose("conv", "k3x3 c").why.startswith("tuned 20")  # the exact class first
    got = again.choose("conv", "any other class")
    assert got.variant.name == "bx8cb2" and got.why.startswith("measured at first use 20")
    assert again.first_use_pending() == ["gemm"]
    tuning.store(table, "gemm", tuning.DEVICE_WIDE, "px8cb2", {})
    tuning.store(table, "gemm", tuning.device_wide_class("rows<=16"), "px4cb4", {})
    again = tuning.load("vulkan", FP)
    assert again.choose("gemm", "ci1024 co256 rows1").variant.name == "px4cb4"  # a few-row kind of its own
    assert again.choose("gemm", "ci64 co64 rows1024").variant.name == "px8cb2"
    assert not again.first_use_pending()
    assert tuning.device_wide_lines(FP)[0] == ("kernel variants on vulkan: conv bx8cb2 (measured at first use "
                                               f"{got.why[-10:]}), conv3x3 winograd (default for lavapipe), "
                                               f"gemm px8cb2 (measured at first use "
                                               f"{got.why[-10:]}), gemm [rows<=16] px4cb4 (measured at first use "
                                               f"{got.why[-10:]}), loads wide (default for lavapipe), "
                                               "reads ssbo (default for lavapipe)")
    assert "loads" not in tuning.device_wide_lines(FP)[1]  # gles31: GL ES reads vec4s
    assert tuning.load("vulkan", FP, forced={"conv": "bx16cb1"}).choose("conv", "k3x3 c").why == "forced"


def test_first_use_variants_start_with_the_class_default() -> None:
    for unit, spec in tuning.units().items():
        for cls in ("lavapipe", "llvmpipe", "gpu"):
            timed = spec.first_use_for(cls)
            assert timed[0] == spec.default_for(cls) and len(set(timed)) == len(timed), (unit, cls)
            assert len(timed) >= 2 or not spec.first_use, (unit, cls)
    assert tuning.units()["reads"].first_use_for("llvmpipe") == (tuning.units()["reads"].variant("tex"),)
    with pytest.raises(ValueError, match="first-use"):
        tuning.register("bad", [tuning.Variant("a", ())], {"*": "a"}, first_use={"*": ("nope",)})


@pytest.fixture()
def fresh_tuning(tmp_path, monkeypatch):
    """A cache dir with this run's probe verdicts but no tuning file, first-use tuning on."""
    import shutil

    from capability_probe.cache import cache_dir

    gpubackend.probe()  # cached in this worker's cache dir: copied, so subprocesses need no probe
    for report in cache_dir().glob("probe-*.json"):
        shutil.copy(report, tmp_path)
    monkeypatch.setenv("GPUBACKEND_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("GPUBACKEND_TUNE", raising=False)
    return tmp_path / tuning.TUNING_FILE


def _device_wide(path: str) -> dict[str, dict]:
    data = json.loads(tuning.tuning_file().read_text())
    return {k: r for drv in data["drivers"].values() for k, r in drv["records"].items()
            if k.startswith(path + "|") and k.split("|")[2].startswith(tuning.DEVICE_WIDE)}


X8 = np.random.default_rng(0).standard_normal((1, 8, 10, 10)).astype(np.float32)


def test_first_use_measures_once_and_later_sessions_reuse_the_record(fresh_tuning) -> None:
    model = _conv_model()
    with gpubackend.Session(model, path="vulkan", fallback=False) as sess:
        want = sess.run({"x": X8})[0]
        first = sess.explain()
    records = _device_wide("vulkan")
    assert set(records) == {"vulkan|conv|*", "vulkan|gemm|*", "vulkan|gemm|* rows<=16"}
    table = tuning.load("vulkan", gpubackend.probe().fingerprint)
    for key, rec in records.items():
        timed = {v.name for v in tuning.units()[key.split("|")[1]].first_use_for(table.device_class)}
        assert set(rec["seconds"]) == timed and rec["variant"] == min(rec["seconds"], key=rec["seconds"].get)
    conv = records["vulkan|conv|*"]
    assert "vulkan: timed the kernel variants once for this device at first use" in first
    assert _conv_line(conv["variant"], f"measured at first use {conv['when'][:10]}") in first
    before = fresh_tuning.read_bytes()
    with gpubackend.Session(model, path="vulkan", fallback=False) as again:
        np.testing.assert_allclose(again.run({"x": X8})[0], want, rtol=1e-5, atol=1e-5)
        assert "timed the kernel variants" not in again.explain()
        assert _conv_line(conv["variant"], f"measured at first use {conv['when'][:10]}") in again.explain()
    assert fresh_tuning.read_bytes() == before  # read, not measured again


def test_first_use_keeps_the_session_options_of_the_model_to_the_model(fresh_tuning) -> None:
    from gpubackend.bench.tune import tune_device

    options = gpubackend.SessionOptions(free_dimension_overrides={"batch": 2}, kernel_check=True)
    rows = tune_device("gles31", gpubackend.probe().fingerprint, options, rounds=1, write=False)
    assert {(r["unit"], r["kind"]) for r in rows} == {("conv", ""), ("gemm", ""), ("gemm", "rows<=16")}
    assert not fresh_tuning.exists()


def test_tune_off_measures_nothing_and_runs_the_class_default(fresh_tuning, monkeypatch) -> None:
    options = gpubackend.SessionOptions(tune="off")
    with gpubackend.Session(_conv_model(), path="vulkan", fallback=False, options=options) as sess:
        sess.run({"x": X8})
        assert "(default for lavapipe, narrowed" in sess.explain() or "(default for gpu, narrowed" in sess.explain()
    monkeypatch.setenv("GPUBACKEND_TUNE", "off")  # the environment wins over the option's "auto"
    with gpubackend.Session(_conv_model(), path="vulkan", fallback=False) as sess:
        assert sess.options.tune == "off"
        sess.run({"x": X8})
    assert not fresh_tuning.exists()
    with pytest.raises(gpubackend.OptionError, match="tune must be"):
        gpubackend.SessionOptions(tune="always").resolved({})


def test_corrupt_device_wide_record_is_ignored_with_a_warning_and_measured_again(fresh_tuning) -> None:
    fp = gpubackend.probe().fingerprint
    table = tuning.load("gles31", fp)
    for unit in ("conv", "gemm"):
        tuning.store(table, unit, tuning.DEVICE_WIDE, tuning.units()[unit].variants[0].name, {})
    data = json.loads(fresh_tuning.read_text())
    next(iter(data["drivers"].values()))["records"]["gles31|conv|*"]["variant"] = "bx16cb1"  # edited, hash stale
    fresh_tuning.write_text(json.dumps(data))
    off = gpubackend.SessionOptions(tune="off")
    with pytest.warns(tuning.TuningWarning, match="content hash"):
        with gpubackend.Session(_conv_model(), path="gles31", fallback=False, options=off) as sess:
            sess.run({"x": X8})
            assert _conv_line("bx4cb4tex", "default for llvmpipe") in sess.explain()
    with pytest.warns(tuning.TuningWarning, match="content hash"):
        with gpubackend.Session(_conv_model(), path="gles31", fallback=False) as sess:
            sess.run({"x": X8})
            assert "gles31: timed the kernel variants once" in sess.explain()
    records = _device_wide("gles31")
    assert records["gles31|gemm|*"]["seconds"] == {}  # the intact record stands
    assert set(records["gles31|conv|*"]["seconds"]) == {"bx4cb4tex", "bx8cb2tex"}  # measured again
    tuning.load("gles31", fp)  # and verifies


_FIRST_USE_CHILD = """
import gpubackend, numpy as np
with gpubackend.Session({model!r}, path="vulkan", fallback=False) as s:
    s.run({{"x": np.zeros((1, 8, 10, 10), np.float32)}})
    print("MEASURED" if "timed the kernel variants once" in s.explain() else "REUSED")
"""


def test_concurrent_first_use_measures_once(fresh_tuning, tmp_path) -> None:
    import os
    import subprocess
    import sys
    from pathlib import Path

    model = tmp_path / "conv.onnx"
    model.write_bytes(_conv_model())
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    code = _FIRST_USE_CHILD.format(model=str(model))
    children = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [c.communicate(timeout=120) for c in children]
    assert [c.returncode for c in children] == [0, 0], [err[-2000:] for _, err in outs]
    assert sorted(out.strip().splitlines()[-1] for out, _ in outs) == ["MEASURED", "REUSED"]
    assert set(_device_wide("vulkan")) == {"vulkan|conv|*", "vulkan|gemm|*", "vulkan|gemm|* rows<=16"}  # verified


@pytest.mark.parametrize("ci,co,size,kernel", [(64, 64, 40, "conv_winograd"), (16, 16, 80, "conv_winograd"),
                                               (16, 16, 128, "conv"), (128, 32, 40, "conv"), (8, 8, 64, "conv"),
                                               (64, 64, 8, "conv")])
def test_untuned_3x3_layers_take_winograd_where_it_was_measured_faster(ci: int, co: int, size: int,
                                                                      kernel: str) -> None:
    node = Node("n", "Conv", ["x", "w"], ["y"], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]})
    graph = Graph([node], ["x"], ["y"], {"w": _u(co, ci, 3, 3)}, {"x": (1, ci, size, size), "y": (1, co, size, size)},
                  {"x": np.dtype(np.float32), "y": np.dtype(np.float32)}, 13, {"x": (1, ci, size, size)})
    got = compute_kernels.generate(node, graph)
    assert not isinstance(got, str) and got.kernel == kernel
    with tuning.forced(conv3x3="winograd"):  # a tuned (exact) choice overrides the rule where Winograd applies
        forced = compute_kernels.generate(node, graph)
    assert forced.kernel == ("conv" if size < 10 or ci * co < 128 else "conv_winograd")


def test_tune_times_each_vulkan_binary_once() -> None:
    from gpubackend.bench.tune import distinct_variants

    gemm = tuning.variants("gemm")
    on_vulkan = [v.name for v in distinct_variants(gemm, "vulkan")]
    assert "px4cb4" in on_vulkan and "px4cb4tex" not in on_vulkan and "px4cb4sg" in on_vulkan
    assert len(on_vulkan) == len({(tuple(d for d in v.defines if d[0] not in ("TEXW", "TEXX")), v.local)
                                  for v in gemm})
    assert [v.name for v in distinct_variants(gemm, "gles31")] == [v.name for v in gemm]
