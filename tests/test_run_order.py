"""Runs are ordered by when they ran, never by their ids' text; a run id is checked
wherever it enters (the settings, a records file merged, a history restored).

An id is any name a user gives (`ci-smoke`, `nightly`, a date of the future): sorted as
text, such an id hid every later run and the report called its stale result a regression.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from conftest import make_record

from ftmatrix.cell.files import CellFiles
from ftmatrix.cell.records import CellRecordFile
from ftmatrix.cell.status import Status
from ftmatrix.errors import SettingsError
from ftmatrix.settings import Settings, newest_run_id
from ftmatrix.store import merge_outputs, newest_records, pass_rate_table

# A runner's clock years ahead of the real one, whenever the tests run.
AHEAD = (datetime.now(UTC) + timedelta(days=5 * 365)).replace(microsecond=0)
AHEAD_STARTED = AHEAD.isoformat()
AHEAD_FINISHED = (AHEAD + timedelta(seconds=5)).isoformat()


def report_cli(out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ftmatrix", "report", "--out", str(out)],
        env={**os.environ, "FTMATRIX_OUT": str(out)},
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip


def write(out: Path, run_id: str, day: int, status: Status) -> None:
    record = make_record(
        run_id=run_id,
        status=status,
        started_at=f"2026-11-{day}T03:00:00+00:00",
        finished_at=f"2026-11-{day}T03:00:05+00:00",
        **({"message": "broke", "exception_type": "RuntimeError"} if status is Status.FAIL else {}),
    )
    CellRecordFile(CellFiles.of(out, run_id, record.cell_id).records).add(record)


@pytest.mark.parametrize("early_id", ["ci-smoke", "29991231T000000Z-future", "zzz"])
def test_the_newest_run_is_the_one_that_ran_last_whatever_its_id(
    tmp_path: Path, early_id: str
) -> None:
    out = tmp_path / "reports"
    write(out, early_id, 24, Status.FAIL)  # ran first, its id sorts last as text
    write(out, "20261125T030000Z-abcdef", 25, Status.PASS)
    ran = report_cli(out)
    assert ran.returncode == 0, ran.stderr
    results = json.loads((out / "results.json").read_text())
    assert [r["status"] for r in results["records"]] == ["pass"]
    assert [(c["kind"], c["after"]["run_id"]) for c in results["changes"]] == [
        ("fix", "20261125T030000Z-abcdef")
    ]  # never "regression" to the stale fail
    store = out / "history.sqlite"
    assert [r.run_id for r in newest_records(store)] == ["20261125T030000Z-abcdef"]
    assert [r.run_id for r in newest_records(store, back=1)] == [early_id]
    assert [run for run, _ in pass_rate_table(store)["sft"]] == [
        early_id,
        "20261125T030000Z-abcdef",
    ]


def test_resume_takes_the_run_that_wrote_last(tmp_path: Path) -> None:
    out = tmp_path / "reports"
    write(out, "20261125T030000Z-abcdef", 25, Status.PASS)
    os.utime(CellFiles.of(out, "20261125T030000Z-abcdef", "abc123def456").records, (1, 1))
    write(out, "ci-smoke", 26, Status.PASS)
    os.utime(CellFiles.of(out, "ci-smoke", "abc123def456").records, (1, 1))
    write(out, "a-later-run", 27, Status.PASS)  # written now
    assert newest_run_id(out) == "a-later-run"


@pytest.mark.parametrize("bad", ["../elsewhere", "a b", "-x", "x" * 101, "nightly/1", "é"])
def test_a_bad_run_id_is_refused_by_the_settings(tmp_path: Path, bad: str) -> None:
    with pytest.raises(SettingsError, match="a folder name of letters, digits"):
        Settings.from_env({"FTMATRIX_RUN_ID": bad}, root=tmp_path, now=datetime.now(UTC))


def test_a_record_with_a_bad_run_id_is_not_merged_and_is_named(tmp_path: Path) -> None:
    out = tmp_path / "reports"
    write(out, "20261125T030000Z-abcdef", 25, Status.PASS)
    bad = make_record(run_id="../../etc")
    path = CellFiles.of(out, "20261125T030000Z-abcdef", "other").records
    CellRecordFile(path).add(bad)
    merged = merge_outputs(out)
    assert [p for p in merged.problems if "'../../etc' is not a folder name" in p], merged.problems
    assert {r.run_id for r in newest_records(out / "history.sqlite")} == {"20261125T030000Z-abcdef"}


def test_restore_history_refuses_a_bad_run_id_in_one_line(tmp_path: Path) -> None:
    published = tmp_path / "history.jsonl"
    record = make_record(run_id="nightly; rm -rf ~").to_dict()
    published.write_text(
        json.dumps({"ftmatrix-history": 1}) + "\n" + json.dumps({"record": record}) + "\n"
    )
    ran = restore_history(published, tmp_path / "reports")
    assert ran.returncode == 2, ran.stderr
    assert "Traceback" not in ran.stderr and len(ran.stderr.strip().splitlines()) == 1
    assert "line 2: field 'run_id': 'nightly; rm -rf ~' is not a folder name" in ran.stderr
    assert not (tmp_path / "reports" / "history.sqlite").exists() or not newest_records(
        tmp_path / "reports" / "history.sqlite"
    )


@pytest.mark.parametrize("entry", ["cli", "nox"])
def test_a_run_whose_clock_was_ahead_hides_no_later_run(tmp_path: Path, entry: str) -> None:
    """A runner whose clock was years ahead: ordered by when they ran, its records were the
    newest of their cell until that date, and the report showed its pass over tonight's fail
    (a 'fix', exit 0). They are kept out of the history, and the report says why."""
    out = tmp_path / "reports"
    ahead = make_record(
        run_id="clock-ahead",
        started_at=AHEAD_STARTED,
        finished_at=AHEAD_FINISHED,
    )
    CellRecordFile(CellFiles.of(out, "clock-ahead", ahead.cell_id).records).add(ahead)
    write(out, "20261125T030000Z-abcdef", 25, Status.FAIL)  # tonight's, in real time
    if entry == "cli":
        ran = report_cli(out)
    else:
        ran = subprocess.run(
            [sys.executable, "-m", "nox", "-f", str(Path(__file__).parent.parent / "noxfile.py")]
            + ["-s", "report"],
            env={**os.environ, "FTMATRIX_OUT": str(out)},
            capture_output=True, text=True, check=False, timeout=120,
        )  # fmt: skip
    output = ran.stdout + ran.stderr
    assert ran.returncode == 1, output[-3000:]
    assert "Traceback" not in output
    results = json.loads((out / "results.json").read_text())
    assert [(r["run_id"], r["status"]) for r in results["records"]] == [
        ("20261125T030000Z-abcdef", "fail")
    ]
    assert results["changes"] == []
    [said] = results["unreadable_records"]
    assert said.startswith("run clock-ahead, cell cpu-py3.11-trl1.16.0: 1 record(s) finished")
    assert "the clock of the machine that ran them was ahead" in said
    assert said in (out / "summary.md").read_text()
    assert "clock-ahead" not in {r.run_id for r in newest_records(out / "history.sqlite", back=1)}


def test_restore_history_keeps_out_a_record_from_a_clock_ahead(tmp_path: Path) -> None:
    """A published history of an older ftmatrix may hold such records: restored, they
    would hide every later run of their cell, as merged ones did."""
    published = tmp_path / "history.jsonl"
    ahead = make_record(run_id="clock-ahead", finished_at=AHEAD_FINISHED)
    tonight = make_record(run_id="20261125T030000Z-abcdef", status=Status.FAIL, message="broke")
    published.write_text(
        json.dumps({"ftmatrix-history": 1})
        + "".join("\n" + json.dumps({"record": r.to_dict()}) for r in (ahead, tonight))
        + "\n"
    )
    ran = restore_history(published, tmp_path / "reports")
    assert ran.returncode == 0, ran.stderr
    assert "restore-history: 1 records" in ran.stdout
    said = f"run clock-ahead, cell cpu-py3.11-trl1.16.0: 1 record(s) finished at {AHEAD_FINISHED}"
    assert said in ran.stderr
    newest = newest_records(tmp_path / "reports" / "history.sqlite")
    assert [(r.run_id, r.status) for r in newest] == [("20261125T030000Z-abcdef", Status.FAIL)]


def restore_history(published: Path, out: Path) -> subprocess.CompletedProcess[str]:
    """``python -m ftmatrix restore-history PUBLISHED`` into the reports folder ``out``."""
    return subprocess.run(
        [sys.executable, "-m", "ftmatrix", "restore-history", str(published)],
        env={**os.environ, "FTMATRIX_OUT": str(out)},
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
