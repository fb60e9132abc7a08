"""The Linux process tree under a cell's pytest, read from /proc: what it holds, what it
left running, and killing part or all of it.

The supervisor (ftmatrix.supervise) sums the memory of a case's whole tree (new sessions
and double forks included: orphans it adopted as subreaper), kills one pytest-xdist
worker's tree and nothing else of the run, and ends what the cases left running once
their pytest ended, naming the case that started each.
"""

from __future__ import annotations

import collections
import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass
from pathlib import Path

from ftmatrix.cell.records import RUNNING_CASE_VARIABLE


@dataclass(frozen=True)
class ProcessStat:
    """One process as /proc/PID/stat shows it."""

    ppid: int
    pgid: int
    rss: int  # bytes
    name: str  # the command's name (/proc/PID/comm, as stat holds it)
    started: float  # seconds since the epoch
    dead: bool = False  # a zombie: it has exited, nobody has reaped it yet


def process_table() -> dict[int, ProcessStat]:
    """Every process on the machine: its parent, group and resident bytes, from /proc."""
    clock = _Clock.now()
    table = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            found = _read_stat(entry / "stat", clock)
            if found is not None:
                table[int(entry.name)] = found
    return table


def process_stat(pid: int) -> ProcessStat | None:
    """The process ``pid`` as /proc shows it now; None where there is none."""
    return _read_stat(Path(f"/proc/{pid}/stat"), _Clock.now())


@dataclass(frozen=True)
class _Clock:
    """What turns /proc/PID/stat's pages and clock ticks into bytes and epoch seconds."""

    page: int
    ticks: int
    booted: float

    @classmethod
    def now(cls) -> _Clock:
        return cls(os.sysconf("SC_PAGE_SIZE"), os.sysconf("SC_CLK_TCK"), _boot_time())


def _read_stat(path: Path, clock: _Clock) -> ProcessStat | None:
    try:
        head, tail = path.read_text().rsplit(")", 1)
        fields = tail.split()
        # Fields 2, 3, 4, 5, 22 and 24 of /proc/PID/stat: name, state, parent, process
        # group, start (clock ticks after boot) and resident pages.
        return ProcessStat(
            ppid=int(fields[1]),
            pgid=int(fields[2]),
            rss=int(fields[21]) * clock.page,
            name=head.split("(", 1)[-1],
            started=clock.booted + int(fields[19]) / clock.ticks,
            dead=fields[0] == "Z",
        )
    except (OSError, IndexError, ValueError):
        return None


def _boot_time() -> float:
    """When the clock of /proc/PID/stat's start times began, seconds since the epoch.

    Now less the seconds since boot that /proc/uptime counts, the clock the start
    times count in (/proc/stat's ``btime`` is whole seconds, and a container's
    ``CLOCK_BOOTTIME`` may count from another origin).
    """
    with contextlib.suppress(OSError, ValueError, IndexError):
        return time.time() - float(Path("/proc/uptime").read_text().split()[0])
    return 0.0


def tree(pid: int, table: Mapping[int, ProcessStat]) -> list[int]:
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


def children_of(pid: int, table: Mapping[int, ProcessStat]) -> set[int]:
    """The processes whose parent is ``pid``."""
    return {child for child, process in table.items() if process.ppid == pid}


def tree_rss(pid: int, table: Mapping[int, ProcessStat]) -> int:
    """Resident bytes of ``pid`` and every process below it."""
    return sum(table[p].rss for p in tree(pid, table) if p in table)


def case_processes(root: int, ours_before: Set[int], table: Mapping[int, ProcessStat]) -> set[int]:
    """The pytest process ``root``, everything below it, and what left its tree: orphans
    the supervisor adopted as subreaper (children of ours that were not before)."""
    adopted = children_of(os.getpid(), table) - ours_before - {root}
    return {p for top in (root, *adopted) for p in tree(top, table) if p in table}


def case_tree_rss(root: int, ours_before: Set[int], but: Set[int] = frozenset()) -> int:
    """Resident bytes of the case's whole process tree, new sessions and double forks
    included. ``but``: processes already killed, whose memory is on its way back."""
    table = process_table()
    return sum(table[p].rss for p in case_processes(root, ours_before, table) if p not in but)


def continue_if_stopped(pid: int) -> bool:
    """SIGCONT ``pid`` where it is stopped (a case sent SIGSTOP to its parent, the keeper:
    stopped, it would never reap pytest, and the cell would wait for it to its time limit).
    True where it was stopped."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    if state not in ("T", "t"):
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGCONT)
    return True


def kill_group(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL ``process``'s whole process group (the cases' pytest started one)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)


def kill_tree(pid: int, pgid: int) -> list[int]:
    """SIGKILL one pytest-xdist worker and what its case started, nothing else of the run.

    Only a worker of the run's own group: a pid recycled by another program is spared.
    Returns the processes killed.
    """
    table = process_table()
    if pid not in table or table[pid].pgid != pgid:
        return []
    victims = tree(pid, table)
    for victim in victims:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(victim, signal.SIGKILL)
    return victims


@dataclass(frozen=True)
class Leftover:
    """A process the cases left running, ended by the supervisor."""

    pid: int
    name: str
    started: float  # seconds since the epoch
    case: str | None = None  # the case running when it started, from its environment

    def __str__(self) -> str:
        return f"{self.pid} ({self.name})"


def end_leftovers(
    root: int, ours_before: Set[int], *, group_killed: bool = False
) -> list[Leftover]:
    """Kill what the cases left running once their pytest process ended.

    On a GPU runner such a process would hold GPU memory and the lease into the next cell.
    ``group_killed``: a timeout or an OOM killed ``root``'s process group; what was in it
    (pytest itself among them, exiting) is ended already, no leftover.
    """
    table = process_table()
    leftovers = sorted(case_processes(root, ours_before, table) - {root})
    named = []
    for pid in leftovers:
        if table[pid].dead or (group_killed and table[pid].pgid == root):
            continue
        case = running_case_of(pid)  # read while it lives: a dead process has no environ
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


def running_case_of(pid: int) -> str | None:
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
