"""Changes over runs: regressions and fixes between a cell's two newest runs, and the
pass rate of each operation run by run.

Pure functions over records of several runs; the store computes the same pass rates
in SQL for the report (:func:`ftmatrix.store.pass_rate_table`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ftmatrix.cell.record import WHOLE_CELL, Record
from ftmatrix.cell.status import PROBLEM_STATUSES, Status
from ftmatrix.record_order import ran_at


@dataclass(frozen=True, kw_only=True)
class StatusChange:
    """A (cell, case) whose status differs between its two newest runs."""

    kind: str  # "regression" or "fix"
    before: Record
    after: Record

    @property
    def moved_packages(self) -> dict[str, tuple[str | None, str | None]]:
        """Installed packages whose version differs between the two runs (floating ones)."""
        names = set(self.before.packages) | set(self.after.packages)
        return {
            n: (self.before.packages.get(n), self.after.packages.get(n))
            for n in sorted(names)
            if self.before.packages.get(n) != self.after.packages.get(n)
        }


# Said instead of "nothing changed" where the history holds no earlier run (a first run),
# or an earlier run with none of these results (its cells did not install, other cases).
NO_EARLIER_RUN = (
    "No earlier run of these cells to compare with: nothing is called broken or fixed yet."
)
NOTHING_IN_COMMON = (
    "The previous run holds none of these results (other cases, or cells that did not run "
    "their cases then): nothing is called broken or fixed."
)


@dataclass(frozen=True)
class Comparison:
    """What the newest run was compared with: whether an earlier run exists, and how many
    of its results the newest run has too."""

    earlier: bool = False
    compared: int = 0

    def unchanged(self) -> str:
        """What to say where nothing broke and nothing was fixed."""
        if not self.earlier:
            return NO_EARLIER_RUN
        if not self.compared:
            return NOTHING_IN_COMMON
        return (
            "Nothing broke and nothing was fixed since the previous run "
            f"({self.compared} result{'s' if self.compared != 1 else ''} compared)."
        )


FIRST_RUN = Comparison()  # a history of one run


def _runs_of_each_result(records: Iterable[Record]) -> dict[tuple[str, str], dict[str, Record]]:
    """(cell label, case) -> run id -> its record."""
    history: dict[tuple[str, str], dict[str, Record]] = {}
    for record in records:
        history.setdefault((record.cell_label, record.case), {})[record.run_id] = record
    return history


def compare_runs(
    records: Iterable[Record], *, earlier: bool
) -> tuple[list[StatusChange], Comparison]:
    """Regressions and fixes between each (cell label, case)'s two newest runs, and what
    was compared (``earlier``: whether the history holds a run before the newest)."""
    changes = []
    compared = 0
    for _, runs in sorted(_runs_of_each_result(records).items()):
        if len(runs) < 2:
            continue
        compared += 1
        # By when each ran, never by the run ids' text.
        previous, latest = sorted(runs.values(), key=lambda r: (ran_at(r), r.run_id))[-2:]
        was_ok = previous.status is Status.PASS
        is_ok = latest.status is Status.PASS
        if was_ok and latest.status in PROBLEM_STATUSES:
            changes.append(StatusChange(kind="regression", before=previous, after=latest))
        elif previous.status in PROBLEM_STATUSES and is_ok:
            changes.append(StatusChange(kind="fix", before=previous, after=latest))
    return changes, Comparison(earlier=earlier, compared=compared)


def changes_since_previous(records: Iterable[Record]) -> list[StatusChange]:
    """Regressions and fixes between each (cell label, case)'s two newest runs."""
    return compare_runs(records, earlier=True)[0]


def pass_rates(records: Iterable[Record]) -> dict[str, list[tuple[str, float]]]:
    """For each operation, (run id, share of its judged cases that passed) per run."""
    counts: dict[str, dict[str, list[int]]] = {}
    times: dict[str, str] = {}  # each run's newest record's time (as the history's)
    for record in records:
        times[record.run_id] = max(times.get(record.run_id, ""), ran_at(record))
        if record.status in (Status.SKIP, Status.NOT_APPLICABLE) or record.case == WHOLE_CELL:
            continue
        tally = counts.setdefault(record.operation, {}).setdefault(record.run_id, [0, 0])
        tally[0] += record.status is Status.PASS
        tally[1] += 1
    return {
        operation: [
            (run, passed / total)
            for run, (passed, total) in sorted(runs.items(), key=lambda i: (times[i[0]], i[0]))
        ]
        for operation, runs in sorted(counts.items())
    }
