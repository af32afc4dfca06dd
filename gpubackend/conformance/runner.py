"""Running the suite: targets (path x precision), each case on a target, the results.

The suite runs a path's kernels whatever the probe concluded about the path (a path the probe
left unverified is exactly the one whose failing kernels a user wants to see), and whatever
kernels earlier verdicts disabled: it builds the path with ``gpubackend.paths.create_path(key,
precision)`` (no disabled kernels), asks ``path.decline`` about every node (a declined case is
*unsupported*, not a failure), compiles all nodes of the case into one segment and runs it. Only
a path the probe found *unavailable* (no API, no context) or that is not built is skipped.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import GpuBackendError, PathUnavailableError, UnsupportedOperatorError
from ..graph import Graph
from ..model import load_model, to_graph
from ..paths import GPU_PATH_KEYS, PATH_KEYS, create_path, path_module
from ..paths.base import Path, RunStats
from ..planner import segment_io
from .cases import Case, all_cases, select
from .compare import TOLERANCES, Metrics, compare_all

PRECISIONS = ("fp32", "fp16")
FAIL_STATES = ("failed", "error")


@dataclass
class CaseResult:
    case: str
    path: str
    precision: str
    family: str  # the kernel family the case targets
    op: str
    status: str  # passed | failed | error | unsupported
    kernels: list[str] = field(default_factory=list)  # the path's kernel names for the case's nodes
    reason: str = ""
    metrics: Metrics | None = None
    compile_ms: float = 0.0
    run_ms: float = 0.0
    tags: list[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return self.status in FAIL_STATES

    def as_dict(self) -> dict[str, Any]:
        return {"case": self.case, "path": self.path, "precision": self.precision, "family": self.family,
                "op": self.op, "status": self.status, "kernels": self.kernels, "reason": self.reason,
                "metrics": self.metrics.as_dict() if self.metrics else None,
                "compile_ms": round(self.compile_ms, 3), "run_ms": round(self.run_ms, 3), "tags": self.tags}


def result_from_dict(d: dict[str, Any]) -> CaseResult:
    """The inverse of ``CaseResult.as_dict`` (for results sent by an isolated worker)."""
    m = d.get("metrics")
    metrics = None
    if m is not None:
        metrics = Metrics(**{k: (float(v) if k in ("max_abs", "max_rel", "ratio") else v) for k, v in m.items()})
    return CaseResult(d["case"], d["path"], d["precision"], d["family"], d["op"], d["status"], list(d["kernels"]),
                      d["reason"], metrics, float(d["compile_ms"]), float(d["run_ms"]), list(d["tags"]))


@dataclass
class Target:
    """One path at one precision. ``status``: run | not built | unavailable | precision not offered."""

    path: str
    precision: str
    status: str = "run"
    reason: str = ""
    elapsed_s: float = 0.0

    @property
    def label(self) -> str:
        return f"{self.path}/{self.precision}"

    def as_dict(self) -> dict[str, Any]:
        return {"path": self.path, "precision": self.precision, "status": self.status, "reason": self.reason,
                "elapsed_s": round(self.elapsed_s, 3)}


@dataclass
class SuiteResult:
    mode: str
    targets: list[Target]
    results: list[CaseResult]
    started: str = ""
    elapsed_s: float = 0.0
    probe: dict[str, Any] | None = None
    pattern: str | None = None
    verdicts: dict[str, list[str]] = field(default_factory=dict)  # written by --write-verdict
    interrupted: bool = False  # stopped early (Ctrl-C, SIGTERM): the results are partial

    @property
    def failures(self) -> list[CaseResult]:
        return [r for r in self.results if r.failed]

    @property
    def ok(self) -> bool:
        return not self.failures and not self.interrupted

    @property
    def fingerprint(self) -> dict[str, Any]:
        return (self.probe or {}).get("fingerprint", {})

    def target_results(self, target: Target) -> list[CaseResult]:
        return [r for r in self.results if r.path == target.path and r.precision == target.precision]

    def failed_kernels(self) -> dict[str, list[str]]:
        """Per path that ran: the kernels with at least one failing case (at any precision)."""
        out: dict[str, set[str]] = {t.path: set() for t in self.targets if t.status == "run"}
        for r in self.failures:
            if "model" in r.tags:  # a whole model names no kernel to disable; its node cases do
                continue
            out.setdefault(r.path, set()).update(r.kernels or [r.family])
        return {k: sorted(v) for k, v in out.items()}

    def summary(self) -> list[dict[str, Any]]:
        rows = []
        for t in self.targets:
            rs = self.target_results(t)
            measured = [r.metrics for r in rs if r.metrics is not None and r.status != "unsupported"]
            errored = any(r.status == "error" for r in rs)
            worst = float("inf") if errored else max((m.ratio for m in measured), default=0.0)
            worst_rel = float("inf") if errored else max((m.max_rel for m in measured), default=0.0)
            rows.append({"path": t.path, "precision": t.precision, "status": t.status, "reason": t.reason,
                         "cases": len(rs), "passed": sum(r.status == "passed" for r in rs),
                         "failed": sum(r.failed for r in rs), "unsupported": sum(r.status == "unsupported" for r in rs),
                         "worst_ratio": worst, "worst_rel": worst_rel, "elapsed_s": t.elapsed_s})
        return rows

    def to_dict(self) -> dict[str, Any]:
        def clean(v: Any) -> Any:
            return ("inf" if v > 0 else "-inf") if isinstance(v, float) and np.isinf(v) else v

        return {"suite": "gpubackend conformance", "mode": self.mode, "started": self.started,
                "elapsed_s": round(self.elapsed_s, 3), "pattern": self.pattern, "ok": self.ok,
                "interrupted": self.interrupted,
                "tolerances": {k: {"rtol": r, "atol": a} for k, (r, a) in TOLERANCES.items()},
                "fingerprint": self.fingerprint, "probe": self.probe,
                "targets": [t.as_dict() for t in self.targets],
                "summary": [{k: clean(v) for k, v in row.items()} for row in self.summary()],
                "failed_kernels": self.failed_kernels(), "verdicts_written": self.verdicts,
                "results": [r.as_dict() for r in self.results]}


# ---- progress ------------------------------------------------------------------------------

ProgressFn = Callable[[int, int, str, str, int], None]  # (done, total, target label, case, failures)


def _no_progress(done: int, total: int, target: str, case: str, failures: int) -> None:
    return None


# ---- fault-scope helper --------------------------------------------------------------------

@contextlib.contextmanager
def _kernel_scope(kernels: list[str]) -> Iterator[None]:
    """Tell the fault injector which kernels run (for ``KIND@PATH:KERNEL`` faults)."""
    try:
        from capability_probe import faults
    except ImportError:  # pragma: no cover
        yield
        return
    scope = getattr(faults, "kernel_scope", None)
    if scope is None:
        yield
        return
    with scope(kernels):
        yield


# ---- running one case ----------------------------------------------------------------------

def _short(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    return text if len(text) <= 600 else text[:600] + " ..."


def kernel_names(path: Path, graph: Graph, case: Case) -> list[str]:
    """The kernel names ``path`` runs the graph's nodes with (``Path.kernel_name_for``: the names its
    verdicts disable; the case's family when the path can't say)."""
    names: list[str] = []
    for node in graph.nodes:
        try:
            name = path.kernel_name_for(node, graph)
        except Exception:  # noqa: BLE001 - a naming bug must not hide the case
            name = None
        name = name or (case.kernel if case.kernel != "onnx" else node.op_type.lower())
        if name not in names:
            names.append(name)
    return names


def claims_nonfinite(path: Path) -> bool:
    """Does the path claim NaN/Inf propagation? (``Path.propagates_nonfinite``, default True)."""
    return bool(getattr(path, "propagates_nonfinite", True))


def run_case(case: Case, path: Path, precision: str) -> CaseResult:
    """Run one case on one created path; never raises for a case problem."""
    key = path.key
    res = CaseResult(case.name, key, precision, case.kernel, case.op, "passed", tags=sorted(case.tags))
    try:
        data = case.build(precision)
        proto = load_model(data.model)
    except Exception as exc:  # noqa: BLE001 - a harness problem is reported, not hidden
        res.status, res.reason = "error", f"harness: could not build the case: {_short(exc)}"
        return res
    if "model" in case.tags:
        return _run_model_case(data, key, precision, res)
    graphs: dict[tuple, Graph] = {}
    merged = Metrics()
    for feeds, expected in data.runs:
        shapes = {n: tuple(np.shape(v)) for n, v in feeds.items()}
        gkey = tuple(sorted(shapes.items()))
        if gkey not in graphs:
            try:
                graphs[gkey] = to_graph(proto, shapes)
            except Exception as exc:  # noqa: BLE001
                res.status, res.reason = "unsupported", f"the model does not load: {_short(exc)}"
                return res
        graph = graphs[gkey]
        if not graph.nodes:
            res.status, res.reason = "unsupported", "nothing left to run after constant folding"
            return res
        for node in graph.nodes:
            why = path.decline(node, graph)
            if why is not None:
                res.status, res.reason = "unsupported", f"{node.op_type}: {why}"
                return res
        if "nonfinite" in case.tags and not claims_nonfinite(path):
            res.status, res.reason = "unsupported", "the path does not claim NaN/Inf propagation"
            return res
        res.kernels = kernel_names(path, graph, case)
        (ins, outs), = segment_io(graph, [(key, graph.nodes)])
        seg = None
        try:
            with _kernel_scope(res.kernels):
                t0 = time.perf_counter()
                seg = path.compile(list(graph.nodes), graph, ins, outs)
                t1 = time.perf_counter()
                produced = seg.run({n: feeds[n] for n in ins}, RunStats())
                t2 = time.perf_counter()
        except (UnsupportedOperatorError, PathUnavailableError) as exc:
            res.status, res.reason = "unsupported", f"declined while compiling: {exc}"
            return res
        except Exception as exc:  # noqa: BLE001 - a driver fault or a path bug: a failure either way
            res.status, res.reason = "error", _short(exc)
            res.tags.append("driver-error" if _is_driver_error(exc) else "exception")
            if not _is_driver_error(exc):
                res.reason += "\n" + "".join(traceback.format_exception(exc)[-3:]).strip()[-800:]
            return res
        finally:
            if seg is not None:
                with contextlib.suppress(Exception):
                    seg.close()
        res.compile_ms += (t1 - t0) * 1e3
        res.run_ms += (t2 - t1) * 1e3
        got = [produced[o] if o in produced else graph.constants[o] for o in graph.outputs]
        merged = merged.merge(compare_all(got, expected, precision, data.tolerance, data.atol_mult))
    res.metrics = merged
    if not merged.passed:
        res.status = "failed"
        res.reason = merged.note or f"{merged.bad} of {merged.total} element(s) out of tolerance"
    return res


def _run_model_case(data: Any, key: str, precision: str, res: CaseResult) -> CaseResult:
    """A whole model: a Session on the path with fallback, so the nodes the path declines run on the
    CPU (the result names how many stayed on the path)."""
    from ..session import Session

    try:
        t0 = time.perf_counter()
        sess = Session(data.model, path=key, precision=precision, fallback=True)
        res.compile_ms = (time.perf_counter() - t0) * 1e3
    except PathUnavailableError as exc:
        res.status, res.reason = "unsupported", _short(exc)
        return res
    except Exception as exc:  # noqa: BLE001 - reported, as for a node case
        res.status, res.reason = "error", _short(exc)
        return res
    merged = Metrics()
    with sess:
        for feeds, expected in data.runs:
            try:
                t1 = time.perf_counter()
                got = sess.run(feeds)
                res.run_ms += (time.perf_counter() - t1) * 1e3
            except Exception as exc:  # noqa: BLE001
                res.status, res.reason = "error", _short(exc)
                return res
            merged = merged.merge(compare_all(got, expected, precision, data.tolerance, data.atol_mult))
        on_path = sum(1 for p in sess.placement.values() if p == key)
        res.kernels = [f"{on_path}/{len(sess.placement)} nodes on {key}"]
    res.metrics = merged
    if not merged.passed:
        res.status = "failed"
        res.reason = merged.note or f"{merged.bad} of {merged.total} element(s) out of tolerance"
    return res


def _is_driver_error(exc: BaseException) -> bool:
    try:
        from capability_probe.errors import DriverError
    except ImportError:  # pragma: no cover
        return False
    return isinstance(exc, (DriverError, GpuBackendError)) and not isinstance(exc, UnsupportedOperatorError)


# ---- targets -------------------------------------------------------------------------------

def _probe_report() -> Any:
    try:
        from capability_probe import probe

        return probe()
    except Exception:  # noqa: BLE001 - the suite still runs what it can create
        return None


def resolve_targets(paths: list[str], precisions: list[str], report: Any) -> list[Target]:
    """Which (path, precision) pairs can run here, and why the others cannot."""
    targets = []
    for key in paths:
        if key not in PATH_KEYS:
            raise ValueError(f"unknown path {key!r}; choose from {', '.join(PATH_KEYS)}")
        status, reason = "run", ""
        try:
            mod = path_module(key)
        except PathUnavailableError as exc:
            mod, status, reason = None, "not built", str(exc)
        if status == "run" and key != "cpu" and report is not None:
            v = report.paths.get(key)
            if v is not None and not v.available:
                status, reason = "unavailable", f"probe: {v.reason}"
            elif v is not None and not v.verified:
                reason = f"probe left it unverified ({v.reason}); its kernels are run anyway"
        offered = getattr(mod, "PRECISIONS", None) if mod is not None else None
        for prec in precisions:
            if status == "run" and offered is not None and prec not in offered:
                targets.append(Target(key, prec, "precision not offered", f"{key} offers {', '.join(offered)}"))
            else:
                targets.append(Target(key, prec, status, reason))
    return targets


def default_paths() -> list[str]:
    """Every GPU path (the cpu path is the reference; ask for it explicitly as a self-check)."""
    return list(GPU_PATH_KEYS)


def run_target(target: Target, cases: list[Case], on_result: Callable[[CaseResult], None],
               on_start: Callable[[Case], None] | None = None) -> None:
    """Run ``cases`` on one target, reporting each result through ``on_result`` (and each case
    about to run through ``on_start``)."""
    t0 = time.perf_counter()
    path: Path | None = None
    down = f"{target.status}: {target.reason}"  # why cases cannot run, while path is None
    started = 0  # cases run so far

    def fresh() -> Path | None:
        nonlocal down
        try:
            return create_path(target.path, target.precision)
        except Exception as exc:  # noqa: BLE001 - reported per case and on the target
            offered = isinstance(exc, ValueError) and "precision" in str(exc).lower()
            down = f"{'precision not offered' if offered else 'unavailable'}: {_short(exc)}"
            if started == 0:  # the path never came up: the target did not run
                target.status, target.reason = down.split(": ", 1)
            return None

    try:
        if target.status == "run":
            path = fresh()
        for case in cases:
            if path is None:
                on_result(CaseResult(case.name, target.path, target.precision, case.kernel, case.op, "unsupported",
                                     reason=down, tags=sorted(case.tags)))
                continue
            if on_start is not None:
                on_start(case)
            res = run_case(case, path, target.precision)
            started += 1
            on_result(res)
            if "driver-error" in res.tags:  # the context may be gone: start the next case afresh
                with contextlib.suppress(Exception):
                    path.close()
                path = fresh()
    finally:
        if path is not None:
            with contextlib.suppress(Exception):
                path.close()
        target.elapsed_s = time.perf_counter() - t0


def run_suite(paths: list[str] | None = None, precisions: list[str] | None = None, full: bool = False,
              pattern: str | None = None, node_tests: bool = True, progress: ProgressFn | None = None,
              cases: list[Case] | None = None, isolate: bool = False, case_timeout: float = 300.0) -> SuiteResult:
    """Run the suite; ``full=False`` is ``--quick``. ``cases`` overrides the generated matrix.
    ``isolate``: run each target in a worker process, so a driver that crashes or hangs costs the
    case it was running (reported as an error) instead of the whole run; a case that gives no answer
    within ``case_timeout`` seconds is a hang."""
    t0 = time.perf_counter()
    started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    report = _probe_report()
    paths = list(paths or default_paths())
    precisions = list(precisions or PRECISIONS)
    targets = resolve_targets(paths, precisions, report)
    progress = progress or _no_progress
    results: list[CaseResult] = []
    failures = 0
    total = 0

    def on_result(r: CaseResult) -> None:
        nonlocal failures
        results.append(r)
        failures += r.failed
        progress(len(results), total, f"{r.path}/{r.precision}", r.case, failures)

    interrupted = False
    try:
        if cases is None:
            runnable = any(t.status == "run" for t in targets)
            cases = all_cases(full, report.limits if report is not None else {}, node_tests=node_tests and runnable)
        cases = select(cases, pattern)
        total = len(cases) * len(targets)
        for target in targets:
            if isolate and target.status == "run":
                from .isolate import run_target_isolated

                run_target_isolated(target, cases, on_result, full=full, node_tests=node_tests,
                                    limits=report.limits if report is not None else {}, case_timeout=case_timeout)
            else:
                run_target(target, cases, on_result)
    except KeyboardInterrupt:  # report what ran
        interrupted = True
    return SuiteResult("full" if full else "quick", targets, results, started, time.perf_counter() - t0,
                       report.to_dict() if report is not None else None, pattern, interrupted=interrupted)


def write_verdicts(result: SuiteResult) -> dict[str, list[str]]:
    """Record, per GPU path that ran, the kernels that failed in the probe's verdict cache, keyed by
    this driver's fingerprint; later probe reports list them in ``disabled_kernels``, so sessions
    decline exactly those kernels on this driver.

    A ``--full`` run without ``-k`` replaces a path's record (a kernel that now passes everything is
    enabled again); a ``--quick`` or filtered run only adds to it, since it did not test all."""
    from capability_probe import runner as probe_runner
    from capability_probe.verdicts import failed_kernels as recorded
    from capability_probe.verdicts import write_kernel_verdicts

    written: dict[str, list[str]] = {}
    if result.probe is None:
        return written
    replace = result.mode == "full" and not result.pattern and not result.interrupted
    for key, kernels in result.failed_kernels().items():
        if key not in GPU_PATH_KEYS or not any(r.path == key and r.status != "unsupported" for r in result.results):
            continue  # a path that ran no case has nothing to say about its kernels
        if not replace:
            kernels = sorted(set(kernels) | set(recorded(key, result.fingerprint)))
        try:
            write_kernel_verdicts(key, kernels, result.probe)
        except ValueError:
            continue  # no fingerprint for this API: nothing to key a verdict on
        written[key] = kernels
    probe_runner.clear_memo()  # in-process probe reports must pick the new verdicts up
    result.verdicts = written
    return written


__all__ = ["result_from_dict", "CaseResult", "SuiteResult", "Target", "claims_nonfinite", "default_paths",
           "kernel_names", "resolve_targets", "run_case", "run_suite", "run_target", "write_verdicts", "PRECISIONS"]
