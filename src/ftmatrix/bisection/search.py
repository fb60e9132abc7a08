"""First bad release: binary search over one package's releases, holding the other pins.

The search is pure: it asks an ``evaluate(version)`` callback for a case's
outcome and never knows how the cell was built. Outcomes are three-valued: the
outcome at the good end ("good"), any other outcome ("bad"), or none at all
(the release cannot be installed with the other pins, or it flip-flopped):
those releases are skipped and reported, never counted as good or bad.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from packaging.version import Version

from ftmatrix.errors import BisectError as BisectError  # noqa: PLC0414 -- a re-export


class BisectOutcome(enum.Enum):
    GOOD = "good"
    BAD = "bad"
    SKIP = "skip"


@dataclass(frozen=True, kw_only=True)
class Step:
    """One release built and judged."""

    version: str
    verdict: BisectOutcome
    status: str
    detail: str = ""


@dataclass(frozen=True, kw_only=True)
class BisectFinding:
    """Where the outcome changed: the last good release and the first bad one."""

    axis: str
    last_good: str | None
    first_bad: str | None
    steps: tuple[Step, ...]
    skipped: tuple[str, ...] = ()
    untested_between: tuple[str, ...] = field(default_factory=tuple)

    @property
    def exact(self) -> bool:
        """True when no skipped release lies between last good and first bad."""
        return not self.untested_between

    def to_dict(self) -> dict[str, Any]:
        return {
            "axis": self.axis,
            "last_good": self.last_good,
            "first_bad": self.first_bad,
            "exact": self.exact,
            "untested_between": list(self.untested_between),
            "skipped": list(self.skipped),
            "steps": [
                {
                    "version": s.version,
                    "verdict": s.verdict.value,
                    "status": s.status,
                    "detail": s.detail,
                }
                for s in self.steps
            ],
        }


class BudgetSpent(Exception):
    """The evaluator may build no more cells: the search stops where it has got to."""


def releases_between(all_versions: Sequence[str], good: str, bad: str) -> list[str]:
    """The releases from ``good`` to ``bad`` inclusive, in the search's direction.

    ``good`` may be newer than ``bad``: that searches for the release that fixed it.
    """
    low, high = sorted((Version(good), Version(bad)))
    chosen = sorted((v for v in all_versions if low <= Version(v) <= high), key=Version)
    missing = [v for v in (good, bad) if v not in chosen]
    if missing:
        raise BisectError(f"{', '.join(missing)} not among the releases on the index")
    return chosen if Version(good) < Version(bad) else chosen[::-1]


def bisect(
    axis: str,
    versions: Sequence[str],
    evaluate: Callable[[str], tuple[BisectOutcome, str, str]],
) -> BisectFinding:
    """Find the first release of ``versions`` (good end first) whose outcome is bad.

    ``evaluate(version)`` returns (verdict, status, detail). The ends are checked
    first; then the release that halves the places the first bad one can still be
    (:func:`_halving`), skipped releases left out, so a few uninstallable releases cost
    only their own builds. When
    ``evaluate`` raises BudgetSpent in the middle, the finding is the range narrowed
    so far (``untested_between`` lists what is left); at the ends it is a BisectError.
    """
    steps: list[Step] = []

    def judge(index: int) -> BisectOutcome:
        verdict, status, detail = evaluate(versions[index])
        steps.append(Step(version=versions[index], verdict=verdict, status=status, detail=detail))
        return verdict

    try:
        ends = (judge(0), judge(len(versions) - 1))
    except BudgetSpent as exc:
        raise BisectError(f"{axis}: the budget does not cover both ends: {exc}") from exc
    if ends[0] is not BisectOutcome.GOOD:
        raise BisectError(f"{axis} {versions[0]} (the good end) is not good: {steps[0].status}")
    if ends[1] is not BisectOutcome.BAD:
        raise BisectError(f"{axis} {versions[-1]} (the bad end) is not bad: {steps[1].status}")

    good, bad = 0, len(versions) - 1
    skipped: set[int] = set()
    while True:
        candidates = [i for i in range(good + 1, bad) if i not in skipped]
        if not candidates:
            break
        index = _halving(candidates, good, bad)
        try:
            verdict = judge(index)
        except BudgetSpent:
            break
        if verdict is BisectOutcome.GOOD:
            good = index
        elif verdict is BisectOutcome.BAD:
            bad = index
        else:
            skipped.add(index)
    return BisectFinding(
        axis=axis,
        last_good=versions[good],
        first_bad=versions[bad],
        steps=tuple(steps),
        skipped=tuple(versions[i] for i in sorted(skipped)),
        untested_between=tuple(versions[i] for i in range(good + 1, bad)),
    )


def _halving(candidates: Sequence[int], good: int, bad: int) -> int:
    """The candidate that halves where the first bad release can still be: at one of the
    candidates or at ``bad`` (a skipped release is no place of its own: it stands with the
    next one tried). Of two that halve it as well, the one nearer the middle, then the
    lower: a skip in the middle costs its own build and no more."""
    places = len(candidates) + 1
    middle = (good + bad) / 2

    def worse_half(k: int) -> tuple[int, float, int]:
        return max(k + 1, places - k - 1), abs(candidates[k] - middle), candidates[k]

    return candidates[min(range(len(candidates)), key=worse_half)]


def confirm(
    evaluate_once: Callable[[str], tuple[BisectOutcome, str, str, bool]],
) -> Callable[[str], tuple[BisectOutcome, str, str]]:
    """Wrap an evaluator so a flaky outcome is built again before it decides a step.

    ``evaluate_once`` returns (verdict, status, detail, flaky). Two agreeing runs
    decide; a disagreement makes the release a skip ("flaky"), never good or bad.
    """

    def evaluate(version: str) -> tuple[BisectOutcome, str, str]:
        verdict, status, detail, flaky = evaluate_once(version)
        if not flaky:
            return verdict, status, detail
        again, status_again, detail_again, _ = evaluate_once(version)
        if again is verdict:
            return verdict, status, f"confirmed on a second run; {detail}"
        return BisectOutcome.SKIP, f"flaky ({status} then {status_again})", detail_again

    return evaluate
