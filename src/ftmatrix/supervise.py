"""Watch a cell's pytest from outside, so one bad case never costs another its record.

The results plugin notes the running case in a file beside the cell's records.
The supervisor polls it: a case past its time limit is killed and recorded as
``timeout``; a process tree past the memory limit is killed and the case
recorded as ``oom``; a process that dies mid-case gets that case recorded as
``crash`` and the case is tried once more alone, to tell a flake from a break.
Then pytest starts again with the cases that have no record yet.
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ftmatrix.progress import Progress
from ftmatrix.records import (
    CellRecordFile,
    Record,
    collected_cases_path,
    current_case_path,
    redact,
)
from ftmatrix.status import Status

POLL_SECONDS = 0.25
PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>
_LIBC = ctypes.CDLL(None) if sys.platform.startswith("linux") else None
OUTPUT_TAIL_LINES = 60
# pytest's own exit codes: ok, tests failed, interrupted, internal error, usage, none collected.
PYTEST_EXIT_CODES = {0, 1, 2, 3, 4, 5}


@dataclass(frozen=True, kw_only=True)
class Limits:
    """What one case and one cell may use."""

    case_seconds: float
    cell_seconds: float
    memory_bytes: int | None


@dataclass(frozen=True, kw_only=True)
class Attempt:
    """How one pytest process ended."""

    returncode: int
    killed_for: Status | None  # TIMEOUT or OOM when we killed it, else None
    running_case: str | None  # the case that was running when it ended, if any
    running_operation: str | None
    running_since: float | None
    output_tail: str
    cell_deadline_passed: bool


Log = Callable[[str], None]
RecordFactory = Callable[..., Record]


def run_cases(
    command: Sequence[str],
    targets: Sequence[str],
    *,
    record_file: Path,
    cases_dir: Path,
    env: Mapping[str, str],
    limits: Limits,
    make_record: RecordFactory,
    log: Log,
    progress: Progress | None = None,
) -> list[Record]:
    """Run pytest (``command`` + case ``targets``) until every collected case has a record.

    ``make_record(case=, operation=, status=, reason=, message=, traceback=, ...)``
    builds a record for a case the plugin could not record itself.
    """
    collected = collected_cases_path(record_file)
    cell_deadline = time.monotonic() + limits.cell_seconds
    first_tries: dict[str, Record] = {}
    only: list[str] | None = None  # a crashed case's second try runs alone
    while True:
        done = {r.case for r in CellRecordFile(record_file).records}
        all_cases = json.loads(collected.read_text()) if collected.exists() else None
        if all_cases is not None:
            remaining = [c for c in all_cases if c not in done]
            if not remaining:
                break
            run_targets = only or remaining
            args = [str(cases_dir / case) for case in run_targets]
        else:
            args = list(targets)
        attempt = _attempt(
            [*command, *args],
            env=env,
            record_file=record_file,
            limits=limits,
            cell_deadline=cell_deadline,
            progress=progress,
        )
        only = None
        _settle_second_tries(record_file, first_tries)

        if attempt.running_case is None:
            if collected.exists() and attempt.returncode in (0, 1, 5):
                if not _progress_made(record_file, done):
                    break  # nothing new recorded: avoid looping on a case we cannot run
                continue
            _record_cell_problem(attempt, record_file, make_record, collected.exists())
            break

        case = attempt.running_case
        status, reason = _verdict(attempt, limits)
        record = make_record(
            case=case,
            operation=attempt.running_operation,
            status=status,
            reason=reason,
            message=reason,
            traceback=redact(attempt.output_tail, env),
            duration=time.time() - (attempt.running_since or time.time()),
        )
        if status is Status.CRASH and case not in first_tries:
            log(f"[ftmatrix] {case}: {reason}; trying it once more alone")
            first_tries[case] = record
            only = [case]
            continue
        if case in first_tries:
            record = _merge_tries(first_tries.pop(case), record)
        CellRecordFile(record_file).add(record)
        log(f"[ftmatrix] {case}: {status.value}: {reason}")
        if progress:
            progress.case_finished(case, status)
        if attempt.cell_deadline_passed:
            _record_unrun(record_file, collected, make_record, limits)
            break

    return CellRecordFile(record_file).records


def _settle_second_tries(record_file: Path, first_tries: dict[str, Record]) -> None:
    """Merge a crashed case's first try into the record its second try just wrote.

    Done at once, not at the end, so that a run killed later keeps the verdict.
    """
    file = CellRecordFile(record_file)
    for case in list(first_tries):
        second = next((r for r in file.records if r.case == case), None)
        if second is not None:
            file.add(_merge_tries(first_tries.pop(case), second))


def _attempt(
    command: Sequence[str],
    *,
    env: Mapping[str, str],
    record_file: Path,
    limits: Limits,
    cell_deadline: float,
    progress: Progress | None,
) -> Attempt:
    current = current_case_path(record_file)
    current.unlink(missing_ok=True)
    process = subprocess.Popen(
        list(command),
        env=dict(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group: kill takes every child with it
        # Safe here: the hook only calls prctl through a libc handle loaded beforehand.
        preexec_fn=_die_with_parent,  # noqa: PLW1509
    )
    tail: collections.deque[str] = collections.deque(maxlen=OUTPUT_TAIL_LINES)
    pump = threading.Thread(target=_pump, args=(process, tail, progress), daemon=True)
    pump.start()
    killed_for: Status | None = None
    cell_deadline_passed = False
    watcher = _RecordWatcher(record_file, progress)
    try:
        while process.poll() is None:
            time.sleep(POLL_SECONDS)
            note = _read_note(current)
            watcher.poll(note)
            if note and time.time() - float(note["started"]) > limits.case_seconds:
                killed_for = Status.TIMEOUT
            elif time.monotonic() > cell_deadline:
                killed_for, cell_deadline_passed = Status.TIMEOUT, True
            elif limits.memory_bytes and _group_rss(process.pid) > limits.memory_bytes:
                killed_for = Status.OOM
            if killed_for is not None:
                _kill_group(process)
                break
    except BaseException:
        _kill_group(process)  # Ctrl-C: leave no stray training process behind
        raise
    process.wait()
    pump.join(timeout=5)
    note = _read_note(current)
    watcher.poll(None)
    current.unlink(missing_ok=True)
    return Attempt(
        returncode=process.returncode,
        killed_for=killed_for,
        running_case=str(note["case"]) if note else None,
        running_operation=str(note.get("operation") or "") or None if note else None,
        running_since=float(note["started"]) if note else None,
        output_tail="".join(tail),
        cell_deadline_passed=cell_deadline_passed,
    )


def _verdict(attempt: Attempt, limits: Limits) -> tuple[Status, str]:
    if attempt.killed_for is Status.TIMEOUT:
        if attempt.cell_deadline_passed:
            return Status.TIMEOUT, f"the cell ran past its {limits.cell_seconds:g} s limit"
        return Status.TIMEOUT, f"the case ran past its {limits.case_seconds:g} s limit"
    if attempt.killed_for is Status.OOM:
        assert limits.memory_bytes is not None
        return Status.OOM, (
            f"the case's processes used more than {limits.memory_bytes / 2**30:.1f} GiB"
        )
    return Status.CRASH, f"the process died during the case: {_describe_exit(attempt.returncode)}"


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
    record_file: Path, collected: Path, make_record: RecordFactory, limits: Limits
) -> None:
    file = CellRecordFile(record_file)
    done = {r.case for r in file.records}
    reason = f"not run: the cell ran past its {limits.cell_seconds:g} s limit first"
    for case in json.loads(collected.read_text()):
        if case not in done:
            file.add(make_record(case=case, status=Status.TIMEOUT, reason=reason, message=reason))


def _progress_made(record_file: Path, before: set[str]) -> bool:
    return bool({r.case for r in CellRecordFile(record_file).records} - before)


class _RecordWatcher:
    """Turns the plugin's files into progress events: case started, case finished."""

    def __init__(self, record_file: Path, progress: Progress | None) -> None:
        self.record_file = record_file
        self.progress = progress
        self.seen = {r.case for r in CellRecordFile(record_file).records}
        self.running: str | None = None
        self.mtime = 0.0

    def poll(self, note: dict[str, Any] | None) -> None:
        if self.progress is None:
            return
        case = str(note["case"]) if note else None
        if case and case != self.running:
            self.progress.case_started(case)
        self.running = case
        try:
            mtime = self.record_file.stat().st_mtime
        except OSError:
            return
        if mtime == self.mtime:
            return
        self.mtime = mtime
        for record in CellRecordFile(self.record_file).records:
            if record.case not in self.seen:
                self.seen.add(record.case)
                self.progress.case_finished(record.case, record.status)


def _pump(
    process: subprocess.Popen[bytes], tail: collections.deque[str], progress: Progress | None
) -> None:
    assert process.stdout is not None
    for raw in iter(process.stdout.readline, b""):
        line = raw.decode("utf-8", "replace")
        tail.append(line)
        if progress is not None:
            progress.output(line)
        else:
            sys.stdout.write(line)
            sys.stdout.flush()


def _read_note(path: Path) -> dict[str, Any] | None:
    try:
        note: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return note


def _die_with_parent() -> None:
    """In the child: be killed when the supervisor dies (a lost runner, ``kill -9``).

    Otherwise an orphaned training run would go on writing records that a
    resumed run is also writing. Linux only; elsewhere the child outlives us.
    """
    if _LIBC is not None:
        _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)


def _group_rss(pgid: int) -> int:
    """Resident bytes of every process in the group (the case and what it spawned)."""
    total = 0
    page = os.sysconf("SC_PAGE_SIZE")
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) == pgid:  # field 5 of /proc/PID/stat: the process group
                total += int(fields[21]) * page  # field 24: resident pages
        except (OSError, IndexError, ValueError):
            continue
    return total
