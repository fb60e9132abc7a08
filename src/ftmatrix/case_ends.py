"""How a case that wrote no record of its own ended: the limits it ran under, the reason
each way of ending is given, and the running-case notes of pytest-xdist workers.

The supervisor (ftmatrix.supervise) watches a cell's pytest; with workers, several cases
run at once, each noted by its worker (ftmatrix.cell.plugin), and one worker's case may
die, hang or blow up while the others run on. ``Workers`` concludes each such case once.
"""

from __future__ import annotations

import math
import signal
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ftmatrix.cell.file_writes import read_note
from ftmatrix.cell.files import CellFiles
from ftmatrix.cell.status import Status
from ftmatrix.process_tree import kill_tree, process_stat, process_table, tree_rss

# pytest-xdist's controller notes a dead worker's exit status within the 5 s it waits for
# it (ftmatrix.cell.processes.worker_exit_status); a worker gone longer with none noted
# died unseen (after a case closed its channel): its case is a crash all the same.
UNNOTED_DEATH_SECONDS = 6.0


@dataclass(frozen=True, kw_only=True)
class CaseLimits:
    """What one case and one cell may use."""

    case_seconds: float
    cell_seconds: float
    memory_bytes: int | None


# Told of one case that ended without a record of its own: (note, status, reason, output).
Casualty = Callable[[Mapping[str, Any], Status, str, str], None]


class Workers:
    """The running-case notes of pytest-xdist workers, and what befalls their cases.

    A worker past the case time limit, or the largest when the run is past the
    memory limit, is killed with its process tree and no other: pytest-xdist
    replaces it and the other workers go on. A worker that dies by itself gets
    its exit status added to its note by the controller. Either way the case is
    handed to ``on_casualty`` once.
    """

    def __init__(
        self,
        files: CellFiles,
        pgid: int,
        limits: CaseLimits,
        output: Callable[[], str],
        on_casualty: Casualty,
    ) -> None:
        self.files = files
        self.pgid = pgid
        self.limits = limits
        self.output = output
        self.on_casualty = on_casualty
        self.handled: set[tuple[str, str, float]] = set()
        self.killed: set[int] = set()
        self.dying: set[tuple[str, str, float]] = set()  # found dead at the last look
        # When each worker was first found gone with no exit status in its note.
        self.gone_since: dict[tuple[str, str, float], float] = {}
        self.casualties = 0

    def poll(self, *, final: bool = False) -> list[dict[str, Any]]:
        """Conclude the cases of dead or overdue workers; return the notes still running.

        A worker's death is concluded a look after the one that found it (``final``: now,
        the output all read): what it printed as it died ("Fatal Python error: ...") may
        still be in the pipe the output pump gathers from."""
        running = []
        for note in self._notes():
            if "exit" in note and not final and _note_key(note) not in self.dying:
                self.dying.add(_note_key(note))  # concluded at the next look
            elif "exit" in note:
                code = note["exit"]
                how = describe_exit(int(code)) if code is not None else "exit status unknown"
                self._conclude(note, Status.CRASH, crash_reason(how))
            elif (gone := self._gone_for(note, final=final)) is not None:
                # Gone, so not a timeout, whatever its time: a crash once the controller
                # has had its time to note how it ended.
                if gone > UNNOTED_DEATH_SECONDS:
                    how = "its pytest-xdist worker ended, its exit status unknown"
                    self._conclude(note, Status.CRASH, crash_reason(how))
                else:
                    running.append(note)
            elif time.time() - float(note["started"]) > self.limits.case_seconds:
                self.killed.update(kill_tree(int(note["pid"]), self.pgid))
                self._conclude(note, Status.TIMEOUT, case_timeout_reason(self.limits))
            else:
                running.append(note)
        return running

    def _gone_for(self, note: Mapping[str, Any], *, final: bool) -> float | None:
        """Seconds since the worker running ``note``'s case was found gone, with no exit
        status noted; None while it runs (at the ``final`` look, pytest ended: a worker
        found gone at an earlier look is taken as gone long enough)."""
        key = _note_key(note)
        if final:
            return math.inf if key in self.gone_since else None
        worker = process_stat(int(note["pid"]))
        # A pid taken again after the worker ended is another process, started later.
        if worker is not None and not worker.dead and worker.started <= float(note["started"]) + 1:
            self.gone_since.pop(key, None)
            return None
        return time.monotonic() - self.gone_since.setdefault(key, time.monotonic())

    def kill_the_largest(self) -> bool:
        """Kill the worker whose process tree holds the most memory; False if none runs a case."""
        notes = self._notes()
        if not notes:
            return False
        table = process_table()
        note = max(notes, key=lambda n: tree_rss(int(n["pid"]), table))
        self.killed.update(kill_tree(int(note["pid"]), self.pgid))
        self._conclude(note, Status.OOM, oom_reason(self.limits))
        return True

    def _notes(self) -> list[dict[str, Any]]:
        notes = []
        for path in self.files.workers_running_cases():
            note = read_note(path)
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


# Each reason in one place: the single-process and the per-worker verdicts give the same.
def case_timeout_reason(limits: CaseLimits) -> str:
    return f"the case ran past its {limits.case_seconds:g} s limit"


def oom_reason(limits: CaseLimits) -> str:
    assert limits.memory_bytes is not None
    return f"the case's processes used more than {limits.memory_bytes / 2**30:.1f} GiB"


def crash_reason(how: str) -> str:
    return f"the process died during the case: {how}"


def describe_exit(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"signal {signal.Signals(-returncode).name}"
        except ValueError:
            return f"signal {-returncode}"
    return f"exit code {returncode}"
