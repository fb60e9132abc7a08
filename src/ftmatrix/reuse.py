"""Result reuse: whether a cell's newest results still stand tonight, and if not, why.

A cell's results are a function of what it installed (the lock: every resolved
package, support packages included), what it ran (the selected case files and the
cases' conftest files, helpers and data), the machine (GPU model and count, driver,
CPU class) and how ftmatrix judges a case (``RECORD_VERSION``). While all four are
unchanged, running the cell again would only repeat its newest results, so they are
carried into tonight's run (each record with ``reused_from``) instead.

What never stands: a result that was ``flaky``, ``timeout``, ``crash``, ``oom``,
``install-error`` or ``error`` (the next run may well differ), a run that did not
finish the cell, and results older than ``reuse.max-age-days`` (a periodic re-run
catches what no key shows, such as a changed index or a broken runner image). That
re-run is spread over the nights by cell id, so one night never re-runs every cell.

This module owns reuse: the key (:class:`CellKey`, built by :meth:`CellKey.of` from the
cell's :class:`~ftmatrix.resolve.Lock`, :func:`cases_key` and :func:`hardware_id`), the
decision (:func:`decide`; :func:`reuse_cell` for the runner's one cell on its machine,
:func:`plan_decisions` for the plan's cells, the machine being elsewhere) and the carrying
of records into tonight's run (:func:`reuse_records_of_cell`). The decisions are pure
functions over records, keys and dates; the history is read through ``store``
(:func:`earlier_runs`), the machine probed by ``cell.hardware``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import date, datetime
from pathlib import Path
from typing import Any

from ftmatrix.cell.file_writes import write_atomically
from ftmatrix.cell.files import CellFiles
from ftmatrix.cell.record import Record
from ftmatrix.cell.records import CellRecordFile
from ftmatrix.cell.status import Status
from ftmatrix.config import Limits, Timeouts
from ftmatrix.plan import Cell
from ftmatrix.resolve import Lock
from ftmatrix.store import newest_cell_runs

RECORD_VERSION = 1
"""What ftmatrix's records mean. Bump it when a change to ftmatrix changes the result a
case would get (how a status is judged, what a record holds): every cell then runs again.
Not the package version: most releases change nothing a record says."""

NEVER_REUSED = frozenset(
    {Status.TIMEOUT, Status.CRASH, Status.OOM, Status.INSTALL_ERROR, Status.ERROR}
)
"""Statuses that say more about that night than about the versions: the cell runs again."""

# The parts of a hardware fingerprint that can change a result. Left out: memory, CPU
# count, CUDA_VISIBLE_DEVICES and the GPU lease, which differ between two runs on one
# machine. CUDA: the driver fixes the newest CUDA the machine runs, and the lock fixes
# the runtime a cell uses (torch's CUDA wheels are locked packages), so both are keyed.
HARDWARE_KEYS = ("machine", "system", "cpu")
GPU_KEYS = ("name", "driver", "compute_capability")


@dataclass(frozen=True, kw_only=True)
class CellKey:
    """Everything a cell's results depend on. Equal keys: the results still stand."""

    lock_id: str
    cases_id: str
    hardware_id: str
    version: int = RECORD_VERSION
    # The lock's name -> version: not compared (lock_id is); it tells which packages moved.
    packages: Mapping[str, str] = field(default_factory=dict, compare=False)

    @classmethod
    def of(cls, lock: Lock, *, cases: str, hardware: str) -> CellKey:
        """Tonight's key of a cell: its lock, its :func:`cases_key`, its :func:`hardware_id`."""
        return cls(lock_id=lock.id, cases_id=cases, hardware_id=hardware, packages=lock.packages)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form kept beside a cell's records and in the history."""
        return {
            "lock": self.lock_id,
            "cases": self.cases_id,
            "hardware": self.hardware_id,
            "version": self.version,
            "packages": dict(self.packages),
        }

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> CellKey | None:
        """The key in ``data``, or None where it holds none (an older run's marker)."""
        try:
            return cls(
                lock_id=str(data["lock"]),
                cases_id=str(data["cases"]),
                hardware_id=str(data["hardware"]),
                version=int(data["version"]),
                packages=dict(data.get("packages") or {}),
            )
        except (KeyError, TypeError, ValueError):
            return None


@dataclass(frozen=True, kw_only=True)
class EarlierRun:
    """A cell's newest run in the history: its key (None if it did not finish the cell),
    its records, the run that really ran them (``since``) and the day it did."""

    run_id: str
    key: CellKey | None
    records: tuple[Record, ...]
    since: str
    ran_on: date | None = None


@dataclass(frozen=True, kw_only=True)
class Decision:
    """Run the cell or reuse its results; ``reason`` says why it runs."""

    reuse: bool
    reason: str
    since: str | None = None

    def describe(self) -> str:
        """``reused (unchanged since RUN)`` or ``run: WHY``: what the plan shows."""
        return f"reused (unchanged since {self.since})" if self.reuse else f"run: {self.reason}"

    def to_dict(self) -> dict[str, Any]:
        """The plan's JSON form."""
        return {
            "action": "reuse" if self.reuse else "run",
            "reason": self.reason,
            "since": self.since,
        }


def hardware_fingerprint(hardware: Mapping[str, Any]) -> dict[str, Any]:
    """The parts of a recorded ``hardware`` dict that can change a result (HARDWARE_KEYS)."""
    gpus = hardware.get("gpus") or []
    return {
        **{key: hardware.get(key) for key in HARDWARE_KEYS},
        "gpus": sorted(
            (tuple(str(gpu.get(k, "")) for k in GPU_KEYS) for gpu in gpus if isinstance(gpu, dict)),
        ),
    }


def hardware_id(hardware: Mapping[str, Any]) -> str:
    """A short hash of :func:`hardware_fingerprint`: equal ids, the same kind of machine."""
    text = json.dumps(hardware_fingerprint(hardware), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def not_reusable(records: Sequence[Record]) -> str | None:
    """Why these results cannot stand for another night (None: they can)."""
    if not records:
        return "no records"
    for record in records:
        if record.flaky:
            return f"flaky: {record.case}"
    for record in records:
        if record.status in NEVER_REUSED:
            return f"{record.status.value}: {record.case}"
    return None


def refresh_offset(cell_id: str, max_age_days: int) -> int:
    """The cell's place in the ``max_age_days`` cycle of nights, from a hash of its id."""
    return int(hashlib.sha256(cell_id.encode()).hexdigest(), 16) % max_age_days


def refresh_due(cell_id: str, ran_on: date, today: date, max_age_days: int) -> bool:
    """Has a refresh night of the cell passed since it last really ran?

    Each cell has one refresh night every ``max_age_days`` (by :func:`refresh_offset`,
    so about 1/max_age_days of the cells have theirs on any night). A cell runs again
    on its first refresh night after ``ran_on``, so results are never older than
    ``max_age_days`` (a night the nightly missed is made up on the next), and a cell
    that ran on any other grounds meanwhile waits for its next refresh night.
    """
    days = today.toordinal()
    newest_refresh = days - (days - refresh_offset(cell_id, max_age_days)) % max_age_days
    return newest_refresh > ran_on.toordinal()


def moved_packages(before: Mapping[str, str], after: Mapping[str, str]) -> list[str]:
    """``name old->new`` for each package whose locked version changed, ``+``/``-`` for the
    packages the lock gained or lost, by name."""
    moved = []
    for name in sorted(set(before) | set(after)):
        old, new = before.get(name), after.get(name)
        if old == new:
            continue
        if old is None:
            moved.append(f"+{name} {new}")
        elif new is None:
            moved.append(f"-{name} {old}")
        else:
            moved.append(f"{name} {old}->{new}")
    return moved


def decide(
    cell_id: str,
    key: CellKey | None,
    earlier: EarlierRun | None,
    *,
    max_age_days: int,
    today: date,
) -> Decision:
    """Reuse the cell's newest results, or run it, and why.

    ``key`` is tonight's (None: the cell does not resolve, so there is nothing to
    compare); ``earlier`` the cell's newest run in the history; ``max_age_days`` 0
    turns reuse off.
    """
    why = _why_it_runs(key, earlier, max_age_days)
    if why is not None or earlier is None:
        return Decision(reuse=False, reason=why or "no earlier run")
    if earlier.ran_on is None or refresh_due(cell_id, earlier.ran_on, today, max_age_days):
        ran = f"ran {earlier.ran_on.isoformat()}" if earlier.ran_on else "age unknown"
        return Decision(
            reuse=False, reason=f"too old ({ran}; re-run every {max_age_days} days at most)"
        )
    return Decision(reuse=True, reason="unchanged", since=earlier.since)


def _why_it_runs(key: CellKey | None, earlier: EarlierRun | None, max_age_days: int) -> str | None:
    """What differs between tonight and the earlier run (None: nothing, age aside)."""
    if max_age_days <= 0:
        return "reuse off"
    if key is None:
        return "no lock (the cell does not resolve)"
    if earlier is None:
        return "no earlier run"
    if earlier.key is None:
        return f"earlier run {earlier.run_id} did not finish the cell"
    why = not_reusable(earlier.records)
    if why is not None:
        return f"earlier result not reusable ({why})"
    old = earlier.key
    changes = [
        (
            old.version != key.version,
            f"ftmatrix's records changed (version {old.version}->{key.version})",
        ),
        (
            old.lock_id != key.lock_id,
            "new lock: "
            + (
                ", ".join(moved_packages(old.packages, key.packages))
                or f"{old.lock_id}->{key.lock_id}"
            ),
        ),
        (old.cases_id != key.cases_id, "cases changed"),
        (old.hardware_id != key.hardware_id, "hardware changed"),
    ]
    return "; ".join(text for changed, text in changes if changed) or None


def carried_forward(records: Iterable[Record], *, run_id: str, since: str) -> list[Record]:
    """``records`` as tonight's: the new ``run_id``, and ``reused_from`` the run that ran them."""
    return [replace(r, run_id=run_id, reused_from=since) for r in records]


def newest_hardware_of_class(runs: Iterable[EarlierRun]) -> dict[str, str]:
    """hardware class -> the fingerprint id of its newest real run (by ``since``).

    The plan runs on a machine that is not the class's: it takes the newest fingerprint
    a class's runner recorded as that runner's. A cell last run on other hardware runs
    again; one whose new runner differs is caught when its first cell of the class runs
    there (any cell whose lock moved or whose refresh night came), and the others follow
    the next night. The runner re-checks its real fingerprint before reusing anything.
    """
    newest: dict[str, tuple[str, str]] = {}
    for run in runs:
        if run.key is None or not run.records:
            continue
        hardware_class = run.records[0].hardware_class
        held = newest.get(hardware_class)
        if held is None or run.since > held[0]:
            newest[hardware_class] = (run.since, run.key.hardware_id)
    return {name: hardware for name, (_, hardware) in newest.items()}


def cases_key(
    cases_dir: Path,
    selection: Sequence[str],
    options: Sequence[str],
    timeouts: Timeouts,
    limits: Limits,
) -> str:
    """The cases part of a cell's key: what the selected cases run (:func:`cases_id`) and
    what judges them (:func:`judging`)."""
    return cases_id(cases_dir, selection, judging(options, timeouts, limits))


def cases_id(cases_dir: Path, selection: Sequence[str] = (), options: Sequence[str] = ()) -> str:
    """A hash of what the selected cases run: the selected test files, and every other file
    of the cases folder (conftest files, helper modules, data, pytest's ini).

    ``selection`` holds the matrix's ``cases`` (paths or node ids relative to the folder);
    empty selects the whole folder. A test file outside the selection changes nothing
    this cell runs, so it is left out: touching it re-runs no cell that does not select it.
    The selection itself and pytest ``options`` (``-k``, ``-m``) count too: results of some
    cases never stand for a run of others.
    """
    chosen = [cases_dir / entry.split("::", 1)[0] for entry in selection]
    digest = hashlib.sha256(json.dumps([sorted(selection), list(options)]).encode())
    for path in sorted(cases_dir.rglob("*")):
        if not path.is_file() or "__pycache__" in path.parts:
            continue
        if chosen and _is_test_file(path) and not any(_within(path, c) for c in chosen):
            continue
        digest.update(str(path.relative_to(cases_dir)).encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def judging(options: Sequence[str], timeouts: Timeouts, limits: Limits) -> tuple[str, ...]:
    """What decides a case's status besides its files: pytest options, and the time and
    memory a case may use (a lower limit can turn last night's pass into a timeout or oom).

    Named field by field, never a dataclass's repr: a field added to Timeouts or Limits
    must not silently change every stored key (so no result would ever be reused again).
    """
    return (
        *options,
        f"timeouts.case={timeouts.case:g}",
        f"timeouts.cell={timeouts.cell:g}",
        f"limits.memory-gib={'default' if limits.memory_gib is None else f'{limits.memory_gib:g}'}",
        f"limits.workers={limits.workers}",
    )


def _is_test_file(path: Path) -> bool:
    """pytest's default test file names: what a selection chooses among."""
    return path.suffix == ".py" and (path.name.startswith("test_") or path.stem.endswith("_test"))


def _within(path: Path, chosen: Path) -> bool:
    return path == chosen or chosen in path.parents


def earlier_runs(
    history: Path, *, cell_ids: Iterable[str] | None = None, excluding: str | None = None
) -> dict[str, EarlierRun]:
    """cell id -> its newest run in the ``history`` (other than run ``excluding``,
    tonight's): its records, and its key (None where that run did not finish the cell)."""
    return {
        cell_id: EarlierRun(
            run_id=run.run_id,
            key=CellKey.from_mapping(run.marker.get("key") or {}),
            records=run.records,
            since=str(run.marker.get("since") or run.run_id),
            ran_on=_day(run.marker.get("ran_at")),
        )
        for cell_id, run in newest_cell_runs(
            history, cell_ids=cell_ids, excluding=excluding
        ).items()
    }


def _day(text: Any) -> date | None:
    try:
        return datetime.fromisoformat(str(text)).date() if text else None
    except ValueError:
        return None


def plan_decisions(
    cells: Sequence[Cell],
    locks: Sequence[Lock | None],
    *,
    cases: str,
    earlier: Mapping[str, EarlierRun],
    max_age_days: int,
    today: date,
) -> list[Decision]:
    """Whether each planned cell will run or reuse its newest results, and why it runs.

    Tonight's lock is the plan's resolution (None: the cell does not resolve) and the
    cases are on disk; the machine is not (the plan runs elsewhere), so each hardware
    class stands for the newest fingerprint its runners recorded
    (:func:`newest_hardware_of_class`). The runner re-checks its own fingerprint
    (:func:`reuse_cell`) before it reuses anything.
    """
    hardware = newest_hardware_of_class(earlier.values())
    return [
        decide(
            cell.id,
            CellKey.of(lock, cases=cases, hardware=hardware.get(cell.hardware, "unknown"))
            if lock is not None
            else None,
            earlier.get(cell.id),
            max_age_days=max_age_days,
            today=today,
        )
        for cell, lock in zip(cells, locks, strict=True)
    ]


def reuse_cell(
    out_dir: Path, run_id: str, cell_id: str, key: CellKey, *, max_age_days: int, today: date
) -> tuple[Decision, list[Record] | None]:
    """The runner's decision for one cell, from the history in ``out_dir``, and, when the
    cell is reused, its records carried into run ``run_id`` (else None)."""
    history = out_dir / "history.sqlite"
    earlier = earlier_runs(history, cell_ids=[cell_id], excluding=run_id).get(cell_id)
    decision = decide(cell_id, key, earlier, max_age_days=max_age_days, today=today)
    if decision.reuse and earlier is not None:
        return decision, reuse_records_of_cell(out_dir, run_id, cell_id, earlier, key)
    return decision, None


def reuse_records_of_cell(
    out_dir: Path, run_id: str, cell_id: str, earlier: EarlierRun, key: CellKey
) -> list[Record]:
    """Carry ``earlier``'s records into run ``run_id``, marked done with the same key.

    The marker keeps the run that really ran the cases (``since``) and its day, so the
    results' age counts from there, however many nights reused them.
    """
    files = CellFiles.of(out_dir, run_id, cell_id)
    records = carried_forward(earlier.records, run_id=run_id, since=earlier.since)
    file = CellRecordFile(files.records)
    file.records = records
    file.save()
    ran_at = earlier.ran_on.isoformat() if earlier.ran_on else None
    marker = {"key": key.to_dict(), "since": earlier.since, "ran_at": ran_at}
    write_atomically(files.done, json.dumps(marker))
    return records
