"""Records: round trip, atomic files, corrupt input, secrets."""

from __future__ import annotations

import dataclasses
import gc
import json
import os
import re
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from conftest import make_record

from ftmatrix.cell.files import CellFiles
from ftmatrix.cell.record import SCHEMA_VERSION, Record, json_schema
from ftmatrix.cell.records import CellRecordFile, read_records, redact
from ftmatrix.cell.status import Status
from ftmatrix.record_order import newest_per


def test_round_trip_through_json():
    record = make_record(status=Status.NOT_APPLICABLE, reason="trl 0.8 is outside >=0.9")
    data = json.loads(json.dumps(record.to_dict()))
    assert data["status"] == "n/a"
    assert data["schema"] == SCHEMA_VERSION
    assert Record.from_mapping(data) == record


@pytest.mark.parametrize("field", ["pins", "packages", "host_packages"])
def test_a_bad_version_is_refused_after_good_records_of_the_same_packages(field: str):
    # The versions of a cell's records are checked once while they stay the same: a
    # record whose versions differ in kind alone is checked anew.
    good = json.loads(json.dumps(make_record(status=Status.PASS).to_dict()))
    good[field] = {"torch": "2.5.1", "trl": "0.19"}
    Record.from_mapping(good)
    bad = {**good, field: {"torch": "2.5.1", "trl": 0.19}}  # the same but for its kind
    with pytest.raises(ValueError, match=rf"{field}\.trl: 0\.19 is not a version"):
        Record.from_mapping(bad)
    assert getattr(Record.from_mapping(good), field) == good[field]  # the good one still reads


@pytest.mark.parametrize(
    ("change", "refused"),
    [
        ({"run_id": "../up"}, "field 'run_id'"),
        ({"started_at": "yesterday"}, "field 'started_at'"),
        ({"duration": float("inf")}, "field 'duration'"),
        ({"status": "bogus"}, "bogus"),
        ({"attempts": [1]}, "field 'attempts'"),
        ({"packages": []}, "field 'packages': expected object"),
        ({"case": None}, "field 'case': expected string"),
    ],
)
def test_a_record_of_a_shape_read_before_is_still_checked(change: dict, refused: str):
    """Reading skips the field checks of a shape (keys and their types) found right
    before, and the run ids found right: a value of the same type, or a field of another
    type, is still refused."""
    good = json.loads(json.dumps(make_record(status=Status.PASS).to_dict()))
    Record.from_mapping(good)
    Record.from_mapping(good)
    with pytest.raises(ValueError, match=re.escape(refused)):
        Record.from_mapping({**good, **change})


def test_a_record_read_is_the_one_the_dataclass_makes():
    """Made without the dataclass's __init__ (a fraction of its time): the same fields in
    the same order, each record its own mappings, frozen, unknown keys left out."""
    data = json.loads(json.dumps(make_record(status=Status.FAIL, message="m").to_dict()))
    sparse = {k: v for k, v in data.items() if k not in {"packages", "metrics", "hardware"}}
    for value in (data, sparse, {**data, "from_a_newer_ftmatrix": 1}):
        read = Record.from_mapping(value)
        made = Record(**{f.name: getattr(read, f.name) for f in dataclasses.fields(Record)})
        assert read == made and list(vars(read)) == list(vars(made))
        assert not hasattr(read, "from_a_newer_ftmatrix")
    first, second = Record.from_mapping(sparse), Record.from_mapping(sparse)
    assert first.packages == {} and first.packages is not second.packages
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.case = "other"  # type: ignore[misc]


def test_schema_lists_every_status_and_required_field():
    schema = json_schema()
    assert schema["properties"]["status"]["enum"] == [s.value for s in Status]
    assert {"status", "operation", "case", "pins", "hardware_class"} <= set(schema["required"])


def test_cell_file_is_rewritten_whole_after_each_record(tmp_path: Path):
    path = CellFiles.of(tmp_path, "run1", "cell1").records
    file = CellRecordFile(path)
    file.add(make_record(case="a"))
    file.add(make_record(case="b"))
    assert [json.loads(line)["case"] for line in path.read_text().splitlines()] == ["a", "b"]
    assert list(path.parent.iterdir()) == [path]  # no temporary file left behind


def test_adding_a_record_writes_the_others_back_as_they_were(tmp_path: Path):
    """A case costs one record's serialization: the lines already there (redacted when
    they were written) are kept byte for byte, not rebuilt from the file each time."""
    record = make_record()
    path = CellFiles.of(tmp_path, record.run_id, record.cell_id).records
    file = CellRecordFile(path)
    file.add(make_record(case="a"))
    first = path.read_text()
    # The same record in another valid form (indented keys): a rewrite would normalise it.
    path.write_text(json.dumps(json.loads(first), indent=None, separators=(", ", " : ")) + "\n")
    kept = path.read_text()
    file.add(make_record(case="b"))
    lines = path.read_text().splitlines(keepends=True)
    assert lines[0] == kept
    assert json.loads(lines[1])["case"] == "b"
    file.add(make_record(case="a", status=Status.FAIL))  # a case's newer record replaces it
    assert [(r.case, r.status) for r in CellRecordFile(path).records] == [
        ("b", Status.PASS),
        ("a", Status.FAIL),
    ]


def test_corrupt_and_truncated_lines_are_skipped_with_reasons(tmp_path: Path):
    path = CellFiles.of(tmp_path, "run1", "cell1").records
    ours = make_record(run_id="run1", cell_id="cell1")
    CellRecordFile(path).add(ours)
    with path.open("a") as handle:
        handle.write('{"schema": 1, "status": "pass"\n')  # truncated
        handle.write(json.dumps({**ours.to_dict(), "status": "exploded"}) + "\n")
    result = read_records(tmp_path)
    assert len(result.records) == 1
    assert len(result.problems) == 2
    assert "cell1.jsonl:2: skipped" in result.problems[0]
    assert "unknown status 'exploded'; allowed: pass, fail" in result.problems[1]


def test_unknown_status_message_lists_the_allowed_ones():
    with pytest.raises(ValueError, match=r"allowed: pass, fail, crash, timeout, oom, skip, n/a"):
        Status.parse("flaky-ish")


def test_secrets_from_the_environment_are_redacted():
    env = {
        "HF_TOKEN": "hf_abcdefghijkl",
        "MY_API_KEY": "sk-123456789",
        "DEBUG": "1",
        "PATH": "/bin",
    }
    text = "auth hf_abcdefghijkl failed with sk-123456789 at /bin 1"
    assert (
        redact(text, env) == "auth <redacted:HF_TOKEN> failed with <redacted:MY_API_KEY> at /bin 1"
    )
    assert redact(None, env) is None


def test_newest_per_key_takes_the_newest_run_then_the_latest_finish():
    older = make_record(run_id="r1", finished_at="2026-11-22T11:00:09+00:00")
    first = make_record(run_id="r2", finished_at="2026-11-22T12:00:01+00:00")
    later = make_record(run_id="r2", finished_at="2026-11-22T12:00:02+00:00", case="x")
    twin = make_record(run_id="r2", finished_at="2026-11-22T12:00:02+00:00", case="y")
    other = make_record(run_id="r0", cell_id="other")
    # A tie (same run, same finish) keeps the first seen.
    for records, winner in (
        ([older, first, later, twin, other], later),
        ([twin, later, first, older, other], twin),
    ):
        newest = newest_per(records, key=lambda r: r.cell_id)
        assert newest == {"abc123def456": winner, "other": other}


def test_only_runs_that_broke_count_as_breaks():
    assert {s.value for s in Status if s.is_break} == {"fail", "crash", "timeout", "oom"}


def test_a_file_written_atomically_has_the_mode_of_any_other_file(tmp_path: Path):
    """The report's files (and the records) were 0600 beside 0644 files: mkstemp's mode
    outlived the rename."""
    import stat

    from ftmatrix.cell.file_writes import write_atomically

    before = os.umask(0o022)
    try:
        write_atomically(tmp_path / "index.html", "<html>")
        write_atomically(tmp_path / "note.json", "{}", durable=False)  # a running-case note
        (tmp_path / "plain.txt").write_text("x")
    finally:
        os.umask(before)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in tmp_path.iterdir()}
    assert modes == {"index.html": 0o644, "note.json": 0o644, "plain.txt": 0o644}


def test_a_secret_set_between_two_records_is_masked_in_the_second(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """Each record is redacted for the environment as it is when it is written: a case may
    set a secret, and what was remembered of the texts before must not hide it."""
    value = "set-by-a-case-4242"
    file = CellRecordFile(tmp_path / "cell.jsonl")
    file.add(make_record(case="test_x.py::test_a", reason=value, packages={"p": value}))
    monkeypatch.setenv("CASE_API_TOKEN", value)
    file.add(make_record(case="test_x.py::test_b", reason=value, packages={"p": value}))
    first, second = (json.loads(line) for line in file.path.read_text().splitlines())
    assert (first["reason"], first["packages"]) == (value, {"p": value})
    masked = "<redacted:CASE_API_TOKEN>"
    assert (second["reason"], second["packages"]) == (masked, {"p": masked})
    monkeypatch.delenv("CASE_API_TOKEN")
    file.add(make_record(case="test_x.py::test_c", reason=value))
    assert json.loads(file.path.read_text().splitlines()[-1])["reason"] == value


def test_a_cell_s_records_scan_the_environment_once_not_once_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """Scanning the environment for secrets (and decoding it) was most of a trivial case's
    recording; the running case's variables change with each case and are no secret."""
    from ftmatrix.cell import redact as redact_module

    scans = []
    real = redact_module.secret_values

    def counted(env: dict[str, str], also: Any = ()) -> list[tuple[str, str]]:
        scans.append(1)
        return real(env, also)

    monkeypatch.setattr(redact_module, "secret_values", counted)
    monkeypatch.setenv("A_NEW_SECRET_KEY", "not-seen-before-1")  # no earlier redaction serves
    file = CellRecordFile(tmp_path / "cell.jsonl")
    for number in range(50):
        monkeypatch.setenv("PYTEST_CURRENT_TEST", f"test_x.py::test_{number} (call)")
        monkeypatch.setenv("FTMATRIX_RUNNING_CASE", f"test_x.py::test_{number}")
        file.add(make_record(case=f"test_x.py::test_{number}"))
    assert len(scans) == 1
    assert len(file.records) == 50


def test_a_line_of_many_unknown_keys_is_not_kept_after_it_is_read():
    """The field checks are remembered per shape of a record's own keys: a line with a
    hundred thousand others (damaged, or hostile) was kept alive in that memory."""
    good = json.loads(json.dumps(make_record().to_dict()))
    junk = {**good, **{f"unknown-key-{n}": n for n in range(100_000)}}
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    Record.from_mapping(junk)
    del junk
    gc.collect()
    kept = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert kept < 1_000_000, kept
