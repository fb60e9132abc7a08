"""Progress of a run: one live line on a terminal, plain log lines anywhere else (CI logs).

The line reads: cells done/total (or, where cells run side by side, how many at once),
the current cell, how its cases share the CPUs (pytest-xdist workers, torch threads per
process) and every case running now, elapsed time, and the counts of statuses so far.
Output of the cases passes through above it on a terminal; in a log it goes to the cell's
own log file, and the lines that say how the run goes come from the nox process that
started the cells (``progress_feed``), which this tells of every cell and case.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TextIO

from ftmatrix.cell.status import Status
from ftmatrix.console import masked, shown_case, shown_cases
from ftmatrix.progress_feed import FeedWriter


class Progress:
    """Tracks a run's cells and cases and shows where it is."""

    def __init__(
        self,
        total_cells: int,
        stream: TextIO,
        *,
        live: bool,
        clock: Callable[[], float] = time.monotonic,
        feed: FeedWriter | None = None,
    ) -> None:
        self.total_cells = total_cells
        # Where the run's lines come from when a nox process tails the feed: then this
        # prints no per-case lines of its own into a log.
        self.feed = feed
        self._log_file: TextIO | None = None
        self._log_path: Path | None = None
        self.stream = stream
        self.live = live
        self.clock = clock
        self.started = clock()
        self.cells_done = 0
        self.cell: str | None = None
        # The running cases, by their ids, as a console line may show them.
        self.running: dict[str, str] = {}
        self.counts: Counter[Status] = Counter()
        self.cells_at_once = 1
        self.workers = 1
        self.threads: int | None = None
        self._drawn = False
        # The cases' output arrives on another thread than the supervisor's events.
        self._lock = threading.RLock()

    def sharing(self, *, cells_at_once: int, workers: int, threads: int | None) -> None:
        """How the run shares the machine: cells side by side (nox's parallel sessions, each
        in its own process: this line is one cell's), workers per cell, torch threads each."""
        with self._lock:
            self.cells_at_once, self.workers, self.threads = cells_at_once, workers, threads

    def log_to(self, path: Path) -> None:
        """Write the next cell's whole output (pytest's, and the run's notes) to ``path``,
        appended: a resumed cell keeps what its first run wrote."""
        with self._lock:
            self._close_log()
            self._log_path = path
            try:
                self._log_file = _opened(path)
            except OSError as exc:
                self._log_failed(exc)

    @property
    def log_path(self) -> Path | None:
        """The file the current (or last) cell's output went to, if any."""
        return self._log_path

    def cell_started(self, label: str) -> None:
        with self._lock:
            self.cell = label
            self.running.clear()
            self._emit("cell-started", log=str(self._log_path or ""))
            self._show()

    def case_started(self, case: str) -> None:
        shown = shown_case(case)  # raw from the plugin's note: it reaches the console
        with self._lock:
            self.running[case] = shown
            self._emit("case-started", case=shown)
            self._show()

    def case_finished(self, case: str, status: Status) -> None:
        self.cases_finished([(case, status)])

    def cases_finished(self, finished: Sequence[tuple[str, Status]]) -> None:
        """Cases that ended since the last look, in order: one event for them all, and a
        log line each (a poll finds dozens of quick cases at once)."""
        if not finished:
            return
        with self._lock:
            for case, status in finished:
                self.counts[status] += 1
                self.running.pop(case, None)
            # The feed's reader shows each id as a console may (FeedTail): the records'
            # ids, masked as they were written, go as they are.
            ended = [(case, status.value) for case, status in finished]
            lines = []
            if not self.live and (self.feed is None or not self.feed.printed):
                shown = shown_cases(case for case, _ in finished)
                lines = [
                    self._log_line(f"{case}: {value}")
                    for case, (_, value) in zip(shown, ended, strict=True)
                ]
            # One event for them all: an event a case was most of the progress's cost.
            self._emit("cases-finished", cases=ended)
            if self.live:
                self._show()
            elif lines:
                self.stream.write("".join(lines))
                self.stream.flush()

    def cell_finished(self) -> None:
        with self._lock:
            self.cells_done += 1
            self.running.clear()
            self._emit("cell-finished")
            self._close_log()
            if not self.live and (self.feed is None or not self.feed.printed):
                self._log("cell done")
            self._show()

    def note(self, text: str) -> None:
        """A line of the run about the current cell (resolving, installing, ...): into the
        cell's log file and the feed (nox prints it on the console itself)."""
        text = masked(text)
        with self._lock:
            self._write_log(text + "\n")
            self._emit("note", text=text)

    def output(self, line: str) -> None:
        """A line of the cases' output: into the cell's log file; on a terminal (or with
        no log file) passed through too, keeping the live line below it."""
        with self._lock:
            line = line if line.endswith("\n") else line + "\n"
            if self._write_log(line) and not self.live:
                return
            self._clear()
            self.stream.write(line)
            self._show()

    def _emit(self, kind: str, **fields: object) -> None:
        if self.feed is not None and self.cell is not None:
            self.feed.emit(kind, cell=self.cell, **fields)

    def _write_log(self, text: str) -> bool:
        """``text`` into the cell's log file; False where there is none (any more)."""
        if self._log_file is None:
            return False
        try:
            self._log_file.write(text)
            self._log_file.flush()
        except OSError as exc:  # a full disk: the records matter, the log goes to the console
            self._log_failed(exc)
            return False
        return True

    def _log_failed(self, exc: OSError) -> None:
        self._close_log()
        self.stream.write(
            f"[ftmatrix] the cell's log {self._log_path} cannot be written ({exc.strerror}): "
            "its output goes here\n"
        )

    def _close_log(self) -> None:
        if self._log_file is not None:
            log, self._log_file = self._log_file, None
            # What it still held could not be written: said when it failed.
            with contextlib.suppress(OSError):
                if self._log_path is not None and _removed(log):
                    _write_again(log, self._log_path)
                log.close()

    def status_line(self) -> str:
        elapsed = int(self.clock() - self.started)
        if self.cells_at_once > 1:
            # One cell's process among several: nox names the cell beside this line.
            cells = f"{self.total_cells} cells, {self.cells_at_once} at once"
            where = ""
        else:
            cells = f"{self.cells_done}/{self.total_cells} cells"
            where = self.cell or "-"
        sharing = [f"{self.workers} workers"] if self.workers > 1 else []
        if self.threads is not None:
            sharing.append(f"{self.threads} torch thread{'s' if self.threads != 1 else ''} each")
        if sharing:
            cells += ", " + ", ".join(sharing)
        if self.running:
            where = " ".join(filter(None, [where, ", ".join(sorted(self.running.values()))]))
        counts = " ".join(f"{self.counts[s]} {s.value}" for s in Status if self.counts[s])
        return " ".join(
            filter(None, [f"[{cells}]", where, f"{elapsed // 60:02d}:{elapsed % 60:02d}"])
        ) + (f" | {counts}" if counts else "")

    def close(self) -> None:
        with self._lock:
            self._close_log()
            if self.live and self._drawn:
                self.stream.write("\n")
                self.stream.flush()
                self._drawn = False

    def _show(self) -> None:
        if not self.live:
            return
        self._clear()
        self.stream.write(self.status_line())
        self.stream.flush()
        self._drawn = True

    def _clear(self) -> None:
        if self.live and self._drawn:
            self.stream.write("\r\x1b[2K")
            self._drawn = False

    def _log(self, event: str) -> None:
        self.stream.write(self._log_line(event))
        self.stream.flush()

    def _log_line(self, event: str) -> str:
        return f"[ftmatrix] {self.status_line()} | {event}\n"


def _opened(path: Path) -> TextIO:
    """The log at ``path``, for appending and reading back (:func:`_write_again`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    return path.open("a+", encoding="utf-8")


def _removed(log: TextIO) -> bool:
    """Is ``log`` no longer in its folder (a case removed the records folder it is in)?"""
    return os.fstat(log.fileno()).st_nlink == 0


def _write_again(log: TextIO, path: Path) -> None:
    """``log``, removed under the run, made again at ``path`` with all it holds (a removed
    file lives on while it is open, and took every line since): the cell's output before
    and after the case that removed it is kept, as its records are (``LineAppender``).
    Once the cell is over, never while a case may still be removing the folder."""
    log.flush()
    held = os.pread(log.fileno(), os.fstat(log.fileno()).st_size, 0)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(held)
