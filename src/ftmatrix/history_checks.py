"""What the history (:mod:`ftmatrix.store`) holds is of its shape: the file's tables, and
each bisect finding and range proof before it is kept.

A database of another program, or one whose version says ftmatrix's but whose tables are
not (copied over, made by hand), is refused when opened, in words that say so; not later,
by a query that fails with a message that blames a lock. A finding or proof of the wrong
shape (a field missing, a list where a version belongs) kept would fail every report after
it, or the merge, with a message that blames the history."""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Iterator, Mapping
from contextlib import closing
from typing import Any


def tables(connection: sqlite3.Connection) -> dict[str, set[str]]:
    """Each table of the database, and its columns."""
    names = connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    return {
        name: {column[1] for column in connection.execute(f"PRAGMA table_info('{name}')")}
        for (name,) in names
    }


@functools.cache
def _schema(migrations: tuple[str, ...]) -> dict[str, set[str]]:
    """The tables and columns ``migrations`` make, run on an empty database."""
    with closing(sqlite3.connect(":memory:")) as connection:
        for script in migrations:
            for statement in statements(script):
                connection.execute(statement)
        return tables(connection)


def check_tables(connection: sqlite3.Connection, migrations: tuple[str, ...]) -> None:
    """sqlite3.DatabaseError, saying what lacks, where the database has not every table
    and column ``migrations`` make."""
    have = tables(connection)
    for table, columns in _schema(migrations).items():
        missing = sorted(columns - have.get(table, set()))
        if missing:
            lacks = "no table" if table not in have else f"no column(s) {', '.join(missing)} in"
            raise sqlite3.DatabaseError(f"it has {lacks} {table!r}")


def statements(script: str) -> Iterator[str]:
    """The statements of a migration script, one at a time (``executescript`` would
    commit the transaction that keeps the migration whole)."""
    pending = ""
    for line in script.splitlines(keepends=True):
        pending += line
        if sqlite3.complete_statement(pending):
            yield pending.strip()
            pending = ""
    if pending.strip():
        yield pending.strip()


def finding_problem(finding: Mapping[str, Any]) -> str | None:
    """Why ``finding`` (a finding.json, a history line's finding) is no bisect finding the
    history can keep, or None."""
    for key in ("case", "axis"):
        if not isinstance(finding.get(key), str):
            return f"its {key!r} is not text"
    for key in ("last_good", "first_bad", "hardware"):
        if not isinstance(finding.get(key), str | None):
            return f"its {key!r} is neither text nor null"
    if not isinstance(finding.get("held", {}), dict):
        return "its 'held' is not an object of pins"
    return None


# What each of a proof's cells names (:class:`ftmatrix.proofs.CellVerdict`).
_PROOF_CELL_KEYS = ("package", "version", "claim", "label", "observed")


def proof_problem(proof: Mapping[str, Any]) -> str | None:
    """Why ``proof`` (a proof.json, a history line's proof) is no range proof the history
    can keep and read back (:meth:`ftmatrix.proofs.EntryProof.from_mapping`), or None."""
    for key in ("entry", "date"):
        if not isinstance(proof.get(key), str):
            return f"its {key!r} is not text"
    cells = proof.get("cells")
    if not isinstance(cells, list) or not all(
        isinstance(cell, dict)
        and all(isinstance(cell.get(key), str) for key in _PROOF_CELL_KEYS)
        and isinstance(cell.get("pins") or {}, dict)
        for cell in cells
    ):
        return f"its 'cells' is not a list of cells, each naming {', '.join(_PROOF_CELL_KEYS)}"
    return None
