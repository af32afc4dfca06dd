"""The driver-conformance suite (issue 9): the comparison, the matrix, the runner on cpu and on every
available GPU path, fault injection with verdicts, and the reports (JSON, JUnit, HTML in Chromium,
blocklist entries)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import onnx
import pytest

from gpubackend.conformance import (
    all_cases,
    blocklist_entries,
    compare,
    html_report,
    junit_xml,
    matrix,
    run_suite,
    select,
    summary_table,
)
from gpubackend.conformance.compare import Metrics
from gpubackend.conformance.runner import CaseResult, SuiteResult, Target

ROOT = Path(__file__).resolve().parents[1]
GPU_PATHS = ("vulkan", "gles31", "gles3", "gles2")
# A small cross-section of the quick matrix for the GPU and fault-injection tests: one case per
# main kernel family, cheap to compile on software drivers.
SUBSET = ("conv/k3x3_s1_d1_p1_g1/b1_c3to8_7x7,conv1x1/k1x1_s1_d1_p0_g1/b1_c5to3_1x1,"
          "depthwise/k3x3_s1_d1_p1_g8/b1_c8to8_9x9,binary/add/2x5x7x7_1x5x1x1,unary/relu/1x13x5x7,"
          "globalpool/globalaveragepool/1x13x7x9,pool/maxpool/k3_s2_p1111/1x5x9x9")


TINY_MODEL = (
    "import numpy as np, onnx\n"
    "from onnx import helper as h, numpy_helper as nh\n"
    "r = np.random.default_rng(3)\n"
    "W = lambda *s: nh.from_array((r.standard_normal(s) * 0.3).astype(np.float32), 'w%d' % len(inits))\n"
    "inits = []\n"
    "def w(*s):\n"
    "    t = W(*s); inits.append(t); return t.name\n"
    "nodes = [h.make_node('Conv', ['x', w(8, 3, 3, 3), w(8)], ['c1'], name='stem', pads=[1] * 4, strides=[2, 2]),\n"
    "         h.make_node('Relu', ['c1'], ['r1'], name='stem_relu'),\n"
    "         h.make_node('Conv', ['r1', w(8, 1, 3, 3), w(8)], ['d1'], name='dw', pads=[1, 1, 1, 1], group=8),\n"
    "         h.make_node('Relu', ['d1'], ['r2'], name='dw_relu'),\n"
    "         h.make_node('Conv', ['r2', w(5, 8, 1, 1)], ['p1'], name='project'),\n"
    "         h.make_node('GlobalAveragePool', ['p1'], ['g'], name='gap'),\n"
    "         h.make_node('Flatten', ['g'], ['f'], name='flat'),\n"
    "         h.make_node('Gemm', ['f', w(5, 4), w(4)], ['y'], name='fc')]\n"
    "g = h.make_graph(nodes, 'tiny', [h.make_tensor_value_info('x', 1, [1, 3, 16, 16])],\n"
    "                 [h.make_tensor_value_info('y', 1, [1, 4])], inits)\n"
    "m = h.make_model(g, opset_imports=[h.make_opsetid('', 17)]); m.ir_version = 8\n"
    "x = {'x': r.standard_normal((1, 3, 16, 16)).astype(np.float32)}\n"
)


def _env(tmp_path: Path, fault: str | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["GPUBACKEND_CACHE_DIR"] = str(tmp_path / "cache")
    env.pop("GPUBACKEND_PATH", None)
    if fault:
        env["GPUBACKEND_FAULT"] = fault
    else:
        env.pop("GPUBACKEND_FAULT", None)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _cli(args: list[str], env: dict[str, str], timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpubackend", "conformance", *args], env=env, capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT)


def _runnable_gpu_paths() -> list[str]:
    from capability_probe import probe

    report = probe()
    out = []
    for key in GPU_PATHS:
        try:
            from gpubackend.paths import path_module

            path_module(key)
        except Exception:  # noqa: BLE001 - not built
            continue
        v = report.paths.get(key)
        if v is not None and v.available:
            out.append(key)
    return out


# ---- comparison ----------------------------------------------------------------------------

def test_compare_tolerance_follows_precision_and_scale() -> None:
    want = np.array([1.0, -2.0, 1e4, 0.0], np.float32)
    assert compare(want, want, "fp32").passed
    m = compare(want + np.float32(1e-3), want, "fp32")  # 1e-3 absolute on a tensor of scale 1e4: inside
    assert m.passed and 0 < m.ratio < 1 and m.max_abs == pytest.approx(1e-3, rel=1e-2)
    off = want.copy()
    off[0] = 1.5
    m = compare(off, want, "fp32")
    assert not m.passed and m.bad == 1 and m.max_rel == pytest.approx(0.5)
    assert compare(want * np.float32(1.002), want, "fp16").passed
    assert not compare(want * np.float32(1.002), want, "fp32").passed


def test_compare_nonfinite_and_shapes() -> None:
    want = np.array([np.nan, np.inf, -np.inf, 1.0], np.float32)
    assert compare(want.copy(), want, "fp32").passed
    m = compare(np.array([0.0, np.inf, -np.inf, 1.0], np.float32), want, "fp32")
    assert not m.passed and m.bad == 1 and "NaN" in m.note
    m = compare(np.array([np.nan, np.inf, np.inf, 1.0], np.float32), want, "fp32")
    assert not m.passed and m.bad == 1
    m = compare(np.full(4, np.nan, np.float32), np.ones(4, np.float32), "fp32")
    assert m.bad == 4 and m.ratio == np.inf
    assert not compare(np.zeros((2, 3)), np.zeros((3, 2)), "fp32").passed
    assert compare(np.array([1, 2], np.int64), np.array([1, 2], np.int64), "fp32").passed


# ---- the matrix ----------------------------------------------------------------------------

def test_matrix_covers_the_driver_breaking_dimensions() -> None:
    full = matrix(full=True, limits={"gl": {"max_texture_size": 2048}})
    names = [c.name for c in full]
    assert len(names) == len(set(names))
    quick = [c for c in full if c.quick]
    assert 30 <= len(quick) < len(full)
    kernels = {c.kernel for c in quick}
    assert {"conv", "conv1x1", "depthwise", "convtranspose", "gemm", "matmul", "binary", "unary", "pool",
            "globalpool", "resize", "concat", "softmax", "pad", "layout"} <= kernels
    for s in ("_s2_", "_d2_", "_g2", "_same_", "_p0110_", "/b2_", "_1x1", "/nonfinite", "/large", "/tiny", "/mixed",
              "/relu6", "limit_relu_width2048"):
        assert any(s in n for n in names), s
    # conv names read kKxK_sS_dD_PAD_gG[...]: the stride, dilation, padding and group fields
    conv_combos = {tuple(c.name.split("/")[1].split("_")[1:5]) for c in full if c.kernel == "conv"}
    assert len(conv_combos) >= 2 * 2 * 4 * 2  # every stride x dilation x padding x group
    assert all(c.name.split("/")[1].split("_")[0] != "k1x1" for c in full if c.kernel == "conv")


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_quick_cases_build_valid_models(precision: str) -> None:
    for case in matrix(full=False):
        if not case.quick:
            continue
        data = case.build(precision)
        onnx.checker.check_model(data.model)
        feeds, expected = data.runs[0]
        assert expected and all(e.size for e in expected), case.name
        if "nonfinite" in case.tags:
            assert not all(np.isfinite(v).all() for v in feeds.values()), case.name
        if precision == "fp16":
            for v in feeds.values():
                if v.dtype == np.float32:
                    assert np.array_equal(v.astype(np.float16).astype(np.float32), v, equal_nan=True), case.name
    again = matrix(full=False)[0].build(precision).runs[0][0]
    first = matrix(full=False)[0].build(precision).runs[0][0]
    assert all(np.array_equal(again[k], first[k]) for k in first)  # seeded


def test_select_patterns() -> None:
    cases = matrix(full=False)
    assert all("depthwise" in c.name for c in select(cases, "depthwise"))
    # a pattern is a substring: the int8 kernels conv1x1_q8 and gemm_q8 match too
    assert {c.kernel for c in select(cases, "conv1x1,gemm")} == {"conv1x1", "gemm", "conv1x1_q8", "gemm_q8"}
    assert all(c.name.startswith("binary/add") for c in select(cases, "binary/add*"))
    assert select(cases, None) == cases


# ---- the runner ----------------------------------------------------------------------------

def test_cpu_self_check_quick_passes() -> None:
    """The cpu path is its own reference: this checks the harness, not a driver."""
    result = run_suite(["cpu"], ["fp32", "fp16"], full=False, node_tests=False)
    rows = result.summary()
    assert [r["path"] for r in rows] == ["cpu", "cpu"]
    assert result.ok, summary_table(result)
    assert all(r["passed"] == r["cases"] for r in rows)
    assert "PASSED" in summary_table(result)


def test_interrupted_run_keeps_partial_results() -> None:
    def progress(done: int, total: int, target: str, case: str, failures: int) -> None:
        if done == 3:
            raise KeyboardInterrupt

    result = run_suite(["cpu"], ["fp32"], pattern="conv", node_tests=False, progress=progress)
    assert result.interrupted and not result.ok and len(result.results) == 3
    assert "INTERRUPTED" in summary_table(result) and result.to_dict()["interrupted"]


def test_cpu_node_tests_are_included() -> None:
    cases = all_cases(full=False, node_tests=True)
    onnx_cases = [c for c in cases if c.kernel == "onnx"]
    assert len(onnx_cases) > 50 and all(c.name.startswith("onnx/test_") for c in onnx_cases)
    result = run_suite(["cpu"], ["fp32"], cases=select(onnx_cases, "onnx/test_conv_,onnx/test_relu,onnx/test_add"))
    assert result.results and result.ok, summary_table(result)


def test_unbuilt_or_unavailable_paths_are_reported_not_failed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUBACKEND_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("GPUBACKEND_DISABLE", "gles2")
    from capability_probe import runner

    runner.clear_memo()
    try:
        result = run_suite(["gles2"], ["fp32"], cases=select(matrix(), "unary/relu/1x13"))
    finally:
        runner.clear_memo()
    assert result.ok
    assert result.targets[0].status in ("unavailable", "not built")
    assert [r.status for r in result.results] == ["unsupported"]


@pytest.mark.parametrize("key", GPU_PATHS)
def test_gpu_path_subset_passes(key: str) -> None:
    """A cross-section of the quick matrix at fp32 on every GPU path available here."""
    if key not in _runnable_gpu_paths():
        pytest.skip(f"{key} is not built or not available here")
    result = run_suite([key], ["fp32"], pattern=SUBSET, node_tests=False)
    assert result.ok, summary_table(result)


@pytest.mark.slow
@pytest.mark.parametrize("key", GPU_PATHS)
def test_gpu_path_quick_passes(key: str, tmp_path: Path) -> None:
    """The whole ``--quick`` run, as CI runs it, on every GPU path available here."""
    if key not in _runnable_gpu_paths():
        pytest.skip(f"{key} is not built or not available here")
    proc = _cli(["--quick", "--paths", key, "--json", str(tmp_path / "r.json")], _env(tmp_path), timeout=1800)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


# ---- fault injection and verdicts ----------------------------------------------------------

def test_fault_syntax_kernel_filter() -> None:
    from capability_probe import faults

    assert faults.parse_items("wrong@gles3:depthwise+conv, nan@vulkan") == [
        ("wrong", "gles3", frozenset({"depthwise", "conv"})), ("nan", "vulkan", frozenset())]
    assert faults.parse("wrong@gles3:depthwise") == [("wrong", "gles3")]
    old = os.environ.get("GPUBACKEND_FAULT")
    os.environ["GPUBACKEND_FAULT"] = "wrong@gles3:depthwise"
    try:
        assert not faults.active("wrong", "gles3")
        with faults.kernel_scope(["conv"]):
            assert not faults.active("wrong", "gles3")
        with faults.kernel_scope(["depthwise"]):
            assert faults.active("wrong", "gles3") and not faults.active("wrong", "gles2")
    finally:
        if old is None:
            os.environ.pop("GPUBACKEND_FAULT", None)
        else:
            os.environ["GPUBACKEND_FAULT"] = old


@pytest.mark.slow
def test_faults_fail_exactly_the_faulty_paths(tmp_path: Path) -> None:
    """wrong@gles3, nan@vulkan, compile@gles2: failures on exactly those paths, non-zero exit, the
    verdict written; then sessions on this driver still compute correct outputs."""
    paths = _runnable_gpu_paths()
    faulty = [p for p in ("gles3", "vulkan", "gles2") if p in paths]
    if not faulty:
        pytest.skip("none of gles3, vulkan, gles2 is available here")
    env = _env(tmp_path, "wrong@gles3,nan@vulkan,compile@gles2")
    report = tmp_path / "r.json"
    proc = _cli(["--quick", "--paths", ",".join(paths), "--precision", "fp32", "-k", SUBSET, "--no-node-tests",
                 "--json", str(report), "--write-verdict", "--html", str(tmp_path / "r.html"),
                 "--blocklist-entry", str(tmp_path / "bl.json")], env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    data = json.loads(report.read_text())
    failing = {r["path"] for r in data["results"] if r["status"] in ("failed", "error")}
    assert failing == set(faulty), proc.stdout
    assert set(data["verdicts_written"]) == set(paths)
    for key in faulty:
        assert data["verdicts_written"][key], key
    entries = json.loads((tmp_path / "bl.json").read_text())["entries"]
    assert entries and all(e["disable"] for e in entries)
    # A following session, with the faults still present, still computes correct outputs.
    code = TINY_MODEL + (
        "import gpubackend\n"
        "ref = gpubackend.Session(m, path='cpu', cpu_engine='numpy').run(x)[0]\n"
        "rep = gpubackend.probe()\n"
        f"print({faulty!r}, [rep.paths[k].disabled_kernels for k in {faulty!r}])\n"
        "for p in ['auto'] + " + repr(faulty) + ":\n"
        "    s = gpubackend.Session(m, path=p)\n"
        "    out = s.run(x)[0]\n"
        "    assert np.allclose(out, ref, rtol=1e-3, atol=1e-4), (p, s.explain())\n"
        "    print(p, 'ok', sorted(set(s.placement.values())))\n")
    run = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout + run.stderr


@pytest.mark.slow
def test_verdict_disables_only_the_failing_kernel(tmp_path: Path) -> None:
    """wrong@gles3:depthwise: the suite finds depthwise failing on gles3 and only it; after
    --write-verdict a gles3 session runs the depthwise nodes on cpu, the rest on gles3, says why,
    and its outputs are correct although the fault is still there."""
    if "gles3" not in _runnable_gpu_paths():
        pytest.skip("gles3 is not available here")
    env = _env(tmp_path, "wrong@gles3:depthwise")
    proc = _cli(["--quick", "--paths", "gles3", "--precision", "fp32", "-k", SUBSET, "--no-node-tests",
                 "--json", str(tmp_path / "r.json"), "--write-verdict"], env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["failed_kernels"]["gles3"] == ["depthwise"], proc.stdout
    assert data["verdicts_written"] == {"gles3": ["depthwise"]}
    code = TINY_MODEL + (
        "import gpubackend\n"
        "ref = gpubackend.Session(m, path='cpu', cpu_engine='numpy').run(x)[0]\n"
        "s = gpubackend.Session(m, path='gles3')\n"
        "out = s.run(x)[0]\n"
        "from gpubackend.paths import path_module\n"
        "from collections import Counter\n"
        "g = s._current.graph\n"
        "kn = {n.name: path_module('gles3').kernel_name(n, g) for n in g.nodes}\n"
        "cpu = {n for n, k in s.placement.items() if k == 'cpu'}\n"
        "dw = {n for n, k in kn.items() if k == 'depthwise'}\n"
        "print(Counter(s.placement.values()), len(dw))\n"
        "print(s.explain())\n"
        "assert dw and dw <= cpu, (dw, cpu)\n"
        "assert any(k == 'gles3' for k in s.placement.values())\n"
        "assert all(kn.get(n) == 'depthwise' or n not in kn for n in cpu), cpu - dw\n"
        "assert 'depthwise' in s.explain()\n"
        "assert np.allclose(out, ref, rtol=1e-3, atol=1e-4), float(np.abs(out - ref).max())\n")
    run = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout + run.stderr


@pytest.mark.slow
def test_isolate_survives_a_crash_and_a_hang(tmp_path: Path) -> None:
    """--isolate: a SIGSEGV in one kernel and a hang in another cost those cases, not the run."""
    paths = [p for p in ("gles2", "gles3") if p in _runnable_gpu_paths()]
    if len(paths) < 2:
        pytest.skip("needs gles2 and gles3")
    env = _env(tmp_path, "crash@gles2:depthwise,hang@gles3:conv1x1")
    proc = _cli(["--isolate", "--case-timeout", "20", "--paths", "gles2,gles3", "--precision", "fp32", "-k", SUBSET,
                 "--no-node-tests", "--json", str(tmp_path / "r.json")], env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    data = json.loads((tmp_path / "r.json").read_text())
    bad = {(r["path"], r["family"]): r["reason"] for r in data["results"] if r["status"] in ("failed", "error")}
    assert set(bad) == {("gles2", "depthwise"), ("gles3", "conv1x1")}, bad
    assert "SIGSEGV" in bad[("gles2", "depthwise")] and "hang" in bad[("gles3", "conv1x1")]
    assert sum(r["status"] == "passed" for r in data["results"]) == 2 * len(SUBSET.split(",")) - 2


# ---- reports -------------------------------------------------------------------------------

def _synthetic_result() -> SuiteResult:
    fp = {"gl": {"vendor": "Mesa/X.org", "renderer": "llvmpipe (LLVM 15.0.6, 256 bits)", "driver": "Mesa",
                 "driver_version": "22.3.6", "version": "OpenGL ES 3.2 Mesa 22.3.6"}}
    targets = [Target("gles3", "fp32"), Target("gles2", "fp32", "unavailable", "probe: no context")]
    results = [
        CaseResult("conv/a", "gles3", "fp32", "conv", "Conv", "passed", ["conv"],
                   metrics=Metrics(1e-6, 1e-5, 0.01, 0, 90), run_ms=1.5),
        CaseResult("depthwise/<b>", "gles3", "fp32", "depthwise", "Conv", "failed", ["depthwise"],
                   "12 of 90 element(s) out of tolerance", Metrics(0.5, 1.0, 5e3, 12, 90), run_ms=2.0),
        CaseResult("unary/nan", "gles3", "fp32", "unary", "Relu", "error", ["unary"], "ShaderCompileError: boom"),
        CaseResult("layout/t", "gles3", "fp32", "layout", "Transpose", "unsupported", [], "no kernel"),
        CaseResult("conv/a", "gles2", "fp32", "conv", "Conv", "unsupported", [], "unavailable: probe: no context"),
    ]
    return SuiteResult("quick", targets, results, "2026-11-21T19:00:00+00:00", 3.0, {"fingerprint": fp})


def test_summary_junit_and_blocklist_from_a_failing_report() -> None:
    result = _synthetic_result()
    text = summary_table(result)
    assert "FAILED (2 failing case(s))" in text and "depthwise/<b>" in text and "gles2" in text
    data = result.to_dict()
    assert data["failed_kernels"] == {"gles3": ["depthwise", "unary"]}
    root = ET.fromstring(junit_xml(data))
    assert root.get("tests") == "5" and root.get("failures") == "1" and root.get("errors") == "1"
    assert root.get("skipped") == "2"
    bl = blocklist_entries(data)
    (entry,) = bl["entries"]
    assert entry["api"] == "gl" and entry["disable"] == ["gles3:depthwise", "gles3:unary"]
    from capability_probe import blocklist
    from capability_probe.report import PathVerdict, ProbeReport

    rep = ProbeReport({"gles3": PathVerdict("gles3", True, True)}, fingerprint=data["fingerprint"])
    assert blocklist.entry_matches(entry, data["fingerprint"]["gl"])
    blocklist.apply(rep, [entry])
    assert rep.paths["gles3"].disabled_kernels == ["depthwise", "unary"] and rep.paths["gles3"].verified
    other = dict(data["fingerprint"]["gl"], driver_version="23.0.0")
    assert not blocklist.entry_matches(entry, other)


def test_html_report_renders_in_headless_chromium(tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    page.write_text(html_report(_synthetic_result().to_dict()), encoding="utf-8")
    text = page.read_text()
    assert "<svg" in text and "http://" not in text.replace("http://www.w3.org/2000/svg", "")  # self-contained
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("chromium is not installed")
    args = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]
    dom = subprocess.run(args + ["--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert 'id="failures"' in dom.stdout and "depthwise/&lt;b&gt;" in dom.stdout
    assert 'class="fail"' in dom.stdout and "FAILED" in dom.stdout
    shot = tmp_path / "shot.png"
    subprocess.run(args + [f"--screenshot={shot}", "--window-size=1200,900", page.as_uri()], capture_output=True,
                   text=True, timeout=120)
    assert shot.is_file() and shot.stat().st_size > 10_000
    from PIL import Image

    img = np.asarray(Image.open(shot).convert("RGB")).astype(int)
    reddish = (img[..., 0] > 230) & (img[..., 1] < 230) & (img[..., 2] < 230) & (img[..., 0] - img[..., 1] > 10)
    assert reddish.sum() > 500  # the highlighted failure rows and the red badge are drawn


# ---- the command and the pytest entry ------------------------------------------------------

def test_cli_help_list_and_cpu_run(tmp_path: Path) -> None:
    from gpubackend.cli import build_parser

    parser = build_parser()
    args = parser.parse_args(["conformance", "--full", "--paths", "gles3,cpu", "--precision", "fp16", "-k", "x"])
    assert args.full and args.paths == ["gles3", "cpu"] and args.precision == ["fp16"] and args.pattern == "x"
    env = _env(tmp_path)
    proc = _cli(["--quick", "--paths", "cpu", "--precision", "fp32", "--no-node-tests", "-k", "conv1x1",
                 "--json", str(tmp_path / "r.json"), "--junit", str(tmp_path / "r.xml"), "--html",
                 str(tmp_path / "r.html")], env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "cpu" in proc.stdout and "PASSED" in proc.stdout
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["ok"] and data["probe"]["paths"] and "tolerances" in data
    assert all(r["status"] == "passed" and r["case"].startswith("conv1x1/") for r in data["results"])
    assert ET.parse(tmp_path / "r.xml").getroot().get("failures") == "0"
    proc = _cli(["--from-report", str(tmp_path / "r.json"), "--html", str(tmp_path / "again.html")], env)
    assert proc.returncode == 0 and (tmp_path / "again.html").read_text().startswith("<!DOCTYPE html>")


def test_pytest_entry_point_runs(tmp_path: Path) -> None:
    env = _env(tmp_path)
    env.update(GPUBACKEND_CONFORMANCE_PATHS="cpu", GPUBACKEND_CONFORMANCE_PRECISIONS="fp32",
               GPUBACKEND_CONFORMANCE_NODE_TESTS="0")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--pyargs",
                           "gpubackend.conformance", "-k", "conv1x1 or relu"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout


def test_full_runs_one_zoo_model_per_family_end_to_end() -> None:
    """--full adds whole zoo models (tag "model"), run through a Session with fallback against onnxruntime."""
    from gpubackend.conformance.cases import ZOO_FAMILIES

    models = [c for c in all_cases(full=True, node_tests=False) if "model" in c.tags]
    assert sorted(c.op for c in models) == sorted(ZOO_FAMILIES.values())
    assert not any("model" in c.tags for c in all_cases(full=False, node_tests=False))
    result = run_suite(["gles2"], ["fp32"], full=True, pattern="model/face/", node_tests=False)
    (res,) = result.results
    assert res.status == "passed", summary_table(result)
    assert res.kernels == ["24/24 nodes on gles2"]
    assert not result.failed_kernels().get("gles2")
