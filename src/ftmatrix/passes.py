"""Which pytest pass a cell's supervisor starts next, from what the passes before it left.

Pure: the supervisor (ftmatrix.supervise) reads the cell's files into :class:`Cases`,
starts the :class:`Pass` that :func:`next_pass` gives (none: the cell is done), and
tells :func:`after_pass` how it ended; that answers what to record of it (:class:`Then`)
and what the passes after it keep in mind (:class:`Passes`).

The order, for a cell whose cases all finish: a first pass over the run's targets (with
pytest-xdist workers when it has them: the shared pass) collects the cases; the shared
pass leaves out the exclusive cases, which then run in one process; a crashed case is
tried once more alone, before anything else; isolated cases run last, each alone.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, replace

# pytest's own exit codes: ok, tests failed, interrupted, internal error, usage, none collected.
PYTEST_EXIT_CODES = frozenset({0, 1, 2, 3, 4, 5})
# Those of a run that went through its cases: ok, tests failed, none collected.
PYTEST_NORMAL_ENDS = frozenset({0, 1, 5})


@dataclass(frozen=True, kw_only=True)
class Cases:
    """What the cell's files say before a pass."""

    collected: Sequence[str] | None  # every case the plugin collected (None: not yet)
    recorded: frozenset[str]  # cases with a record, or one that waits for disk space
    isolated: frozenset[str]  # cases that each run in a pytest process of their own
    second_tries: Sequence[str]  # crashed once, waiting to be tried again alone, in order


@dataclass(frozen=True, kw_only=True)
class Pass:
    """One pytest process: the cases it runs, and how."""

    cases: tuple[str, ...] | None  # None: the targets the run was given (nothing collected)
    alone: bool = False  # one case in a process of its own (a second try, an isolated case)
    shared: bool = False  # among pytest-xdist workers


@dataclass(frozen=True, kw_only=True)
class Passes:
    """What the passes so far leave the next ones to keep in mind."""

    # The cases are shared among workers (the run has them) until a shared pass ends
    # whole, or one dies with several cases running and the culprit must be found alone.
    sharing: bool
    # A plain pass recorded nothing new: only the isolated cases can still run, alone.
    only_isolated: bool = False
    # A plain pass ended in an internal error (a case's object broke pytest or the plugin):
    # the first case without a record, the one it was at, runs next alone, to be concluded.
    suspect_alone: bool = False


@dataclass(frozen=True, kw_only=True)
class Ended:
    """How a pass ended, as the supervisor saw it."""

    returncode: int  # pytest's (through the keeper), or minus the signal that ended it
    running: int  # cases it was in the middle of (their running-case notes)
    killed: bool  # the supervisor killed it: past a time or memory limit
    casualties: int  # workers' cases concluded while the other workers ran on
    deadline_passed: bool  # the cell ran past its own time limit
    collected: bool  # the plugin listed the cell's cases
    progressed: bool  # a case got a record in this pass
    isolated_left: bool  # isolated cases without a record
    second_tries: bool  # crashed cases wait for their second try


class Then(enum.Enum):
    """What to do once a pass ended."""

    NEXT = "start the next pass"
    # The cases it was in the middle of end as it did (crash, timeout, oom); then the next.
    CONCLUDE_RUNNING = "conclude the running cases"
    # ... and the cell is past its time: every case not run is recorded a timeout. Stop.
    CONCLUDE_RUNNING_AND_STOP = "conclude the running cases, the rest not run"
    # The case it ran alone ended normally yet left no record: recorded as ours; the next.
    CONCLUDE_ALONE = "conclude the case it ran alone"
    # pytest ended not as pytest ends, or before collecting: one record for the cell. Stop.
    RECORD_CELL_PROBLEM = "record the cell's problem"
    STOP = "stop"  # nothing more can run


def next_pass(passes: Passes, cases: Cases) -> Pass | None:
    """The pass to start next, or None when every collected case has a record."""
    if cases.collected is None:
        return Pass(cases=None, shared=passes.sharing)
    remaining = tuple(c for c in cases.collected if c not in cases.recorded)
    if not remaining:
        return None
    if cases.second_tries:
        return Pass(cases=(cases.second_tries[0],), alone=True)
    if passes.suspect_alone:
        return Pass(cases=(remaining[0],), alone=True)
    isolated = [c for c in remaining if c in cases.isolated]
    if isolated and (passes.only_isolated or len(isolated) == len(remaining)):
        return Pass(cases=(isolated[0],), alone=True)
    return Pass(cases=remaining, shared=passes.sharing)


def after_pass(passes: Passes, ran: Pass, ended: Ended) -> tuple[Passes, Then]:
    """What ``ended`` means for pass ``ran``: the passes after it, and what to record."""
    if ended.running:
        return _after_cases_died(passes, ended)
    return _after_pytest_ended(passes, ran, ended)


def _after_cases_died(passes: Passes, ended: Ended) -> tuple[Passes, Then]:
    """The pass ended in the middle of cases: a process died, or was killed."""
    if not ended.killed and ended.running > 1:
        # pytest-xdist's controller died with several cases running: which one killed
        # it is unknown, so they run again one at a time, to find out.
        return replace(passes, sharing=False), Then.NEXT
    if ended.deadline_passed:
        return passes, Then.CONCLUDE_RUNNING_AND_STOP
    return passes, Then.CONCLUDE_RUNNING


def _after_pytest_ended(passes: Passes, ran: Pass, ended: Ended) -> tuple[Passes, Then]:
    """The pass ended between cases: pytest itself ended."""
    # A shared pass ends with any of pytest's codes (a worker's case may have crashed).
    normal = ended.returncode in (PYTEST_EXIT_CODES if ran.shared else PYTEST_NORMAL_ENDS)
    if not (ended.collected and normal):
        if not (ended.collected and ended.returncode in PYTEST_EXIT_CODES):
            return passes, Then.RECORD_CELL_PROBLEM
        if not ran.alone:
            # pytest stopped itself between cases (an internal error, an interruption):
            # the case it stopped at runs alone next (concluded there), the rest after it.
            return replace(passes, suspect_alone=True), Then.NEXT
    if ran.shared:
        # A shared pass that lost no worker is over: what is left (the exclusive cases)
        # runs in one process, alone.
        return replace(passes, sharing=ended.second_tries or ended.casualties > 0), Then.NEXT
    if ran.alone:
        return replace(passes, suspect_alone=False), Then.CONCLUDE_ALONE
    if not ended.progressed and not ended.isolated_left:
        return passes, Then.STOP  # nothing new recorded: never loop on a case we cannot run
    # Nothing new recorded, isolated cases left: they still run, alone.
    stuck = passes.only_isolated or not ended.progressed
    return replace(passes, only_isolated=stuck), Then.NEXT
