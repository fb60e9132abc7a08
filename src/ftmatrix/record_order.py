"""Which record of a history is the newest: the one order every consumer of a history reads.

The grid and the shards take the newest run per cell, constraints and autobisect the newest
record per (cell, case), the report's changes compare runs in this order. The history computes
the same key in SQL (``ftmatrix.store``). A record from a clock that ran ahead would be the
newest until that time: it is kept out of the history (:func:`split_clock_ahead`).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import TypeVar

from ftmatrix.cell.record import Record

K = TypeVar("K", bound=Hashable)


def ran_at(record: Record) -> str:
    """When ``record`` ran, as a key that sorts by time: the UTC second it finished, then
    '|1' where it was carried from an earlier run (the carrying run is the later one).
    Never the run id's text: an id is any name (``ci-smoke``, a date of the future).
    The history computes the same key in SQL (``ftmatrix.store``)."""
    finished = _finished(record)
    try:
        when = "" if finished is None else finished.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S")
    except (ValueError, OverflowError):
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


# A record that finished later than this after the merge's own clock came from a machine
# whose clock was ahead (a runner set years ahead): runs are ordered by when they ran, so
# in the history it would be the newest result of its cell and hide every later run's.
CLOCK_SKEW = timedelta(hours=1)


def split_clock_ahead(records: Sequence[Record], now: datetime) -> tuple[list[Record], list[str]]:
    """``records`` without those that finished after ``now`` (:data:`CLOCK_SKEW`), and a
    line for each cell run of those: what was kept out of the history, and why."""
    ahead: dict[tuple[str, str], list[Record]] = {}
    for record in records:
        finished = _finished(record)
        if finished is not None and finished > now + CLOCK_SKEW:
            ahead.setdefault((record.run_id, record.cell_label), []).append(record)
    said = [
        f"run {run_id}, cell {label}: {len(kept_out)} record(s) finished at "
        f"{max(kept_out, key=lambda r: _finished(r) or now).finished_at}, after this report's "
        "time "
        f"({now.astimezone(UTC):%Y-%m-%dT%H:%M:%S}+00:00): the clock of the machine that ran "
        "them was ahead; kept out of the history (as the newest results they would hide every "
        "later run's) until that time"
        for (run_id, label), kept_out in sorted(ahead.items())
    ]
    kept = [r for r in records if (r.run_id, r.cell_label) not in ahead] if ahead else records
    return list(kept), said


def _finished(record: Record) -> datetime | None:
    """When ``record`` finished (no zone: UTC, as SQLite reads it); None: no time that can
    be read."""
    try:
        finished = datetime.fromisoformat(record.finished_at.replace("Z", "+00:00"))
    except (ValueError, TypeError):
        return None
    return finished if finished.tzinfo else finished.replace(tzinfo=UTC)
