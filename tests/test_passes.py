"""The supervisor's choice of the next pytest pass, on tables: each row a situation (what
the passes before left in the cell's files) and the pass that comes next, or how a pass
that ended is concluded. The real passes run in test_unlucky_run, test_workers and
test_runner_e2e; these rows pin every branch of the choice."""

from __future__ import annotations

from dataclasses import replace

import pytest

from ftmatrix.passes import Cases, Ended, Pass, Passes, Then, after_pass, next_pass

ABC = ("a", "b", "c")
NOTHING = Cases(collected=ABC, recorded=frozenset(), isolated=frozenset(), second_tries=())
SHARING = Passes(sharing=True)
ONE = Passes(sharing=False)
SUSPECT = Passes(sharing=False, suspect_alone=True)


def cases(**changes: object) -> Cases:
    return replace(NOTHING, **changes)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("passes", "now", "expected"),
    [
        pytest.param(
            SHARING, cases(collected=None), Pass(cases=None, shared=True),
            id="first pass: the run's targets, shared among the workers",
        ),
        pytest.param(
            ONE, cases(collected=None), Pass(cases=None),
            id="first pass without workers: the targets in one process",
        ),
        pytest.param(
            ONE, cases(recorded=frozenset({"a"})), Pass(cases=("b", "c")),
            id="the cases without a record, in the collected order",
        ),
        pytest.param(
            SHARING, cases(recorded=frozenset({"b"})), Pass(cases=("a", "c"), shared=True),
            id="still sharing: the cases left, shared",
        ),
        pytest.param(
            ONE, cases(recorded=frozenset(ABC)), None,
            id="every case recorded: done",
        ),
        pytest.param(
            SHARING, cases(recorded=frozenset(ABC), second_tries=("a",)), None,
            id="done even with a first try left over (its case has a record)",
        ),
        pytest.param(
            SHARING, cases(second_tries=("c", "a")), Pass(cases=("c",), alone=True),
            id="a crashed case's second try first, alone, never shared",
        ),
        pytest.param(
            ONE, cases(isolated=frozenset({"b"})), Pass(cases=ABC),
            id="isolated cases go along while others are left: the plugin leaves them out",
        ),
        pytest.param(
            ONE,
            cases(recorded=frozenset({"a", "c"}), isolated=frozenset({"b"})),
            Pass(cases=("b",), alone=True),
            id="only isolated cases left: each alone",
        ),
        pytest.param(
            replace(ONE, only_isolated=True),
            cases(isolated=frozenset({"c", "b"})),
            Pass(cases=("b",), alone=True),
            id="the others could not run: the isolated ones still do, in collected order",
        ),
        pytest.param(
            ONE,
            cases(isolated=frozenset({"b"}), second_tries=("a",)),
            Pass(cases=("a",), alone=True),
            id="a second try comes before an isolated case",
        ),
        pytest.param(
            SUSPECT, cases(recorded=frozenset({"a"})), Pass(cases=("b",), alone=True),
            id="after pytest stopped itself: the first case without a record, alone",
        ),
    ],
)  # fmt: skip
def test_the_next_pass(passes: Passes, now: Cases, expected: Pass | None) -> None:
    assert next_pass(passes, now) == expected


CLEAN = Ended(
    returncode=0,
    running=0,
    killed=False,
    casualties=0,
    deadline_passed=False,
    collected=True,
    progressed=True,
    isolated_left=False,
    second_tries=False,
)
PLAIN = Pass(cases=ABC)
SHARED = Pass(cases=ABC, shared=True)
ALONE = Pass(cases=("a",), alone=True)


def ended(**changes: object) -> Ended:
    return replace(CLEAN, **changes)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("passes", "ran", "end", "expected"),
    [
        pytest.param(
            ONE, PLAIN, CLEAN, (ONE, Then.NEXT),
            id="a plain pass that recorded: the next (none if all are done)",
        ),
        pytest.param(
            ONE, PLAIN, ended(returncode=1), (ONE, Then.NEXT),
            id="failed cases end pytest normally",
        ),
        pytest.param(
            SHARING, SHARED, CLEAN, (ONE, Then.NEXT),
            id="a shared pass that lost no worker: the rest in one process",
        ),
        pytest.param(
            SHARING, SHARED, ended(casualties=1), (SHARING, Then.NEXT),
            id="a shared pass that lost a worker: the cases left shared again",
        ),
        pytest.param(
            SHARING, SHARED, ended(second_tries=True), (SHARING, Then.NEXT),
            id="a shared pass that left a second try: sharing after it",
        ),
        pytest.param(
            SHARING, SHARED, ended(returncode=3), (ONE, Then.NEXT),
            id="a shared pass ends with any of pytest's codes",
        ),
        pytest.param(
            ONE, PLAIN, ended(returncode=3), (SUSPECT, Then.NEXT),
            id="a plain pass's internal error after collecting: the case it was at, alone",
        ),
        pytest.param(
            ONE, PLAIN, ended(returncode=2, progressed=False), (SUSPECT, Then.NEXT),
            id="interrupted before recording anything: the case it was at, alone",
        ),
        pytest.param(
            SUSPECT, ALONE, ended(returncode=3, progressed=False), (ONE, Then.CONCLUDE_ALONE),
            id="the case that stops pytest, run alone: concluded, the rest run on",
        ),
        pytest.param(
            SUSPECT, ALONE, ended(returncode=1), (ONE, Then.CONCLUDE_ALONE),
            id="the suspect run alone ended normally: concluded if it left no record",
        ),
        pytest.param(
            ONE, PLAIN, ended(returncode=-9), (ONE, Then.RECORD_CELL_PROBLEM),
            id="pytest killed between cases: the cell's problem",
        ),
        pytest.param(
            ONE, Pass(cases=None), ended(returncode=4, collected=False),
            (ONE, Then.RECORD_CELL_PROBLEM),
            id="pytest ended before collecting: the cell's problem",
        ),
        pytest.param(
            ONE, ALONE, ended(progressed=False), (ONE, Then.CONCLUDE_ALONE),
            id="a case run alone that ended normally: concluded if it left no record",
        ),
        pytest.param(
            ONE, PLAIN, ended(progressed=False), (ONE, Then.STOP),
            id="a plain pass that recorded nothing: never loop on it",
        ),
        pytest.param(
            ONE, PLAIN, ended(progressed=False, isolated_left=True),
            (replace(ONE, only_isolated=True), Then.NEXT),
            id="recorded nothing, isolated cases left: only they run now",
        ),
        pytest.param(
            replace(ONE, only_isolated=True), PLAIN, CLEAN,
            (replace(ONE, only_isolated=True), Then.NEXT),
            id="once only the isolated cases can run, it stays so",
        ),
        pytest.param(
            ONE, PLAIN, ended(running=1, returncode=-11), (ONE, Then.CONCLUDE_RUNNING),
            id="died in a case: that case is concluded (a crash is a first try)",
        ),
        pytest.param(
            ONE, PLAIN, ended(running=1, killed=True), (ONE, Then.CONCLUDE_RUNNING),
            id="killed in a case (time, memory): that case is concluded",
        ),
        pytest.param(
            SHARING, SHARED, ended(running=2, returncode=-9), (ONE, Then.NEXT),
            id="the controller died with several cases running: they run again, one process",
        ),
        pytest.param(
            SHARING, SHARED, ended(running=2, killed=True), (SHARING, Then.CONCLUDE_RUNNING),
            id="killed with several cases running: each is concluded",
        ),
        pytest.param(
            ONE, PLAIN, ended(running=1, killed=True, deadline_passed=True),
            (ONE, Then.CONCLUDE_RUNNING_AND_STOP),
            id="the cell's time ran out: the running case concluded, the rest not run",
        ),
    ],
)  # fmt: skip
def test_how_a_pass_ends(
    passes: Passes, ran: Pass, end: Ended, expected: tuple[Passes, Then]
) -> None:
    assert after_pass(passes, ran, end) == expected
