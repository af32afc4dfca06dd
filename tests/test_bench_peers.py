"""benchmarks/bench_peers.py: its pure parts (argument lists, the error measure, the interleaving, the
two tables), the parent side end to end on one small model with gpubackend's cpu path, and (slow) a
real peer in the peers' venv."""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load():
    spec = importlib.util.spec_from_file_location("bench_peers", ROOT / "benchmarks" / "bench_peers.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_peers"] = module
    spec.loader.exec_module(module)
    return module


bp = _load()


def test_parse_list_checks_names_and_allows_none():
    assert bp.parse_list("ncnn-cpu, opencv", list(bp.PEERS), "peer") == ["ncnn-cpu", "opencv"]
    assert bp.parse_list("none", list(bp.PEERS), "peer") == []
    assert bp.parse_list("", bp.PATHS, "path") == []
    with pytest.raises(argparse.ArgumentTypeError, match="unknown peer: tensorrt"):
        bp.parse_list("opencv,tensorrt", list(bp.PEERS), "peer")


def test_parser_defaults_and_unknown_names(capsys):
    args = bp.build_parser().parse_args([])
    assert args.peers == list(bp.PEERS)
    assert args.models == list(bp.MODELS)
    assert "vulkan" in args.paths and "cpu:numpy" in args.paths
    with pytest.raises(SystemExit):
        bp.build_parser().parse_args(["--paths", "cuda"])
    assert "unknown path: cuda" in capsys.readouterr().err


def test_rel_error_measure():
    ref = [np.array([[0.0, 4.0], [-2.0, 1.0]], dtype=np.float32)]
    assert bp.rel_error([ref[0].copy()], ref) == 0.0
    # scaled by max(1, max|ref|) = 4; the same values in another layout (NHWC vs NCHW with one channel)
    assert bp.rel_error([np.array([[[0.0], [4.0]], [[-2.0], [3.0]]])], ref) == pytest.approx(0.5)
    # below 1 the measure is absolute
    assert bp.rel_error([np.array([0.25])], [np.array([0.5])]) == pytest.approx(0.25)
    assert bp.rel_error([np.zeros(3)], ref) == float("inf")
    assert np.isnan(bp.rel_error([np.array([np.nan])], [np.array([1.0])]))


def test_time_interleaved_alternates_blocks():
    calls = []
    runners = {"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}
    times = bp.time_interleaved(runners, blocks=2, runs=3)
    assert [len(v) for v in times.values()] == [6, 6]
    assert calls == (["a"] * 4 + ["b"] * 4) * 2  # a settle run then the timed ones, per runner, per block


def test_summary_ratios():
    s = bp.summary([0.002, 0.004, 0.006], [0.001, 0.002, 0.003])
    assert s["onnxruntime_ms"] == pytest.approx(2.0)
    assert s["p50_ms"] == pytest.approx(4.0)
    assert s["ratio"] == pytest.approx(2.0)
    assert s["ratio_p90"] == pytest.approx(0.0056 / 0.002)  # p90 of 2, 4, 6 ms: 5.6 ms


def test_tables_split_by_issue():
    ok = {"ratio": 1.5, "ratio_p90": 1.75, "error": 2e-5, "onnxruntime_ms": 2.0}
    results = {"selfie": {"opencv": ok, "ncnn-vulkan": {"failed": "no Vulkan device"}, "cpu": ok, "vulkan": ok},
               "unet": {"opencv": ok, "cpu": ok, "vulkan": ok}}
    text = bp.tables(results, ["opencv", "mediapipe-gpu", "ncnn-vulkan"], ["cpu", "vulkan"])
    cpu_part, gpu_part = text.split("GPU runtimes")
    assert "| model | onnxruntime ms | opencv | cpu |" in cpu_part
    assert "| selfie | 2.00 | 1.50 (1.75) 2.0e-05 | 1.50 (1.75) 2.0e-05 |" in cpu_part
    assert "| model | onnxruntime ms | mediapipe-gpu | ncnn-vulkan | vulkan |" in gpu_part
    assert "| selfie | 2.00 | - | failed: no Vulkan device | 1.50 (1.75) 2.0e-05 |" in gpu_part
    assert "| unet | 2.00 | - | - | 1.50 (1.75) 2.0e-05 |" in gpu_part
    assert "GPU runtimes" not in bp.tables(results, ["opencv"], ["cpu"])


def test_missing_peers_venv_fails_clearly(tmp_path, capsys):
    missing = tmp_path / "nowhere" / "python"
    with pytest.raises(bp.PeerSetupError, match=r"setup\.sh --peers"):
        bp.main(["--models", "mobilenet", "--peers", "opencv", "--peers-python", str(missing)])


def test_parent_side_end_to_end_on_the_cpu_path(tmp_path):
    out_json, out_md = tmp_path / "r.json", tmp_path / "r.md"
    assert bp.main(["--models", "mobilenet", "--peers", "none", "--paths", "cpu:numpy", "--blocks", "1",
                    "--runs", "1", "--json", str(out_json), "--markdown", str(out_md)]) == 0
    row = json.loads(out_json.read_text())["results"]["mobilenet"]["cpu:numpy"]
    assert "failed" not in row, row
    assert row["error"] < 1e-4 and row["ratio"] > 0 and row["onnxruntime_ms"] > 0
    assert "| mobilenet |" in out_md.read_text()


@pytest.mark.slow
def test_real_peers_in_their_venv(tmp_path):
    """Needs ./setup.sh --peers: a missing .venv-peers fails here rather than skipping."""
    py = ROOT / ".venv-peers" / "bin" / "python"
    assert py.exists(), f"{py} is missing: run ./setup.sh --peers (the peers' venv) before the slow tests"
    out_json = tmp_path / "r.json"
    assert bp.main(["--models", "mobilenet", "--peers", "opencv,ncnn-cpu", "--paths", "none", "--blocks", "1",
                    "--runs", "1", "--json", str(out_json)]) == 0
    row = json.loads(out_json.read_text())["results"]["mobilenet"]
    for peer in ("opencv", "ncnn-cpu"):
        assert "failed" not in row[peer], row[peer]
        assert row[peer]["error"] < 1e-3 and row[peer]["ratio"] > 0
