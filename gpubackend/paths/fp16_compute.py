"""``precision="fp16-compute"``: fp16 arithmetic where the device really has it, and the probe's
check of whether it does.

What the check finds decides what the option can mean on a path:

- GL paths (gles2, gles3, gles31): GLSL ``mediump`` may be 16-bit or plain fp32 (most desktop
  drivers). :func:`gl_mediump_bits` runs a ``mediump`` shader whose sums round differently in
  fp16 and fp32 and reads the answer back. Measured: llvmpipe (Mesa 22.3.6) on an ES context
  rounds ``mediump`` as fp16 (its highp twin of the same shader keeps both sums).
- vulkan: the shaders would need ``shaderFloat16`` enabled at device creation; Kompute (``kp``
  0.9, the path's runtime) enables no device features, so fp16 arithmetic cannot be switched on
  whatever the device offers.

gpubackend's kernels do not yet have fp16-arithmetic variants, so on every path today
``fp16-compute`` runs as fp16 storage with fp32 arithmetic (its accuracy is fp16 storage's), and
the probe and ``Session.explain()`` say so instead of pretending.
"""

from __future__ import annotations

from typing import Any

import numpy as np

STORAGE = "fp16"  # the storage precision an fp16-compute session's GPU paths use

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


def check(path: str) -> str:
    """The probe's verdict on fp16 arithmetic for ``path``, in words, starting with "verified" or
    "not available"; run in the probe's child process."""
    if path == "vulkan":
        return ("not available: Kompute enables no Vulkan device features, so shaderFloat16 cannot be "
                "switched on; runs as fp32 arithmetic (fp16 storage)")
    from capability_probe import contexts

    bits = gl_mediump_bits(contexts.gl_context(path))
    if bits == 32:
        return "not available: mediump is fp32 here; runs as fp32 arithmetic (fp16 storage)"
    return ("verified: mediump rounds as fp16 here, but gpubackend has no fp16-arithmetic kernels yet; "
            "runs as fp32 arithmetic (fp16 storage)")


def session_note(path: str, verdict: str | None) -> str:
    """The line ``Session.explain()`` shows for an fp16-compute session on ``path``."""
    if path == "cpu":
        return "precision fp16-compute: the cpu path computes in fp32"
    return f"precision fp16-compute on {path}: fp16 arithmetic {verdict or 'not checked by the probe'}"


__all__ = ["STORAGE", "check", "gl_mediump_bits", "session_note"]
