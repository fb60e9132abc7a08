"""The compatibility report: HTML for people, Markdown for job summaries, JSON for tools.

Pure functions from records to text; :func:`write_report` is the only I/O. Every
value that comes from a record is escaped: messages are framework output and
may contain anything, markup included.
"""

from __future__ import annotations

import json
import shlex
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from html import escape
from pathlib import Path
from typing import Any

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
        _filters(grid),
        _grid_table(grid),
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


def _filters(grid: Grid) -> str:
    if not grid.rows:
        return ""
    operations = sorted({r.operation for r in grid.records if r.case != WHOLE_CELL})
    status_options = "".join(f"<option>{escape(s.value)}</option>" for s in Status)
    operation_options = "".join(f"<option>{escape(o)}</option>" for o in operations)
    return (
        '<form class=filters onsubmit="return false">'
        "<label>Cells matching <input id=filter type=search "
        'placeholder="e.g. tf5.23 trl1.16"></label> '
        f'<label>showing <select id=status-filter><option value="">any status</option>'
        f"{status_options}</select></label> "
        f'<label>operation <select id=operation-filter><option value="">all</option>'
        f"{operation_options}</select></label></form>"
    )


def _grid_table(grid: Grid) -> str:
    if not grid.rows:
        return "<p>No records found. Run <code>nox -s matrix</code> first.</p>"
    operation_of = {r.case: r.operation for r in grid.records}
    head = (
        "".join(
            f'<th scope=col data-operation="{escape(operation_of.get(c, ""))}">{escape(c)}</th>'
            for c in grid.columns
        )
        or "<th>cell</th>"
    )
    body = []
    for row in grid.rows:
        whole = grid.whole_cell.get(row)
        cells = []
        statuses = set()
        if whole is not None and not any((row, c) in grid.cells for c in grid.columns):
            span = max(len(grid.columns), 1)
            cells.append(f'<td colspan="{span}">{_grid_cell(whole)}</td>')
            statuses.add(whole.status.value)
        else:
            for column in grid.columns:
                record = grid.cells.get((row, column)) or whole
                if record:
                    statuses.add(record.status.value)
                operation = escape(operation_of.get(column, ""))
                cells.append(
                    f'<td data-operation="{operation}">{_grid_cell(record) if record else ""}</td>'
                )
        body.append(
            f'<tr data-label="{escape(row)}" data-statuses="{escape(" ".join(sorted(statuses)))}">'
            f"<th scope=row><code>{escape(row)}</code></th>{''.join(cells)}</tr>"
        )
    return (
        "<h2>Cells</h2><div class=scroll><table class=grid>"
        f"<thead><tr><th scope=col>cell</th>{head}</tr></thead>"
        f"<tbody>{''.join(body)}</tbody></table></div>"
    )


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
.filters{margin:1rem 0}.filters label{margin-right:1rem}
.group{border-left:4px solid #b3261e;padding:.2rem 1rem;margin:1rem 0}
.new{color:#b3261e}.late{color:#d55e00;font-weight:600}
.changes .regression strong{color:#b3261e}.changes .fix strong{color:#1a7f37}
pre{background:#f6f8fa;padding:.6rem;overflow-x:auto;white-space:pre-wrap;word-break:break-word}
.packages{font-family:monospace;font-size:.8em}
"""

_SCRIPT = """
(function () {
  var rows = Array.prototype.slice.call(document.querySelectorAll("table.grid tbody tr"));
  var text = document.getElementById("filter");
  var status = document.getElementById("status-filter");
  var operation = document.getElementById("operation-filter");
  function apply() {
    var terms = text ? text.value.toLowerCase().split(/\\s+/).filter(Boolean) : [];
    var wanted = status ? status.value : "";
    rows.forEach(function (row) {
      var label = row.getAttribute("data-label").toLowerCase();
      var ok = terms.every(function (t) { return label.indexOf(t) >= 0; });
      if (wanted) { ok = ok && row.getAttribute("data-statuses").split(" ").indexOf(wanted) >= 0; }
      row.hidden = !ok;
    });
    var op = operation ? operation.value : "";
    document.querySelectorAll("table.grid [data-operation]").forEach(function (cell) {
      cell.hidden = Boolean(op) && cell.getAttribute("data-operation") !== op;
    });
  }
  [text, status, operation].forEach(function (el) {
    if (el) { el.addEventListener("input", apply); el.addEventListener("change", apply); }
  });
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
