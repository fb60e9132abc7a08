"""A run still going on, and a run's planned cells that ended without a record, as the
report sees them from the files a run leaves (real locks, held by another process).

The whole flow, through `ftmatrix run` and `nox -s matrix`, is in tests/test_unlucky_run.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import holding, make_record

from ftmatrix.cell.files import CellFiles
from ftmatrix.cell.records import CellRecordFile
from ftmatrix.live_runs import (
    IN_RUN_VARIABLE,
    RUN_LOCK,
    note_planned,
    planned_without_records,
    runs_in_progress,
)

RUN = "20261127T050000Z"
PLANNED = {"aaaaaaaaaaaa": "cpu-six1.16.0", "bbbbbbbbbbbb": "cpu-six1.17.0"}


def a_run(out: Path) -> Path:
    """A run that planned two cells and recorded the first."""
    folder = out / "records" / RUN
    note_planned(folder, PLANNED)
    CellRecordFile(CellFiles.of(out, RUN, "aaaaaaaaaaaa").records).add(
        make_record(run_id=RUN, cell_id="aaaaaaaaaaaa", cell_label="cpu-six1.16.0")
    )
    return folder


def test_a_run_whose_lock_is_held_is_in_progress_with_its_unfinished_cells(tmp_path: Path):
    folder = a_run(tmp_path)
    assert runs_in_progress(tmp_path / "records", {}) == []
    holder = holding(folder / RUN_LOCK)
    try:
        (progress,) = runs_in_progress(tmp_path / "records", {})
        assert (progress.run_id, progress.running, progress.not_started) == (
            RUN,
            (),
            ("cpu-six1.17.0",),
        )
        # The run's own report (its last cell's, its nox's) is not 'in progress'.
        assert runs_in_progress(tmp_path / "records", {IN_RUN_VARIABLE: RUN}) == []
        assert planned_without_records(tmp_path / "records", {}) == []  # not ended yet
    finally:
        holder.kill()
        holder.wait()
    assert runs_in_progress(tmp_path / "records", {}) == []  # the kernel dropped the lock


def test_a_running_cell_is_named_by_its_owner_lock(tmp_path: Path):
    folder = a_run(tmp_path)
    holder = holding(folder / "bbbbbbbbbbbb.owner")
    try:
        (progress,) = runs_in_progress(tmp_path / "records", {})
        assert (progress.running, progress.not_started) == (("cpu-six1.17.0",), ())
    finally:
        holder.kill()
        holder.wait()


def test_a_planned_cell_without_records_fails_the_report_and_is_shown(tmp_path: Path):
    a_run(tmp_path)
    assert planned_without_records(tmp_path / "records", {}) == ["cpu-six1.17.0"]
    assert planned_without_records(tmp_path / "records", {IN_RUN_VARIABLE: RUN}) == []
    ran = report_of(tmp_path)
    assert ran.returncode == 1, ran.stderr
    assert "1 planned cell(s) produced no records, so no verdict" in ran.stderr
    assert "cpu-six1.17.0" in (tmp_path / "summary.md").read_text()
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["planned_without_records"] == ["cpu-six1.17.0"]


@pytest.mark.parametrize("damage", [b'{"aaaaaaaaaaaa": "cpu-six1.16', b"[1, 2]", b"\xff\xfe"])
def test_a_damaged_list_of_planned_cells_fails_the_report_and_is_said(
    tmp_path: Path, damage: bytes
) -> None:
    """A planned.json cut short or damaged: its cells were taken as none planned, and a
    planned cell with no records vanished from a report that exited 0."""
    folder = a_run(tmp_path)
    (folder / "planned.json").write_bytes(damage)
    said = [f"the cells run {RUN} planned (planned.json cannot be read)"]
    assert planned_without_records(tmp_path / "records", {}) == said
    ran = report_of(tmp_path)
    assert ran.returncode == 1, ran.stderr
    assert "planned.json cannot be read" in (tmp_path / "summary.md").read_text()


def report_of(out: Path) -> subprocess.CompletedProcess[str]:
    """``python -m ftmatrix report`` of ``out``, as a user runs it (no FTMATRIX_ setting)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FTMATRIX_")}
    return subprocess.run(
        [sys.executable, "-m", "ftmatrix", "report", "--out", str(out)],
        env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
