"""Microbenchmarks per code path: the driver's arithmetic peak (a shader doing nothing but
multiply-adds) and its memory bandwidth (a copy shader).

Shaders live in ``shaders/bench/``: ``fma.comp`` / ``copy.comp`` (ES 3.1 compute, and their
SPIR-V ``.spv`` for Vulkan), ``fma.es3.frag`` / ``copy.es3.frag`` (ES 3.0, RGBA32F render
targets), ``fma.es2.frag`` / ``copy.es2.frag`` (ES 2.0, RGBA8). The ``cpu`` path's peak is
NumPy's BLAS on a square matmul and its bandwidth a large ``np.copyto``.

Each figure is the best of a few repetitions (a peak is what the device can do, so the least
disturbed run is the right estimate on a loaded machine), timed on the host around a
synchronising call (``ctx.finish()`` for GL, ``Sequence.eval()`` for Vulkan)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

FLOP_PER_ITER = 64  # 8 vec4 chains x 4 lanes x (multiply + add)
LOCAL_SIZE = 64


@dataclass
class Peak:
    """One path's measured peaks."""

    path: str
    gflops: float | None = None  # FMA-only shader, GFLOP/s
    gbytes: float | None = None  # copy shader, GB/s (read + written bytes / s, 1 GB = 1e9 B)
    timing: str = "host"
    error: str = ""
    detail: str = ""

    @property
    def ridge(self) -> float | None:
        """Arithmetic intensity (FLOP/byte) where the roofline turns from memory to compute."""
        if self.gflops and self.gbytes:
            return self.gflops / self.gbytes
        return None

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["ridge_flop_per_byte"] = self.ridge
        return d


def shader_dir() -> Path:
    from gpubackend import shaders

    return Path(shaders.ROOT) / "bench"


def _source(name: str, defines: dict[str, Any] | None = None) -> str:
    text = (shader_dir() / name).read_text()
    if not defines:
        return text
    first, _, rest = text.partition("\n")
    return first + "\n" + "".join(f"#define {k} {v}\n" for k, v in defines.items()) + rest


def _best(fn: Callable[[], None], repeats: int) -> float:
    fn()  # warm-up: first dispatch compiles and allocates
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


# ---- cpu ------------------------------------------------------------------------------------
def cpu_peak(repeats: int = 5, n: int = 512, mbytes: int = 32) -> Peak:
    """NumPy's BLAS matmul (2n^3 FLOP) and ``np.copyto`` (read + write) on the CPU."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    out = np.empty((n, n), np.float32)
    sec = _best(lambda: np.matmul(a, b, out=out), repeats)
    src = np.ones(mbytes * (1 << 20) // 4, np.float32)
    dst = np.empty_like(src)
    csec = _best(lambda: np.copyto(dst, src), repeats)
    return Peak("cpu", 2.0 * n**3 / sec / 1e9, 2.0 * src.nbytes / csec / 1e9, "host",
                detail=f"numpy matmul {n}^3, copyto {mbytes} MiB")


# ---- ES 3.1 compute ---------------------------------------------------------------------------
def gles31_peak(repeats: int = 5, invocations: int = 1 << 16, iters: int = 256, mbytes: int = 32) -> Peak:
    """FMA and copy compute shaders on the shared GL ES context."""
    from capability_probe import contexts

    ctx = contexts.gl_context("gles31")
    data = ctx.buffer(np.linspace(0, 1, invocations * 4, dtype=np.float32).tobytes())
    fma = ctx.compute_shader(_source("fma.comp"))
    for name, value in (("u_iters", float(iters)), ("u_b", 0.999), ("u_c", 0.001)):
        fma[name].value = value
    groups = invocations // LOCAL_SIZE

    def run_fma() -> None:
        data.bind_to_storage_buffer(0)
        fma.run(groups)
        ctx.finish()

    sec = _best(run_fma, repeats)
    nvec = mbytes * (1 << 20) // 16
    src = ctx.buffer(reserve=nvec * 16)
    dst = ctx.buffer(reserve=nvec * 16)
    copy = ctx.compute_shader(_source("copy.comp"))

    def run_copy() -> None:
        src.bind_to_storage_buffer(0)
        dst.bind_to_storage_buffer(1)
        copy.run(nvec // LOCAL_SIZE)
        ctx.finish()

    csec = _best(run_copy, repeats)
    for obj in (data, fma, src, dst, copy):
        obj.release()
    return Peak("gles31", invocations * iters * FLOP_PER_ITER / sec / 1e9, 2.0 * nvec * 16 / csec / 1e9, "host",
                detail=f"fma.comp {invocations} invocations x {iters} iterations; copy.comp {mbytes} MiB")


# ---- ES 3.0 / ES 2.0 fragment ------------------------------------------------------------------
_TRIANGLE = np.array([-1.0, -1.0, 3.0, -1.0, -1.0, 3.0], np.float32)


def _fragment_peak(key: str, repeats: int, size: int, iters: int, copy_size: int) -> Peak:
    from capability_probe import contexts

    ctx = contexts.gl_context(key)
    es3 = key == "gles3"
    suffix = "es3" if es3 else "es2"
    vert = _source(f"quad.{suffix}.vert")
    vbo = ctx.buffer(_TRIANGLE.tobytes())
    released: list[Any] = [vbo]

    def target(dtype: str, data: bytes | None = None) -> Any:
        tex = ctx.texture((size, size), 4, data, dtype=dtype)
        tex.filter = (ctx.NEAREST, ctx.NEAREST)
        released.append(tex)
        return tex

    fma_size = size
    dtype = "f4" if es3 else "f1"
    n_targets = 4 if es3 else 1
    bpp = 16 if es3 else 4  # bytes per texel

    # FMA
    fma = ctx.program(vertex_shader=vert, fragment_shader=_source(f"fma.{suffix}.frag",
                                                                  None if es3 else {"ITERS": iters}))
    released.append(fma)
    if es3:
        fma["u_iters"].value = float(iters)
    fma["u_b"].value = 0.999
    fma["u_c"].value = 0.001
    fbo = ctx.framebuffer(color_attachments=[target(dtype) for _ in range(n_targets)])
    vao = ctx.vertex_array(fma, [(vbo, "2f", "a_pos")])
    released += [fbo, vao]

    def run_fma() -> None:
        fbo.use()
        fbo.viewport = (0, 0, size, size)
        vao.render(mode=ctx.TRIANGLES, vertices=3)
        ctx.finish()

    sec = _best(run_fma, repeats)

    # copy
    copy = ctx.program(vertex_shader=vert, fragment_shader=_source(f"copy.{suffix}.frag"))
    released.append(copy)
    size = copy_size
    fill = np.full(size * size * 4, 0.5 if es3 else 128, np.float32 if es3 else np.uint8).tobytes()
    sources = [target(dtype, fill) for _ in range(n_targets)]
    if es3:
        for i in range(n_targets):
            copy[f"u_src{i}"].value = i
    else:
        copy["u_src"].value = 0
        copy["u_inv_size"].value = (1.0 / size, 1.0 / size)
    cfbo = ctx.framebuffer(color_attachments=[target(dtype) for _ in range(n_targets)])
    cvao = ctx.vertex_array(copy, [(vbo, "2f", "a_pos")])
    released += [cfbo, cvao]

    def run_copy() -> None:
        for i, tex in enumerate(sources):
            tex.use(location=i)
        cfbo.use()
        cfbo.viewport = (0, 0, size, size)
        cvao.render(mode=ctx.TRIANGLES, vertices=3)
        ctx.finish()

    csec = _best(run_copy, repeats)
    for obj in reversed(released):
        obj.release()
    pixels = fma_size * fma_size
    return Peak(key, pixels * iters * FLOP_PER_ITER / sec / 1e9,
                2.0 * copy_size * copy_size * bpp * n_targets / csec / 1e9, "host",
                detail=f"fma.{suffix}.frag {fma_size}x{fma_size} x {iters} iterations; copy.{suffix}.frag "
                       f"{n_targets} x {'RGBA32F' if es3 else 'RGBA8'} {copy_size}x{copy_size}")


def gles3_peak(repeats: int = 5, size: int = 256, iters: int = 256, copy_size: int = 512) -> Peak:
    """FMA and copy fragment shaders rendering into RGBA32F multiple render targets."""
    return _fragment_peak("gles3", repeats, size, iters, copy_size)


def gles2_peak(repeats: int = 5, size: int = 512, iters: int = 64, copy_size: int = 2048) -> Peak:
    """FMA and copy fragment shaders rendering into an RGBA8 target (GLSL ES 1.00; the loop
    bound is a compile-time constant)."""
    return _fragment_peak("gles2", repeats, size, iters, copy_size)


# ---- Vulkan ----------------------------------------------------------------------------------------
def vulkan_peak(repeats: int = 5, invocations: int = 1 << 16, iters: int = 256, mbytes: int = 32) -> Peak:
    """``fma.spv`` and ``copy.spv`` through Kompute; push constants are 32-bit words."""
    import kp

    from capability_probe import contexts

    mgr = contexts.kompute_manager("vulkan")
    code = {n: (shader_dir() / f"{n}.spv").read_bytes() for n in ("fma", "copy")}
    spec = np.array([LOCAL_SIZE, 1, 1], np.uint32)
    data = mgr.tensor_t(np.linspace(0, 1, invocations * 4, dtype=np.float32), kp.TensorTypes.device)
    push = np.array([iters, 0.999, 0.001], np.float32).view(np.uint32)
    fma = mgr.algorithm([data], code["fma"], [invocations // LOCAL_SIZE, 1, 1], spec, push)
    seq = mgr.sequence().record(kp.OpAlgoDispatch(fma))
    sec = _best(seq.eval, repeats)
    nvec = mbytes * (1 << 20) // 16
    src = mgr.tensor_t(np.ones(nvec * 4, np.float32), kp.TensorTypes.device)
    dst = mgr.tensor_t(np.zeros(nvec * 4, np.float32), kp.TensorTypes.device)
    copy = mgr.algorithm([src, dst], code["copy"], [nvec // LOCAL_SIZE, 1, 1], spec, np.zeros(1, np.uint32))
    cseq = mgr.sequence().record(kp.OpAlgoDispatch(copy))
    csec = _best(cseq.eval, repeats)
    for obj in (seq, cseq, fma, copy, data, src, dst):
        try:
            obj.destroy()
        except Exception:  # noqa: BLE001 - already gone
            pass
    return Peak("vulkan", invocations * iters * FLOP_PER_ITER / sec / 1e9, 2.0 * nvec * 16 / csec / 1e9, "host",
                detail=f"fma.spv {invocations} invocations x {iters} iterations; copy.spv {mbytes} MiB")


PEAKS: dict[str, Callable[..., Peak]] = {
    "cpu": cpu_peak, "gles31": gles31_peak, "gles3": gles3_peak, "gles2": gles2_peak, "vulkan": vulkan_peak,
}


def measure_peak(path: str, repeats: int = 5) -> Peak:
    """The path's peaks; a failure is reported in ``Peak.error``, never raised."""
    try:
        return PEAKS[path](repeats=repeats)
    except Exception as exc:  # noqa: BLE001 - a microbenchmark must not take the run down
        return Peak(path, error=f"{type(exc).__name__}: {exc}")
