"""The files of one cell in one run, by name: ``<out>/records/<run-id>/<cell-id>.*``.

Every side names them here: the results plugin inside the cell (the records, the
running-case notes, the case starts, the collected and isolated cases), the supervisor
(crashed cases' first tries, the quarantine), the runner (who owns the cell, its lock,
what the plugin reads, its state and done marker, its log), reuse and the history (the
done markers). Names only: nothing here reads, writes or removes a file.

This module runs inside each cell's environment too, so it imports the standard library only.
"""

from __future__ import annotations

import glob
import re
from dataclasses import dataclass
from pathlib import Path

RECORDS_SUFFIX = ".jsonl"
# The folder under a reports folder that holds one folder per run.
RECORDS_FOLDER = "records"
# Beside a cell's records once a run finished it: what it was run with (its reuse key).
DONE_SUFFIX = ".done.json"
COLLECTED_SUFFIX = RECORDS_SUFFIX + ".cases"  # what a cell that never finished leaves
# Beside a cell's records, locked while a run writes the cell.
OWNER_SUFFIX = ".owner"
# Beside a cell's records, its record lines that cannot be its records, kept byte for
# byte: unreadable, or another run's or cell's.
QUARANTINE = ".quarantine"
QUARANTINE_SUFFIX = RECORDS_SUFFIX + QUARANTINE

# A run id names a folder under records/ and work/: a plain name, never a path. Checked
# wherever an id enters: the settings, a record read (merge, report, restore-history).
RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
RUN_ID_RULE = (
    "a folder name of letters, digits, '.', '_' and '-' "
    "(at most 100, starting with a letter or digit, no '..')"
)


def is_run_id(text: str) -> bool:
    """Is ``text`` a run id (:data:`RUN_ID_RULE`)?"""
    return bool(RUN_ID.fullmatch(text)) and ".." not in text


@dataclass(frozen=True)
class CellFiles:
    """The files of the cell whose records are ``records`` (``<cell-id>.jsonl``), by name.

    The runner's files are named after the cell (``<cell-id>.state.json``); those the
    plugin and the supervisor share after the records file (``<cell-id>.jsonl.cases``).
    """

    records: Path

    @classmethod
    def of(cls, out_dir: Path, run_id: str, cell_id: str) -> CellFiles:
        """The files of cell ``cell_id`` in run ``run_id``: ``<out>/records/<run-id>/``."""
        return cls(out_dir / RECORDS_FOLDER / run_id / f"{cell_id}{RECORDS_SUFFIX}")

    @property
    def cell_id(self) -> str:
        return self.records.name.removesuffix(RECORDS_SUFFIX)

    @property
    def run_folder(self) -> Path:
        """The folder of the run: every cell of the run has its files there."""
        return self.records.parent

    @property
    def run_id(self) -> str:
        """The run whose folder holds the files (the folder's name)."""
        return self.run_folder.name

    @property
    def in_a_run(self) -> bool:
        """Are the records where a run keeps a cell's (``records/<run-id>/<cell-id>.jsonl``)?
        There the file's place says whose records it holds: that run's, of that cell."""
        return self.records.name.endswith(RECORDS_SUFFIX) and self.run_folder.parent.name == (
            RECORDS_FOLDER
        )

    def _named(self, suffix: str) -> Path:
        return self.records.with_name(f"{self.cell_id}{suffix}")

    def _beside_records(self, suffix: str) -> Path:
        return self.records.with_name(self.records.name + suffix)

    @property
    def owner(self) -> Path:
        """Who writes the cell now (locked while a run does, so two runs never share it)."""
        return self._named(OWNER_SUFFIX)

    @property
    def lock(self) -> Path:
        """The cell's lock as the resolver wrote it."""
        return self._named(".lock.txt")

    @property
    def install_list(self) -> Path:
        """What the venv installs where the host's packages stand for part of the lock."""
        return self._named(".install.txt")

    @property
    def cell_info(self) -> Path:
        """What the plugin needs to know of the cell (``--ftmatrix-cell``)."""
        return self._named(".cell.json")

    @property
    def state(self) -> Path:
        """What the cell's cases are run with (its reuse key), written before they run."""
        return self._named(".state.json")

    @property
    def done(self) -> Path:
        """The marker of a run that finished the cell: its key, the run that really ran its
        cases, and when (merged into the history's ``cell_runs``)."""
        return self._named(DONE_SUFFIX)

    @property
    def log(self) -> Path:
        """The cell's whole pytest output and the run's notes (CI keeps it as an artifact)."""
        return self._named(".log")

    @property
    def quarantine(self) -> Path:
        """Where the cell's record lines that cannot be its records (unreadable, or another
        run's or cell's) are kept, byte for byte."""
        return self._beside_records(QUARANTINE)

    @property
    def set_aside(self) -> Path:
        """Where a resumed run keeps the records of the run it resumes that no longer apply
        (the lock or the cases changed, or their state cannot be read), never deleted."""
        return self._beside_records(".set-aside")

    @property
    def collected(self) -> Path:
        """Where the plugin lists every case it collected for the cell."""
        return self._named(COLLECTED_SUFFIX)

    @property
    def isolated(self) -> Path:
        """Where the plugin lists the isolated cases, each run in a pytest of its own."""
        return self._beside_records(".isolated")

    @property
    def starts(self) -> Path:
        """Where the plugin appends each case's start (JSON lines: case, epoch seconds), so
        the supervisor can tell which case started a process it had to end."""
        return self._beside_records(".starts")

    @property
    def first_tries(self) -> Path:
        """Where the supervisor keeps crashed cases' first tries until their second try ends."""
        return self._beside_records(".first-tries")

    @property
    def left_running(self) -> Path:
        """Where the supervisor lists the cases a run ended under (their notes left): each
        runs again once on resume, and is recorded a crash if the run ends under it again."""
        return self._beside_records(".left-running")

    def running_case(self, worker: str | None = None) -> Path:
        """Where the plugin notes the case now running, so a supervisor outside knows it.

        A pytest-xdist ``worker`` (``gw0``, ...) has a note of its own.
        """
        return self._beside_records(f".current.{worker}" if worker else ".current")

    def workers_running_cases(self) -> list[Path]:
        """The running-case notes of every pytest-xdist worker of the cell."""
        pattern = glob.escape(self.records.name) + ".current.*"
        return sorted(self.records.parent.glob(pattern))
