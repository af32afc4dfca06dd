"""The process's GPU thread: one long-lived thread on which sessions run their GPU work, so a
session can be created in one thread and run from any other, and several threads can share it.

Why one thread for the process and not one per session: the GL context is process-wide and
bound to the thread that made it (``capability_probe.contexts``), and the gles31 device and the
Kompute manager are process-wide too; a single thread that owns them all is what lets any
caller thread use them. Work from different sessions is serialised there, as it would be on one
GPU queue; CPU segments still run in the caller's thread, so they overlap GPU work."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")

THREAD_NAME = "gpubackend-gpu"
_lock = threading.Lock()
_executor: ThreadPoolExecutor | None = None
_ident: int | None = None


def _remember_ident() -> None:
    global _ident
    _ident = threading.get_ident()


def _gpu_executor() -> ThreadPoolExecutor:
    global _executor
    with _lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=THREAD_NAME,
                                           initializer=_remember_ident)
            _executor.submit(lambda: None).result()  # start it so its ident is known
        return _executor


def gpu_thread_ident() -> int:
    """The GPU thread's ident (starting the thread if needed)."""
    _gpu_executor()
    assert _ident is not None
    return _ident


def on_gpu_thread() -> bool:
    return _ident is not None and threading.get_ident() == _ident


def call_on_gpu_thread(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run ``fn`` on the GPU thread and return its result (its exception is raised here)."""
    if on_gpu_thread():
        return fn(*args, **kwargs)
    return _gpu_executor().submit(fn, *args, **kwargs).result()


def gl_owner_thread() -> int | None:
    """The ident of the thread owning the process's GL context, None if there is none yet."""
    try:
        from capability_probe import contexts
    except ImportError:  # pragma: no cover - the probe package ships with gpubackend
        return None
    return contexts.gl_context_thread()
