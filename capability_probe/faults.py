"""Driver-fault injection (test only), from ``GPUBACKEND_FAULT="KIND@PATH,..."``.

KIND is one of ``absent compile link wrong nan crash hang oom lost``; PATH is a path key
(``gles2 gles3 gles31 vulkan``) or ``gl`` (all three GL tiers). An optional kernel filter,
``KIND@PATH:KERNEL[+KERNEL...]`` (e.g. ``wrong@gles3:depthwise``), limits the fault to work done
for those kernels (see :func:`kernel_scope`); the probe's own round trips are then unaffected.
An optional ``>WORDS`` suffix (``wrong@gles2:softmax>2048``) limits ``wrong``/``nan`` to
readbacks of more than that many 32-bit words: a fault that shows only on long axes.
Every GPU path calls the hooks below at its choke points, so a fault acts in the layer that
talks to the driver and everything above it runs its real code. The probe's own feature tests
and round trips call them too.

Where each kind strikes:

=========  ==================  =======================================================
kind       hook                effect
=========  ==================  =======================================================
absent     on_context          DriverUnavailable
compile    on_compile          ShaderCompileError (any stage but "link")
link       on_compile "link",  ShaderLinkError
           "compute", "spirv"
wrong      on_readback         a perturbed copy (x*1.01+0.5 on every 7th element)
nan        on_readback         a NaN-filled copy
crash      on_context,         a real SIGSEGV in the calling process
           on_dispatch
hang       on_context,         blocks forever (only a timeout or a kill ends it); with
           on_dispatch         ``GPUBACKEND_FAULT_HANG_S``, once for that many seconds (a busy device)
oom        on_alloc            DeviceOutOfMemory
lost       on_dispatch         ContextLost
nanloss    on_readback         NaN read back as 0, +-Inf as +-3.4e38 (as NVIDIA's gles2 did)
skew       on_readback         every float scaled by 1.02: a wrong answer as small as fp16 noise
                               allows, the size of the ReduceMean-over-a-large-plane bug
=========  ==================  =======================================================

The environment is read on every call (cheap), so tests may change it between calls.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import signal
import threading
from collections.abc import Callable, Iterable, Iterator

import numpy as np

from .errors import ContextLost, DeviceOutOfMemory, DriverUnavailable, ShaderCompileError, ShaderLinkError

ENV = "GPUBACKEND_FAULT"
HANG_S_ENV = "GPUBACKEND_FAULT_HANG_S"  # a hang that ends after this many seconds (default: never)
KINDS = ("absent", "compile", "link", "wrong", "nan", "crash", "hang", "oom", "lost")
# Faults that touch only NaN/Inf values: the path stays verified, the probe reports the loss.
QUIET_KINDS = ("nanloss",)
# Wrong answers too small for the probe's canaries to be meant to see (kernel-check tests only).
SUBTLE_KINDS = ("skew",)
GL_PATHS = ("gles2", "gles3", "gles31")
GPU_PATHS = ("vulkan", "gles31", "gles3", "gles2")


def parse_items(spec: str | None = None) -> list[tuple[str, str, frozenset[str]]]:
    """``"wrong@gles3:depthwise+conv, nan@gl"`` -> ``[("wrong", "gles3", {"depthwise", "conv"}),
    ("nan", "gl", {})]``. The optional ``:KERNEL[+KERNEL...]`` filter (kernel names as the paths'
    ``kernel_name`` gives them) limits the fault to work done inside :func:`kernel_scope` for one
    of those kernels; without it the fault hits everything. Bad items raise ValueError.
    (A ``>WORDS`` size threshold is dropped here; :func:`active` applies it.)"""
    return [(kind, path, names) for kind, path, names, _ in _parse(spec)]


def _parse(spec: str | None) -> list[tuple[str, str, frozenset[str], int]]:
    if spec is None:
        spec = os.environ.get(ENV, "")
    out: list[tuple[str, str, frozenset[str], int]] = []
    for item in spec.split(","):
        item = item.strip()
        if not item:
            continue
        kind, sep, path = item.partition("@")
        path, gt, words = path.partition(">")
        path, _, kernels = path.partition(":")
        kind, path = kind.strip().lower(), path.strip().lower()
        names = frozenset(k.strip().lower() for k in kernels.split("+") if k.strip())
        if not sep or kind not in (*KINDS, *QUIET_KINDS, *SUBTLE_KINDS) or path not in (*GPU_PATHS, "gl") or \
                (gt and not words.strip().isdigit()):
            raise ValueError(
                f"bad {ENV} item {item!r}: expected KIND@PATH[:KERNEL[+KERNEL...]][>WORDS] with KIND in "
                f"{', '.join((*KINDS, *QUIET_KINDS, *SUBTLE_KINDS))} and PATH in {', '.join((*GPU_PATHS, 'gl'))}"
            )
        out.append((kind, path, names, int(words) if gt else 0))
    return out


def parse(spec: str | None = None) -> list[tuple[str, str]]:
    """``"crash@gles2, nan@gl"`` -> ``[("crash", "gles2"), ("nan", "gl")]``; bad items raise ValueError.
    (Kernel filters are dropped here; see :func:`parse_items`.)"""
    return [(k, p) for k, p, _ in parse_items(spec)]


# The kernels of the work in flight (set by whoever runs compiled kernels: the conformance suite,
# and segments built through ``gpubackend.paths.create_path`` while a fault is set).
_KERNELS: contextvars.ContextVar[frozenset[str]] = contextvars.ContextVar("gpubackend_fault_kernels",
                                                                          default=frozenset())


@contextlib.contextmanager
def kernel_scope(kernels: Iterable[str]) -> Iterator[None]:
    """Within this block, faults filtered to kernels (``KIND@PATH:KERNEL``) strike when one of
    ``kernels`` is among their names."""
    token = _KERNELS.set(frozenset(str(k).lower() for k in kernels if k))
    try:
        yield
    finally:
        _KERNELS.reset(token)


def active(kind: str, path: str, nbytes: int | None = None) -> bool:
    """Is fault ``kind`` injected for ``path``?

    ``KIND@gl`` applies to every GL tier; asking with ``path="gl"`` matches only ``KIND@gl``
    (the shared GL context is not any one tier's). A kernel-filtered item applies only inside a
    :func:`kernel_scope` naming one of its kernels; an item with a ``>WORDS`` threshold only to
    readbacks (``nbytes``) of more than that many 32-bit words.
    """
    spec = os.environ.get(ENV, "")
    if not spec:  # the common case, asked at every dispatch: no parse
        return False
    try:
        items = _parse(spec)
    except ValueError:
        return False
    for k, p, kernels, words in items:
        if k != kind:
            continue
        if kernels and not (kernels & _KERNELS.get()):
            continue
        if words and (nbytes is None or nbytes <= 4 * words):
            continue
        if p == path or (p == "gl" and path in GL_PATHS):
            return True
    return False


def scope_segments(path_obj: object, kernel_name: Callable[..., str | None] | None) -> None:
    """Test-only instrumentation, applied by ``gpubackend.paths.create_path`` when a kernel-filtered
    fault is set: segments compiled by ``path_obj`` run (and compile) inside :func:`kernel_scope`
    of their nodes' kernel names, so ``wrong@gles3:depthwise`` strikes only segments holding a
    depthwise kernel."""
    if kernel_name is None or not any(kernels for _, _, kernels in _safe_items()):
        return
    compile_fn = path_obj.compile  # type: ignore[attr-defined]

    def compile_scoped(nodes: list, graph: object, *args: object, **kwargs: object) -> object:
        names = set()
        for node in nodes:
            try:
                names.add(kernel_name(node, graph) or "")
            except Exception:  # noqa: BLE001
                pass
        with kernel_scope(names):
            seg = compile_fn(nodes, graph, *args, **kwargs)
        run_fn = seg.run  # type: ignore[attr-defined]

        def run_scoped(*a: object, **kw: object) -> object:
            with kernel_scope(names):
                return run_fn(*a, **kw)

        seg.run = run_scoped  # type: ignore[attr-defined]
        return seg

    path_obj.compile = compile_scoped  # type: ignore[attr-defined]


def _safe_items() -> list[tuple[str, str, frozenset[str]]]:
    try:
        return parse_items()
    except ValueError:
        return []


def _tag(kind: str, path: str) -> str:
    return f"injected fault {kind}@{path}"


def _crash() -> None:
    # A real segmentation fault in the process running the driver, as a broken driver would.
    try:
        import faulthandler

        faulthandler.disable()
    except Exception:  # pragma: no cover
        pass
    os.kill(os.getpid(), signal.SIGSEGV)
    import ctypes

    ctypes.string_at(0)  # pragma: no cover - only if the signal was caught


_slow_start_done = False


def _hang() -> None:
    # forever; or, with HANG_S_ENV, once per process for that many seconds: a device too busy to
    # answer in time at first start rather than a dead one
    global _slow_start_done
    try:
        seconds = float(os.environ[HANG_S_ENV]) if os.environ.get(HANG_S_ENV) else None
    except ValueError:
        seconds = None
    if seconds is None:
        threading.Event().wait()
    elif not _slow_start_done:
        _slow_start_done = True
        threading.Event().wait(seconds)


def on_context(path: str) -> None:
    """Context creation choke point: absent, crash, hang."""
    if active("absent", path):
        raise DriverUnavailable(f"{_tag('absent', path)}: no {path} context")
    if active("crash", path):
        _crash()
    if active("hang", path):
        _hang()


SINGLE_STAGE = ("compute", "spirv")  # programs built (compiled and linked) in one call


def on_compile(path: str, stage: str) -> None:
    """Shader compile/link choke point. ``stage``: vertex fragment compute spirv link.

    ``compile`` strikes every stage but ``link``; ``link`` strikes ``link`` and the single-stage
    builds (``compute``, ``spirv``: a GL compute program or a Vulkan pipeline is compiled and
    linked by one call), so a path that never reports a separate link stage still sees it.
    """
    if stage != "link" and active("compile", path):
        raise ShaderCompileError(f"{_tag('compile', path)}: {stage} shader failed to compile", stage=stage)
    if (stage == "link" or stage in SINGLE_STAGE) and active("link", path):
        what = "pipeline creation failed" if stage == "spirv" else "program failed to link"
        raise ShaderLinkError(f"{_tag('link', path)}: {what}", stage="link")


def on_alloc(path: str, nbytes: int) -> None:
    """Buffer/texture allocation choke point: oom."""
    if active("oom", path):
        raise DeviceOutOfMemory(f"{_tag('oom', path)}: out of device memory allocating {int(nbytes)} bytes")


def on_dispatch(path: str) -> None:
    """Dispatch/draw choke point: lost, crash, hang."""
    if active("lost", path):
        raise ContextLost(f"{_tag('lost', path)}: context lost during dispatch")
    if active("crash", path):
        _crash()
    if active("hang", path):
        _hang()


def on_readback(path: str, array: np.ndarray) -> np.ndarray:
    """Readback choke point: wrong -> perturbed copy, nan -> NaN copy, nanloss -> NaN/Inf made
    finite, else ``array`` unchanged."""
    if active("nan", path, array.nbytes):
        out = np.array(array, copy=True)
        if out.dtype.kind == "f":
            out.fill(np.nan)
        else:  # integer/byte readbacks (e.g. RGBA8): all-ones bytes decode to NaN as float32
            out.fill(np.iinfo(out.dtype).max if out.dtype.kind in "ui" else 0)
        return out
    if active("nanloss", path, array.nbytes) and array.dtype.kind == "f":
        return np.nan_to_num(array, nan=0.0, posinf=np.finfo(array.dtype).max, neginf=-np.finfo(array.dtype).max)
    if active("skew", path, array.nbytes) and array.dtype.kind == "f":
        return array * np.asarray(1.02, array.dtype)
    if active("wrong", path, array.nbytes):
        out = np.array(array, copy=True)
        flat = out.reshape(-1)
        if out.dtype.kind == "f":
            flat[::7] = flat[::7] * np.asarray(1.01, out.dtype) + np.asarray(0.5, out.dtype)
        else:
            flat[::7] = flat[::7] ^ np.asarray(0x5A, out.dtype) if out.dtype.kind in "ui" else flat[::7]
        return out
    return array
