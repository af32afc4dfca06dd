"""Running one target in a worker process (``--isolate``): a driver that crashes (SIGSEGV) or hangs
costs the case it was running, reported as an error, and the run goes on with a fresh worker.

Protocol: the parent writes a JSON config on the worker's stdin; the worker prints ``@@START
<case name>`` before each case and ``@@RESULT <json>`` after it, on stdout. A worker that exits
before its last result crashed on the case it started last; one that prints nothing for
``case_timeout`` seconds hangs on it and is killed.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from .cases import Case, all_cases
from .runner import CaseResult, Target, result_from_dict, run_target

START, RESULT = "@@START ", "@@RESULT "
GIVE_UP = 3  # after this many workers in a row die on their first case, the target's other cases are not run


def run_target_isolated(target: Target, cases: list[Case], on_result: Callable[[CaseResult], None], *,
                        full: bool, node_tests: bool, limits: dict[str, Any], case_timeout: float = 300.0) -> None:
    """Run ``cases`` on ``target`` in worker processes; see the module docstring."""
    t0 = time.perf_counter()
    by_name = {c.name: c for c in cases}
    todo = [c.name for c in cases]
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    streak = 0  # workers in a row that died on their first case
    while todo:
        config = {"path": target.path, "precision": target.precision, "full": full, "node_tests": node_tests,
                  "limits": limits, "cases": todo}
        proc = subprocess.Popen([sys.executable, "-m", "gpubackend.conformance.isolate"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps(config))
        proc.stdin.close()
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        current: str | None = None
        done: set[str] = set()
        hung = False
        try:
            while True:
                if not sel.select(timeout=case_timeout):
                    hung = True
                    break
                line = proc.stdout.readline()
                if not line:
                    break
                if line.startswith(START):
                    current = line[len(START):].strip()
                elif line.startswith(RESULT):
                    res = result_from_dict(json.loads(line[len(RESULT):]))
                    done.add(res.case)
                    current = None
                    on_result(res)
        finally:  # a hang, or the parent interrupted: the worker must not outlive it
            if proc.poll() is None and (hung or current is not None or todo):
                proc.kill()
            proc.wait()
            sel.close()
        todo = [n for n in todo if n not in done]
        if not todo:
            break
        victim = current if current in todo else todo[0]
        if hung:
            why = f"hang: no answer within {case_timeout:.0f} s (worker killed)"
        else:
            rc = proc.returncode
            sig = f"signal {signal.Signals(-rc).name}" if rc is not None and rc < 0 else f"exit status {rc}"
            why = f"crash: the worker running this case died ({sig})"
        first_case_died = not done
        streak = streak + 1 if first_case_died else 0
        victims = [victim] if streak < GIVE_UP else list(todo)
        for name in victims:
            case = by_name[name]
            reason = why if name == victim else f"not run: {GIVE_UP} workers in a row died on their first case ({why})"
            on_result(CaseResult(case.name, target.path, target.precision, case.kernel, case.op, "error", [], reason,
                                 tags=sorted(case.tags) + ["driver-error", "crash" if not hung else "hang"]))
            todo.remove(name)
    target.elapsed_s = time.perf_counter() - t0


def _worker() -> int:
    config = json.loads(sys.stdin.read())
    wanted = set(config["cases"])
    node_tests = config["node_tests"] and any(n.startswith("onnx/") for n in wanted)
    cases = [c for c in all_cases(config["full"], config["limits"], node_tests=node_tests) if c.name in wanted]
    order = {n: i for i, n in enumerate(config["cases"])}
    cases.sort(key=lambda c: order[c.name])
    out = sys.stdout

    def start(case: Case) -> None:
        out.write(START + case.name + "\n")
        out.flush()

    def result(res: CaseResult) -> None:
        out.write(RESULT + json.dumps(res.as_dict(), default=str) + "\n")
        out.flush()

    target = Target(config["path"], config["precision"])
    for name in sorted(wanted - {c.name for c in cases}):  # given by a caller, not generated: cannot rebuild
        result(CaseResult(name, target.path, target.precision, "?", "?", "error", [],
                          "harness: --isolate runs generated cases only"))
    run_target(target, cases, result, on_start=start)
    return 0


if __name__ == "__main__":
    sys.exit(_worker())
