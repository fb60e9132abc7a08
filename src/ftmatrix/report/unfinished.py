"""Cells a run stopped in the middle of: cases collected, the cell never marked done.

A run stopped from outside (``timeout`` around nox, a cancelled job, a lost machine, a
cell's session that died) leaves the cell it was in with whole records for the cases that
ended and none for the rest: the report would show the cell with what it has and nothing
else. The files say more. The results plugin lists every case it collected
(``<cell>.jsonl.cases``) and notes the case running (``<cell>.jsonl.current``, one note per
pytest-xdist worker); the runner marks a cell done (``<cell>.done.json``) once its records
are whole. A cell with the list and without the marker, in a run that is over, stopped
before it finished, unless its one record is an ``install-error`` of the whole cell (an
install that failed is finished and has no marker, so a later run tries it again).

Only each cell's newest run counts (the run whose files of the cell changed last): a cell a
later run finished, resumed or reused is not news. ``FTMATRIX_RESUME=1`` with the run's id
runs the cases without a record.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ftmatrix.cell.file_writes import read_json, read_note
from ftmatrix.cell.files import (
    COLLECTED_SUFFIX,
    DONE_SUFFIX,
    OWNER_SUFFIX,
    RECORDS_SUFFIX,
    CellFiles,
)
from ftmatrix.cell.record import WHOLE_CELL, Record
from ftmatrix.cell.records import scan_records
from ftmatrix.cell.redact import Redactor
from ftmatrix.cell.signature import clean_paths
from ftmatrix.cell.status import Status
from ftmatrix.live_runs import lock_held, planned_cells, runs_in_progress

# What `ftmatrix report` and `ftmatrix run` say of them (then each cell's describe()).
UNFINISHED_WARNING = (
    "cell(s) stopped before they finished, so their cases without a record have no verdict"
)

# What a running-case note that is not there means: the run stopped between two cases.
NONE_RUNNING = "none (it stopped between two cases)"

# The files by which a cell shows it ran in a run (its owner lock is taken first; reuse
# writes records and a done marker; the plugin's list of collected cases).
_COLLECTED = COLLECTED_SUFFIX
_CELL_SUFFIXES = (OWNER_SUFFIX, RECORDS_SUFFIX, DONE_SUFFIX, _COLLECTED)


@dataclass(frozen=True, kw_only=True)
class UnfinishedCell:
    """A cell whose newest run stopped while its cases ran."""

    run_id: str
    cell_id: str
    label: str
    collected: int | None  # cases the plugin collected (None: its list cannot be read)
    without_record: int | None  # of those, the cases with no record
    running: tuple[str, ...]  # the cases running when it stopped (one per xdist worker)

    def resume(self) -> str:
        return f"FTMATRIX_RESUME=1 FTMATRIX_RUN_ID={self.run_id}"

    def counted(self) -> str:
        """How many of its collected cases have no record."""
        if self.collected is None:
            return "its list of collected cases cannot be read"
        return f"{self.without_record} of {self.collected} collected case(s) have no record"

    def stopped(self, code: Callable[[str], str] = str, text: Callable[[str], str] = str) -> str:
        """Which cell, in which run, how many cases have no record and what was running;
        ``code`` and ``text`` shape the names and the words for a page or summary.md."""
        running = ", ".join(code(case) for case in self.running) or text(NONE_RUNNING)
        return (
            f"{code(self.label)} (run {text(self.run_id)}): {text(self.counted())}; running "
            f"when it stopped: {running}"
        )

    def describe(self) -> str:
        return f"{self.stopped()}; resume the run to finish it ({self.resume()})"

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "cell_id": self.cell_id,
            "label": self.label,
            "collected": self.collected,
            "without_record": self.without_record,
            "running": list(self.running),
            "resume": self.resume(),
        }


def unfinished_cells(
    records_root: Path, env: Mapping[str, str], going_on: set[str] | None = None
) -> list[UnfinishedCell]:
    """The cells under ``records_root`` whose newest run stopped before it finished them.

    Runs still going on are left out (the report says they are in progress; ``going_on``:
    their ids, where the caller has them), and so are cells running now (their owner lock
    is held: the run building this report, ``env``'s ``FTMATRIX_IN_RUN``, may have cells
    side by side with its report). Shown text is redacted with ``env`` and path-free: case
    ids are raw text."""
    # Only a cell some run left with its list of collected cases and no done marker can be
    # news: the runner removes the list when it marks the cell done.
    left_collected = sorted(
        {
            path.name.removesuffix(_COLLECTED)
            for path in records_root.glob(f"*/*{_COLLECTED}")
            if not path.with_name(path.name.removesuffix(_COLLECTED) + DONE_SUFFIX).exists()
        }
    )
    if not left_collected:
        return []
    if going_on is None:
        going_on = {run.run_id for run in runs_in_progress(records_root, env)}
    folders = sorted(p for p in records_root.iterdir() if p.is_dir())
    found = []
    for cell_id in left_collected:
        newest = max(folders, key=lambda folder: _last_change(folder, cell_id))
        files = CellFiles(newest / f"{cell_id}{RECORDS_SUFFIX}")
        if newest.name in going_on or files.done.exists() or lock_held(files.owner):
            continue
        records = scan_records(files.records).records
        if files.collected.exists() and not _install_failed(records):
            found.append(_unfinished(files, records, env))
    return sorted(found, key=lambda cell: (cell.label, cell.run_id))


def _last_change(folder: Path, cell_id: str) -> float:
    """When the run in ``folder`` last wrote a file of the cell."""
    times = []
    for suffix in _CELL_SUFFIXES:
        try:
            times.append((folder / f"{cell_id}{suffix}").stat().st_mtime)
        except OSError:
            continue
    return max(times, default=0.0)


def _install_failed(records: Sequence[Record]) -> bool:
    """Did the cell end as an install that failed (one record, no done marker: finished)?"""
    return any(r.case == WHOLE_CELL and r.status is Status.INSTALL_ERROR for r in records)


def _unfinished(
    files: CellFiles, records: Sequence[Record], env: Mapping[str, str]
) -> UnfinishedCell:
    recorded = {r.case for r in records}
    collected = read_json(files.collected)
    # The plugin's lists and notes hold case ids raw, its records redacted (by the cell's
    # environment: this one is the closest there is).
    redactor = Redactor(env)
    cases = (
        [redactor.text(c) for c in collected if isinstance(c, str)]
        if isinstance(collected, list)
        else None
    )
    notes = [read_note(p) for p in [files.running_case(), *files.workers_running_cases()]]
    # Not a note whose worker died in it earlier (a crash awaiting its record; the
    # controller added how it ended), nor one whose case's record beat it to the disk.
    running = {
        redactor.text(note["case"])
        for note in notes
        if isinstance(note, dict) and isinstance(note.get("case"), str) and "exit" not in note
    } - recorded
    return UnfinishedCell(
        run_id=files.run_folder.name,
        cell_id=files.cell_id,
        label=clean_paths(redactor.text(_label(files, records))),
        collected=None if cases is None else len(cases),
        without_record=None if cases is None else sum(c not in recorded for c in cases),
        running=tuple(sorted(clean_paths(case) for case in running)),
    )


def _label(files: CellFiles, records: Sequence[Record]) -> str:
    """The cell's label: as the runner gave it to the plugin, on its records, in the run's
    planned cells, or its id."""
    info = read_json(files.cell_info)
    if isinstance(info, dict) and isinstance(info.get("label"), str):
        return str(info["label"])
    if records:
        return records[0].cell_label
    return planned_cells(files.run_folder).get(files.cell_id, files.cell_id)
