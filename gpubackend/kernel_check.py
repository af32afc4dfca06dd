"""The per-kernel first-run check: before a session first places a node on a GPU kernel that has
not been checked on this driver, that kernel runs the node (its real attributes, weights and
shapes, on seeded random inputs) and the result is compared with the CPU reference kernels
(``fallback``). A kernel that disagrees is declined for every node of the session (they go to
the next path, cpu last, and ``explain()`` says why); the verdict, pass or fail, is cached.

Why beside the probe: the probe's canary verifies a tier with a few fixed cases, so a fault in one
kernel (a driver miscompiling one shader) passes it; checking each kernel the first time it is
used catches that before it returns a wrong answer, at the cost of one extra run of one node per
kernel and driver. Verdicts live in ``<cache dir>/kernel-checks-<probe key>.json``: the probe's
cache key already hashes the driver files, the kernel sources and ``GPUBACKEND_FAULT``, so a new
driver or changed shader is checked again. A kernel is the path module's ``kernel_name`` (e.g.
``conv``, ``depthwise``, ``gemm``), so one configuration vouches for the kernel on this driver.
The node is checked at a small size (its inputs' spatial axes cut to ``SMALL_EXTENT``) when it
keeps its kernel there, else at its real size. A cut can hide a bug that shows only on long axes
(a loop counter exact to 2048): when the cut shortened an axis the kernel loops over (Softmax's
axis, a Reduce's axes, MatMul's inner length: :func:`gpubackend.ops.loops.loop_axes`), a second
check runs the node with those axes at their real length and the others still cut (at most
``LONG_CHECK_ELEMENTS`` per input). Its verdict is cached per kernel with the longest length that
passed and the shortest that failed, so a node is checked again only at a length not yet vouched for.

``SessionOptions.kernel_check`` (``GPUBACKEND_KERNEL_CHECK=0``) turns it off.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path as FilePath
from typing import Any

import numpy as np

from .graph import Graph, Node
from .paths.base import Path, RunStats, Segment

log = logging.getLogger("gpubackend")

# max|got - ref| / max(1, max|ref|) allowed per GPU storage precision (the project's measure). In
# fp16 both sides read the same fp16-rounded inputs and the reference's output is rounded to fp16
# too, so what is left of honest noise is rounding inside the kernel (fp16 intermediates, fused
# steps; mediump products in fp16-compute, whose running sums stay highp so the noise does not grow
# with the loop length): at most 3.4e-3 over every kernel's check on llvmpipe/lavapipe. 5e-2 had let
# a 1.8e-2 wrong answer through (ReduceMean over a large plane); these bounds fail it.
TOLERANCE = {"fp32": 1e-3, "fp16": 4e-3, "fp16-compute": 1e-2}
FILE_PREFIX = "kernel-checks-"
# The check shrinks every axis after the first two (batch, channels) of the node's inputs to at
# most this, when the node stays valid and keeps its kernel at that size (else: its real shapes).
SMALL_EXTENT = 32
# The long check's bound on the elements of each input (the loop axes at their real length, the
# other axes cut, down to 1 if need be); a node beyond it is not checked at its long length.
LONG_CHECK_ELEMENTS = 1 << 22
_SEED = 20261124


def _shader_build_errors() -> tuple[type[BaseException], ...]:
    from capability_probe.errors import ShaderCompileError, ShaderLinkError

    return (ShaderCompileError, ShaderLinkError)


class VerdictStore:
    """Kernel verdicts for one driver state, in memory and (when writable) on disk. A missing,
    corrupt or unwritable file degrades to checking again; it never raises."""

    _lock = threading.Lock()
    _memory: dict[str, dict[str, dict[str, Any]]] = {}

    def __init__(self, driver_key: str, directory: FilePath | None):
        self.driver_key = driver_key
        self.file = directory / f"{FILE_PREFIX}{driver_key}.json" if directory is not None else None

    _keys: dict[tuple[tuple[str, str], ...], str] = {}

    @classmethod
    def for_this_driver(cls) -> VerdictStore:
        """The store for the driver this process loads, keyed like the probe's verdict cache. The
        key (about 0.1 s to compute: it stats the driver files and sources) is remembered per
        value of the environment variables it reads."""
        import os

        from capability_probe import cache
        from capability_probe.runner import canaries

        env = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith(cache.ENV_KEYS_PREFIXES)))
        key = cls._keys.get(env)
        if key is None:
            key = cls._keys[env] = cache.cheap_key(canaries(), {"kernel_check": 1})[0]
        return cls(key, cache.cache_dir())

    def _entries(self) -> dict[str, dict[str, Any]]:
        mem = self._memory.get(self.driver_key)
        if mem is None:
            mem = self._memory[self.driver_key] = self._read()
        return mem

    def _read(self) -> dict[str, dict[str, Any]]:
        if self.file is None:
            return {}
        try:
            data = json.loads(self.file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        if not isinstance(data, dict) or data.get("key") != self.driver_key:
            return {}
        if not isinstance(data.get("kernels"), dict):
            return {}
        return {k: v for k, v in data["kernels"].items()
                if isinstance(v, dict) and isinstance(v.get("ok"), bool) and isinstance(v.get("detail", ""), str)
                and type(v.get("length", 0)) is int}

    def get(self, path: str, precision: str, kernel: str) -> dict[str, Any] | None:
        with self._lock:
            return self._entries().get(f"{path}/{precision}/{kernel}")

    def put(self, path: str, precision: str, kernel: str, ok: bool, detail: str, length: int | None = None) -> None:
        with self._lock:
            entries = self._entries()
            entry: dict[str, Any] = {"ok": ok, "detail": detail, "time": time.time()}
            if length is not None:
                entry["length"] = int(length)
            entries[f"{path}/{precision}/{kernel}"] = entry
            if self.file is None:
                return
            from capability_probe import cache

            try:
                cache.atomic_write_json(self.file, {"key": self.driver_key, "kernels": entries})
            except (OSError, TypeError, ValueError) as exc:  # an unusable cache: keep the verdict in memory
                log.debug("kernel verdicts not saved: %s", exc)

    @classmethod
    def forget_memory(cls) -> None:
        """Drop the in-memory verdicts (tests; the files stay)."""
        with cls._lock:
            cls._memory.clear()


def _random_feed(name: str, graph: Graph, precision: str, rng: np.random.Generator) -> np.ndarray | None:
    shape = graph.shape(name)
    dtype = graph.dtypes.get(name)
    if shape is None or dtype is None or None in shape:
        return None
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        value = rng.uniform(-2.0, 2.0, size=tuple(shape)).astype(dtype)
        # both sides see the values the GPU stores
        return value.astype(np.float16).astype(dtype) if precision.startswith("fp16") else value
    if dtype.kind == "b":
        return rng.integers(0, 2, size=tuple(shape)).astype(bool)
    return np.zeros(tuple(shape), dtype)  # valid as an index, an axis, a count


def _fp16_rounded(value: np.ndarray) -> np.ndarray:
    value = np.asarray(value)
    if value.dtype.kind != "f":
        return value
    with np.errstate(over="ignore"):  # beyond fp16's range the GPU holds inf as well
        return value.astype(np.float16).astype(value.dtype)


def compare(got: np.ndarray, ref: np.ndarray) -> float:
    """The project's error measure, max|got-ref| / max(1, max|ref|), over finite values; NaN and
    infinities must sit in the same places (else inf)."""
    got = np.asarray(got)
    ref = np.asarray(ref)
    if got.shape != ref.shape:
        return float("inf")
    if ref.dtype.kind not in "fc":
        return 0.0 if np.array_equal(got, ref) else float("inf")
    g = got.astype(np.float64)
    r = ref.astype(np.float64)
    if not np.array_equal(np.isnan(g), np.isnan(r)):
        return float("inf")
    inf_r = np.isinf(r)
    if not np.array_equal(np.isinf(g), inf_r) or not np.array_equal(g[inf_r], r[inf_r]):
        return float("inf")
    finite = np.isfinite(r)
    if not finite.any():
        return 0.0
    return float(np.max(np.abs(g[finite] - r[finite])) / max(1.0, float(np.max(np.abs(r[finite])))))


def _input_shapes(node: Node, graph: Graph) -> dict[str, tuple[int, ...]] | None:
    from .planner import segment_io

    ((ins, _),) = segment_io(graph, [("check", [node])])
    shapes = {n: graph.shape(n) for n in ins}
    if not ins or any(s is None or None in s or n not in graph.dtypes for n, s in shapes.items()):
        return None
    return {n: tuple(s) for n, s in shapes.items()}  # type: ignore[arg-type]


def _cut(shape: tuple[int, ...], keep: tuple[int, ...]) -> tuple[int, ...]:
    """Every axis but those in ``keep`` cut: batch and channels (0, 1) to 1, the others to SMALL_EXTENT."""
    return tuple(d if i in keep else min(d, SMALL_EXTENT if i >= 2 else 1) for i, d in enumerate(shape))


def shrunk(node: Node, graph: Graph, kernel_name: Callable[[Node, Graph], str | None],
           kernel: str) -> tuple[Node, Graph] | None:
    """``node`` alone in a graph whose inputs have their spatial (and later) axes cut to
    :data:`SMALL_EXTENT`, the same attributes and constants, so checking it costs little however
    large the real tensors are; None when nothing shrinks, or the smaller node is invalid (a
    Reshape to a fixed shape, say) or would run another kernel."""
    shapes = _input_shapes(node, graph)
    if shapes is None:
        return None
    small = {n: _cut(s, keep=(0, 1)) for n, s in shapes.items()}
    if small == shapes:
        return None
    return _resized(node, graph, small, kernel_name, kernel)


def loop_length(node: Node, graph: Graph) -> int | None:
    """The length ``node``'s kernel loops over (the longest product of an input's loop axes, see
    :func:`gpubackend.ops.loops.loop_axes`) when the first check's cut shortens one of those axes;
    None when it keeps them whole. Reads shapes only."""
    from .ops.loops import loop_axes

    shapes = _input_shapes(node, graph)
    loops = {n: axes for n, axes in loop_axes(node, graph).items() if shapes is not None and n in shapes}
    if shapes is None or not loops:
        return None
    if all(_cut(shapes[n], keep=(0, 1))[a] == shapes[n][a] for n, axes in loops.items() for a in axes):
        return None
    return max(int(np.prod([shapes[n][a] for a in axes])) for n, axes in loops.items())


def long_variant(node: Node, graph: Graph, kernel_name: Callable[[Node, Graph], str | None],
                 kernel: str) -> tuple[Node, Graph] | None:
    """``node`` alone with the axes its kernel loops over at their real length and the other
    spatial axes cut as :func:`shrunk` cuts them (and, past ``LONG_CHECK_ELEMENTS``, the batch and
    channel axes cut to 1 as well); None when the first check ran the node at its real size
    (:func:`shrunk` gives nothing), or no such node is valid within the bound."""
    from .ops.loops import loop_axes

    shapes = _input_shapes(node, graph)
    if shapes is None or shrunk(node, graph, kernel_name, kernel) is None:
        return None
    loops = loop_axes(node, graph)
    for whole in ((0, 1), ()):
        sized = {n: _cut(s, keep=loops.get(n, ()) + whole) for n, s in shapes.items()}
        if max(int(np.prod(s)) for s in sized.values()) > LONG_CHECK_ELEMENTS:
            continue
        got = _resized(node, graph, sized, kernel_name, kernel)
        if got is not None:
            return got
    return None


def _resized(node: Node, graph: Graph, sizes: dict[str, tuple[int, ...]],
             kernel_name: Callable[[Node, Graph], str | None], kernel: str) -> tuple[Node, Graph] | None:
    """``node`` alone in a graph whose inputs have ``sizes``; None when that is invalid or runs
    another kernel."""
    from .model import to_graph
    from .paths.cpu import subgraph_model

    try:
        feeds = {n: np.zeros(shape, graph.dtypes[n]) for n, shape in sizes.items()}
        g = to_graph(subgraph_model([node], graph, feeds, [o for o in node.outputs if o]))
    except Exception:  # noqa: BLE001 - not valid at this size
        return None
    if len(g.nodes) != 1 or kernel_name(g.nodes[0], g) != kernel:
        return None
    return g.nodes[0], g


def run_check(gpu: Path, reference: Path, node: Node, graph: Graph, precision: str) -> tuple[bool, str] | None:
    """Run ``node`` alone on ``gpu`` and on ``reference`` with seeded random inputs of its real
    shapes: (passed, detail), or None when the check says nothing (inputs of unknown shape, or a
    failure of the reference or of the GPU path's compiler other than a shader build error, which
    the real compile then reports)."""
    from .planner import segment_io

    outs = [o for o in node.outputs if o]
    ((ins, _),) = segment_io(graph, [(gpu.key, [node])])
    rng = np.random.default_rng(_SEED)
    feeds = {}
    for name in ins:
        value = _random_feed(name, graph, precision, rng)
        if value is None:
            return None
        feeds[name] = value
    try:
        ref_seg = reference.compile([node], graph, ins, outs)
        try:
            want = ref_seg.run(dict(feeds), RunStats())
        finally:
            ref_seg.close()
    except Exception as exc:  # noqa: BLE001 - the reference refuses these random inputs: no verdict
        log.debug("kernel check of %s skipped: the reference failed: %s", node.name, exc)
        return None
    seg: Segment | None = None
    try:
        seg = gpu.compile([node], graph, ins, outs)
        got = seg.run(dict(feeds), RunStats())
    except _shader_build_errors() as exc:
        return False, f"its shader does not build: {str(exc).splitlines()[0]}"
    except Exception as exc:  # noqa: BLE001 - a driver failure is handled by the caller
        from capability_probe.errors import DriverError

        if isinstance(exc, DriverError):
            raise
        log.debug("kernel check of %s skipped: %s", node.name, exc)
        return None
    finally:
        if seg is not None:
            seg.close()
    if precision.startswith("fp16"):  # the GPU stores its output in fp16: that rounding is no fault
        want = {o: _fp16_rounded(v) for o, v in want.items()}
    worst = max((compare(got[o], want[o]) for o in outs), default=0.0)
    tol = TOLERANCE.get(precision, TOLERANCE["fp32"])
    if worst <= tol:
        return True, f"error {worst:.2e} on {node.op_type} {node.name}"
    shown = "NaN/Inf or shape mismatch" if worst == float("inf") else f"error {worst:.3g} > {tol:g}"
    return False, f"{shown} against the CPU on {node.op_type} {node.name}"


class CheckedPath(Path):
    """A GPU path whose kernels each pass :func:`run_check` on their first use on this driver; a
    kernel that fails is declined (with the reason) for every node. Everything else is the
    wrapped path's."""

    def __init__(self, inner: Path, kernel_name: Callable[[Node, Graph], str | None],
                 reference: Callable[[], Path], store: VerdictStore):
        # fp16-compute kernels get verdicts of their own (an isolated inner path carries the name)
        super().__init__("fp16-compute" if inner.arithmetic == "fp16" else inner.precision, inner.disabled_kernels)
        self.key = inner.key  # type: ignore[misc]
        self.inner = inner
        self._kernel_name = kernel_name
        self._reference = reference
        self.store = store
        self.checked: dict[str, tuple[bool, str]] = {}  # this session's verdicts, kernel -> (ok, detail)
        self.seconds = 0.0  # spent in checks by this path object

    def __getattr__(self, name: str) -> Any:  # path-specific knobs (record_once, ...)
        return getattr(self.inner, name)

    def decline(self, node: Node, graph: Graph) -> str | None:
        why = self.inner.decline(node, graph)
        if why is not None:
            return why
        kernel = self._kernel_name(node, graph)
        if not kernel:
            return None
        ok, detail = self._verdict(kernel, node, graph)
        if not ok:
            return f"kernel {kernel!r} failed its first-run check on this driver ({detail})"
        ok, detail = self._long_verdict(kernel, node, graph)
        return None if ok else f"kernel {kernel!r} failed its check at the node's real loop length ({detail})"

    def _verdict(self, kernel: str, node: Node, graph: Graph) -> tuple[bool, str]:
        if kernel in self.checked:
            return self.checked[kernel]
        stored = self.store.get(self.key, self.precision, kernel)
        if stored is not None:
            verdict = (bool(stored["ok"]), str(stored.get("detail", "")) + " (cached)")
        else:
            t0 = time.perf_counter()
            target = shrunk(node, graph, self._kernel_name, kernel) or (node, graph)
            result = run_check(self.inner, self._reference(), *target, self.precision)
            self.seconds += time.perf_counter() - t0
            if result is None:
                return True, "not checked"
            verdict = result
            self.store.put(self.key, self.precision, kernel, *result)
            if not result[0]:
                log.warning("the %s kernel %r failed its first-run check (%s); its nodes go to the next path",
                            self.key, kernel, result[1])
        self.checked[kernel] = verdict
        return verdict

    def _long_verdict(self, kernel: str, node: Node, graph: Graph) -> tuple[bool, str]:
        """The check at the node's real loop length (see the module's docstring); passes when the
        short check already covered it."""
        length = loop_length(node, graph)  # cheap: the graphs are built only when a check must run
        if length is None:
            return True, "no long loop"
        memo_key = f"{kernel}/long{length}"
        if memo_key in self.checked:
            return self.checked[memo_key]
        passed = self.store.get(self.key, self.precision, f"{kernel}/long-passed")
        failed = self.store.get(self.key, self.precision, f"{kernel}/long-failed")
        if passed is not None and int(passed.get("length", 0)) >= length:
            verdict = (True, f"{passed.get('detail', '')} (cached)")
        elif failed is not None and int(failed.get("length", 0)) <= length:
            verdict = (False, f"{failed.get('detail', '')} (cached)")
        else:
            t0 = time.perf_counter()
            target = long_variant(node, graph, self._kernel_name, kernel)
            result = None if target is None else run_check(self.inner, self._reference(), *target, self.precision)
            self.seconds += time.perf_counter() - t0
            if result is None:  # covered by the first check, beyond the bound, or no verdict
                self.checked[memo_key] = (True, "not checked at its loop length")
                return self.checked[memo_key]
            verdict = (result[0], f"{result[1]}, loop length {length}")
            self.store.put(self.key, self.precision, f"{kernel}/long-{'passed' if result[0] else 'failed'}",
                           *verdict, length=length)
            if not result[0]:
                log.warning("the %s kernel %r failed its check at loop length %d (%s); its nodes of that "
                            "length go to the next path", self.key, kernel, length, result[1])
        self.checked[memo_key] = verdict
        return verdict

    def compile(self, nodes: list[Node], graph: Graph, inputs: list[str], outputs: list[str]) -> Segment:
        return self.inner.compile(nodes, graph, inputs, outputs)

    def close(self) -> None:
        self.inner.close()
