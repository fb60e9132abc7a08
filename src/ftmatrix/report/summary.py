"""The job summary (summary.md): the report in Markdown, compact enough for a GitHub job
summary. Every value from a record is shown as text (:mod:`ftmatrix.report.md_text`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from ftmatrix.cell.status import PROBLEM_STATUSES, Status
from ftmatrix.messages import headline
from ftmatrix.report.causes import Cause, cut
from ftmatrix.report.grid import Grid, unverified
from ftmatrix.report.md_text import md_code, md_link, md_text
from ftmatrix.report.model import ReportData
from ftmatrix.report.notices import missing_markdown, notices_markdown, unfinished_markdown
from ftmatrix.report.probes import probes_markdown


def render_markdown(data: ReportData) -> str:
    """summary.md: what must be said first, the counts, the grid, the changes, the
    failures by cause, the problems and the cap probes."""
    lines = [
        "# ftmatrix compatibility report",
        "",
        *notices_markdown(data.in_progress, data.unreadable),
        *missing_markdown(data.missing),
        *unfinished_markdown(data.unfinished),
        _counts(data),
        *_grid(data.grid, data.reused),
        *_changes(data),
        *_causes(data.causes),
        *_problems(data.grid),
    ]
    return "\n".join(lines) + "\n" + probes_markdown(data.probe_outcomes)


def _counts(data: ReportData) -> str:
    counts = Counter(r.status for r in data.grid.records)
    counted = ", ".join(f"{counts[s]} {s.value}" for s in Status if counts[s]) or "No records."
    if data.reused:
        counted += (
            f"; {len(data.reused)} of {len(data.grid.rows)} cells reused"
            " (unchanged since an earlier run)"
        )
    return counted


# Past this many cases a cell x case table is a wall no job summary can show: each cell's
# counts instead (the cases that broke are listed under Problems).
MOST_CASE_COLUMNS = 12


def _grid(grid: Grid, reused: Mapping[str, str]) -> list[str]:
    if len(grid.columns) > MOST_CASE_COLUMNS:
        return _cell_counts(grid, reused)
    lines = ["", "| cell | " + " | ".join(md_text(c) for c in grid.columns) + " |"]
    lines.append("|---|" + "---|" * len(grid.columns))
    for row in grid.rows:
        whole = grid.whole_cell.get(row)
        values = []
        for column in grid.columns:
            record = grid.cells.get((row, column)) or whole
            shown = record.status.value if record else ""
            values.append(f"{shown} (unverified)" if record and unverified(record) else shown)
        if whole and not grid.columns:
            values = [whole.status.value]
        note = _reused_note(row, reused)
        lines.append(f"| {md_text(row)}{note} | " + " | ".join(values) + " |")
    return lines


def _cell_counts(grid: Grid, reused: Mapping[str, str]) -> list[str]:
    """One row a cell: how many of its cases ended in each status (those that occur)."""
    counts = {row: Counter[Status]() for row in grid.rows}
    unverified_passes = Counter[str]()
    for (row, _), record in grid.cells.items():
        counts[row][record.status] += 1
        unverified_passes[row] += bool(unverified(record))  # a pass's alone
    for row, whole in grid.whole_cell.items():
        if not counts[row]:
            counts[row][whole.status] += 1
    shown = [s for s in Status if any(c[s] for c in counts.values())]
    lines = [
        "",
        f"{len(grid.columns)} cases: each cell's count by status; every case that broke "
        "(not pass, skip or n/a) is under Problems.",
        "",
        "| cell | " + " | ".join(s.value for s in shown) + " |",
        "|---|" + "---|" * len(shown),
    ]
    for row in grid.rows:
        values = [str(counts[row][s]) if counts[row][s] else "" for s in shown]
        if Status.PASS in shown and unverified_passes[row]:
            at = shown.index(Status.PASS)
            values[at] += f" ({unverified_passes[row]} unverified)"
        note = _reused_note(row, reused)
        lines.append(f"| {md_text(row)}{note} | " + " | ".join(values) + " |")
    return lines


def _reused_note(row: str, reused: Mapping[str, str]) -> str:
    return f" ({md_text(f'reused, unchanged since {reused[row]}')})" if row in reused else ""


def _changes(data: ReportData) -> list[str]:
    if not data.changes:
        return []
    lines = ["", "## Changed since the previous run", ""]
    for change in data.changes:
        moved = ", ".join(f"{k} {a}->{b}" for k, (a, b) in change.moved_packages.items())
        lines.append(
            f"- **{change.kind}** {md_code(change.after.cell_label)} "
            f"{md_code(change.after.case)}: "
            f"{change.before.status.value} -> {change.after.status.value}"
            + (f" (moved: {md_text(moved)})" if moved else "")
        )
    return lines


def _causes(causes: tuple[Cause, ...]) -> list[str]:
    """One line per cause, as the page heads it: one per known issue, titled."""
    if not causes:
        return []
    lines = ["", "## Failures by cause", ""]
    for cause in causes:
        lines.append(
            f"- {cause.count_text()}, {cause.status.value}: {md_text(cut(cause.title, 160))} "
            f"({_known(cause)})"
        )
    return lines


def _known(cause: Cause) -> str:
    """The cause's known issues, each linked to its owning report; or that none explains it."""
    if not cause.entries:
        return "**unexplained**"
    claims = cause.groups[0].claims
    return "known: " + "; ".join(
        (md_link(e.id, e.upstream) if e.upstream else f"{md_text(e.id)} ({md_text(e.reported)})")
        + f" ({md_text(claims.get(e.id, ''))})"
        for e in cause.entries
    )


def _problems(grid: Grid) -> list[str]:
    problems = [r for r in grid.records if r.status in PROBLEM_STATUSES]
    if not problems:
        return []
    lines = ["", "## Problems", ""]
    for record in problems:
        first = headline(record.message or record.reason or "")
        lines.append(
            f"- **{record.status.value}** {md_code(record.cell_label)} "
            f"{md_code(record.case)}: {md_text(first[:300])}"
        )
    return lines
