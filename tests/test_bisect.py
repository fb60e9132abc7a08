"""The first-bad-release search, as properties over a synthetic oracle."""

from __future__ import annotations

import math

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ftmatrix.bisection.search import (
    BisectError,
    BisectOutcome,
    BudgetSpent,
    bisect,
    confirm,
    releases_between,
)


@st.composite
def histories(draw):
    n = draw(st.integers(min_value=2, max_value=80))
    first_bad = draw(st.integers(min_value=1, max_value=n - 1))
    middle = st.integers(min_value=1, max_value=max(1, n - 2))
    skips = draw(st.sets(middle, max_size=n // 4)) if n > 2 else set()
    return n, first_bad, skips


@settings(max_examples=200, deadline=None)
@given(history=histories())
# A skip in the middle, then ties broken low: 9 builds where 8 do (hypothesis found it).
@example(history=(30, 28, {25}))
def test_finds_the_change_in_about_log2_builds_skipping_uninstallable(history):
    n, first_bad, skips = history
    versions = [f"1.{i}.0" for i in range(n)]
    built: list[str] = []

    def oracle(version: str) -> tuple[BisectOutcome, str, str]:
        built.append(version)
        index = versions.index(version)
        if index in skips:
            return BisectOutcome.SKIP, "uninstallable", "resolver said no"
        return (
            (BisectOutcome.GOOD, "pass", "")
            if index < first_bad
            else (BisectOutcome.BAD, "fail", "")
        )

    finding = bisect("pkg", versions, oracle)
    tried = [i for i in range(n) if i not in skips]
    expected_good = max(i for i in tried if i < first_bad)
    expected_bad = min(i for i in tried if i >= first_bad)
    assert finding.last_good == versions[expected_good]
    assert finding.first_bad == versions[expected_bad]
    assert finding.untested_between == tuple(versions[expected_good + 1 : expected_bad])
    assert finding.exact == (expected_bad - expected_good == 1)
    assert len(built) == len(set(built))  # no release is built twice
    assert len(built) <= 2 + math.ceil(math.log2(n)) + len(skips)
    assert set(finding.skipped) <= {versions[i] for i in skips}


def test_a_flaky_release_is_built_again_and_skipped_if_it_disagrees():
    calls: dict[str, int] = {}

    def once(version: str) -> tuple[BisectOutcome, str, str, bool]:
        calls[version] = calls.get(version, 0) + 1
        if version == "1.1":
            # crashes once, then passes: flaky
            return (
                (BisectOutcome.BAD, "crash", "", True)
                if calls[version] == 1
                else (BisectOutcome.GOOD, "pass", "", False)
            )
        if version == "1.2":
            return BisectOutcome.BAD, "fail", "", True  # flaky flag, but both runs agree
        return (
            (BisectOutcome.GOOD, "pass", "", False)
            if version < "1.2"
            else (BisectOutcome.BAD, "fail", "", False)
        )

    finding = bisect("pkg", ["1.0", "1.1", "1.2", "1.3"], confirm(once))
    assert calls == {"1.0": 1, "1.3": 1, "1.1": 2, "1.2": 2}
    assert finding.skipped == ("1.1",)
    assert finding.last_good == "1.0"
    assert finding.first_bad == "1.2"
    step = next(s for s in finding.steps if s.version == "1.1")
    assert step.status == "flaky (crash then pass)"


def test_the_ends_must_bracket_a_change():
    with pytest.raises(BisectError, match=r"pkg 1.0 \(the good end\) is not good: fail"):
        bisect("pkg", ["1.0", "1.1"], lambda v: (BisectOutcome.BAD, "fail", ""))
    with pytest.raises(BisectError, match=r"pkg 1.1 \(the bad end\) is not bad: pass"):
        bisect("pkg", ["1.0", "1.1"], lambda v: (BisectOutcome.GOOD, "pass", ""))


def test_releases_between_in_either_direction():
    released = ["0.9", "1.0", "1.1", "1.10", "1.2", "2.0"]
    assert releases_between(released, "1.0", "1.10") == ["1.0", "1.1", "1.2", "1.10"]
    assert releases_between(released, "1.10", "1.0") == ["1.10", "1.2", "1.1", "1.0"]
    with pytest.raises(BisectError, match=r"1\.3 not among the releases on the index"):
        releases_between(released, "1.0", "1.3")


@settings(max_examples=100, deadline=None)
@given(history=histories(), budget=st.integers(min_value=0, max_value=10))
def test_a_spent_budget_stops_the_search_with_the_range_narrowed_so_far(history, budget):
    n, first_bad, _ = history
    versions = [f"1.{i}.0" for i in range(n)]
    built: list[str] = []

    def capped(version: str) -> tuple[BisectOutcome, str, str]:
        if len(built) >= budget:
            raise BudgetSpent(f"{len(built)} of {budget} cells built")
        built.append(version)
        index = versions.index(version)
        return (
            (BisectOutcome.GOOD, "pass", "")
            if index < first_bad
            else (BisectOutcome.BAD, "fail", "")
        )

    if budget < 2:
        with pytest.raises(BisectError, match="the budget does not cover both ends"):
            bisect("pkg", versions, capped)
        return
    finding = bisect("pkg", versions, capped)
    assert len(built) <= budget
    good, bad = versions.index(finding.last_good), versions.index(finding.first_bad)
    assert good < first_bad <= bad  # the change lies in what is left, never outside it
    assert finding.untested_between == tuple(versions[good + 1 : bad])
