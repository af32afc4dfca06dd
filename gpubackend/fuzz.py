"""A seeded fuzzer of malformed and hostile models, run on every path in child processes with time
and memory limits, each case compared with onnxruntime.

Case ``i`` of seed ``s`` is rebuilt from ``(s, i)`` alone, so a child needs only the index and any
finding is reproduced with ``gpubackend fuzz --seed S --case I``. A case is one base model (small
real-shaped graphs: a conv block with a residual, pooling and a Gemm head; an elementwise chain; a
resize) with one mutation:

- ``attr``: an attribute of one node set to a hostile value (0, negative, 2**31, float, a list of
  the wrong length, a bad string, NaN);
- ``weight``: an initializer replaced by one of another dtype, shape or with extreme values;
- ``structure``: a node removed, an input dangling, duplicate names, a foreign domain, a cycle, a
  wrong opset, an output dropped;
- ``bytes``: bytes of the serialised model flipped or the file truncated;
- ``feed``: NaN/Inf/1e38 inputs (compared value by value, NaN where onnxruntime gives NaN).

Outcomes per case and path: ``error`` (a GpuBackendError: refused with a reason), ``correct``
(ran and matched onnxruntime), ``accepted`` (ran where onnxruntime refused), and the failures
``wrong`` (differs from onnxruntime), ``exception`` (an exception that is not a GpuBackendError),
``crash`` (the child died), ``hang`` (over the time limit), ``blowup`` (over the memory limit).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

FAILURES = ("wrong", "exception", "crash", "hang", "blowup")
TOLERANCE = 1e-4  # max |got - ref| / max(1, max |ref|)
HOSTILE_INTS = [0, -1, -7, 2**31, 2**63 - 1, 100]
HOSTILE_VALUES: list[Any] = HOSTILE_INTS + [1.5, float("nan"), [], [0, 0], [1] * 7, [2**31, 1], [-1, -1],
                                            [100, 100], [1, 0, 0, 1], "FOO", [1.5, 1.0]]


@dataclass
class Case:
    index: int
    base: str
    mutation: str
    detail: str
    model: bytes
    feeds: dict[str, np.ndarray]


def _base_models() -> dict[str, Any]:
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)

    def w(name: str, shape: tuple[int, ...], scale: float = 0.3) -> Any:
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)

    def model(nodes: list[Any], inits: list[Any], x_shape: list[int], opset: int = 17) -> Any:
        g = helper.make_graph(nodes, "fuzz", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])

    conv = model([
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                         strides=[1, 1], dilations=[1, 1], group=1),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], name="dw", kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=6),
        helper.make_node("Add", ["r1", "c2"], ["s"], name="add"),
        helper.make_node("MaxPool", ["s"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("GlobalAveragePool", ["p"], ["g"], name="gap"),
        helper.make_node("Flatten", ["g"], ["f"], name="flat", axis=1),
        helper.make_node("Gemm", ["f", "wg", "bg"], ["y"], name="head", transB=1, alpha=1.0, beta=1.0),
    ], [w("w1", (6, 3, 3, 3)), w("b1", (6,), 0.1), w("w2", (6, 1, 3, 3)), w("wg", (4, 6)), w("bg", (4,))],
        [1, 3, 12, 12])
    eltwise = model([
        helper.make_node("Mul", ["x", "k"], ["m"], name="mul"),
        helper.make_node("Sigmoid", ["m"], ["sg"], name="sig"),
        helper.make_node("LeakyRelu", ["sg"], ["lr"], name="lrelu", alpha=0.1),
        helper.make_node("Clip", ["lr", "lo", "hi"], ["cl"], name="clip"),
        helper.make_node("Softmax", ["cl"], ["y"], name="softmax", axis=1),
    ], [w("k", (1, 5, 1, 1)), numpy_helper.from_array(np.array(0.1, np.float32), "lo"),
        numpy_helper.from_array(np.array(0.9, np.float32), "hi")], [2, 5, 3, 7])
    resize = model([
        helper.make_node("Resize", ["x", "", "scales"], ["r"], name="resize", mode="linear",
                         coordinate_transformation_mode="half_pixel"),
        helper.make_node("AveragePool", ["r"], ["y"], name="avg", kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                         count_include_pad=0),
    ], [numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")], [1, 4, 6, 6])
    return {"conv": conv, "eltwise": eltwise, "resize": resize}


def _feeds(model: Any, rng: random.Random) -> dict[str, np.ndarray]:
    from skimage import data, transform

    out = {}
    for vi in model.graph.input:
        if vi.name in {i.name for i in model.graph.initializer}:
            continue
        dims = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else 1
                for d in vi.type.tensor_type.shape.dim]
        dims = [min(max(d, 1), 64) for d in dims] or [1]
        photo = transform.resize(data.astronaut(), (64, 64), anti_aliasing=True).astype(np.float32)
        flat = np.resize(photo.reshape(-1) * 2 - 1, int(np.prod(dims)))
        out[vi.name] = flat.reshape(dims).astype(np.float32)
    return out


def make_case(seed: int, index: int) -> Case:
    """Case ``index`` of ``seed``: deterministic, so a child rebuilds it from the two numbers."""
    import onnx
    from onnx import helper, numpy_helper

    rng = random.Random(seed * 1_000_003 + index)
    bases = _base_models()
    base = rng.choice(sorted(bases))
    model = onnx.ModelProto()
    model.CopyFrom(bases[base])
    mutation = rng.choice(["attr", "attr", "weight", "structure", "bytes", "feed"])
    detail = ""
    feeds = _feeds(model, rng)
    nodes = list(model.graph.node)
    if mutation == "attr":
        node = rng.choice(nodes)
        names = [a.name for a in node.attribute] or ["axis"]
        name = rng.choice(names + ["auto_pad", "group", "strides"])
        value = rng.choice(HOSTILE_VALUES)
        kept = [a for a in node.attribute if a.name != name]
        del node.attribute[:]
        node.attribute.extend(kept)
        try:
            node.attribute.append(helper.make_attribute(name, value))
        except Exception:  # noqa: BLE001 - e.g. an empty list has no type: use ints
            node.attribute.append(helper.make_attribute(name, [], attr_type=onnx.AttributeProto.INTS))
        detail = f"{node.name}.{name} = {value!r}"
    elif mutation == "weight" and model.graph.initializer:
        init = rng.choice(list(model.graph.initializer))
        arr = numpy_helper.to_array(init)
        how = rng.choice(["dtype", "shape", "values"])
        if how == "dtype":
            dtype = rng.choice([np.int32, np.int64, np.float16, np.float64, np.bool_, np.uint8])
            new = arr.astype(dtype)
        elif how == "shape":
            new = rng.choice([arr.reshape(-1), arr[..., :1] if arr.ndim else arr, np.concatenate([arr.reshape(-1)] * 2),
                              arr.reshape((1,) + arr.shape)])
        else:
            new = np.full(arr.shape, rng.choice([1e17, -1e38, np.nan, np.inf, 0.0]), np.float32)
        init.CopyFrom(numpy_helper.from_array(np.asarray(new), init.name))
        detail = f"{init.name}: {how} -> {np.asarray(new).dtype} {np.asarray(new).shape}"
    elif mutation == "structure":
        how = rng.choice(["delete", "dangle", "dupname", "domain", "cycle", "opset", "nooutput", "swap"])
        node = rng.choice(nodes)
        if how == "delete":
            model.graph.node.remove(node)
        elif how == "dangle":
            node.input[0] = "nowhere"
        elif how == "dupname":
            for n in model.graph.node:
                n.name = "same"
        elif how == "domain":
            node.domain = "com.evil"
            model.opset_import.append(helper.make_opsetid("com.evil", 1))
        elif how == "cycle":
            node.input[0] = node.output[0]
        elif how == "opset":
            model.opset_import[0].version = rng.choice([1, 5, 999])
        elif how == "nooutput":
            del model.graph.output[:]
        elif len(node.input) > 1:
            node.input[0], node.input[1] = node.input[1], node.input[0]
        detail = f"{how} {node.name}"
    elif mutation == "bytes":
        blob = bytearray(model.SerializeToString())
        if rng.random() < 0.5:
            cut = rng.randrange(1, len(blob))
            blob = blob[:cut]
            detail = f"truncated at {cut} of {len(model.SerializeToString())}"
        else:
            spots = [rng.randrange(len(blob)) for _ in range(rng.randint(1, 8))]
            for s in spots:
                blob[s] = rng.randrange(256)
            detail = f"bytes changed at {spots}"
        return Case(index, base, mutation, detail, bytes(blob), feeds)
    else:
        mutation = "feed"
        name = next(iter(feeds))
        x = feeds[name].copy().reshape(-1)
        for i in rng.sample(range(x.size), k=min(x.size, rng.randint(1, 6))):
            x[i] = rng.choice([np.nan, np.inf, -np.inf, 1e38, -1e38])
        feeds[name] = x.reshape(feeds[name].shape)
        detail = "NaN/Inf/1e38 in the input"
    return Case(index, base, mutation, detail, model.SerializeToString(), feeds)


# ---- the child: one path, many cases ------------------------------------------------------------

def _run_case(case: Case, path: str, ref_dir: Path) -> dict[str, Any]:
    if path == "onnxruntime":
        import onnxruntime as ort

        try:
            sess = ort.InferenceSession(case.model, providers=["CPUExecutionProvider"])
            outs = sess.run(None, case.feeds)
        except Exception as exc:  # noqa: BLE001 - onnxruntime refusing is an outcome
            return {"outcome": "refused", "message": str(exc)[:300]}
        np.savez(ref_dir / f"{case.index}.npz", *[np.asarray(o) for o in outs])
        return {"outcome": "ok"}
    import gpubackend
    from gpubackend.errors import GpuBackendError

    try:
        sess = gpubackend.Session(case.model, path=path, cpu_engine="numpy")
        try:
            got = sess.run(case.feeds)
        finally:
            sess.close()
    except GpuBackendError as exc:
        return {"outcome": "error", "message": f"{type(exc).__name__}: {str(exc)[:300]}"}
    except Exception as exc:  # noqa: BLE001 - what the fuzzer is looking for
        return {"outcome": "exception", "message": f"{type(exc).__name__}: {str(exc)[:300]}"}
    ref_file = ref_dir / f"{case.index}.npz"
    if not ref_file.is_file():
        return {"outcome": "accepted"}
    with np.load(ref_file) as ref:
        want = [ref[k] for k in ref.files]
    verdict = compare(got, want, case.feeds)
    if verdict["outcome"] == "wrong" and _matches_onnx_reference(case, got):
        # onnxruntime and ONNX's own reference implementation disagree (e.g. Clip with a NaN bound:
        # onnxruntime ignores it, NumPy's clip and so ONNX's reference give NaN); gpubackend follows
        # the reference
        return {"outcome": "reference", "message": f"differs from onnxruntime ({verdict['message']}), "
                                                   "matches ONNX's reference implementation"}
    return verdict


def _matches_onnx_reference(case: Case, got: list[np.ndarray]) -> bool:
    try:
        from onnx.reference import ReferenceEvaluator

        want = ReferenceEvaluator(case.model).run(None, case.feeds)
    except Exception:  # noqa: BLE001 - the reference cannot run it: no arbitration
        return False
    return compare(got, [np.asarray(w) for w in want], case.feeds)["outcome"] == "correct"


def compare(got: list[np.ndarray], want: list[np.ndarray], feeds: dict[str, np.ndarray]) -> dict[str, Any]:
    """``correct`` with the error, or ``wrong`` with what differs (see the module docstring)."""
    if len(want) != len(got):
        return {"outcome": "wrong", "message": f"{len(got)} outputs, the reference gave {len(want)}"}
    extreme_input = any(bool(np.any(np.abs(f) > 1e30)) for f in feeds.values() if f.dtype.kind == "f")
    worst = 0.0
    for g, r in zip(got, want):
        g, r = np.asarray(g), np.asarray(r)
        if g.shape != r.shape:
            return {"outcome": "wrong", "message": f"shape {g.shape}, the reference {r.shape}"}
        if r.dtype.kind != "f":
            if not np.array_equal(g, r):
                return {"outcome": "wrong", "message": "integer output differs"}
            continue
        gf, rf = g.astype(np.float64), r.astype(np.float64)
        if extreme_input:
            # inf - inf or inf * 0 gives NaN in one formulation of a kernel and Inf in another (a lerp
            # written a + t(b - a) or (1 - t)a + tb): both are IEEE; what must agree is where the
            # result stops being finite
            if not np.array_equal(np.isfinite(gf), np.isfinite(rf)):
                return {"outcome": "wrong", "message": f"non-finite where the reference is finite or the reverse "
                                                       f"({int((~np.isfinite(gf)).sum())} vs "
                                                       f"{int((~np.isfinite(rf)).sum())})"}
        elif not np.array_equal(np.isnan(gf), np.isnan(rf)):
            return {"outcome": "wrong", "message": f"NaN where the reference has none or the reverse "
                                                   f"({int(np.isnan(gf).sum())} vs {int(np.isnan(rf).sum())})"}
        fin = np.isfinite(rf) & np.isfinite(gf)
        both_inf = np.isinf(rf) & np.isinf(gf)
        if not np.array_equal(gf[both_inf], rf[both_inf]):
            return {"outcome": "wrong", "message": "infinities of different sign"}
        if fin.any():
            scale = max(1.0, float(np.max(np.abs(rf[fin]))))
            worst = max(worst, float(np.max(np.abs(gf[fin] - rf[fin]))) / scale)
    if worst > TOLERANCE:
        return {"outcome": "wrong", "message": f"max error {worst:.3g} vs the reference"}
    return {"outcome": "correct", "error": worst}


def _worker(path: str, seed: int, ref_dir: Path) -> int:
    for line in sys.stdin:
        index = int(line)
        case = make_case(seed, index)
        result = _run_case(case, path, ref_dir)
        print(json.dumps({"index": index, **result}), flush=True)
    return 0


# ---- the parent: children with limits -----------------------------------------------------------

def _rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class _Child:
    def __init__(self, path: str, seed: int, ref_dir: Path):
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        root = str(Path(__file__).resolve().parent.parent)
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        self.proc = subprocess.Popen([sys.executable, "-m", "gpubackend.fuzz", "--worker", path, "--seed", str(seed),
                                      "--ref-dir", str(ref_dir)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=env)
        os.set_blocking(self.proc.stdout.fileno(), False)
        self.buffer = b""

    def ask(self, index: int, timeout_s: float, max_rss: int) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            self.proc.stdin.write(f"{index}\n".encode())
            self.proc.stdin.flush()
        except OSError:
            return {"outcome": "crash", "message": "the child had died"}
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self.buffer += os.read(self.proc.stdout.fileno(), 1 << 16)
            except BlockingIOError:
                pass
            if b"\n" in self.buffer:
                line, self.buffer = self.buffer.split(b"\n", 1)
                try:
                    return json.loads(line)
                except json.JSONDecodeError:
                    continue  # something else printed on stdout
            code = self.proc.poll()
            if code is not None:
                return {"outcome": "crash", "message": f"the child exited with {code}"}
            if _rss_bytes(self.proc.pid) > max_rss:
                self.kill()
                return {"outcome": "blowup", "message": f"over {max_rss / 2**30:.1f} GiB RSS"}
            if time.monotonic() > deadline:
                self.kill()
                return {"outcome": "hang", "message": f"no answer within {timeout_s:.0f} s"}
            time.sleep(0.02)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def close(self) -> None:
        if self.proc.stdin:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.kill()


def run(paths: list[str], seed: int, cases: list[int], timeout_s: float = 120.0, max_rss: int = 6 << 30,
        progress: bool = False) -> dict[str, Any]:
    """Run ``cases`` on onnxruntime and on ``paths``; returns per-path outcome counts and the
    failing cases (path, index, outcome, message, and the case's description)."""
    results: dict[str, dict[int, dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="gpubackend-fuzz-") as tmp:
        ref_dir = Path(tmp)
        for path in ["onnxruntime", *paths]:
            child = _Child(path, seed, ref_dir)
            results[path] = {}
            for n, index in enumerate(cases):
                res = child.ask(index, timeout_s, max_rss)
                results[path][index] = res
                if res["outcome"] in ("crash", "hang", "blowup"):
                    child = _Child(path, seed, ref_dir)
                if progress:
                    print(f"\r{path}: {n + 1}/{len(cases)}", end="", file=sys.stderr, flush=True)
            child.close()
            if progress:
                print(file=sys.stderr)
    ort = results.pop("onnxruntime")
    table = {p: dict(Counter(r["outcome"] for r in res.values())) for p, res in results.items()}
    failures = []
    for p, res in results.items():
        for index, r in res.items():
            refused_by_ort = ort[index]["outcome"] != "ok"
            if r["outcome"] in FAILURES:
                c = make_case(seed, index)
                failures.append({"path": p, "index": index, "outcome": r["outcome"], "message": r.get("message", ""),
                                 "case": f"{c.base} {c.mutation}: {c.detail}", "onnxruntime_refused": refused_by_ort})
    return {"seed": seed, "cases": len(cases), "onnxruntime": dict(Counter(r["outcome"] for r in ort.values())),
            "paths": table, "failures": failures}


def format_table(summary: dict[str, Any]) -> str:
    kinds = ["error", "correct", "reference", "accepted", *FAILURES]
    rows = [["path", *kinds]] + [[p, *[str(c.get(k, 0)) for k in kinds]] for p, c in summary["paths"].items()]
    widths = [max(len(r[i]) for r in rows) for i in range(len(kinds) + 1)]
    lines = ["  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in rows]
    lines.append(f"onnxruntime on the same {summary['cases']} cases: {summary['onnxruntime']}")
    for f in summary["failures"]:
        lines.append(f"FAIL {f['path']} case {f['index']} ({f['case']}): {f['outcome']}: {f['message']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m gpubackend.fuzz", description=__doc__.split("\n\n")[0])
    ap.add_argument("--paths", default="cpu,gles3,gles31,vulkan", help="comma list of paths (default: %(default)s)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cases", type=int, default=100, help="how many cases (0..N-1)")
    ap.add_argument("--case", type=int, action="append", help="run only this case index (repeatable)")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per case before it counts as a hang")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--ref-dir", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return _worker(args.worker, args.seed, Path(args.ref_dir))
    cases = args.case or list(range(args.cases))
    summary = run([p.strip() for p in args.paths.split(",") if p.strip()], args.seed, cases, args.timeout,
                  progress=not args.json)
    print(json.dumps(summary, indent=1) if args.json else format_table(summary))
    return 1 if summary["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
