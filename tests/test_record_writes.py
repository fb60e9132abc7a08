"""What a cell's records cost stays linear, and every guarantee the plugin's writes keep:
the line each record gets, the supervisor's reading of the file, the running-case note
rewritten in place, and the files the plugin keeps open between cases."""

from __future__ import annotations

import dataclasses
import fcntl
import io
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import bare_cell, make_record
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ftmatrix.case_ends import CaseLimits
from ftmatrix.case_verdicts import CaseVerdicts
from ftmatrix.cell.file_writes import LineAppender, NoteFile, note_text, read_note, write_atomically
from ftmatrix.cell.files import CellFiles
from ftmatrix.cell.record import FIELDS, Record
from ftmatrix.cell.record_lines import CellLines
from ftmatrix.cell.records import (
    CellRecordFile,
    RecordScanner,
    compact_records,
    read_records,
    record_line,
    scan_records,
)
from ftmatrix.cell.redact import current_redactor
from ftmatrix.cell.status import Status
from ftmatrix.cell_launch import cell_env, pytest_command
from ftmatrix.progress import Progress
from ftmatrix.supervise import run_cases

SECRET = "hunter2-secret-value"
_REPEATED = ("packages", "host_packages", "hardware", "pins", "runner_labels")


def reference_line(record: Record) -> str:
    """A record's line as records were written before the line was put together by hand:
    json.dumps of every field redacted, keys sorted."""
    redactor = current_redactor()
    data = record.to_dict()
    for name, value in data.items():
        if name in _REPEATED:
            data[name] = redactor.data(json.loads(json.dumps(value, sort_keys=True, default=str)))
        elif isinstance(value, str):
            data[name] = redactor.text(value)
        elif isinstance(value, dict | list | tuple):
            data[name] = redactor.data(value)
    return json.dumps(data, sort_keys=True, default=str) + "\n"


texts = st.one_of(
    st.text(max_size=40),
    st.sampled_from([SECRET, f"token={SECRET}", f"x {SECRET!r} y", "a::b[1]", "\udc80bad"]),
)
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), texts
)  # fmt: skip
plain = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(texts, inner, max_size=3)),
    max_leaves=8,
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    case=texts,
    reason=st.one_of(st.none(), texts),
    status=st.sampled_from(list(Status)),
    duration=st.floats(allow_nan=True),
    flaky=st.booleans(),
    metrics=st.dictionaries(texts, plain, max_size=4),
    attempts=st.lists(st.dictionaries(texts, plain, max_size=3), max_size=2),
    packages=st.dictionaries(texts, texts, max_size=5),
    hardware=st.dictionaries(texts, plain, max_size=4),
    pins=st.dictionaries(texts, st.one_of(st.none(), texts), max_size=3),
    labels=st.lists(texts, max_size=3),
)
def test_a_record_s_line_is_byte_for_byte_what_json_dumps_wrote(
    monkeypatch: pytest.MonkeyPatch, **fields: Any
) -> None:
    """The line is put together field by field (json.dumps over a whole record cost a
    trivial case more than its run): whatever a record holds, the same bytes, redacted."""
    monkeypatch.setenv("WRITES_API_TOKEN", SECRET)
    record = make_record(
        case=fields["case"],
        reason=fields["reason"],
        status=fields["status"],
        duration=fields["duration"],
        flaky=fields["flaky"],
        metrics=fields["metrics"],
        attempts=tuple(fields["attempts"]),
        packages=fields["packages"],
        hardware=fields["hardware"],
        pins=fields["pins"],
        runner_labels=tuple(fields["labels"]),
    )
    line = record_line(record)
    assert line == reference_line(record)
    assert line == record_line(record)  # the remembered JSON of the repeated fields too
    assert SECRET not in line
    assert set(json.loads(line)) == set(FIELDS)


def test_equal_values_of_other_types_are_not_taken_for_each_other(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The repeated fields' JSON is remembered by value: 0, False, 0.0 and '0' are equal
    or alike to Python, not to JSON."""
    monkeypatch.delenv("WRITES_API_TOKEN", raising=False)
    seen = [
        json.loads(record_line(make_record(hardware={"gpus": value})))["hardware"]["gpus"]
        for value in (0, False, 0.0, "0", 0, False)
    ]
    assert [(type(v), v) for v in seen] == [
        (int, 0), (bool, False), (float, 0.0), (str, "0"), (int, 0), (bool, False)
    ]  # fmt: skip


@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    shared=st.fixed_dictionaries(
        {},
        optional={
            # A shared field holding a marker the shared text is cut at.
            "cell_label": st.one_of(texts, st.just("\x00ftmatrix-case-field-0\x00")),
            "packages": st.dictionaries(texts, texts, max_size=4),
            "hardware": st.dictionaries(texts, plain, max_size=3),
            "pins": st.dictionaries(texts, st.one_of(st.none(), texts), max_size=3),
            "beyond_cap": st.one_of(st.none(), texts),
        },
    ),
    cases=st.lists(
        st.fixed_dictionaries(
            {"case": texts, "status": st.sampled_from(list(Status))},
            optional={
                "reason": st.one_of(st.none(), texts),
                "duration": st.floats(allow_nan=True),
                "metrics": st.dictionaries(texts, plain, max_size=3),
                "started_at": texts,
                "message": texts,  # not a case field: the record's line field by field
                "flaky": st.booleans(),
            },
        ),
        min_size=1,
        max_size=4,
    ),
    secret=st.sampled_from([SECRET, "ftmatrix-case-field", "u0000ftmatrix", "null, "]),
    change_at=st.integers(min_value=0, max_value=4),
)
def test_a_cell_s_quick_lines_are_each_record_s_own_line(
    monkeypatch: pytest.MonkeyPatch,
    shared: dict[str, Any],
    cases: list[dict[str, Any]],
    secret: str,
    change_at: int,
) -> None:
    """The plugin's lines (the cell's fields written once, each case's put in their
    places) are byte for byte each record's line, whatever the fields hold: a secret that
    masks part of the markers the shared text is cut at, the environment changed between
    two records (a case that set a secret), a field outside the case's own."""
    monkeypatch.setenv("WRITES_API_TOKEN", secret)
    monkeypatch.delenv("LATER_API_TOKEN", raising=False)  # set by an earlier example
    base = make_record(**shared)
    lines = CellLines(base)
    for at, fields in enumerate(cases):
        if at == change_at:
            monkeypatch.setenv("LATER_API_TOKEN", "py3.11-trl1.16")  # in the cell label
        assert lines.line(**fields) == record_line(dataclasses.replace(base, **fields))


@settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    passes=st.lists(
        st.fixed_dictionaries(
            {
                "case": texts,
                "operation": texts,
                "started_at": texts,
                "finished_at": texts,
                "duration": st.one_of(st.floats(allow_nan=True), st.integers()),
            }
        ),
        min_size=1,
        max_size=4,
    ),
    secret=st.sampled_from([SECRET, "ftmatrix-case-field", "pass", "null, "]),
    change_at=st.integers(min_value=0, max_value=4),
)
def test_a_pass_s_line_made_in_one_go_is_its_record_s_own_line(
    monkeypatch: pytest.MonkeyPatch, passes: list[dict[str, Any]], secret: str, change_at: int
) -> None:
    """The usual case's line (a pass that recorded nothing), made in one go, is byte for
    byte its record's line: whatever its texts and time, a secret in them, the environment
    changed between two records."""
    monkeypatch.setenv("WRITES_API_TOKEN", secret)
    monkeypatch.delenv("LATER_API_TOKEN", raising=False)  # set by an earlier example
    base = make_record()
    lines = CellLines(base)
    for at, fields in enumerate(passes):
        if at == change_at:
            monkeypatch.setenv("LATER_API_TOKEN", "py3.11-trl1.16")  # in the cell label
        record = dataclasses.replace(base, status=Status.PASS, metrics={}, reason=None, **fields)
        assert lines.pass_line(**fields) == record_line(record)


# --- the supervisor's reading of the records file -------------------------------------


@settings(max_examples=150, deadline=None)
@given(
    steps=st.lists(
        st.sampled_from(["record", "again", "garbage", "blank", "torn", "newline", "replace"]),
        max_size=25,
    )
)
def test_reading_only_what_was_added_finds_what_reading_it_all_finds(steps: list[str]) -> None:
    """Whatever is appended (records, a case again, damaged and torn lines) or however the
    file is replaced, a scanner that read it before finds what a fresh read finds."""
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "cell.jsonl"
        scanner = RecordScanner(path)
        for number, step in enumerate(steps):
            with path.open("ab") as handle:
                if step == "record":
                    handle.write(record_line(make_record(case=f"t.py::c{number}")).encode())
                elif step == "again":
                    handle.write(record_line(make_record(case="t.py::c0")).encode())
                elif step == "garbage":
                    handle.write(b'{"not": "a record"}\n\xff\n')
                elif step == "blank":
                    handle.write(b"\n  \n")
                elif step == "torn":
                    handle.write(record_line(make_record(case="t.py::torn")).encode()[:30])
                elif step == "newline":
                    handle.write(b"\n")
            if step == "replace":
                write_atomically(path, record_line(make_record(case="t.py::only")))
            assert scanner.scan() == scan_records(path)


@pytest.mark.parametrize("shown", [False, True], ids=["quiet", "with-progress"])
def test_the_supervisor_reads_each_record_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shown: bool
) -> None:
    """Which cases have a record was asked after each pass, and the file compacted at the
    end, each reading the whole file: three reads of every record of a cell. Now each
    record is read once, however many times the supervisor asks; with the run's progress
    shown (as nox runs cells), the progress reads the same parse (it decoded every line
    a second time)."""
    count = 40
    cases = tmp_path / "cases"
    cases.mkdir()
    (cases / "test_many.py").write_text(
        f"import pytest\n\n\n@pytest.mark.parametrize('n', range({count}))\n"
        "def test_one(n):\n    assert n >= 0\n"
    )
    cell_file, ctx = bare_cell(tmp_path, cases)
    record_file = tmp_path / "out" / "cell1.jsonl"
    command, targets = pytest_command(Path(sys.executable), cell_file, record_file, ctx)
    parsed = []
    real = Record.from_mapping.__func__  # type: ignore[attr-defined]

    def counted(cls: type[Record], data: Any) -> Record:
        parsed.append(data.get("case"))
        return real(cls, data)  # type: ignore[no-any-return]

    monkeypatch.setattr(Record, "from_mapping", classmethod(counted))
    decoded = []  # every JSON decoding of a record line, whoever asks for it
    for owner, name in ((json, "loads"), (json.JSONDecoder, "decode")):
        real_decode = getattr(owner, name)

        def counting(
            *args: Any, _real: Any = real_decode, _method: bool = owner is not json, **kwargs: Any
        ) -> Any:
            text = args[1] if _method else args[0]
            if b'"schema"' in (text if isinstance(text, bytes) else text.encode()):
                decoded.append(1)
            return _real(*args, **kwargs)

        monkeypatch.setattr(owner, name, counting)
    stream = io.StringIO()
    progress = Progress(1, stream, live=False) if shown else None
    if progress is not None:
        progress.cell_started("cell1")
    records = run_cases(
        command,
        targets,
        record_file=record_file,
        cases_dir=cases.resolve(),
        env=cell_env(ctx.env),
        limits=CaseLimits(case_seconds=60, cell_seconds=600, memory_bytes=None),
        make_record=make_record,
        log=lambda line: None,
        cwd=tmp_path,
        progress=progress,
    )
    assert [r.status for r in records] == [Status.PASS] * count
    assert len(parsed) == count, sorted(parsed)
    assert len(decoded) == count
    if progress is not None:  # every case shown once, in one line each
        assert progress.counts == {Status.PASS: count}
        lines = [x for x in stream.getvalue().splitlines() if x.startswith("[ftmatrix] [")]
        assert sorted(line.rsplit(" | ", 1)[1] for line in lines) == sorted(
            f"test_many.py::test_one[{n}]: pass" for n in range(count)
        )


def test_a_secret_that_matches_a_time_or_status_loses_no_result(tmp_path: Path) -> None:
    """A secret whose value a record's own text happened to hold (today's date in every
    record's times, a status word) was masked there too: every record became unreadable,
    moved to quarantine, and the cell ended with "no case was collected". The times, ids
    and status this code writes are never masked; the case's own texts still are."""
    cases = tmp_path / "cases"
    cases.mkdir()
    (cases / "test_told.py").write_text(
        "import os, pytest\n\n\n@pytest.mark.parametrize('n', range(3))\n"
        "def test_one(n):\n    assert n < 2, os.environ['DEPLOY_API_TOKEN']\n"
    )
    cell_file, ctx = bare_cell(tmp_path, cases)
    record_file = tmp_path / "out" / "cell1.jsonl"
    command, targets = pytest_command(Path(sys.executable), cell_file, record_file, ctx)
    today = time.strftime("%Y-%m-%d", time.gmtime())
    env = {**cell_env(ctx.env), "DEPLOY_API_TOKEN": today, "RELEASE_PASSWORD": "timeout"}
    records = run_cases(
        command,
        targets,
        record_file=record_file,
        cases_dir=cases.resolve(),
        env=env,
        limits=CaseLimits(case_seconds=60, cell_seconds=600, memory_bytes=None),
        make_record=make_record,
        log=lambda line: None,
        cwd=tmp_path,
    )
    assert sorted(r.status.value for r in records) == ["fail", "pass", "pass"]
    assert not CellFiles(record_file).quarantine.exists()
    (failed,) = [r for r in records if r.status is Status.FAIL]
    assert failed.started_at.startswith(time.strftime("%Y-", time.gmtime()))
    assert today not in (failed.message or "") and "<redacted:DEPLOY_API_TOKEN>" in (
        failed.message or ""
    )


def test_compaction_with_the_supervisor_s_scanner_reads_only_the_rest(tmp_path: Path) -> None:
    path = tmp_path / "cell.jsonl"
    file = CellRecordFile(path)
    for number in range(5):
        file.add(make_record(case=f"t.py::c{number}"))
    scanner = RecordScanner(path)
    assert len(scanner.scan().records) == 5
    file.add(make_record(case="t.py::c0", status=Status.FAIL))  # a case recorded again
    path.open("ab").write(b"not json\n")
    scan = compact_records(path, scanner)
    assert (len(scan.records), scan.superseded, scan.damaged) == (5, 1, (b"not json",))
    assert scanner.scan() == scan_records(path)  # the rewritten file, read anew
    assert [r.status for r in scan_records(path).records].count(Status.FAIL) == 1


def test_verdicts_know_the_cases_recorded_after_a_file_was_replaced(tmp_path: Path) -> None:
    files_dir = tmp_path / "records"
    from ftmatrix.cell.files import CellFiles

    files = CellFiles(files_dir / "cell1.jsonl")
    verdicts = CaseVerdicts(
        files, make_record, {}, lambda line: None, lambda case, status: None, resumed=False
    )
    file = CellRecordFile(files.records)
    file.add(make_record(case="t.py::a"))
    assert verdicts.recorded() == {"t.py::a"}
    file.records = [make_record(case="t.py::b")]
    file.save()  # replaced whole, shorter or not
    assert verdicts.recorded() == {"t.py::b"}


# --- the running-case note, rewritten in place ----------------------------------------


def test_a_note_read_while_it_is_rewritten_is_the_old_the_new_or_none(tmp_path: Path) -> None:
    """Rewritten in place, a note may be read half old, half new: with the same layout
    (one case after another), the halves made a note that parses, naming one case with
    another's start (a timeout the supervisor would have to act on). The checksum makes
    every such mix no note."""
    old = note_text(json.dumps({"case": "t.py::c[1234]", "started": 1764230400.125, "pid": 7}))
    new = note_text(json.dumps({"case": "t.py::c[1235]", "started": 1764230461.5, "pid": 7}))
    path = tmp_path / "note"
    seen = set()
    for cut in range(len(new) + 1):
        for tail in (old[cut:], ""):  # before and after the truncation to the new length
            path.write_text(new[:cut] + tail)
            note = read_note(path)
            seen.add(None if note is None else (note["case"], note["started"]))
    assert seen == {None, ("t.py::c[1234]", 1764230400.125), ("t.py::c[1235]", 1764230461.5)}
    at = new.index('", "started"')  # such a mix parses: the new case, the old case's start
    mixed = json.loads(new[:at] + old[at:].split("\n")[0])
    assert (mixed["case"], mixed["started"]) == ("t.py::c[1235]", 1764230400.125)


def test_a_note_is_written_cleared_and_removed(tmp_path: Path) -> None:
    path = tmp_path / "records" / "cell1.jsonl.current"
    note = NoteFile(path)
    note.write(json.dumps({"case": "t.py::a"}))
    assert read_note(path) == {"case": "t.py::a"}
    note.write(json.dumps({"case": "t.py::b", "operation": "b"}))
    note.write(json.dumps({"case": "t.py::c"}))  # shorter than the last: nothing of it left
    assert read_note(path) == {"case": "t.py::c"}
    note.clear()
    assert read_note(path) is None
    note.write(json.dumps({"case": "t.py::d"}))  # as long as the spoiled one: whole again
    assert read_note(path) == {"case": "t.py::d"}
    note.clear()
    assert read_note(path) is None
    note.close()
    assert not path.exists()


# --- what the plugin keeps open, when a case closes what it did not open -------------

CLOSER = """
import json, os, sys
from pathlib import Path
from ftmatrix.cell.file_writes import LineAppender, NoteFile, read_note
from ftmatrix.cell.processes import keeper_dying

folder = Path(sys.argv[1])
appender, note = LineAppender(folder / "cell.jsonl"), NoteFile(folder / "cell.jsonl.current")
appender.append(b'{"n": 1}\\n')
note.write(json.dumps({"case": "first"}))
assert keeper_dying() is False
os.closerange(3, 4096)  # a case that closes every descriptor it did not open...
assert keeper_dying() is False  # ...is not taken for its keeper's death (a 30 s wait)
os.closerange(3, 4096)  # ...nor when it opens files of its own on their numbers
victims = [os.open(folder / f"victim{i}", os.O_RDWR | os.O_CREAT) for i in range(4)]
assert keeper_dying() is False
appender.append(b'{"n": 2}\\n')
note.write(json.dumps({"case": "second"}))
note.clear()
note.write(json.dumps({"case": "third"}))
print(json.dumps([read_note(folder / "cell.jsonl.current"), sorted(victims)]))
"""


def test_descriptors_a_case_closed_or_took_are_opened_again_never_written(tmp_path: Path):
    """The plugin keeps the records file, its folder, the note and the keeper's /proc
    status open between cases; a case that closes descriptors it did not open, and opens
    files of its own on their numbers, must find its files untouched, and every record
    and note must still reach its file."""
    env = {**os.environ, "FTMATRIX_KEEPER": str(os.getpid())}
    env.pop("PYTEST_XDIST_WORKER", None)
    ran = subprocess.run(
        [sys.executable, "-c", CLOSER, str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    note, victims = json.loads(ran.stdout)
    assert note == {"case": "third"}
    assert 3 in victims  # a number the plugin had kept open
    assert (tmp_path / "cell.jsonl").read_text() == '{"n": 1}\n{"n": 2}\n'
    assert [(tmp_path / f"victim{i}").read_bytes() for i in range(4)] == [b""] * 4


RESTORED = """
import os, sys
from pathlib import Path
from ftmatrix.cell.file_writes import LineAppender, NoteFile

saved = os.dup(1)  # pytest keeps its output on a low number while it captures a case's
folder = Path(sys.argv[1])
appender, note = LineAppender(folder / "cell.jsonl"), NoteFile(folder / "cell.jsonl.current")
appender.append(b'{"n": 1}\\n')
note.write('{"case": "first"}')
os.closerange(3, 4096)  # a case that closes every descriptor it did not open
appender.append(b'{"n": 2}\\n')
note.write('{"case": "second"}')
try:
    os.dup2(saved, 1)  # pytest restoring its output after the case
except OSError:
    pass
print("pytest's own output", flush=True)
"""


def test_a_descriptor_opened_again_never_takes_the_number_pytest_restores_from(
    tmp_path: Path,
) -> None:
    """A case that closes every descriptor closes pytest's saved output too; the plugin's
    files opened again on the lowest free numbers took it, and pytest's output went into
    the records file (found by a held-out hostile case: 256 unreadable lines)."""
    ran = subprocess.run(
        [sys.executable, "-c", RESTORED, str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    assert (tmp_path / "cell.jsonl").read_text() == '{"n": 1}\n{"n": 2}\n'
    assert read_note(tmp_path / "cell.jsonl.current") == {"case": "second"}


@pytest.mark.parametrize("shared", [True, False])
def test_a_kept_records_file_replaced_whole_gets_the_next_line(
    tmp_path: Path, shared: bool
) -> None:
    """Compaction replaces the file: a line appended through the old descriptor would go
    to a file no one reads. A torn line stays alone, with the lock or without."""
    path = tmp_path / "cell.jsonl"
    appender = LineAppender(path, shared=shared)
    appender.append(b'{"n": 1}\n')
    write_atomically(path, '{"n": 0}\n')
    appender.append(b'{"n": 2}\n')
    path.write_bytes(path.read_bytes() + b'{"torn')  # a write that never finished
    appender.append(b'{"n": 3}\n')
    appender.close()
    assert path.read_text().splitlines() == ['{"n": 0}', '{"n": 2}', '{"torn', '{"n": 3}']


def test_a_shared_records_file_s_lines_wait_for_the_folder_lock(tmp_path: Path) -> None:
    # pytest-xdist's workers, and the supervisor noting a dead worker's case, append to
    # one file: each line under the folder lock.
    path = tmp_path / "cell.jsonl"
    appender = LineAppender(path, shared=True)
    folder = os.open(tmp_path, os.O_RDONLY)
    try:
        fcntl.flock(folder, fcntl.LOCK_EX)
        writing = threading.Thread(target=appender.append, args=(b'{"n": 1}\n',))
        writing.start()
        writing.join(0.3)
        assert writing.is_alive() and not path.exists()  # still waiting for the lock
    finally:
        os.close(folder)
    writing.join(30)
    appender.close()
    assert path.read_text() == '{"n": 1}\n'


def open_descriptors() -> int:
    return len(list(Path("/proc/self/fd").iterdir()))


def test_the_plugin_s_file_closes_what_it_kept(tmp_path: Path) -> None:
    file = LineAppender(tmp_path / "cell.jsonl")
    before = open_descriptors()
    file.append(record_line(make_record(case="t.py::a")).encode())
    assert open_descriptors() == before + 2  # the file and its folder
    file.close()
    assert open_descriptors() == before
    assert [r.case for r in scan_records(tmp_path / "cell.jsonl").records] == ["t.py::a"]


def test_the_record_written_through_a_kept_file_is_the_one_written_by_name(
    tmp_path: Path,
) -> None:
    kept, by_name = tmp_path / "kept" / "cell.jsonl", tmp_path / "named" / "cell.jsonl"
    appender, file = LineAppender(kept), CellRecordFile(by_name)
    for number in range(3):
        appender.append(record_line(make_record(case=f"t.py::c{number}")).encode())
        file.add(make_record(case=f"t.py::c{number}"))
    appender.close()
    assert kept.read_bytes() == by_name.read_bytes()
    assert kept.read_text().count("\n") == 3


def test_a_kept_file_removed_or_replaced_leaves_no_descriptor_open(tmp_path: Path) -> None:
    # A kept descriptor of a file since removed is still ours: closed, never leaked.
    def open_descriptors() -> int:
        return len(list(Path("/proc/self/fd").iterdir()))

    note, appender = NoteFile(tmp_path / "note"), LineAppender(tmp_path / "cell.jsonl")
    note.write(json.dumps({"case": "first"}))
    appender.append(b'{"n": 1}\n')
    before = open_descriptors()
    (tmp_path / "note").unlink()
    note.write(json.dumps({"case": "second"}))
    assert open_descriptors() == before
    (tmp_path / "cell.jsonl").unlink()
    appender.close()
    note.close()
    assert open_descriptors() == before - 3  # the note, the records file and its folder


def test_a_records_file_removed_under_its_writer_keeps_its_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A case that removes the records' folder: the plugin's next line goes to a new file,
    with the lines the removed one held (read through the descriptor kept open)."""
    path = tmp_path / "records" / "cell.jsonl"
    path.parent.mkdir()
    appender = LineAppender(path, shared=False)
    appender.append(b'{"case": "a"}\n')
    appender.append(b'{"case": "b"}\n')
    shutil.rmtree(path.parent)
    appender.append(b'{"case": "c"}\n')
    appender.close()
    assert path.read_bytes() == b'{"case": "a"}\n{"case": "b"}\n{"case": "c"}\n'
    assert "cell.jsonl was removed under this process (by a case): its 2 line(s)" in (
        capsys.readouterr().err
    )


def test_records_the_supervisor_read_and_the_file_lost_are_written_again(tmp_path: Path) -> None:
    """Its second layer: a file replaced under the run without the records the supervisor
    had read of it (a writer that could not carry them) gets them back at the cell's end."""
    path = tmp_path / "cell.jsonl"
    first, second, third = (make_record(case=f"test_x.py::test_{n}") for n in "abc")
    CellRecordFile(path).add(first)
    CellRecordFile(path).add(second)
    scanner = RecordScanner(path)
    assert len(scanner.scan().records) == 2
    path.unlink()
    CellRecordFile(path).add(third)
    scan = compact_records(path, scanner)
    assert scan.restored == 2
    assert {r.case for r in read_records(path).records} == {r.case for r in (first, second, third)}
