"""The conformance suite as pytest tests, for a vendor's or a CI system's own harness::

    pytest --pyargs gpubackend.conformance                  # the quick matrix, every GPU path
    GPUBACKEND_CONFORMANCE_PATHS=gles3,vulkan GPUBACKEND_CONFORMANCE_PRECISIONS=fp32 \\
        pytest --pyargs gpubackend.conformance -k depthwise
    GPUBACKEND_CONFORMANCE_FULL=1 pytest --pyargs gpubackend.conformance
    GPUBACKEND_CONFORMANCE_NODE_TESTS=0 ...                 # leave out ONNX's node tests

One test per (path, precision, case): a case the path declines, or a path that is not built or
not available here, is skipped with the reason; a case out of tolerance fails with its measures.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

import pytest

from gpubackend.conformance.cases import Case, all_cases
from gpubackend.conformance.runner import PRECISIONS, Target, default_paths, resolve_targets, run_case


def _env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name, "")
    return [s.strip() for s in raw.split(",") if s.strip()] or default


def _probe() -> Any:
    try:
        from capability_probe import probe

        return probe()
    except Exception:  # noqa: BLE001
        return None


_REPORT = _probe()
_FULL = os.environ.get("GPUBACKEND_CONFORMANCE_FULL", "") not in ("", "0")
_TARGETS = resolve_targets(_env_list("GPUBACKEND_CONFORMANCE_PATHS", default_paths()),
                           _env_list("GPUBACKEND_CONFORMANCE_PRECISIONS", list(PRECISIONS)), _REPORT)
_NODE_TESTS = os.environ.get("GPUBACKEND_CONFORMANCE_NODE_TESTS", "1") not in ("", "0")
_CASES = all_cases(_FULL, _REPORT.limits if _REPORT is not None else {},
                   node_tests=_NODE_TESTS and any(t.status == "run" for t in _TARGETS))
_PARAMS = [pytest.param(t, c, id=f"{t.label}:{c.name}") for t in _TARGETS for c in _CASES]


@pytest.fixture(scope="module")
def created_paths() -> Iterator[dict[str, Any]]:
    held: dict[str, Any] = {}
    yield held
    for p in held.values():
        if p is not None and not isinstance(p, str):
            with contextlib.suppress(Exception):
                p.close()


@pytest.mark.parametrize(("target", "case"), _PARAMS)
def test_conformance(target: Target, case: Case, created_paths: dict[str, Any]) -> None:
    if target.status != "run":
        pytest.skip(f"{target.label}: {target.status}: {target.reason}")
    path = created_paths.get(target.label)
    if path is None:
        from gpubackend.paths import create_path

        try:
            path = create_path(target.path, target.precision)
        except Exception as exc:  # noqa: BLE001
            path = f"cannot create the path: {type(exc).__name__}: {exc}"
        created_paths[target.label] = path
    if isinstance(path, str):  # the probe found the path available: failing to create it is a failure
        pytest.fail(f"{target.label}: {path}")
    res = run_case(case, path, target.precision)
    if res.status == "unsupported":
        pytest.skip(res.reason)
    if "driver-error" in res.tags:  # start afresh after a driver error
        with contextlib.suppress(Exception):
            path.close()
        created_paths.pop(target.label, None)
    m = res.metrics
    detail = (f"{m.bad}/{m.total} elements out of tolerance; max abs {m.max_abs:.3g}, max rel {m.max_rel:.3g}, "
              f"tolerance ratio {m.ratio:.3g}" if m is not None else "")
    assert not res.failed, f"{target.label} {case.name} [{', '.join(res.kernels)}]: {res.status}: {res.reason} {detail}"
