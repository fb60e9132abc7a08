"""``ftmatrix check``: its arguments, its inputs read, its verdicts printed.

The I/O of check lives here (reading the stack and the results, printing);
:mod:`ftmatrix.check.verdict` decides. The text and JSON forms are pure functions of
a :class:`~ftmatrix.check.verdict.CheckReport`.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Sequence
from typing import Any

from ftmatrix.check.results import read_results
from ftmatrix.check.stack import Stack, ask_interpreter, parse_freeze, parse_trl_env
from ftmatrix.check.verdict import (
    OUTPUT_SCHEMA,
    PYTHON,
    SHOWN,
    CheckReport,
    NothingTestedInstalled,
    StackVerdict,
    check_stack,
    constraint_line,
    describe_match,
    problem_lines,
)
from ftmatrix.download import download_timeout
from ftmatrix.errors import UsageError, one_line, printable
from ftmatrix.user_files import MB, read_stdin_text, read_user_text

VERDICT_ORDER = ("broken", "flaky", "mixed", "pass", "n/a", "untested")
# The most of a --freeze or --trl-env read: a freeze of thousands of packages is a few
# hundred kB; past this it is no stack (/dev/zero behind a pipe, a wrong file).
STACK_LIMIT = 10 * MB


def add_check_parser(sub: Any) -> None:
    """The ``check`` subcommand, on ``python -m ftmatrix``'s subparsers."""
    check = sub.add_parser(
        "check",
        help="does my stack work? look it up in a published report's results.json",
        description="Compare a stack (this environment, another interpreter, `pip freeze` or "
        "`trl env` output) with the cells of a report's results.json: per operation and "
        "hardware class, the verdict of the cells with your versions (or the nearest ones, "
        "and how far), the known issues and derived constraints that apply, and the nearest "
        "passing set. Exit 0: nothing known broken; 1: your versions are known to break a "
        "requested operation; 2: bad input.",
    )
    stack = check.add_mutually_exclusive_group()
    stack.add_argument(
        "--python",
        metavar="PATH",
        help="the interpreter whose installed packages are the stack "
        "(default: the Python running ftmatrix)",
    )
    stack.add_argument(
        "--freeze",
        metavar="FILE",
        help="`pip freeze` or `uv pip freeze` output; - for stdin, or <(pip freeze) "
        "(at most 10 MB; a named pipe or a device is refused)",
    )
    stack.add_argument(
        "--trl-env", metavar="FILE", help="`trl env` output; - for stdin (as --freeze)"
    )
    check.add_argument(
        "--results",
        required=True,
        metavar="PATH_OR_URL",
        help="a report's results.json: a file (or <(command)), or an https:// (or http://) "
        "URL; at most 200 MB",
    )
    check.add_argument(
        "--operation",
        action="append",
        default=[],
        metavar="OP",
        help="only these operations (repeatable, or comma-separated)",
    )
    check.add_argument(
        "--hardware",
        action="append",
        default=[],
        metavar="CLASS",
        help="only these hardware classes (repeatable, or comma-separated)",
    )
    check.add_argument("--json", action="store_true", help="machine-readable output")
    check.add_argument(
        "--timeout", default="30", metavar="S", help="seconds to wait for a URL (default: 30)"
    )


def run_check(args: argparse.Namespace, extra: Sequence[str]) -> int:
    """Read the inputs, decide, print; the exit code of the verdicts (0 or 1)."""
    if extra:
        raise UsageError(f"check: unrecognized arguments: {' '.join(extra)}")
    timeout = download_timeout(args.timeout)
    stack = read_stack(args)
    results = read_results(args.results, timeout=timeout)
    try:
        report = check_stack(
            stack,
            results,
            operations=_names(args.operation),
            hardware=_names(args.hardware),
        )
    except NothingTestedInstalled as exc:
        raise UsageError(f"{exc} {what_to_check_instead(stack)}") from None
    if args.json:
        print(json.dumps(report_json(report), indent=1))
    else:
        # Text a published results.json carries (workarounds, blame, case ids) reaches
        # the terminal: its control characters are escaped.
        print(printable(report_text(report)))
    return report.exit_code


def what_to_check_instead(stack: Stack) -> str:
    """For a stack with none of the tested frameworks: the commands that check the one
    meant. The obvious first try is the environment ftmatrix itself is installed in."""
    # ftmatrix, or nox beside it (pip freeze leaves out an editable ftmatrix).
    tool = any(stack.version(n) or n in stack.unversioned for n in ("ftmatrix", "nox"))
    own = "It looks like the environment ftmatrix runs in, not a training stack. " if tool else ""
    return (
        f"{own}Check the environment you train in by its interpreter "
        "(--python VENV/bin/python; a cell's: --python .nox/CELL/bin/python), or pipe its "
        "freeze (uv pip freeze --python VENV/bin/python | ftmatrix check --freeze - ...)."
    )


def read_stack(args: argparse.Namespace) -> Stack:
    """The stack the arguments name: a freeze, a ``trl env``, or an interpreter."""
    if args.freeze:
        text = _read(args.freeze, "--freeze", "`pip freeze` output")
        return parse_freeze(text, source=_source(args.freeze))
    if args.trl_env:
        text = _read(args.trl_env, "--trl-env", "`trl env` output")
        return parse_trl_env(text, source=_source(args.trl_env))
    return ask_interpreter(args.python or sys.executable)


def report_text(report: CheckReport) -> str:
    """What a person reads: the stack, the results, one paragraph per verdict, a summary."""
    lines = [f"stack: {_stack_text(report)}"]
    lines += [f"  note: {note}" for note in report.stack.notes]  # what the input left out
    lines.append(f"results: {_results_text(report)}")
    compared = ", ".join(report.axes)
    lines.append(
        f"compared on: {compared}"
        + (
            f"; not named by your input: {', '.join(report.unknown_axes)}"
            if report.unknown_axes
            else ""
        )
    )
    for verdict in report.verdicts:
        lines += ["", *_verdict_text(verdict, report)]
    tally = Counter(v.verdict for v in report.verdicts)
    summary = ", ".join(f"{tally[k]} {k}" for k in VERDICT_ORDER if tally[k])
    broken = [f"{v.operation} on {v.hardware}" for v in report.verdicts if v.broken]
    lines += [
        "",
        f"summary: {summary or 'no verdict'} (exit {int(report.exit_code)}"
        + (f": broken {', '.join(broken)})" if broken else ")"),
    ]
    return "\n".join(lines)


def report_json(report: CheckReport) -> dict[str, Any]:
    """The machine form (its shape is documented in docs/guides/check.md)."""
    results = report.results
    return {
        "schema": OUTPUT_SCHEMA,
        "exit_code": int(report.exit_code),
        "stack": report.stack.to_dict(),
        "results": {
            "source": results.source,
            "runs": list(results.runs),
            "records": len(results.records),
            "cells": len({r.cell_id for r in results.records}),
        },
        "axes": list(report.axes),
        "unknown_axes": list(report.unknown_axes),
        "verdicts": [
            {
                "operation": v.operation,
                "hardware": v.hardware,
                "verdict": v.verdict,
                "why": v.why,
                "exact": v.exact,
                "cells": [m.to_dict(results) for m in v.cells],
                "nearest_passing": [m.to_dict(results) for m in v.nearest_passing],
                "known_issues": [
                    {**issue.to_dict(), "cells": list(labels)} for issue, labels in v.known_issues
                ],
                "constraints": [
                    {
                        "requirement": c.requirement,
                        "when": dict(c.when),
                        "file": f"constraints/{v.operation}-{v.hardware}.txt",
                    }
                    for c in v.constraints
                ],
            }
            for v in report.verdicts
        ],
    }


def _verdict_text(verdict: StackVerdict, report: CheckReport) -> list[str]:
    lines = [f"{verdict.operation} on {verdict.hardware}: {verdict.verdict}: {verdict.why}"]
    first = verdict.cells[0]
    if not verdict.exact or len(verdict.cells) > 1:
        for match in verdict.cells[:SHOWN]:
            lines.append(
                f"  nearest: {describe_match(match)}"
                if not verdict.exact
                else f"  {describe_match(match)}"
            )
        if len(verdict.cells) > SHOWN:
            lines.append(f"  ... and {len(verdict.cells) - SHOWN} more as near")
    lines += problem_lines(first, report.results)
    for issue, labels in verdict.known_issues:
        where = "" if verdict.exact else f" (in {', '.join(labels[:SHOWN])})"
        lines.append(f"  known issue {issue.id}: {issue.title} {issue.upstream}{where}")
        if issue.claim:
            lines.append(f"    {issue.claim}")
        if issue.workaround:
            lines.append(f"    workaround: {issue.workaround}")
    lines += [
        constraint_line(constraint, verdict.operation, verdict.hardware)
        for constraint in verdict.constraints
    ]
    for match in verdict.nearest_passing[:SHOWN]:
        lines.append(f"  nearest passing: {match.label}, {match.distance_text()}")
    if not verdict.nearest_passing and verdict.verdict not in ("pass", "n/a"):
        lines.append("  nearest passing: none (no cell of the results passes it)")
    return lines


def _stack_text(report: CheckReport) -> str:
    stack = report.stack
    kind = {"freeze": "pip freeze", "trl-env": "trl env", "interpreter": "interpreter"}
    parts = []
    for axis in report.axes:
        if axis == PYTHON:
            continue
        version = stack.version(axis)
        parts.append(f"{axis} {version}" if version is not None else f"{axis} not installed")
    python = f"Python {stack.python}" if stack.python else "Python not named"
    unversioned = [f"{name} (no version: {why})" for name, why in stack.unversioned.items()]
    return f"{stack.source} ({kind.get(stack.kind, stack.kind)}): {', '.join(parts)}; {python}" + (
        f"; {', '.join(unversioned)}" if unversioned else ""
    )


def _results_text(report: CheckReport) -> str:
    results = report.results
    cells = len({r.cell_id for r in results.records})
    runs = ", ".join(results.runs) or "no run"
    said = one_line(results.source)
    return f"{said}: {len(results.records)} records of {cells} cells (run {runs})"


def _names(values: Sequence[str]) -> list[str]:
    return [name.strip() for value in values for name in value.split(",") if name.strip()]


def _source(where: str) -> str:
    return "<stdin>" if where == "-" else one_line(where)  # said in messages: one line


def _read(where: str, option: str, kind: str) -> str:
    what = f"{option} {one_line(where)}"
    if where == "-":
        return read_stdin_text(what, limit=STACK_LIMIT, kind=kind)
    try:
        return read_user_text(where, what, limit=STACK_LIMIT, kind=kind)
    except OSError as exc:
        raise UsageError(f"{what}: cannot be read: {exc.strerror or exc}") from None
