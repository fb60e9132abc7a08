"""The compatibility report: HTML for people, Markdown for job summaries, JSON for tools.

Pure functions from records to text; :func:`write_report` is the only I/O. Every
value that comes from a record is escaped: messages are framework output and
may contain anything, markup included.
"""

from __future__ import annotations

import json
import shlex
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from html import escape
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from ftmatrix.constraints import write_constraints
from ftmatrix.known_issues import KnownIssue, load_known_issues
from ftmatrix.records import WHOLE_CELL, Record, write_atomically
from ftmatrix.status import Status
from ftmatrix.store import (
    load_findings,
    merge_records,
    newest_records,
    pass_rate_table,
    save_finding,
)

STATUS_COLOURS = {
    # Colour-blind-safe pairs (Okabe-Ito based); the status text is always shown too.
    Status.PASS: ("#1a7f37", "#ffffff"),
    Status.FAIL: ("#b3261e", "#ffffff"),
    Status.CRASH: ("#6d1b7b", "#ffffff"),
    Status.TIMEOUT: ("#d55e00", "#ffffff"),
    Status.OOM: ("#e69f00", "#000000"),
    Status.SKIP: ("#d0d7de", "#000000"),
    Status.NOT_APPLICABLE: ("#eaeef2", "#57606a"),
    Status.UNINSTALLABLE: ("#56b4e9", "#000000"),
    Status.INSTALL_ERROR: ("#0072b2", "#ffffff"),
    Status.ERROR: ("#000000", "#f0e442"),
}
PROBLEM_STATUSES = frozenset(
    s for s in Status if s not in (Status.PASS, Status.SKIP, Status.NOT_APPLICABLE)
)


@dataclass(frozen=True, kw_only=True)
class Grid:
    """The latest record of every (cell, case), arranged for display."""

    rows: tuple[str, ...]  # cell labels
    columns: tuple[str, ...]  # case ids
    cells: dict[tuple[str, str], Record]
    whole_cell: dict[str, Record]
    records: tuple[Record, ...]
    runs: tuple[str, ...]


def latest_records(records: Iterable[Record]) -> list[Record]:
    """For each cell, the records of the newest run that has any for it."""
    newest: dict[str, str] = {}
    records = list(records)
    for record in records:
        if record.run_id > newest.get(record.cell_id, ""):
            newest[record.cell_id] = record.run_id
    return [r for r in records if r.run_id == newest[r.cell_id]]


def build_grid(records: Iterable[Record]) -> Grid:
    """Arrange the latest records as cells x cases."""
    latest = latest_records(records)
    cells: dict[tuple[str, str], Record] = {}
    whole: dict[str, Record] = {}
    for record in latest:
        if record.case == WHOLE_CELL:
            _keep_worst(whole, record.cell_label, record)
        else:
            _keep_worst(cells, (record.cell_label, record.case), record)
    rows = sorted({r.cell_label for r in latest})
    columns = sorted({r.case for r in latest if r.case != WHOLE_CELL})
    return Grid(
        rows=tuple(rows),
        columns=tuple(columns),
        cells=cells,
        whole_cell=whole,
        records=tuple(latest),
        runs=tuple(sorted({r.run_id for r in latest})),
    )


def _keep_worst(into: dict[Any, Record], key: Any, record: Record) -> None:
    current = into.get(key)
    if current is None or record.status.severity > current.status.severity:
        into[key] = record


# The grid's axes besides the pinned packages; the pins go between the cell-level ones
# and the case-level ones. A package named like one of these is not offered as an axis.
CELL_AXES = ("cell", "hardware", "python")
CASE_AXES = ("operation", "case")
DEFAULT_ROWS = "cell"
DEFAULT_COLUMNS = "case"
UNPINNED = "unpinned"  # the cell does not pin this package at all (another profile did)


@dataclass(frozen=True, kw_only=True)
class GridEntry:
    """One (cell, case) of the grid: its record, or the whole-cell record standing in
    for a case the cell never got to run (an uninstallable cell fails every case)."""

    record: Record
    case: str
    operation: str


def grid_entries(records: Iterable[Record]) -> list[GridEntry]:
    """Every (cell, case) of the latest records, whole-cell records spread over the cases
    their cell has no record of, so every pivot and filter sees them; by cell, then case."""
    records = list(records)
    operations: dict[str, str] = {}
    ran: set[tuple[str, str]] = set()
    entries = []
    for record in records:
        if record.case != WHOLE_CELL:
            operations.setdefault(record.case, record.operation)
            ran.add((record.cell_id, record.case))
            entries.append(GridEntry(record=record, case=record.case, operation=record.operation))
    for record in records:
        if record.case != WHOLE_CELL:
            continue
        if not operations:
            entries.append(GridEntry(record=record, case=WHOLE_CELL, operation=record.operation))
        for case in sorted(operations):
            if (record.cell_id, case) not in ran:
                entries.append(GridEntry(record=record, case=case, operation=operations[case]))
    return sorted(entries, key=lambda e: (e.record.cell_label, e.case))


def axis_value(entry: GridEntry, axis: str) -> str:
    """The value of ``entry`` on ``axis`` (a fixed axis or a pinned package), as shown."""
    fixed = _FIXED_AXES.get(axis)
    if fixed is not None:
        return fixed(entry)
    if axis not in entry.record.pins:
        return UNPINNED
    return entry.record.pins[axis] or "none"


_FIXED_AXES: dict[str, Callable[[GridEntry], str]] = {
    "cell": lambda e: e.record.cell_label,
    "hardware": lambda e: e.record.hardware_class,
    "python": lambda e: e.record.python,
    "operation": lambda e: e.operation,
    "case": lambda e: e.case,
}


def grid_axes(entries: Sequence[GridEntry]) -> dict[str, list[str]]:
    """Each axis (cell-level ones, pinned packages, case-level ones) -> its sorted values."""
    packages = sorted({p for e in entries for p in e.record.pins} - set(CELL_AXES) - set(CASE_AXES))
    return {
        axis: sorted({axis_value(e, axis) for e in entries}, key=_value_order)
        for axis in (*CELL_AXES, *packages, *CASE_AXES)
    }


def _value_order(value: str) -> tuple[int, Version | str]:
    try:
        return (0, Version(value))
    except InvalidVersion:
        return (1, value)


def pivot(
    entries: Iterable[GridEntry],
    *,
    rows: str,
    columns: str,
    filters: dict[str, str] | None = None,
) -> dict[tuple[str, str], list[GridEntry]]:
    """(row value, column value) -> the entries there, keeping those matching ``filters``
    (axis -> value). The embedded script computes the same in the reader's browser."""
    wanted = filters or {}
    table: dict[tuple[str, str], list[GridEntry]] = {}
    for entry in entries:
        if all(axis_value(entry, a) == v for a, v in wanted.items()):
            key = (axis_value(entry, rows), axis_value(entry, columns))
            table.setdefault(key, []).append(entry)
    return table


def worst_of(statuses: Iterable[Status]) -> tuple[Status, int, int]:
    """The most severe status, how many have it, and how many there are in all."""
    counts = Counter(statuses)
    if not counts:
        raise ValueError("no statuses to combine")
    worst = max(counts, key=lambda s: s.severity)
    return worst, counts[worst], sum(counts.values())


def pivot_data(
    entries: Sequence[GridEntry], values: dict[str, list[str]] | None = None
) -> dict[str, Any]:
    """The grid as compact JSON for the page's script: strings once, records as numbers.

    ``axes`` lists the axis names, cell-level ones first and ``operation``, ``case``
    last; ``values[i]`` the values of axis ``i``. ``cells`` rows are ``[cell id,
    value index per cell-level axis...]``. ``records`` is flat, six numbers per entry:
    cell row, operation, case, status (its severity, an index into ``statuses``),
    headline (into ``texts``), and its record's anchor (into ``anchors``; -1 for a
    record with no detail section that is not a whole-cell one). ``whole`` lists the
    anchors of whole-cell records: a row made of one of them is shown as one span.
    """
    values = values if values is not None else grid_axes(entries)
    axes = list(values)
    cell_axes = axes[: -len(CASE_AXES)]
    index = {axis: {v: i for i, v in enumerate(vs)} for axis, vs in values.items()}
    cells: list[list[Any]] = []
    cell_rows: dict[tuple[Any, ...], int] = {}
    texts: dict[str, int] = {"": 0}
    anchors: dict[str, int] = {}
    whole: set[int] = set()
    flat: list[int] = []
    for entry in entries:
        record = entry.record
        key = (record.cell_id, *(index[a][axis_value(entry, a)] for a in cell_axes))
        row = cell_rows.get(key)
        if row is None:
            row = cell_rows[key] = len(cells)
            cells.append(list(key))
        text = _entry_headline(entry)[:240]
        anchor = -1
        if record.status in PROBLEM_STATUSES or record.case == WHOLE_CELL:
            anchor = anchors.setdefault(_anchor(record), len(anchors))
            if record.case == WHOLE_CELL:
                whole.add(anchor)
        flat += [
            row,
            index["operation"][entry.operation],
            index["case"][entry.case],
            record.status.severity,
            texts.setdefault(text, len(texts)),
            anchor,
        ]
    by_severity = sorted(Status, key=lambda s: s.severity)
    return {
        "axes": axes,
        "values": [values[a] for a in axes],
        "statuses": [[s.value, _css_name(s), int(s in PROBLEM_STATUSES)] for s in by_severity],
        "cells": cells,
        "records": flat,
        "texts": list(texts),
        "anchors": list(anchors),
        "whole": sorted(whole),
    }


def headline(message: str | None) -> str:
    """The line of a message worth showing in a grid: the first, and the next when the
    first only announces it ("Failed to import X because of the following error:")."""
    lines = [line.strip() for line in (message or "").strip().splitlines() if line.strip()]
    if not lines:
        return ""
    if lines[0].endswith(":") and len(lines) > 1:
        return f"{lines[0]} {lines[1]}"
    return lines[0]


def reproduce_command(record: Record) -> str:
    """The one command that rebuilds this cell and reruns this case locally."""
    selector = shlex.quote(f"matrix({record.cell_label})")
    command = f"nox -s {selector}"
    if record.case != WHOLE_CELL:
        command += f" -- {shlex.quote(record.case)}"
    return command


@dataclass(frozen=True, kw_only=True)
class FailureGroup:
    """Records that broke the same way: one signature (or one whole-cell reason)."""

    key: str
    status: Status
    exception_type: str | None
    message: str
    records: tuple[Record, ...]
    known: KnownIssue | None
    late_fixes: tuple[str, ...]
    first_bad: tuple[dict[str, Any], ...]

    @property
    def versions(self) -> dict[str, list[str]]:
        """For each pinned package, the versions among the group's cells."""
        seen: dict[str, set[str]] = {}
        for record in self.records:
            for package, version in record.pins.items():
                seen.setdefault(package, set()).add(version or "none")
        return {k: sorted(v) for k, v in seen.items()}


def failure_groups(
    records: Iterable[Record],
    known: Sequence[KnownIssue] = (),
    findings: Sequence[dict[str, Any]] = (),
) -> list[FailureGroup]:
    """Group the framework breaks among ``records`` by cause, largest group first."""
    buckets: dict[str, list[Record]] = {}
    for record in records:
        if record.status not in PROBLEM_STATUSES:
            continue
        key = record.signature or f"{record.status.value}: {(record.reason or '')[:200]}"
        buckets.setdefault(key, []).append(record)
    groups = []
    for key, members in buckets.items():
        first = members[0]
        entry = next((e for e in known if e.matches(first)), None)
        late = sorted({x for r in members if entry for x in entry.still_failing_after_fix(r)})
        cases = {r.case for r in members}
        groups.append(
            FailureGroup(
                key=key,
                status=first.status,
                exception_type=first.exception_type,
                message=(first.message or first.reason or "").strip(),
                records=tuple(sorted(members, key=lambda r: (r.cell_label, r.case))),
                known=entry,
                late_fixes=tuple(late),
                first_bad=tuple(f for f in findings if f.get("case") in cases),
            )
        )
    return sorted(groups, key=lambda g: (-len(g.records), g.key))


@dataclass(frozen=True, kw_only=True)
class Change:
    """A (cell, case) whose status differs between its two newest runs."""

    kind: str  # "regression" or "fix"
    before: Record
    after: Record

    @property
    def moved_packages(self) -> dict[str, tuple[str | None, str | None]]:
        """Installed packages whose version differs between the two runs (floating ones)."""
        names = set(self.before.packages) | set(self.after.packages)
        return {
            n: (self.before.packages.get(n), self.after.packages.get(n))
            for n in sorted(names)
            if self.before.packages.get(n) != self.after.packages.get(n)
        }


def changes_since_previous(records: Iterable[Record]) -> list[Change]:
    """Regressions and fixes between each (cell label, case)'s two newest runs."""
    history: dict[tuple[str, str], dict[str, Record]] = {}
    for record in records:
        history.setdefault((record.cell_label, record.case), {})[record.run_id] = record
    changes = []
    for _, runs in sorted(history.items()):
        if len(runs) < 2:
            continue
        previous, latest = (runs[r] for r in sorted(runs)[-2:])
        was_ok = previous.status is Status.PASS
        is_ok = latest.status is Status.PASS
        if was_ok and latest.status in PROBLEM_STATUSES:
            changes.append(Change(kind="regression", before=previous, after=latest))
        elif previous.status in PROBLEM_STATUSES and is_ok:
            changes.append(Change(kind="fix", before=previous, after=latest))
    return changes


def pass_rates(records: Iterable[Record]) -> dict[str, list[tuple[str, float]]]:
    """For each operation, (run id, share of its judged cases that passed) per run."""
    counts: dict[str, dict[str, list[int]]] = {}
    for record in records:
        if record.status in (Status.SKIP, Status.NOT_APPLICABLE) or record.case == WHOLE_CELL:
            continue
        tally = counts.setdefault(record.operation, {}).setdefault(record.run_id, [0, 0])
        tally[0] += record.status is Status.PASS
        tally[1] += 1
    return {
        operation: [(run, passed / total) for run, (passed, total) in sorted(runs.items())]
        for operation, runs in sorted(counts.items())
    }


def render_html(
    grid: Grid,
    *,
    generated_at: datetime,
    problems: Sequence[str] = (),
    groups: Sequence[FailureGroup] = (),
    changes: Sequence[Change] = (),
    trend: dict[str, list[tuple[str, float]]] | None = None,
) -> str:
    """One self-contained HTML page: no script or style is fetched from anywhere."""
    counts = Counter(r.status for r in grid.records)
    entries = grid_entries(grid.records)
    values = grid_axes(entries)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        "<title>ftmatrix compatibility report</title>",
        f"<style>{_CSS}{_status_css()}</style></head><body>",
        "<h1>ftmatrix compatibility report</h1>",
        f"<p class=meta>Generated {escape(generated_at.isoformat(timespec='seconds'))}"
        f" from {len(grid.records)} records of {len(grid.rows)} cells"
        f" (runs: {escape(', '.join(grid.runs) or 'none')}).</p>",
        _summary(counts),
        _legend(),
        _filters(grid, values),
        _grid_table(grid, entries, values),
        _changes(changes),
        _groups(groups),
        _trend(trend or {}),
        _stack_checker(grid),
        _failures(grid),
        f"<script>{_SCRIPT}</script>",
    ]
    if problems:
        items = "".join(f"<li>{escape(p)}</li>" for p in problems)
        parts.append(f"<h2>Unreadable records</h2><ul class=problems>{items}</ul>")
    parts.append("</body></html>")
    return "\n".join(parts)


def render_markdown(
    grid: Grid, groups: Sequence[FailureGroup] = (), changes: Sequence[Change] = ()
) -> str:
    """A compact summary for a GitHub job summary."""
    counts = Counter(r.status for r in grid.records)
    lines = ["# ftmatrix compatibility report", ""]
    lines.append(", ".join(f"{counts[s]} {s.value}" for s in Status if counts[s]) or "No records.")
    lines += ["", "| cell | " + " | ".join(_md(c) for c in grid.columns) + " |"]
    lines.append("|---|" + "---|" * len(grid.columns))
    for row in grid.rows:
        whole = grid.whole_cell.get(row)
        values = []
        for column in grid.columns:
            record = grid.cells.get((row, column)) or whole
            values.append(record.status.value if record else "")
        if whole and not grid.columns:
            values = [whole.status.value]
        lines.append(f"| {_md(row)} | " + " | ".join(values) + " |")
    if changes:
        lines += ["", "## Changed since the previous run", ""]
        for change in changes:
            moved = ", ".join(f"{k} {a}->{b}" for k, (a, b) in change.moved_packages.items())
            lines.append(
                f"- **{change.kind}** `{_md(change.after.cell_label)}` `{_md(change.after.case)}`: "
                f"{change.before.status.value} -> {change.after.status.value}"
                + (f" (moved: {_md(moved)})" if moved else "")
            )
    if groups:
        lines += ["", "## Failures by cause", ""]
        for group in groups:
            first = headline(group.message)
            known = (
                f"known: [{group.known.id}]({group.known.upstream})" if group.known else "**new**"
            )
            lines.append(
                f"- {len(group.records)} x {group.status.value} {known}: {_md(first[:200])}"
            )
    problems = [r for r in grid.records if r.status in PROBLEM_STATUSES]
    if problems:
        lines += ["", "## Problems", ""]
        for record in problems:
            detail = record.message or record.reason or ""
            first = headline(detail)
            lines.append(
                f"- **{record.status.value}** `{_md(record.cell_label)}` `{_md(record.case)}`: "
                f"{_md(first[:300])}"
            )
    return "\n".join(lines) + "\n"


def render_json(
    grid: Grid, groups: Sequence[FailureGroup] = (), changes: Sequence[Change] = ()
) -> str:
    """Machine-readable results: the latest record of every (cell, case), groups, changes."""
    counts = Counter(r.status.value for r in grid.records)
    payload = {
        "schema": 1,
        "runs": list(grid.runs),
        "counts": dict(sorted(counts.items())),
        "records": [r.to_dict() for r in grid.records],
        "failure_groups": [
            {
                "key": g.key,
                "status": g.status.value,
                "exception_type": g.exception_type,
                "message": g.message,
                "cells": [r.cell_label for r in g.records],
                "cases": sorted({r.case for r in g.records}),
                "versions": g.versions,
                "known_issue": g.known.to_dict() if g.known else None,
                "fixed_release_still_fails": list(g.late_fixes),
                "first_bad": list(g.first_bad),
            }
            for g in groups
        ],
        "changes": [
            {
                "kind": c.kind,
                "cell": c.after.cell_label,
                "case": c.after.case,
                "before": {"run_id": c.before.run_id, "status": c.before.status.value},
                "after": {"run_id": c.after.run_id, "status": c.after.status.value},
                "moved_packages": {k: list(v) for k, v in c.moved_packages.items()},
            }
            for c in changes
        ],
    }
    return json.dumps(payload, indent=1, sort_keys=True, default=str) + "\n"


def write_report(out_dir: Path, *, now: datetime, known_issues: Path | None = None) -> Grid:
    """Merge ``out_dir/records`` into the history, then write the reports from the history.

    ``known_issues`` (a known_issues.yaml) links failure groups to upstream reports.
    """
    store = out_dir / "history.sqlite"
    merged = merge_records(store, [out_dir / "records"])
    for finding_file in sorted((out_dir / "bisect").glob("*/finding.json")):
        save_finding(store, json.loads(finding_file.read_text(encoding="utf-8")))
    latest = newest_records(store)
    grid = build_grid(latest)
    known = load_known_issues(known_issues) if known_issues else ()
    groups = failure_groups(grid.records, known, load_findings(store))
    changes = changes_since_previous([*newest_records(store, back=1), *latest])
    html = render_html(
        grid,
        generated_at=now,
        problems=merged.problems,
        groups=groups,
        changes=changes,
        trend=pass_rate_table(store),
    )
    write_atomically(out_dir / "index.html", html)
    write_atomically(out_dir / "summary.md", render_markdown(grid, groups, changes))
    write_atomically(out_dir / "results.json", render_json(grid, groups, changes))
    write_badges(out_dir / "badges", grid)
    write_constraints(out_dir / "constraints", latest)
    return grid


def write_badges(folder: Path, grid: Grid) -> None:
    """One shields.io endpoint JSON per operation: passing cases out of judged ones."""
    per_operation: dict[str, list[int]] = {}
    for record in grid.records:
        if record.status in (Status.SKIP, Status.NOT_APPLICABLE):
            continue
        tally = per_operation.setdefault(record.operation, [0, 0])
        tally[0] += record.status is Status.PASS
        tally[1] += 1
    for operation, (passed, total) in per_operation.items():
        colour = "brightgreen" if passed == total else ("red" if passed == 0 else "orange")
        badge = {
            "schemaVersion": 1,
            "label": operation,
            "message": f"{passed}/{total} pass",
            "color": colour,
        }
        write_atomically(folder / f"{_file_name(operation)}.json", json.dumps(badge))


def _file_name(text: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_" else "-" for ch in text)


def _summary(counts: Counter[Status]) -> str:
    chips = "".join(
        f"<li>{_badge(status)} {counts[status]}</li>" for status in Status if counts[status]
    )
    return f"<ul class=counts>{chips or '<li>No records yet.</li>'}</ul>"


def _legend() -> str:
    rows = "".join(
        f"<tr><td>{_badge(status)}</td><td>{escape(status.meaning)}</td></tr>" for status in Status
    )
    return f"<details class=legend><summary>Legend</summary><table>{rows}</table></details>"


def _badge(status: Status) -> str:
    # Colours come from one rule per status (see _status_css): a 500-cell grid repeats
    # this span thousands of times.
    return f'<span class="status s-{_css_name(status)}">{escape(status.value)}</span>'


def _status_css() -> str:
    return "".join(
        f".s-{_css_name(status)}{{background:{background};color:{colour}}}"
        for status, (background, colour) in STATUS_COLOURS.items()
    )


def _filters(grid: Grid, values: dict[str, list[str]]) -> str:
    # Hidden until the script runs: without it these controls could do nothing.
    if not grid.rows:
        return ""

    def axis_options(chosen: str) -> str:
        return "".join(
            f'<option value="{i}"{" selected" if axis == chosen else ""}>{escape(axis)}</option>'
            for i, axis in enumerate(values)
        )

    status_options = "".join(
        f'<option value="{escape(s.value)}">{escape(s.value)}</option>' for s in Status
    )
    axis_filters = "".join(
        f'<label data-axis="{i}">{escape(axis)} '
        f'<select class=axis-filter data-axis="{i}" data-name="{escape(axis)}">'
        '<option value="">all</option>'
        + "".join(f'<option value="{j}">{escape(v)}</option>' for j, v in enumerate(vs))
        + "</select></label> "
        for i, (axis, vs) in enumerate(values.items())
    )
    return (
        '<form class=filters id=pivot-controls hidden onsubmit="return false">'
        f"<p><label>Rows <select id=row-axis>{axis_options(DEFAULT_ROWS)}</select></label> "
        f"<label>columns <select id=column-axis>{axis_options(DEFAULT_COLUMNS)}</select></label> "
        "<label>cells matching <input id=filter type=search "
        'placeholder="e.g. tf5.23 trl1.16"></label> '
        '<label>rows showing <select id=status-filter><option value="">any status</option>'
        f"{status_options}</select></label></p>"
        f"<p class=axis-filters>Filters: {axis_filters}</p></form>"
    )


def _grid_table(grid: Grid, entries: Sequence[GridEntry], values: dict[str, list[str]]) -> str:
    # The default view, rendered here so the page reads with scripts off; the script
    # re-renders the same pivot from the embedded data when the axes or filters change.
    if not grid.rows:
        return "<p>No records found. Run <code>nox -s matrix</code> first.</p>"
    table = pivot(entries, rows=DEFAULT_ROWS, columns=DEFAULT_COLUMNS)
    rows = [
        v for v in values[DEFAULT_ROWS] if any((v, c) in table for c in values[DEFAULT_COLUMNS])
    ]
    columns = [c for c in values[DEFAULT_COLUMNS] if any((r, c) in table for r in rows)]
    body = []
    for row in rows:
        members = [table.get((row, column), []) for column in columns]
        spanning = _spanning_record(members)
        if spanning is not None:
            cells = f'<td colspan="{len(columns)}">{_grid_cell(spanning)}</td>'
        else:
            cells = "".join(f"<td>{_combined_cell(m)}</td>" for m in members)
        body.append(f"<tr><th scope=row><code>{escape(row)}</code></th>{cells}</tr>")
    head = "".join(f"<th scope=col>{escape(c)}</th>" for c in columns)
    return (
        "<h2>Cells</h2>"
        "<p class=meta>A result is one case in one cell; a cell that never got to run its"
        " cases (say, uninstallable) counts once for each of them. A grid cell holding"
        " several results shows the worst, how many have it and out of how many; open"
        " it for the list.</p>"
        f"<p id=pivot-summary class=meta>{len(entries)} results,"
        f" rows: {DEFAULT_ROWS}, columns: {DEFAULT_COLUMNS}.</p>"
        "<div class=scroll id=grid-holder><table class=grid>"
        f"<thead><tr><th scope=col>{DEFAULT_ROWS} \\ {DEFAULT_COLUMNS}</th>{head}</tr></thead>"
        f"<tbody>{''.join(body)}</tbody></table></div>" + _pivot_data(entries, values)
    )


def _spanning_record(members: Sequence[Sequence[GridEntry]]) -> Record | None:
    """The whole-cell record a row consists of, shown once across it, if it is one."""
    if not members or any(len(m) != 1 for m in members):
        return None
    first = members[0][0].record
    if first.case != WHOLE_CELL or any(m[0].record is not first for m in members):
        return None
    return first


def _combined_cell(members: Sequence[GridEntry]) -> str:
    if not members:
        return ""
    if len(members) == 1:
        return _grid_cell(members[0].record)
    status, count, total = worst_of(m.record.status for m in members)
    worst_first = sorted(members, key=lambda m: -m.record.status.severity)  # stable
    items = "".join(
        f"<li>{_badge(m.record.status)} <code>{escape(m.record.cell_label)}</code> "
        f"<code>{escape(m.case)}</code>"
        + (
            f' <a href="#{_anchor(m.record)}">details</a>'
            if m.record.status in PROBLEM_STATUSES
            else ""
        )
        + (f"<div class=msg>{escape(h[:240])}</div>" if (h := _entry_headline(m)) else "")
        + "</li>"
        for m in worst_first
    )
    tally = Counter(m.record.status for m in members)
    breakdown = ", ".join(f"{tally[s]} {s.value}" for s in sorted(tally, key=lambda s: -s.severity))
    return (
        f'<details class=combo><summary title="{breakdown}">{_badge(status)} {count}/{total}'
        f"</summary><ul>{items}</ul></details>"
    )


def _entry_headline(entry: GridEntry) -> str:
    return headline(entry.record.message or entry.record.reason)


def _pivot_data(entries: Sequence[GridEntry], values: dict[str, list[str]]) -> str:
    # JSON inside a script element: '<' escaped so no value can close the element.
    data = json.dumps(pivot_data(entries, values), separators=(",", ":")).replace("<", "\\u003c")
    return f'<script type="application/json" id=pivot-data>{data}</script>'


def _grid_cell(record: Record) -> str:
    text = record.message or record.reason or ""
    first = headline(text)
    link = ""
    if record.status in PROBLEM_STATUSES:
        link = f' <a href="#{_anchor(record)}">details</a>'
    detail = f"<div class=msg>{escape(first[:240])}</div>" if first else ""
    return f"{_badge(record.status)}{link}{detail}"


def _changes(changes: Sequence[Change]) -> str:
    if not changes:
        return "<h2>Changed since the previous run</h2><p>Nothing changed.</p>"
    items = []
    for change in changes:
        moved = ", ".join(
            f"{k} {a or 'none'} &rarr; {b or 'none'}"
            for k, (a, b) in (
                (escape(k), (escape(a or ""), escape(b or "")))
                for k, (a, b) in change.moved_packages.items()
            )
        )
        items.append(
            f"<li class={change.kind}><strong>{change.kind}</strong> "
            f"<code>{escape(change.after.cell_label)}</code> "
            f"<code>{escape(change.after.case)}</code>: "
            f"{_badge(change.before.status)} &rarr; {_badge(change.after.status)}"
            + (f" <span class=moved>packages that moved: {moved}</span>" if moved else "")
            + "</li>"
        )
    return f"<h2>Changed since the previous run</h2><ul class=changes>{''.join(items)}</ul>"


def _groups(groups: Sequence[FailureGroup]) -> str:
    if not groups:
        return ""
    sections = []
    for group in groups:
        first = headline(group.message)
        if group.known:
            link = (
                f'<a href="{escape(group.known.upstream)}">{escape(group.known.id)}</a>'
                if group.known.upstream.startswith("https://")
                else escape(group.known.id)
            )
            known = f"known issue {link}: {escape(group.known.title)}"
            if group.known.workaround:
                known += f" <em>Workaround: {escape(group.known.workaround)}</em>"
        else:
            known = "<strong class=new>new</strong>: no known issue explains it"
        late = (
            f"<p class=late>Still failing after its fix: {escape(', '.join(group.late_fixes))}</p>"
            if group.late_fixes
            else ""
        )
        bad = "".join(
            f"<li>first bad {escape(str(f.get('axis')))} {escape(str(f.get('first_bad')))} "
            f"(last good {escape(str(f.get('last_good')))})</li>"
            for f in group.first_bad
        )
        versions = "; ".join(
            f"{escape(k)} {escape(', '.join(v))}" for k, v in group.versions.items()
        )
        cells = "".join(
            f'<li><a href="#{_anchor(r)}"><code>{escape(r.cell_label)}</code> '
            f"<code>{escape(r.case)}</code></a></li>"
            for r in group.records
        )
        sections.append(
            f"<section class=group><h3>{_badge(group.status)} {len(group.records)} x "
            f"<code>{escape(group.exception_type or '')}</code> {escape(first[:300])}</h3>"
            f"<p>{known}</p>{late}<p class=versions>Versions: {versions}</p>"
            + (f"<ul class=first-bad>{bad}</ul>" if bad else "")
            + f"<details><summary>{len(group.records)} cells</summary><ul>{cells}</ul></details>"
            "</section>"
        )
    return "<h2>Failures by cause</h2>" + "".join(sections)


def _trend(trend: dict[str, list[tuple[str, float]]]) -> str:
    if not trend:
        return ""
    rows = []
    for operation, points in trend.items():
        width, height = 160, 28
        step = width / max(len(points) - 1, 1)
        path = " ".join(
            f"{'M' if i == 0 else 'L'}{i * step:.1f},{height - rate * (height - 4) - 2:.1f}"
            for i, (_, rate) in enumerate(points)
        )
        title = ", ".join(f"{run}: {rate:.0%}" for run, rate in points)
        rows.append(
            f"<tr><th scope=row>{escape(operation)}</th><td>"
            f'<svg width="{width}" height="{height}" role="img" aria-label="{escape(title)}">'
            f"<title>{escape(title)}</title>"
            f'<path d="{path}" fill="none" stroke="#0072b2" stroke-width="2"/></svg></td>'
            f"<td>{points[-1][1]:.0%} in the newest of {len(points)} runs</td></tr>"
        )
    return f"<h2>Pass rate per operation</h2><table class=trend>{''.join(rows)}</table>"


def _stack_checker(grid: Grid) -> str:
    cells: dict[str, dict[str, Any]] = {}
    for record in grid.records:
        entry = cells.setdefault(record.cell_label, {"pins": dict(record.pins), "statuses": {}})
        entry["statuses"][record.status.value] = entry["statuses"].get(record.status.value, 0) + 1
    # JSON inside a script element: '<' escaped so no value can close the element.
    data = json.dumps(cells, sort_keys=True).replace("<", "\\u003c")
    return (
        "<h2>Does my stack work?</h2>"
        "<p>Paste the output of <code>pip freeze</code>; the nearest tested cells are shown.</p>"
        '<textarea id=freeze rows=5 cols=60 placeholder="trl==0.19.1"></textarea> '
        "<button id=check type=button>Check</button><div id=verdict></div>"
        f'<script type="application/json" id=cells-data>{data}</script>'
    )


def _failures(grid: Grid) -> str:
    problems = [r for r in grid.records if r.status in PROBLEM_STATUSES]
    if not problems:
        return "<h2>Failures</h2><p>None.</p>"
    items = [_failure(r) for r in sorted(problems, key=lambda r: (r.cell_label, r.case))]
    return "<h2>Failures</h2>" + "".join(items)


def _failure(record: Record) -> str:
    facts = [
        ("status", _badge(record.status)),
        ("case", f"<code>{escape(record.case)}</code>"),
        ("operation", escape(record.operation)),
        ("exception", f"<code>{escape(record.exception_type or '')}</code>"),
        ("framework frame", f"<code>{escape(record.framework_frame or '')}</code>"),
        ("signature", f"<code>{escape(record.signature or '')}</code>"),
        ("reproduce", f"<code>{escape(reproduce_command(record))}</code>"),
        ("pins", escape(", ".join(f"{k}=={v}" for k, v in record.pins.items()))),
        ("hardware", escape(_hardware_text(record.hardware))),
    ]
    rows = "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in facts if v)
    message = record.message or record.reason or ""
    packages = ", ".join(f"{k}=={v}" for k, v in record.packages.items())
    traceback = (
        f"<details><summary>traceback</summary><pre>{escape(record.traceback)}</pre></details>"
        if record.traceback
        else ""
    )
    return (
        f'<details class=failure id="{_anchor(record)}">'
        f"<summary>{_badge(record.status)} <code>{escape(record.cell_label)}</code> "
        f"<code>{escape(record.case)}</code></summary>"
        f"<table>{rows}</table><pre class=message>{escape(message)}</pre>{traceback}"
        f"<details><summary>environment ({len(record.packages)} packages)</summary>"
        f"<p class=packages>{escape(packages)}</p></details></details>"
    )


def _hardware_text(hardware: Any) -> str:
    if not hardware:
        return ""
    gpus = hardware.get("gpus") or []
    gpu_text = ", ".join(str(g.get("name")) for g in gpus) or "no GPU"
    return f"{hardware.get('cpu', '?')} ({hardware.get('cpu_count', '?')} CPUs), {gpu_text}"


def _anchor(record: Record) -> str:
    safe = "".join(ch if ch.isalnum() else "-" for ch in record.case)
    return f"f-{record.cell_id}-{safe}"


def _css_name(status: Status) -> str:
    return status.name.lower().replace("_", "-")


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:1.5rem;color:#1f2328}
h1{font-size:1.5rem}h2{font-size:1.2rem;margin-top:2rem}
.meta{color:#57606a}
.counts{display:flex;gap:1rem;list-style:none;padding:0}
.status{display:inline-block;padding:.05rem .45rem;border-radius:.3rem;
 font-weight:600;font-size:.85em}
.scroll{overflow-x:auto}
table.grid{border-collapse:collapse}
table.grid th,table.grid td{border:1px solid #d0d7de;padding:.35rem .5rem;
 vertical-align:top;text-align:left}
table.grid td{min-width:9rem;max-width:28rem}
.msg{font-size:.8em;color:#57606a;word-break:break-word}
.failure{border:1px solid #d0d7de;border-radius:.4rem;padding:.5rem 1rem;margin:1rem 0}
.failure th{text-align:left;padding-right:1rem;color:#57606a;font-weight:500}
.filters{margin:1rem 0}.filters label{margin-right:1rem;white-space:nowrap}
.combo summary{cursor:pointer;white-space:nowrap}.combo ul{padding-left:1rem;margin:.3rem 0}
.combo li{margin:.2rem 0}
.group{border-left:4px solid #b3261e;padding:.2rem 1rem;margin:1rem 0}
.new{color:#b3261e}.late{color:#d55e00;font-weight:600}
.changes .regression strong{color:#b3261e}.changes .fix strong{color:#1a7f37}
pre{background:#f6f8fa;padding:.6rem;overflow-x:auto;white-space:pre-wrap;word-break:break-word}
.packages{font-family:monospace;font-size:.8em}
"""

# The grid pivot: rows and columns are any two axes, the others filters. Record text
# only ever reaches the page through textContent and setAttribute, never as markup.
_PIVOT_SCRIPT = r"""
(function () {
  var source = document.getElementById("pivot-data");
  var holder = document.getElementById("grid-holder");
  var controls = document.getElementById("pivot-controls");
  if (!source || !holder || !controls) { return; }
  var data = JSON.parse(source.textContent);
  var axes = data.axes, values = data.values, cells = data.cells, recs = data.records;
  var STRIDE = 6, OPERATION = axes.length - 2;
  var lowerLabels = values[0].map(function (v) { return v.toLowerCase(); });
  var rowAxis = document.getElementById("row-axis");
  var columnAxis = document.getElementById("column-axis");
  var text = document.getElementById("filter");
  var status = document.getElementById("status-filter");
  var summary = document.getElementById("pivot-summary");
  var filters = Array.prototype.slice.call(controls.querySelectorAll("select.axis-filter"));
  var chosen = [+rowAxis.value, +columnAxis.value];
  var whole = {};
  data.whole.forEach(function (a) { whole[a] = true; });
  controls.hidden = false;

  function value(i, axis) {
    return axis < OPERATION ? cells[recs[i]][axis + 1] : recs[i + 1 + axis - OPERATION];
  }
  function el(tag, className, content) {
    var node = document.createElement(tag);
    if (className) { node.className = className; }
    if (content !== undefined) { node.textContent = content; }
    return node;
  }
  function badge(severity) {
    var s = data.statuses[severity];
    return el("span", "status s-" + s[1], s[0]);
  }
  function problem(i) { return recs[i + 5] >= 0 && data.statuses[recs[i + 3]][2] === 1; }
  function detailLink(i) {
    var a = el("a", "", "details");
    a.setAttribute("href", "#" + data.anchors[recs[i + 5]]);
    return a;
  }
  function single(td, i) {
    td.appendChild(badge(recs[i + 3]));
    if (problem(i)) {
      td.appendChild(document.createTextNode(" "));
      td.appendChild(detailLink(i));
    }
    var message = data.texts[recs[i + 4]];
    if (message) { td.appendChild(el("div", "msg", message)); }
  }
  function listItems(list, members) {
    members.forEach(function (i) {
      var li = el("li");
      li.appendChild(badge(recs[i + 3]));
      li.appendChild(document.createTextNode(" "));
      li.appendChild(el("code", "", values[0][cells[recs[i]][1]]));
      li.appendChild(document.createTextNode(" "));
      li.appendChild(el("code", "", values[axes.length - 1][recs[i + 2]]));
      if (problem(i)) {
        li.appendChild(document.createTextNode(" "));
        li.appendChild(detailLink(i));
      }
      var message = data.texts[recs[i + 4]];
      if (message) { li.appendChild(el("div", "msg", message)); }
      list.appendChild(li);
    });
  }
  function combined(td, members) {
    var counts = {}, worst = -1;
    members.forEach(function (i) {
      var s = recs[i + 3];
      counts[s] = (counts[s] || 0) + 1;
      if (s > worst) { worst = s; }
    });
    var details = el("details", "combo"), head = el("summary"), list = el("ul");
    head.appendChild(badge(worst));
    head.appendChild(document.createTextNode(" " + counts[worst] + "/" + members.length));
    head.title = Object.keys(counts).sort(function (a, b) { return b - a; }).map(function (s) {
      return counts[s] + " " + data.statuses[s][0]; }).join(", ");
    details.appendChild(head);
    details.appendChild(list);
    // Filled when opened: a pivot over thousands of records would otherwise build
    // every list up front.
    details.addEventListener("toggle", function () {
      if (details.open && !list.firstChild) {
        listItems(list, members.slice().sort(function (a, b) {
          return recs[b + 3] - recs[a + 3] || a - b;  // worst first, then by cell and case
        }));
      }
    });
    td.appendChild(details);
  }
  function spanning(buckets, row, columns) {
    // A row made of one whole-cell record (say, uninstallable) shows it once.
    var first = -1;
    for (var k = 0; k < columns.length; k += 1) {
      var members = buckets[row * values[chosen[1]].length + columns[k]];
      if (!members || members.length !== 1) { return -1; }
      if (first < 0) { first = members[0]; }
      if (recs[members[0] + 5] !== recs[first + 5]) { return -1; }
    }
    return first >= 0 && whole[recs[first + 5]] ? first : -1;
  }
  function render() {
    var ra = chosen[0], ca = chosen[1], width = values[ca].length;
    var wanted = [];
    filters.forEach(function (select) {
      var axis = +select.getAttribute("data-axis");
      var off = axis === ra || axis === ca;
      select.parentNode.hidden = off;
      if (!off && select.value !== "") { wanted.push([axis, +select.value]); }
    });
    var terms = text.value.toLowerCase().split(/\s+/).filter(Boolean);
    var needed = -1;
    data.statuses.forEach(function (s, severity) {
      if (s[0] === status.value) { needed = severity; }
    });
    var buckets = {}, rowSeen = {}, rowHas = {}, shown = 0;
    for (var i = 0; i < recs.length; i += STRIDE) {
      var ok = true;
      for (var f = 0; f < wanted.length && ok; f += 1) {
        ok = value(i, wanted[f][0]) === wanted[f][1];
      }
      if (ok && terms.length) {
        var label = lowerLabels[cells[recs[i]][1]];
        ok = terms.every(function (t) { return label.indexOf(t) >= 0; });
      }
      if (!ok) { continue; }
      var r = value(i, ra), key = r * width + value(i, ca);
      (buckets[key] || (buckets[key] = [])).push(i);
      rowSeen[r] = true;
      if (recs[i + 3] === needed) { rowHas[r] = true; }
      shown += 1;
    }
    var rows = Object.keys(rowSeen).map(Number).filter(function (r) {
      return needed < 0 || rowHas[r]; }).sort(function (a, b) { return a - b; });
    var keep = {}, columnSeen = {};
    rows.forEach(function (r) { keep[r] = true; });
    Object.keys(buckets).forEach(function (key) {
      if (keep[Math.floor(key / width)]) { columnSeen[key % width] = true; }
    });
    var columns = Object.keys(columnSeen).map(Number).sort(function (a, b) { return a - b; });
    var table = el("table", "grid"), thead = el("thead"), tbody = el("tbody"), tr = el("tr");
    var corner = el("th", "", axes[ra] + " \\ " + axes[ca]);
    corner.setAttribute("scope", "col");
    tr.appendChild(corner);
    columns.forEach(function (c) {
      var th = el("th", "", values[ca][c]);
      th.setAttribute("scope", "col");
      tr.appendChild(th);
    });
    thead.appendChild(tr);
    rows.forEach(function (r) {
      var row = el("tr"), th = el("th"), spanned = spanning(buckets, r, columns);
      th.setAttribute("scope", "row");
      th.appendChild(el("code", "", values[ra][r]));
      row.appendChild(th);
      if (spanned >= 0) {
        var td = el("td");
        td.colSpan = columns.length;
        single(td, spanned);
        row.appendChild(td);
      } else {
        columns.forEach(function (c) {
          var cell = el("td"), members = buckets[r * width + c];
          if (members && members.length === 1) { single(cell, members[0]); }
          else if (members) { combined(cell, members); }
          row.appendChild(cell);
        });
      }
      tbody.appendChild(row);
    });
    table.appendChild(thead);
    table.appendChild(tbody);
    holder.textContent = "";
    if (rows.length) { holder.appendChild(table); }
    else { holder.appendChild(el("p", "", "No records match these filters.")); }
    summary.textContent = shown + " of " + recs.length / STRIDE + " results, rows: " +
      axes[ra] + " (" + rows.length + "), columns: " + axes[ca] + " (" + columns.length + ").";
  }
  var pending = null;
  function later() {
    if (pending) { clearTimeout(pending); }
    pending = setTimeout(function () { pending = null; render(); }, 120);
  }
  function pickAxes(event) {
    var row = +rowAxis.value, column = +columnAxis.value;
    if (row === column) {  // the same axis twice: swap instead
      if (event.target === rowAxis) { column = chosen[0]; } else { row = chosen[1]; }
      rowAxis.value = String(row);
      columnAxis.value = String(column);
    }
    chosen = [row, column];
    render();
  }
  rowAxis.addEventListener("change", pickAxes);
  columnAxis.addEventListener("change", pickAxes);
  text.addEventListener("input", later);
  status.addEventListener("change", render);
  filters.forEach(function (select) { select.addEventListener("change", render); });
  filters.forEach(function (select) {
    var axis = +select.getAttribute("data-axis");
    select.parentNode.hidden = axis === chosen[0] || axis === chosen[1];
  });
})();
"""

_SCRIPT = (
    _PIVOT_SCRIPT
    + """
(function () {
  function openTarget() {
    var id = location.hash && decodeURIComponent(location.hash.slice(1));
    var target = id && document.getElementById(id);
    if (target && target.tagName === "DETAILS") { target.open = true; target.scrollIntoView(); }
  }
  window.addEventListener("hashchange", openTarget);
  openTarget();
  var button = document.getElementById("check");
  if (button) {
    button.addEventListener("click", function () {
      var cells = JSON.parse(document.getElementById("cells-data").textContent);
      var mine = {};
      document.getElementById("freeze").value.split(/\\n/).forEach(function (line) {
        var m = line.trim().match(/^([A-Za-z0-9_.-]+)==([^\\s;]+)/);
        if (m) { mine[m[1].toLowerCase().replace(/[-_.]+/g, "-")] = m[2]; }
      });
      var ranked = Object.keys(cells).map(function (label) {
        var pins = cells[label].pins, same = 0, total = 0;
        Object.keys(pins).forEach(function (name) {
          total += 1;
          var key = name.toLowerCase().replace(/[-_.]+/g, "-");
          var want = pins[name] === null ? undefined : pins[name];
          var have = mine[key];
          var base = function (v) { return v.split("+")[0]; };
          if (have === want || (have && want && base(have) === base(want))) { same += 1; }
        });
        return {label: label, same: same, total: total, statuses: cells[label].statuses};
      }).sort(function (a, b) { return b.same - a.same || a.label.localeCompare(b.label); });
      var out = document.getElementById("verdict");
      out.textContent = "";
      ranked.slice(0, 3).forEach(function (cell) {
        var p = document.createElement("p");
        var verdict = Object.keys(cell.statuses).map(function (s) {
          return cell.statuses[s] + " " + s; }).join(", ");
        p.textContent = cell.label + " (" + cell.same + "/" + cell.total +
          " pins match): " + verdict;
        out.appendChild(p);
      });
    });
  }
})();
"""
)
