"""Watch a cell's pytest from outside, so one bad case never costs another its record.

The results plugin notes the running case in a file beside the cell's records.
The supervisor polls it: a case past its time limit is killed and recorded as
``timeout``; a process tree past the memory limit is killed and the case
recorded as ``oom``; a process that dies mid-case gets that case recorded as
``crash`` and the case is tried once more alone, to tell a flake from a break.
Then pytest starts again with the cases that have no record yet. Isolated cases
(the plugin lists them and leaves them out) each run last in a pytest of their
own, whose plugin writes their record as it writes any other.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any

from ftmatrix.cell.processes import become_subreaper, die_with_parent
from ftmatrix.cell.records import (
    RUNNING_CASE_VARIABLE,
    UNWRITTEN_RECORD,
    CellRecordFile,
    Record,
    case_starts_path,
    collected_cases_path,
    compact_records,
    current_case_path,
    first_tries_path,
    isolated_cases_path,
    quarantine_path,
    read_records,
    redact,
    worker_case_paths,
    write_atomically,
)
from ftmatrix.cell.redact import Redactor
from ftmatrix.cell.status import Status
from ftmatrix.progress import Progress

POLL_SECONDS = 0.25
# What one attempt's output may add to the console (and a CI log): a passing case's
# captured 100 MB, printed with its failure, once went there whole.
ECHO_BYTES = 8 * 2**20
LINE_BYTES = 64 * 2**10
OUTPUT_TAIL_LINES = 60
# pytest's own exit codes: ok, tests failed, interrupted, internal error, usage, none collected.
PYTEST_EXIT_CODES = {0, 1, 2, 3, 4, 5}
# Those of a run that went through its cases: ok, tests failed, none collected.
PYTEST_NORMAL_ENDS = {0, 1, 5}
# Tells the plugin that this pytest runs one case alone, where an isolated case may run.
ALONE_ARG = "--ftmatrix-alone"
# The keeper: the cases' pytest's parent, between it and the supervisor. A case that kills
# its parent (os.getppid()) kills the keeper, never the supervisor (the nox session, and
# with it the whole run): the keeper's death takes its pytest with it (the death signal it
# asked for), and the supervisor records the case as it records any process death. The
# keeper ends as its pytest ended: its exit code, or the signal that killed it.
KEEPER = """
import ctypes, os, signal, subprocess, sys
libc = ctypes.CDLL(None)
env = {**os.environ, "FTMATRIX_KEEPER": str(os.getpid())}
child = subprocess.Popen(
    sys.argv[1:], env=env, preexec_fn=lambda: libc.prctl(1, signal.SIGKILL)
)
code = child.wait()
if code < 0:
    signal.signal(-code, signal.SIG_DFL)
    os.kill(os.getpid(), -code)
sys.exit(code)
"""


@dataclass(frozen=True, kw_only=True)
class CaseLimits:
    """What one case and one cell may use."""

    case_seconds: float
    cell_seconds: float
    memory_bytes: int | None


@dataclass(frozen=True, kw_only=True)
class Attempt:
    """How one pytest process ended."""

    returncode: int
    killed_for: Status | None  # TIMEOUT or OOM when we killed it, else None
    # Running-case notes left when it ended: the case (or, with pytest-xdist workers,
    # the cases) it was in the middle of. Each note: case, operation, started, pid.
    running: tuple[dict[str, Any], ...]
    casualties: int  # cases whose worker died or was killed while the others ran on
    output_tail: str
    cell_deadline_passed: bool
    unwritten: tuple[Record, ...] = ()  # records the plugin could not write (a full disk)


Log = Callable[[str], None]
RecordFactory = Callable[..., Record]
# Told of one case that ended without a record of its own: (note, status, reason, output).
Casualty = Callable[[Mapping[str, Any], Status, str, str], None]


def run_cases(
    command: Sequence[str],
    targets: Sequence[str],
    *,
    record_file: Path,
    cases_dir: Path,
    env: Mapping[str, str],
    limits: CaseLimits,
    make_record: RecordFactory,
    log: Log,
    progress: Progress | None = None,
    parallel: Sequence[str] = (),
    cwd: Path | None = None,
    free_space: Callable[[], None] = lambda: None,
) -> list[Record]:
    """Run pytest (``command`` + case ``targets``) until every collected case has a record.

    ``make_record(case=, operation=, status=, reason=, message=, traceback=, ...)``
    builds a record for a case the plugin could not record itself.

    ``parallel`` (pytest-xdist's ``-n N`` and the plugin's ``--ftmatrix-parallel``) is
    added while the workers' shared pass lasts; a crashed case's second try, and the
    exclusive cases the shared pass leaves out, then run in one process, alone.
    Each isolated case runs in a process of its own once the others are done.
    ``cwd``: pytest's working directory. ``free_space``: called when the disk refused
    records of cases that ran (a full disk), before they are written a last time.
    """
    collected = collected_cases_path(record_file)
    cell_deadline = time.monotonic() + limits.cell_seconds
    watcher = _RecordWatcher(record_file, progress)
    verdicts = _Verdicts(record_file, make_record, env, log, watcher, resumed=collected.exists())
    sharing = bool(parallel)
    only_isolated = False  # the cases left that are not isolated could not be run
    ended: list[Leftover] = []
    while True:
        # A case whose record waits for disk space ran: it is not run again.
        done = {r.case for r in CellRecordFile(record_file).records}
        done |= {r.case for r in verdicts.waiting}
        all_cases = json.loads(collected.read_text()) if collected.exists() else None
        lone = verdicts.lone
        alone: str | None = None
        if all_cases is not None:
            remaining = [c for c in all_cases if c not in done]
            if not remaining:
                break
            alone = _case_to_run_alone(remaining, lone, record_file, only_isolated=only_isolated)
            args = [str(cases_dir / case) for case in ([alone] if alone else remaining)]
        else:
            args = list(targets)
        shared = sharing and alone is None
        attempt = _attempt(
            [*command, *(parallel if shared else ()), *([ALONE_ARG] if alone else ()), *args],
            env=env,
            cwd=cwd,
            record_file=record_file,
            limits=limits,
            cell_deadline=cell_deadline,
            watcher=watcher,
            on_casualty=verdicts.conclude,
            ended=ended,
        )
        verdicts.settle(attempt.unwritten)

        if not attempt.running:
            ended_normally = attempt.returncode in (
                PYTEST_EXIT_CODES if shared else PYTEST_NORMAL_ENDS
            )
            if collected.exists() and ended_normally:
                if shared:
                    # A shared pass that lost no worker is over: what is left (the
                    # exclusive cases) runs in one process, alone.
                    sharing = bool(lone or attempt.casualties)
                    continue
                if alone is not None:
                    verdicts.conclude_unrecorded(alone, attempt.output_tail)
                    continue
                stuck = not _progress_made(record_file, done)
                if stuck and not _isolated_cases(record_file) - _recorded(record_file):
                    break  # nothing new recorded: avoid looping on a case we cannot run
                only_isolated = only_isolated or stuck  # the isolated ones still run, alone
                continue
            _record_cell_problem(attempt, record_file, make_record, collected.exists())
            break

        if attempt.killed_for is None and len(attempt.running) > 1:
            # pytest-xdist's controller died with several cases running: which one
            # killed it is unknown, so they run again one at a time, to find out.
            log("[ftmatrix] pytest died with several cases running; they run again alone")
            sharing = False
            continue
        status, reason = _verdict(attempt, limits)
        for note in attempt.running:
            verdicts.conclude(note, status, reason, attempt.output_tail)
        if attempt.cell_deadline_passed:
            _record_unrun(record_file, collected, make_record, limits)
            break

    return _compact(record_file, ended, log, verdicts.waiting, free_space)


def _write_or_keep(record_file: Path, records: Sequence[Record]) -> list[Record]:
    """Write ``records`` in order; those the disk refuses, returned to try again."""
    refused = []
    for record in records:
        try:
            CellRecordFile(record_file).add(record)
        except OSError:
            refused.append(record)
    return refused


def _compact(
    record_file: Path,
    ended: Sequence[Leftover],
    log: Log,
    waiting: Sequence[Record],
    free_space: Callable[[], None],
) -> list[Record]:
    """The records a full disk refused (``waiting``) written, once ``free_space`` freed
    what the cases wrote (OSError if the disk still refuses them); the leftovers noted on
    their cases' records; then one line a case (a case recorded twice kept both lines),
    durably: the runner marks the cell done next. What cannot be read is kept apart."""
    if waiting:
        free_space()
        refused = _write_or_keep(record_file, waiting)
        if refused:
            cases = ", ".join(r.case for r in refused)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), f"the records of {cases}")
    _note_leftovers(record_file, ended, log)
    scan = compact_records(record_file)
    if scan.damaged:
        kept = quarantine_path(record_file)
        log(f"[ftmatrix] {len(scan.damaged)} unreadable record line(s) moved to {kept}")
    return list(scan.records)


class _Verdicts:
    """Records the cases that ended without a record of their own, across attempts.

    A crash is a first try: the case waits in ``lone`` for a second, alone. First
    tries are kept in a file until then: with workers, the second tries come after
    the shared pass, and a run killed meanwhile must still know, once resumed, that
    the case crashed once.
    """

    def __init__(
        self,
        record_file: Path,
        make_record: RecordFactory,
        env: Mapping[str, str],
        log: Log,
        watcher: _RecordWatcher,
        *,
        resumed: bool,
    ) -> None:
        self.record_file = record_file
        self.make_record = make_record
        self.env = env
        self.log = log
        self.watcher = watcher
        self.saved = first_tries_path(record_file)
        self.first_tries: dict[str, Record] = {}
        if not resumed:
            self.saved.unlink(missing_ok=True)  # from an earlier run of the cell
        elif self.saved.exists():
            self.first_tries = {r.case: r for r in read_records(self.saved).records}
        self.lone: list[str] = list(self.first_tries)
        self.waiting: list[Record] = []  # records the plugin handed over, not yet written
        self.settle_second_tries()

    def settle(self, handed: Sequence[Record]) -> None:
        """After an attempt: the records it handed over written (those the disk refuses
        kept for later), the second tries merged."""
        self.waiting = _write_or_keep(self.record_file, [*self.waiting, *handed])
        self.settle_second_tries()

    def settle_second_tries(self) -> None:
        """Merge a crashed case's first try into the record its second try just wrote.

        Done at once, not at the end, so that a run killed later keeps the verdict.
        """
        file = CellRecordFile(self.record_file)
        for case in list(self.first_tries):
            second = next((r for r in file.records if r.case == case), None)
            if second is not None:
                file.add(_merge_tries(self.first_tries.pop(case), second))
                if case in self.lone:
                    self.lone.remove(case)
        self._save()

    def _save(self) -> None:
        if not self.first_tries:
            self.saved.unlink(missing_ok=True)
            return
        tries = self.first_tries.values()
        write_atomically(self.saved, "".join(json.dumps(r.to_dict()) + "\n" for r in tries))

    def conclude_unrecorded(self, case: str, output: str) -> None:
        """A case that ran alone and ended normally, yet left no record: ours, once.

        Never expected; concluded so that the supervisor cannot run it forever.
        """
        if case not in _recorded(self.record_file):
            reason = "the case ran in a process of its own and left no record"
            self.conclude({"case": case}, Status.ERROR, reason, output)

    def conclude(self, note: Mapping[str, Any], status: Status, reason: str, output: str) -> None:
        case = str(note["case"])
        record = self.make_record(
            case=case,
            operation=str(note.get("operation") or "") or None,
            status=status,
            reason=reason,
            message=reason,
            traceback=redact(output, self.env),
            duration=time.time() - float(note.get("started") or time.time()),
        )
        if status is Status.CRASH and case not in self.first_tries:
            self.log(f"[ftmatrix] {case}: {reason}; trying it once more alone")
            self.first_tries[case] = record
            self._save()
            self.lone.append(case)
            return
        first = self.first_tries.pop(case, None)
        if first is not None:
            record = _merge_tries(first, record)
        self.watcher.seen.add(case)  # reported here, not again when the watcher reads it
        CellRecordFile(self.record_file).add(record)
        if first is not None:
            self._save()  # once the merged record is safe, not before
        self.log(f"[ftmatrix] {case}: {status.value}: {reason}")
        if self.watcher.progress:
            self.watcher.progress.case_finished(case, status)


def _case_to_run_alone(
    remaining: Sequence[str], lone: list[str], record_file: Path, *, only_isolated: bool
) -> str | None:
    """The case the next pytest runs alone, if any (taken from ``lone`` if from there).

    A crashed case's second try first; then, once only isolated cases are left (or
    only they can still run), each of them in turn.
    """
    if lone:
        return lone.pop(0)
    isolated = [c for c in remaining if c in _isolated_cases(record_file)]
    if isolated and (only_isolated or len(isolated) == len(remaining)):
        return isolated[0]
    return None


def _attempt(
    command: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: Path | None,
    record_file: Path,
    limits: CaseLimits,
    cell_deadline: float,
    watcher: _RecordWatcher,
    on_casualty: Casualty,
    ended: list[Leftover],
) -> Attempt:
    """One pytest process over ``command``, watched to its end; what the cases left
    running is ended and added to ``ended``."""
    current = current_case_path(record_file)
    for note_path in [current, *worker_case_paths(record_file)]:
        note_path.unlink(missing_ok=True)
    become_subreaper()
    ours_before = _children_of(os.getpid(), _process_table())
    process = subprocess.Popen(
        [sys.executable, "-I", "-S", "-c", KEEPER, *command],
        env=dict(env),
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group: kill takes every child with it
        # Safe here: the hook only calls prctl through a libc handle loaded beforehand.
        preexec_fn=die_with_parent,  # noqa: PLW1509
    )
    tail: collections.deque[str] = collections.deque(maxlen=OUTPUT_TAIL_LINES)
    # The interpreter's own word on a crash ("Fatal Python error: Segmentation fault"),
    # kept even where a worker's thread dump and the lines after it push it out of the tail.
    fatal: collections.deque[str] = collections.deque(maxlen=4)
    unwritten: list[Record] = []
    pump = threading.Thread(
        target=_pump,
        args=(process, tail, fatal),
        kwargs={"progress": watcher.progress, "env": env, "unwritten": unwritten},
        daemon=True,
    )
    pump.start()
    killed_for: Status | None = None
    cell_deadline_passed = False
    workers = _Workers(record_file, process.pid, limits, lambda: "".join(tail), on_casualty)
    try:
        while not _ended_within(process, POLL_SECONDS):
            note = _read_note(current)
            running = workers.poll()
            watcher.poll([note] if note else running)
            if note and time.time() - float(note["started"]) > limits.case_seconds:
                killed_for = Status.TIMEOUT
            elif time.monotonic() > cell_deadline:
                killed_for, cell_deadline_passed = Status.TIMEOUT, True
            elif (
                limits.memory_bytes
                and _case_tree_rss(process.pid, ours_before, but=workers.killed)
                > limits.memory_bytes
                and not workers.kill_the_largest()  # no worker to blame: the whole run
            ):
                killed_for = Status.OOM
            if killed_for is not None:
                _kill_group(process)
                break
    except BaseException:
        _kill_group(process)  # Ctrl-C: leave no stray training process behind
        raise
    process.wait()
    leftovers = _end_leftovers(process.pid, ours_before)
    ended.extend(leftovers)
    if leftovers:
        log_line = (
            f"[ftmatrix] ended {len(leftovers)} process(es) the cases left running: "
            + ", ".join(map(str, leftovers))
            + "\n"
        )
        tail.append(log_line)
        sys.stdout.write(log_line)
    pump.join(timeout=5)
    note = _read_note(current)
    left = workers.poll()  # a worker's death the controller noted just before it ended
    watcher.poll([])
    for note_path in [current, *worker_case_paths(record_file)]:
        note_path.unlink(missing_ok=True)
    return Attempt(
        returncode=process.returncode,
        killed_for=killed_for,
        running=tuple([note] if note else left),
        casualties=workers.casualties,
        output_tail="".join([*(line for line in fatal if line not in tail), *tail]),
        cell_deadline_passed=cell_deadline_passed,
        unwritten=tuple(unwritten),
    )


class _Workers:
    """The running-case notes of pytest-xdist workers, and what befalls their cases.

    A worker past the case time limit, or the largest when the run is past the
    memory limit, is killed with its process tree and no other: pytest-xdist
    replaces it and the other workers go on. A worker that dies by itself gets
    its exit status added to its note by the controller. Either way the case is
    handed to ``on_casualty`` once.
    """

    def __init__(
        self,
        record_file: Path,
        pgid: int,
        limits: CaseLimits,
        output: Callable[[], str],
        on_casualty: Casualty,
    ) -> None:
        self.record_file = record_file
        self.pgid = pgid
        self.limits = limits
        self.output = output
        self.on_casualty = on_casualty
        self.handled: set[tuple[str, str, float]] = set()
        self.killed: set[int] = set()
        self.casualties = 0

    def poll(self) -> list[dict[str, Any]]:
        """Conclude the cases of dead or overdue workers; return the notes still running."""
        running = []
        for note in self._notes():
            if "exit" in note:
                code = note["exit"]
                how = _describe_exit(int(code)) if code is not None else "exit status unknown"
                self._conclude(note, Status.CRASH, _crash_reason(how))
            elif time.time() - float(note["started"]) > self.limits.case_seconds:
                self.killed.update(_kill_tree(int(note["pid"]), self.pgid))
                self._conclude(note, Status.TIMEOUT, _case_timeout_reason(self.limits))
            else:
                running.append(note)
        return running

    def kill_the_largest(self) -> bool:
        """Kill the worker whose process tree holds the most memory; False if none runs a case."""
        notes = self._notes()
        if not notes:
            return False
        table = _process_table()
        note = max(notes, key=lambda n: _tree_rss(int(n["pid"]), table))
        self.killed.update(_kill_tree(int(note["pid"]), self.pgid))
        self._conclude(note, Status.OOM, _oom_reason(self.limits))
        return True

    def _notes(self) -> list[dict[str, Any]]:
        notes = []
        for path in worker_case_paths(self.record_file):
            note = _read_note(path)
            if note is not None and _note_key(note) not in self.handled:
                notes.append(note)
        return notes

    def _conclude(self, note: dict[str, Any], status: Status, reason: str) -> None:
        # The controller may still add the exit status to a note of a worker we
        # killed: remembering the note keeps the case from being concluded twice.
        self.handled.add(_note_key(note))
        self.casualties += 1
        self.on_casualty(note, status, reason, self.output())


def _note_key(note: Mapping[str, Any]) -> tuple[str, str, float]:
    return str(note.get("worker")), str(note["case"]), float(note["started"])


def _verdict(attempt: Attempt, limits: CaseLimits) -> tuple[Status, str]:
    if attempt.killed_for is Status.TIMEOUT:
        if attempt.cell_deadline_passed:
            return Status.TIMEOUT, f"the cell ran past its {limits.cell_seconds:g} s limit"
        return Status.TIMEOUT, _case_timeout_reason(limits)
    if attempt.killed_for is Status.OOM:
        return Status.OOM, _oom_reason(limits)
    return Status.CRASH, _crash_reason(_describe_exit(attempt.returncode))


# Each reason in one place: the single-process and the per-worker verdicts give the same.
def _case_timeout_reason(limits: CaseLimits) -> str:
    return f"the case ran past its {limits.case_seconds:g} s limit"


def _oom_reason(limits: CaseLimits) -> str:
    assert limits.memory_bytes is not None
    return f"the case's processes used more than {limits.memory_bytes / 2**30:.1f} GiB"


def _crash_reason(how: str) -> str:
    return f"the process died during the case: {how}"


def _describe_exit(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"signal {signal.Signals(-returncode).name}"
        except ValueError:
            return f"signal {-returncode}"
    return f"exit code {returncode}"


def _merge_tries(first: Record, second: Record) -> Record:
    """One record for a case tried twice: the worse outcome, flaky if they differ."""
    tries = [first, second]
    worst = max(tries, key=lambda r: r.status.severity)
    return replace(
        worst,
        flaky=first.status is not second.status,
        attempts=tuple(
            {"status": r.status.value, "reason": r.reason, "message": r.message} for r in tries
        ),
    )


def _record_cell_problem(
    attempt: Attempt, record_file: Path, make_record: RecordFactory, collected: bool
) -> None:
    """pytest ended with no case running and not normally: collection or usage failed."""
    if attempt.returncode in PYTEST_EXIT_CODES and collected:
        return
    status = Status.CRASH if attempt.returncode < 0 else Status.ERROR
    where = "after collecting" if collected else "before it had collected the cases"
    reason = f"pytest ended {where}: {_describe_exit(attempt.returncode)}"
    CellRecordFile(record_file).add(
        make_record(
            case="*", status=status, reason=reason, message=reason, traceback=attempt.output_tail
        )
    )


def _record_unrun(
    record_file: Path, collected: Path, make_record: RecordFactory, limits: CaseLimits
) -> None:
    file = CellRecordFile(record_file)
    done = {r.case for r in file.records}
    reason = f"not run: the cell ran past its {limits.cell_seconds:g} s limit first"
    for case in json.loads(collected.read_text()):
        if case not in done:
            file.add(make_record(case=case, status=Status.TIMEOUT, reason=reason, message=reason))


def _progress_made(record_file: Path, before: set[str]) -> bool:
    return bool(_recorded(record_file) - before)


def _recorded(record_file: Path) -> set[str]:
    return {r.case for r in CellRecordFile(record_file).records}


def _isolated_cases(record_file: Path) -> set[str]:
    """The cases the plugin left out to run each in a process of its own."""
    try:
        return set(json.loads(isolated_cases_path(record_file).read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return set()


class _RecordWatcher:
    """Turns the plugin's files into progress events: case started, case finished.

    Reads only what was appended to the records since its last look: a poll costs the new
    records, not the whole file (four polls a second over a cell of thousands of cases).
    """

    def __init__(self, record_file: Path, progress: Progress | None) -> None:
        self.record_file = record_file
        self.progress = progress
        self.seen = {r.case for r in CellRecordFile(record_file).records}
        self.running: set[str] = set()
        self.offset = 0

    def poll(self, notes: Sequence[Mapping[str, Any]]) -> None:
        """``notes``: the running-case notes now (one per pytest-xdist worker)."""
        if self.progress is None:
            return
        cases = {str(note["case"]) for note in notes}
        for case in sorted(cases - self.running):
            self.progress.case_started(case)
        self.running = cases
        for case, status in self._appended():
            if case not in self.seen:
                self.seen.add(case)
                self.progress.case_finished(case, status)

    def _appended(self) -> list[tuple[str, Status]]:
        """(case, status) of each whole line added since the last call."""
        try:
            with self.record_file.open("rb") as handle:
                if handle.seek(0, os.SEEK_END) < self.offset:
                    self.offset = 0  # rewritten shorter: read it again (seen filters)
                handle.seek(self.offset)
                chunk = handle.read()
        except OSError:
            return []
        whole = chunk[: chunk.rfind(b"\n") + 1]
        self.offset += len(whole)
        found = []
        for line in whole.splitlines():
            with contextlib.suppress(ValueError, TypeError, KeyError, AttributeError):
                data = json.loads(line)
                found.append((str(data["case"]), Status.parse(str(data["status"]))))
        return found


def _ended_within(process: subprocess.Popen[bytes], seconds: float) -> bool:
    """Wait up to ``seconds`` for ``process`` to end: the cell goes on the moment pytest
    ends, not at the next poll (a quarter of a second per pytest process)."""
    try:
        process.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        return False
    return True


def _pump(
    process: subprocess.Popen[bytes],
    tail: collections.deque[str],
    fatal: collections.deque[str],
    *,
    progress: Progress | None,
    env: Mapping[str, str],
    unwritten: list[Record],
) -> None:
    assert process.stdout is not None
    echoed = 0
    marker = UNWRITTEN_RECORD.encode()
    redactor = Redactor(env, remember=False)  # the environment scanned once, not per line
    # Read in bounded pieces: one line of 100 MB (a tensor printed whole) never sits in memory.
    for raw in iter(lambda: process.stdout.readline(LINE_BYTES), b""):  # type: ignore[union-attr]
        # A record the plugin could not write (a full disk) is kept, not shown.
        shown = _handed_record(raw, process.stdout, unwritten) if raw.startswith(marker) else raw
        # What a cell prints becomes the run's log, which CI publishes: secrets masked.
        line = redactor.text(shown.decode("utf-8", "replace"))
        tail.append(line)
        if "Fatal Python error" in line:
            fatal.append(line)
        echoed += len(raw)
        if echoed > ECHO_BYTES:
            if echoed - len(raw) <= ECHO_BYTES:
                line = (
                    f"\n[ftmatrix] this attempt printed more than {ECHO_BYTES // 2**20} MiB; "
                    "the rest is not echoed (the record keeps its failure's head and tail)\n"
                )
            else:
                continue
        if progress is not None:
            progress.output(line)
        else:
            sys.stdout.write(line)
            sys.stdout.flush()


def _handed_record(first: bytes, stream: IO[bytes], unwritten: list[Record]) -> bytes:
    """Read the record the plugin handed over on its output (it may span several pieces),
    keep it in ``unwritten``; what to show in its place."""
    line = first
    while not line.endswith(b"\n"):
        more = stream.readline(LINE_BYTES)
        if not more:
            break
        line += more
    try:
        record = Record.from_mapping(json.loads(line[len(UNWRITTEN_RECORD) :]))
    except (ValueError, TypeError):
        return b"[ftmatrix] a record handed over by the plugin could not be read\n"
    unwritten.append(record)
    return f"[ftmatrix] the record of {record.case} waits for disk space\n".encode()


def _read_note(path: Path) -> dict[str, Any] | None:
    try:
        note: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return note


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)


def _children_of(pid: int, table: Mapping[int, _Process]) -> set[int]:
    return {child for child, process in table.items() if process.ppid == pid}


def _case_processes(root: int, ours_before: Set[int], table: Mapping[int, _Process]) -> set[int]:
    """The pytest process ``root``, everything below it, and what left its tree: orphans
    the supervisor adopted as subreaper (children of ours that were not before)."""
    adopted = _children_of(os.getpid(), table) - ours_before - {root}
    return {p for top in (root, *adopted) for p in _tree(top, table) if p in table}


def _case_tree_rss(root: int, ours_before: Set[int], but: Set[int] = frozenset()) -> int:
    """Resident bytes of the case's whole process tree, new sessions and double forks
    included. ``but``: processes already killed, whose memory is on its way back."""
    table = _process_table()
    return sum(table[p].rss for p in _case_processes(root, ours_before, table) if p not in but)


@dataclass(frozen=True)
class Leftover:
    """A process the cases left running, ended by the supervisor."""

    pid: int
    name: str
    started: float  # seconds since the epoch
    case: str | None = None  # the case running when it started, from its environment

    def __str__(self) -> str:
        return f"{self.pid} ({self.name})"


def _end_leftovers(root: int, ours_before: Set[int]) -> list[Leftover]:
    """Kill what the cases left running once their pytest process ended.

    On a GPU runner such a process would hold GPU memory and the lease into the next cell.
    """
    table = _process_table()
    leftovers = sorted(_case_processes(root, ours_before, table) - {root})
    named = []
    for pid in leftovers:
        case = _running_case_of(pid)  # read while it lives: a dead process has no environ
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
            named.append(Leftover(pid, table[pid].name, table[pid].started, case))
    for pid in leftovers:  # adopted orphans are our children now: reap them
        for _ in range(100):
            try:
                if os.waitpid(pid, os.WNOHANG)[0]:
                    break
            except (ChildProcessError, OSError):
                break
            time.sleep(0.01)
    return named


def _running_case_of(pid: int) -> str | None:
    """The case running in the cases' pytest when ``pid`` (or the process it descends
    from) started: RUNNING_CASE_VARIABLE of its environment, if it kept it."""
    prefix = f"{RUNNING_CASE_VARIABLE}=".encode()
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return None
    for entry in environ.split(b"\0"):
        if entry.startswith(prefix):
            return entry[len(prefix) :].decode("utf-8", "replace")
    return None


def starter_of(leftover: Leftover, starts: Sequence[tuple[str, float]]) -> str | None:
    """The case that started ``leftover``: the one its environment names, else the last to
    start before it did.

    ``starts``: (case, start) in the order the cases started. With pytest-xdist workers
    several cases run at once, and the one started last is taken. A process older than
    every case (collection, a session fixture) has no starter.
    """
    if leftover.case is not None and any(case == leftover.case for case, _ in starts):
        return leftover.case
    starter = None
    for case, began in starts:
        if began <= leftover.started:
            starter = case
    return starter


def _note_leftovers(record_file: Path, leftovers: Sequence[Leftover], log: Log) -> None:
    """Put each leftover on the record of the case that started it (metric
    ``leftover_processes``) and say so; the case starts the plugin noted go with it."""
    starts_file = case_starts_path(record_file)
    starts = []
    with contextlib.suppress(OSError):
        for line in starts_file.read_text(encoding="utf-8").splitlines():
            with contextlib.suppress(ValueError, KeyError, TypeError):
                entry = json.loads(line)
                starts.append((str(entry["case"]), float(entry["started"])))
    starts_file.unlink(missing_ok=True)  # raw case ids: nothing of them stays
    by_case: dict[str | None, list[str]] = collections.defaultdict(list)
    for leftover in leftovers:
        by_case[starter_of(leftover, starts)].append(str(leftover))
    if not by_case:
        return
    cell = CellRecordFile(record_file)
    for record in cell.records:
        if record.case in by_case:
            shown = ", ".join(by_case[record.case])
            cell.add(replace(record, metrics={**record.metrics, "leftover_processes": shown}))
    for case, names in by_case.items():
        log(f"[ftmatrix] {case or 'before any case'} left running: {', '.join(names)} (ended)")


@dataclass(frozen=True)
class _Process:
    ppid: int
    pgid: int
    rss: int  # bytes
    name: str  # the command's name (/proc/PID/comm, as stat holds it)
    started: float  # seconds since the epoch


def _process_table() -> dict[int, _Process]:
    """Every process on the machine: its parent, group and resident bytes, from /proc."""
    table = {}
    page = os.sysconf("SC_PAGE_SIZE")
    ticks = os.sysconf("SC_CLK_TCK")
    booted = _boot_time()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            head, tail = (entry / "stat").read_text().rsplit(")", 1)
            fields = tail.split()
            # Fields 2, 4, 5, 22 and 24 of /proc/PID/stat: name, parent, process group,
            # start (clock ticks after boot) and resident pages.
            table[int(entry.name)] = _Process(
                ppid=int(fields[1]),
                pgid=int(fields[2]),
                rss=int(fields[21]) * page,
                name=head.split("(", 1)[-1],
                started=booted + int(fields[19]) / ticks,
            )
        except (OSError, IndexError, ValueError):
            continue
    return table


def _boot_time() -> float:
    """When the clock of /proc/PID/stat's start times began, seconds since the epoch.

    Now less the seconds since boot that /proc/uptime counts, the clock the start
    times count in (/proc/stat's ``btime`` is whole seconds, and a container's
    ``CLOCK_BOOTTIME`` may count from another origin).
    """
    with contextlib.suppress(OSError, ValueError, IndexError):
        return time.time() - float(Path("/proc/uptime").read_text().split()[0])
    return 0.0


def _tree(pid: int, table: Mapping[int, _Process]) -> list[int]:
    """``pid`` and every process below it."""
    children: dict[int, list[int]] = collections.defaultdict(list)
    for child, process in table.items():
        children[process.ppid].append(child)
    tree, queue = [], [pid]
    while queue:
        current = queue.pop()
        tree.append(current)
        queue.extend(children.get(current, ()))
    return tree


def _tree_rss(pid: int, table: Mapping[int, _Process]) -> int:
    return sum(table[p].rss for p in _tree(pid, table) if p in table)


def _kill_tree(pid: int, pgid: int) -> list[int]:
    """SIGKILL one pytest-xdist worker and what its case started, nothing else of the run.

    Only a worker of the run's own group: a pid recycled by another program is spared.
    Returns the processes killed.
    """
    table = _process_table()
    if pid not in table or table[pid].pgid != pgid:
        return []
    victims = _tree(pid, table)
    for victim in victims:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(victim, signal.SIGKILL)
    return victims
