"""What the report's first screen names: the axes that vary across its cells, the rest
said once above the grid, and labels that show only what differs between cells.

A cell label spells every axis (``cpu-py3.11-torch2.13.0-tf4.57.6-trl1.16.0``); where
only transformers varies, two such labels are a string to diff by eye. Pure functions
over the grid's axes (:func:`ftmatrix.report.grid.grid_axes`) and records' pins.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from packaging.utils import canonicalize_name

from ftmatrix.cell.record import Record
from ftmatrix.plan import SHORT_NAMES
from ftmatrix.report.grid import CASE_AXES, CELL_AXES, UNPINNED

# The pair people ask about most ("does trl X work with transformers Y?"): first when both vary.
PREFERRED_AXES = ("transformers", "trl")


@dataclass(frozen=True, kw_only=True)
class AxesShown:
    """The cell-level axes (hardware, python, pinned packages) split by whether they vary."""

    varying: tuple[str, ...]  # more than one value among the cells shown, in grid order
    fixed: Mapping[str, str]  # axis -> its one value, said once above the grid

    def fixed_text(self) -> str:
        """``hardware cpu, python 3.11, torch 2.13.0``: what every cell shares."""
        return ", ".join(f"{axis} {value}" for axis, value in self.fixed.items())


def axes_shown(values: Mapping[str, Sequence[str]]) -> AxesShown:
    """Split the grid's cell-level axes into those that vary and those that do not.

    ``values``: axis -> its values (``grid_axes``); ``cell`` itself and the case-level
    axes are neither: every cell has its own label, every cell runs the cases.
    """
    varying, fixed = [], {}
    for axis, vs in values.items():
        if axis == "cell" or axis in CASE_AXES:
            continue
        if len(vs) > 1:
            varying.append(axis)
        elif vs:
            fixed[axis] = vs[0]
    preferred = [a for a in PREFERRED_AXES if a in varying]
    ordered = preferred + [a for a in varying if a not in preferred]
    return AxesShown(varying=tuple(ordered), fixed=fixed)


def default_pivot_axes(shown: AxesShown) -> tuple[str, str]:
    """The any-two-axes table's first view (rows, columns): two axes that vary.

    Two varying package (or hardware, python) axes where there are (transformers x trl
    first); one of them against the operations where only one varies; operations
    against the cells where nothing does (a single cell).
    """
    if len(shown.varying) >= 2:
        return shown.varying[0], shown.varying[1]
    if shown.varying:
        return "operation", shown.varying[0]
    return "operation", "cell"


def short_label(record: Record, varying: Sequence[str]) -> str:
    """The record's cell named by the axes that vary only, in the label's own spelling
    (``tf4.57.6``, ``nounsloth``, ``py3.12``), so it still reads as a selector's glob."""
    parts = [_label_part(record, axis) for axis in varying]
    return "-".join(p for p in parts if p) or record.cell_label


def cell_names(records: Iterable[Record], varying: Sequence[str]) -> dict[str, str]:
    """Cell label -> its short name (:func:`short_label`); a label whose short name another
    cell shares (cells of two profiles that differ in what is not an axis) keeps itself."""
    names = {r.cell_label: short_label(r, varying) for r in records}
    taken = Counter(names.values())
    return {label: name if taken[name] == 1 else label for label, name in names.items()}


def _label_part(record: Record, axis: str) -> str:
    if axis == "hardware":
        return record.hardware_class
    if axis == "python":
        return f"py{record.python}"
    if axis in CELL_AXES:
        return ""
    short = SHORT_NAMES.get(canonicalize_name(axis), axis)
    if axis not in record.pins:
        return f"{short} {UNPINNED}"
    version = record.pins[axis]
    return f"{short}{version}" if version is not None else f"no{short}"


def trend_text(points: Sequence[tuple[str, float]]) -> str:
    """The pass rate beside an operation's trend, as it reads with one run or many."""
    if not points:
        return ""
    rate = f"{points[-1][1]:.0%}"
    if len(points) == 1:
        return f"{rate} (the first run: no trend yet)"
    previous = points[-2][1]
    change = "same as" if previous == points[-1][1] else f"{previous:.0%} in"
    return f"{rate} in the newest run ({change} the run before; {len(points)} runs shown)"
