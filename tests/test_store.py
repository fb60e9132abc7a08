"""The history store: idempotent, order-independent merges into one SQLite file."""

from __future__ import annotations

import itertools
import json
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from conftest import make_record

from ftmatrix.cell.files import CellFiles
from ftmatrix.cell.records import CellRecordFile
from ftmatrix.cell.status import Status
from ftmatrix.errors import ExitCode
from ftmatrix.store import (
    SCHEMA_VERSION,
    history,
    load_findings,
    load_history,
    merge,
    merge_records,
    open_store,
    save_finding,
)

RECORDS = [
    make_record(run_id="r1", case="a"),
    make_record(run_id="r1", case="b", status=Status.FAIL, message="boom"),
    make_record(run_id="r2", case="a", finished_at="2026-11-23T00:00:00+00:00"),
    # the same key as the first, finished later: it wins whatever the order
    make_record(run_id="r1", case="a", status=Status.FAIL, finished_at="2026-11-22T13:00:00+00:00"),
]


def test_merging_twice_changes_nothing(tmp_path: Path):
    store = tmp_path / "h.sqlite"
    assert merge(store, RECORDS[:3]) == (3, 0)
    assert merge(store, RECORDS[:3]) == (0, 3)
    assert len(load_history(store)) == 3


@pytest.mark.parametrize("order", list(itertools.permutations(range(4))))
def test_merge_order_does_not_matter(tmp_path: Path, order):
    store = tmp_path / "h.sqlite"
    for index in order:
        merge(store, [RECORDS[index]])
    history = {(r.run_id, r.case): r.status for r in load_history(store)}
    assert history == {("r1", "a"): Status.FAIL, ("r1", "b"): Status.FAIL, ("r2", "a"): Status.PASS}


def test_shards_merge_and_corrupt_files_are_counted_not_fatal(tmp_path: Path):
    shard_one, shard_two = tmp_path / "one", tmp_path / "two"
    for shard, cell_id in ((shard_one, "c1"), (shard_two, "c2")):
        record = make_record(run_id="r1", cell_id=cell_id)
        CellRecordFile(CellFiles.of(shard, "r1", cell_id).records).add(record)
    broken = CellFiles.of(shard_two, "r1", "c3").records
    broken.write_text('{"schema": 1, "status": "pa')  # a truncated upload
    result = merge_records(tmp_path / "h.sqlite", [shard_one, shard_two])
    assert (result.added, result.unchanged) == (2, 0)
    assert len(result.problems) == 1 and "c3.jsonl:1: skipped" in result.problems[0]


def test_schema_is_versioned_and_newer_files_are_refused(tmp_path: Path):
    store = tmp_path / "h.sqlite"
    connection = open_store(store)
    assert connection.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    connection.close()
    with pytest.raises(sqlite3.DatabaseError, match="is newer than this ftmatrix"):
        open_store(store)


def test_findings_are_kept(tmp_path: Path):
    store = tmp_path / "h.sqlite"
    finding = {
        "case": "t.py::x",
        "axis": "trl",
        "last_good": "0.18.0",
        "first_bad": "0.19.0",
        "held": {"transformers": "5.23.0"},
    }
    save_finding(store, finding)
    save_finding(store, finding)
    assert load_findings(store) == [json.loads(json.dumps(finding))]


def test_each_hardware_class_keeps_its_own_finding(tmp_path: Path):
    """Two classes bisecting the same case once wrote one folder and one history key: the
    night kept one class's answer. Their folders and keys now differ."""
    from ftmatrix.bisection.cells import BisectRequest

    store = tmp_path / "h.sqlite"
    requests = [
        BisectRequest(case="t.py::x", axis="trl", good="0.18.0", bad="0.19.0", hardware=h)
        for h in ("l4", "a100x2")
    ]
    assert len({r.id for r in requests}) == 2
    for request, first_bad in zip(requests, ("0.19.0", "0.18.5"), strict=True):
        save_finding(
            store,
            {
                "case": request.case,
                "axis": "trl",
                "hardware": request.hardware,
                "first_bad": first_bad,
            },
        )
    assert sorted((f["hardware"], f["first_bad"]) for f in load_findings(store)) == [
        ("a100x2", "0.18.5"),
        ("l4", "0.19.0"),
    ]


def test_newest_runs_and_pass_rates_come_straight_from_sql(tmp_path: Path):
    from ftmatrix.report.changes import pass_rates
    from ftmatrix.store import newest_records, pass_rate_table

    records = [
        make_record(
            run_id=run,
            cell_id=cell,
            cell_label=cell,
            case=case,
            status=Status.FAIL if (run, case) == ("r2", "b") else Status.PASS,
        )
        for run in ("r1", "r2", "r3")
        for cell in ("c1", "c2")
        for case in ("a", "b")
        if not (run == "r3" and cell == "c2")  # c2 missed the last night
    ]
    store = tmp_path / "h.sqlite"
    merge(store, records)
    newest = {(r.cell_id, r.run_id) for r in newest_records(store)}
    before = {(r.cell_id, r.run_id) for r in newest_records(store, back=1)}
    assert newest == {("c1", "r3"), ("c2", "r2")}
    assert before == {("c1", "r2"), ("c2", "r1")}
    assert pass_rate_table(store) == pass_rates(records)


def test_pass_rates_follow_a_replaced_record_and_survive_a_migration(tmp_path: Path):
    from ftmatrix.store import MIGRATIONS, pass_rate_table

    store = tmp_path / "h.sqlite"
    merge(store, RECORDS[:3])
    assert pass_rate_table(store)["sft"] == [("r1", 0.5), ("r2", 1.0)]
    merge(store, [RECORDS[3]])  # r1/a fails after all: r1's rate is counted again
    assert pass_rate_table(store)["sft"] == [("r1", 0.0), ("r2", 1.0)]

    # A history written before the rates were kept gets them on its next open.
    old = tmp_path / "old.sqlite"
    connection = sqlite3.connect(old)
    for number, migration in enumerate(MIGRATIONS[:3]):
        connection.executescript(migration)
        connection.execute(f"PRAGMA user_version = {number + 1}")
    for record in RECORDS[:3]:
        connection.execute(
            "INSERT INTO records VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                record.run_id,
                record.cell_id,
                record.case,
                record.cell_label,
                record.operation,
                record.status.value,
                record.hardware_class,
                record.signature,
                record.finished_at,
                json.dumps(record.to_dict()),
            ),
        )
    connection.commit()
    connection.close()
    assert pass_rate_table(old)["sft"] == [("r1", 0.5), ("r2", 1.0)]


def _open_when_all_are_ready(path: str, ready: Any, failures: Any) -> None:
    ready.wait()
    try:
        with history(Path(path)) as connection:
            connection.execute("SELECT COUNT(*) FROM records").fetchone()
    except Exception as exc:  # what a report saw: "table findings already exists"
        failures.put(f"{type(exc).__name__}: {exc}")


def test_processes_opening_a_new_history_at_once_all_get_it_whole(tmp_path: Path) -> None:
    """Two runs' reports into one folder once both created the new history's tables."""
    import multiprocessing

    context = multiprocessing.get_context("fork")
    for attempt in range(5):
        path = tmp_path / f"history-{attempt}.sqlite"
        ready, failures = context.Barrier(6), context.Queue()
        openers = [
            context.Process(target=_open_when_all_are_ready, args=(str(path), ready, failures))
            for _ in range(6)
        ]
        for opener in openers:
            opener.start()
        for opener in openers:
            opener.join(120)
        seen = [failures.get() for _ in range(failures.qsize())] if not failures.empty() else []
        assert seen == [], seen
        assert all(opener.exitcode == 0 for opener in openers)
        with history(path) as connection:
            (version,) = connection.execute("PRAGMA user_version").fetchone()
        assert version == SCHEMA_VERSION


def _database(path: Path, *statements: str) -> None:
    with closing(sqlite3.connect(path)) as connection, connection:
        for statement in statements:
            connection.execute(statement)


# Databases that are not a history ftmatrix made, each with what the refusal says.
NOT_OURS = [
    pytest.param(
        ("CREATE TABLE records (x)",), "a database of another program", id="another program"
    ),
    pytest.param(("CREATE TABLE notes (x)",), "a database of another program", id="no records"),
    pytest.param(
        ("CREATE TABLE notes (x)", "PRAGMA user_version = 3"),
        "it has no table 'records'",
        id="an older version, without its tables",
    ),
    pytest.param(
        ("CREATE TABLE notes (x)", f"PRAGMA user_version = {SCHEMA_VERSION}"),
        "it has no table 'records'",
        id="this version, without its tables",
    ),
    pytest.param(
        (
            "CREATE TABLE records (run_id, cell_id, case_id)",
            f"PRAGMA user_version = {SCHEMA_VERSION}",
        ),
        "it has no column(s) cell_label, data, finished_at",
        id="a table of other columns",
    ),
]


@pytest.mark.parametrize(("made", "said"), NOT_OURS)
@pytest.mark.parametrize("command", ["report", "restore-history"])
def test_a_database_of_another_schema_is_refused_in_one_line_and_left_as_it_was(
    tmp_path: Path, made: tuple[str, ...], said: str, command: str
) -> None:
    """Once, a database of another program (or of ftmatrix's version number with other
    tables) failed at its first query: 'cannot be used: table records already exists',
    as if a lock held it; an older one even got the newer tables added before that."""
    out = tmp_path / "reports"
    CellRecordFile(CellFiles.of(out, "r1", "c1").records).add(
        make_record(run_id="r1", cell_id="c1")
    )
    store = out / "history.sqlite"
    _database(store, *made)
    before = store.read_bytes()
    published = tmp_path / "history.jsonl"
    published.write_text('{"ftmatrix-history": 1}\n')
    arguments = {"report": ["report"], "restore-history": ["restore-history", str(published)]}
    ran = subprocess.run(
        [sys.executable, "-m", "ftmatrix", *arguments[command], "--out", str(out)],
        capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    assert ran.returncode == ExitCode.HISTORY, ran.stderr
    assert ran.stderr.count("\n") == 1, ran.stderr
    assert f"{store}: not a history this ftmatrix can read ({said}" in ran.stderr
    assert store.read_bytes() == before
