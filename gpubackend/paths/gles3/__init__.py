"""The OpenGL ES 3.0 path: every kernel is a full-screen draw of a GLSL ES 3.00 fragment shader
writing up to GL_MAX_DRAW_BUFFERS float render targets; feature maps in RGBA32F (fp16: RGBA16F)
textures, weights in std140 uniform buffers (a texture when a block would be too large).
No compute shaders, storage buffers or image load/store anywhere in this package."""

from __future__ import annotations

import numpy as np

from ... import mixed_precision, tuning
from ...graph import Graph, Node
from .. import fp16_compute
from ..base import Path, Segment
from ..kernel_contract import KernelCache
from ..segment_services import fuse_silu
from .kernels import REGISTRY, Kernel, Limits, single_output
from .kernels import kernel_name as _kernel_name
from .runtime import Gles3Segment

# the kernels whose shaders end in compute/epilogue.glsl's epilogue() (GATE: SiLU fused, fuse_silu)
GATE_KERNELS = frozenset({"conv", "conv1x1", "depthwise", "conv_px", "conv_px_unpack", "conv_blend",
                           "conv_blend_out"})

# Render targets per pass (capped by GL_MAX_DRAW_BUFFERS). On llvmpipe 8 was fastest per
# convolution (benchmarks/bench_gles3.py --targets); 4 keeps shaders small enough for llvmpipe's
# JIT, whose cold compile time dominates a first run.
DEFAULT_TARGETS = 4


def _limits(ctx, targets: int, baked: bool, fp16: bool = False) -> Limits:
    info = ctx.info

    def get(key: str, default: int) -> int:
        v = info.get(key)
        return int(v) if isinstance(v, (int, float)) and v > 0 else default

    return Limits(max_texture_size=get("GL_MAX_TEXTURE_SIZE", 2048),
                  max_draw_buffers=min(get("GL_MAX_DRAW_BUFFERS", 4), get("GL_MAX_COLOR_ATTACHMENTS", 4)),
                  max_uniform_block_size=get("GL_MAX_UNIFORM_BLOCK_SIZE", 16384),
                  max_fragment_uniform_blocks=get("GL_MAX_FRAGMENT_UNIFORM_BLOCKS", 12),
                  max_texture_units=get("GL_MAX_TEXTURE_IMAGE_UNITS", 16),
                  ubo_alignment=get("GL_UNIFORM_BUFFER_OFFSET_ALIGNMENT", 256),
                  targets=targets, baked=baked, fp16=fp16,
                  float_blend="GL_EXT_float_blend" in ctx.extensions,
                  max_varying_vectors=get("GL_MAX_VARYING_VECTORS", 15),
                  conv_blend=tuning.device_class({"renderer": info.get("GL_RENDERER", "")}) == "llvmpipe")


class Gles3Path(Path):
    key = "gles3"

    def __init__(self, precision: str = "fp32", disabled_kernels: frozenset[str] = frozenset(),
                 targets: int = DEFAULT_TARGETS, baked: bool = True):
        super().__init__(precision, disabled_kernels)
        from capability_probe.errors import DriverUnavailable

        from ...gl.device import GLDevice

        self.dev = GLDevice.shared("gles3")
        ctx = self.dev.ctx
        if ctx.version_code < 300:
            raise DriverUnavailable(f"gles3 needs OpenGL ES 3.0 (context version {ctx.version_code})")
        self.dtype = "f2" if precision == "fp16" else "f4"
        self._check_renderable(DriverUnavailable)
        self.limits = _limits(ctx, targets, baked, self.dtype == "f2")

    def _check_renderable(self, error: type[Exception]) -> None:
        fmt = "RGBA16F" if self.dtype == "f2" else "RGBA32F"
        try:
            tex = self.dev.texture((4, 4), 4, None, dtype=self.dtype)
            fbo = self.dev.ctx.framebuffer(color_attachments=[tex])
            self.dev.release(fbo, tex)
        except Exception as exc:  # moderngl raises on an incomplete framebuffer
            raise error(f"{fmt} textures are not colour-renderable here "
                        f"(EXT_color_buffer_float / EXT_color_buffer_half_float): {exc}") from exc

    @property
    def limits(self) -> Limits:
        return self._limits

    @limits.setter
    def limits(self, lim: Limits) -> None:
        self._limits = lim
        self.kernels = KernelCache(REGISTRY, lim, self.disabled_kernels, accept=single_output)

    def kernel(self, node: Node, graph: Graph) -> Kernel | list[Kernel] | str:
        """The node's kernel, one kernel per output (Split), or the reason it is declined."""
        hit = self.kernels.get(node, graph)
        return hit if isinstance(hit, str) else hit.payload

    def decline(self, node: Node, graph: Graph) -> str | None:
        return self.kernels.decline(node, graph)

    def kernel_name_for(self, node: Node, graph: Graph) -> str | None:
        return _kernel_name(node, graph, self.limits)  # with this context's limits (conv_blend)

    def _variant_notes(self, nodes: list[Node], graph: Graph, payloads: list) -> list[str]:
        """For explain(): which kernel runs the Conv, Gemm and MatMul nodes, and why conv_blend
        does not where it is on (the first reason of each kernel)."""
        from .conv_blend import blocking, declines

        counts: dict[str, int] = {}
        why: dict[str, str] = {}
        for node, k in zip(nodes, payloads):
            if node.op_type not in ("Conv", "Gemm", "MatMul"):
                continue
            name = (k[0] if isinstance(k, list) else k).name
            counts[name] = counts.get(name, 0) + 1
            if name != "conv_blend" and self.limits.conv_blend and name not in why:
                why[name] = "conv_blend: " + ("disabled" if "conv_blend" in self.disabled_kernels
                                              else declines(node, graph, self.limits) or "declined")
        if not counts:
            return []
        t_j = blocking(self.limits)
        blend = (f"weights in flat varyings, {t_j[0]} output x {t_j[1]} input slices per draw, on for llvmpipe"
                 if isinstance(t_j, tuple) else "")
        return [f"variant: {name} x{n}" + (f" ({blend})" if name == "conv_blend" else
                                            f" (first reason {why[name]})" if name in why else "")
                for name, n in sorted(counts.items())]

    def compile(self, nodes: list[Node], graph: Graph, inputs: list[str], outputs: list[str]) -> Segment:
        kernels = {}
        steps = []
        seg_node_of: dict[str, str] = {}  # step name -> the graph node it belongs to (per-node times)
        step_nodes, payloads = fuse_silu(nodes, self.kernels.payloads(nodes, graph, self.key), graph, outputs,
                                         self.kernels, GATE_KERNELS)
        for node, k in zip(step_nodes, payloads):
            if isinstance(k, list):  # each kernel a step of its own: one per output (Split), or
                # passes of one node, an earlier one writing a tensor a later one reads (Kernel.writes)
                named = iter(o for o in node.outputs if o)
                for i, one in enumerate(k):
                    reads = [t for _, t in one.inputs if t not in node.inputs]
                    part = Node(f"{node.name}:{i}", node.op_type, [*node.inputs, *reads],
                                [one.writes or next(named)], domain=node.domain)
                    kernels[part.name] = one
                    seg_node_of[part.name] = node.name
                    steps.append(part)
                continue
            kernels[node.name] = k
            steps.append(node)
        if self.arithmetic == "fp16":
            kernels = {name: fp16_compute.mediump_fragment(k) for name, k in kernels.items()}
        fp32 = {**mixed_precision.planned_edges(graph, [*inputs, *outputs]),
                **mixed_precision.fp32_tensors(nodes, graph)} if self.dtype == "f2" else {}
        seg = Gles3Segment(self.dev, self.limits, self.dtype, kernels, steps, graph, inputs, outputs,
                           fp32=frozenset(fp32))
        if self.dtype == "f2":
            seg.notes = [mixed_precision.describe(nodes, graph, {n: fp32[n] for n in seg.storage_dtype
                                                                 if seg.storage_dtype[n] == "f4" and n in fp32})]
        seg.notes = [*getattr(seg, "notes", []), *self._variant_notes(step_nodes, graph, payloads)]
        seg.nodes = nodes  # the graph's nodes (re-planning after a driver failure moves these)
        seg.node_of = seg_node_of
        if self.poison:
            seg.poison = float("nan")
        return seg


def create(precision: str = "fp32", disabled_kernels: frozenset[str] = frozenset(),
           targets: int | None = None) -> Gles3Path:
    return Gles3Path(precision, disabled_kernels, targets=targets or DEFAULT_TARGETS)


def kernel_name(node: Node, graph: Graph) -> str | None:
    """The short name of the kernel this path uses for ``node`` (None: no kernel)."""
    return _kernel_name(node, graph)


def _canary_graph(rng: np.random.Generator) -> tuple[Graph, dict[str, np.ndarray]]:
    x = rng.standard_normal((1, 6, 9, 7)).astype(np.float32)
    consts = {
        "w": (rng.standard_normal((10, 6, 3, 3)) * 0.3).astype(np.float32),
        "b": rng.standard_normal(10).astype(np.float32),
        "wd": rng.standard_normal((10, 1, 3, 3)).astype(np.float32),
        "fw": rng.standard_normal((10, 5)).astype(np.float32),
        "fb": rng.standard_normal(5).astype(np.float32),
    }
    nodes = [
        Node("conv", "Conv", ["x", "w", "b"], ["c"], {"pads": [1, 1, 1, 1], "strides": [2, 1],
                                                      "_act": ("Relu", {})}),
        Node("dw", "Conv", ["c", "wd"], ["d"], {"pads": [1, 1, 1, 1], "group": 10}),
        Node("gap", "GlobalAveragePool", ["d"], ["p"]),
        Node("flat", "Flatten", ["p"], ["f"], {"axis": 1}),
        Node("fc", "Gemm", ["f", "fw", "fb"], ["y"], {}),
    ]
    shapes = {"x": (1, 6, 9, 7), "c": (1, 10, 5, 7), "d": (1, 10, 5, 7), "p": (1, 10, 1, 1), "f": (1, 10),
              "y": (1, 5)}
    dtypes = {k: np.dtype(np.float32) for k in shapes}
    return Graph(nodes, ["x"], ["c", "d", "y"], consts, shapes, dtypes, 17, {"x": (1, 6, 9, 7)}), {"x": x}


def canary(precision: str = "fp32") -> float:
    """Conv (+Relu), depthwise conv, global pool and Gemm on small random inputs against the
    ``fallback`` kernels; returns the max norm-relative error, raises when it is too large."""
    from gpubackend import fallback

    from ..base import RunStats

    rng = np.random.default_rng(7)
    graph, feeds = _canary_graph(rng)
    path = Gles3Path(precision)
    seg = path.compile(graph.nodes, graph, ["x"], graph.outputs)
    try:
        got = seg.run(feeds, RunStats())
    finally:
        seg.close()
    env = dict(feeds)
    for node in graph.nodes:
        args = [env[n] if n in env else graph.constants[n] for n in node.inputs]
        env[node.outputs[0]] = fallback.run_node(node.op_type, args, node.attrs, graph.opset)[0]
    tol = 2e-2 if precision == "fp16" else 1e-4
    worst = 0.0
    for name in graph.outputs:
        want = np.asarray(env[name], np.float32)
        err = float(np.linalg.norm(got[name] - want) / max(np.linalg.norm(want), 1e-30))
        if not np.isfinite(err) or err > tol:
            raise AssertionError(f"gles3 canary: {name} relative error {err:.3g} > {tol}")
        worst = max(worst, err)
    return worst


def canary_int8(precision: str = "fp32") -> float:
    """The int8 kernels (int8 weights in uint words, Quantize/DequantizeLinear) against ``fallback``."""
    from ..base import RunStats
    from ..compute_quant import canary as int8_canary

    def run(nodes: list[Node], graph: Graph, feeds: dict[str, np.ndarray], prec: str) -> dict[str, np.ndarray]:
        seg = Gles3Path(prec).compile(nodes, graph, list(feeds), graph.outputs)
        try:
            return seg.run(feeds, RunStats())
        finally:
            seg.close()

    return int8_canary(run, precision, kernel_name)


__all__ = ["Gles3Path", "create", "canary", "canary_int8", "kernel_name", "DEFAULT_TARGETS"]
