"""Which new failures to bisect after a run, within a budget of cells: a pure choice.

A failing (cell, case) qualifies when its failure is new (no known_issues.yaml
entry explains it and no finding in the history already covers its signature or
its search) and a *neighbour* cell, one that differs from it in exactly one
package pin, passes the same case on the same hardware class and Python. The
search then runs over that package's releases between the two pins, the other
pins held (:func:`ftmatrix.bisection.cells.run_bisect` builds the cells).

Failures that share a signature are bisected once, from the neighbour that costs
fewest builds. Jobs are taken most widespread failure first; each costs its
estimated builds (:attr:`AutoJob.cost`) and is left out when that is more than
the budget has left. Two adjacent releases need no build at all: the run that
found the failure already built both, so the finding is immediate.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion

from ftmatrix.bisection.cells import BisectRequest
from ftmatrix.bisection.search import (
    BisectError,
    BisectFinding,
    BisectOutcome,
    Step,
    releases_between,
)
from ftmatrix.cell.record import WHOLE_CELL, Record
from ftmatrix.cell.status import Status
from ftmatrix.known_issues import KnownIssue, cell_statuses, explain
from ftmatrix.record_order import newest_per
from ftmatrix.versions import parse_version


class ReleasesUnavailable(Exception):
    """The release list of a package could not be read (the index is unreachable)."""


@dataclass(frozen=True, kw_only=True)
class AutoJob:
    """One search to run, and why it was chosen."""

    request: BisectRequest
    signature: str | None
    failing: Record
    passing: Record
    releases: tuple[str, ...]  # from the good end to the bad end, both included
    shared: int  # failing (cell, case) records with this failure: the job's value

    @property
    def immediate(self) -> bool:
        """Adjacent releases: the run already built both, the finding needs no build."""
        return len(self.releases) == 2

    @property
    def cost(self) -> int:
        """Cells the search builds, at most (when no release is skipped or flaky).

        run_bisect confirms both ends, then halves the releases between them.
        """
        if self.immediate:
            return 0
        return 2 + math.ceil(math.log2(len(self.releases) - 1))

    def describe(self) -> str:
        request = self.request
        held = ", ".join(f"{k}=={v}" for k, v in request.pins)
        cause = self.failing.exception_type or self.failing.status.value
        sig = f" [{self.signature[:8]}]" if self.signature else ""
        text = (
            f"{request.case} on {request.hardware}: {request.axis} {request.good} passes "
            f"({self.passing.cell_label}), {request.bad} {_VERBS[self.failing.status]} "
            f"({self.failing.cell_label}; {cause}{sig})"
        )
        if held:
            text += f", holding {held}"
        if self.shared > 1:
            text += f"; {self.shared} failing cases share it"
        if self.immediate:
            return text + "; adjacent releases: found without a build"
        between = len(self.releases) - 2
        releases = "release" if between == 1 else "releases"
        return text + f"; {between} {releases} between: about {self.cost} builds"


@dataclass(frozen=True, kw_only=True)
class LeftOut:
    """A failure that is not bisected, and why."""

    what: str
    kind: str  # known, bisected, no-neighbour, no-releases
    reason: str


@dataclass(frozen=True, kw_only=True)
class Selection:
    """The jobs chosen, in the order to run them, and everything left out with why."""

    budget: int
    records: int
    failures: int
    jobs: tuple[AutoJob, ...] = ()
    over_budget: tuple[AutoJob, ...] = ()
    left_out: tuple[LeftOut, ...] = ()

    @property
    def estimated(self) -> int:
        return sum(job.cost for job in self.jobs)

    def nothing_reason(self) -> str | None:
        """Why there is nothing to bisect, or None when there is."""
        if self.jobs:
            return None
        if self.budget <= 0:
            return "bisect.budget is 0 (off); set it in the matrix file, e.g. bisect: {budget: 8}"
        if not self.records:
            return "no records to look at"
        if not self.failures:
            return f"no failure among {self.records} records (the newest run of each cell)"
        counts: dict[str, int] = {}
        for item in self.left_out:
            counts[item.kind] = counts.get(item.kind, 0) + 1
        if self.over_budget:
            counts["over-budget"] = len(self.over_budget)
        why = ", ".join(f"{n} {_KIND_TEXT[kind]}" for kind, n in sorted(counts.items()))
        return f"none of {self.failures} failing cases qualifies ({why})"


_VERBS = {
    Status.FAIL: "fails",
    Status.CRASH: "crashes",
    Status.TIMEOUT: "times out",
    Status.OOM: "runs out of memory",
}
_KIND_TEXT = {
    "known": "explained by known_issues.yaml",
    "bisected": "already bisected",
    "no-neighbour": "without a passing cell one pin apart",
    "no-releases": "whose releases are not on the index",
    "over-budget": "over the budget",
}


def choose_bisects(
    records: Iterable[Record],
    *,
    budget: int,
    releases: Callable[[str], Sequence[str]],
    known: Sequence[KnownIssue] = (),
    findings: Sequence[Mapping[str, Any]] = (),
) -> Selection:
    """The searches worth running among ``records`` (each cell's newest run), within ``budget``.

    ``releases(package)`` lists a package's releases on the index (it may raise
    :class:`ReleasesUnavailable`); it is asked only about packages a job would move.
    """
    latest = _newest(records)
    breaks = [r for r in latest if r.status.is_break and r.case != WHOLE_CELL and not r.flaky]
    if budget <= 0:
        return Selection(budget=budget, records=len(latest), failures=len(breaks))
    passing = _passing_by_place(latest)
    cells = cell_statuses(latest)
    listed: dict[str, list[str]] = {}

    def listing(package: str) -> list[str]:
        if package not in listed:
            listed[package] = [str(v) for v in releases(package)]
        return listed[package]

    candidates: list[AutoJob] = []
    left_out: list[LeftOut] = []
    for members in _failure_groups(breaks).values():
        # Only the members no entry's signature fits are new: one explained record of a
        # signature explains none of the others.
        unexplained = [r for r in members if explain(r, known, cells) is None]
        if not unexplained:
            entry = explain(members[0], known, cells)
            assert entry is not None
            reason = f"known issue {entry.id}"
            left_out.append(LeftOut(what=_group_text(members), kind="known", reason=reason))
            continue
        chosen = _group_job(unexplained, len(members), passing, findings, listing)
        if isinstance(chosen, AutoJob):
            candidates.append(chosen)
        else:
            kind, reason = chosen
            left_out.append(LeftOut(what=_group_text(members), kind=kind, reason=reason))
    jobs, over = within_budget(candidates, budget)
    return Selection(
        budget=budget,
        records=len(latest),
        failures=len(breaks),
        jobs=jobs,
        over_budget=over,
        left_out=tuple(left_out),
    )


def within_budget(
    candidates: Iterable[AutoJob], budget: int
) -> tuple[tuple[AutoJob, ...], tuple[AutoJob, ...]]:
    """The jobs to run, most widespread failure first, and those the budget has no room for:
    a job is taken while its cost fits what is left, so a cheaper one after it may still fit."""
    chosen: list[AutoJob] = []
    over: list[AutoJob] = []
    left = budget
    for job in sorted(candidates, key=lambda j: (-j.shared, j.cost, j.request.id)):
        if job.cost <= left:
            chosen.append(job)
            left -= job.cost
        else:
            over.append(job)
    return tuple(chosen), tuple(over)


def _passing_by_place(latest: Iterable[Record]) -> dict[tuple[str, str, str], list[Record]]:
    """(hardware class, Python, case) -> the steady passes there: the possible neighbours."""
    passing: dict[tuple[str, str, str], list[Record]] = {}
    for record in latest:
        if record.status is Status.PASS and not record.flaky:
            where = (record.hardware_class, record.python, record.case)
            passing.setdefault(where, []).append(record)
    return passing


def _failure_groups(breaks: Iterable[Record]) -> dict[str, list[Record]]:
    """Failures that share a signature (or, unsigned, a status and case), bisected once."""
    groups: dict[str, list[Record]] = {}
    for record in sorted(breaks, key=lambda r: (r.cell_label, r.case)):
        key = record.signature or f"{record.status.value}|{record.case}"
        groups.setdefault(key, []).append(record)
    return groups


def _group_text(members: Sequence[Record]) -> str:
    first = members[0]
    more = f" and {len(members) - 1} more" if len(members) > 1 else ""
    return f"{first.case} in {first.cell_label}{more}"


def _group_job(
    unexplained: Sequence[Record],
    shared: int,
    passing: Mapping[tuple[str, str, str], list[Record]],
    findings: Sequence[Mapping[str, Any]],
    listing: Callable[[str], Sequence[str]],
) -> AutoJob | tuple[str, str]:
    """The cheapest search for one failure group's new members, or (kind, why) there is none."""
    first = unexplained[0]
    done = next(
        (f for f in findings if first.signature and f.get("signature") == first.signature), None
    )
    if done is not None:
        return "bisected", _finding_text(done)
    options, why = _options(unexplained, passing, findings, listing)
    if not options:
        return why
    best = min(options, key=lambda j: (j.cost, j.request.id))
    return replace(best, shared=shared)


def immediate_finding(job: AutoJob) -> BisectFinding:
    """The finding of a job over adjacent releases, from the run's own two records."""
    request = job.request
    failing = job.failing
    detail = (failing.message or failing.reason or "").strip().splitlines()
    return BisectFinding(
        axis=request.axis,
        last_good=request.good,
        first_bad=request.bad,
        steps=(
            Step(
                version=request.good,
                verdict=BisectOutcome.GOOD,
                status=job.passing.status.value,
                detail=f"run {job.passing.run_id}, cell {job.passing.cell_label}",
            ),
            Step(
                version=request.bad,
                verdict=BisectOutcome.BAD,
                status=failing.status.value,
                detail=detail[0] if detail else f"run {failing.run_id}",
            ),
        ),
    )


def _options(
    members: Sequence[Record],
    passing: Mapping[tuple[str, str, str], list[Record]],
    findings: Sequence[Mapping[str, Any]],
    listing: Callable[[str], Sequence[str]],
) -> tuple[list[AutoJob], tuple[str, str]]:
    """Every search that could explain one failure group, or why there is none."""
    options: list[AutoJob] = []
    why = ("no-neighbour", "no cell one pin apart passes the same case")
    for record in members:
        for neighbour in passing.get((record.hardware_class, record.python, record.case), []):
            axis = _one_pin_apart(record.pins, neighbour.pins)
            if axis is None:
                continue
            good, bad = neighbour.pins[axis], record.pins[axis]
            assert good is not None and bad is not None
            held = tuple(
                sorted((k, v) for k, v in record.pins.items() if k != axis and v is not None)
            )
            request = BisectRequest(
                case=record.case,
                axis=axis,
                good=good,
                bad=bad,
                pins=held,
                hardware=record.hardware_class,
                python=record.python,
            )
            done = next((f for f in findings if _same_search(f, request)), None)
            if done is not None:
                why = ("bisected", _finding_text(done))
                continue
            try:
                versions = releases_between(listing(axis), good, bad)
            except (BisectError, ReleasesUnavailable) as exc:
                why = ("no-releases", f"{axis}: {exc}")
                continue
            options.append(
                AutoJob(
                    request=request,
                    signature=record.signature,
                    failing=record,
                    passing=neighbour,
                    releases=tuple(versions),
                    shared=1,
                )
            )
    return options, why


def _one_pin_apart(
    failing: Mapping[str, str | None], passing: Mapping[str, str | None]
) -> str | None:
    """The one package both cells pin to different releases, or None."""
    if set(failing) != set(passing):
        return None
    apart = [k for k in failing if failing[k] != passing[k]]
    if len(apart) != 1:
        return None
    axis = apart[0]
    if failing[axis] is None or passing[axis] is None:
        return None  # "not installed" has no releases to search between
    try:
        parse_version(str(failing[axis]))
        parse_version(str(passing[axis]))
    except InvalidVersion:
        return None
    return axis


def _same_search(finding: Mapping[str, Any], request: BisectRequest) -> bool:
    """Does a finding in the history already answer ``request`` (same case, axis, held pins)?"""
    if finding.get("case") != request.case:
        return False
    if canonicalize_name(str(finding.get("axis"))) != canonicalize_name(request.axis):
        return False
    if finding.get("hardware") not in (None, request.hardware):
        return False
    held = {
        canonicalize_name(k): v
        for k, v in (finding.get("held") or {}).items()
        if canonicalize_name(k) != canonicalize_name(request.axis)
    }
    return held == {canonicalize_name(k): v for k, v in request.pins}


def _finding_text(finding: Mapping[str, Any]) -> str:
    return (
        f"already bisected: {finding.get('axis')} last good {finding.get('last_good')}, "
        f"first bad {finding.get('first_bad')}"
    )


def _newest(records: Iterable[Record]) -> list[Record]:
    newest = newest_per(records, key=lambda r: (r.cell_id, r.case))
    return sorted(newest.values(), key=lambda r: (r.cell_label, r.case))
