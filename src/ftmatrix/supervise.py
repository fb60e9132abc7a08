"""Watch a cell's pytest from outside, so one bad case never costs another its record.

The results plugin notes the running case in a file beside the cell's records.
The supervisor polls it: a case past its time limit is killed and recorded as
``timeout``; a process tree past the memory limit is killed and the case
recorded as ``oom``; a process that dies mid-case gets that case recorded as
``crash`` and the case is tried once more alone, to tell a flake from a break.
Then pytest starts again with the cases that have no record yet. Isolated cases
(the plugin lists them and leaves them out) each run last in a pytest of their
own, whose plugin writes their record as it writes any other.

Which pass comes next is a pure choice (ftmatrix.passes); the records the supervisor
writes itself are ftmatrix.case_verdicts's; the process tree under pytest, read and
killed, is ftmatrix.process_tree's. This module starts each pass and watches it.
"""

from __future__ import annotations

import collections
import contextlib
import io
import itertools
import json
import os
import select
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from ftmatrix.case_ends import (
    CaseLimits,
    Casualty,
    Workers,
    case_timeout_reason,
    crash_reason,
    describe_exit,
    oom_reason,
)
from ftmatrix.case_verdicts import CaseVerdicts, Log, RecordFactory, case_list, left_over_notes
from ftmatrix.cell.file_writes import read_note
from ftmatrix.cell.files import CellFiles
from ftmatrix.cell.processes import become_subreaper, die_with_parent
from ftmatrix.cell.record import Record
from ftmatrix.cell.records import UNWRITTEN_RECORD, RecordScanner, restore_lost
from ftmatrix.cell.redact import Redactor
from ftmatrix.cell.status import Status
from ftmatrix.keeper import kept
from ftmatrix.passes import Cases, Ended, Pass, Passes, Then, after_pass, next_pass
from ftmatrix.process_tree import (
    Leftover,
    case_tree_rss,
    children_of,
    continue_if_stopped,
    end_leftovers,
    kill_group,
    process_table,
)
from ftmatrix.progress import Progress

POLL_SECONDS = 0.25
# What one attempt's output may add to the console (and a CI log): a passing case's
# captured 100 MB, printed with its failure, once went there whole.
ECHO_BYTES = 8 * 2**20
LINE_BYTES = 64 * 2**10
OUTPUT_TAIL_LINES = 60
# How long the output pump lets the cell's output gather after a read found less than
# LITTLE_BYTES (see _Gathering).
GATHER_SECONDS = 0.02
LITTLE_BYTES = 4096
# Tells the plugin that this pytest runs one case alone, where an isolated case may run.
ALONE_ARG = "--ftmatrix-alone"
# Tells the plugin to leave out the cases that have a record.
RESUME_ARG = "--ftmatrix-resume"


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
    The passes, in order, are ftmatrix.passes's choice; this runs them.
    """
    files = CellFiles(record_file)
    cell_deadline = time.monotonic() + limits.cell_seconds
    scanner = RecordScanner(record_file)
    watcher = _RecordWatcher(scanner, progress)
    verdicts = CaseVerdicts(
        files,
        make_record,
        env,
        log,
        watcher.concluded,
        resumed=files.collected.exists(),
        scanner=scanner,
    )
    if files.collected.exists():  # a resume: the case its run ended under, if twice
        verdicts.conclude_run_enders(left_over_notes(files))
    passes = Passes(sharing=bool(parallel))
    ended: list[Leftover] = []
    inputs = _inputs(command)
    while (ran := next_pass(passes, before := _cases_now(files, verdicts))) is not None:
        args = list(targets) if ran.cases is None else [str(cases_dir / c) for c in ran.cases]
        if ran.cases is None and before.recorded:  # a resume whose list of cases was lost
            args.append(RESUME_ARG)
        attempt = _attempt(
            [*command, *(parallel if ran.shared else ()), *([ALONE_ARG] if ran.alone else ())]
            + args,
            env=env,
            cwd=cwd,
            files=files,
            limits=limits,
            cell_deadline=cell_deadline,
            watcher=watcher,
            on_casualty=verdicts.conclude,
            ended=ended,
        )
        _put_back(inputs, watcher, log)  # before the lists are read for how the pass ended
        verdicts.settle(attempt.unwritten)
        passes, then = after_pass(passes, ran, _how_it_ended(attempt, files, verdicts, before))
        if not _carry_out(
            then, ran=ran, attempt=attempt, verdicts=verdicts, limits=limits, log=log
        ):
            break
    return verdicts.finish(ended, free_space)


# The files a cell's pytest reads at its start, named in its command (the cell's facts).
INPUT_OPTIONS = ("--ftmatrix-cell",)


def _inputs(command: Sequence[str]) -> dict[Path, bytes]:
    """The files ``command`` names after INPUT_OPTIONS, with what they hold now."""
    found = {}
    for option, value in itertools.pairwise(command):
        if option in INPUT_OPTIONS:
            with contextlib.suppress(OSError):
                found[Path(value)] = Path(value).read_bytes()
    return found


def _put_back(inputs: dict[Path, bytes], watcher: _RecordWatcher, log: Log) -> None:
    """After a pytest of the cell, before how it ended is read: write again an input a case
    removed (its records' folder with it: every later pytest would fail to start), and the
    records read that the file lost (their cases would run again)."""
    if watcher.collected is not None:  # the plugin's, kept here as it was first seen
        inputs.setdefault(watcher.collected_at, watcher.collected)
    for path, data in inputs.items():
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            log(f"[ftmatrix] {path.name} was removed under the run (by a case): written again")
    restored = restore_lost(watcher.scanner.path, watcher.scanner)
    if restored:
        log(
            f"[ftmatrix] the records file lost {restored} record(s) under the run (a case "
            "removed or replaced it): written again from what was read of it"
        )


def _cases_now(files: CellFiles, verdicts: CaseVerdicts) -> Cases:
    """What the cell's files say now. A case whose record waits for disk space ran: it is
    not run again."""
    return Cases(
        collected=case_list(files.collected),
        recorded=frozenset(verdicts.recorded() | {r.case for r in verdicts.waiting}),
        isolated=frozenset(_isolated_cases(files)),
        second_tries=verdicts.second_tries,
    )


def _how_it_ended(
    attempt: Attempt, files: CellFiles, verdicts: CaseVerdicts, before: Cases
) -> Ended:
    now = verdicts.recorded()
    return Ended(
        returncode=attempt.returncode,
        running=len(attempt.running),
        killed=attempt.killed_for is not None,
        casualties=attempt.casualties,
        deadline_passed=attempt.cell_deadline_passed,
        collected=files.collected.exists(),
        progressed=bool(now - before.recorded),
        isolated_left=bool(_isolated_cases(files) - now),
        second_tries=bool(verdicts.second_tries),
    )


def _carry_out(
    then: Then,
    *,
    ran: Pass,
    attempt: Attempt,
    verdicts: CaseVerdicts,
    limits: CaseLimits,
    log: Log,
) -> bool:
    """Record what ``then`` says of the pass that ended; False: no pass comes after it."""
    if then is Then.CONCLUDE_ALONE:
        assert ran.cases is not None
        verdicts.conclude_unrecorded(ran.cases[0], attempt.output_tail)
    elif then in (Then.CONCLUDE_RUNNING, Then.CONCLUDE_RUNNING_AND_STOP):
        status, reason = _verdict(attempt, limits)
        for note in attempt.running:
            verdicts.conclude(note, status, reason, attempt.output_tail)
        if then is Then.CONCLUDE_RUNNING_AND_STOP:
            verdicts.record_unrun(limits.cell_seconds)
    elif then is Then.RECORD_CELL_PROBLEM:
        where = (
            "after collecting"
            if verdicts.files.collected.exists()
            else "before it had collected the cases"
        )
        verdicts.record_cell_problem(
            f"pytest ended {where}: {describe_exit(attempt.returncode)}",
            attempt.output_tail,
            crashed=attempt.returncode < 0,
        )
    elif then is Then.NEXT and attempt.running:
        log("[ftmatrix] pytest died with several cases running; they run again alone")
    return then in (Then.NEXT, Then.CONCLUDE_ALONE, Then.CONCLUDE_RUNNING)


def _attempt(
    command: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: Path | None,
    files: CellFiles,
    limits: CaseLimits,
    cell_deadline: float,
    watcher: _RecordWatcher,
    on_casualty: Casualty,
    ended: list[Leftover],
) -> Attempt:
    """One pytest process over ``command``, watched to its end; what the cases left
    running is ended and added to ``ended``."""
    current = files.running_case()
    for note_path in [current, *files.workers_running_cases()]:
        note_path.unlink(missing_ok=True)
    become_subreaper()
    ours_before = children_of(os.getpid(), process_table())
    process = subprocess.Popen(
        kept(command),
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
    ending = _Ending(process)
    pump = threading.Thread(
        target=_pump,
        args=(process, tail, fatal, ending.ended),
        kwargs={"progress": watcher.progress, "env": env, "unwritten": unwritten},
        daemon=True,
    )
    pump.start()
    killed_for: Status | None = None
    cell_deadline_passed = False
    workers = Workers(files, process.pid, limits, lambda: _output(tail, fatal), on_casualty)
    seen: dict[str, Any] | None = None  # the last running-case note read
    try:
        while not ending.within(POLL_SECONDS):
            continue_if_stopped(process.pid)  # the keeper is ours: no case may stop it
            note = read_note(current)
            seen = note or seen
            running = workers.poll()
            watcher.poll([note] if note else running)
            if note and time.time() - float(note["started"]) > limits.case_seconds:
                killed_for = Status.TIMEOUT
            elif time.monotonic() > cell_deadline:
                killed_for, cell_deadline_passed = Status.TIMEOUT, True
            elif (
                limits.memory_bytes
                and case_tree_rss(process.pid, ours_before, but=workers.killed)
                > limits.memory_bytes
                and not workers.kill_the_largest()  # no worker to blame: the whole run
            ):
                killed_for = Status.OOM
            if killed_for is not None:
                kill_group(process)
                break
    except BaseException:
        kill_group(process)  # Ctrl-C: leave no stray training process behind
        raise
    finally:
        ending.close()
    process.wait()
    leftovers = end_leftovers(process.pid, ours_before, group_killed=killed_for is not None)
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
    note = read_note(current) or _removed_note(files, seen, watcher.scanner)
    left = workers.poll(final=True)  # a worker's death noted just before pytest ended
    watcher.poll([])
    for note_path in [current, *files.workers_running_cases()]:
        note_path.unlink(missing_ok=True)
    return Attempt(
        returncode=process.returncode,
        killed_for=killed_for,
        running=tuple([note] if note else left),
        casualties=workers.casualties,
        output_tail=_output(tail, fatal),
        cell_deadline_passed=cell_deadline_passed,
        unwritten=tuple(unwritten),
    )


def _verdict(attempt: Attempt, limits: CaseLimits) -> tuple[Status, str]:
    if attempt.killed_for is Status.TIMEOUT:
        if attempt.cell_deadline_passed:
            return Status.TIMEOUT, f"the cell ran past its {limits.cell_seconds:g} s limit"
        return Status.TIMEOUT, case_timeout_reason(limits)
    if attempt.killed_for is Status.OOM:
        return Status.OOM, oom_reason(limits)
    return Status.CRASH, crash_reason(describe_exit(attempt.returncode))


def _isolated_cases(files: CellFiles) -> set[str]:
    """The cases the plugin left out to run each in a process of its own."""
    return set(case_list(files.isolated) or ())


def _removed_note(
    files: CellFiles, seen: dict[str, Any] | None, scanner: RecordScanner
) -> dict[str, Any] | None:
    """The running-case note last read, where a case removed the cell's files (its
    records' folder: the note, the list of collected cases) and died, and the case it
    names has no record. None otherwise: a pytest that ended removes its note itself."""
    if seen is None or files.running_case().exists() or files.collected.exists():
        return None
    scanner.scan()
    return None if seen["case"] in scanner.ever_read() else seen


class _RecordWatcher:
    """Turns the plugin's files into progress events: case started, case finished.

    Reads the records through the verdicts' scanner: a poll costs the records added since
    the last look, each line read once for the progress and the verdicts alike (four polls
    a second over a cell of thousands of cases).
    """

    def __init__(self, scanner: RecordScanner, progress: Progress | None) -> None:
        self.scanner = scanner
        self.progress = progress
        self.seen = {r.case for r in scanner.scan().records}
        self.running: set[str] = set()
        # The plugin's list of the collected cases, as first seen: a case may remove it.
        self.collected_at = CellFiles(scanner.path).collected
        self.collected: bytes | None = None

    def concluded(self, case: str, status: Status) -> None:
        """``case`` got its record from the supervisor: reported now, not again when read."""
        self.seen.add(case)
        if self.progress:
            self.progress.case_finished(case, status)

    def poll(self, notes: Sequence[Mapping[str, Any]]) -> None:
        """``notes``: the running-case notes now (one per pytest-xdist worker)."""
        if self.collected is None:
            with contextlib.suppress(OSError):
                self.collected = self.collected_at.read_bytes()
        if self.progress is None:
            return
        cases = {str(note["case"]) for note in notes}
        for case in sorted(cases - self.running):
            self.progress.case_started(case)
        self.running = cases
        finished = []
        for record in self.scanner.new_records():
            if record.case not in self.seen:
                self.seen.add(record.case)
                finished.append((record.case, record.status))
        self.progress.cases_finished(finished)


class _Ending:
    """Waits for a process's end, woken the moment it ends: through a pidfd (Linux 5.3+),
    where Popen.wait's timeout polls with sleeps of up to 50 ms, which every pytest
    process of a cell waited out on average half of; Popen.wait's polling elsewhere."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self.process = process
        self.ended = threading.Event()  # set once it ended: its output read without pauses
        self.poll: select.poll | None = None
        self.fd = -1
        with contextlib.suppress(AttributeError, OSError):  # no pidfd here
            self.fd = os.pidfd_open(process.pid)
            self.poll = select.poll()
            self.poll.register(self.fd, select.POLLIN)

    def within(self, seconds: float) -> bool:
        """Wait up to ``seconds`` for the process to end: the cell goes on the moment
        pytest ends, not at the next poll (a quarter of a second per pytest process)."""
        if self.poll is not None and not self.poll.poll(seconds * 1000):
            return False  # (readable once the process has ended: the wait below is at once)
        try:
            self.process.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            return False
        return True

    def close(self) -> None:
        """The process ended (or is being ended): the pidfd closed, the pump told."""
        self.ended.set()
        if self.fd >= 0:
            os.close(self.fd)
            self.fd, self.poll = -1, None


def _output(tail: collections.deque[str], fatal: collections.deque[str]) -> str:
    """The attempt's output so far: its last lines, after the interpreter's word on a crash
    where the tail lost it. Copies first (one step each): the pump thread appends meanwhile,
    and a deque changed while it is iterated raises."""
    last, crashes = tail.copy(), fatal.copy()
    return "".join([*(line for line in crashes if line not in last), *last])


def _pump(
    process: subprocess.Popen[bytes],
    tail: collections.deque[str],
    fatal: collections.deque[str],
    ended: threading.Event,
    *,
    progress: Progress | None,
    env: Mapping[str, str],
    unwritten: list[Record],
) -> None:
    assert process.stdout is not None
    stream = io.BufferedReader(_Gathering(process.stdout.fileno(), ended), LINE_BYTES)
    echoed = 0
    marker = UNWRITTEN_RECORD.encode()
    redactor = Redactor(env, remember=False)  # the environment scanned once, not per line
    # Read in bounded pieces: one line of 100 MB (a tensor printed whole) never sits in memory.
    for raw in iter(lambda: stream.readline(LINE_BYTES), b""):
        # A record the plugin could not write (a full disk) is kept, not shown.
        shown = _handed_record(raw, stream, unwritten) if raw.startswith(marker) else raw
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


class _Gathering(io.RawIOBase):
    """The cell's output pipe, read in gulps: after a read that found little, the next
    waits a moment for more. pytest writes a progress dot per case, and reading each as it
    came (a wake-up, a read, a look for the line's end) cost the supervisor 40 us a case;
    the output is echoed up to GATHER_SECONDS later. A read that fills much of the buffer
    waits for nothing: a case that prints fast is never slowed."""

    def __init__(self, fd: int, ended: threading.Event) -> None:
        super().__init__()
        self.fd = fd
        self.ended = ended  # set when the process ended: no more to wait for
        self.little = False  # the last read found little

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self.little:
            self.ended.wait(GATHER_SECONDS)
        data = os.read(self.fd, len(buffer))
        self.little = 0 < len(data) < LITTLE_BYTES
        buffer[: len(data)] = data
        return len(data)


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
