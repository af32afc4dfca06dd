"""Each tier's basic mechanism, run on a known pattern that must come back exact.

* ``gles2``: an RGBA8 render-to-texture (a byte pattern sampled at texel centres and swizzled),
  and float32 values packed into RGBA8 bytes by a ``#version 100`` fragment shader (needs highp);
* ``gles3``: a multiple-render-target render into RGBA32F attachments (``#version 300 es``);
* ``gles31``: a compute shader over SSBOs with shared memory and a barrier (``#version 310 es``);
* ``vulkan``: the same compute shader as SPIR-V dispatched through Kompute.

Every function calls the fault hooks at the same choke points the GPU paths use (context,
compile/link, allocation, dispatch, readback), raises a :class:`DriverError` subclass on failure
(:class:`RoundTripMismatch` when the driver answered but wrongly) and returns a dict of facts.
"""

from __future__ import annotations

import base64
from typing import Any

import numpy as np

from . import contexts, faults
from .errors import DriverError, DriverUnavailable
from .glutil import build_compute, build_program


class RoundTripMismatch(DriverError):
    """The driver ran the round trip but returned different values."""


def _compare(path: str, what: str, got: np.ndarray, want: np.ndarray) -> None:
    if got.shape != want.shape:
        raise RoundTripMismatch(f"{path} {what}: shape {got.shape} != {want.shape}")
    if got.dtype.kind == "f" and np.isnan(got).any():
        raise RoundTripMismatch(f"{path} {what}: NaN in the result ({int(np.isnan(got).sum())} of {got.size})")
    if not np.array_equal(got, want):
        bad = int(np.sum(got != want))
        if got.dtype.kind == "f":
            err = float(np.max(np.abs(got.astype(np.float64) - want) / np.maximum(np.abs(want), 1e-30)))
            raise RoundTripMismatch(f"{path} {what}: wrong results, {bad} of {got.size} values differ "
                                    f"(max relative error {err:.3g})")
        raise RoundTripMismatch(f"{path} {what}: wrong results, {bad} of {got.size} bytes differ")


def _require(ctx: Any, path: str) -> None:
    """The tier rules (docs/probe.md): what the context must offer for ``path``."""
    es = contexts.gl_context_is_es()
    v = int(ctx.version_code)
    need = {"gles31": (310, 430, "GL ES 3.1 compute shaders"), "gles3": (300, 330, "GL ES 3.0"),
            "gles2": (200, 200, "GL ES 2.0")}[path]
    if v < (need[0] if es else need[1]):
        raise DriverUnavailable(f"{path} needs {need[2]}; the context is {'ES ' if es else 'GL '}"
                                f"{v // 100}.{v % 100 // 10}")


_QUAD = np.array([-1, -1, 1, -1, -1, 1, -1, 1, 1, -1, 1, 1], dtype="f4")

GLES2_VS = """#version 100
attribute vec2 a_pos;
void main() { gl_Position = vec4(a_pos, 0.0, 1.0); }
"""
GLES2_COPY_FS = """#version 100
precision highp float;
uniform sampler2D u_src;
uniform vec2 u_size;
void main() { gl_FragColor = texture2D(u_src, gl_FragCoord.xy / u_size).bgra; }
"""
GLES2_PACK_FS = """#version 100
#ifdef GL_FRAGMENT_PRECISION_HIGH
precision highp float;
#else
#error "no highp in fragment shaders"
#endif
uniform vec2 u_size;
// The probe's test values: exact binary fractions across 9 binades.
float value(float idx) { return (idx - 127.5) * 0.013671875 * exp2(mod(idx, 9.0) - 4.0); }
// float32 -> its IEEE-754 bytes, big-endian, one byte per channel.
vec4 pack(float v) {
    if (v == 0.0) return vec4(0.0);
    float s = v < 0.0 ? 128.0 : 0.0;
    float a = abs(v);
    float e = floor(log2(a));
    float m = a / exp2(e);
    if (m >= 2.0) { m *= 0.5; e += 1.0; }
    if (m < 1.0) { m *= 2.0; e -= 1.0; }
    float be = e + 127.0;
    float frac = (m - 1.0) * 8388608.0;
    float b1 = floor(frac / 65536.0);
    float rest = frac - b1 * 65536.0;
    float b2 = floor(rest / 256.0);
    float b3 = rest - b2 * 256.0;
    float b0 = s + floor(be / 2.0);
    b1 += mod(be, 2.0) * 128.0;
    return vec4(b0, b1, b2, b3) / 255.0;
}
void main() {
    vec2 p = floor(gl_FragCoord.xy);
    gl_FragColor = pack(value(p.y * u_size.x + p.x));
}
"""


def _gl_alloc(path: str, nbytes: int) -> None:
    faults.on_alloc(path, nbytes)


def _render(ctx: Any, path: str, prog: Any, fbo: Any) -> None:
    vbo = ctx.buffer(_QUAD.tobytes())
    vao = ctx.vertex_array(prog, [(vbo, "2f", "a_pos")])
    fbo.use()
    faults.on_dispatch(path)
    vao.render()
    vao.release()
    vbo.release()


def gles2(ctx: Any | None = None) -> dict[str, Any]:
    path = "gles2"
    ctx = ctx or contexts.gl_context(path)
    _require(ctx, path)
    w = h = 16
    rng = np.random.default_rng(3)
    src_bytes = rng.integers(0, 256, size=(h, w, 4), dtype=np.uint8)
    _gl_alloc(path, src_bytes.nbytes * 3)
    src = ctx.texture((w, h), 4, src_bytes.tobytes())
    src.filter = (ctx.NEAREST, ctx.NEAREST)
    dst = ctx.texture((w, h), 4)
    fbo = ctx.framebuffer([dst])
    # float32 packed into RGBA8
    prog2 = build_program(ctx, path, GLES2_VS, GLES2_PACK_FS)
    prog2["u_size"].value = (float(w), float(h))
    _render(ctx, path, prog2, fbo)
    raw = np.frombuffer(fbo.read(components=4, alignment=1), dtype=np.uint8).copy()
    vals = raw.view(">f4").astype(np.float32).reshape(h, w)
    vals = faults.on_readback(path, vals)
    idx = np.arange(w * h, dtype=np.float32).reshape(h, w)
    want = ((idx - np.float32(127.5)) * np.float32(0.013671875) * np.exp2(np.mod(idx, 9) - 4)).astype(np.float32)
    _compare(path, "float pack in RGBA8", vals, want)
    prog = build_program(ctx, path, GLES2_VS, GLES2_COPY_FS)
    prog["u_size"].value = (float(w), float(h))
    src.use(0)
    if "u_src" in prog:
        prog["u_src"].value = 0
    _render(ctx, path, prog, fbo)
    got = np.frombuffer(fbo.read(components=4, alignment=1), dtype=np.uint8).reshape(h, w, 4)
    got = faults.on_readback(path, got)
    _compare(path, "RGBA8 render", got, src_bytes[..., [2, 1, 0, 3]])
    for o in (prog, prog2, fbo, dst, src):
        o.release()
    return {"rgba8_render": True, "float_pack": True}


GLES3_VS = """#version 300 es
in vec2 a_pos;
void main() { gl_Position = vec4(a_pos, 0.0, 1.0); }
"""


def _gles3_fs(n: int) -> str:
    outs = "\n".join(f"layout(location = {i}) out vec4 o{i};" for i in range(n))
    body = "\n".join(f"    o{i} = t * {float(i + 2):.1f} + {float(i):.1f};" for i in range(n))
    return f"""#version 300 es
precision highp float;
precision highp sampler2D;
uniform sampler2D u_src;
{outs}
void main() {{
    vec4 t = texelFetch(u_src, ivec2(gl_FragCoord.xy), 0);
{body}
}}
"""


def gles3(ctx: Any | None = None) -> dict[str, Any]:
    path = "gles3"
    ctx = ctx or contexts.gl_context(path)
    _require(ctx, path)
    n = max(1, min(4, int(ctx.info.get("GL_MAX_DRAW_BUFFERS", 4) or 4)))
    w, h = 8, 8
    rng = np.random.default_rng(5)
    src_vals = (rng.integers(-4096, 4096, size=(h, w, 4)) / 1024.0).astype(np.float32)
    _gl_alloc(path, src_vals.nbytes * (n + 1))
    src = ctx.texture((w, h), 4, src_vals.tobytes(), dtype="f4")
    src.filter = (ctx.NEAREST, ctx.NEAREST)
    targets = [ctx.texture((w, h), 4, dtype="f4") for _ in range(n)]
    try:
        fbo = ctx.framebuffer(targets)
    except Exception as e:  # noqa: BLE001 - incomplete framebuffer
        raise DriverUnavailable(f"gles3: {n} RGBA32F render targets are not framebuffer-complete: {e}") from e
    prog = build_program(ctx, path, GLES3_VS, _gles3_fs(n))
    src.use(0)
    if "u_src" in prog:
        prog["u_src"].value = 0
    _render(ctx, path, prog, fbo)
    for i in range(n):
        got = np.frombuffer(fbo.read(components=4, attachment=i, dtype="f4"), dtype=np.float32).reshape(h, w, 4)
        got = faults.on_readback(path, got)
        _compare(path, f"MRT RGBA32F render (target {i})", got, src_vals * np.float32(i + 2) + np.float32(i))
    for o in (prog, fbo, src, *targets):
        o.release()
    return {"mrt_targets": n, "rgba32f_render": True}


GLES31_CS = """#version 310 es
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer Y { float y[]; };
shared float sh[64];
void main() {
    uint gid = gl_GlobalInvocationID.x;
    uint lid = gl_LocalInvocationID.x;
    sh[lid] = x[gid];
    barrier();
    y[gid] = sh[63u - lid] * 2.0 + float(gid);
}
"""


def _compute_expected(x: np.ndarray) -> np.ndarray:
    rev = x.reshape(-1, 64)[:, ::-1].reshape(-1)
    return (rev * np.float32(2) + np.arange(x.size, dtype=np.float32)).astype(np.float32)


def _compute_input(n: int = 1024) -> np.ndarray:
    rng = np.random.default_rng(7)
    return (rng.integers(-8192, 8192, size=n) / 256.0).astype(np.float32)


def gles31(ctx: Any | None = None) -> dict[str, Any]:
    path = "gles31"
    ctx = ctx or contexts.gl_context(path)
    _require(ctx, path)
    x = _compute_input()
    _gl_alloc(path, x.nbytes * 2)
    bx = ctx.buffer(x.tobytes())
    by = ctx.buffer(reserve=x.nbytes)
    cs = build_compute(ctx, path, GLES31_CS)
    bx.bind_to_storage_buffer(0)
    by.bind_to_storage_buffer(1)
    faults.on_dispatch(path)
    cs.run(group_x=x.size // 64)
    ctx.memory_barrier()
    got = faults.on_readback(path, np.frombuffer(by.read(), dtype=np.float32).copy())
    _compare(path, "compute SSBO dispatch", got, _compute_expected(x))
    for o in (cs, bx, by):
        o.release()
    return {"compute_dispatch": True}


def vulkan(mgr: Any | None = None) -> dict[str, Any]:
    path = "vulkan"
    mgr = mgr or contexts.kompute_manager(path)
    import kp

    from ._spirv import SPIRV_B64

    x = _compute_input()
    faults.on_alloc(path, x.nbytes * 2)
    tx = mgr.tensor(x)
    ty = mgr.tensor(np.zeros_like(x))
    spirv = base64.b64decode(SPIRV_B64["roundtrip"])
    faults.on_compile(path, "spirv")
    faults.on_compile(path, "link")
    try:
        algo = mgr.algorithm([tx, ty], spirv, (x.size // 64, 1, 1), [], [])
    except Exception as e:  # noqa: BLE001
        raise DriverError(f"vulkan: pipeline creation failed: {e}") from e
    faults.on_dispatch(path)
    (mgr.sequence()
        .record(kp.OpTensorSyncDevice([tx, ty]))
        .record(kp.OpAlgoDispatch(algo))
        .record(kp.OpTensorSyncLocal([ty]))
        .eval())
    got = faults.on_readback(path, np.asarray(ty.data(), dtype=np.float32).copy())
    _compare(path, "Kompute dispatch", got, _compute_expected(x))
    return {"compute_dispatch": True}


RUNNERS = {"gles2": gles2, "gles3": gles3, "gles31": gles31, "vulkan": vulkan}


def run(path: str) -> dict[str, Any]:
    """Run ``path``'s basic round trip on the shared context; raises on any failure."""
    return RUNNERS[path]()
