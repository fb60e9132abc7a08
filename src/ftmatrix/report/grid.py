"""The grid: the latest record of every (cell, case), arranged and pivoted as data.

Pure functions from records to the structures the report renders: :class:`Grid`
(cells x cases, the worst record shown), :class:`GridEntry` (one result, whole-cell
records spread over the cases their cell never ran), :func:`pivot` over any two axes,
and :func:`pivot_data`, the same entries as compact JSON for the page's script.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ftmatrix.cell.record import WHOLE_CELL, Record
from ftmatrix.cell.status import PROBLEM_STATUSES, Status
from ftmatrix.messages import headline
from ftmatrix.record_order import newest_per
from ftmatrix.versions import version_order


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
    records = list(records)
    newest = newest_per(records, key=lambda r: r.cell_id)
    return [r for r in records if r.run_id == newest[r.cell_id].run_id]


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

    @property
    def headline(self) -> str:
        """The line of its record's message (or reason) worth showing in the grid; for a
        pass whose contract could not be checked, why (never a plain pass)."""
        return unverified(self.record) or headline(self.record.message or self.record.reason)


def unverified(record: Record) -> str | None:
    """Why a passing case could not check one of its contracts, or None.

    A case records ``<name>_contract: "unverified: <why>"`` where a release computes a
    contract's quantity out of its reach (trl 0.14's GRPO log-probs inside compute_loss).
    """
    if record.status is not Status.PASS:
        return None
    for name, value in sorted(record.metrics.items()):
        if name.endswith("_contract") and isinstance(value, str) and value.startswith("unverified"):
            return value
    return None


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
        axis: sorted({axis_value(e, axis) for e in entries}, key=version_order)
        for axis in (*CELL_AXES, *packages, *CASE_AXES)
    }


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
        text = entry.headline[:240]
        anchor = -1
        if record.status in PROBLEM_STATUSES or record.case == WHOLE_CELL:
            anchor = anchors.setdefault(record_anchor(record), len(anchors))
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
        "statuses": [
            [s.value, status_css_name(s), int(s in PROBLEM_STATUSES)] for s in by_severity
        ],
        "cells": cells,
        "records": flat,
        "texts": list(texts),
        "anchors": list(anchors),
        "whole": sorted(whole),
    }


def reuse_note(record: Record) -> str | None:
    """``reused (unchanged since RUN)`` for a result carried from an earlier run, else None."""
    return f"reused (unchanged since {record.reused_from})" if record.reused_from else None


def reused_cells(records: Iterable[Record]) -> dict[str, str]:
    """cell label -> the run its results were reused from, for the cells this run reused."""
    return {r.cell_label: r.reused_from for r in records if r.reused_from}


def record_anchor(record: Record) -> str:
    """The id of the record's detail section on the page (what ``#...`` links point to)."""
    safe = "".join(ch if ch.isalnum() else "-" for ch in record.case)
    return f"f-{record.cell_id}-{safe}"


def status_css_name(status: Status) -> str:
    """The name a status goes by in the page's style rules and script (``s-<name>``)."""
    return status.name.lower().replace("_", "-")
