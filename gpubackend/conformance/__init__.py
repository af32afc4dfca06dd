"""Driver-conformance suite: every kernel of every path over a seeded matrix of shapes and values
chosen to break drivers, compared with the ``fallback`` reference at every precision the path
offers, plus ONNX's backend node tests. See ``docs/conformance.md``.

Command line: ``gpubackend conformance --quick`` (or ``--full``); from Python::

    from gpubackend.conformance import run_suite, summary_table
    result = run_suite(paths=["gles3"], precisions=["fp32"], full=False)
    print(summary_table(result)); result.ok

From pytest: ``pytest --pyargs gpubackend.conformance`` (the quick matrix, one test per case and
path/precision; ``GPUBACKEND_CONFORMANCE_PATHS`` / ``_PRECISIONS`` / ``_FULL`` select).
"""

from __future__ import annotations

from .cases import Case, CaseData, all_cases, matrix, node_test_cases, select
from .compare import TOLERANCES, Metrics, compare, compare_all
from .report import blocklist_entries, html_report, junit_xml, summary_table
from .runner import CaseResult, SuiteResult, Target, resolve_targets, run_case, run_suite, write_verdicts

__all__ = ["Case", "CaseData", "CaseResult", "Metrics", "SuiteResult", "Target", "TOLERANCES", "all_cases",
           "blocklist_entries", "compare", "compare_all", "html_report", "junit_xml", "matrix", "node_test_cases",
           "resolve_targets", "run_case", "run_suite", "select", "summary_table", "write_verdicts"]
