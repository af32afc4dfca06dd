"""Run-time isolation (``SessionOptions.isolation`` / ``GPUBACKEND_ISOLATION=1``): a session's GPU
path lives in a child process, so a driver that crashes (SIGSEGV) or hangs while compiling or
running costs that child, not the caller's process.

:class:`IsolatedPath` stands in for the path in the session: it declines, compiles and runs by
asking the child (``python -c 'from gpubackend.isolation import serve; ...'``, a fresh interpreter,
so nothing of the caller's process, its threads or its GL context, is inherited) over a socket
pair; graphs go over once per planned variant, tensors are pickled both ways. A child that dies
or does not answer within ``isolation_timeout_s`` is killed and every call after that raises
:class:`IsolatedDriverLost` (a ``ContextLost``), which the session handles like any driver
failure: the path is marked broken and its nodes are re-planned onto the next path, cpu last
(with ``fallback=False``: a :class:`~gpubackend.errors.DeviceError`).

Costs: starting the child (a Python interpreter importing gpubackend, about a second), and one
copy of each segment's inputs and outputs through the socket per run.
"""

from __future__ import annotations

import itertools
import logging
import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
import weakref
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from capability_probe.errors import ContextLost, DriverError

from .graph import Graph, Node
from .paths.base import Path, RunStats, Segment

log = logging.getLogger("gpubackend")

FAULT_ENV = "GPUBACKEND_FAULT"
# seconds a fresh child may take to start (import numpy, onnx, moderngl, kp) before it counts as failed
START_TIMEOUT_S = 120.0


class IsolatedDriverLost(ContextLost):
    """The isolated driver process died or stopped answering."""


def _portable(exc: BaseException) -> BaseException:
    """``exc`` if it survives pickling, else a DriverError (driver-side) or RuntimeError carrying its text."""
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:  # noqa: BLE001 - an exception type with an unusual constructor
        kind = DriverError if isinstance(exc, DriverError) else RuntimeError
        return kind(f"{type(exc).__name__}: {exc}")


# the path questions the child answers for every node of a graph in one round trip
PER_NODE = ("decline", "kernel_name_for")


def serve(fd: int) -> None:
    """The child's loop: requests ``(op, *args)`` in, ``("ok", result)`` or ``("error", exc)`` out."""
    from .paths import create_path

    conn = Connection(fd)
    path: Path | None = None
    graphs: dict[int, tuple[Graph, dict[str, Node]]] = {}
    segments: dict[int, Segment] = {}
    ids = itertools.count(1)
    while True:
        try:
            fault, op, *args = conn.recv()
        except (EOFError, OSError):
            break
        # test-only fault injection reads the environment on every call; follow the caller's
        if fault:
            os.environ[FAULT_ENV] = fault
        else:
            os.environ.pop(FAULT_ENV, None)
        try:
            result: Any = None
            if op == "path":
                key, precision, disabled, options = args
                path = create_path(key, precision, disabled, options)
                _open_driver(key)
            elif op == "graph":
                token, graph = args
                graphs[token] = (graph, {n.name: n for n in graph.nodes})
            elif op == "forget":
                graphs.pop(args[0], None)
            elif op in PER_NODE:  # one answer per node name
                token, names = args
                graph, by_name = graphs[token]
                assert path is not None
                ask = getattr(path, op)
                result = {name: ask(by_name[name], graph) for name in names}
            elif op == "compile":
                token, names, inputs, outputs = args
                graph, by_name = graphs[token]
                assert path is not None
                seg = path.compile([by_name[n] for n in names], graph, inputs, outputs)
                sid = next(ids)
                segments[sid] = seg
                result = (sid, list(getattr(seg, "notes", ())))
            elif op == "run":
                sid, feeds, profile = args
                stats = RunStats(profile=profile)
                result = (segments[sid].run(feeds, stats), stats)
            elif op == "close_segment":
                seg = segments.pop(args[0], None)
                if seg is not None:
                    seg.close()
            elif op == "exit":
                break
            else:
                raise ValueError(f"unknown request {op!r}")
            reply: tuple[str, Any] = ("ok", result)
        except BaseException as exc:  # noqa: BLE001 - every failure goes back to the parent
            reply = ("error", _portable(exc))
        try:
            conn.send(reply)
        except (OSError, pickle.PicklingError) as exc:
            conn.send(("error", RuntimeError(f"the isolated path's answer could not be sent back: {exc}")))
    for seg in segments.values():
        seg.close()
    if path is not None:
        path.close()


def _open_driver(key: str) -> None:
    """Make the driver's context now, while the parent waits with the start-up timeout, so that the
    first compile's time limit covers compiling only."""
    if key == "vulkan":
        from capability_probe.contexts import kompute_manager

        kompute_manager(key)
    else:
        from .gl.device import GLDevice

        GLDevice.shared(key)


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env.setdefault(k, "1")
    # the child imports this very package, also from a source checkout
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


class _Child:
    """One child process and its end of the socket pair."""

    def __init__(self, key: str):
        ours, theirs = socket.socketpair()
        self.key = key
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", f"from gpubackend.isolation import serve; serve({theirs.fileno()})"],
                pass_fds=(theirs.fileno(),), env=_child_env(), stdin=subprocess.DEVNULL)
        finally:
            theirs.close()
        self.conn = Connection(ours.detach())
        self._finalizer = weakref.finalize(self, _kill, self.proc, self.conn)

    def call(self, request: tuple, timeout: float) -> Any:
        """Send ``request``, wait up to ``timeout`` s for the answer; IsolatedDriverLost if the
        child dies or does not answer (it is killed then)."""
        try:
            self.conn.send((os.environ.get(FAULT_ENV, ""), *request))
            ready = self.conn.poll(timeout)
            reply = self.conn.recv() if ready else None
        except (EOFError, OSError) as exc:
            raise self._lost(f"died ({self._exit_reason()})") from exc
        if reply is None:
            self.kill()
            raise self._lost(f"did not answer within {timeout:g} s (a hang?) and was killed")
        status, value = reply
        if status == "error":
            raise value
        return value

    def _exit_reason(self) -> str:
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.kill()
            return "its connection broke; killed"
        if code < 0:
            try:
                return f"killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"killed by signal {-code}"
        return f"exit status {code}"

    def _lost(self, what: str) -> IsolatedDriverLost:
        exc = IsolatedDriverLost(f"{self.key}: the isolated driver process {what}")
        exc.path_key = self.key  # type: ignore[attr-defined]
        return exc

    def kill(self) -> None:
        self._finalizer()

    def stop(self, timeout: float = 10.0) -> None:
        """Ask the child to exit (it releases its GPU objects), kill it if it does not."""
        if not self._finalizer.alive:
            return
        try:
            self.conn.send(("", "exit"))
            self.proc.wait(timeout=timeout)
        except (OSError, subprocess.TimeoutExpired):
            pass
        self.kill()


def _kill(proc: subprocess.Popen, conn: Connection) -> None:
    if proc.poll() is None:
        proc.kill()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover - a kill that does not take
            pass
    try:
        conn.close()
    except OSError:
        pass


class IsolatedPath(Path):
    """The path ``key`` run in a child process (see the module docstring)."""

    def __init__(self, key: str, precision: str, disabled_kernels: frozenset[str], options: Any):
        super().__init__(precision, disabled_kernels)
        self.key = key  # type: ignore[misc]
        self.timeout = float(options.isolation_timeout_s)
        self._options = options
        self._lock = threading.RLock()
        self._child: _Child | None = None
        self._lost: IsolatedDriverLost | None = None
        self._graphs: dict[int, tuple[Graph, int]] = {}  # id(graph) -> (graph kept alive, token)
        self._tokens = itertools.count(1)
        self._answers: dict[tuple[str, int, str], str | None] = {}  # (question, graph token, node)

    def _call(self, *request: Any, timeout: float | None = None) -> Any:
        with self._lock:
            if self._lost is not None:
                raise self._lost
            try:
                if self._child is None:
                    self._child = _Child(self.key)
                    self._child.call(("path", self.key, self.precision, self.disabled_kernels, self._options),
                                     max(START_TIMEOUT_S, self.timeout))
                return self._child.call(request, self.timeout if timeout is None else timeout)
            except IsolatedDriverLost as exc:
                self._lost = exc
                log.warning("%s", exc)
                raise

    def _token(self, graph: Graph) -> int:
        hit = self._graphs.get(id(graph))
        if hit is not None and hit[0] is graph:
            return hit[1]
        token = next(self._tokens)
        self._call("graph", token, graph)
        self._graphs[id(graph)] = (graph, token)
        return token

    def _per_node(self, question: str, node: Node, graph: Graph) -> str | None:
        """The child's path's answer to ``question`` (one of ``PER_NODE``) for ``node``: one round
        trip answers every node of the graph."""
        token = self._token(graph)
        if (question, token, node.name) not in self._answers:
            answers = self._call(question, token, [n.name for n in graph.nodes])
            self._answers.update({(question, token, name): a for name, a in answers.items()})
        return self._answers[(question, token, node.name)]

    def decline(self, node: Node, graph: Graph) -> str | None:
        return self._per_node("decline", node, graph)

    def kernel_name_for(self, node: Node, graph: Graph) -> str | None:
        """The child's path object's answer: the kernel it runs ``node`` with depends on its
        context's limits there (gles3's conv_blend), not on the path module's defaults."""
        return self._per_node("kernel_name_for", node, graph)

    def compile(self, nodes: list[Node], graph: Graph, inputs: list[str], outputs: list[str]) -> Segment:
        sid, notes = self._call("compile", self._token(graph), [n.name for n in nodes], inputs, outputs)
        return IsolatedSegment(self, sid, nodes, inputs, outputs, notes)

    def close(self) -> None:
        with self._lock:
            if self._child is not None:
                self._child.stop()
            self._child = None
            self._graphs.clear()
            self._answers.clear()
            if self._lost is None:
                self._lost = IsolatedDriverLost(f"{self.key}: the isolated path was closed")


class IsolatedSegment(Segment):
    """A segment compiled in the child; runs send its inputs there and bring its outputs back."""

    def __init__(self, owner: IsolatedPath, sid: int, nodes: list[Node], inputs: list[str], outputs: list[str],
                 notes: list[str]):
        super().__init__(owner.key, nodes, inputs, outputs)
        self._owner = owner
        self._sid = sid
        self.notes = notes
        self._closed = False

    def run(self, feeds: dict[str, np.ndarray], stats: RunStats) -> dict[str, np.ndarray]:
        out, child_stats = self._owner._call("run", self._sid, {n: feeds[n] for n in self.inputs}, stats.profile)
        stats.upload(child_stats.upload_bytes, child_stats.uploads)
        stats.download(child_stats.download_bytes, child_stats.downloads)
        stats.dispatches += child_stats.dispatches
        stats.node_seconds.update(child_stats.node_seconds)
        stats.timing = child_stats.timing
        return out

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._owner._call("close_segment", self._sid)
        except DriverError:  # the child is gone, and its objects with it
            pass
