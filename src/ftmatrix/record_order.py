"""Which record of a history is the newest: the one order every consumer of a history reads.

The grid and the shards take the newest run per cell, constraints and autobisect the newest
record per (cell, case), the report's changes compare runs in this order. The history computes
the same key in SQL (``ftmatrix.store``).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from datetime import UTC, datetime
from typing import TypeVar

from ftmatrix.cell.records import Record

K = TypeVar("K", bound=Hashable)


def ran_at(record: Record) -> str:
    """When ``record`` ran, as a key that sorts by time: the UTC second it finished, then
    '|1' where it was carried from an earlier run (the carrying run is the later one).
    Never the run id's text: an id is any name (``ci-smoke``, a date of the future).
    The history computes the same key in SQL (``ftmatrix.store``)."""
    try:
        finished = datetime.fromisoformat(record.finished_at.replace("Z", "+00:00"))
        if finished.tzinfo is None:  # as SQLite reads it: UTC
            finished = finished.replace(tzinfo=UTC)
        when = finished.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S")
    except (ValueError, TypeError, OverflowError):
        when = ""
    return f"{when}|{int(record.reused_from is not None)}"


def newest_per(records: Iterable[Record], key: Callable[[Record], K]) -> dict[K, Record]:
    """For each ``key(record)``, its newest record: the one that ran last (:func:`ran_at`),
    on a tie of times the greater run id, then the first seen.

    The one reading of "newest" for every consumer of a history: the grid and the
    shards take the newest run per cell, constraints and autobisect the newest record
    per (cell, case).
    """
    newest: dict[K, Record] = {}
    for record in records:
        at = key(record)
        held = newest.get(at)
        if held is None or (ran_at(record), record.run_id) > (ran_at(held), held.run_id):
            newest[at] = record
    return newest
