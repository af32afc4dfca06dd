"""``gpubackend conformance``: does this device's driver compute the kernels correctly?"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path

from ..paths import PATH_KEYS

EPILOG = """examples:
  gpubackend conformance --quick                      every available GPU path, fp32 and fp16
  gpubackend conformance --full --paths gles3 --precision fp16 -k depthwise
  gpubackend conformance --quick --json r.json --junit r.xml --html r.html --write-verdict
  gpubackend conformance --from-report r.json --blocklist-entry entry.json
exit status: 0 when no case failed (unsupported cases are not failures), 1 otherwise, 130 when
interrupted (Ctrl-C or SIGTERM: the summary and the reports hold the cases run so far)."""


def _csv(choices: tuple[str, ...]):
    def parse(text: str) -> list[str]:
        items = [t.strip().lower() for t in text.split(",") if t.strip()]
        if items == ["all"]:
            return list(choices)
        bad = [t for t in items if t not in choices]
        if bad or not items:
            raise argparse.ArgumentTypeError(f"expected a comma list of {', '.join(choices)} (got {text!r})")
        return items

    return parse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("conformance", help="run the driver-conformance suite",
                       description="Run every kernel of every GPU path over a seeded matrix of shapes and values "
                                   "(and ONNX's node tests) and compare with the CPU reference.",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--quick", dest="full", action="store_false", help="the CI subset (default)")
    mode.add_argument("--full", dest="full", action="store_true",
                      help="every combination, large sizes near the driver's limits, all included node tests")
    p.add_argument("--paths", type=_csv(PATH_KEYS), default=None, metavar="LIST",
                   help="comma list of paths (default: every GPU path; 'cpu' runs the harness self-check)")
    p.add_argument("--precision", type=_csv(("fp32", "fp16")), default=None, metavar="LIST",
                   help="comma list of precisions (default: fp32,fp16)")
    p.add_argument("-k", dest="pattern", metavar="PATTERN",
                   help="only cases whose name contains PATTERN (a glob with * ? [; commas separate alternatives)")
    p.add_argument("--no-node-tests", dest="node_tests", action="store_false", help="leave out ONNX's node tests")
    p.add_argument("--list", action="store_true", help="list the selected cases and exit")
    p.add_argument("--json", metavar="FILE", help="write the machine-readable report (with the driver fingerprint "
                                                  "and probe report) to FILE ('-' for stdout)")
    p.add_argument("--junit", metavar="FILE", help="write JUnit XML to FILE")
    p.add_argument("--html", metavar="FILE", help="write a self-contained HTML report to FILE")
    p.add_argument("--write-verdict", action="store_true",
                   help="record the failing kernels per path for this driver, so sessions stop using them")
    p.add_argument("--blocklist-entry", metavar="FILE",
                   help="write a blocklist entry disabling the failing kernels on this driver to FILE")
    p.add_argument("--from-report", metavar="JSON", help="do not run: read a saved --json report and write the "
                                                         "requested outputs (--html, --junit, --blocklist-entry)")
    p.add_argument("--isolate", action="store_true",
                   help="run each path in a worker process: a driver crash or hang costs one case, not the run")
    p.add_argument("--case-timeout", type=float, default=300.0, metavar="S",
                   help="with --isolate: a case that gives no answer in S seconds is a hang (default 300)")
    p.add_argument("--no-progress", dest="progress", action="store_false", help="no progress output on stderr")
    p.set_defaults(func=run, full=False)


def _write_outputs(data: dict, args: argparse.Namespace) -> None:
    from ..conformance import report

    if args.json and not args.from_report:
        if args.json == "-":
            print(json.dumps(data, indent=1, default=str))
        else:
            report.write_json(data, args.json)
    if args.junit:
        Path(args.junit).write_text(report.junit_xml(data), encoding="utf-8")
    if args.html:
        Path(args.html).write_text(report.html_report(data), encoding="utf-8")
    if args.blocklist_entry:
        entries = report.blocklist_entries(data)
        Path(args.blocklist_entry).write_text(json.dumps(entries, indent=2) + "\n", encoding="utf-8")
        if not entries["entries"]:
            print("no failing kernels: the blocklist entry file holds no entries", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    from ..conformance import all_cases, run_suite, select, summary_table, write_verdicts
    from ..conformance.progress import ProgressBar

    out = sys.stderr if args.json == "-" else sys.stdout
    if args.from_report:
        data = json.loads(Path(args.from_report).read_text(encoding="utf-8"))
        _write_outputs(data, args)
        return 0 if data.get("ok") else 1
    if args.list:
        from capability_probe import probe

        cases = select(all_cases(args.full, probe().limits, node_tests=args.node_tests), args.pattern)
        for c in cases:
            tags = sorted(c.tags - {"quick", c.kernel})
            print(f"{c.name}  [{c.kernel}{'; ' + ', '.join(tags) if tags else ''}]")
        print(f"{len(cases)} case(s)", file=sys.stderr)
        return 0
    bar = ProgressBar(sys.stderr, enabled=args.progress)

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, stop)  # a CI timeout still gets the partial reports
    try:
        result = run_suite(args.paths, args.precision, full=args.full, pattern=args.pattern,
                           node_tests=args.node_tests, progress=bar, isolate=args.isolate,
                           case_timeout=args.case_timeout)
    finally:
        signal.signal(signal.SIGTERM, previous)
        bar.close()
    if args.write_verdict:
        write_verdicts(result)
    print(summary_table(result), file=out)
    _write_outputs(result.to_dict(), args)
    if not any(t.status == "run" for t in result.targets):
        print("note: no selected path could run here (see the status column)", file=sys.stderr)
    if result.interrupted:
        print("interrupted: the reports hold the cases run so far", file=sys.stderr)
        return 130
    return 0 if result.ok else 1
