"""The compatibility report: HTML for people, Markdown for job summaries, JSON for tools.

Pure functions from the grid, failure groups and changes to text; :func:`render_report`
is the only I/O. Every value that comes from a record is escaped: messages are
framework output and may contain anything, markup included. The page is one template
(``assets/report.html``) filled once with its sections; its style and scripts live in
``assets/`` too and are inlined, so the page stays one self-contained file.
"""

from __future__ import annotations

import json
import re
import shlex
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import datetime
from functools import cache
from html import escape
from importlib.resources import files
from pathlib import Path
from string import Template
from typing import Any

from ftmatrix.cell.records import WHOLE_CELL, Record, write_atomically
from ftmatrix.cell.signature import clean_paths, clean_paths_in
from ftmatrix.cell.status import PROBLEM_STATUSES, Status
from ftmatrix.check.results import KnownIssueLink, Results, member_key, results_of
from ftmatrix.check.verdict import lookup_table
from ftmatrix.constraints import write_constraints
from ftmatrix.known_issues import KnownIssue, load_known_issues
from ftmatrix.messages import conflict_summary, headline
from ftmatrix.proofs import EntryProof
from ftmatrix.report.changes import StatusChange, changes_since_previous
from ftmatrix.report.failures import FailureGroup, failure_groups
from ftmatrix.report.grid import (
    DEFAULT_COLUMNS,
    DEFAULT_ROWS,
    Grid,
    GridEntry,
    build_grid,
    grid_axes,
    grid_entries,
    pivot,
    pivot_data,
    record_anchor,
    reuse_note,
    reused_cells,
    status_css_name,
    unverified,
    worst_of,
)
from ftmatrix.report.installability import FINDING_WORDS, read_installability
from ftmatrix.report.notices import notices_html, notices_markdown, quarantined
from ftmatrix.report.overview import group_id, render_compatibility, render_headline, render_hud
from ftmatrix.run_progress import RunInProgress
from ftmatrix.store import load_findings, load_proofs, newest_records, pass_rate_table

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


def reproduce_command(record: Record) -> str:
    """The one command that rebuilds this cell and reruns this case locally."""
    selector = shlex.quote(f"matrix({record.cell_label})")
    command = f"nox -s {selector}"
    if record.case != WHOLE_CELL:
        command += f" -- {shlex.quote(record.case)}"
    return command


def render_html(
    grid: Grid,
    *,
    generated_at: datetime,
    problems: Sequence[str] = (),
    groups: Sequence[FailureGroup] = (),
    changes: Sequence[StatusChange] = (),
    trend: dict[str, list[tuple[str, float]]] | None = None,
    missing: Sequence[str] = (),
    probes: Sequence[Record] = (),
    installability: Mapping[str, Any] | None = None,
    results: Results | None = None,
    notices: str = "",
) -> str:
    """One self-contained HTML page: no script or style is fetched from anywhere.

    ``missing``: planned cells without a record of the night (shown first, loudly);
    ``probes``: the cap probes' records (shown apart, never in the grid);
    ``installability``: the plan's findings (:func:`read_installability`);
    ``results``: :func:`check_results` of the grid and groups, where the caller has it;
    ``notices``: :mod:`ftmatrix.report.notices`' section (a run in progress, damaged records)."""
    counts = Counter(r.status for r in grid.records)
    entries = grid_entries(grid.records)
    values = grid_axes(entries)
    unreadable = "".join(f"<li>{escape(clean_paths(p))}</li>" for p in problems)
    return _page_template().substitute(
        style=_asset("report.css") + _status_css(),
        generated_at=escape(generated_at.isoformat(timespec="seconds")),
        records=len(grid.records),
        cells=len(grid.rows),
        runs=escape(", ".join(grid.runs) or "none"),
        missing=notices + _missing_html(missing),
        headline=render_headline(grid.records, changes, groups),
        counts=_summary(counts, reused_cells(grid.records)),
        legend=_legend(),
        compatibility=render_compatibility(entries, values),
        hud=render_hud(entries, values),
        pivot_controls=_filters(grid, values),
        pivot=_grid_table(grid, entries, values),
        changes=_changes(changes),
        groups=_groups(groups),
        trend=_trend(trend or {}),
        stack_checker=_stack_checker(results or check_results(grid, groups)),
        failures=_failures(grid),
        probes=_probes_html(probes),
        installability=_installability_html(installability),
        script="\n".join(_asset(name) for name in SCRIPTS),
        unreadable=(
            f"<h2>Unreadable records</h2><ul class=problems>{unreadable}</ul>\n"
            if unreadable
            else ""
        ),
    )


# The page's scripts, in the order they run: state.js and records.js are shared by those after.
SCRIPTS = ("state.js", "records.js", "pivot.js", "overview.js", "stack.js", "report.js")


def render_markdown(
    grid: Grid,
    groups: Sequence[FailureGroup] = (),
    changes: Sequence[StatusChange] = (),
    missing: Sequence[str] = (),
) -> str:
    """A compact summary for a GitHub job summary."""
    counts = Counter(r.status for r in grid.records)
    reused = reused_cells(grid.records)
    lines = ["# ftmatrix compatibility report", ""]
    if missing:
        lines += [f"**{_missing_headline(len(missing))}**", ""]
        lines += [f"- {_md_code(label)}" for label in missing] + [""]
    counted = ", ".join(f"{counts[s]} {s.value}" for s in Status if counts[s]) or "No records."
    if reused:
        counted += (
            f"; {len(reused)} of {len(grid.rows)} cells reused (unchanged since an earlier run)"
        )
    lines.append(counted)
    lines += ["", "| cell | " + " | ".join(_md(c) for c in grid.columns) + " |"]
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
        note = f" ({_md(f'reused, unchanged since {reused[row]}')})" if row in reused else ""
        lines.append(f"| {_md(row)}{note} | " + " | ".join(values) + " |")
    if changes:
        lines += ["", "## Changed since the previous run", ""]
        for change in changes:
            moved = ", ".join(f"{k} {a}->{b}" for k, (a, b) in change.moved_packages.items())
            lines.append(
                f"- **{change.kind}** {_md_code(change.after.cell_label)} "
                f"{_md_code(change.after.case)}: "
                f"{change.before.status.value} -> {change.after.status.value}"
                + (f" (moved: {_md(moved)})" if moved else "")
            )
    if groups:
        lines += ["", "## Failures by cause", ""]
        for group in groups:
            first = headline(group.message)
            known = (
                "known: "
                + "; ".join(
                    (
                        _md_link(c.id, c.upstream)
                        if c.upstream
                        else f"{_md(c.id)} ({_md(c.reported)})"
                    )
                    + f" ({_md(group.claims[c.id])})"
                    for c in group.causes
                )
                if group.causes
                else "**unexplained**"
            )
            lines.append(
                f"- {len(group.records)} x {group.status.value} {known}: {_md(first[:200])}"
                + (f" ({_md(group.blame)})" if group.blame else "")
            )
    problems = [r for r in grid.records if r.status in PROBLEM_STATUSES]
    if problems:
        lines += ["", "## Problems", ""]
        for record in problems:
            detail = record.message or record.reason or ""
            first = headline(detail)
            lines.append(
                f"- **{record.status.value}** {_md_code(record.cell_label)} "
                f"{_md_code(record.case)}: "
                f"{_md(first[:300])}"
            )
    return "\n".join(lines) + "\n"


def render_json(
    grid: Grid,
    groups: Sequence[FailureGroup] = (),
    changes: Sequence[StatusChange] = (),
    *,
    probes: Sequence[Record] = (),
    installability: Mapping[str, Any] | None = None,
    missing: Sequence[str] = (),
    in_progress: Sequence[RunInProgress] = (),
    unreadable: Sequence[str] = (),
) -> str:
    """Machine-readable results (results.json): the latest record of every (cell, case),
    groups, changes, the cap probes, the plan's findings, the planned cells without
    records, the runs still in progress and the record lines that could not be read."""
    counts = Counter(r.status.value for r in grid.records)
    payload = {
        "schema": 1,
        "runs": list(grid.runs),
        "counts": dict(sorted(counts.items())),
        "reused_cells": reused_cells(grid.records),
        "records": [r.to_dict() for r in grid.records],
        "failure_groups": [
            {
                "key": g.key,
                "status": g.status.value,
                "exception_type": g.exception_type,
                "message": g.message,
                "blame": g.blame,
                "cells": [r.cell_label for r in g.records],
                "cases": sorted({r.case for r in g.records}),
                "versions": g.versions,
                "known_issue": _cause(g.known, g.claims) if g.known else None,
                "known_issues": [_cause(c, g.claims) for c in g.causes],
                "members": [[r.cell_id, r.case] for r in g.records],
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
        "probes": [
            {"cap": cap, "hardware": hw, "outcome": text}
            for (cap, hw), text in probe_summaries(probes).items()
        ],
        "probe_records": [r.to_dict() for r in probes],
        "installability": installability,
        "planned_without_records": list(missing),
        "in_progress": [run.to_dict() for run in in_progress],
        "unreadable_records": [clean_paths(p) for p in unreadable],
    }
    return json.dumps(payload, indent=1, sort_keys=True, default=str) + "\n"


def render_report(
    out_dir: Path,
    *,
    now: datetime,
    problems: Sequence[str] = (),
    known_issues: Path | None = None,
    missing: Sequence[str] = (),
    in_progress: Sequence[RunInProgress] = (),
) -> Grid:
    """Write the reports from ``out_dir``'s history; it reads the history, never writes it.

    Merge the new records first (:func:`ftmatrix.store.merge_outputs`) and pass on the
    unreadable ones it names as ``problems``; ``in_progress``: the runs still going on
    (:func:`ftmatrix.run_progress.runs_in_progress`), said first. ``known_issues`` (a
    known_issues.yaml) links failure groups to upstream reports.
    """
    store = out_dir / "history.sqlite"
    # Published text shows no machine's paths: records keep them (raw_*), pages not.
    latest = [r.published() for r in newest_records(store)]
    # Cap probes ran past a declared requirement: shown apart, never in the grid.
    probes = [r for r in latest if r.beyond_cap]
    plain = [r for r in latest if not r.beyond_cap]
    grid = build_grid(plain)
    known = load_known_issues(known_issues) if known_issues else ()
    findings = [clean_paths_in(f) for f in load_findings(store)]  # published too
    proofs = {k: EntryProof.from_mapping(v) for k, v in load_proofs(store).items()}
    groups = failure_groups(grid.records, known, findings, proofs)
    changes = changes_since_previous(
        [
            r
            for r in [*(x.published() for x in newest_records(store, back=1)), *latest]
            if not r.beyond_cap
        ]
    )
    installability = read_installability(out_dir)
    results = check_results(grid, groups)
    unreadable = [*problems, *quarantined(out_dir / "records")]
    html = render_html(
        grid,
        generated_at=now,
        problems=problems,
        groups=groups,
        changes=changes,
        trend=pass_rate_table(store),
        missing=missing,
        probes=probes,
        installability=installability,
        results=results,
        notices=notices_html(in_progress, unreadable),
    )
    title, rest = render_markdown(grid, groups, changes, missing).split("\n\n", 1)
    notices = "\n".join(notices_markdown(in_progress, unreadable))
    markdown = f"{title}\n\n{notices}{chr(10) if notices else ''}{rest}" + probes_markdown(probes)
    results_json = render_json(
        grid,
        groups,
        changes,
        probes=probes,
        installability=installability,
        missing=missing,
        in_progress=in_progress,
        unreadable=unreadable,
    )
    write_atomically(out_dir / "index.html", html)
    write_atomically(out_dir / "summary.md", markdown)
    write_atomically(out_dir / "results.json", results_json)
    write_badges(out_dir / "badges", grid)
    # The grid's records are the newest plain ones of latest, all derive_constraints reads.
    write_constraints(out_dir / "constraints", latest, derived=results.constraints)
    return grid


def probe_summaries(probes: Sequence[Record]) -> dict[tuple[str, str], str]:
    """Per (cap, hardware class): "past it: sft pass, grpo fail", the worst of each operation."""
    worst: dict[tuple[str, str], dict[str, Status]] = {}
    for record in probes:
        per = worst.setdefault((record.beyond_cap or "", record.hardware_class), {})
        per[record.operation] = worst_of(
            [*(x for x in [per.get(record.operation)] if x), record.status]
        )[0]
    return {
        key: ", ".join(f"{op} {status.value}" for op, status in sorted(per.items()))
        for key, per in sorted(worst.items())
    }


def _cap_owner(cap: str) -> str:
    """``unsloth 2026.10.7: trl<=1.15.0`` -> ``unsloth's cap trl<=1.15.0``."""
    parts = []
    for one in cap.split(";"):
        owner, _, requirement = one.strip().partition(":")
        parts.append(f"{owner.split()[0]}'s cap {requirement.strip()}" if requirement else one)
    return " and ".join(parts)


def _probes_html(probes: Sequence[Record]) -> str:
    if not probes:
        return ""
    cells: dict[tuple[str, str], set[str]] = {}
    for record in probes:
        cells.setdefault((record.beyond_cap or "", record.hardware_class), set()).add(
            record.cell_label
        )
    items = "".join(
        f"<li><strong>{escape(hw)}</strong>: installs only past {escape(_cap_owner(cap))} "
        f"({escape(cap)}); past it: {escape(text)} "
        f"<span class=moved>{escape(', '.join(sorted(cells[(cap, hw)])))}</span></li>"
        for (cap, hw), text in probe_summaries(probes).items()
    )
    return (
        "<h2 id=probes>Past declared caps (probes)</h2>"
        "<p>Cells that install only with a declared requirement overridden (uv's "
        "<code>--override</code>); never mixed with the cells above. "
        "<code>reports/constraints/caps.txt</code> says whether each cap is justified.</p>"
        f"<ul class=probes>{items}</ul>"
    )


def probes_markdown(probes: Sequence[Record]) -> str:
    """The job summary's section on cap probes (empty without probes)."""
    if not probes:
        return ""
    lines = ["", "## Past declared caps (probes)", ""]
    for (cap, hw), text in probe_summaries(probes).items():
        lines.append(
            f"- {_md(hw)}: installs only past {_md(_cap_owner(cap))}; past it: {_md(text)}"
        )
    return "\n".join(lines) + "\n"


def _installability_html(data: Mapping[str, Any] | None) -> str:
    """The plan's findings: per pair of axes with a pair that cannot co-install, a matrix."""
    if not data or not data.get("pairs"):
        return ""
    reasons = {}
    for finding in [*data.get("impossible_pairs", []), *data.get("uninstallable_values", [])]:
        reasons[tuple(sorted(finding["pins"].items(), key=str))] = finding.get("reason") or ""
    tables: dict[tuple[str, str], dict[tuple[str, str], bool]] = {}
    for a, va, b, vb, ok in data["pairs"]:
        tables.setdefault((a, b), {})[(va or "none", vb or "none")] = ok
    parts = [
        "<h2 id=installability>What cannot co-install</h2>",
        "<p>Pairs of axis values the resolver proved cannot be installed together: findings "
        "of the plan, not cells. Each pair of axes with such a pair is shown; every pair "
        "marked co-install that occurs in an installable combination runs in a cell.</p>",
    ]
    for (a, b), pairs in tables.items():
        if all(pairs.values()):
            continue
        rows = list(dict.fromkeys(va for va, _ in pairs))
        columns = list(dict.fromkeys(vb for _, vb in pairs))
        head = "".join(f"<th>{escape(b)} {escape(c)}</th>" for c in columns)
        body = []
        for row in rows:
            tds = []
            for column in columns:
                ok = pairs.get((row, column))
                key = tuple(
                    sorted(
                        [
                            (a, None if row == "none" else row),
                            (b, None if column == "none" else column),
                        ],
                        key=str,
                    )
                )
                single = [v for k, v in reasons.items() if len(k) == 1 and k[0] in key]
                why = reasons.get(key) or (single[0] if single else "")
                mark = "" if ok is None else ("co-install" if ok else "cannot")
                css = "pass" if ok else "uninstallable"
                tds.append(f"<td class={css} title='{escape(why)}'>{mark}</td>")
            body.append(f"<tr><th>{escape(a)} {escape(row)}</th>{''.join(tds)}</tr>")
        parts.append(f"<table class=installability><tr><th></th>{head}</tr>{''.join(body)}</table>")
    impossible = [
        *data.get("uninstallable_values", []),
        *data.get("impossible_pairs", []),
        *data.get("uncovered_pairs", []),
        *data.get("unresolved", []),
    ]
    if impossible:
        items = "".join(
            f"<li><code>{escape(' x '.join(f'{k} {v}' for k, v in f['pins'].items()))}</code> "
            f"({escape(FINDING_WORDS.get(f.get('kind', ''), ''))}): "
            f"{escape(conflict_summary(f.get('reason') or ''))}</li>"
            for f in impossible
        )
        parts.append(f"<ul class=installability>{items}</ul>")
    return "".join(parts)


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


def _summary(counts: Counter[Status], reused: Mapping[str, str]) -> str:
    chips = "".join(
        f"<li>{_badge(status)} {counts[status]}</li>" for status in Status if counts[status]
    )
    if reused:
        chips += (
            f'<li class=reused title="results carried from an earlier run: lock, cases and '
            f'hardware unchanged">reused {len(reused)} {"cell" if len(reused) == 1 else "cells"}'
            "</li>"
        )
    return f"<ul class=counts>{chips or '<li>No records yet.</li>'}</ul>"


def _missing_headline(count: int) -> str:
    cells = "cell" if count == 1 else "cells"
    return (
        f"{count} planned {cells} produced no records tonight (the job failed before its "
        "records were kept, or was cancelled): no verdict for them"
    )


def _missing_html(missing: Sequence[str]) -> str:
    if not missing:
        return ""
    items = "".join(f"<li><code>{escape(label)}</code></li>" for label in missing)
    return (
        f"<section id=missing class=problems><h2>{escape(_missing_headline(len(missing)))}"
        f"</h2><ul>{items}</ul></section>"
    )


def _legend() -> str:
    rows = "".join(
        f"<tr><td>{_badge(status)}</td><td>{escape(status.meaning)}</td></tr>" for status in Status
    )
    return f"<details class=legend><summary>Legend</summary><table>{rows}</table></details>"


def _badge(status: Status) -> str:
    # Colours come from one rule per status (see _status_css): a 500-cell grid repeats
    # this span thousands of times.
    return f'<span class="status s-{status_css_name(status)}">{escape(status.value)}</span>'


def _status_css() -> str:
    return "".join(
        f".s-{status_css_name(status)}{{background:{background};color:{colour}}}"
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


# Above this many results the any-two-axes table is drawn by the page's script only.
SERVER_PIVOT_LIMIT = 3000


def _grid_table(grid: Grid, entries: Sequence[GridEntry], values: dict[str, list[str]]) -> str:
    # The default view, rendered here so the page reads with scripts off; the script
    # re-renders the same pivot from the embedded data when the axes or filters change.
    if not grid.rows:
        return "<p>No records found. Run <code>nox -s matrix</code> first.</p>"
    intro = (
        "<p class=meta>A result is one case in one cell; a cell that never got to run its"
        " cases (say, uninstallable) counts once for each of them. A grid cell holding"
        " several results shows the worst, how many have it and out of how many; open"
        " it for the list.</p>"
        f"<p id=pivot-summary class=meta>{len(entries)} results,"
        f" rows: {DEFAULT_ROWS}, columns: {DEFAULT_COLUMNS}.</p>"
    )
    if len(entries) > SERVER_PIVOT_LIMIT:
        # A large matrix: the compact grid above reads without scripts; this table is
        # drawn by the script when scrolled to, so it costs neither bytes nor first paint.
        return (
            intro + "<div class=scroll id=grid-holder><noscript><p>This table needs scripts; the"
            " grid above and the failures below do not.</p></noscript></div>"
            + _pivot_data(entries, values)
        )
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
        intro + "<div class=scroll id=grid-holder><table class=grid>"
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
            f' <a href="#{record_anchor(m.record)}">details</a>'
            if m.record.status in PROBLEM_STATUSES
            else ""
        )
        + (f"<div class=msg>{escape(h[:240])}</div>" if (h := m.headline) else "")
        + "</li>"
        for m in worst_first
    )
    tally = Counter(m.record.status for m in members)
    breakdown = ", ".join(f"{tally[s]} {s.value}" for s in sorted(tally, key=lambda s: -s.severity))
    return (
        f'<details class=combo><summary title="{breakdown}">{_badge(status)} {count}/{total}'
        f"</summary><ul>{items}</ul></details>"
    )


def _pivot_data(entries: Sequence[GridEntry], values: dict[str, list[str]]) -> str:
    # JSON inside a script element: '<' escaped so no value can close the element.
    data = json.dumps(pivot_data(entries, values), separators=(",", ":")).replace("<", "\\u003c")
    return f'<script type="application/json" id=pivot-data>{data}</script>'


def _grid_cell(record: Record) -> str:
    text = unverified(record) or record.message or record.reason or ""
    first = headline(text)
    link = ""
    if record.status in PROBLEM_STATUSES:
        link = f' <a href="#{record_anchor(record)}">details</a>'
    detail = f"<div class=msg>{escape(first[:240])}</div>" if first else ""
    note = reuse_note(record)
    reused = f"<div class=reused>{escape(note)}</div>" if note else ""
    return f"{_badge(record.status)}{link}{detail}{reused}"


def _changes(changes: Sequence[StatusChange]) -> str:
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
        if group.causes:
            known = "".join(_cause_html(c, group.claims[c.id]) for c in group.causes)
        else:
            known = (
                "<p><strong class=new>unexplained</strong>: no known issue's signature fits it</p>"
            )
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
            f'<li><a href="#{record_anchor(r)}"><code>{escape(r.cell_label)}</code> '
            f"<code>{escape(r.case)}</code></a></li>"
            for r in group.records
        )
        sections.append(
            f'<section class=group id="{group_id(group)}"><h3>{_badge(group.status)} '
            f"{len(group.records)} x "
            f"<code>{escape(group.exception_type or '')}</code> {escape(first[:300])}</h3>"
            + (f"<p class=blame>{escape(group.blame)}</p>" if group.blame else "")
            + f"{known}{late}<p class=versions>Versions: {versions}</p>"
            + (f"<ul class=first-bad>{bad}</ul>" if bad else "")
            + f"<details><summary>{len(group.records)} cells</summary><ul>{cells}</ul></details>"
            "</section>"
        )
    return "<h2>Failures by cause</h2>" + "".join(sections)


def _cause_html(cause: KnownIssue, proven: str) -> str:
    """One known issue beside a failure group: its owning report, its range, its workaround."""
    link = (
        f'<a href="{escape(cause.upstream)}">{escape(cause.id)}</a>'
        if cause.upstream and cause.upstream.startswith("https://")
        else f"{escape(cause.id)} ({escape(cause.reported)})"
    )
    text = f"known issue {link}: {escape(cause.title)} <span class=claim>{escape(proven)}</span>"
    if cause.workaround:
        text += f" <em>Workaround: {escape(cause.workaround)}</em>"
    return f"<p class=cause>{text}</p>"


def _link(cause: KnownIssue, proven: Mapping[str, str]) -> KnownIssueLink:
    return KnownIssueLink(
        id=cause.id,
        title=cause.title,
        upstream=cause.reported,
        workaround=cause.workaround,
        claim=proven[cause.id],
    )


def _cause(cause: KnownIssue, proven: Mapping[str, str]) -> dict[str, Any]:
    return {**cause.to_dict(), "claim": proven[cause.id]}


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


def check_results(grid: Grid, groups: Sequence[FailureGroup]) -> Results:
    """What check reads from this report's results.json (its records, its groups' known
    issues and blame), taken from what results.json is written from."""
    return results_of(
        grid.records,
        source="results.json",
        runs=grid.runs,
        known={
            member_key(r.cell_id, r.case): tuple(_link(c, g.claims) for c in g.causes)
            for g in groups
            for r in g.records
            if g.causes
        },
        blame={g.signature_key: g.blame for g in groups if g.blame},
    )


def _stack_checker(results: Results) -> str:
    # JSON inside a script element: '<' escaped so no value can close the element.
    data = json.dumps(lookup_table(results), separators=(",", ":")).replace("<", "\\u003c")
    return (
        "<h2>Does my stack work?</h2>"
        "<p>Paste the output of <code>pip freeze</code>: the answer is what "
        "<code>ftmatrix check --freeze</code> says with this report's results.json.</p>"
        '<textarea id=freeze rows=5 cols=60 placeholder="trl==0.19.1"></textarea> '
        "<button id=check type=button>Check</button><div id=verdict></div>"
        f'<script type="application/json" id=stack-data>{data}</script>'
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
        ("result", escape(reuse_note(record) or "")),
    ]
    rows = "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in facts if v)
    message = record.message or record.reason or ""
    packages = ", ".join(
        f"{k}=={v}" + (" (host)" if k in record.host_packages else "")
        for k, v in record.packages.items()
    )
    traceback = (
        f"<details><summary>traceback</summary><pre>{escape(record.traceback)}</pre></details>"
        if record.traceback
        else ""
    )
    return (
        f'<details class=failure id="{record_anchor(record)}">'
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


# Markdown's punctuation: escaped, a record's text is never a link, emphasis, code span or
# table cell boundary. HTML's three are written as entities, so no raw HTML gets through.
# (Our text never starts a line, so #, -, + and 1. cannot make headings or lists.)
_MD_PUNCTUATION = frozenset("\\`*_[]|~!")
_HTML_ENTITIES = {"<": "&lt;", ">": "&gt;", "&": "&amp;", '"': "&quot;"}


def _md(text: str) -> str:
    """Text shown as itself in GitHub-flavoured Markdown, on one line."""
    line = " ".join(text.splitlines())
    return "".join(
        _HTML_ENTITIES.get(c)
        or (f"\\{c}" if c in _MD_PUNCTUATION and not _intraword_underscore(line, i) else c)
        for i, c in enumerate(line)
    )


def _intraword_underscore(line: str, i: int) -> bool:
    """An ``_`` between two letters or digits (``test_sft``) never emphasises: kept as is."""
    return (
        line[i] == "_" and 0 < i < len(line) - 1 and line[i - 1].isalnum() and line[i + 1].isalnum()
    )


def _md_code(text: str) -> str:
    """A code span of ``text``: its fence longer than any run of backticks inside."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    line = " ".join(text.splitlines())
    pad = " " if line.startswith("`") or line.endswith("`") else ""  # stripped when rendered
    return f"{fence}{pad}{line}{pad}{fence}"


def _md_link(label: str, url: str) -> str:
    """A Markdown link to an http(s) page; any other address is shown as text only."""
    if re.fullmatch(r"https?://[^\s<>()\[\]`]+", url):
        return f"[{_md(label)}]({url})"
    return _md(label)


# The page's template, style and scripts, inlined by render_html. pivot.js re-renders the
# grid for any two axes; record text only ever reaches the page through its textContent
# and setAttribute, never as markup.
@cache
def _asset(name: str) -> str:
    return (files("ftmatrix.report") / "assets" / name).read_text(encoding="utf-8")


@cache
def _page_template() -> Template:
    # $-placeholders: every value substituted is markup this module escaped, or an asset.
    return Template(_asset("report.html"))
