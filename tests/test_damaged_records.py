"""Damaged record files: every line that cannot be read is reported, kept byte for byte,
and never taken for a record; the report says so in every form and exits 1.

A resumed run's handling (the lines quarantined, their cases run again) is in
tests/test_unlucky_run.py, through nox and the CLI.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import make_record

from ftmatrix.cell.files import CellFiles
from ftmatrix.cell.records import CellRecordFile, compact_records, read_records, scan_records
from ftmatrix.cell.status import Status

NOT_AN_OBJECT = b'["a", "list", "of", "JSON"]'
NOT_UTF8 = b'{"schema": 1, "case": "caf\xe9"}'


def damaged_file(tmp_path: Path) -> tuple[Path, bytes]:
    """A cell's records: a good one, a JSON list, a non-UTF-8 line, a good one, and the
    torn start of a record whose write never finished. Returns the file and the torn end."""
    path = CellFiles.of(tmp_path, "20261127T000000Z", "abc123def456").records
    file = CellRecordFile(path)
    file.add(make_record(case="a.py::t", run_id="20261127T000000Z"))
    with path.open("ab") as handle:
        handle.write(NOT_AN_OBJECT + b"\n" + NOT_UTF8 + b"\n")
    file.add(make_record(case="b.py::t", run_id="20261127T000000Z"))
    torn = json.dumps(make_record(case="c.py::t").to_dict()).encode()[:40]
    with path.open("ab") as handle:
        handle.write(torn)
    return path, torn


def test_every_damaged_line_is_reported_with_why_and_no_line_raises(tmp_path: Path) -> None:
    path, _ = damaged_file(tmp_path)
    scan = scan_records(path)
    assert [r.case for r in scan.records] == ["a.py::t", "b.py::t"]
    assert [p.split(": skipped: ", 1)[1] for p in scan.problems] == [
        "a JSON list, not a record object",
        "'utf-8' codec can't decode byte 0xe9 in position 26: invalid continuation byte",
        "a torn line (the file ends in the middle of it)",
    ]
    assert [p.split(": skipped:")[0].rsplit(":", 1)[1] for p in scan.problems] == ["2", "3", "5"]
    assert read_records(tmp_path / "records").problems == scan.problems


def test_a_write_after_damage_drops_nothing_and_never_glues_to_a_torn_line(
    tmp_path: Path,
) -> None:
    path, torn = damaged_file(tmp_path)
    CellRecordFile(path).add(make_record(case="d.py::t", run_id="20261127T000000Z"))
    data = path.read_bytes()
    assert NOT_AN_OBJECT + b"\n" in data and NOT_UTF8 + b"\n" in data
    assert torn + b"\n" in data  # alone on its line: the new record reads whole
    assert [r.case for r in CellRecordFile(path).records] == ["a.py::t", "b.py::t", "d.py::t"]


def test_compacting_keeps_the_damaged_bytes_in_quarantine_and_one_line_a_case(
    tmp_path: Path,
) -> None:
    path, torn = damaged_file(tmp_path)
    CellRecordFile(path).add(
        make_record(case="a.py::t", run_id="20261127T000000Z", status=Status.FAIL)
    )
    assert len(compact_records(path).damaged) == 3
    assert (
        CellFiles(path).quarantine.read_bytes()
        == NOT_AN_OBJECT + b"\n" + NOT_UTF8 + b"\n" + torn + b"\n"
    )
    lines = path.read_text(encoding="utf-8").splitlines()
    assert [(json.loads(x)["case"], json.loads(x)["status"]) for x in lines] == [
        ("b.py::t", "pass"),
        ("a.py::t", "fail"),
    ]
    assert scan_records(path).problems == ()
    assert compact_records(path).damaged == ()  # nothing more to move


def test_the_report_says_so_in_every_form_and_exits_1(tmp_path: Path) -> None:
    damaged_file(tmp_path)
    ran = subprocess.run(
        [sys.executable, "-m", "ftmatrix", "report", "--out", str(tmp_path)],
        env={**os.environ, "FTMATRIX_OUT": str(tmp_path)},
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert ran.returncode == 1, ran.stderr
    assert "Traceback" not in ran.stderr
    assert "ftmatrix: 3 record line(s) could not be read or were kept out" in ran.stderr
    results = json.loads((tmp_path / "results.json").read_text())
    assert len(results["unreadable_records"]) == 3
    assert "a torn line" in results["unreadable_records"][2]
    summary = (tmp_path / "summary.md").read_text()
    assert "**3 record line(s) could not be read or were kept out of the history:**" in summary
    page = (tmp_path / "index.html").read_text()
    assert "3 record line(s) could not be read" in page
    # Said once, in the notices at the top: not again at the bottom of the page.
    assert page.count("a torn line") == 1
    assert {r["case"] for r in results["records"]} == {"a.py::t", "b.py::t"}

    compact_records(next((tmp_path / "records").rglob("*.jsonl")))  # as a resume does
    ran = subprocess.run(
        [sys.executable, "-m", "ftmatrix", "report", "--out", str(tmp_path)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    results = json.loads((tmp_path / "results.json").read_text())
    (quarantined,) = results["unreadable_records"]
    assert "3 unreadable record line(s) kept apart (quarantined)" in quarantined
    assert "kept apart (quarantined)" in (tmp_path / "summary.md").read_text()
