"""Stack + results -> a verdict per operation and hardware class (pure).

The distance from a stack to a cell is taken over the matrix's axes (the packages its
cells pin, and the Python series where the input names one): how many axes differ,
and how many releases apart each is among the versions the results hold (yours
included). An axis the input does not name (``trl env`` knows nothing of unsloth) is
not compared, and the verdict says so.

Verdicts, and what check concludes from them:

- ``pass``: a cell with your versions ran the operation and no case of it broke.
- ``broken``: a cell with your versions broke it (``fail``, ``crash``, ``timeout``,
  ``oom``), or a constraint the report derives from its records excludes your versions.
- ``flaky``: it broke only in cases whose two tries disagreed.
- ``n/a``: a cell with your versions ran it; your versions do not have the feature.
- ``mixed``: several cells match what your input names (it does not name every axis)
  and they disagree.
- ``untested``: no cell has your versions, or the one that has them did not run the
  operation (``skip``: its hardware was not there; ``uninstallable``; ``install-error``;
  ``error``, a bug of the case). The nearest cells and the nearest passing one are shown;
  a cell a few versions away is evidence about that cell, never a verdict on yours.

Only ``broken`` makes check exit 1.

The report's page answers the same question for a pasted ``pip freeze``: it embeds
:func:`lookup_table`, everything check knows of the results before it sees a stack
(the axes, the versions tested, the cells, each cell's verdict and lines on each
operation, the constraints), and its script (``report/assets/stack.js``) takes the
steps that need the stack as :func:`check_stack` and
:func:`ftmatrix.check.command.report_text` take them: the same text, less the
``results:`` line. tests/test_stack_js.py gives both the same inputs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from packaging.utils import canonicalize_name

from ftmatrix.cell.record import WHOLE_CELL, Record
from ftmatrix.cell.status import PROBLEM_STATUSES, Status
from ftmatrix.check.compare import (
    VersionChange,
    constraint_applies,
    is_older,
    releases_apart,
    same_version,
)
from ftmatrix.check.results import KnownIssueLink, Results
from ftmatrix.check.stack import Stack
from ftmatrix.constraints import Constraint
from ftmatrix.errors import ExitCode, UsageError, one_line
from ftmatrix.messages import headline, root_message

PYTHON = "python"  # the axis name of the Python series
# Whole-cell records (the cell never ran its cases) carry these operations.
WHOLE_CELL_OPERATIONS = frozenset({"cell", "install"})
OUTPUT_SCHEMA = 1  # the shape of --json (docs/guides/check.md)
SHOWN = 3  # nearest cells named per verdict in the text; --json has them all


class NothingTestedInstalled(UsageError):
    """The stack has none of the packages the results test: not the stack meant."""


@dataclass(frozen=True, kw_only=True)
class Match:
    """One cell, how far it is from the stack, and what it did for one operation."""

    label: str
    cell_id: str
    python: str
    pins: Mapping[str, str | None]
    changes: tuple[VersionChange, ...]
    verdict: str
    records: tuple[Record, ...]

    @property
    def steps(self) -> int:
        return sum(c.steps for c in self.changes)

    @property
    def rank(self) -> tuple[int, int, int, str]:
        # Fewest axes, then fewest releases apart; among equals an upgrade before a
        # downgrade (what a user would rather do), then the label, for a stable order.
        downgrades = sum(1 for c in self.changes if is_older(c.cell, c.yours))
        return (len(self.changes), self.steps, downgrades, self.label)

    def distance_text(self) -> str:
        """How far, in words: "1 version away: peft 0.17.1 -> 0.18.1"."""
        if not self.changes:
            return "your versions"
        steps, axes = self.steps, len(self.changes)
        on = f" on {axes} axes" if axes > 1 else ""
        changes = ", ".join(c.text() for c in self.changes)
        return f"{steps} version{'s' if steps != 1 else ''} away{on}: {changes}"

    def counts(self) -> dict[str, int]:
        tally = Counter(r.status for r in self.records)
        return {s.value: tally[s] for s in sorted(tally, key=lambda s: -s.severity)}

    def counts_text(self) -> str:
        return ", ".join(f"{n} {s}" for s, n in self.counts().items())

    def to_dict(self, results: Results) -> dict[str, Any]:
        return {
            "cell": self.label,
            "cell_id": self.cell_id,
            "python": self.python,
            "pins": dict(self.pins),
            "distance": {"axes": len(self.changes), "versions": self.steps},
            "changes": [c.to_dict() for c in self.changes],
            "verdict": self.verdict,
            "counts": self.counts(),
            "cases": [_case_dict(r, results) for r in self.records],
        }


@dataclass(frozen=True, kw_only=True)
class StackVerdict:
    """What the results say of the stack for one operation on one hardware class."""

    operation: str
    hardware: str
    verdict: str
    why: str
    exact: bool
    cells: tuple[Match, ...]  # the exact cells, or the nearest ones
    nearest_passing: tuple[Match, ...]
    known_issues: tuple[tuple[KnownIssueLink, tuple[str, ...]], ...]  # issue, cell labels
    constraints: tuple[Constraint, ...]

    @property
    def broken(self) -> bool:
        return self.verdict == "broken"


@dataclass(frozen=True, kw_only=True)
class CheckReport:
    """Every verdict for one stack against one results.json."""

    stack: Stack
    results: Results
    axes: tuple[str, ...]  # compared
    unknown_axes: tuple[str, ...]  # the input does not name them: not compared
    verdicts: tuple[StackVerdict, ...]

    @property
    def exit_code(self) -> ExitCode:
        """1 where a verdict is ``broken``, else 0."""
        return ExitCode.FAILED if any(v.broken for v in self.verdicts) else ExitCode.OK


def check_stack(
    stack: Stack,
    results: Results,
    *,
    operations: Sequence[str] = (),
    hardware: Sequence[str] = (),
) -> CheckReport:
    """Verdicts for ``stack`` per (operation, hardware class) of ``results``.

    ``operations`` and ``hardware`` filter (empty: all); a name the results do not
    have is a UsageError that lists those they have.
    """
    records = [r for r in results.records if not r.beyond_cap]
    if not records:
        raise UsageError(f"--results {results.source}: holds no records: nothing to compare with")
    axes = _axes(records)
    if not any(stack.version(a) is not None or not stack.knows(a) for a in axes):
        raise NothingTestedInstalled(
            f"{stack.source}: none of the packages the results test is installed "
            f"({', '.join(axes)}); is it the stack you meant?"
        )
    compared = tuple(a for a in axes if stack.knows(a))
    unknown = tuple(a for a in axes if not stack.knows(a))
    if stack.python is not None:
        compared += (PYTHON,)
    else:
        unknown += (PYTHON,)
    tested = _tested_values(records, compared)
    cells = _cells(records)
    groups = _groups(records, cells, operations, hardware)
    verdicts = []
    for (operation, hw), labels in groups.items():
        matches = [
            _match(stack, cells[label], operation, compared, tested) for label in sorted(labels)
        ]
        constraints = [
            c
            for found in results.constraints
            if (found.operation, found.hardware) == (operation, hw)
            for c in found.constraints
            if constraint_applies(c, stack)
        ]
        verdicts.append(_verdict(operation, hw, matches, constraints, results))
    return CheckReport(
        stack=stack,
        results=results,
        axes=compared,
        unknown_axes=unknown,
        verdicts=tuple(verdicts),
    )


@dataclass(frozen=True, kw_only=True)
class _Cell:
    label: str
    cell_id: str
    python: str
    hardware: str
    pins: Mapping[str, str | None]
    records: tuple[Record, ...]


def _axes(records: Iterable[Record]) -> tuple[str, ...]:
    seen: dict[str, None] = {}
    for record in records:
        for name in record.pins:
            seen.setdefault(canonicalize_name(name), None)
    return tuple(seen)


def _tested_values(records: Sequence[Record], axes: Sequence[str]) -> dict[str, set[str]]:
    values: dict[str, set[str]] = {a: set() for a in axes}
    for record in records:
        pins = _pins(record)
        for axis in axes:
            value = record.python if axis == PYTHON else pins.get(axis)
            if value is not None:
                values[axis].add(value)
    return values


def _cells(records: Iterable[Record]) -> dict[str, _Cell]:
    members: dict[str, list[Record]] = {}
    for record in records:
        members.setdefault(record.cell_label, []).append(record)
    return {
        label: _Cell(
            label=label,
            cell_id=found[0].cell_id,
            python=found[0].python,
            hardware=found[0].hardware_class,
            pins=_pins(found[0]),
            records=tuple(sorted(found, key=lambda r: r.case)),
        )
        for label, found in members.items()
    }


def _groups(
    records: Sequence[Record],
    cells: Mapping[str, _Cell],
    operations: Sequence[str],
    hardware: Sequence[str],
) -> dict[tuple[str, str], set[str]]:
    """(operation, hardware class) -> the cells that have something to say about it."""
    all_operations = sorted({r.operation for r in records if r.case != WHOLE_CELL})
    all_hardware = sorted({c.hardware for c in cells.values()})
    for asked, known, option in (
        (operations, all_operations, "--operation"),
        (hardware, all_hardware, "--hardware"),
    ):
        for name in asked:
            if name not in known:
                raise UsageError(
                    f"{option} {one_line(name)}: the results have no such "
                    f"{'operation' if option == '--operation' else 'hardware class'} "
                    f"(they have: {', '.join(known) or 'none'})"
                )
    groups: dict[tuple[str, str], set[str]] = {}
    for cell in cells.values():
        if hardware and cell.hardware not in hardware:
            continue
        ran = {r.operation for r in cell.records if r.case != WHOLE_CELL}
        whole = any(r.case == WHOLE_CELL for r in cell.records)
        for operation in all_operations:
            if operations and operation not in operations:
                continue
            if operation in ran or whole:
                groups.setdefault((operation, cell.hardware), set()).add(cell.label)
    return dict(sorted(groups.items(), key=lambda item: (item[0][1], item[0][0])))


def _match(
    stack: Stack,
    cell: _Cell,
    operation: str,
    compared: Sequence[str],
    tested: Mapping[str, set[str]],
) -> Match:
    changes = []
    for axis in compared:
        yours = stack.python if axis == PYTHON else stack.version(axis)
        theirs = cell.python if axis == PYTHON else cell.pins.get(axis)
        if same_version(yours, theirs):
            continue
        changes.append(
            VersionChange(
                package=axis,
                yours=yours,
                cell=theirs,
                steps=releases_apart(yours, theirs, tested[axis]),
            )
        )
    return replace(_operation_match(cell, operation), changes=tuple(changes))


def _operation_match(cell: _Cell, operation: str) -> Match:
    """What ``cell`` did for ``operation``, before any stack is compared with it."""
    records = tuple(r for r in cell.records if r.operation == operation or r.case == WHOLE_CELL)
    return Match(
        label=cell.label,
        cell_id=cell.cell_id,
        python=cell.python,
        pins=cell.pins,
        changes=(),
        verdict=_outcome(records),
        records=records,
    )


def _outcome(records: Sequence[Record]) -> str:
    """One cell's verdict on one operation, from the records of its cases."""
    statuses = [r.status for r in records]
    if any(r.status.is_break and not r.flaky for r in records):
        return "broken"
    if any(s.is_break for s in statuses):
        return "flaky"
    if Status.PASS in statuses:
        return "pass"
    if statuses and all(s is Status.NOT_APPLICABLE for s in statuses):
        return "n/a"
    return "untested"


def _verdict(
    operation: str,
    hardware: str,
    matches: Sequence[Match],
    constraints: Sequence[Constraint],
    results: Results,
) -> StackVerdict:
    ranked = sorted(matches, key=lambda m: m.rank)
    exact = [m for m in ranked if not m.changes]
    if exact:
        shown = exact
        outcomes = {m.verdict for m in exact}
        verdict = outcomes.pop() if len(outcomes) == 1 else "mixed"
    else:
        closest = ranked[0].rank[:2]
        shown = [m for m in ranked if m.rank[:2] == closest]
        verdict = "untested"
    if constraints and verdict != "broken":
        verdict = "broken"
    passing = [m for m in ranked if m.verdict == "pass"]
    nearest_passing = [m for m in passing if m.rank[:3] == passing[0].rank[:3]] if passing else []
    if exact and verdict == "pass":
        nearest_passing = []
    issues: dict[str, tuple[KnownIssueLink, list[str]]] = {}
    for match in shown:
        for issue in match_issues(match, results):
            issues.setdefault(issue.id, (issue, []))[1].append(match.label)
    return StackVerdict(
        operation=operation,
        hardware=hardware,
        verdict=verdict,
        why=_why(verdict, shown, exact=bool(exact), constraints=constraints),
        exact=bool(exact),
        cells=tuple(shown),
        nearest_passing=tuple(nearest_passing),
        known_issues=tuple((issue, tuple(labels)) for issue, labels in issues.values()),
        constraints=tuple(constraints),
    )


def _why(
    verdict: str, shown: Sequence[Match], *, exact: bool, constraints: Sequence[Constraint]
) -> str:
    """The verdict in words, for the verdict's first line."""
    first = shown[0]
    if not exact:
        steps, axes = first.steps, len(first.changes)
        far = f"{steps} version{'s' if steps != 1 else ''} away" + (
            f" on {axes} axes" if axes > 1 else ""
        )
        cells = "the nearest cell is" if len(shown) == 1 else f"the {len(shown)} nearest cells are"
        text = f"no cell has your versions; {cells} {far}"
        if constraints:
            text += f"; {constraints[0].requirement} (derived from the records) excludes yours"
        return text
    if verdict == "mixed" or len(shown) > 1:
        keys = sorted({k for m in shown for k in m.pins})
        apart = [k for k in keys if len({m.pins.get(k) for m in shown}) > 1]
        if len({m.python for m in shown}) > 1:
            apart.append(PYTHON)
        return (
            f"{len(shown)} cells have your versions (they differ in {', '.join(apart)}, which "
            "your input does not name)" + (" and disagree" if verdict == "mixed" else "")
        )
    return f"{first.label} (your versions) {_what(first)}: {first.counts_text()}{_reason(first)}"


# How a cell's verdict reads; for "untested", by the status that kept it from running.
_WHAT = {
    "pass": "passes",
    "broken": "breaks",
    "flaky": "breaks only in cases whose two tries disagreed",
    "n/a": "does not have the feature",
}
_NOT_RUN = {
    Status.SKIP: "was not run on this hardware",
    Status.UNINSTALLABLE: "cannot be installed",
    Status.INSTALL_ERROR: "failed to install",
    Status.ERROR: "hit a bug of the case (ours, not the frameworks')",
}


def _what(match: Match) -> str:
    if match.verdict in _WHAT:
        return _WHAT[match.verdict]
    worst = max((r.status for r in match.records), key=lambda s: s.severity, default=None)
    return _NOT_RUN.get(worst, "was not run") if worst else "was not run"


def _reason(match: Match) -> str:
    """The first reason a cell gives for not running (or not having) the operation."""
    if match.verdict not in ("untested", "n/a"):
        return ""
    reasons = sorted({r.reason for r in match.records if r.status is not Status.PASS and r.reason})
    return f" ({headline(reasons[0])[:200]})" if reasons else ""


def describe_match(match: Match) -> str:
    """One cell of a verdict, in a line: its label, what it did, how far it is."""
    where = f"; {', '.join(c.text() for c in match.changes)}" if match.changes else ""
    return f"{match.label} {_what(match)}: {match.counts_text()}{_reason(match)}{where}"


def match_issues(match: Match, results: Results) -> list[KnownIssueLink]:
    """The known issues the cell's problems are linked to, each once, in record order."""
    found: dict[str, KnownIssueLink] = {}
    for record in match.records:
        if record.status in PROBLEM_STATUSES:
            for issue in results.known_issues(record):
                found.setdefault(issue.id, issue)
    return list(found.values())


def problem_lines(match: Match, results: Results) -> list[str]:
    """The cell's cases that did not pass, a line each: the first few, then how many more."""
    problems = [r for r in match.records if r.status in PROBLEM_STATUSES and r.case != WHOLE_CELL]
    lines = [f"  {r.status.value} {r.case}: {case_message(r, results)}" for r in problems[:SHOWN]]
    if len(problems) > SHOWN:
        lines.append(f"  ... and {len(problems) - SHOWN} more")
    return lines


def constraint_line(constraint: Constraint, operation: str, hardware: str) -> str:
    """A derived constraint that excludes the stack, and the file it is in."""
    when = ", ".join(
        f"{k}=={v}" if v is not None else f"{k} not installed" for k, v in constraint.when
    )
    return (
        f"  constraint: {constraint.requirement}"
        + (f" with {when}" if when else "")
        + f" (constraints/{operation}-{hardware}.txt)"
    )


def lookup_table(results: Results) -> dict[str, Any]:
    """Everything check knows of ``results`` before it sees a stack, as JSON for the page.

    Compact, as a page with thousands of cells needs; every text once, in ``texts``:

    - ``axes``: the packages the cells pin (canonical names), in check's order;
      ``tested``: the versions the records hold on each axis and on ``python``;
    - ``cells``: ``[label, python, [its pin on each axis (null: none)]]``, by label;
    - ``groups``: per (operation, hardware class), in check's order, ``[operation,
      hardware, [entry, ...]]``, an entry per cell that speaks to it: ``[cell, verdict,
      what, reason, counts, [problem line, ...], [issue, ...]]`` (cell: its index in
      ``cells``; issue: its index in ``issues``; the rest: indexes in ``texts``);
    - ``issues``: the known issues (``id``, ``title``, ``upstream``, ``workaround``);
    - ``constraints``: ``[group, package, kind, versions, when, requirement, line]``
      (group: its index in ``groups``; when: ``[[name, version], ...]``).
    """
    records = [r for r in results.records if not r.beyond_cap]
    axes = _axes(records)
    cells = _cells(records)
    labels = sorted(cells)
    cell_index = {label: i for i, label in enumerate(labels)}
    texts: dict[str, int] = {}
    issues: dict[str, tuple[int, KnownIssueLink]] = {}

    def text(value: str) -> int:
        return texts.setdefault(value, len(texts))

    def issue(link: KnownIssueLink) -> int:
        return issues.setdefault(link.id, (len(issues), link))[0]

    groups: list[list[Any]] = []
    group_index: dict[tuple[str, str], int] = {}
    for (operation, hardware), members in _groups(records, cells, (), ()).items():
        entries = []
        for label in sorted(members):
            m = _operation_match(cells[label], operation)
            entries.append(
                [
                    cell_index[label],
                    text(m.verdict),
                    text(_what(m)),
                    text(_reason(m)),
                    text(m.counts_text()),
                    [text(line) for line in problem_lines(m, results)],
                    [issue(link) for link in match_issues(m, results)],
                ]
            )
        group_index[operation, hardware] = len(groups)
        groups.append([operation, hardware, entries])
    return {
        "axes": list(axes),
        "tested": {a: sorted(v) for a, v in _tested_values(records, (*axes, PYTHON)).items()},
        "cells": [
            [label, cells[label].python, [cells[label].pins.get(a) for a in axes]]
            for label in labels
        ],
        "texts": list(texts),
        "issues": [link.to_dict() for _, link in issues.values()],
        "groups": groups,
        # A constraint of no group is never looked at (check_stack looks per group).
        "constraints": [
            [
                group_index[found.operation, found.hardware],
                c.package,
                c.kind,
                list(c.versions),
                [list(pin) for pin in c.when],
                c.requirement,
                constraint_line(c, found.operation, found.hardware),
            ]
            for found in results.constraints
            if (found.operation, found.hardware) in group_index
            for c in found.constraints
        ],
    }


def _pins(record: Record) -> dict[str, str | None]:
    return {str(canonicalize_name(k)): v for k, v in record.pins.items()}


def _case_dict(record: Record, results: Results) -> dict[str, Any]:
    issues = results.known_issues(record) if record.status in PROBLEM_STATUSES else ()
    return {
        "case": record.case,
        "status": record.status.value,
        "flaky": record.flaky,
        "exception_type": record.root_exception_type or record.exception_type,
        "message": case_message(record, results) or None,
        "known_issue": issues[0].id if issues else None,
        "known_issues": [i.id for i in issues],
    }


def case_message(record: Record, results: Results) -> str:
    """The line worth reading about a record that did not pass: the blame, else its root message."""
    if record.status is Status.PASS:
        return ""
    if record.status in PROBLEM_STATUSES:
        return results.blamed(record) or headline(root_message(record))[:200]
    return headline(record.reason or "")[:200]
