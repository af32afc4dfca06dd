"""Tuning variants timed interleaved in one process, on a roofline kernel, a 3x3 layer or a model.

Usage: ``python benchmarks/bench_variants.py --path vulkan --unit gemm --kernel gemm
--variants px8cb2,px4cb4sg [--rounds 5]``. Kernels: ``gemm`` (256x1024x1024), ``matmul`` (512^3),
``conv3`` (3x3 64ch 128x128), ``conv1`` (1x1 128ch 64x64), the ``gpubackend bench --roofline``
set. ``--layer CI,CO,SIZE[,DILATION[,STRIDE]] [--act Relu]``: one 3x3 Conv (padded to keep the
size at stride 1) with an optional activation after it, instead. ``--model NAME``: a whole model
(a zoo model on its realistic input, or ``mobilenet`` / ``unet``, the test models) instead.
A variant may set several units: ``conv:bx8cb2k3+gemm:px8cb2``. One session per variant, each
checked against the CPU path, then the sessions run round by round (A, B, ..., A, B, ...);
prints the median ms (and GFLOP/s for a kernel) per variant.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import gpubackend  # noqa: E402
from gpubackend import tuning  # noqa: E402
from gpubackend.bench import kernels  # noqa: E402

KERNELS = {
    "gemm": (lambda: kernels.gemm(256, 1024, 1024), (256, 1024), 2 * 256 * 1024 * 1024),
    "matmul": (lambda: kernels.matmul(512), (512, 512), 2 * 512 ** 3),
    "conv3": (lambda: kernels.conv(64, 128, 3), (1, 64, 128, 128), 2 * 64 * 64 * 9 * 128 * 128),
    "conv1": (lambda: kernels.conv(128, 64, 1), (1, 128, 64, 64), 2 * 128 * 128 * 64 * 64),
}


def _first(out):
    return out["y"] if isinstance(out, dict) else out[0]


def _layer(spec: str, act: str) -> tuple[bytes, tuple[int, ...], int]:
    """A 3x3 Conv ``ci -> co`` on a ``size`` x ``size`` input (and ``act`` after it, if any)."""
    from onnx import TensorProto, helper, numpy_helper

    ci, co, size, dil, stride = ([int(v) for v in spec.split(",")] + [1, 1])[:5]
    out = (size - 1) // stride + 1
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((co, ci, 3, 3)) / np.sqrt(9 * ci)).astype(np.float32)
    b = rng.standard_normal(co).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["t" if act else "y"], kernel_shape=[3, 3], pads=[dil] * 4,
                              dilations=[dil, dil], strides=[stride, stride])]
    if act:
        nodes.append(helper.make_node(act, ["t"], ["y"]))
    graph = helper.make_graph(nodes, "layer",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, ci, size, size])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, co, out, out])],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString(), (1, ci, size, size), 2 * co * ci * 9 * out * out


def _model(name: str) -> tuple[bytes | str, dict[str, np.ndarray]]:
    if name in ("mobilenet", "unet"):
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
        import models as test_models

        m = test_models.mobilenet_v2_like() if name == "mobilenet" else test_models.unet_like()
        return m.SerializeToString(), test_models.random_inputs(m)
    from gpubackend import zoo
    from gpubackend.zoo.inputs import make_input

    return str(zoo.fetch(name)), make_input(zoo.BY_NAME[name])


def _forced(unit: str, variant: str) -> dict[str, str]:
    return dict(part.split(":", 1) for part in variant.split("+")) if ":" in variant else {unit: variant}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--path", default="vulkan")
    ap.add_argument("--unit", default="gemm", choices=sorted(tuning.units()))
    ap.add_argument("--kernel", default="gemm", choices=sorted(KERNELS))
    ap.add_argument("--variants", required=True, help="comma-separated variant names of the unit")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--layer", help="CI,CO,SIZE[,DILATION[,STRIDE]]: one 3x3 Conv instead of --kernel")
    ap.add_argument("--act", default="", help="with --layer: an activation op after the Conv (Relu, ...)")
    ap.add_argument("--model", help="a zoo model, or mobilenet / unet (the test models), instead of --kernel")
    args = ap.parse_args(argv)
    flops = 0
    if args.model:
        data, feeds = _model(args.model)
    else:
        data, shape, flops = _layer(args.layer, args.act) if args.layer else (
            KERNELS[args.kernel][0](), *KERNELS[args.kernel][1:])
        feeds = {"x": np.random.default_rng(1).standard_normal(shape).astype(np.float32)}
    ref = _first(gpubackend.Session(data, path="cpu").run(feeds))
    sessions = {}
    for name in args.variants.split(","):
        t = time.perf_counter()
        with tuning.forced(**_forced(args.unit, name)):
            sess = gpubackend.Session(data, path=args.path)
            got = _first(sess.run(feeds))
        err = float(np.abs(got - ref).max() / max(1.0, float(np.abs(ref).max())))
        print(f"{name}: first run (compile) {time.perf_counter() - t:.1f} s, error {err:.1e}", flush=True)
        sessions[name] = sess
    times: dict[str, list[float]] = {n: [] for n in sessions}
    for _ in range(args.rounds):
        for name, sess in sessions.items():
            t = time.perf_counter()
            sess.run(feeds)
            times[name].append(time.perf_counter() - t)
    for name, ts in times.items():
        m = statistics.median(ts)
        print(f"{name}: median {m * 1e3:.1f} ms" + (f", {flops / m / 1e9:.2f} GFLOP/s" if flops else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
