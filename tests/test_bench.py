"""gpubackend bench: statistics on known data, FLOP/byte accounting, the measured-choice cache,
the microbenchmarks, and the CLI end to end on a small model (JSON fields, plot, profile)."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import numpy as np
import onnx
import pytest
from models import mobilenet_v2_like

from gpubackend.bench import choice, micro, roofline, stats
from gpubackend.bench.runner import make_inputs
from gpubackend.cli import main
from gpubackend.model import to_graph


# ---- statistics ---------------------------------------------------------------------------------
def test_percentile_interpolates_linearly():
    xs = [4.0, 1.0, 3.0, 2.0]
    assert stats.percentile(xs, 0) == 1.0
    assert stats.percentile(xs, 100) == 4.0
    assert stats.percentile(xs, 50) == pytest.approx(2.5)
    assert stats.percentile(xs, 90) == pytest.approx(3.7)
    data = list(np.random.default_rng(1).standard_normal(101))
    for q in (1, 10, 50, 90, 99):
        assert stats.percentile(data, q) == pytest.approx(float(np.percentile(data, q)))


def test_summarize_known_data():
    s = stats.summarize(range(1, 101))
    assert s["n"] == 100 and s["min"] == 1 and s["max"] == 100
    assert s["p50"] == pytest.approx(50.5)
    assert s["p90"] == pytest.approx(90.1)
    assert s["p99"] == pytest.approx(99.01)
    assert s["mean"] == pytest.approx(50.5)
    assert s["std"] == pytest.approx(math.sqrt(sum((x - 50.5) ** 2 for x in range(1, 101)) / 99))
    assert stats.summarize([3.0])["std"] == 0.0
    assert set(s) == set(stats.SUMMARY_KEYS)


def test_summarize_rejects_empty_and_ratio_guards():
    with pytest.raises(ValueError):
        stats.summarize([])
    with pytest.raises(ValueError):
        stats.percentile([1.0], 101)
    assert stats.ratio(3.0, 2.0) == 1.5
    assert stats.ratio(3.0, None) is None and stats.ratio(3.0, 0.0) is None


# ---- roofline ----------------------------------------------------------------------------------------
def _conv_model() -> onnx.ModelProto:
    from onnx import TensorProto, helper, numpy_helper

    w = np.zeros((8, 4, 3, 3), np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Flatten", ["c"], ["f"], name="flat"),
             helper.make_node("Gemm", ["f", "g"], ["y"], name="gemm")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 6, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
                              [numpy_helper.from_array(w, "w"),
                               numpy_helper.from_array(np.zeros((288, 10), np.float32), "g")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_node_costs_count_flops_and_bytes():
    costs = roofline.graph_costs(to_graph(_conv_model()))
    conv, gemm = costs["conv"], costs["gemm"]
    assert conv.flops == 2 * (8 * 6 * 6) * (4 * 3 * 3)
    assert conv.bytes == 4 * (4 * 36 + 8 * 4 * 9 + 8 * 36)
    assert gemm.flops == 2 * 10 * 288 and gemm.kind == "gemm"
    peak = micro.Peak("x", gflops=100.0, gbytes=10.0)  # ridge at 10 FLOP/byte
    p = roofline.point(conv, 1e-6, peak)
    assert p.bound == ("compute" if conv.intensity >= 10 else "memory")
    assert p.gflops == pytest.approx(conv.flops / 1e-6 / 1e9)
    assert p.frac_flops == pytest.approx(p.gflops / 100.0)


# ---- measured choice -----------------------------------------------------------------------------------
def _report(usable: set[str], fingerprint: str = "driver-a") -> SimpleNamespace:
    return SimpleNamespace(fingerprint={"gl": fingerprint}, usable=lambda k: k == "cpu" or k in usable)


def test_measured_choice_reads_only_what_was_recorded(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUBACKEND_CACHE_DIR", str(tmp_path))
    model = b"model-bytes"
    rep = _report({"gles31", "vulkan"})
    assert choice.measured_choice(model, rep) is None
    choice.record_measurement(model, rep, {"cpu": 0.010, "gles31": 0.004, "vulkan": 0.006, "onnxruntime": 0.001})
    path, reason = choice.measured_choice(model, rep)
    assert path == "gles31" and "measured" in reason and "onnxruntime" not in reason
    # gles31 no longer verified: the next fastest usable one, saying why
    path, reason = choice.measured_choice(model, _report({"vulkan"}))
    assert path == "vulkan" and "gles31" in reason
    assert choice.measured_choice(model, _report({"gles31"}, "driver-b")) is None  # another driver
    assert choice.measured_choice(b"other", rep) is None  # another model
    assert choice.measured_choice(model, rep, precision="fp16") is None


# ---- microbenchmarks ---------------------------------------------------------------------------------------
def test_cpu_peaks_are_positive():
    p = micro.cpu_peak(repeats=1, n=128, mbytes=4)
    assert p.gflops > 0 and p.gbytes > 0 and p.ridge > 0


@pytest.mark.parametrize("path", ["gles31", "vulkan", "gles3", "gles2"])
def test_gpu_peaks(path):
    import gpubackend

    if not gpubackend.probe().paths.get(path) or not gpubackend.probe().paths[path].available:
        pytest.skip(f"{path} not available here")
    p = micro.measure_peak(path, repeats=1)
    assert not p.error, p.error
    assert p.gflops > 0 and p.gbytes > 0


def test_spirv_shipped_beside_sources():
    for name in ("fma", "copy"):
        data = (micro.shader_dir() / f"{name}.spv").read_bytes()
        assert int.from_bytes(data[:4], "little") == 0x07230203


# ---- the CLI end to end ----------------------------------------------------------------------------------------
def test_cli_bench_small_model(tmp_path, capsys):
    model = tmp_path / "small.onnx"
    onnx.save(mobilenet_v2_like(size=32, classes=10), model)
    out_json, out_png = tmp_path / "bench.json", tmp_path / "bench.png"
    rc = main(["bench", str(model), "--paths", "cpu", "--runs", "3", "--warmup", "1", "--compare", "onnxruntime",
               "--profile", "--json", str(out_json), "--plot", str(out_png), "--record"])
    assert rc == 0
    text = capsys.readouterr()
    assert "p50/ort" in text.out and "profile cpu" in text.out and "top node" in text.out
    assert "%" in text.err  # the progress bar
    result = json.loads(out_json.read_text())
    cpu = result["paths"]["cpu"]
    assert set(cpu["latency_ms"]) == set(stats.SUMMARY_KEYS) and cpu["latency_ms"]["n"] == 3
    assert len(cpu["samples_ms"]) == 3
    for key in ("cold", "warm"):
        assert cpu[key]["create_s"] > 0 and cpu[key]["first_run_s"] > 0, cpu[key]
    assert cpu["warm_over_cold"] > 0 and cpu["first_run_s"] > 0
    assert cpu["p50_over_onnxruntime"] > 0 and result["paths"]["onnxruntime"]["p50_over_onnxruntime"] == 1.0
    assert cpu["max_abs_err"] < 1e-3
    # with onnxruntime installed "cpu" runs on it, and the NumPy engine is timed beside it
    assert cpu["engine"] == "onnxruntime" and result["options"]["cpu_engines"] == ["cpu:numpy"]
    numpy_engine = result["paths"]["cpu:numpy"]
    assert numpy_engine["kind"] == "engine" and numpy_engine["engine"] == "numpy"
    assert numpy_engine["latency_ms"]["n"] == 3 and numpy_engine["max_abs_err"] < 1e-3
    prof = cpu["profile"]
    assert prof["timing"] == "host" and prof["by_op_ms"]["Conv"] > 0 and len(prof["top_nodes"]) == 10
    assert "upload_bytes" in prof["transfers"]
    assert result["model"]["gflop"] > 0 and "loadavg" in result["machine"]
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with open(model, "rb") as fh:
        data = fh.read()
    import gpubackend

    got = choice.measured_choice(data, gpubackend.probe())
    assert got is not None and got[0] == "cpu"


def test_cli_rejects_bad_options(capsys):
    with pytest.raises(SystemExit):
        main(["bench", "x.onnx", "--paths", "metal"])
    assert main(["bench", "does-not-exist.onnx", "--no-cold", "--quiet"]) == 1


def test_make_inputs_shapes():
    feeds = make_inputs(mobilenet_v2_like(size=32, classes=10))
    (x,) = feeds.values()
    assert x.shape == (1, 3, 32, 32) and x.dtype == np.float32


def test_large_kernel_models_are_float32_and_costed():
    from gpubackend.bench import kernels
    from gpubackend.model import load_model

    for label, build in kernels.KERNELS.items():
        proto = load_model(build())
        assert all(i.data_type == onnx.TensorProto.FLOAT for i in proto.graph.initializer), label
        (cost,) = roofline.graph_costs(to_graph(proto)).values()
        assert cost.flops > 1e8 and cost.intensity > 10, label  # large: compute-bound on any peak ratio here


def test_roofline_targets_per_path():
    from gpubackend.bench import kernels, report

    assert "gles3" in kernels.SWEEP_PATHS
    rows = [{"path": "gles3", "kernel": "matmul 512^3", "frac_flops": 0.25},
            {"path": "vulkan", "kernel": "matmul 512^3", "frac_flops": 0.25},
            {"path": "cpu", "kernel": "matmul 512^3", "frac_flops": 0.9}]
    lines = report.target_lines({"paths": {}, "kernels": rows})
    assert "  gles3 matmul 512^3 >= 20% of FMA peak: met (25%)" in lines
    assert "  vulkan matmul 512^3 >= 30% of FMA peak: NOT met (25%)" in lines
    assert not any(ln.startswith("  cpu") for ln in lines)


def test_plot_main_combines_results(tmp_path):
    from gpubackend.bench import plot

    samples = [1.0, 1.2, 1.1]
    result = {"model": {"name": "m"}, "options": {"runs": 3},
              "paths": {"cpu": {"samples_ms": samples, "p50_over_onnxruntime": 2.0,
                                "profile": {"by_op_ms": {"Conv": 1.0, "Add": 0.1}}},
                        "onnxruntime": {"samples_ms": [0.5, 0.6, 0.55], "p50_over_onnxruntime": 1.0}}}
    files = []
    for i in range(2):
        f = tmp_path / f"r{i}.json"
        f.write_text(json.dumps(result))
        files.append(str(f))
    out = tmp_path / "both.png"
    assert plot.main([str(out), *files]) == 0
    assert out.read_bytes()[:4] == b"\x89PNG"


def test_session_auto_uses_the_recorded_measurement(tmp_path, monkeypatch):
    """auto on a software driver normally means cpu; a recorded measurement that a verified GPU
    path is fastest for this model moves auto there, and explain() says why."""
    import gpubackend

    monkeypatch.setenv("GPUBACKEND_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("GPUBACKEND_PREFER_SOFTWARE", raising=False)
    report = gpubackend.probe()
    gpu = next((k for k in ("gles31", "vulkan", "gles3", "gles2") if report.usable(k)), None)
    if gpu is None:
        pytest.skip("no verified GPU path on this machine")
    model = mobilenet_v2_like(size=32, classes=10)
    assert gpubackend.Session(model).path == ("cpu" if report.paths[gpu].software else report.preferred_path)
    choice.record_measurement(model.SerializeToString(), report, {"cpu": 0.010, gpu: 0.002})
    sess = gpubackend.Session(model)
    assert sess.path == gpu
    assert "measured" in sess.explain() and gpu in sess.explain()
    choice.record_measurement(model.SerializeToString(), report, {"cpu": 0.001, gpu: 0.002})
    assert gpubackend.Session(model).path == "cpu"
