"""Whole-model latency of two checkouts of gpubackend (e.g. before and after a refactor), each path
timed against onnxruntime (2 threads) in the same child process, the checkouts alternating in rounds.

    python benchmarks/bench_checkouts.py BEFORE_DIR AFTER_DIR [--rounds 2] [--paths cpu,vulkan,...]
                                         [--models selfie,mobilenet,unet,yolov8n_nudenet,...] [--warmup 3]

Models: the bundled selfie model (the astronaut photo), the MobileNetV2-like and U-Net-like test
models, and zoo models by name (fetched already, see ``gpubackend zoo fetch``; their realistic
input). The cpu path runs the NumPy engine where the checkout has a choice. Prints a markdown table:
p50 ms and the ratio to onnxruntime per checkout, and the error against onnxruntime. Run it on a
quiet machine: the children run one at a time, and nothing else should.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

RUNS = {"cpu": 15, "vulkan": 8, "gles31": 8, "gles3": 5, "gles2": 3}
MODELS = ("selfie", "mobilenet", "unet")

CHILD = r'''
import json, os, statistics, sys, time
import numpy as np
root, path, runs, warmup = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[5])
sys.path.insert(0, os.path.join(root, "tests"))
import onnx, onnxruntime as ort
import gpubackend
import models as tm
# the checkout under test, not another copy earlier on sys.path (python -c puts the working
# directory first: run from a checkout, every child would time that one)
assert os.path.realpath(gpubackend.__file__).startswith(os.path.realpath(root) + os.sep), gpubackend.__file__

def load(name):
    if name == "selfie":
        from skimage import data, transform
        m = onnx.load(os.path.join(root, "gpubackend/models/selfie_segmentation.onnx"))
        x = transform.resize(data.astronaut(), (256, 256), anti_aliasing=True).astype(np.float32)
        return m, {m.graph.input[0].name: np.ascontiguousarray(x.transpose(2, 0, 1)[None])}
    if name in ("mobilenet", "unet"):
        m = tm.mobilenet_v2_like() if name == "mobilenet" else tm.unet_like()
        return m, tm.random_inputs(m)
    from gpubackend import zoo
    from gpubackend.zoo.inputs import make_input
    return onnx.load(str(zoo.fetch(name))), make_input(zoo.BY_NAME[name], small=False)

out = {}
for name in sys.argv[4].split(","):
    m, feeds = load(name)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    # without spinning: its threads would otherwise spin on the cores after each of its runs,
    # slowing the path's run timed right after (bench_cpu.py does the same)
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    ref = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    try:
        sess = gpubackend.Session(m, path=path, cpu_engine="numpy")
    except TypeError:  # a checkout from before the choice of CPU engine
        sess = gpubackend.Session(m, path=path)
    got, want = sess.run(feeds)[0], ref.run(None, feeds)[0]
    err = float(np.max(np.abs(got - want)) / max(1.0, float(np.max(np.abs(want)))))
    for _ in range(warmup):
        sess.run(feeds)
    tg, to = [], []
    for _ in range(runs):
        ref.run(None, feeds)
        t = time.perf_counter(); ref.run(None, feeds); to.append(time.perf_counter() - t)
        t = time.perf_counter(); sess.run(feeds); tg.append(time.perf_counter() - t)
    on_path = sum(1 for k in sess.placement.values() if k == path)
    out[name] = {"p50_ms": statistics.median(tg) * 1e3, "ratio": statistics.median(tg) / statistics.median(to),
                 "err": err, "nodes": f"{on_path}/{len(sess.placement)}"}
    sess.close()
print("RESULT " + json.dumps(out))
'''


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--paths", default="cpu,vulkan,gles31,gles3,gles2")
    ap.add_argument("--models", default=",".join(MODELS), help="comma list: selfie, mobilenet, unet, zoo names")
    ap.add_argument("--warmup", type=int, default=3, help="untimed runs of each session first")
    args = ap.parse_args()
    models = [m for m in args.models.split(",") if m]
    dirs = {"before": os.path.abspath(args.before), "after": os.path.abspath(args.after)}
    paths = [p for p in args.paths.split(",") if p]
    res: dict[tuple[str, str, str], list[dict]] = {}
    for r in range(args.rounds):
        for path in paths:
            for version in (("before", "after") if r % 2 == 0 else ("after", "before")):
                env = dict(os.environ, PYTHONPATH=dirs[version], GPUBACKEND_CACHE_DIR=f"/tmp/gpbcache-bench-{version}")
                cmd = [sys.executable, "-c", CHILD, dirs[version], path, str(RUNS.get(path, 5)), ",".join(models),
                       str(args.warmup)]
                proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600, cwd=dirs[version])
                line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
                if line is None:
                    print(f"{version} {path} failed:\n{proc.stderr[-2000:]}", file=sys.stderr)
                    continue
                for model, d in json.loads(line[7:]).items():
                    res.setdefault((path, model, version), []).append(d)
                print(f"round {r} {version} {path} done", file=sys.stderr, flush=True)
    print("| path | model | before p50 ms (x onnxruntime) | after p50 ms (x onnxruntime) | after / before "
          "| nodes on path | error |")
    print("|---|---|---|---|---|---|---|")
    for path in paths:
        for model in models:
            b, a = res.get((path, model, "before")), res.get((path, model, "after"))
            if not b or not a:
                continue
            pb, pa = (statistics.median(x["p50_ms"] for x in v) for v in (b, a))
            rb, ra = (statistics.median(x["ratio"] for x in v) for v in (b, a))
            print(f"| {path} | {model} | {pb:.1f} ({rb:.2f}x) | {pa:.1f} ({ra:.2f}x) | {pa / pb:.2f} | "
                  f"{a[-1]['nodes']} | {a[-1]['err']:.1e} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
