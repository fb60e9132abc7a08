"""Damaged record files: every line that cannot be read is reported, kept byte for byte,
and never taken for a record; the report says so in every form and exits 1.

A resumed run's handling (the lines quarantined, their cases run again) is in
tests/test_unlucky_run.py, through nox and the CLI.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import threading
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from conftest import make_record

from ftmatrix.cell.files import CellFiles
from ftmatrix.cell.records import (
    CellRecordFile,
    ReadResult,
    compact_records,
    read_records,
    scan_records,
)
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


def _line_of(**fields: object) -> bytes:
    return json.dumps({**make_record(run_id="20261127T000000Z").to_dict(), **fields}).encode()


GOOD_LINE = _line_of()

# Damage of every kind a line can hold, and why it is kept apart: what JSON reads but a
# record cannot hold (wrong types inside the right ones, numbers no JSON holds, nesting
# past the interpreter's stack, an integer of hundreds of digits).
DAMAGED_LINES = [
    pytest.param(b"\0" * 512, "Expecting value", id="NUL-filled"),
    pytest.param(_line_of(status=42), "field 'status': expected string", id="status 42"),
    pytest.param(_line_of(status="weird"), "unknown status 'weird'", id="unknown status"),
    pytest.param(_line_of(pins=["a"]), "field 'pins': expected object", id="pins a list"),
    pytest.param(_line_of(pins={"trl": 5}), "pins.trl: 5 is not a version nor null", id="a pin of 5"),
    pytest.param(
        _line_of(packages={"trl": None}), "packages.trl: None is not a version", id="packages"
    ),
    pytest.param(_line_of(duration="x"), "field 'duration': expected number", id="duration x"),
    pytest.param(
        _line_of(duration=10**400), "field 'duration': 1000", id="duration of 401 digits"
    ),
    pytest.param(
        GOOD_LINE.replace(b'"duration": 3.0', b'"duration": NaN'),
        "field 'duration': expected number, got str",
        id="duration NaN",
    ),
    pytest.param(
        GOOD_LINE.replace(b'"duration": 3.0', b'"duration": 1e400'),
        "field 'duration': inf is not a finite number of seconds",
        id="duration 1e400",
    ),
    pytest.param(_line_of(attempts=[1]), "field 'attempts': expected a list of objects", id="attempts"),
    pytest.param(_line_of(runner_labels=[{}]), "field 'runner_labels'", id="runner labels"),
    pytest.param(b"[" * 100_000 + b"]" * 100_000, "maximum recursion depth", id="deep nesting"),
    pytest.param(_line_of(flaky="yes"), "field 'flaky': expected boolean", id="flaky yes"),
]  # fmt: skip


@pytest.mark.parametrize(("line", "why"), DAMAGED_LINES)
def test_a_line_of_any_damage_is_reported_and_kept_never_raised(
    tmp_path: Path, line: bytes, why: str
) -> None:
    path = CellFiles.of(tmp_path, "20261127T000000Z", "abc123def456").records
    CellRecordFile(path).add(make_record(case="a.py::t", run_id="20261127T000000Z"))
    with path.open("ab") as handle:
        handle.write(line + b"\n")
    scan = scan_records(path)
    (problem,) = scan.problems
    assert why in problem.split(": skipped: ", 1)[1]
    assert scan.damaged == (line,)
    assert [r.case for r in scan.records] == ["a.py::t"]


def test_the_report_of_every_damage_at_once_says_so_and_exits_1(tmp_path: Path) -> None:
    path = CellFiles.of(tmp_path, "20261127T000000Z", "abc123def456").records
    CellRecordFile(path).add(make_record(case="a.py::t", run_id="20261127T000000Z"))
    with path.open("ab") as handle:
        handle.write(b"".join(p.values[0] + b"\n" for p in DAMAGED_LINES))
    ran = report(tmp_path)
    assert ran.returncode == 1, ran.stderr
    assert "Traceback" not in ran.stderr
    assert f"ftmatrix: {len(DAMAGED_LINES)} record line(s) could not be read" in ran.stderr
    assert [r["case"] for r in strict_json(tmp_path / "results.json")["records"]] == ["a.py::t"]


def report(out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ftmatrix", "report", "--out", str(out)],
        capture_output=True, text=True, check=False, timeout=300,  # a pipe read never ends
    )  # fmt: skip


def strict_json(path: Path) -> Any:
    """``path``'s JSON, as any other tool reads it: no NaN, no Infinity."""

    def refuse(constant: str) -> None:
        raise ValueError(f"{path}: {constant} is not JSON")

    return json.loads(path.read_text(encoding="utf-8"), parse_constant=refuse)


def test_numbers_json_cannot_hold_and_lone_surrogates_are_kept_as_text(tmp_path: Path) -> None:
    """A case's metrics of NaN and infinity (a loss gone NaN is a finding), and a lone
    surrogate a hand or another tool left: the history, results.json and the page keep
    them as text."""
    path = CellFiles.of(tmp_path, "20261127T000000Z", "abc123def456").records
    CellRecordFile(path).add(
        make_record(
            case="a.py::t",
            run_id="20261127T000000Z",
            metrics={"loss": float("nan"), "grad": float("inf"), "huge": 10**400},
        )
    )
    with path.open("ab") as handle:
        handle.write(_line_of(case="b.py::t[\\ud800]", message="lone \\udfff", metrics={}))
        handle.write(b"\n")
    ran = report(tmp_path)
    assert ran.returncode == 0, ran.stderr
    records = {r["case"]: r for r in strict_json(tmp_path / "results.json")["records"]}
    assert records["a.py::t"]["metrics"] == {"loss": "NaN", "grad": "Infinity", "huge": 10**400}
    assert records["b.py::t[\\ud800]"]["message"] == "lone \\udfff"
    assert "lone \\udfff" in (tmp_path / "index.html").read_text(encoding="utf-8")
    assert report(tmp_path).returncode == 0  # the history it made reads back


@pytest.mark.parametrize("kind", ["folder", "pipe", "broken link"])
def test_a_records_file_that_is_no_file_is_reported_never_read(tmp_path: Path, kind: str) -> None:
    path = CellFiles.of(tmp_path, "20261127T000000Z", "abc123def456").records
    CellRecordFile(path).add(make_record(case="a.py::t", run_id="20261127T000000Z"))
    other = path.with_name("def456abc123.jsonl")
    if kind == "folder":
        other.mkdir()
    elif kind == "pipe":
        os.mkfifo(other)  # opened, it would block the report for ever
    else:
        other.symlink_to(tmp_path / "gone.jsonl")
    # Read in a thread of its own: a reader that opened the pipe would block pytest for ever.
    found: list[ReadResult] = []
    reader = threading.Thread(
        target=lambda: found.append(read_records(tmp_path / "records")), daemon=True
    )
    reader.start()
    reader.join(60)
    assert found, "reading the records blocked (the pipe was opened)"
    (problem,) = found[0].problems
    assert problem == f"{other}: skipped: not a file (a folder, a pipe or a broken link)"
    ran = report(tmp_path)
    assert (ran.returncode, "Traceback" in ran.stderr) == (1, False), ran.stderr
    assert "ftmatrix: 1 record line(s) could not be read" in ran.stderr


# A proof.json or history line's proof, and a finding, that are objects of the wrong shape.
DAMAGED_PROOFS = [
    '{"entry": "x"}',
    '{"entry": "x", "date": "2026-11-27", "cells": 3}',
    '{"entry": "x", "date": "2026-11-27", "cells": [{"package": "trl"}]}',
    '{"entry": "x", "date": "2026-11-27", "cells": ["trl"]}',
]
DAMAGED_FINDINGS = [
    '{"case": "a.py::t", "axis": ["trl"]}',
    '{"case": 1, "axis": "trl"}',
    '{"case": "a.py::t", "axis": "trl", "first_bad": {"v": 2}}',
    '{"case": "a.py::t", "axis": "trl", "held": 5}',
]


@pytest.mark.parametrize(
    ("kept", "text"),
    [
        ("bisect/x/finding.json", '{"case": '),
        ("bisect/x/finding.json", "[1]"),
        ("proofs/x/proof.json", '{"entry": 5}'),
        ("proofs/x/proof.json", ""),
        # Objects of the wrong shape, once kept: every report after ended in a traceback
        # (a proof), or the merge blamed the history (SQLite cannot keep a list).
        *(("proofs/x/proof.json", proof) for proof in DAMAGED_PROOFS),
        *(("bisect/x/finding.json", finding) for finding in DAMAGED_FINDINGS),
    ],
)
def test_a_damaged_finding_or_proof_is_named_and_the_records_still_reported(
    tmp_path: Path, kept: str, text: str
) -> None:
    path = CellFiles.of(tmp_path, "20261127T000000Z", "abc123def456").records
    CellRecordFile(path).add(make_record(case="a.py::t", run_id="20261127T000000Z"))
    (tmp_path / kept).parent.mkdir(parents=True)
    (tmp_path / kept).write_text(text)
    ran = report(tmp_path)
    assert (ran.returncode, "Traceback" in ran.stderr) == (1, False), ran.stderr
    assert f"{tmp_path / kept}: skipped: " in ran.stderr
    assert "(damaged)" in ran.stderr
    assert [r["case"] for r in strict_json(tmp_path / "results.json")["records"]] == ["a.py::t"]
    (tmp_path / kept).unlink()  # nothing of it was kept: the next report is whole
    ran = report(tmp_path)
    assert (ran.returncode, ran.stderr) == (0, "")


def test_a_published_history_with_a_nan_metric_restores_into_a_usable_history(
    tmp_path: Path,
) -> None:
    """A record made in memory, not read from a records file (restore-history's), with
    a NaN metric: the history's SQLite JSON refused it, and every later report."""
    record = make_record(run_id="20261127T000000Z", metrics={"loss": float("nan")})
    published = tmp_path / "history.jsonl"
    published.write_text('{"ftmatrix-history": 1}\n' + json.dumps({"record": record.to_dict()}))
    out = tmp_path / "reports"
    restored = subprocess.run(
        [sys.executable, "-m", "ftmatrix", "restore-history", str(published), "--out", str(out)],
        capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    assert restored.returncode == 0, restored.stderr
    ran = report(out)
    assert ran.returncode == 0, ran.stderr
    (shown,) = strict_json(out / "results.json")["records"]
    assert shown["metrics"] == {"loss": "NaN"}


@pytest.mark.parametrize(
    "line",
    [*({"proof": {**json.loads(p), "proven_at": "2026-11-27"}} for p in DAMAGED_PROOFS)]
    + [{"proof": {"entry": "x", "date": "2026-11-27", "cells": [], "proven_at": 5}}]
    + [{"finding": json.loads(f)} for f in DAMAGED_FINDINGS],
)
def test_a_published_history_with_a_damaged_proof_or_finding_restores_nothing(
    tmp_path: Path, line: dict[str, Any]
) -> None:
    """A proof of the wrong shape restored ended every later report in a traceback; a
    finding SQLite cannot keep told the user to delete a sound history, half restored."""
    record = make_record(run_id="20261127T000000Z")
    published = tmp_path / "history.jsonl"
    published.write_text(
        '{"ftmatrix-history": 1}\n'
        + json.dumps({"record": record.to_dict()})
        + "\n"
        + json.dumps(line)
        + "\n"
    )
    out = tmp_path / "reports"
    restored = subprocess.run(
        [sys.executable, "-m", "ftmatrix", "restore-history", str(published), "--out", str(out)],
        capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    assert restored.returncode == 2, restored.stderr
    assert restored.stderr.count("\n") == 1, restored.stderr
    assert f"restore-history {published}: line 3: a " in restored.stderr
    assert "nothing was restored" in restored.stderr
    assert not (out / "history.sqlite").exists()


def test_a_damaged_proof_an_earlier_version_kept_never_ends_a_report(tmp_path: Path) -> None:
    from ftmatrix.store import save_proof

    path = CellFiles.of(tmp_path, "20261127T000000Z", "abc123def456").records
    CellRecordFile(path).add(make_record(case="a.py::t", run_id="20261127T000000Z"))
    save_proof(tmp_path / "history.sqlite", {"entry": "x"}, proven_at="2026-11-27")
    ran = report(tmp_path)
    assert (ran.returncode, ran.stderr) == (0, ""), ran.stderr


def restore_into(published: Path, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ftmatrix", "restore-history", str(published), "--out", str(out)],
        capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("run_id", "text"),
    [
        ("20261127T000000Z", "[1]"),
        ("20261127T000000Z", '"done"'),
        ("20261127T000000Z", '{"key": '),
        ("not a run", '{"key": "k"}'),
    ],
)
def test_a_damaged_done_marker_is_named_and_never_published(
    tmp_path: Path, run_id: str, text: str
) -> None:
    """A marker that is JSON but no object was kept silently and published: the next
    night's restore-history refused the whole published history ('a cell run names its
    run_id, cell_id and data; nothing was restored')."""
    path = CellFiles.of(tmp_path, "20261127T000000Z", "abc123def456").records
    CellRecordFile(path).add(make_record(case="a.py::t", run_id="20261127T000000Z"))
    marker = CellFiles.of(tmp_path, run_id, "abc123def456").done
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(text)
    ran = report(tmp_path)
    assert (ran.returncode, "Traceback" in ran.stderr) == (1, False), ran.stderr
    assert f"{marker}: skipped: " in ran.stderr
    assert "its cell's results are not reused" in ran.stderr
    restored = restore_into(tmp_path / "site" / "history.jsonl", tmp_path / "next")
    assert restored.returncode == 0, restored.stderr


def test_a_damaged_done_marker_an_earlier_version_kept_is_not_published(tmp_path: Path) -> None:
    path = CellFiles.of(tmp_path, "20261127T000000Z", "abc123def456").records
    CellRecordFile(path).add(make_record(case="a.py::t", run_id="20261127T000000Z"))
    assert report(tmp_path).returncode == 0
    with closing(sqlite3.connect(tmp_path / "history.sqlite")) as connection, connection:
        connection.execute("INSERT INTO cell_runs VALUES ('20261127T000000Z', 'c', '[1]')")
    assert report(tmp_path).returncode == 0
    restored = restore_into(tmp_path / "site" / "history.jsonl", tmp_path / "next")
    assert restored.returncode == 0, restored.stderr
