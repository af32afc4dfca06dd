"""The gles3 path (GL ES 3.0 fragment shaders with multiple render targets): every kernel against
the ``fallback`` reference on random inputs and awkward shapes, with output textures poisoned
(NaN) before each draw; whole models against onnxruntime; proof of ES 3.0 / GLSL ES 3.00 only."""

from __future__ import annotations

import re
from pathlib import Path as FsPath

import numpy as np
import pytest

from gpubackend import fallback
from gpubackend.graph import Graph, Node
from gpubackend.paths.base import RunStats

ROOT = FsPath(__file__).resolve().parents[1]


_PATHS: dict[tuple, object] = {}


def gpath(precision: str = "fp32", targets: int | None = None):
    from capability_probe.errors import DriverUnavailable
    from gpubackend.paths import gles3

    key = (precision, targets)
    if key not in _PATHS:
        try:
            _PATHS[key] = gles3.Gles3Path(precision, targets=targets or gles3.DEFAULT_TARGETS)
        except DriverUnavailable as exc:
            pytest.skip(f"no GL ES 3.0 context with float render targets: {exc}")
    return _PATHS[key]


def rel_err(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.linalg.norm((got - want).ravel()) / max(np.linalg.norm(want.ravel()), 1e-30))


def run_node(op: str, feeds: dict[str, np.ndarray], consts: dict[str, np.ndarray] | None = None,
             attrs: dict | None = None, order: list[str] | None = None, opset: int = 17,
             precision: str = "fp32", targets: int | None = None, tol: float | None = None) -> np.ndarray:
    """Run one node on gles3 (outputs poisoned with NaN first) and compare with fallback."""
    consts = consts or {}
    attrs = attrs or {}
    names = order or list(feeds) + list(consts)
    arrays = {**feeds, **consts}
    args = [arrays[n] if n else None for n in names]
    want = np.asarray(fallback.run_node(op, args, attrs, opset)[0])
    shapes = {n: tuple(a.shape) for n, a in arrays.items()}
    shapes["y"] = tuple(want.shape)
    dtypes = {n: np.dtype(np.float32) for n in shapes}
    node = Node("n", op, names, ["y"], dict(attrs))
    graph = Graph([node], list(feeds), ["y"], dict(consts), shapes, dtypes, opset,
                  {n: tuple(a.shape) for n, a in feeds.items()})
    path = gpath(precision, targets)
    why = path.decline(node, graph)
    assert why is None, why
    seg = path.compile([node], graph, list(feeds), ["y"])
    seg.poison = float("nan")
    saved = {n: a.copy() for n, a in feeds.items()}
    try:
        stats = RunStats()
        got = seg.run(feeds, stats)["y"]
    finally:
        seg.close()
    for n, a in feeds.items():
        np.testing.assert_array_equal(a, saved[n], err_msg="feeds were modified")
    assert got.shape == want.shape
    assert stats.dispatches >= 1 and stats.uploads >= 1 and stats.downloads >= 1
    if precision == "fp16":
        tol = tol or 1e-2
    tol = tol or 1e-4
    err = rel_err(got, want)
    assert np.isfinite(got).all() == np.isfinite(want).all(), "non-finite values (an unwritten texel?)"
    assert err < tol, f"{op} {attrs}: relative error {err:.3g}"
    return got


rng = np.random.default_rng(0)


def rnd(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(np.float32)


# ---- kernels on awkward shapes: tests/test_ops.py (KERNEL_CASES); what is gles3's own stays here -----

def test_conv_weights_in_texture_when_blocks_are_too_large():
    from gpubackend.paths.gles3 import kernels

    # 3x3 x 200 input channels: 450 vec4 per block... force the texture by a tiny block limit
    path = gpath()
    lim = path.limits
    small = kernels.Limits(**{**lim.__dict__, "max_uniform_block_size": 256})
    path.limits = small
    try:
        run_node("Conv", {"x": rnd(1, 9, 6, 5)}, {"w": rnd(11, 9, 3, 3, scale=0.3), "b": rnd(11)},
                 {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]})
    finally:
        path.limits = lim


@pytest.mark.parametrize("op,feeds,consts,attrs", [
    ("MatMul", {"a": (37, 70)}, {"b": (70, 45)}, {}),
    ("Gemm", {"a": (5, 130)}, {"b": (130, 70), "c": (70,)}, {"alpha": 0.5}),
    ("Conv", {"x": (3, 40, 1, 1)}, {"w": (24, 40, 1, 1), "b": (24,)}, {"kernel_shape": [1, 1]}),
    ("Conv", {"x": (3, 20, 1, 1)}, {"w": (20, 1, 1, 1)}, {"kernel_shape": [1, 1], "group": 20}),  # depthwise
    ("Conv", {"x": (2, 8, 1, 1)}, {"w": (12, 4, 1, 1)}, {"kernel_shape": [1, 1], "group": 2}),  # grouped
])
def test_one_pixel_tiles_in_one_draw(op, feeds, consts, attrs):
    """Outputs of 1-pixel tiles (Gemm/MatMul rows, 1x1 images) in one draw, weights from a
    texture indexed by each fragment's slot: the same values as one draw per tile."""
    from gpubackend.paths.gles3 import kernels

    x = {k: rnd(*v) for k, v in feeds.items()}
    c = {k: rnd(*v, scale=0.3) for k, v in consts.items()}
    path = gpath()
    saved = path.limits
    lim = path.limits = kernels.Limits(**{**saved.__dict__, "conv_blend": False})  # the classic kernel
    names = list(x) + list(c)
    want = np.asarray(fallback.run_node(op, [{**x, **c}[n] for n in names], attrs, 17)[0])
    node = Node("n", op, names, ["y"], dict(attrs))
    graph = Graph([node], list(x), ["y"], c, {**{k: a.shape for k, a in {**x, **c}.items()}, "y": want.shape},
                  {t: np.dtype(np.float32) for t in [*names, "y"]}, 17, {k: a.shape for k, a in x.items()})
    try:
        assert not kernels.build(node, graph, lim).tiled
        got = run_node(op, x, c, attrs)
        path.limits = kernels.Limits(**{**lim.__dict__, "one_draw_tile_pixels": 0})
        assert kernels.build(node, graph, path.limits).tiled
        tiled = run_node(op, x, c, attrs)
    finally:
        path.limits = saved
    np.testing.assert_allclose(got, tiled, rtol=1e-6, atol=1e-6)


# (N, Cin, H, W, Cout, kernel, stride, pads, output_padding): kernel == stride (selfie, U-Net),
# overlapping taps, asymmetric kernel and stride, a phase without taps, padded output slots
CONVTRANSPOSE_TAPS = [(1, 16, 8, 8, 1, (2, 2), (2, 2), 0, (0, 0)), (2, 8, 4, 5, 20, (2, 2), (2, 2), 0, (0, 0)),
                      (1, 6, 5, 4, 7, (4, 4), (2, 2), 1, (0, 0)), (1, 4, 5, 5, 3, (3, 3), (2, 2), 1, (1, 1)),
                      (1, 6, 5, 4, 7, (3, 2), (2, 3), 0, (0, 0)), (1, 7, 6, 6, 9, (2, 5), (3, 3), 2, (2, 1))]


@pytest.mark.parametrize("case", CONVTRANSPOSE_TAPS, ids=lambda c: "x".join(map(str, c[:5])) + f"_k{c[5]}s{c[6]}")
def test_convtranspose_by_taps_matches_the_gather_form(case):
    """The two-pass ConvTranspose (products per tap, then each pixel's own phase) against the
    reference and the one-pass gather kernel, with NaN and Inf in the input."""
    from gpubackend.paths import gles3

    n, cin, h, w, cout, k, s, p, opad = case
    x = rnd(n, cin, h, w)
    x[0, 1, 2, 3], x[-1, 0, 0, 0] = np.nan, np.inf
    wt, b = rnd(cin, cout, *k, scale=0.3), rnd(cout)
    attrs = {"kernel_shape": list(k), "strides": list(s), "pads": [p] * 4, "output_padding": list(opad)}
    want = np.asarray(fallback.run_node("ConvTranspose", [x, wt, b], attrs, 17)[0])
    node = Node("ct", "ConvTranspose", ["x", "w", "b"], ["y"], dict(attrs))
    graph = Graph([node], ["x"], ["y"], {"w": wt, "b": b}, {"x": x.shape, "w": wt.shape, "b": b.shape,
                                                           "y": want.shape},
                  {t: np.dtype(np.float32) for t in ("x", "w", "b", "y")}, 17, {"x": x.shape})
    assert [part.name for part in gpath().kernel(node, graph)] == ["convtranspose_taps", "convtranspose_sum"]
    gather = gles3.Gles3Path(disabled_kernels=frozenset({"convtranspose_taps"}))
    assert gather.kernel(node, graph).name == "convtranspose"
    fin = np.isfinite(want)
    for path in (gpath(), gather):
        seg = path.compile([node], graph, ["x"], ["y"])
        seg.poison = float("nan")
        try:
            stats = RunStats(profile=True)
            got = seg.run({"x": x}, stats)["y"]
        finally:
            seg.close()
        assert list(stats.node_seconds) == ["ct"]  # both passes count as the graph's node
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_array_equal(got[~fin & ~np.isnan(want)], want[~fin & ~np.isnan(want)])
        assert rel_err(got[fin], want[fin]) < 1e-5


def test_convtranspose_by_taps_declines_what_the_gather_form_takes():
    from gpubackend.paths.gles3 import kernels

    x, wt = rnd(1, 4, 5, 5), rnd(4, 6, 3, 3)
    for attrs, why in [({"strides": [1, 1]}, "stride 1"), ({"strides": [2, 2], "dilations": [2, 2]}, "dilated")]:
        want = np.asarray(fallback.run_node("ConvTranspose", [x, wt], attrs, 17)[0])
        node = Node("ct", "ConvTranspose", ["x", "w"], ["y"], dict(attrs))
        graph = Graph([node], ["x"], ["y"], {"w": wt}, {"x": x.shape, "w": wt.shape, "y": want.shape},
                      {t: np.dtype(np.float32) for t in ("x", "w", "y")}, 17, {"x": x.shape})
        assert why in kernels.conv_transpose_taps(node, graph, gpath().limits)
        assert kernels.build(node, graph, gpath().limits).name == "convtranspose"


# (N, Cin, H, W, Cout, kernel, stride, pads, dilation, pixels per fragment): an output width not
# a multiple of the pixels, output slices not a multiple of the slices per fragment, strided,
# dilated, 1x1 over a batch with channels not a multiple of 4, 4 pixels of one slice
CONV_PX = [(1, 15, 32, 33, 6, 3, 1, 1, 1, 2),
           *(pytest.param(*c, marks=pytest.mark.slow) for c in [
               (1, 17, 66, 70, 13, 3, 2, 1, 1, 2), (1, 16, 36, 38, 5, 3, 1, 0, 2, 2),
               (2, 130, 32, 33, 9, 1, 1, 0, 1, 2), (1, 15, 32, 34, 7, 3, 1, 1, 1, 4)])]


@pytest.mark.parametrize("n,cin,h,w,cout,k,s,p,d,pixels", CONV_PX)
def test_conv_several_pixels_per_fragment_matches_the_one_pixel_kernel(n, cin, h, w, cout, k, s, p, d, pixels):
    """conv_px (several output pixels per fragment, then the pixels put in place) against the
    reference and the one-pixel kernel, with NaN and Inf in the input."""
    import dataclasses

    from gpubackend.paths import gles3

    x = rnd(n, cin, h, w)
    x[0, 1, 2, 3], x[-1, 0, h - 1, w - 2] = np.nan, np.inf
    wt, b = rnd(cout, cin, k, k, scale=0.3), rnd(cout)
    attrs = {"kernel_shape": [k, k], "strides": [s, s], "pads": [p] * 4, "dilations": [d, d]}
    want = np.asarray(fallback.run_node("Conv", [x, wt, b], attrs, 17)[0])
    node = Node("c", "Conv", ["x", "w", "b"], ["y"], dict(attrs))
    graph = Graph([node], ["x"], ["y"], {"w": wt, "b": b}, {"x": x.shape, "w": wt.shape, "b": b.shape,
                                                           "y": want.shape},
                  {t: np.dtype(np.float32) for t in ("x", "w", "b", "y")}, 17, {"x": x.shape})
    px = gles3.Gles3Path(disabled_kernels=frozenset({"conv_blend"}))
    px.limits = dataclasses.replace(px.limits, conv_px_pixels=pixels)
    assert [part.name for part in px.kernel(node, graph)] == ["conv_px", "conv_px_unpack"]
    assert gles3.kernel_name(node, graph) == "conv_px"
    one = gles3.Gles3Path(disabled_kernels=frozenset({"conv_px", "conv_blend"}))
    assert one.kernel(node, graph).name in ("conv", "conv1x1")
    _matches_the_reference((px, one), x, want, node, graph)


def _matches_the_reference(paths, x, want, node, graph, tol: float = 1e-5) -> None:
    """Node ``c`` (input ``x``, output ``y``) on each path with its output poisoned: NaN and Inf
    where the reference has them, the rest within ``tol``, every pass timed as the node."""
    fin = np.isfinite(want)
    for path in paths:
        seg = path.compile([node], graph, ["x"], ["y"])
        seg.poison = float("nan")
        try:
            stats = RunStats(profile=True)
            got = seg.run({"x": x}, stats)["y"]
        finally:
            seg.close()
        assert list(stats.node_seconds) == ["c"]  # every pass counts as the graph's node
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_array_equal(got[~fin & ~np.isnan(want)], want[~fin & ~np.isnan(want)])
        assert rel_err(got[fin], want[fin]) < tol


def test_conv_several_pixels_per_fragment_declines_small_and_grouped():
    from gpubackend.paths.gles3 import conv_px, kernels

    lim = kernels.Limits()
    for xs, ws, attrs in [((1, 16, 16, 16), (8, 16, 3, 3), {"pads": [1] * 4}),  # 256 output pixels
                          ((1, 8, 32, 32), (8, 8, 3, 3), {"pads": [1] * 4}),  # 72 multiply-adds per output
                          ((1, 16, 32, 32), (16, 1, 3, 3), {"pads": [1] * 4, "group": 16})]:
        ys = (1, ws[0], xs[2], xs[3])
        node = Node("c", "Conv", ["x", "w"], ["y"], attrs)
        graph = Graph([node], ["x"], ["y"], {"w": rnd(*ws)}, {"x": xs, "w": ws, "y": ys},
                      {t: np.dtype(np.float32) for t in ("x", "w", "y")}, 17, {"x": xs})
        assert conv_px.declines(node, graph, lim)
        assert kernels.build(node, graph, lim).name in ("conv", "depthwise")


# (N, Cin, H, W, Cout, kernel, stride, pads, dilation): 3x3 with padding; 3 input slices (a
# chunk of one plane: the other sampler keeps a stale binding); strided over a batch; dilated
# with output channels not a multiple of 4; 1x1 of 3 input channels (a first layer).
CONV_BLEND = [(1, 16, 12, 13, 6, 3, 1, 1, 1), (1, 12, 9, 10, 7, 3, 1, 1, 1),
              *(pytest.param(*c, marks=pytest.mark.slow) for c in [
                  (2, 17, 15, 14, 13, 3, 2, 1, 1), (1, 24, 16, 18, 5, 3, 1, 2, 2), (1, 3, 20, 21, 17, 5, 2, 2, 1)])]


def _blend_case(op: str, xs: tuple[int, ...], ws: tuple[int, ...], attrs: dict):
    x = rnd(*xs)
    x.reshape(-1)[[3, x.size // 2, x.size - 5]] = [np.nan, np.inf, -np.inf]
    w, b = rnd(*ws, scale=0.3), rnd(ws[0] if op == "Conv" or attrs.get("transB") else ws[1])
    names = ["x", "w", "b"] if op != "MatMul" else ["x", "w"]
    arrays = {"x": x, "w": w, "b": b}
    want = np.asarray(fallback.run_node(op, [arrays[n] for n in names], attrs, 17)[0])
    node = Node("c", op, names, ["y"], dict(attrs))
    graph = Graph([node], ["x"], ["y"], {n: arrays[n] for n in names[1:]},
                  {**{n: arrays[n].shape for n in names}, "y": want.shape},
                  {t: np.dtype(np.float32) for t in [*names, "y"]}, 17, {"x": x.shape})
    return x, want, node, graph


def _run_blend_paths(x, want, node, graph, precision: str = "fp32", tol: float = 1e-5) -> None:
    from gpubackend.paths import gles3
    from gpubackend.paths.gles3 import kernels

    blend = gles3.Gles3Path(precision)
    if not (blend.limits.float_blend and blend.limits.conv_blend):
        pytest.fail(f"conv_blend is off on this llvmpipe context: {blend.limits}")
    assert [part.name for part in blend.kernel(node, graph)] == ["conv_blend", "conv_blend_out"]
    assert blend.kernel_name_for(node, graph) == "conv_blend"
    assert kernels.kernel_name(node, graph) != "conv_blend"  # the ES 3.0 minimum has no float blending
    classic = gles3.Gles3Path(precision, disabled_kernels=frozenset({"conv_blend"}))
    _matches_the_reference((blend, classic), x, want, node, graph, tol)


@pytest.mark.parametrize("n,cin,h,w,cout,k,s,p,d", CONV_BLEND)
def test_conv_blend_matches_the_reference_and_the_classic_kernel(n, cin, h, w, cout, k, s, p, d):
    """conv_blend (weights in flat varyings, chunks summed by blending) against the reference and
    the kernel it replaces, NaN and Inf in the input, outputs poisoned."""
    attrs = {"kernel_shape": [k, k], "strides": [s, s], "pads": [p] * 4, "dilations": [d, d]}
    _run_blend_paths(*_blend_case("Conv", (n, cin, h, w), (cout, cin, k, k), attrs))


@pytest.mark.parametrize("op,m,k,nout,attrs", [("Gemm", 37, 70, 45, {"alpha": 0.5, "beta": 2.0}),
                                               ("MatMul", 130, 64, 9, {}),
                                               ("Gemm", 19, 96, 20, {"transB": 1})])
def test_conv_blend_gemm_and_matmul(op, m, k, nout, attrs):
    """Gemm/MatMul rows as the pixels of the accumulator's tiles (a near-square block)."""
    ws = (nout, k) if attrs.get("transB") else (k, nout)
    _run_blend_paths(*_blend_case(op, (m, k), ws, attrs))


def test_conv_blend_fp16_keeps_an_fp32_accumulator():
    x, want, node, graph = _blend_case("Conv", (1, 32, 16, 16), (24, 32, 3, 3),
                                       {"kernel_shape": [3, 3], "pads": [1] * 4})
    _run_blend_paths(x, want, node, graph, "fp16", tol=1e-2)


def test_conv_blend_declines():
    import dataclasses

    from gpubackend.paths.gles3 import conv_blend, kernels

    lim = dataclasses.replace(kernels.Limits(), conv_blend=True, float_blend=True, max_varying_vectors=32)
    assert conv_blend.blocking(lim) == (3, 2)
    assert conv_blend.blocking(dataclasses.replace(lim, max_varying_vectors=16)) == (3, 1)
    assert "varying" in conv_blend.blocking(dataclasses.replace(lim, max_varying_vectors=5))

    def conv(xs, ws, attrs):
        node = Node("c", "Conv", ["x", "w"], ["y"], attrs)
        ys = (xs[0], ws[0], xs[2], xs[3])
        return node, Graph([node], ["x"], ["y"], {"w": rnd(*ws)}, {"x": xs, "w": ws, "y": ys},
                           {t: np.dtype(np.float32) for t in ("x", "w", "y")}, 17, {"x": xs})

    dense = conv((1, 16, 8, 8), (8, 16, 3, 3), {"pads": [1] * 4})
    assert conv_blend.declines(*dense, lim) is None
    assert "EXT_float_blend" in conv_blend.declines(*dense, dataclasses.replace(lim, float_blend=False))
    assert "llvmpipe" in conv_blend.declines(*dense, dataclasses.replace(lim, conv_blend=False))
    assert "varying" in conv_blend.declines(*dense, dataclasses.replace(lim, max_varying_vectors=5))
    assert "depthwise" in conv_blend.declines(*conv((1, 16, 8, 8), (16, 1, 3, 3),
                                                    {"pads": [1] * 4, "group": 16}), lim)
    assert "multiply-adds" in conv_blend.declines(*conv((1, 1, 8, 8), (8, 1, 3, 3), {"pads": [1] * 4}), lim)
    assert "pixels" in conv_blend.declines(*conv((1, 64, 3, 3), (8, 64, 3, 3), {"pads": [1] * 4}), lim)


def test_binary_lower_rank_tensor_in_another_view_is_declined():
    path = gpath()
    g = Graph([], ["a", "b"], ["y"], {}, {"a": (1, 6, 5, 4), "b": (6, 1, 1), "y": (1, 6, 5, 4)}, {}, 17)
    assert "NCHW view" in path.decline(Node("m", "Mul", ["a", "b"], ["y"], {}), g)


# Large spatial reductions: llvmpipe stops all loops of a fragment after 65535 back-edges in
# total and silently skips the rest (1x16x128x128 once lost ~1016 pixels of slice 3). Positive
# inputs, so a skipped pixel shows as an error of the mean rather than averaging out.
@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool", "ReduceMean"])
@pytest.mark.parametrize("shape", [(1, 16, 128, 128), (1, 20, 96, 96)], ids=str)
def test_global_pool_large_spatial(op, shape):
    attrs, opset = ({"axes": [2, 3], "keepdims": 1}, 13) if op == "ReduceMean" else ({}, 17)
    x = (rng.random(shape) + 0.5).astype(np.float32)
    if op == "GlobalMaxPool":  # the maximum of each channel in its last row, where a cut loop stops
        x[:, :, -1, -1] = 3.0 + np.arange(shape[1], dtype=np.float32)
    got = run_node(op, {"x": x}, attrs=attrs, opset=opset, tol=1e-5)
    if op != "GlobalMaxPool":
        got1 = run_node(op, {"x": np.ones(shape, np.float32)}, attrs=attrs, opset=opset, tol=1e-6)
        np.testing.assert_allclose(got1, 1.0, rtol=0, atol=1e-5)
    assert got.shape == (shape[0], shape[1], 1, 1)


def test_global_pool_stays_within_llvmpipe_loop_limit():
    from gpubackend.paths.gles3 import kernels

    assert kernels.global_pool_back_edges(128, 128) < kernels.LOOP_BUDGET
    assert kernels.global_pool_back_edges(256, 256) < kernels.LOOP_BUDGET
    path = gpath()
    g = Graph([], ["x"], ["y"], {}, {"x": (1, 16, 2048, 2048), "y": (1, 16, 1, 1)}, {}, 17)
    assert "too many" in path.decline(Node("g", "GlobalAveragePool", ["x"], ["y"], {}), g)


# ---- fp16, render targets per pass, graphs of several nodes --------------------------------------

# 8 targets: the largest shaders of the file (~16 s of cold compiles); the default set keeps 1 and 2
# (4 is the default of every other test).
@pytest.mark.parametrize("targets", [1, 2, pytest.param(8, marks=pytest.mark.slow)])
def test_render_targets_per_pass(targets):
    run_node("Conv", {"x": rnd(1, 37, 5, 6)}, {"w": rnd(45, 37, 3, 3, scale=0.2), "b": rnd(45)},
             {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, targets=targets)
    run_node("Conv", {"x": rnd(1, 20, 5, 6)}, {"w": rnd(20, 1, 3, 3)},
             {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "group": 20}, targets=targets)
    run_node("Concat", {"a": rnd(1, 13, 3, 2), "b": rnd(1, 22, 3, 2)}, attrs={"axis": 1}, targets=targets)


def test_declines_with_reasons():
    path = gpath()
    g = Graph([], ["x"], ["y"], {"w": rnd(4, 3, 3, 3, 3)}, {"x": (1, 3, 5, 5, 5), "y": (1, 4, 3, 3, 3)},
              {}, 17)
    assert "2-D" in path.decline(Node("c", "Conv", ["x", "w"], ["y"], {}), g)
    assert "no gles3 kernel" in path.decline(Node("t", "Einsum", ["x"], ["y"], {"equation": "ij->ji"}), g)
    g2 = Graph([], ["x"], ["y"], {}, {"x": (1, 4, 40000, 2), "y": (1, 4, 40000, 2)}, {}, 17)
    assert "GL_MAX_TEXTURE_SIZE" in path.decline(Node("r", "Relu", ["x"], ["y"], {}), g2)


# ---- ES 3.0 only ---------------------------------------------------------------------------------

FORBIDDEN = re.compile(r"compute_shader|bind_to_storage_buffer|memory_barrier|bind_to_image|\.compute\(|"
                       r"storage_buffer|imageLoad|imageStore|\bbuffer\s+\w+\s*\{")


def test_package_uses_no_compute_or_ssbo_calls():
    files = list((ROOT / "gpubackend" / "paths" / "gles3").glob("*.py")) + list((ROOT / "shaders" / "gles3").glob("*"))
    assert files
    for f in files:
        hits = FORBIDDEN.findall(f.read_text())
        assert not hits, f"{f.name} uses {hits}"


def test_every_shader_compiles_as_glsl_es_300():
    """Every gles3 shader the tests generate, plus each body with a minimal preamble, compiles as
    #version 300 es with the reference compiler (glslangValidator) when it is installed."""
    import shutil
    import subprocess
    import tempfile

    from gpubackend.paths.gles3 import kernels

    exe = shutil.which("glslangValidator")
    if exe is None:
        pytest.skip("glslangValidator not on PATH")
    path = gpath()
    from gpubackend import shaders

    sources = {"fullscreen.vert": kernels.vertex_source(),
               "fma_peak.frag": shaders.source("gles3/fma_peak.frag", "300 es", {"PEAK_ITERS": 4},
                                               shaders.read("gles3/header.glsl"))}
    graph = Graph([], ["x"], ["y"], {"w": rnd(6, 5, 3, 3), "wd": rnd(5, 1, 3, 3), "wg": rnd(10, 1, 3, 3),
                                     "s": np.array([1, 1, 2, 2], np.float32),
                                     "p": np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64)},
                  {"x": (1, 5, 6, 6), "y": (1, 6, 6, 6), "yd": (1, 5, 6, 6), "z": (1, 5, 12, 12),
                   "q": (1, 5, 3, 3), "c": (1, 10, 6, 6), "x2": (1, 5, 6, 6), "yp": (1, 5, 8, 8),
                   "g": (1, 5, 1, 1), "yt": (1, 6, 8, 8), "yt2": (1, 6, 11, 11), "yg": (1, 10, 6, 6)}, {}, 17)
    nodes = [Node("a", "Conv", ["x", "w"], ["y"], {"pads": [1] * 4, "_act": ("HardSwish", {})}),
             Node("b", "Conv", ["x", "wd"], ["yd"], {"pads": [1] * 4, "group": 5}),
             Node("b2", "Conv", ["x", "wg"], ["yg"], {"pads": [1] * 4, "group": 5}),
             Node("t", "ConvTranspose", ["x", "w"], ["yt"], {"strides": [1, 1]}),
             Node("t2", "ConvTranspose", ["x", "w"], ["yt2"], {"strides": [2, 2], "pads": [1] * 4}),
             Node("r", "Resize", ["x", "", "s"], ["z"], {"mode": "linear"}),
             Node("m", "MaxPool", ["x"], ["q"], {"kernel_shape": [2, 2], "strides": [2, 2]}),
             Node("v", "AveragePool", ["x"], ["q"], {"kernel_shape": [2, 2], "strides": [2, 2]}),
             Node("k", "Concat", ["x", "x2"], ["c"], {"axis": 1}),
             Node("e", "Add", ["x", "x2"], ["x2"], {}), Node("u", "Sigmoid", ["x"], ["x2"], {}),
             Node("gp", "GlobalAveragePool", ["x"], ["g"], {}), Node("sm", "Softmax", ["x"], ["x2"], {"axis": 1}),
             Node("pd", "Pad", ["x", "p"], ["yp"], {"mode": "reflect"})]
    graph.nodes = nodes
    graph.constants["w"] = rnd(5, 6, 3, 3)  # ConvTranspose reads [Cin, Cout, k, k]; Conv a: 6x5
    graph.constants["wc"] = rnd(6, 5, 3, 3)
    nodes[0].inputs[1] = "wc"
    for node in nodes:
        k = kernels.build(node, graph, path.limits)
        assert not isinstance(k, str), f"{node.op_type}: {k}"
        for part in k if isinstance(k, list) else [k]:
            sources[f"{node.name}_{part.name}.frag"] = part.fragment
    with tempfile.TemporaryDirectory() as tmp:
        for name, src in sources.items():
            assert src.startswith("#version 300 es\n"), name
            f = FsPath(tmp) / name
            f.write_text(src)
            proc = subprocess.run([exe, str(f)], capture_output=True, text=True)
            assert proc.returncode == 0, f"{name}:\n{proc.stdout}{proc.stderr}"


class _NoComputeContext:
    """Wraps a moderngl context; any compute or storage entry point raises."""

    BANNED = ("compute_shader", "memory_barrier", "storage_buffer", "bind_to_storage_buffer")

    def __init__(self, ctx):
        self._ctx = ctx

    def __getattr__(self, name):
        if any(b in name for b in self.BANNED):
            raise AssertionError(f"gles3 called the non-ES-3.0 entry point ctx.{name}")
        return getattr(self._ctx, name)


def test_model_run_calls_no_compute_entry_points():
    from gpubackend.paths import gles3

    path = gpath()
    dev = path.dev
    real = dev.ctx
    dev.ctx = _NoComputeContext(real)
    dev.compute = lambda src: (_ for _ in ()).throw(AssertionError("gles3 asked for a compute shader"))
    try:
        graph, feeds = gles3._canary_graph(np.random.default_rng(1))
        seg = path.compile(graph.nodes, graph, ["x"], graph.outputs)
        seg.run(feeds, RunStats())
        seg.close()
    finally:
        dev.ctx = real
        del dev.compute


# ---- segments and whole models --------------------------------------------------------------------

def test_segment_keeps_intermediates_on_the_gpu():
    from gpubackend.paths import gles3

    path = gpath()
    graph, feeds = gles3._canary_graph(np.random.default_rng(2))
    seg = path.compile(graph.nodes, graph, ["x"], ["y"])
    stats = RunStats()
    out = seg.run(feeds, stats)
    seg.close()
    assert set(out) == {"y"}
    # one upload per plane of x and one download per plane of y; nothing in between
    assert stats.uploads == seg.storage["x"].layout.planes
    assert stats.downloads == seg.storage["y"].layout.planes
    assert stats.dispatches >= len(graph.nodes) - 1  # Flatten is a view, no draw


def test_nodes_of_one_kind_share_a_program_with_their_own_sizes_and_scalars():
    """Elementwise nodes that differ only in tensor sizes, scalar operands or Clip bounds share
    one program (sizes and scalars are uniforms, set at each draw), as do Concats whose inputs
    start at other channels and convolutions with other strides: each node still gets its own
    values, channel counts that are not a multiple of 4 included, and NaN / Inf pass through."""
    x = rnd(1, 6, 8, 8)
    w = rnd(1, 5, 8, 8)
    z = rnd(1, 7, 5, 3)
    z[0, 1, 2, 1], z[0, 6, 4, 2], z[0, 0, 0, 0] = np.nan, np.inf, -np.inf
    consts = {"k_half": np.float32(0.5), "k_two": np.float32(2.0), "k_neg": np.float32(-1.5),
              "k_three": np.float32(3.0), "m3": np.float32(-3.0), "cw": rnd(4, 6, 3, 3, scale=0.3)}
    nodes = [Node("a", "Mul", ["x", "k_half"], ["a"]), Node("b", "Add", ["a", "m3"], ["b"]),
             Node("c", "Mul", ["b", "k_two"], ["c"]),
             Node("p", "MaxPool", ["c"], ["p"], {"kernel_shape": [2, 2], "strides": [2, 2]}),
             Node("d", "Mul", ["p", "k_neg"], ["d"]),
             Node("e", "Clip", ["d"], ["e"], {"min": -1.0, "max": 0.5}),
             Node("f", "Clip", ["c"], ["f"], {"min": 0.0, "max": 6.0}),
             Node("y", "Mul", ["z", "k_three"], ["y"]),
             Node("u", "Sigmoid", ["z"], ["u"]),
             Node("q1", "Concat", ["w", "c"], ["q1"], {"axis": 1}),
             Node("q2", "Concat", ["c", "f"], ["q2"], {"axis": 1}),
             Node("s1", "Conv", ["x", "cw"], ["s1"], {"pads": [1, 1, 1, 1]}),
             Node("s2", "Conv", ["x", "cw"], ["s2"], {"pads": [1, 1, 1, 1], "strides": [2, 2]})]
    shapes = {"x": x.shape, "a": x.shape, "b": x.shape, "c": x.shape, "f": x.shape, "p": (1, 6, 4, 4),
              "d": (1, 6, 4, 4), "e": (1, 6, 4, 4), "z": z.shape, "y": z.shape, "u": z.shape,
              "w": w.shape, "q1": (1, 11, 8, 8), "q2": (1, 12, 8, 8), "s1": (1, 4, 8, 8), "s2": (1, 4, 4, 4),
              **{k: np.shape(v) for k, v in consts.items()}}
    dtypes = {k: np.dtype(np.float32) for k in shapes}
    outputs = ["e", "f", "y", "u", "q1", "q2", "s1", "s2"]
    feeds = {"x": x, "z": z, "w": w}
    graph = Graph(nodes, list(feeds), outputs, dict(consts), shapes, dtypes, 11, {k: v.shape for k, v in feeds.items()})
    import dataclasses

    path = gpath()
    saved = path.limits
    path.limits = dataclasses.replace(saved, conv_blend=False)  # conv_blend bakes every size in
    try:
        seg = path.compile(nodes, graph, list(feeds), outputs)
        programs = {step.node.name: id(step.program) for step in seg.steps}
        got = seg.run(feeds, RunStats())
        again = seg.run(feeds, RunStats())
        seg.close()
    finally:
        path.limits = saved
    assert len({programs[n] for n in "acdy"}) == 1, "Mul by a scalar: one program for every size"
    assert programs["e"] == programs["f"], "Clip with other bounds and sizes: one program"
    assert programs["q1"] == programs["q2"], "Concat with its inputs at other channels: one program"
    assert programs["s1"] == programs["s2"], "Conv with other strides and sizes: one program"
    assert programs["u"] != programs["y"]
    env = {**feeds, **consts}
    for node in nodes:
        args = [np.asarray(env[n]) for n in node.inputs]
        env[node.outputs[0]] = fallback.run_node(node.op_type, args, node.attrs, 11)[0]
    for name in outputs:
        want = np.asarray(env[name], np.float32)
        np.testing.assert_array_equal(np.isnan(got[name]), np.isnan(want), err_msg=name)
        np.testing.assert_allclose(got[name], want, rtol=1e-6, atol=1e-6, err_msg=name)
        np.testing.assert_array_equal(got[name], again[name], err_msg=name)


def test_canary():
    from gpubackend.paths import gles3

    gpath()
    assert gles3.canary() < 1e-4
    assert gles3.canary("fp16") < 2e-2


def _session(model, precision="fp32"):
    import gpubackend

    gpath()
    try:
        return gpubackend.Session(model, path="gles3", precision=precision, fallback=False)
    except gpubackend.errors.PathUnavailableError as exc:
        pytest.skip(f"session refused gles3: {exc}")


# llvmpipe compiles each fragment shader (per render-target format: fp16 compiles them all again)
# at its first draw, 2-4 s each under load with a cold Mesa shader cache. The small mobilenet has
# the most distinct shaders of the two models, so it runs with -m slow; every kernel it uses
# (conv, conv1x1, depthwise, globalpool, gemm, binary, unary) has its own default test above.
@pytest.mark.parametrize("which,precision", [
    ("unet", "fp32"), ("unet", "fp16"),
    pytest.param("mobilenet", "fp32", marks=pytest.mark.slow),
    pytest.param("mobilenet", "fp16", marks=pytest.mark.slow),
])
def test_models_against_onnxruntime(which, precision):
    models = pytest.importorskip("models")
    model = models.mobilenet_v2_like(64) if which == "mobilenet" else models.unet_like(64)
    feeds = models.random_inputs(model, 0)
    want = models.onnxruntime_outputs(model, feeds)
    sess = _session(model, precision)
    got = sess.run(feeds)
    assert set(sess.placement.values()) == {"gles3"}, sess.explain()
    tol = 1e-4 if precision == "fp32" else 1e-2
    for g, w in zip(got, want):
        assert rel_err(g, w) < tol
    assert sess.stats.uploads >= 1 and sess.stats.downloads >= 1


@pytest.mark.slow
@pytest.mark.parametrize("which", ["mobilenet", "unet"])
def test_models_full_size(which):
    models = pytest.importorskip("models")
    model = models.mobilenet_v2_like() if which == "mobilenet" else models.unet_like()
    feeds = models.random_inputs(model, 0)
    want = models.onnxruntime_outputs(model, feeds)
    sess = _session(model)
    for g, w in zip(sess.run(feeds), want):
        assert rel_err(g, w) < 1e-4


# ---- ONNX backend node tests forced onto gles3 (fallback=False) ---------------------------------

NODE_INCLUDE = [
    r"test_(basic_)?conv_with.*", r"test_conv_with_strides.*", r"test_convtranspose(_pad|_pads|_dilations)?",
    r"test_basic_convtranspose", r"test_gemm_(default_.*|transposeB|alpha|beta|all_attributes)",
    r"test_matmul_2d", r"test_relu", r"test_clip(_.*)?", r"test_leakyrelu(_.*)?", r"test_sigmoid(_.*)?",
    r"test_hardsigmoid(_.*)?", r"test_hardswish", r"test_tanh(_.*)?", r"test_(add|sub|mul|div)(_bcast)?",
    r"test_concat_.*", r"test_maxpool_2d_.*", r"test_averagepool_2d_.*", r"test_globalaveragepool(_.*)?",
    r"test_globalmaxpool(_.*)?", r"test_softmax_.*", r"test_resize_(up|down)sample_scales_(linear|nearest)(_.*)?",
    r"test_(constant|edge|reflect)_pad", r"test_flatten_.*", r"test_prelu_broadcast",
]
NODE_EXCLUDE = {
    r".*_expanded(_ver\d+)?": "function-body expansions test other operators",
    r"test_(basic_)?conv_.*|test_convtranspose.*|test_gemm_.*|test_constant_pad|"
    r"test_clip(_default_(min|max)|_example|_inbounds|_outbounds|_splitbounds|_min_greater_than_max)?":
        "weights, pads or bounds arrive as graph inputs; gles3 needs them constant (baked into the "
        "shader or its uniform buffers), so the planner places these nodes on cpu",
    r"test_clip_default_int8_.*|test_(edge|reflect)_pad|test_maxpool_2d_uint8": "integer tensors (gles3 "
                                                                                 "textures hold floats)",
    r"test_(add|sub|mul|div)_bcast|test_prelu_broadcast": "a runtime rank-1 operand [5] against [3,4,5] is "
        "stored in another NCHW view (the same operand as a constant is supported)",
    r"test_resize_.*_(antialias|half_pixel_symmetric|axes_2_3|axes_3_2)": "declined by gles3's resize kernel "
        "(antialias, coordinate mode half_pixel_symmetric, the axes attribute)",
}


def _node_cases() -> list[str]:
    try:
        from onnx_nodes import node_cases
    except ImportError:
        return []
    return node_cases(NODE_INCLUDE, NODE_EXCLUDE)


NODE_CASES = _node_cases()
QUICK_NODE_CASES = [c for c in NODE_CASES if c in (
    "test_relu", "test_hardswish", "test_add", "test_concat_3d_axis_1", "test_maxpool_2d_pads",
    "test_averagepool_2d_pads_count_include_pad", "test_globalaveragepool", "test_softmax_axis_1")]


@pytest.mark.parametrize("name", QUICK_NODE_CASES)
def test_onnx_node_quick(name: str) -> None:
    from onnx_nodes import run_node_case

    gpath()
    sess = run_node_case(name, "gles3", fallback=False)
    assert set(sess.placement.values()) <= {"gles3"}, sess.explain()


@pytest.mark.slow
@pytest.mark.parametrize("name", [c for c in NODE_CASES if c not in QUICK_NODE_CASES])
def test_onnx_node(name: str) -> None:
    from onnx_nodes import run_node_case

    gpath()
    run_node_case(name, "gles3", fallback=False)


@pytest.mark.parametrize("case,runs_on_gles3", [("test_reshape_zero_and_negative_dim", True),
                                                ("test_unsqueeze_two_axes", True)])
def test_layout_op_with_runtime_shape_is_declined(case, runs_on_gles3):
    """Found by the conformance suite: a Reshape whose target shape is a graph input was accepted
    and then failed at run time. The path declines it while the shape is not a constant; the
    session specialises the plan on the shape's value, so then the path runs it (the 5-D
    Unsqueeze as a copy through the index kernel, since its texture view changes)."""
    from onnx_nodes import all_cases, check_node_case_on_path

    from gpubackend.model import to_graph

    graph = to_graph(all_cases()[case].model)
    assert any(gpath().decline(n, graph) for n in graph.nodes)
    assert check_node_case_on_path(case, "gles3") is runs_on_gles3


@pytest.mark.parametrize("size", [2, 8])
def test_explain_names_the_conv_kernels_and_why_conv_blend_declined(size):
    import onnx
    from onnx import TensorProto, helper

    import gpubackend

    w1, w2 = rnd(16, 8, 3, 3, scale=0.3), rnd(16, 16, 1, 1, scale=0.3)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1] * 4),
             helper.make_node("Conv", ["a", "w2"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, size, size])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [onnx.numpy_helper.from_array(w1, "w1"), onnx.numpy_helper.from_array(w2, "w2")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    sess = gpubackend.Session(model, path="gles3", fallback=False)
    try:
        text = sess.explain()
    finally:
        sess.close()
    if size == 8:
        assert "variant: conv_blend x2 (weights in flat varyings, 3 output x 2 input slices" in text, text
    else:  # 2x2 outputs: below conv_blend's pixel floor, so the one-pass kernels run and say why
        assert "variant: conv x1 (first reason conv_blend: 4 output pixels" in text, text
        assert "variant: conv1x1 x1" in text, text
