"""The page's any-two-axes table: its controls, and its default view (cells x cases)
rendered here so the page reads with scripts off; ``assets/pivot.js`` re-renders it from
the embedded data when the axes or filters change."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from html import escape

from ftmatrix.cell.record import WHOLE_CELL, Record
from ftmatrix.cell.status import PROBLEM_STATUSES, Status
from ftmatrix.messages import headline
from ftmatrix.report.grid import (
    DEFAULT_COLUMNS,
    DEFAULT_ROWS,
    Grid,
    GridEntry,
    pivot,
    pivot_data,
    record_anchor,
    reuse_note,
    unverified,
    worst_of,
)
from ftmatrix.report.status_chips import status_chip

# Above this many results the any-two-axes table is drawn by the page's script only.
SERVER_PIVOT_LIMIT = 3000


def pivot_controls_html(
    grid: Grid,
    values: dict[str, list[str]],
    axes: tuple[str, str] = (DEFAULT_ROWS, DEFAULT_COLUMNS),
    names: Mapping[str, str] | None = None,
) -> str:
    """The table's axes (``axes``: rows, columns first) and filters; hidden until the
    script runs: without it these controls could do nothing. ``names``: each cell's short
    name (what varies), shown in the cell filter with the full label as its title."""
    names = names or {}
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
        + "".join(_filter_option(j, v, names if axis == "cell" else {}) for j, v in enumerate(vs))
        + "</select></label> "
        for i, (axis, vs) in enumerate(values.items())
        if len(vs) > 1  # an axis with one value filters nothing
    )
    return (
        '<form class=filters id=pivot-controls hidden onsubmit="return false">'
        f"<p><label>Rows <select id=row-axis>{axis_options(axes[0])}</select></label> "
        f"<label>columns <select id=column-axis>{axis_options(axes[1])}</select></label> "
        "<label>cells matching <input id=filter type=search "
        'placeholder="e.g. tf5.23 trl1.16"></label> '
        '<label>rows showing <select id=status-filter><option value="">any status</option>'
        f"{status_options}</select></label></p>"
        f"<p class=axis-filters>Filters: {axis_filters}</p></form>"
    )


def _titled(value: str, names: Mapping[str, str]) -> tuple[str, str]:
    """A cell's short name (escaped) and, where it is not the label, the label as a title."""
    shown = names.get(value, value)
    return escape(shown), (f' title="{escape(value)}"' if shown != value else "")


def _filter_option(index: int, value: str, names: Mapping[str, str]) -> str:
    shown, title = _titled(value, names)
    return f'<option value="{index}"{title}>{shown}</option>'


def pivot_html(
    grid: Grid,
    entries: Sequence[GridEntry],
    values: dict[str, list[str]],
    axes: tuple[str, str] = (DEFAULT_ROWS, DEFAULT_COLUMNS),
    names: Mapping[str, str] | None = None,
) -> str:
    """The first view (``axes``: rows, columns) and the data the script redraws from.

    ``names``: cell label -> the name a row or column of cells shows (the axes that vary,
    :func:`ftmatrix.report.first_screen.cell_names`); the full label is its title."""
    names = names or {}

    def heading(axis: str, value: str) -> str:
        shown, title = _titled(value, names if axis == "cell" else {})
        return f"<span{title}>{shown}</span>" if title else shown

    if not grid.rows:
        return "<p>No records found. Run <code>nox -s matrix</code> first.</p>"
    row_axis, column_axis = axes
    summary = (
        f"<p id=pivot-summary class=meta>{len(entries)} results,"
        f" rows: {escape(row_axis)}, columns: {escape(column_axis)}.</p>"
    )
    # Said below the table: the first screen is for the table itself.
    explained = (
        "<p class=meta>A result is one case in one cell; a cell that never got to run its"
        " cases (say, uninstallable) counts once for each of them. A grid cell holding"
        " several results shows the worst, how many have it and out of how many; open"
        " it for the list.</p>"
    )
    if len(entries) > SERVER_PIVOT_LIMIT:
        # A large matrix: the compact grid above reads without scripts; this table is
        # drawn by the script when scrolled to, so it costs neither bytes nor first paint.
        return (
            summary + "<div class=scroll id=grid-holder><noscript><p>This table needs scripts; the"
            " grid above and the failures below do not.</p></noscript></div>"
            + explained
            + _pivot_data(entries, values, names)
        )
    table = pivot(entries, rows=row_axis, columns=column_axis)
    rows = [v for v in values[row_axis] if any((v, c) in table for c in values[column_axis])]
    columns = [c for c in values[column_axis] if any((r, c) in table for r in rows)]
    body = []
    for row in rows:
        members = [table.get((row, column), []) for column in columns]
        spanning = _spanning_record(members)
        if spanning is not None:
            cells = f'<td colspan="{len(columns)}">{_grid_cell(spanning)}</td>'
        else:
            cells = "".join(f"<td>{_combined_cell(m)}</td>" for m in members)
        body.append(f"<tr><th scope=row><code>{heading(row_axis, row)}</code></th>{cells}</tr>")
    head = "".join(f"<th scope=col>{heading(column_axis, c)}</th>" for c in columns)
    return (
        summary + "<div class=scroll id=grid-holder><table class=grid>"
        f"<thead><tr><th scope=col>{escape(row_axis)} \\ {escape(column_axis)}</th>{head}"
        "</tr></thead>"
        f"<tbody>{''.join(body)}</tbody></table></div>"
        + explained
        + _pivot_data(entries, values, names)
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
        f"<li>{status_chip(m.record.status)} <code>{escape(m.record.cell_label)}</code> "
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
        f'<details class=combo><summary title="{breakdown}">{status_chip(status)} {count}/{total}'
        f"</summary><ul>{items}</ul></details>"
    )


def _pivot_data(
    entries: Sequence[GridEntry], values: dict[str, list[str]], names: Mapping[str, str]
) -> str:
    data = pivot_data(entries, values)
    data["names"] = [names.get(label, label) for label in values.get("cell", [])]
    # JSON inside a script element: '<' escaped so no value can close the element.
    text = json.dumps(data, separators=(",", ":")).replace("<", "\\u003c")
    return f'<script type="application/json" id=pivot-data>{text}</script>'


def _grid_cell(record: Record) -> str:
    text = unverified(record) or record.message or record.reason or ""
    first = headline(text)
    link = ""
    if record.status in PROBLEM_STATUSES:
        link = f' <a href="#{record_anchor(record)}">details</a>'
    detail = f"<div class=msg>{escape(first[:240])}</div>" if first else ""
    note = reuse_note(record)
    reused = f"<div class=reused>{escape(note)}</div>" if note else ""
    return f"{status_chip(record.status)}{link}{detail}{reused}"
