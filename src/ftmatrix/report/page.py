"""The report's HTML page (index.html), written from a :class:`ReportData`.

One template (``assets/report.html``) filled once with its sections; its style and
scripts live in ``assets/`` too and are inlined, so the page stays one self-contained
file. Every value that comes from a record is escaped: messages are framework output
and may contain anything, markup included.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from functools import cache
from html import escape
from importlib.resources import files
from string import Template

from ftmatrix.cell.status import Status
from ftmatrix.check.results import Results
from ftmatrix.check.verdict import lookup_table
from ftmatrix.report.first_screen import cell_names, default_pivot_axes, trend_text
from ftmatrix.report.model import ReportData
from ftmatrix.report.notices import missing_html, notices_html, unfinished_html
from ftmatrix.report.overview import (
    fixed_axes_html,
    render_compatibility,
    render_headline,
    render_hud,
)
from ftmatrix.report.page_failures import causes_html, changes_html, failures_html
from ftmatrix.report.page_grid import pivot_controls_html, pivot_html
from ftmatrix.report.page_installability import installability_html
from ftmatrix.report.probes import probes_html
from ftmatrix.report.status_chips import status_chip, status_css

# The page's scripts, in the order they run: state.js and records.js are shared by those after.
SCRIPTS = ("state.js", "records.js", "pivot.js", "overview.js", "stack.js", "report.js")


def render_html(data: ReportData) -> str:
    """One self-contained HTML page: no script or style is fetched from anywhere."""
    grid, entries, values = data.grid, data.entries, data.axes
    axes = default_pivot_axes(data.shown)
    names = cell_names(grid.records, data.shown.varying)
    return _page_template().substitute(
        style=_asset("report.css") + status_css(),
        generated_at=escape(data.generated_at.isoformat(timespec="seconds")),
        records=len(grid.records),
        cells=len(grid.rows),
        runs=escape(", ".join(grid.runs) or "none"),
        fixed_axes=fixed_axes_html(data.shown),
        missing=notices_html(data.in_progress, data.unreadable)
        + missing_html(data.missing)
        + unfinished_html(data.unfinished),
        headline=render_headline(
            grid.records, data.changes, data.causes, comparison=data.comparison
        ),
        counts=_summary(Counter(r.status for r in grid.records), data.reused),
        legend=_legend(Counter(r.status for r in grid.records)),
        compatibility=render_compatibility(entries, values),
        hud=render_hud(entries, values, data.shown),
        pivot_controls=pivot_controls_html(grid, values, axes, names),
        pivot=pivot_html(grid, entries, values, axes, names),
        changes=changes_html(data.changes, comparison=data.comparison),
        groups=causes_html(data.causes),
        trend=_trend(data.trend),
        stack_checker=_stack_checker(data.results),
        failures=failures_html(grid),
        probes=probes_html(data.probes, data.probe_outcomes),
        installability=installability_html(data.installability),
        script="\n".join(_asset(name) for name in SCRIPTS),
    )


def _summary(counts: Counter[Status], reused: Mapping[str, str]) -> str:
    # How many of each status is in the legend, beside what the status means.
    chips = ""
    if reused:
        chips += (
            f'<li class=reused title="results carried from an earlier run: lock, cases and '
            f'hardware unchanged">reused {len(reused)} {"cell" if len(reused) == 1 else "cells"}'
            "</li>"
        )
    if not counts:
        chips = "<li>No records yet.</li>"
    return f"<ul class=counts>{chips}</ul>" if chips else ""


def _legend(counts: Counter[Status]) -> str:
    # Open, not folded away: a first-time reader needs it to read the colours at all.
    items = "".join(
        f"<div><dt>{status_chip(status)}</dt><dd><strong class=count>{counts[status]}</strong> "
        f"{escape(status.meaning)}</dd></div>"
        for status in Status
    )
    return f"<section class=legend aria-label=Legend><dl>{items}</dl></section>"


def _trend(trend: Mapping[str, list[tuple[str, float]]]) -> str:
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
            f"<td>{escape(trend_text(points))}</td></tr>"
        )
    return f"<h2>Pass rate per operation</h2><table class=trend>{''.join(rows)}</table>"


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
