"""The history: records from many shards, runners and nights in one SQLite file.

Merging is idempotent (the same records twice change nothing) and
order-independent (of two different records for one run, cell and case, the one
that finished later wins, whatever order they arrive in). Unreadable record
lines are skipped and counted, never fatal. The schema is versioned with
``PRAGMA user_version`` and migrated forward on open.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ftmatrix.cell.file_writes import read_json
from ftmatrix.cell.files import DONE_SUFFIX, RUN_ID_RULE, is_run_id
from ftmatrix.cell.record import Record
from ftmatrix.cell.record_json import strict_data
from ftmatrix.cell.records import read_records
from ftmatrix.errors import HistoryError
from ftmatrix.history_checks import (
    check_tables,
    finding_problem,
    proof_problem,
    statements,
    tables,
)
from ftmatrix.record_order import split_clock_ahead

# Passed and judged cases per operation, for the runs the ``runs`` subquery names.
_PASS_RATES_OF_RUNS = """
    SELECT operation, run_id, SUM(status = 'pass'), COUNT(*)
    FROM records
    WHERE run_id IN ({runs}) AND status NOT IN ('skip', 'n/a') AND case_id != '*'
    GROUP BY operation, run_id
"""

# When each cell's run ran, as a key that sorts by time (never by run id: an id is any
# name, `ci-smoke` or a date of the future): the UTC time its last record finished, and
# '|1' after it where that record was carried from an earlier run (reused): the run
# carrying a result comes after the run that made it. record_order.ran_at is its Python twin.
_RAN_AT = (
    "MAX(COALESCE(strftime('%Y-%m-%dT%H:%M:%S', finished_at), '')"
    " || CASE WHEN json_extract(data, '$.reused_from') IS NULL THEN '|0' ELSE '|1' END)"
)
_RAN_AT_OF_CELL_RUN = f"""
    INSERT OR REPLACE INTO cell_run_times
    SELECT cell_id, run_id, {_RAN_AT} FROM records WHERE cell_id = ? AND run_id = ?
    GROUP BY cell_id, run_id
"""
# The run's own time: its newest cell run's.
_RUN_TIME = "(SELECT MAX(t.ran_at) FROM cell_run_times t WHERE t.run_id = {table}.run_id)"

# Each entry migrates the schema from version i to i + 1.
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE records (
        run_id TEXT NOT NULL,
        cell_id TEXT NOT NULL,
        case_id TEXT NOT NULL,
        cell_label TEXT NOT NULL,
        operation TEXT NOT NULL,
        status TEXT NOT NULL,
        hardware_class TEXT NOT NULL,
        signature TEXT,
        finished_at TEXT NOT NULL,
        data TEXT NOT NULL,
        PRIMARY KEY (run_id, cell_id, case_id)
    );
    CREATE INDEX records_by_cell ON records (cell_label, case_id, run_id);
    CREATE INDEX records_by_signature ON records (signature);
    """,
    """
    CREATE TABLE findings (
        id TEXT PRIMARY KEY,
        case_id TEXT NOT NULL,
        axis TEXT NOT NULL,
        last_good TEXT,
        first_bad TEXT,
        data TEXT NOT NULL
    );
    """,
    # The report reads each cell's two newest runs: index them.
    "CREATE INDEX records_by_cell_run ON records (cell_id, run_id);",
    # The trend's pass rates, kept per run as records merge: reading them back must not
    # scan a year of records (millions of rows) on every report.
    f"""
    CREATE TABLE pass_rates (
        operation TEXT NOT NULL,
        run_id TEXT NOT NULL,
        passed INTEGER NOT NULL,
        judged INTEGER NOT NULL,
        PRIMARY KEY (operation, run_id)
    );
    INSERT INTO pass_rates {_PASS_RATES_OF_RUNS.format(runs="SELECT DISTINCT run_id FROM records")};
    """,
    # What each cell's run was run with (its reuse key), once the run finished the cell:
    # the runner's `<cell-id>.done.json` beside the records.
    """
    CREATE TABLE cell_runs (
        run_id TEXT NOT NULL,
        cell_id TEXT NOT NULL,
        data TEXT NOT NULL,
        PRIMARY KEY (run_id, cell_id)
    );
    """,
    # Runs ordered by when they ran, not by their ids' text.
    f"""
    CREATE TABLE cell_run_times (
        cell_id TEXT NOT NULL,
        run_id TEXT NOT NULL,
        ran_at TEXT NOT NULL,
        PRIMARY KEY (cell_id, run_id)
    );
    CREATE INDEX cell_run_times_by_time ON cell_run_times (cell_id, ran_at, run_id);
    CREATE INDEX cell_run_times_by_run ON cell_run_times (run_id, ran_at);
    INSERT INTO cell_run_times
    SELECT cell_id, run_id, {_RAN_AT} FROM records GROUP BY cell_id, run_id;
    """,
    # Known issues' range proofs (ftmatrix.proofs), every one kept; the newest is shown.
    """
    CREATE TABLE proofs (
        entry TEXT NOT NULL,
        proven_at TEXT NOT NULL,
        data TEXT NOT NULL,
        PRIMARY KEY (entry, proven_at)
    );
    """,
)
SCHEMA_VERSION = len(MIGRATIONS)


@dataclass(frozen=True, kw_only=True)
class MergeResult:
    """What a merge did: rows added or replaced, rows already there, lines skipped."""

    added: int
    unchanged: int
    problems: tuple[str, ...]


def open_store(path: Path) -> sqlite3.Connection:
    """Open (creating and migrating as needed) the history at ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    connection = sqlite3.connect(path)
    try:
        if connection.execute("PRAGMA user_version").fetchone()[0] != SCHEMA_VERSION:
            _migrate(connection, path)
        check_tables(connection, MIGRATIONS)
    except BaseException:
        connection.close()
        raise
    return connection


def _migrate(connection: sqlite3.Connection, path: Path) -> None:
    """Bring the history to SCHEMA_VERSION in one transaction that holds the write lock
    from the version check on: two runs opening a new history at once (their reports)
    must not both create its tables."""
    manages = connection.isolation_level
    connection.isolation_level = None  # the transaction is ours, statement by statement
    try:
        connection.execute("BEGIN IMMEDIATE")
        version = connection.execute("PRAGMA user_version").fetchone()[0]
        if version == 0 and tables(connection):  # never made by a migration: another's
            raise sqlite3.DatabaseError(
                "a database of another program: it holds tables but no ftmatrix schema version"
            )
        if version > SCHEMA_VERSION:
            raise sqlite3.DatabaseError(
                f"{path}: history schema {version} is newer than this ftmatrix ({SCHEMA_VERSION})"
            )
        # Before a table is added to it: a file that is not ours is left as it was.
        check_tables(connection, MIGRATIONS[:version])
        for number in range(version, SCHEMA_VERSION):
            for statement in statements(MIGRATIONS[number]):
                connection.execute(statement)
            connection.execute(f"PRAGMA user_version = {number + 1}")
        connection.execute("COMMIT")
    except BaseException:
        if connection.in_transaction:
            connection.execute("ROLLBACK")
        raise
    finally:
        connection.isolation_level = manages


@contextmanager
def history(path: Path) -> Iterator[sqlite3.Connection]:
    """The history at ``path``, open (and migrated) for the ``with`` block, closed after.

    Any SQLite failure in the block is a HistoryError naming the file and what to do: a
    traceback from the depths of sqlite3 tells a user nothing.
    """
    try:
        with closing(open_store(path)) as connection:
            yield connection
    except sqlite3.OperationalError as exc:  # a full disk, a lock, a read-only file
        raise HistoryError(f"{path}: cannot be used: {exc}") from None
    except sqlite3.Error as exc:  # damaged, truncated, not a database, too new
        raise HistoryError(
            f"{path}: not a history this ftmatrix can read ({exc}); move it away or delete "
            "it, and `ftmatrix report` builds a new one from the records folder beside it "
            "(findings and runs whose records are gone are not in it)"
        ) from None


def merge_records(
    path: Path, sources: Sequence[Path], *, now: datetime | None = None, runs: bool = False
) -> MergeResult:
    """Merge every record file under ``sources`` (folders or files; ``runs``: reports
    folders' ``records/``, see :func:`read_records`) into the history, except the records
    that finished after ``now`` (default: the clock's; see
    :data:`ftmatrix.record_order.CLOCK_SKEW`): kept out, each cell run's said as a problem,
    until their time."""
    now = now or datetime.now(UTC)
    records: list[Record] = []
    problems: list[str] = []
    for source in sources:
        result = read_records(source, runs=runs)
        records += result.records
        problems += result.problems
    records, ahead = split_clock_ahead(records, now)
    added, unchanged = merge(path, records)
    return MergeResult(added=added, unchanged=unchanged, problems=(*problems, *ahead))


def merge_outputs(out_dir: Path, *, now: datetime | None = None) -> MergeResult:
    """Merge a reports folder's record files (``records/``), bisect findings
    (``bisect/*/finding.json``) and proofs (``proofs/*/proof.json``) into its history,
    ``history.sqlite``. ``now``: the merge's time (default: the clock's), past which no
    record can have finished."""
    store = out_dir / "history.sqlite"
    merged = merge_records(store, [out_dir / "records"], now=now, runs=True)
    problems = [*merged.problems, *merge_cell_runs(store, out_dir / "records")]
    for finding_file in sorted((out_dir / "bisect").glob("*/finding.json")):
        finding = _kept_object(finding_file, finding_problem, problems)
        if finding is not None:
            save_finding(store, finding)
    # Known issues' range proofs (ftmatrix known-issues prove) made in this folder or
    # downloaded into it from another job.
    for proof_file in sorted((out_dir / "proofs").glob("*/proof.json")):
        proof = _kept_object(proof_file, proof_problem, problems)
        if proof is not None:
            save_proof(store, proof, proven_at=str(proof.pop("proven_at", proof.get("date"))))
    return dataclasses.replace(merged, problems=tuple(problems))


def _kept_object(
    path: Path, problem_of: Callable[[Mapping[str, Any]], str | None], problems: list[str]
) -> dict[str, Any] | None:
    """The JSON object in ``path``, if ``problem_of`` finds nothing wrong with it; None, and
    a problem said, where it is damaged (a report names it beside the damaged record lines)."""
    data = read_json(path)
    if not isinstance(data, dict):
        problem: str | None = "not a JSON object"
    elif (problem := problem_of(data)) is None:
        return data
    problems.append(f"{path}: skipped: {problem} (damaged)")
    return None


def merge(path: Path, records: Iterable[Record]) -> tuple[int, int]:
    """Upsert ``records``; returns (rows added or replaced, rows unchanged)."""
    added = unchanged = 0
    runs: set[str] = set()
    touched: set[tuple[str, str]] = set()  # (cell, run)
    with history(path) as connection, connection:
        for record in records:
            runs.add(record.run_id)
            touched.add((record.cell_id, record.run_id))
            cursor = connection.execute(
                """
                INSERT INTO records VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                ON CONFLICT (run_id, cell_id, case_id) DO UPDATE SET
                    cell_label = excluded.cell_label, operation = excluded.operation,
                    status = excluded.status, hardware_class = excluded.hardware_class,
                    signature = excluded.signature, finished_at = excluded.finished_at,
                    data = excluded.data
                WHERE (excluded.finished_at, excluded.data) > (records.finished_at, records.data)
                """,
                _record_row(record),
            )
            if cursor.rowcount:
                added += 1
            else:
                unchanged += 1
        refresh_pass_rates(connection, sorted(runs))
        connection.executemany(_RAN_AT_OF_CELL_RUN, sorted(touched))
    return added, unchanged


def _record_row(record: Record) -> tuple[Any, ...]:
    """The records table's row of ``record``, its columns in the table's order."""
    return (
        record.run_id,
        record.cell_id,
        record.case,
        record.cell_label,
        record.operation,
        record.status.value,
        record.hardware_class,
        record.signature,
        record.finished_at,
        _strict_json(record.to_dict()),
    )


def _strict_json(data: dict[str, Any]) -> str:
    """``data`` as JSON SQLite's JSON functions read: a NaN among a record's metrics
    (a case's loss gone NaN) as text, never the ``NaN`` that makes the history unusable."""
    try:
        return json.dumps(data, sort_keys=True, default=str, allow_nan=False)
    except ValueError:
        return json.dumps(strict_data(data), sort_keys=True, default=str)


def restore(
    path: Path,
    records: Iterable[Record],
    cell_runs: Iterable[tuple[str, str, dict[str, Any]]] = (),
) -> int:
    """Add the records (and cell runs) ``path`` lacks, from a published copy of the history;
    returns how many records. One already there is kept as it is: it has the raw text the
    copy leaves out.
    """
    added = 0
    runs: set[str] = set()
    touched: set[tuple[str, str]] = set()  # (cell, run)
    with history(path) as connection, connection:
        connection.executemany(
            "INSERT OR IGNORE INTO cell_runs VALUES (?, ?, ?)",
            [(run, cell, json.dumps(data, sort_keys=True)) for run, cell, data in cell_runs],
        )
        # Of two lines of one run, cell and case in the copy, the later-finished is kept, as
        # a merge keeps it, whatever their order (the first line won).
        latest: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        for row in map(_record_row, records):
            kept = latest.get(row[:3])
            if kept is None or row[8:] > kept[8:]:
                latest[row[:3]] = row
        for row in latest.values():
            cursor = connection.execute(
                "INSERT OR IGNORE INTO records VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", row
            )
            if cursor.rowcount:
                added += 1
                runs.add(row[0])
                touched.add((row[1], row[0]))
        refresh_pass_rates(connection, sorted(runs))
        connection.executemany(_RAN_AT_OF_CELL_RUN, sorted(touched))
    return added


def merge_cell_runs(path: Path, records_dir: Path) -> list[str]:
    """Keep each finished cell run's marker (``<run>/<cell-id>.done.json``); returns the
    problems of those that cannot be kept.

    A damaged marker (not a JSON object, or in a folder that names no run) is skipped and
    said: kept, it was published, and the next restore-history of the published copy
    refused the whole of it. Without a marker, a cell's results are never reused.
    """
    rows = []
    problems = []
    for marker in sorted(records_dir.glob(f"*/*{DONE_SUFFIX}")):
        try:
            data = json.loads(marker.read_text(encoding="utf-8"))
            why = None if isinstance(data, dict) else "not a JSON object"
        except (OSError, ValueError, RecursionError) as exc:
            why = f"cannot be read ({exc})"
        if why is None and not is_run_id(marker.parent.name):
            why = f"its folder's name is not a run id ({RUN_ID_RULE})"
        if why is not None:
            problems.append(f"{marker}: skipped: {why}; its cell's results are not reused")
            continue
        cell_id = marker.name.removesuffix(DONE_SUFFIX)
        rows.append((marker.parent.name, cell_id, json.dumps(data, sort_keys=True)))
    with history(path) as connection, connection:
        connection.executemany("INSERT OR REPLACE INTO cell_runs VALUES (?, ?, ?)", rows)
    return problems


def load_cell_runs(path: Path) -> list[tuple[str, str, dict[str, Any]]]:
    """Every finished cell run's marker: (run id, cell id, what it was run with)."""
    if not path.exists():
        return []
    with history(path) as connection:
        rows = connection.execute("SELECT run_id, cell_id, data FROM cell_runs ORDER BY 1, 2")
        found = [(run, cell, json.loads(data)) for run, cell, data in rows]
        # A damaged marker an earlier version kept: published, it failed every restore.
        return [
            (run, cell, data)
            for run, cell, data in found
            if isinstance(data, dict) and is_run_id(run)
        ]


@dataclass(frozen=True, kw_only=True)
class CellRun:
    """One run of a cell as the history holds it: its records, and the runner's marker of
    what it was run with (``{}`` where the run did not finish the cell); ``reuse`` reads it."""

    run_id: str
    records: tuple[Record, ...]
    marker: Mapping[str, Any]


def newest_cell_runs(
    path: Path, *, cell_ids: Iterable[str] | None = None, excluding: str | None = None
) -> dict[str, CellRun]:
    """cell id -> its newest run in the history (other than run ``excluding``, tonight's)."""
    if not path.exists():
        return {}
    found: dict[str, CellRun] = {}
    with history(path) as connection:
        if cell_ids is None:
            cell_ids = [c for (c,) in connection.execute("SELECT DISTINCT cell_id FROM records")]
        # One index seek per cell (cell_run_times_by_time), not a scan of the whole history:
        # the runner asks this for every cell it starts.
        newest = [
            (cell_id, _newest_run(connection, cell_id, excluding=excluding))
            for cell_id in sorted(set(cell_ids))
        ]
        for cell_id, run_id in newest:
            if run_id is None:
                continue
            rows = connection.execute(
                "SELECT data FROM records WHERE cell_id = ? AND run_id = ? ORDER BY case_id",
                (cell_id, run_id),
            ).fetchall()
            marker = connection.execute(
                "SELECT data FROM cell_runs WHERE cell_id = ? AND run_id = ?", (cell_id, run_id)
            ).fetchone()
            data = json.loads(marker[0]) if marker else {}
            found[cell_id] = CellRun(
                run_id=run_id,
                records=tuple(Record.from_mapping(json.loads(d)) for (d,) in rows),
                marker=data if isinstance(data, dict) else {},
            )
    return found


def _newest_run(
    connection: sqlite3.Connection, cell_id: str, *, back: int = 0, excluding: str | None = None
) -> str | None:
    """The cell's newest run by when it ran (``back=1``: the one before it), or None."""
    row = connection.execute(
        "SELECT run_id FROM cell_run_times WHERE cell_id = ? AND run_id != ?"
        " ORDER BY ran_at DESC, run_id DESC LIMIT 1 OFFSET ?",
        (cell_id, excluding or "", back),
    ).fetchone()
    return None if row is None else str(row[0])


def refresh_pass_rates(connection: sqlite3.Connection, runs: Sequence[str]) -> None:
    """Recount the pass rates of ``runs`` from their records (by the primary key's run_id)."""
    for start in range(0, len(runs), 500):  # SQLite caps the number of parameters
        batch = runs[start : start + 500]
        marks = ", ".join("?" * len(batch))
        connection.execute(f"DELETE FROM pass_rates WHERE run_id IN ({marks})", batch)
        connection.execute(
            f"INSERT INTO pass_rates {_PASS_RATES_OF_RUNS.format(runs=marks)}", batch
        )


def load_history(path: Path) -> list[Record]:
    """Every record in the history, oldest run first."""
    if not path.exists():
        return []
    with history(path) as connection:
        rows = connection.execute(
            f"SELECT data FROM records ORDER BY {_RUN_TIME.format(table='records')},"
            " run_id, cell_label, case_id"
        )
        return [Record.from_mapping(json.loads(data)) for (data,) in rows]


def run_coverage(path: Path, run_id: str) -> tuple[str | None, set[str]]:
    """The time key of the newest run other than ``run_id`` (``ran_at``: by when it ran,
    never by id) and the labels of the cells with at least one record of ``run_id``:
    (None, empty) without a history."""
    if not path.exists():
        return None, set()
    with history(path) as connection:
        (newest,) = connection.execute(
            "SELECT MAX(ran_at) FROM cell_run_times WHERE run_id != ?", (run_id,)
        ).fetchone()
        rows = connection.execute(
            "SELECT DISTINCT cell_label FROM records WHERE run_id = ?", (run_id,)
        )
        return (str(newest) if newest is not None else None), {label for (label,) in rows}


def newest_records(path: Path, *, back: int = 0) -> list[Record]:
    """Each cell's records from its newest run (``back=1``: from the run before that).

    Reads only those rows, so the report's cost does not grow with the length of
    the history.
    """
    if not path.exists():
        return []
    with history(path) as connection:
        # Index lookups per cell (cell_run_times_by_time), not a pass over every row.
        cells = connection.execute("SELECT DISTINCT cell_id FROM cell_run_times").fetchall()
        wanted = []
        for (cell_id,) in cells:
            run = _newest_run(connection, cell_id, back=back)
            if run is not None:
                wanted.append((cell_id, run))
        rows = [
            data
            for cell_id, run_id in wanted
            for (data,) in connection.execute(
                "SELECT data FROM records WHERE cell_id = ? AND run_id = ? ORDER BY case_id",
                (cell_id, run_id),
            )
        ]
        records = [Record.from_mapping(json.loads(data)) for data in rows]
        return sorted(records, key=lambda r: (r.cell_label, r.case))


def pass_rate_table(path: Path) -> dict[str, list[tuple[str, float]]]:
    """For each operation, (run id, share of its judged cases that passed), oldest first."""
    if not path.exists():
        return {}
    with history(path) as connection:
        rows = connection.execute(
            "SELECT operation, run_id, CAST(passed AS REAL) / judged FROM pass_rates"
            f" ORDER BY operation, {_RUN_TIME.format(table='pass_rates')}, run_id"
        )
        table: dict[str, list[tuple[str, float]]] = {}
        for operation, run_id, rate in rows:
            table.setdefault(operation, []).append((run_id, float(rate)))
        return table


def save_finding(path: Path, finding: dict[str, Any]) -> bool:
    """Keep a bisect finding (``finding.json``'s content) in the history; False where the
    history already held it as it is."""
    held = json.dumps(finding.get("held", {}), sort_keys=True)
    # Hardware classes bisect apart: one's finding never replaces another's.
    where = f"{finding['hardware']}|" if finding.get("hardware") else ""
    key = f"{where}{finding['case']}|{finding['axis']}|{held}"
    data = json.dumps(finding, sort_keys=True)
    with history(path) as connection, connection:
        kept = connection.execute("SELECT data FROM findings WHERE id = ?", (key,)).fetchone()
        if kept is not None and kept[0] == data:
            return False
        connection.execute(
            "INSERT OR REPLACE INTO findings VALUES (?, ?, ?, ?, ?, ?)",
            (
                key,
                finding["case"],
                finding["axis"],
                finding.get("last_good"),
                finding.get("first_bad"),
                data,
            ),
        )
    return True


def load_findings(path: Path) -> list[dict[str, Any]]:
    """Every bisect finding kept in the history."""
    if not path.exists():
        return []
    with history(path) as connection:
        return [
            json.loads(d) for (d,) in connection.execute("SELECT data FROM findings ORDER BY id")
        ]


def save_proof(path: Path, proof: dict[str, Any], *, proven_at: str) -> None:
    """Keep a known issue's range proof (``EntryProof.to_dict()``) in the history."""
    with history(path) as connection, connection:
        connection.execute(
            "INSERT OR REPLACE INTO proofs VALUES (?, ?, ?)",
            (
                proof["entry"],
                proven_at,
                json.dumps({**proof, "proven_at": proven_at}, sort_keys=True),
            ),
        )


def load_proofs(path: Path) -> dict[str, dict[str, Any]]:
    """The newest proof of each known issue in the history (entry id -> proof)."""
    if not path.exists():
        return {}
    with history(path) as connection:
        rows = connection.execute("SELECT entry, data FROM proofs ORDER BY entry, proven_at")
        return {entry: json.loads(data) for entry, data in rows}
