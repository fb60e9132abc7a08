"""Whether a run is still going on, and which of its cells have not finished.

A report can be built at any moment (``ftmatrix report`` in another terminal, a CI step
that runs beside the cells); one built while a run goes on must say so. A run holds a
shared lock on ``records/<run-id>/.run`` for as long as it lasts (``ftmatrix run`` around
its nox; each nox process from its first cell to its end), and lists the cells it planned
in ``records/<run-id>/planned.json``; a cell holds its ``.owner`` lock while it runs
(``runner.owning_cell``). The kernel drops a lock when its holder dies, so a killed run
never looks as if it went on.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from ftmatrix.cell.file_writes import write_atomically
from ftmatrix.cell.files import OWNER_SUFFIX, RECORDS_SUFFIX
from ftmatrix.errors import SettingsError

RUN_LOCK = ".run"
PLANNED_FILE = "planned.json"
# Set for what a run starts itself (the report its last cell or its nox builds): that
# run's lock is its own, not a run going on beside the report.
IN_RUN_VARIABLE = "FTMATRIX_IN_RUN"


@contextlib.contextmanager
def run_going_on(run_folder: Path) -> Iterator[None]:
    """Hold the run's lock (shared: every process of the run holds it) while the body runs."""
    handle = hold_run(run_folder)
    try:
        yield
    finally:
        handle.close()


def hold_run(run_folder: Path) -> IO[str]:
    """Take the run's lock (shared) until the handle is closed or the process ends."""
    with _writable(run_folder):
        run_folder.mkdir(parents=True, exist_ok=True)
        handle = (run_folder / RUN_LOCK).open("a")
    fcntl.flock(handle, fcntl.LOCK_SH)
    return handle


def note_planned(run_folder: Path, cells: Mapping[str, str]) -> None:
    """Add ``cells`` (id -> label) to the run's planned cells."""
    with _writable(run_folder):
        run_folder.mkdir(parents=True, exist_ok=True)
        lock = (run_folder / ".planned.lock").open("a")
    path = run_folder / PLANNED_FILE
    with lock as handle:  # one merge at a time
        fcntl.flock(handle, fcntl.LOCK_EX)
        planned = {**planned_cells(run_folder), **cells}
        write_atomically(path, json.dumps(planned, indent=1, sort_keys=True) + "\n")


@contextlib.contextmanager
def _writable(run_folder: Path) -> Iterator[None]:
    """The run's folder made or opened, or one line (SettingsError) where it cannot be: a
    records folder read-only under a writable reports folder was a traceback."""
    try:
        yield
    except OSError as exc:
        raise SettingsError(
            f"{run_folder}: the run's records folder cannot be written "
            f"({exc.strerror or exc}); records go into a folder ftmatrix can write "
            "(FTMATRIX_OUT, default: reports/)"
        ) from None


def planned_cells(run_folder: Path) -> dict[str, str]:
    """The run's planned cells, id -> label ({} when it listed none, or the file is damaged)."""
    return _planned(run_folder) or {}


def _planned(run_folder: Path) -> dict[str, str] | None:
    """The run's planned cells, id -> label; {} where it listed none, None where its list
    cannot be read (damaged)."""
    path = run_folder / PLANNED_FILE
    if not path.exists():
        return {}
    try:
        planned = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(planned, dict):
        return None
    return {str(k): str(v) for k, v in planned.items()}


@dataclass(frozen=True, kw_only=True)
class RunInProgress:
    """A run that is still going on while the report is built."""

    run_id: str
    running: tuple[str, ...]  # labels of the cells running now
    not_started: tuple[str, ...]  # planned cells with no record yet and not running

    def describe(self) -> str:
        parts = []
        if self.running:
            parts.append(f"running: {', '.join(self.running)}")
        if self.not_started:
            parts.append(f"not started: {', '.join(self.not_started)}")
        unfinished = len(self.running) + len(self.not_started)
        return f"run {self.run_id} is in progress: this report is partial" + (
            f"; {unfinished} cell(s) not finished ({'; '.join(parts)})" if parts else ""
        )

    def to_dict(self) -> dict[str, object]:
        return {
            "run_id": self.run_id,
            "running": list(self.running),
            "not_started": list(self.not_started),
        }


def runs_in_progress(records_root: Path, env: Mapping[str, str]) -> list[RunInProgress]:
    """The runs under ``records_root`` that some process still runs (not the one that
    builds this report: ``env``'s IN_RUN_VARIABLE), with their unfinished cells."""
    found = []
    own = env.get(IN_RUN_VARIABLE)
    folders = (
        sorted(p for p in records_root.iterdir() if p.is_dir()) if records_root.is_dir() else []
    )
    for folder in folders:
        running_cells = [
            owner.name.removesuffix(OWNER_SUFFIX)
            for owner in sorted(folder.glob(f"*{OWNER_SUFFIX}"))
            if lock_held(owner)
        ]
        if folder.name == own or not (running_cells or lock_held(folder / RUN_LOCK)):
            continue
        planned = planned_cells(folder)
        recorded = {p.name.removesuffix(RECORDS_SUFFIX) for p in folder.glob(f"*{RECORDS_SUFFIX}")}
        not_started = [
            label
            for cell_id, label in sorted(planned.items(), key=lambda item: item[1])
            if cell_id not in recorded and cell_id not in running_cells
        ]
        found.append(
            RunInProgress(
                run_id=folder.name,
                running=tuple(sorted(planned.get(c, c) for c in running_cells)),
                not_started=tuple(not_started),
            )
        )
    return found


def lock_held(lock_file: Path) -> bool:
    """Does some process hold a lock on ``lock_file`` now?"""
    try:
        handle = lock_file.open("a")
    except OSError:
        return False
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
        return False


def planned_without_records(records_root: Path, env: Mapping[str, str]) -> list[str]:
    """The cells the newest run planned (``planned.json``) that ended without a record:
    a session nox skipped or that failed before its cell wrote one. [] while that run
    goes on (the report says it is in progress instead), and in a report the run builds
    itself (``env``'s IN_RUN_VARIABLE: cells of it may still wait their turn; ``ftmatrix
    run`` asks again once its nox has ended)."""
    runs = (
        [p.parent for p in records_root.glob(f"*/{PLANNED_FILE}")] if records_root.is_dir() else []
    )
    if not runs:
        return []
    newest = max(runs, key=lambda folder: (folder / PLANNED_FILE).stat().st_mtime)
    if newest.name == env.get(IN_RUN_VARIABLE) or any(
        run.run_id == newest.name for run in runs_in_progress(records_root, env)
    ):
        return []
    recorded = {p.name.removesuffix(RECORDS_SUFFIX) for p in newest.glob(f"*{RECORDS_SUFFIX}")}
    planned = _planned(newest)
    if planned is None:  # said, never taken for "every planned cell has its records"
        return [f"the cells run {newest.name} planned ({PLANNED_FILE} cannot be read)"]
    return sorted(label for cell_id, label in planned.items() if cell_id not in recorded)
