"""``precision="fp16-compute"``: fp16 storage plus fp16 arithmetic where the device really has
it, and the probe's check of whether it does.

- GL paths (gles3, gles31): ``create_path`` gives the path ``arithmetic = "fp16"``; its kernels
  in :data:`MEDIUMP_KERNELS` are compiled with ``#define FP16_COMPUTE``, which makes the shared
  preludes (``shaders/gles3/header.glsl``, ``shaders/compute/prelude.glsl``) declare float
  arithmetic ``mediump``. A driver may still compute mediump as fp32 (most desktop drivers), so
  the probe checks twice: :func:`gl_mediump_bits` (a plain mediump shader) and
  :func:`kernel_canary` (the real kernels: a cancelling sum that fp16 rounding predicts, and
  accuracy against ``fallback``). Measured: llvmpipe (Mesa 22.3.6) on an ES context rounds
  ``mediump`` as fp16, in the kernels too.
- gles2: its kernels encode floats into RGBA8 and need highp; no fp16 arithmetic.
- vulkan: ``float16_t`` needs ``shaderFloat16`` enabled at device creation, which Kompute (``kp``
  0.9) cannot do; RelaxedPrecision (mediump in the SPIR-V) needs no feature, but lavapipe ignores
  it (:func:`vulkan_relaxed_precision` measures it), so fp16-compute is fp16 storage there.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

STORAGE = "fp16"  # the storage precision an fp16-compute session's GPU paths use
DEFINE = "FP16_COMPUTE"  # selects mediump float arithmetic in the shared shader preludes

# The kernels whose float arithmetic runs in mediump under fp16-compute (GL paths): products and
# short sums whose fp16 rounding stays within the fp16 bar. Everything else keeps highp: long
# reductions (Softmax, Reduce*, LayerNorm/InstanceNorm statistics, global pooling), coordinate
# math (Resize), the int8 kernels' (de)quantisation (their rounding must match onnxruntime) and
# data movement (Concat, Pad, Gather, layout).
MEDIUMP_KERNELS = frozenset({
    "conv", "conv1x1", "depthwise", "convtranspose", "convtranspose_tap", "convtranspose_taps", "convtranspose_sum",
    "gemm", "matmul", "matmul4",
    "binary", "unary", "affine", "pool",
})

_VS = "#version 100\nattribute vec2 a_pos;\nvoid main() { gl_Position = vec4(a_pos, 0.0, 1.0); }\n"
# 1 + 2^-12 and 4096 + 1 are fp32 numbers but round back to 1 and 4096 in fp16; each sum is
# compared with its operand read from a uniform, so no compiler folds it.
_FS = """#version 100
precision mediump float;
uniform float u_one;
uniform float u_big;
void main() {
    float a = u_one + 0.000244140625;
    float b = u_big + 1.0;
    gl_FragColor = vec4(a > u_one ? 1.0 : 0.0, b > u_big ? 1.0 : 0.0, 0.0, 1.0);
}
"""


def gl_mediump_bits(ctx: Any) -> int:
    """16 when ``mediump`` arithmetic in a fragment shader of ``ctx`` (a moderngl context) rounds
    as fp16, 32 when it computes in fp32; raises ``ValueError`` when the two sums disagree."""
    prog = ctx.program(vertex_shader=_VS, fragment_shader=_FS)
    objs: list[Any] = [prog]
    try:
        if "u_one" in prog:
            prog["u_one"].value = 1.0
        if "u_big" in prog:
            prog["u_big"].value = 4096.0
        tex = ctx.texture((1, 1), 4)
        fbo = ctx.framebuffer([tex])
        vbo = ctx.buffer(np.array([-1, -1, 3, -1, -1, 3], dtype="f4").tobytes())
        vao = ctx.vertex_array(prog, [(vbo, "2f", "a_pos")])
        objs += [vao, vbo, fbo, tex]
        fbo.use()
        fbo.viewport = (0, 0, 1, 1)
        vao.render()
        px = fbo.read(components=4)
    finally:
        for o in reversed(objs):
            o.release()
    if px[3] != 255:
        raise ValueError(f"the check's draw wrote nothing (pixel {list(px)})")
    a, b = px[0] == 255, px[1] == 255
    if a != b:
        raise ValueError(f"mediump sums disagree (1 + 2^-12 {'kept' if a else 'lost'}, "
                         f"4096 + 1 {'kept' if b else 'lost'})")
    return 32 if a else 16


def mediump(kernel: str) -> bool:
    """Whether ``kernel`` (a short kernel name) computes in mediump under fp16-compute."""
    return kernel in MEDIUMP_KERNELS


def with_define(source: str) -> str:
    """A complete GLSL ``source`` with ``#define FP16_COMPUTE`` after its ``#version`` line."""
    version, sep, rest = source.partition("\n")
    if not version.startswith("#version"):
        raise ValueError("a complete shader source starts with its #version line")
    return f"{version}\n#define {DEFINE} 1{sep}{rest}"


def mediump_record(record: Any) -> Any:
    """A compute-path record (``compute_kernels.Kernel`` or ``Alias``) with ``FP16_COMPUTE``
    among its defines when its kernel computes in mediump."""
    if not hasattr(record, "defines") or not mediump(record.kernel):
        return record
    return replace(record, defines=(*record.defines, (DEFINE, 1)))


def mediump_fragment(kernel: Any) -> Any:
    """A gles3 kernel (``gles3.kernels.Kernel``) whose fragment source defines ``FP16_COMPUTE``
    when it computes in mediump (an alias has no source)."""
    if kernel.alias or not mediump(kernel.name):
        return kernel
    return replace(kernel, fragment=with_define(kernel.fragment))


def run_graph(path: str, graph: Any, feeds: dict[str, np.ndarray],
              precision: str = "fp16-compute") -> dict[str, np.ndarray]:
    """``graph`` run as one segment of ``path`` (no fallback, no kernel checks)."""
    from . import create_path
    from .base import RunStats

    p = create_path(path, precision)
    seg = p.compile(graph.nodes, graph, list(graph.inputs), list(graph.outputs))
    try:
        return seg.run(feeds, RunStats())
    finally:
        seg.close()
        p.close()


def cancelling_sum_graph() -> tuple[Any, dict[str, np.ndarray]]:
    """A Gemm whose sum 2048 + 1 - 2048 gives 0 when computed in fp16 (2049 rounds to 2048) and
    1 in fp32 (exact in fp16 storage). The three terms are lanes of one input vec4, whose
    products the kernels sum in the kernel's float precision before adding them to the running
    (highp) sum."""
    from ..graph import Graph, Node

    x = np.array([[2048.0, 1.0, -2048.0, 0.0]], np.float32)
    gemm = Node("sum", "Gemm", ["x", "w"], ["y"], {})
    graph = Graph([gemm], ["x"], ["y"], {"w": np.ones((4, 4), np.float32)},
                  {"x": (1, 4), "w": (4, 4), "y": (1, 4)}, {"x": np.dtype(np.float32), "y": np.dtype(np.float32)})
    return graph, {"x": x}


def kernel_canary(path: str) -> tuple[float, float]:
    """Runs fp16-compute kernels of GL ``path`` twice: :func:`cancelling_sum_graph`, and a 3x3
    Conv (+Relu), depthwise Conv and Gemm on random inputs against ``fallback``. Returns (the
    cancelling sum, the random graph's max error max|got-ref| / max(1, max|ref|)); raises
    ``AssertionError`` past the fp16 bar (2e-2)."""
    from .. import fallback
    from ..graph import Graph, Node

    total = float(run_graph(path, *cancelling_sum_graph())["y"][0, 0])

    rng = np.random.default_rng(17)
    consts = {"w1": rng.standard_normal((8, 5, 3, 3)).astype(np.float32) * 0.3,
              "b1": rng.standard_normal(8).astype(np.float32),
              "w2": rng.standard_normal((8, 1, 3, 3)).astype(np.float32),
              "w3": rng.standard_normal((8 * 6 * 7, 6)).astype(np.float32) * 0.05,
              "shape": np.array([1, -1], np.int64)}
    nodes = [Node("conv", "Conv", ["x", "w1", "b1"], ["c1"], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1],
                                                             "_act": ("Relu", {})}),
             Node("dw", "Conv", ["c1", "w2"], ["c2"], {"kernel_shape": [3, 3], "group": 8, "pads": [1, 1, 1, 1]}),
             Node("flat", "Reshape", ["c2", "shape"], ["f"], {}),
             Node("fc", "Gemm", ["f", "w3"], ["y"], {})]
    shapes = {"x": (1, 5, 6, 7), "c1": (1, 8, 6, 7), "c2": (1, 8, 6, 7), "f": (1, 336), "y": (1, 6)}
    graph = Graph(nodes, ["x"], ["c1", "y"], consts, shapes, {k: np.dtype(np.float32) for k in shapes}, 17,
                  {"x": shapes["x"]})
    feeds = {"x": rng.standard_normal(shapes["x"]).astype(np.float32)}
    got = run_graph(path, graph, feeds)
    env: dict[str, np.ndarray] = {**feeds, **consts}
    for n in nodes:
        env[n.outputs[0]] = fallback.run_node(n.op_type, [env[i] for i in n.inputs], n.attrs, 17)[0]
    err = max(float(np.max(np.abs(got[o] - env[o])) / max(1.0, float(np.max(np.abs(env[o]))))) for o in ("c1", "y"))
    if not err <= 2e-2:
        raise AssertionError(f"{path} fp16-compute kernels: error {err:.3g} > 2e-2 against the CPU")
    return total, err


def vulkan_relaxed_precision() -> float:
    """``1 + 2^-12`` computed by the Vulkan self-test kernel built with ``mediump`` arithmetic
    (its SPIR-V carries RelaxedPrecision) and read back as fp32: ``1.0`` when the driver
    computes it in fp16, ``1.000244`` when it ignores the decoration."""
    from .vulkan.device import VkDevice, params_words
    from .vulkan.program import BufferSpec, Compiled, Edge, Program, Step

    prog = Program()
    prog.add_buffer(BufferSpec("x", 4, np.float32, "input"))
    prog.add_buffer(BufferSpec("y", 4, np.float32, "output"))
    prog.steps.append(Step("relaxed", f"vk_selftest__{DEFINE}=1.spv", ["x", "y"],
                           params_words([1, 1.0, 2.0 ** -12, 0.0, 0.0]), (1, 1, 1), (1, 1, 1)))
    prog.inputs.append(Edge("x", "x"))
    prog.outputs.append(Edge("y", "y"))
    compiled = Compiled(VkDevice(), prog)
    try:
        (out,) = compiled.execute([np.ones(4, np.float32)])
    finally:
        compiled.close()
    return float(np.asarray(out).reshape(-1)[0])


def check(path: str) -> str:
    """The probe's verdict on fp16 arithmetic for ``path``, in words, starting with "verified" or
    "not available"; run in the probe's child process."""
    if path == "vulkan":
        relaxed = vulkan_relaxed_precision()
        honoured = "honours" if relaxed == 1.0 else "ignores"
        return (f"not available: this driver {honoured} RelaxedPrecision (a mediump canary gave 1 + 2^-12 = "
                f"{relaxed:.7g}; fp16 gives 1) and gpubackend's vulkan kernels are not built with it; float16_t "
                "arithmetic needs the shaderFloat16 device feature, which Kompute (kp 0.9: Manager(device, "
                "family_queue_indices, desired_extensions)) cannot enable; runs as fp32 arithmetic (fp16 storage)")
    if path == "gles2":
        return ("not available: the gles2 kernels have no mediump variant (their RGBA8 float encoding "
                "needs highp); runs as fp32 arithmetic (fp16 storage)")
    from capability_probe import contexts

    if gl_mediump_bits(contexts.gl_context(path)) == 32:
        return "not available: mediump is fp32 here; the fp16-compute kernels run in fp32 (fp16 storage)"
    total, err = kernel_canary(path)
    if total != 0.0:
        return (f"not available: mediump rounds as fp16 in a plain shader, but the fp16-compute kernels' "
                f"sum 2048 + 1 - 2048 gave {total:g} (fp16 gives 0); runs as fp32 arithmetic (fp16 storage)")
    return (f"verified: {', '.join(sorted(MEDIUMP_KERNELS))} compute in fp16 (canary sum 2048 + 1 - 2048 "
            f"gives 0 as fp16 rounding predicts, 1 in fp32; random conv/depthwise/gemm error {err:.1e} <= 2e-2); "
            "reductions, resize, data movement and int8 kernels stay fp32; fp16 storage")


def session_note(path: str, verdict: str | None) -> str:
    """The line ``Session.explain()`` shows for an fp16-compute session on ``path``."""
    if path == "cpu":
        return "precision fp16-compute: the cpu path computes in fp32"
    return f"precision fp16-compute on {path}: fp16 arithmetic {verdict or 'not checked by the probe'}"


__all__ = ["DEFINE", "MEDIUMP_KERNELS", "STORAGE", "cancelling_sum_graph", "check", "gl_mediump_bits", "kernel_canary",
           "mediump", "mediump_fragment", "mediump_record", "run_graph", "session_note", "vulkan_relaxed_precision",
           "with_define"]
