"""How a run shares the machine: cells at once, torch threads per process, who reports,
and one report at a time in an output folder.

Cells run side by side as nox's own parallel sessions, ``limits.cells`` at a time
(``auto``: one per usable CPU, at most the cells selected). Each process of a cell
then gets an equal share of the CPUs for torch's threads (``OMP_NUM_THREADS``):
two cells on two cores, each with torch's default of every core, spend their time
switching between four busy threads instead of computing.

Under nox's parallel sessions no cell can queue the report after the others (each
runs in a child nox, which has no queue of its own): every cell holds a shared lock
on a file of its run while it runs, and the one that gets the lock exclusively when
it ends (no other cell of the run is running) builds the report.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from ftmatrix.config import Limits
from ftmatrix.path_kinds import REPORTING  # one report at a time writes an output folder

# The files of a run that its cells lock, beside the run's records: the cells running,
# and the one that resolves or installs now.
RUNNING = ".cells-running"
INSTALLING = ".installing"


def usable_cpus() -> int:
    """The CPUs this process may run on (a CI runner or container may pin it to a few)."""
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1)


def cells_at_once(limits: Limits, cells: int, cpus: int, *, gpus: bool = False) -> int:
    """How many of ``cells`` run side by side: ``limits.cells``, or for ``auto`` one per CPU,
    and one at a time where cells lease GPUs (``gpus``): there the lease decides who runs,
    and a waiting cell would only hold its share of the memory limit."""
    if limits.cells == "auto":
        wanted = 1 if gpus else cpus
    else:
        wanted = limits.cells
    return max(1, min(wanted, cells))


def torch_threads(processes: int, cpus: int) -> int | None:
    """Threads for torch in each of ``processes`` busy at once; None (torch's own choice,
    every core) when one process has the machine."""
    return None if processes <= 1 else max(1, cpus // processes)


@contextmanager
def one_install_at_a_time(run_folder: Path, on_wait: Callable[[], None]) -> Iterator[None]:
    """Resolve or install while no other cell of the run does (``on_wait`` first if one does).

    Cells side by side would otherwise fetch the same wheels from the index at once, each
    missing uv's cache (a cold first run of the two default cells downloaded pandas, numpy,
    pyarrow and bitsandbytes twice: 485 MB instead of about 220); one after another, the
    second finds the first's wheels in the cache, and a warm install takes a moment.
    """
    with _exclusive(run_folder / INSTALLING, on_wait):
        yield


@contextmanager
def one_report_at_a_time(out_dir: Path) -> Iterator[None]:
    """Merge, render and publish while no other report writes into ``out_dir``.

    Two runs into one folder (or the last cells of one, ending together) report at
    once; each builds the site beside it and swaps it in, and one removed the other's
    half-built site (FileNotFoundError, the report failed). One after another, the
    second merges what the first did not and renders everything.
    """
    with _exclusive(out_dir / REPORTING):
        yield


@contextmanager
def _exclusive(lock_file: Path, on_wait: Callable[[], None] | None = None) -> Iterator[None]:
    """Hold ``lock_file`` (flock, exclusive) for the block; ``on_wait`` first if another
    process holds it."""
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    with lock_file.open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if on_wait is not None:
                on_wait()
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextmanager
def cell_running(run_folder: Path) -> Iterator[RunEnd]:
    """Hold the run's running-cells lock (shared) while the cell runs; the yielded
    :class:`RunEnd` tells, once the cell is done, whether it ended the run."""
    run_folder.mkdir(parents=True, exist_ok=True)
    with (run_folder / RUNNING).open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_SH)
        end = RunEnd(handle)
        try:
            yield end
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class RunEnd:
    """The end of a cell: is it the last of the run still running?"""

    def __init__(self, handle: IO[str]) -> None:
        self._handle = handle

    def last(self) -> bool:
        """True, and the run's lock held exclusively until the cell lets it go, when no
        other cell of the run still runs. Cells that end together may each find the
        others gone and each build the report; the last build holds everything."""
        try:
            fcntl.flock(self._handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fcntl.flock(self._handle, fcntl.LOCK_UN)
            return False
        return True
