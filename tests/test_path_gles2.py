"""The gles2 path (GL ES 2.0: RGBA8 render-to-texture, floats packed into bytes, per-shape
GLSL ES 1.00 kernels), what is its own: the encoding (docs/gles2_encoding.md) bit for bit, row
wrapping under a small texture limit, declines, the loop budget, whole models against onnxruntime,
and proof that the path stays inside ES 2.0. Its per-kernel cases are in tests/test_ops.py."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path as FsPath
from typing import Any

import numpy as np
import pytest

from gpubackend import fallback
from gpubackend.gl.device import LLVMPIPE_LOOP_LIMIT, LOOP_BUDGET
from gpubackend.graph import Graph, Node
from gpubackend.paths.base import RunStats
from gpubackend.paths.gles2._canary import reference

ROOT = FsPath(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

_PATHS: dict[str, Any] = {}


def gpath(precision: str = "fp32") -> Any:
    from capability_probe.errors import DriverUnavailable
    from gpubackend.paths import gles2

    if precision not in _PATHS:
        try:
            p = gles2.create(precision)
            p.runtime  # noqa: B018 - makes the context, checks highp
        except DriverUnavailable as exc:  # pragma: no cover - only without a GL ES 2.0 driver
            pytest.skip(f"no GL context with highp fragment shaders: {exc}")
        p.poison = True
        _PATHS[precision] = p
    return _PATHS[precision]


def rel_err(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.linalg.norm((got.astype(np.float64) - want).ravel()) / max(np.linalg.norm(want.ravel()), 1e-30))


def single(op: str, feeds: dict[str, np.ndarray], consts: dict[str, np.ndarray] | None = None,
           attrs: dict | None = None, order: list[str] | None = None, opset: int = 17,
           precision: str = "fp32", out_shape: tuple[int, ...] | None = None,
           path: Any = None) -> tuple[np.ndarray, RunStats, Any]:
    """Run one node on gles2 with poisoned outputs; returns (output, stats, kernel)."""
    consts = consts or {}
    names = order or list(feeds) + list(consts)
    arrays = {**feeds, **consts}
    shapes = {n: tuple(a.shape) for n, a in arrays.items()}
    if out_shape is None:
        args = [arrays[n] if n else None for n in names]
        out_shape = tuple(np.asarray(fallback.run_node(op, args, dict(attrs or {}), opset)[0]).shape)
    shapes["out_"] = out_shape
    dtypes = {n: np.asarray(a).dtype for n, a in arrays.items()}
    dtypes["out_"] = np.dtype(np.float32)
    node = Node("n", op, names, ["out_"], dict(attrs or {}))
    graph = Graph([node], list(feeds), ["out_"], dict(consts), shapes, dtypes, opset)
    path = path or gpath(precision)
    why = path.decline(node, graph)
    assert why is None, why
    seg = path.compile([node], graph, list(feeds), ["out_"])
    saved = {n: a.copy() for n, a in feeds.items()}
    stats = RunStats()
    try:
        got = seg.run(feeds, stats)["out_"]
        kernel = seg.steps[0].kernel
    finally:
        seg.close()
    for n, a in feeds.items():
        np.testing.assert_array_equal(a, saved[n], err_msg="feeds were modified")
    return got, stats, kernel


def run_node(op: str, feeds: dict[str, np.ndarray], consts: dict[str, np.ndarray] | None = None,
             attrs: dict | None = None, order: list[str] | None = None, opset: int = 17,
             precision: str = "fp32", tol: float | None = None, kernel: str | None = None) -> np.ndarray:
    """One node on gles2 against ``fallback.run_node`` (ONNX's reference evaluator for the few ops
    fallback lacks; fp16: inputs rounded to fp16 first, as the path stores them)."""
    consts = consts or {}
    attrs = attrs or {}
    if precision == "fp16":
        feeds = {n: a.astype(np.float16).astype(np.float32) for n, a in feeds.items()}
    names = order or list(feeds) + list(consts)
    arrays = {**feeds, **consts}
    want = reference(op, [arrays[n] if n else None for n in names], dict(attrs), opset)
    got, stats, k = single(op, feeds, consts, attrs, names, opset, precision, tuple(want.shape))
    assert got.shape == want.shape
    assert stats.dispatches == channel_draws(k, want.shape) and stats.uploads == len(feeds) and stats.downloads == 1
    assert np.isfinite(got).all() == np.isfinite(want).all(), "non-finite values (an unwritten texel?)"
    err = rel_err(got, want)
    tol = tol or (1e-2 if precision == "fp16" else 1e-5)
    assert err < tol, f"{op} {attrs}: relative error {err:.3g}"
    if precision == "fp32":  # elementwise check too
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * max(float(np.abs(want).max()), 1.0))
    if kernel:
        assert k.name == kernel
    return got


def channel_draws(kernel: Any, out_shape: tuple[int, ...]) -> int:
    """Draws of one node: one, or one per (n, c) for a Conv with per-channel uniform weights."""
    return 1 if kernel.channel_uniforms is None else out_shape[0] * len(kernel.channel_uniforms)


rng = np.random.default_rng(0)


def rnd(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(np.float32)


# ---- the encoding ----------------------------------------------------------------------------

def _identity(x: np.ndarray, precision: str = "fp32") -> np.ndarray:
    got, _, _ = single("Identity", {"x": x}, precision=precision, out_shape=x.shape)
    return got


def _expected32(x: np.ndarray) -> np.ndarray:
    """What the shader's encode(decode(x)) gives: docs/gles2_encoding.md's table."""
    e = x.copy()
    e[np.abs(x) < np.float32(2.0 ** -126)] = 0.0  # denormals and -0 -> +0
    bits = e.view(np.uint32).copy()
    bits[np.isnan(x)] = 0x7FC00000
    return bits


def test_encoding_every_float32_class_round_trips():
    tiny = np.float32(2.0 ** -126)
    x = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, -np.nan, np.float32(3.4028235e38),
                  -np.float32(3.4028235e38), tiny, -tiny, np.nextafter(tiny, np.float32(0)),
                  np.float32(1e-45), -np.float32(1e-45), np.float32(1e-40), 0.1, 1 / 3, 16777216.0,
                  16777217.0, 8388607.5, np.nextafter(np.float32(1), np.float32(2)),
                  np.nextafter(np.float32(1), np.float32(0)), 2.0 ** 127, 2.0 ** -125], dtype=np.float32)
    # every power of two and its neighbours (log2 is least reliable there)
    p2 = np.float32(2.0) ** np.arange(-126, 128, dtype=np.float32)
    nb = np.concatenate([p2, np.nextafter(p2, np.float32(np.inf)), np.nextafter(p2, np.float32(0)), -p2])
    x = np.concatenate([x, nb]).astype(np.float32)
    got = _identity(x.reshape(1, -1))
    np.testing.assert_array_equal(got.reshape(-1).view(np.uint32), _expected32(x))
    # the documented classes, spelled out
    g = got.reshape(-1)
    assert g[0].view(np.uint32) == 0 and g[1].view(np.uint32) == 0, "+0 and -0 both come back +0"
    assert g[4] == np.inf and g[5] == -np.inf
    assert np.isnan(g[6]) and np.isnan(g[7])
    assert g[12] == 0 and g[13] == 0 and g[15] == 0, "denormals flush to zero"


def test_encoding_random_bit_patterns_are_exact():
    bits = np.random.default_rng(7).integers(0, 2 ** 32, 200_000, dtype=np.uint64).astype(np.uint32)
    x = bits.view(np.float32).reshape(40, 5000)
    got = _identity(x)
    np.testing.assert_array_equal(got.reshape(-1).view(np.uint32), _expected32(x.reshape(-1)))


def test_encoding_of_computed_values_is_exact():
    """The encoder on values the shader computed (not only decoded ones): x * 3 + y."""
    x = (np.random.default_rng(3).standard_normal((4, 5000)) * 10.0 ** np.random.default_rng(4).integers(
        -30, 30, (4, 5000))).astype(np.float32)
    y = np.random.default_rng(5).standard_normal((4, 5000)).astype(np.float32)
    got, _, _ = single("Add", {"x": x, "y": y})
    np.testing.assert_array_equal(got.view(np.uint32), (x + y).view(np.uint32))
    got, _, _ = single("Mul", {"x": x, "y": y})
    np.testing.assert_array_equal(got.view(np.uint32), _expected32(x * y))


def test_encoding_fp16_round_trip_and_rounding():
    h = np.arange(0, 65536, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)
    h = h[~np.isnan(h)]
    got = _identity(h.reshape(70, -1), "fp16").reshape(-1)
    want = h.copy()
    want[want == 0] = 0.0  # -0 -> +0
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    nan = _identity(np.array([[np.nan, 1.0, -np.nan]], np.float32), "fp16")
    assert np.isnan(nan[0, 0]) and nan[0, 1] == 1.0 and np.isnan(nan[0, 2])
    # the shader's rounding (fp32 sum -> fp16): nearest even, subnormals, overflow to Inf
    a = (np.random.default_rng(9).standard_normal((3, 7001)) * 10.0 ** np.random.default_rng(10).integers(
        -7, 5, (3, 7001))).astype(np.float16).astype(np.float32)
    c = np.float32(np.random.default_rng(11).standard_normal() * 1e-3)
    got, _, _ = single("Add", {"a": a}, {"c": np.array(c, np.float32)}, precision="fp16")
    want = (a + c).astype(np.float16).astype(np.float32)
    want[want == 0] = 0.0
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    big, _, _ = single("Mul", {"a": np.array([[60000.0, -60000.0, 3.0]], np.float32)},
                       {"c": np.array(2.0, np.float32)}, precision="fp16")
    assert big[0, 0] == np.inf and big[0, 1] == -np.inf and big[0, 2] == 6.0


# ---- kernels on awkward shapes: tests/test_ops.py (KERNEL_CASES); what is gles2's own stays here -----

def test_row_wrapping_layout_when_the_texture_limit_is_small():
    """Tensors taller than GL_MAX_TEXTURE_SIZE wrap several rows into one texture row."""
    from gpubackend.paths import gles2

    for precision in ("fp32", "fp16"):
        p = gles2.create(precision)
        p.poison = True
        p.runtime.max_size = 64
        # 4 input channels: llvmpipe's JIT time explodes on larger unrolled fp16 kernels with wrapped rows
        x = rnd(2, 4, 9, 7)
        w = rnd(13, 4, 3, 3, scale=0.3)
        want = fallback.run_node("Conv", [x, w, None], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, 17)[0]
        got, _, _ = single("Conv", {"x": x}, {"w": w}, {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]},
                           path=p, out_shape=want.shape)
        assert rel_err(got, want) < (1e-5 if precision == "fp32" else 1e-2)
        got, _, _ = single("Relu", {"x": x}, path=p, out_shape=x.shape)
        np.testing.assert_allclose(got, np.maximum(x, 0), rtol=1e-3 if precision == "fp16" else 0)
        too_wide = Graph([Node("r", "Relu", ["x"], ["y"])], ["x"], ["y"], {},
                         {"x": (1, 1, 1, 200), "y": (1, 1, 1, 200)})
        assert "GL_MAX_TEXTURE_SIZE" in p.decline(too_wide.nodes[0], too_wide)
        p.close()


def test_declines_with_reasons():
    p = gpath()
    g = Graph([], ["x"], ["y"], {"w": rnd(4, 3, 3, 3, 3)}, {"x": (1, 3, 5, 5, 5), "y": (1, 4, 3, 3, 3)})
    assert "1-D and 2-D" in p.decline(Node("c", "Conv", ["x", "w"], ["y"], {"kernel_shape": [3, 3, 3]}), g)
    g = Graph([], ["x"], ["y"], {}, {"x": (3, 4), "y": (3, 4)}, {"x": np.dtype(np.int64)})
    assert "float32" in p.decline(Node("r", "Relu", ["x"], ["y"]), g)
    assert "no gles2 kernel for NonMaxSuppression" in p.decline(Node("n", "NonMaxSuppression", ["x"], ["y"]), g)
    g = Graph([], ["x", "s"], ["y"], {}, {"x": (1, 3, 5, 5), "s": (4,), "y": (1, 3, 10, 10)})
    assert "constant" in p.decline(Node("r", "Resize", ["x", "", "s"], ["y"], {"mode": "linear"}), g)
    from gpubackend.paths import gles2

    d = gles2.create("fp32", frozenset({"depthwise", "depthwise_quads"}))
    g = Graph([], ["x"], ["y"], {"w": rnd(3, 1, 3, 3)}, {"x": (1, 3, 5, 5), "y": (1, 3, 3, 3)})
    node = Node("c", "Conv", ["x", "w"], ["y"], {"group": 3})
    assert "disabled" in d.decline(node, g)
    assert gles2.kernel_name(node, g) == "depthwise"
    # on llvmpipe (weights in varyings) the quad-drawn depthwise kernel runs unless it is disabled too
    assert gles2.create("fp32", frozenset({"depthwise"})).kernel_name_for(node, g) == "depthwise_quads"


# ---- llvmpipe's loop limit -------------------------------------------------------------------
# llvmpipe silently stops every loop of a fragment after LLVMPIPE_LOOP_LIMIT iterations in total:
# each kernel counts its iterations and declines past LOOP_BUDGET; it must never give wrong values.

def _graph1(op: str, shapes: dict[str, tuple[int, ...]], consts: dict[str, np.ndarray], attrs: dict,
            opset: int = 17) -> tuple[Node, Graph]:
    names = [n for n in shapes if n != "out_"]
    node = Node("n", op, names, ["out_"], dict(attrs))
    feeds = [n for n in names if n not in consts]
    dtypes = {n: np.dtype(np.float32) for n in shapes}
    return node, Graph([node], feeds, ["out_"], dict(consts), dict(shapes), dtypes, opset)


def _correct_or_declined(op: str, feeds: dict[str, np.ndarray], consts: dict[str, np.ndarray] | None = None,
                         attrs: dict | None = None, precision: str = "fp32", tol: float = 1e-4) -> str | None:
    """Runs one node with poisoned outputs: either declined for the loop limit (returns the reason)
    or right."""
    consts, attrs = consts or {}, attrs or {}
    if precision == "fp16":
        feeds = {n: a.astype(np.float16).astype(np.float32) for n, a in feeds.items()}
    arrays = {**feeds, **consts}
    want = reference(op, list(arrays.values()), dict(attrs), 17)
    shapes = {n: tuple(a.shape) for n, a in arrays.items()} | {"out_": tuple(want.shape)}
    node, graph = _graph1(op, shapes, consts, attrs)
    p = gpath(precision)
    why = p.decline(node, graph)
    if why is not None:
        assert "loop iterations" in why and "llvmpipe" in why, why
        return why
    got, _, k = single(op, feeds, consts, attrs, list(arrays), 17, precision, tuple(want.shape))
    assert k.iterations <= LOOP_BUDGET
    assert np.isfinite(got).all()
    err = rel_err(got, want)
    assert err < (1e-2 if precision == "fp16" else tol), f"{op}: relative error {err:.3g}"
    return None


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_gemm_matmul_k4096_right_or_declined(precision):
    r = np.random.default_rng(1)
    a, b = r.standard_normal((3, 4096), np.float32), r.standard_normal((4096, 5), np.float32)
    assert _correct_or_declined("Gemm", {"a": a}, {"b": b}, precision=precision) is None
    assert _correct_or_declined("Gemm", {"a": a, "b": b}, precision=precision) is None
    assert _correct_or_declined("MatMul", {"a": a}, {"b": b}, precision=precision) is None
    assert _correct_or_declined("Gemm", {"a": a}, {"b": b.T.copy()}, {"transB": 1}, precision=precision) is None


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
@pytest.mark.parametrize(("shape", "draws"), [((1, 5, 20, 17), 2), ((2, 3, 7, 6), 1), ((1, 4, 300, 1), 2)])
def test_global_pool_rows_first_matches_fallback(op, shape, draws):
    """Global pooling of large fp32 planes in two draws (row results through a scratch tensor,
    then their sum or max), small ones in one; NaN and +-Inf where fallback puts them, NaN-poisoned
    outputs."""
    x = rnd(*shape)
    x[0, 0, 1, 0], x[0, 1, 3, 0], x[0, 1, 4, 0], x[0, 2, 2, 0] = np.nan, np.inf, -np.inf, -np.inf
    want = reference(op, [x], {}, 17)
    got, stats, k = single(op, {"x": x})
    assert k.name == "globalpool" and stats.dispatches == draws
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.where(np.isinf(want), want, 0), np.where(np.isinf(got), got, 0))
    finite = np.isfinite(want)
    assert float(np.abs(got[finite] - want[finite]).max()) < 1e-5 * max(1.0, float(np.abs(want[finite]).max()))


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_global_pool_512x512_right_or_declined(precision):
    x = np.random.default_rng(2).standard_normal((1, 4, 512, 512)).astype(np.float32) + 1.0
    assert _correct_or_declined("GlobalAveragePool", {"x": x}, precision=precision) is None
    assert _correct_or_declined("GlobalMaxPool", {"x": x}, precision=precision) is None


def test_too_many_loop_iterations_are_declined():
    x = np.random.default_rng(3).standard_normal((1, 1, 1024, 1024)).astype(np.float32)
    why = _correct_or_declined("GlobalAveragePool", {"x": x}, precision="fp16")  # one draw: 1024 rows x 1024
    assert why is not None and str(LLVMPIPE_LOOP_LIMIT) in why
    assert _correct_or_declined("GlobalAveragePool", {"x": x}) is None  # fp32: rows first, two draws
    why = _correct_or_declined("ReduceMean", {"x": np.zeros((1, 1, 300, 300), np.float32)})
    assert why is not None


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_no_kernel_exceeds_the_loop_budget(precision):
    from gpubackend.paths.gles2.kernels import Config, generate

    cfg = Config(precision, 16384, 16)
    w = {"w": np.zeros((8, 2048, 3, 3), np.float32)}
    cases = [
        ("Gemm", {"a": (7, 65536), "b": (65536, 3)}, {}, {}),
        ("Gemm", {"a": (4096, 7), "b": (3, 4096)}, {}, {"transA": 1, "transB": 1}),
        ("MatMul", {"a": (2, 3, 5, 30000), "b": (2, 3, 30000, 4)}, {}, {}),
        ("GlobalAveragePool", {"x": (1, 8, 700, 700)}, {}, {}),
        ("GlobalMaxPool", {"x": (1, 8, 300, 300)}, {}, {}),
        ("Conv", {"x": (1, 2048, 16, 16), "w": (8, 2048, 3, 3)}, w, {"kernel_shape": [3, 3]}),
        ("Conv", {"x": (1, 8192, 16, 16), "w": (8, 8192, 1, 1)}, {"w": np.zeros((8, 8192, 1, 1), np.float32)}, {}),
        ("ConvTranspose", {"x": (1, 2048, 8, 8), "w": (2048, 4, 3, 3)},
         {"w": np.zeros((2048, 4, 3, 3), np.float32)}, {"kernel_shape": [3, 3]}),
        ("Softmax", {"x": (2, 29999)}, {}, {"axis": -1}),
        ("ReduceMean", {"x": (1, 300, 300, 8)}, {}, {"axes": [1, 2], "keepdims": 1}),
        ("ReduceSum", {"x": (1, 64, 64, 64)}, {}, {"keepdims": 0}),
    ]
    seen = 0
    for op, shapes, consts, attrs in cases:
        arrays = {n: np.zeros(s, np.float32) for n, s in shapes.items()}
        out = reference(op, list(arrays.values()), dict(attrs), 12)
        node, graph = _graph1(op, dict(shapes) | {"out_": tuple(out.shape)}, consts, attrs, 12)
        got = generate(node, graph, cfg)
        if isinstance(got, str):  # any reason (the texture size limit, the loop budget) is fine
            continue
        for k in got.payload if isinstance(got.payload, list) else [got.payload]:
            assert 0 < k.iterations <= LOOP_BUDGET, (op, shapes, k.iterations)
        seen += 1
    assert seen >= 3


# ---- proof of ES 2.0 -------------------------------------------------------------------------

class _ES2Device:
    """Wraps the real GLDevice: every texture must be RGBA / UNSIGNED_BYTE, no compute shader,
    no buffer but the vertex buffers of the quad and of the many-quad draws (triangles or point
    sprites), every program
    ``#version 100``."""

    def __init__(self) -> None:
        from gpubackend.gl.device import GLDevice

        self.inner = GLDevice("gles2")
        self.ctx = self.inner.ctx
        self.sources: list[str] = []
        self.buffers = 0

    def texture(self, size, components, data=None, dtype="f1"):
        assert components == 4 and dtype == "f1", f"non-RGBA8 texture: {components} x {dtype}"
        return self.inner.texture(size, components, data, dtype=dtype)

    def compute(self, src):
        raise AssertionError("gles2 asked for a compute shader")

    def buffer(self, data=None, reserve=0):
        self.buffers += 1
        assert self.buffers <= 3, "gles2 uses three vertex buffers only (the quad, the many-quad draws' two)"
        return self.inner.buffer(data, reserve)

    def program(self, vertex, fragment):
        assert vertex.startswith("#version 100\n") and fragment.startswith("#version 100\n")
        self.sources.append(fragment)
        return self.inner.program(vertex, fragment)

    def write(self, target, data):
        self.inner.write(target, data)

    def dispatched(self):
        self.inner.dispatched()

    def readback(self, arr):
        return self.inner.readback(arr)

    def release(self, *objs):
        self.inner.release(*objs)

    def check_thread(self):
        self.inner.check_thread()


def _model_graph(proto, shapes=None):
    from gpubackend.model import to_graph

    return to_graph(proto, shapes)


@pytest.fixture(scope="module")
def es2_sources() -> list[str]:
    """Every fragment shader the path makes for the selfie model and the two test models."""
    import models

    from gpubackend.models import SELFIE_SEGMENTATION
    from gpubackend.paths import gles2

    gpath()
    sources: list[str] = []
    for precision in ("fp32", "fp16"):
        dev = _ES2Device()
        dev.sources = sources
        p = gles2.create(precision, device=dev)
        for proto in (str(SELFIE_SEGMENTATION), models.mobilenet_v2_like(64), models.unet_like(32)):
            import onnx

            g = _model_graph(onnx.load(proto) if isinstance(proto, str) else proto)
            nodes = [n for n in g.nodes if p.decline(n, g) is None][:40]
            assert nodes
            produced = {o for n in nodes for o in n.outputs}
            ins = sorted({i for n in nodes for i in n.inputs if i and i not in produced and i not in g.constants})
            seg = p.compile(nodes, g, ins, [nodes[-1].outputs[0]])
            seg.close()
    return sources


def test_es2_only_textures_and_version_100(es2_sources):
    assert len(es2_sources) > 20
    for src in es2_sources:
        assert src.startswith("#version 100\n")
        for bad in ("texelFetch", "texture(", "gl_FragData[1]", "out vec4", "layout(", "uint", "floatBitsToUint",
                    "textureSize", "#extension"):
            assert bad not in src, f"ES 3 construct {bad!r} in a gles2 shader"


def test_es2_shaders_validate_as_glsl_es_100(es2_sources, tmp_path):
    exe = shutil.which("glslangValidator")
    if exe is None:
        pytest.skip("glslangValidator is not installed")
    for i, src in enumerate(dict.fromkeys(es2_sources)):
        f = tmp_path / f"k{i}.frag"
        f.write_text(src)
        r = subprocess.run([exe, str(f)], capture_output=True, text=True)
        assert r.returncode == 0, r.stdout + r.stderr + "\n" + src


def test_es2_source_scan():
    """The path's own code names no ES 3.x facility."""
    files = list((ROOT / "gpubackend" / "paths" / "gles2").glob("*.py")) + list((ROOT / "shaders" / "gles2").glob("*"))
    pattern = re.compile(r"texelFetch|compute_shader|\.compute\(|dtype=\"f[24]\"|dtype='f[24]'|\"f2\"|\"f4\"|"
                         r"draw_buffers|color_attachments=\[[^\]]*,|storage_buffer|glDrawBuffers|RGBA32F|RGBA16F|"
                         r"#version 3|uniform_buffer|bind_to_storage|GL_TEXTURE_3D|texture3D")
    for f in files:
        text = f.read_text()
        text = re.sub(r'np\.array\(\[-1, -1, 3, -1, -1, 3\], dtype="f4"\)', "", text)  # the vertex data
        hits = pattern.findall(text)
        assert not hits, f"{f.name}: {hits}"


def test_highp_is_checked():
    from gpubackend.paths import gles2

    p = gpath()
    ok, desc = gles2.fragment_highp(p.runtime.dev.ctx)
    assert ok, desc
    assert "#error" in (ROOT / "shaders" / "gles2" / "kernel.frag").read_text()


# ---- whole models ----------------------------------------------------------------------------

def _run_graph(proto, feeds: dict[str, np.ndarray], precision: str) -> tuple[list[np.ndarray], RunStats, int]:
    """Every node of the model on gles2 as one segment (no probe, no planner)."""
    p = gpath(precision)
    g = _model_graph(proto)
    reasons = {n.name: p.decline(n, g) for n in g.nodes}
    assert not any(reasons.values()), {k: v for k, v in reasons.items() if v}
    seg = p.compile(g.nodes, g, list(g.inputs), list(g.outputs))
    stats = RunStats()
    try:
        out = seg.run(feeds, stats)
    finally:
        seg.close()
    return [out[o] for o in g.outputs], stats, seg.draws


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_selfie_model_against_mediapipe_reference(precision):
    import onnx

    from gpubackend.models import SELFIE_SEGMENTATION

    with np.load(ROOT / "tests" / "data" / "selfie_reference.npz") as d:
        imgs, masks = d["inputs"], d["masks"]
    x = np.ascontiguousarray((imgs[:1].astype(np.float32) / 255.0).transpose(0, 3, 1, 2))
    proto = onnx.load(str(SELFIE_SEGMENTATION))
    import models

    ref = models.onnxruntime_outputs(proto, {"input": x})[0]
    (got,), stats, draws = _run_graph(proto, {"input": x}, precision)
    assert stats.uploads == 1 and stats.downloads == 1 and stats.dispatches == draws
    if precision == "fp32":
        assert float(np.abs(got - ref).max()) < 1e-4
        assert float(np.abs(got[0, 0] - masks[0]).max()) < 1e-3
    else:  # fp16 storage through 92 layers: a few probabilities move by a few 1e-2 (TFLite's GPU fp16: 3e-2)
        assert rel_err(got, ref) < 1e-2
        assert float(np.abs(got - ref).max()) < 0.1


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("which", ["mobilenet_v2_like", "unet_like"])
def test_test_models_against_onnxruntime(which, precision):
    import models

    proto = getattr(models, which)(64 if which == "mobilenet_v2_like" else 48)
    feeds = models.random_inputs(proto)
    want = models.onnxruntime_outputs(proto, feeds)
    got, stats, draws = _run_graph(proto, feeds, precision)
    assert stats.uploads == 1 and stats.downloads == 1 and stats.dispatches == draws
    for a, b in zip(got, want):
        models.assert_close(a, b, 1e-4 if precision == "fp32" else 2e-2, which)


@pytest.mark.slow
@pytest.mark.parametrize("which", ["mobilenet_v2_like", "unet_like"])
def test_test_models_full_size_through_session(which):
    import models

    import gpubackend

    proto = getattr(models, which)()
    feeds = models.random_inputs(proto)
    want = models.onnxruntime_outputs(proto, feeds)
    sess = gpubackend.Session(proto, path="gles2", fallback=False)
    got = sess.run(feeds)
    assert set(sess.placement.values()) == {"gles2"}
    for a, b in zip(got, want):
        models.assert_close(a, b, 1e-4, which)


def test_session_places_everything_on_gles2():
    import onnx

    import gpubackend
    from gpubackend.models import SELFIE_SEGMENTATION

    try:
        sess = gpubackend.Session(onnx.load(str(SELFIE_SEGMENTATION)), path="gles2", fallback=False)
    except gpubackend.errors.PathUnavailableError as exc:
        pytest.skip(f"the probe did not verify gles2 here: {exc}")
    x = np.random.default_rng(0).random((1, 3, 256, 256), dtype=np.float32)
    sess.run({"input": x})
    assert set(sess.placement.values()) == {"gles2"}
    # one draw per node (92), more where a Conv draws once per output channel
    assert sess.stats.uploads == 1 and sess.stats.downloads == 1 and sess.stats.dispatches >= 92


# ---- ONNX backend node tests, forced to gles2 ------------------------------------------------

ONNX_COVERAGE_FLOOR = 170  # 177 of the 242 cases ran fully on gles2 when this was set


def _node_cases() -> list[str]:
    try:
        from onnx_nodes import node_cases
    except ImportError:  # pragma: no cover
        return []
    return node_cases(
        [r"test_(basic_)?conv(transpose)?(_.*)?", r"test_(relu|sigmoid|tanh|hardswish|hardsigmoid|leakyrelu|elu|selu|"
         r"softplus|softsign|abs|neg|exp|floor|ceil|reciprocal|sqrt|log)(_example|_default)?",
         r"test_(add|sub|mul|div)(_bcast|_example)?", r"test_(globalaveragepool|globalmaxpool)(_precomputed)?",
         r"test_(maxpool|averagepool)_2d_.*", r"test_gemm_.*", r"test_matmul_[234]d", r"test_concat_.*",
         r"test_resize_(up|down)sample_(scales|sizes)_(linear|nearest).*", r"test_softmax_.*", r"test_clip.*",
         r"test_flatten_.*", r"test_transpose_.*", r"test_prelu_.*", r"test_reshape_.*", r"test_pad.*",
         r"test_(un)?squeeze.*", r"test_reduce_(mean|sum|max|min)_.*", r"test_split_.*"],
        {r".*_expanded(_ver\d+)?": "an expansion into other ops, tested through those ops",
         r".*(uint8|int8|int32|int64|_bool).*": "integer tensors: gles2 stores float32 only",
         r"test_maxpool_with_argmax.*": "Indices output: declined",
         r"test_split_zero_size_splits_.*": "empty outputs: declined",
         r"test_convtranspose_3d|test_conv_.*3d.*": "3-D convolution: declined"})


_ACCEPTED: list[str] = []


@pytest.mark.slow
@pytest.mark.parametrize("case", _node_cases())
def test_onnx_node_case_forced_to_gles2(case):
    """Accepted cases run with fallback=False; declined ones must fall back to cpu and still match."""
    from onnx_nodes import check_node_case_on_path

    gpath()
    if check_node_case_on_path(case, "gles2"):  # the case's own tolerances
        _ACCEPTED.append(case)


@pytest.mark.slow
def test_onnx_node_coverage():
    """Guards against the path silently declining what it used to run (run after the cases)."""
    from onnx_nodes import check_node_case_on_path

    gpath()
    accepted = _ACCEPTED or [n for n in _node_cases() if check_node_case_on_path(n, "gles2")]
    assert len(accepted) >= ONNX_COVERAGE_FLOOR, f"only {len(accepted)} ONNX node cases run fully on gles2"


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_split_draws_once_per_output(precision):
    """Split along a middle axis into uneven parts; one part feeds a later node, two leave the segment."""
    from onnx import TensorProto, helper

    import gpubackend

    f = TensorProto.FLOAT
    nodes = [helper.make_node("Split", ["x", "sizes"], ["a", "b", "c"], axis=2),
             helper.make_node("Relu", ["b"], ["rb"])]
    graph = helper.make_graph(nodes, "split", [helper.make_tensor_value_info("x", f, [2, 3, 7, 5])],
                              [helper.make_tensor_value_info(n, f, None) for n in ("a", "rb", "c")],
                              initializer=[helper.make_tensor("sizes", TensorProto.INT64, [3], [2, 4, 1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    x = rnd(2, 3, 7, 5)
    sess = gpubackend.Session(model, path="gles2", precision=precision, fallback=False)
    got = sess.run({"x": x})
    assert set(sess.placement.values()) == {"gles2"} and sess.stats.dispatches == 4
    a, b, c = np.split(x, [2, 6], axis=2)
    tol = 1e-6 if precision == "fp32" else 1e-3
    for g, w in zip(got, [a, np.maximum(b, 0), c]):
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol)


def test_conv_and_conv_transpose_with_weights_computed_at_run_time():
    run_node("Conv", {"x": rnd(1, 6, 7, 5), "w": rnd(4, 3, 3, 3), "b": rnd(4)},
             attrs={"kernel_shape": [3, 3], "pads": [1, 0, 0, 1], "group": 2})
    run_node("ConvTranspose", {"x": rnd(1, 4, 3, 5), "w": rnd(4, 3, 2, 3)}, {"b": rnd(6)},
             attrs={"kernel_shape": [2, 3], "strides": [2, 1], "group": 2})
    run_node("Conv", {"x": rnd(1, 4, 6, 6), "w": rnd(5, 4, 1, 1)}, precision="fp16")



_TAP_CASES = {
    "2x2-s2": ((1, 5, 4, 6), (5, 3, 2, 2), {}),
    "3x3-s3-pads-outpad": ((2, 4, 3, 4), (4, 2, 3, 3), {"pads": [1, 0, 2, 1], "output_padding": [1, 2]}),
    "2x3-grouped": ((1, 6, 3, 3), (6, 2, 2, 3), {"group": 3}),
}


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("case", list(_TAP_CASES))
def test_conv_transpose_with_stride_equal_to_kernel_reads_one_tap(case, precision):
    """ConvTranspose whose taps tile the output (strides == kernel_shape): one tap per output
    pixel (``convtranspose_tap``), against fallback with constant and run-time weights; NaN
    and Inf land where the reference puts them, as in the gather form (the tap form disabled)."""
    xs, ws, attrs = _TAP_CASES[case]
    attrs = {**attrs, "kernel_shape": list(ws[2:]), "strides": list(ws[2:])}
    cout = ws[1] * attrs.get("group", 1)
    run_node("ConvTranspose", {"x": rnd(*xs)}, {"w": rnd(*ws), "b": rnd(cout)}, attrs=attrs, precision=precision,
             kernel="convtranspose_tap")
    run_node("ConvTranspose", {"x": rnd(*xs), "w": rnd(*ws)}, attrs=attrs, precision=precision,
             kernel="convtranspose_tap")
    x = rnd(*xs)
    x.reshape(-1)[[1, 7]] = [np.inf, np.nan]
    consts = {"w": rnd(*ws)}
    want = reference("ConvTranspose", [x, consts["w"]], dict(attrs), 17)
    got, _, k = single("ConvTranspose", {"x": x}, consts, attrs, out_shape=tuple(want.shape))
    assert k.name == "convtranspose_tap"
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    finite = np.isfinite(want)
    assert rel_err(got[finite], want[finite]) < 1e-5
    from gpubackend.paths import gles2

    gather = gles2.create(disabled_kernels=frozenset({"convtranspose_tap"}))
    again, _, k = single("ConvTranspose", {"x": x}, consts, attrs, out_shape=tuple(want.shape), path=gather)
    assert k.name == "convtranspose"
    np.testing.assert_array_equal(np.isnan(again), np.isnan(want))
    assert rel_err(again[finite], got[finite]) < 1e-6

# ---- Conv weights in uniforms, one draw per output channel ------------------------------------

_CHANNEL_CASES = {
    "1x1": ((2, 9, 5, 6), (6, 9, 1, 1), {}),
    "3x3-pads-strides": ((1, 13, 11, 9), (7, 13, 3, 3), {"pads": [1, 2, 1, 0], "strides": [2, 1]}),
    "depthwise-5x5": ((1, 6, 9, 8), (6, 1, 5, 5), {"pads": [2, 2, 2, 2], "group": 6}),
    "grouped-dilated": ((1, 8, 10, 10), (12, 2, 3, 3), {"pads": [0, 1, 2, 1], "group": 4, "dilations": [1, 2]}),
    "1x1-relu-cin4": ((1, 4, 7, 6), (5, 4, 1, 1), {"_act": ("Relu", {})}),
}


@pytest.mark.parametrize("precision,varyings", [("fp32", True), ("fp32", False), ("fp16", True)])
@pytest.mark.parametrize("case", list(_CHANNEL_CASES))
def test_conv_with_channel_draws_matches_fallback(case, precision, varyings):
    """The per-channel variant (forced at any size) against fallback, with Inf and NaN inputs
    (each placed where the reference puts it); its weights in varyings (fp32 where they fit, on
    for llvmpipe) or in the uniform array."""
    from gpubackend.paths import gles2

    xs, ws, attrs = _CHANNEL_CASES[case]
    x = rnd(*xs)
    x.reshape(-1)[[3, 40]] = [np.inf, np.nan]
    consts = {"w": rnd(*ws, scale=0.3), "b": rnd(ws[0])}
    if precision == "fp16":
        x = x.astype(np.float16).astype(np.float32)
    want = reference("Conv", [x, consts["w"], consts["b"]], dict(attrs), 17)
    path = gles2.create(precision, frozenset({"conv_quads", "conv_winograd", "depthwise_quads"}),
                        channel_draw_min_pixels=0)
    path.poison = True
    if not path.runtime.channel_varyings:
        pytest.fail("channel_varyings is off on this llvmpipe context")
    path.runtime.channel_varyings = varyings
    got, stats, k = single("Conv", {"x": x}, consts, attrs, precision=precision, out_shape=tuple(want.shape),
                           path=path)
    assert k.channel_uniforms is not None and stats.dispatches == xs[0] * ws[0]
    assert bool(k.vertex) == (varyings and precision == "fp32")  # fp16 packs two elements: uniforms
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    finite = np.isfinite(want)
    err = float(np.abs(got[finite] - want[finite]).max() / max(1.0, float(np.abs(want[finite]).max())))
    assert err < (1e-2 if precision == "fp16" else 1e-5), err


def test_channel_draws_only_where_they_pay_and_fit():
    """Default: per-channel draws from CHANNEL_DRAW_MIN_PIXELS output pixels on, or below that
    from CHANNEL_DRAW_MIN_MACS multiply-adds per draw where each group has several input
    channels (not depthwise); never past the uniform vectors the driver has, nor when switched
    off (None)."""
    from gpubackend.paths import gles2
    from gpubackend.paths.gles2.kernels import CHANNEL_DRAW_MIN_MACS, CHANNEL_DRAW_MIN_PIXELS, Config, channel_weights

    w = rnd(8, 16, 3, 3)
    side = int(np.ceil(np.sqrt(CHANNEL_DRAW_MIN_PIXELS)))
    cfg = Config("fp32", 4096, 16, 1024)
    assert channel_weights(w, None, cfg, (1, 8, side, side)) is not None
    small = side // 2
    assert small * small * 9 * 16 >= CHANNEL_DRAW_MIN_MACS  # fewer pixels, but enough work per draw
    assert channel_weights(w, None, cfg, (1, 8, small, small)) is not None
    assert channel_weights(w, None, cfg, (1, 8, 2, 2)) is None  # 576 per draw
    depthwise = rnd(8, 1, 3, 3)
    assert channel_weights(depthwise, None, cfg, (1, 8, side, side)) is not None
    assert channel_weights(depthwise, None, cfg, (1, 8, small, small)) is None
    assert channel_weights(w, None, Config("fp32", 4096, 16, 1024, None), (1, 8, side, side)) is None
    assert channel_weights(w, None, Config("fp32", 4096, 16, 9 * 16 + 8), (1, 8, side, side)) is None
    assert channel_weights(w, None, Config("fp32", 4096, 16, 9 * 16 + 9), (1, 8, side, side)) is not None
    # off: the one-draw kernel (not Winograd or the quad GEMMs), same answer
    x = rnd(1, 16, 12, 12)
    path = gles2.create("fp32", frozenset({"conv_winograd", "conv_quads"}), channel_draw_min_pixels=None)
    got, stats, k = single("Conv", {"x": x}, {"w": w}, {"pads": [1, 1, 1, 1]}, path=path)
    assert k.channel_uniforms is None and stats.dispatches == 1
    want = reference("Conv", [x, w, None], {"pads": [1, 1, 1, 1]}, 17)
    assert rel_err(got, want) < 1e-5


def test_segment_counts_its_weight_bytes():
    """explain()'s device weight bytes on gles2: the constant textures (4 bytes a texel) and the
    per-channel uniform weights, at least the conv's weights and bias as float32."""
    rng = np.random.default_rng(4)
    w = rng.standard_normal((8, 4, 3, 3)).astype(np.float32)
    b = rng.standard_normal(8).astype(np.float32)
    node, g = _graph1("Conv", {"x": (1, 4, 6, 6), "w": w.shape, "b": b.shape, "out_": (1, 8, 6, 6)},
                      {"w": w, "b": b}, {"pads": [1, 1, 1, 1]})
    seg = gpath("fp32").compile(g.nodes, g, ["x"], ["out_"])
    try:
        assert 4 * (w.size + b.size) <= seg.weight_bytes < 4 * 4 * (w.size + b.size)
    finally:
        seg.close()


# ---- Winograd and quad GEMMs (gles2/winograd.py, gles2/quads.py) -------------------------------

_QUAD_CASES = {
    # name: (x shape, w shape, attrs, kernel, draws per run)
    # 40 output channels: the GEMM's 640 quads take three draws (quads.MAX_QUADS)
    "winograd": ((1, 32, 12, 12), (40, 32, 3, 3), {"pads": [1, 1, 1, 1]}, "conv_winograd", 1 + 3 + 1),
    "winograd-odd-asymmetric": ((1, 33, 11, 9), (34, 33, 3, 3), {"pads": [2, 0, 1, 1], "_act": ("Relu", {})},
                                "conv_winograd", 1 + 3 + 1),
    "winograd-valid-silu": ((1, 32, 13, 12), (32, 32, 3, 3), {"_act": ("Sigmoid", {"gate": 1})}, "conv_winograd",
                            1 + 2 + 1),
    # 130 input channels: two GEMM passes (three draws each), the second adding the first's sums
    "winograd-chunked": ((1, 130, 10, 10), (33, 130, 3, 3), {"pads": [1, 1, 1, 1]}, "conv_winograd", 1 + 6 + 1),
    "1x1": ((1, 5, 7, 6), (11, 5, 1, 1), {"_act": ("Relu", {})}, "conv_quads", 1),
    # 144 (tap, channel) terms: two passes
    "3x3-stride2": ((1, 16, 11, 10), (12, 16, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}, "conv_quads", 2),
    "5x3-dilated-asymmetric": ((1, 6, 12, 9), (7, 6, 5, 3), {"pads": [2, 1, 0, 3], "dilations": [2, 1],
                                                             "_act": ("Relu", {})}, "conv_quads", 1),
    "1x1-chunked": ((1, 300, 6, 5), (20, 300, 1, 1), {"_act": ("Sigmoid", {"gate": 1})}, "conv_quads", 3),
    # depthwise: the taps of the quad's own channel, 256 channels (quads) to a draw
    "depthwise-3x3": ((1, 32, 12, 11), (32, 1, 3, 3), {"pads": [1, 1, 1, 1], "group": 32}, "depthwise_quads", 1),
    "depthwise-5x5-stride2-asymmetric": ((1, 24, 13, 10), (24, 1, 5, 5), {"pads": [2, 1, 2, 3], "strides": [2, 2],
                                                                          "group": 24, "_act": ("Relu", {})},
                                         "depthwise_quads", 1),
    "depthwise-300ch-silu": ((1, 300, 8, 7), (300, 1, 3, 3), {"pads": [1, 1, 1, 1], "group": 300,
                                                              "_act": ("Sigmoid", {"gate": 1})}, "depthwise_quads", 2),
}
_TRIANGLE_PATH: list[Any] = []


def triangles_path() -> Any:
    """A gles2 path whose many-quad draws use two triangles per quad (no point sprites), as on a
    driver whose GL_ALIASED_POINT_SIZE_RANGE stops at 1."""
    from gpubackend.paths import gles2

    if not _TRIANGLE_PATH:
        gpath()
        p = gles2.create("fp32")
        p.runtime.max_point_size = 0
        p.poison = True
        _TRIANGLE_PATH.append(p)
    return _TRIANGLE_PATH[0]


@pytest.mark.parametrize("sprites", ["points", "triangles"])
@pytest.mark.parametrize("case", list(_QUAD_CASES))
def test_winograd_and_quad_gemms_match_fallback(case, sprites):
    """gles2's Winograd 3x3 convs and quad GEMM convs, their quads drawn as point sprites and as
    triangles, against fallback with NaN-poisoned outputs and +-Inf / NaN inputs:
    the transforms mix a patch's inputs, so an infinite input must still give the direct sum's
    +-Inf (not NaN) and NaN only where the direct sum has it; odd sizes (quads that take several
    sprites), asymmetric and no padding, fused activations (SiLU's gate), reductions in several
    passes."""
    xs, ws, attrs, kernel, draws = _QUAD_CASES[case]
    rng = np.random.default_rng(7)
    x = rng.standard_normal(xs).astype(np.float32)
    for c, y, z, v in [(0, 0, 0, np.inf), (1, 3, xs[3] - 1, -np.inf), (2, xs[2] // 2, 4, np.inf),
                       (xs[1] - 1, xs[2] - 1, 1, np.nan), (3, 5, 2, -np.inf), (3, 5, 3, np.inf)]:
        x[0, c, y, z] = v
    consts = {"w": (rng.standard_normal(ws) * 0.3).astype(np.float32),
              "b": rng.standard_normal(ws[0]).astype(np.float32)}
    consts["w"][2, :, 0, 0] = 0.0  # 0 * Inf is NaN in the direct sum
    want = reference("Conv", [x, consts["w"], consts["b"]], dict(attrs), 17)
    assert np.isinf(want).any() and np.isnan(want).any()
    path = gpath() if sprites == "points" else triangles_path()
    got, stats, k = single("Conv", {"x": x}, consts, attrs, out_shape=tuple(want.shape), path=path)
    assert k.name == kernel
    assert stats.dispatches == draws
    assert (path.runtime.max_point_size >= 2) == (sprites == "points")
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.where(np.isinf(want), want, 0), np.where(np.isinf(got), got, 0))
    finite = np.isfinite(want)
    err = float(np.abs(got[finite] - want[finite]).max() / max(1.0, float(np.abs(want[finite]).max())))
    assert err < 1e-5, err


def test_point_cover_covers_each_quad_exactly():
    """The point sprites of a quad lie inside it and cover every texel of it, for every quad size
    up to 40 and sprite limits down to 2; none where no sprite fits or too many would be needed."""
    from gpubackend.paths.gles2.quads import MAX_POINTS, MAX_QUADS, point_cover

    for limit in (2, 3, 7, 255):
        for w in range(1, 41):
            for h in range(1, 41):
                cover = point_cover(w, h, limit)
                if cover is None:
                    assert min(w, h, limit) < 2 or -(-w // min(w, h, limit)) * -(-h // min(w, h, limit)) \
                        * MAX_QUADS > MAX_POINTS
                    continue
                side, across, down = cover
                assert 2 <= side <= min(w, h, limit)
                seen = np.zeros((h, w), bool)
                for j in range(down):  # as quads.vert places sprite (i, j)
                    for i in range(across):
                        x0, y0 = min(i * side, w - side), min(j * side, h - side)
                        assert x0 >= 0 and y0 >= 0
                        seen[y0:y0 + side, x0:x0 + side] = True
                assert seen.all(), (w, h, limit, cover)
    assert point_cover(40, 40, 255) == (40, 1, 1)


def test_winograd_and_quad_gemms_only_where_they_fit():
    """Winograd takes 3x3 stride-1 undilated ungrouped convs of one image with enough channels and
    pixels and finite weights; the quad GEMMs other ungrouped convs of one image whose reduction
    fits MAX_CHUNKS passes; both need varyings for the weights (llvmpipe), fp32, constant weights."""
    from gpubackend.paths.gles2.kernels import Config, generate

    cfg = Config("fp32", 16384, 16, 1024, channel_varyings=True, max_varying_vectors=32,
                 max_vertex_uniform_vectors=4096)
    w3 = {"w": np.ones((16, 16, 3, 3), np.float32)}
    for shapes, consts, attrs, want in [
        ({"x": (1, 32, 12, 12), "w": (32, 32, 3, 3)}, {"w": np.ones((32, 32, 3, 3), np.float32)},
         {"pads": [1, 1, 1, 1]}, "conv_winograd"),
        ({"x": (1, 16, 12, 12), "w": (16, 16, 3, 3)}, w3, {"pads": [1, 1, 1, 1]}, "conv_quads"),  # 16 channels
        ({"x": (1, 16, 12, 12), "w": (16, 16, 3, 3)}, w3, {"strides": [2, 2]}, "conv_quads"),
        ({"x": (1, 16, 12, 12), "w": (16, 16, 3, 3)}, w3, {"dilations": [2, 2]}, "conv_quads"),
        ({"x": (2, 16, 12, 12), "w": (16, 16, 3, 3)}, w3, {"pads": [1, 1, 1, 1]}, "conv"),  # two images
        ({"x": (1, 16, 4, 4), "w": (16, 16, 3, 3)}, w3, {"pads": [1, 1, 1, 1]}, "conv_quads"),  # 16 pixels
        ({"x": (1, 4, 12, 12), "w": (16, 4, 3, 3)}, {"w": np.ones((16, 4, 3, 3), np.float32)}, {}, "conv_quads"),
        ({"x": (1, 16, 12, 12), "w": (16, 16, 3, 3)}, {"w": np.full((16, 16, 3, 3), np.inf, np.float32)}, {},
         "conv_quads"),  # weights not finite: no Winograd
        ({"x": (1, 16, 12, 12), "w": (8, 16, 1, 1)}, {"w": np.ones((8, 16, 1, 1), np.float32)}, {}, "conv_quads"),
        ({"x": (1, 16, 12, 12), "w": (8, 16, 1, 1)}, {"w": np.ones((8, 16, 1, 1), np.float32)},
         {"pads": [1, 1, 1, 1]}, "conv_quads"),
        # 9 x 200 (tap, channel) terms: more passes than quads.MAX_CHUNKS
        ({"x": (1, 200, 12, 12), "w": (8, 200, 3, 3)}, {"w": np.ones((8, 200, 3, 3), np.float32)},
         {"strides": [2, 2]}, "conv"),
    ]:
        node, graph = _graph1("Conv", dict(shapes) | {"out_": tuple(reference(
            "Conv", [np.zeros(shapes["x"], np.float32), consts["w"]], dict(attrs), 12).shape)}, consts, attrs, 12)
        got = generate(node, graph, cfg)
        assert not isinstance(got, str), got
        assert got.kernel == want, (shapes, attrs, got.kernel)
        for off in (Config("fp32", 16384, 16, 1024), Config("fp16", 16384, 16, 1024, channel_varyings=True,
                                                             max_varying_vectors=32, max_vertex_uniform_vectors=4096)):
            got = generate(node, graph, off)
            assert isinstance(got, str) or got.kernel not in ("conv_winograd", "conv_quads")


def test_verdicts_name_the_kernel_the_path_object_runs():
    """The first-run check and the conformance suite file a failing case under the kernel the path
    object runs: on llvmpipe (weights in varyings) a 3x3 conv of 32 channels is conv_winograd and a
    strided one conv_quads, where the context-free module function says conv."""
    from gpubackend.conformance.cases import matrix
    from gpubackend.conformance.runner import kernel_names
    from gpubackend.paths import gles2

    p = gpath()
    assert p.runtime.channel_varyings
    w = {"w": np.ones((32, 32, 3, 3), np.float32)}
    for attrs, want in (({"pads": [1, 1, 1, 1]}, "conv_winograd"), ({"strides": [2, 2]}, "conv_quads")):
        out = reference("Conv", [np.zeros((1, 32, 12, 12), np.float32), w["w"]], dict(attrs), 12).shape
        node, graph = _graph1("Conv", {"x": (1, 32, 12, 12), "w": (32, 32, 3, 3), "out_": tuple(out)}, w, attrs, 12)
        assert p.kernel_name_for(node, graph) == want
        assert gles2.kernel_name(node, graph) == "conv"
        case = next(c for c in matrix(full=False) if c.op == "Conv")
        assert kernel_names(p, graph, case) == [want]


def test_fp32_concat_and_split_copy_the_bytes():
    """Concat and Split of fp32 tensors copy texels (no decode or encode): every value comes through
    bit for bit, -0, subnormals and NaN payloads included, which the RGBA8 encode would change."""
    a = rnd(1, 3, 4, 5)
    b = rnd(1, 2, 4, 5)
    specials = np.array([-0.0, 1e-40, np.inf, -np.inf], np.float32)
    a.reshape(-1)[:4] = specials
    a.view(np.uint32).reshape(-1)[4] = 0x7FC01234  # a NaN with a payload
    got, _, k = single("Concat", {"a": a, "b": b}, attrs={"axis": 1})
    assert k.name == "concat" and "g2_encode32" not in k.fragment.split("void main")[1]
    np.testing.assert_array_equal(got.view(np.uint32), np.concatenate([a, b], axis=1).view(np.uint32))
    x = np.concatenate([a, b], axis=1)
    from gpubackend.graph import Graph, Node
    from gpubackend.paths.base import RunStats

    node = Node("s", "Split", ["x"], ["y0", "y1"], {"axis": 1})
    graph = Graph([node], ["x"], ["y0", "y1"], {}, {"x": x.shape, "y0": a.shape, "y1": b.shape},
                  {n: np.dtype(np.float32) for n in ("x", "y0", "y1")}, 13)
    p = gpath()
    assert p.decline(node, graph) is None
    seg = p.compile([node], graph, ["x"], ["y0", "y1"])
    try:
        out = seg.run({"x": x}, RunStats())
    finally:
        seg.close()
    np.testing.assert_array_equal(out["y0"].view(np.uint32), a.view(np.uint32))
    np.testing.assert_array_equal(out["y1"].view(np.uint32), b.view(np.uint32))


def test_explain_names_the_quads_geometry():
    """explain() says how gles2's many-quad draws cover their quads (point sprites on llvmpipe)."""
    from onnx import TensorProto, helper, numpy_helper

    import gpubackend

    w = numpy_helper.from_array(np.ones((64, 64, 3, 3), np.float32), "w")
    graph = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 10, 10])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64, 10, 10])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with gpubackend.Session(model, path="gles2", fallback=False) as sess:
        sess.run({"x": np.zeros((1, 64, 10, 10), np.float32)})
        text = sess.explain()
    assert "variant: conv_winograd point sprites x1 (point size up to" in text, text
