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

Pure functions over records, keys and dates; the history is read by ``store``, the
machine probed by ``cell.hardware``, and both are called from the runner and the CLI.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import date
from typing import Any

from ftmatrix.cell.records import Record
from ftmatrix.cell.status import Status

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
