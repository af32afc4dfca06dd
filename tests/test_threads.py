"""Sessions from any thread, on every path: a session created in one thread runs in another, four
threads share one session (20 runs each, bit-equal to a single-thread run), run_async. Each path
is checked in a fresh interpreter: GL contexts are bound to threads, and earlier tests in this
process may have made some."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import gpubackend

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = textwrap.dedent("""
    import json, sys, threading
    import numpy as np, onnx
    import gpubackend

    THREADS, RUNS = 4, 20
    model = onnx.load(sys.argv[1])
    ref = gpubackend.Session(model, path="cpu")
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((1, 3, 8, 8)).astype(np.float32) for _ in range(6)]
    want = [ref.run({"x": x})[0] for x in xs]

    def err(got, ref_):
        return float(np.max(np.abs(got - ref_)) / max(1.0, float(np.max(np.abs(ref_)))))

    def check(path, mode):
        report = {"errors": [], "threads": []}
        box = {}
        if mode == "made-in-thread":
            t = threading.Thread(target=lambda: box.update(sess=gpubackend.Session(model, path=path, fallback=False)))
            t.start(); t.join()                       # the creating thread has ended
            sess = box["sess"]
        else:                                         # made on the main thread, asking for the GPU thread
            sess = gpubackend.Session(model, path=path, fallback=False,
                                      options=gpubackend.SessionOptions(thread="worker"))
        report["placement"] = sorted(set(sess.placement.values()))
        report["thread_mode"] = sess.thread_mode
        report["errors"].append(err(sess.run({"x": xs[0]})[0], want[0]))   # another thread (main) runs it
        single = [sess.run({"x": x})[0] for x in xs]                        # this session, one thread
        report["differs"] = 0

        def share(offset):
            try:
                for k in range(RUNS):
                    i = (offset + k) % len(xs)
                    got = sess.run({"x": xs[i]})[0]
                    report["errors"].append(err(got, want[i]))
                    report["differs"] += int(not np.array_equal(got, single[i]))
                report["threads"].append(threading.current_thread().name)
            except Exception as exc:
                report["threads"].append(f"{type(exc).__name__}: {exc}")

        pair = [threading.Thread(target=share, args=(k,), name=f"sharer{k}") for k in range(THREADS)]
        for t in pair: t.start()
        for t in pair: t.join()
        futures = [sess.run_async({"x": x}) for x in xs]
        report["errors"] += [err(f.result(timeout=120)[0], w) for f, w in zip(futures, want)]
        closer = threading.Thread(target=sess.close); closer.start(); closer.join()
        return report

    out = {}
    for path in sys.argv[2].split(","):
        for mode in ("made-in-thread", "worker-option"):
            try:
                out[f"{path}/{mode}"] = check(path, mode)
            except Exception as exc:
                out[f"{path}/{mode}"] = {"failed": f"{type(exc).__name__}: {exc}"}
    print("REPORT" + json.dumps(out))
""")


def _model(tmp_path: Path) -> str:
    rng = np.random.default_rng(5)
    w = numpy_helper.from_array((rng.standard_normal((4, 3, 3, 3)) * 0.4).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Add", ["r", "c"], ["y"], name="add")]
    graph = helper.make_graph(nodes, "t", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    out = tmp_path / "t.onnx"
    out.write_bytes(model.SerializeToString())
    return str(out)


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> tuple[dict, object]:
    """One fresh interpreter checks every verified path in both modes (GL sessions first made
    in a thread that then ends, then on the main thread with thread="worker")."""
    report = gpubackend.probe()
    paths = [k for k in ("vulkan", "gles31", "gles3", "gles2") if report.usable(k)] + ["cpu"]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("GPUBACKEND_SESSION_THREAD", None)
    proc = subprocess.run([sys.executable, "-c", SCRIPT, _model(tmp_path_factory.mktemp("threads")), ",".join(paths)],
                          env=env, capture_output=True, text=True, timeout=600)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("REPORT")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    return json.loads(lines[-1][len("REPORT"):]), report


@pytest.mark.parametrize("mode", ["made-in-thread", "worker-option"])
@pytest.mark.parametrize("path", ["vulkan", "gles31", "gles3", "gles2", "cpu"])
def test_session_from_any_thread(path: str, mode: str, reports) -> None:
    results, probe_report = reports
    if path != "cpu" and not probe_report.usable(path):
        pytest.skip(f"the probe did not verify {path} on this machine: {probe_report.paths[path].reason}")
    report = results[f"{path}/{mode}"]
    assert "failed" not in report, report.get("failed")
    assert report["placement"] == [path]
    assert report["thread_mode"] == ("inline" if path == "cpu" else "worker")
    assert sorted(report["threads"]) == [f"sharer{k}" for k in range(4)], report["threads"]
    assert len(report["errors"]) == 1 + 4 * 20 + 6 and max(report["errors"]) < 1e-4, report["errors"]
    assert report["differs"] == 0  # 4 threads x 20 runs give exactly what one thread gets
