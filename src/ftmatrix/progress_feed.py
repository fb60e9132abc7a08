"""Progress in any log: cells tell the nox process that started them how they go.

nox runs cells side by side each in a child nox whose output it buffers and prints as one
block when the child ends: a log (a file, a pipe, a CI job) saw nothing for minutes, then
every cell's whole pytest output at once. So each cell appends its events (cell started,
cases finished, what it is doing) as JSON lines to one feed file, named by
``FTMATRIX_PROGRESS_FEED``, and the nox process the user started tails it and prints a line
per finished case and per other event, a line every ``HEARTBEAT_SECONDS`` while nothing
happens, and a short summary at the end. The cells' pytest output goes to a log file per
cell, which those lines name.

The tally is pure (events in, lines out, the clock passed in); the writer and the tail are
the file's two ends.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from ftmatrix.cell.status import Status
from ftmatrix.console import masked, shown_case, shown_cases

FEED_ENV = "FTMATRIX_PROGRESS_FEED"
# "1" where the nox process that tails the feed prints its lines (its output is no
# terminal); on a terminal nox's own board previews each cell's latest line instead.
PRINTED_ENV = "FTMATRIX_PROGRESS_PRINTED"
# A line at least this often while cells install or a long case runs.
HEARTBEAT_SECONDS = 30.0
POLL_SECONDS = 0.5
# Failing cases the summary names one by one; the report has them all.
SUMMARY_FAILURES = 10
# Statuses a user reads as "broke": the frameworks', the process's, ours.
BROKEN = (
    Status.FAIL,
    Status.CRASH,
    Status.TIMEOUT,
    Status.OOM,
    Status.ERROR,
    Status.INSTALL_ERROR,
    Status.UNINSTALLABLE,
)
_BROKEN_VALUES = frozenset(s.value for s in BROKEN)  # what a feed event's status reads as
# The statuses' texts, in the order a line shows them: read as plain strings (an enum
# member's value is a property), as the line is made again for every case.
_FAIL = Status.FAIL.value
_OTHERS = tuple(s.value for s in Status if s is not Status.FAIL)


class FeedWriter:
    """A cell's end of the feed: one JSON line per event, appended (a line is one write,
    so the lines of cells side by side never interleave)."""

    def __init__(self, path: Path, *, printed: bool = True) -> None:
        self.path = path
        # Whether the feed's lines reach the console (else each cell prints its own).
        self.printed = printed

    def emit(self, kind: str, **fields: object) -> None:
        """The event as its line, in one write: whole lines only, so the lines of cells
        side by side never interleave."""
        text = json.dumps({"kind": kind, "pid": os.getpid(), **fields}) + "\n"
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        except OSError:
            return  # progress is a courtesy: a feed that cannot be written costs no verdict
        try:
            os.write(fd, text.encode("utf-8"))
        finally:
            os.close(fd)


@dataclass
class Tally:
    """What the feed said so far: cells done of ``total``, cases by status, the failures."""

    total: int
    started: float
    cells_done: int = 0
    # Each running cell's label -> what it does now (a case, or its last note).
    running: dict[str, str] = field(default_factory=dict)
    counts: Counter[str] = field(default_factory=Counter)
    failures: list[tuple[str, str, str]] = field(default_factory=list)
    logs: dict[str, str] = field(default_factory=dict)

    def apply(self, event: Mapping[str, Any], now: float, *, own_pid: int) -> str | None:
        """Take one event in (any but ``cases-finished``, which :meth:`lines` takes); the
        progress line it deserves, or None (a case starting is shown by the heartbeat, not
        a line of its own; this process's own notes were printed already by nox)."""
        kind, cell = str(event.get("kind")), str(event.get("cell", ""))
        if kind == "cell-started":
            self.running[cell] = "starting"
            if event.get("log"):
                self.logs[cell] = str(event["log"])
            return self.line(now, f"{cell}: started")
        if kind == "case-started":
            self.running[cell] = str(event.get("case", ""))
            return None
        if kind == "note":
            text = str(event.get("text", "")).removeprefix("[ftmatrix] ").strip()
            if cell in self.running and not text.startswith(f"{cell}:"):
                text = f"{cell}: {text}"
            if cell in self.running:
                self.running[cell] = text.removeprefix(f"{cell}: ")
            return None if event.get("pid") == own_pid else self.line(now, text)
        if kind == "cell-finished":
            self.running.pop(cell, None)
            self.cells_done += 1
            where = self.logs.get(cell)
            return self.line(
                now, f"{cell}: done" + (f"; pytest's output: {where}" if where else "")
            )
        return None

    def lines(self, event: Mapping[str, Any], now: float, *, own_pid: int) -> list[str]:
        """Take one event in; the progress lines it deserves: one a case of a
        ``cases-finished`` event (the cases a cell saw end since its last look), else what
        :meth:`apply` says."""
        if event.get("kind") != "cases-finished":
            line = self.apply(event, now, own_pid=own_pid)
            return [] if line is None else [line]
        cell, cases = str(event.get("cell", "")), event.get("cases")
        if not isinstance(cases, list):
            return []
        head, lines = self._head(now), []  # the same time and cells for the whole look
        for ended in cases:
            if not isinstance(ended, list) or len(ended) != 2:
                continue  # not a feed this version writes: left out, never a traceback
            case, status = str(ended[0]), str(ended[1])
            self.counts[status] += 1
            if status in _BROKEN_VALUES:
                self.failures.append((cell, case, status))
            lines.append(f"{head}{self.counts_text()} | {cell}: {case}: {status}")
        return lines

    def counts_text(self) -> str:
        cases = sum(self.counts.values())
        # Fails always shown, 0 included: the number a reader looks for first.
        counts = self.counts  # read with get: a Counter's missing key is a Python call
        shown = [f"{counts.get(_FAIL, 0)} fail"]
        shown += [f"{n} {s}" for s in _OTHERS if (n := counts.get(s))]
        return f"{cases} case{'s' if cases != 1 else ''}: " + ", ".join(shown)

    def line(self, now: float, what: str) -> str:
        """``[ftmatrix 01:05] cells 0/2 done, 2 running | 37 cases: 2 fail, 35 pass | what``"""
        return f"{self._head(now)}{self.counts_text()} | {what}"

    def _head(self, now: float) -> str:
        """``[ftmatrix 01:05] cells 0/2 done, 2 running | ``: a line's start."""
        total = max(self.total, self.cells_done + len(self.running))
        cells = f"cells {self.cells_done}/{total} done"
        if self.running:
            cells += f", {len(self.running)} running"
        return f"[ftmatrix {_clock(now - self.started)}] {cells} | "

    def heartbeat(self, now: float) -> str:
        doing = "; ".join(f"{cell}: {what}" for cell, what in sorted(self.running.items()))
        return self.line(now, doing or "waiting for the next cell")

    def summary(self, now: float) -> list[str]:
        """The run's end in a few lines: cells, cases by status, the failures, the logs."""
        total = max(self.total, self.cells_done + len(self.running))
        lines = [
            f"[ftmatrix] {self.cells_done}/{total} cells done in {_clock(now - self.started)}, "
            + self.counts_text()
        ]
        for cell, case, status in self.failures[:SUMMARY_FAILURES]:
            lines.append(f"[ftmatrix]   {status}: {cell}: {case}")
        if len(self.failures) > SUMMARY_FAILURES:
            lines.append(
                f"[ftmatrix]   and {len(self.failures) - SUMMARY_FAILURES} more (the report "
                "has them all)"
            )
        for cell, where in sorted(self.logs.items()):
            lines.append(f"[ftmatrix] pytest's output of {cell}: {where}")
        return lines


def _clock(seconds: float) -> str:
    whole = max(0, int(seconds))
    return f"{whole // 60:02d}:{whole % 60:02d}"


class FeedTail:
    """The nox process's end: reads the feed as cells append to it and writes the lines.

    ``lines``: print a line per event and the heartbeat (off on a terminal, where nox's
    own live board, or the cell's live line, shows the run); the summary is printed
    either way, when :meth:`stop` is called, if any cell ran, with ``report`` where it
    was written.
    """

    def __init__(
        self,
        path: Path,
        tally: Tally,
        stream: TextIO,
        *,
        lines: bool,
        report: Path | None = None,
        clock: Callable[[], float] = time.monotonic,
        heartbeat: float = HEARTBEAT_SECONDS,
    ) -> None:
        self.path, self.tally, self.stream, self.lines = path, tally, stream, lines
        self.report = report
        self.clock, self.heartbeat_seconds = clock, heartbeat
        self._offset = 0
        self._pending = b""
        self._seen = False
        self._last_line = clock()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="ftmatrix-progress", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(POLL_SECONDS):
            self.poll()

    def poll(self) -> None:
        """Read what the feed gained; write its lines (and a heartbeat when due)."""
        with self._lock:
            now = self.clock()
            lines = []
            for event in self._new_events():
                self._seen = True
                lines.extend(self.tally.lines(_shown(event), now, own_pid=os.getpid()))
            if (
                self._seen
                and self.tally.running
                and not lines
                and now - self._last_line >= self.heartbeat_seconds
            ):
                lines.append(self.tally.heartbeat(now))
            if lines:  # one write a look, not one a case
                self._write(lines, now)

    def stop(self) -> None:
        """Stop tailing, take in the last events, print the summary, remove the feed."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.poll()
        with self._lock:
            if self._seen:
                lines = self.tally.summary(self.clock())
                if self.report is not None and self.report.is_file():
                    lines.append(f"[ftmatrix] report: {self.report}")
                self._print(lines)
        self.path.unlink(missing_ok=True)

    def _write(self, lines: Sequence[str], now: float) -> None:
        self._last_line = now
        if self.lines:
            self._print(lines)

    def _print(self, lines: Sequence[str]) -> None:
        try:
            # (The events' texts were masked as they were read: _shown.)
            self.stream.write("".join(line + "\n" for line in lines))
            self.stream.flush()
        except (OSError, ValueError):
            # The reader went away (`| head`) or the stream is closed: the run goes on.
            self.lines = False

    def _new_events(self) -> list[dict[str, Any]]:
        try:
            with self.path.open("rb") as feed:
                feed.seek(self._offset)
                chunk = feed.read()
        except OSError:
            return []
        self._offset += len(chunk)
        data = self._pending + chunk
        complete, _, self._pending = data.rpartition(b"\n")
        events = []
        for raw in complete.splitlines():
            try:
                event = json.loads(raw)
            except ValueError:
                continue
            if isinstance(event, dict):
                events.append(event)
        return events


def _shown(event: dict[str, Any]) -> dict[str, Any]:
    """``event`` as the console may show it, whoever wrote the feed (an older ftmatrix, a
    cell whose own environment held no such secret): the console is a CI job's public log.
    Its texts masked, its case ids as a published record shows them (masked, no machine
    paths: pytest's ids hold a parametrize id's values). The lines are made of these and
    of the tail's own words, so each text is masked once, not each line it is printed in
    (a line's counts, "2 pass", cost the line masking's slow path: 40 us a case)."""
    for key in ("cell", "text", "log"):
        if isinstance(event.get(key), str):
            event[key] = masked(event[key])
    if isinstance(event.get("case"), str):
        event["case"] = shown_case(event["case"])
    cases = event.get("cases")
    if isinstance(cases, list):
        # What this version does not write is left out (Tally.lines skips it).
        kept = [e for e in cases if isinstance(e, list) and len(e) == 2 and isinstance(e[0], str)]
        shown = shown_cases(case for case, _ in kept)
        event["cases"] = [
            [case, _shown_status(status)] for case, (_, status) in zip(shown, kept, strict=True)
        ]
    return event


def _shown_status(status: object) -> str:
    text = str(status)
    return text if text in _STATUS_VALUES else masked(text)


_STATUS_VALUES = frozenset(s.value for s in Status)


# nox's selectors of sessions, among its arguments (before any "--").
_SESSION_FLAGS = ("-s", "-e", "--session", "--sessions")
_MATRIX_SESSION = re.compile(r"^matrix(?:-[0-9.]+)?\((?:cell=)?'?(?P<label>[^)']*)'?\)$")


def cells_chosen(labels: Sequence[str], argv: Sequence[str]) -> int:
    """How many of the matrix's cells nox's arguments select: ``-s "matrix(LABEL)"`` names
    some; ``-s matrix``, no ``-s`` (the default session) or a keyword/tag filter (counted
    as all: the lines say "of N" with N the cells that started, if more did) every one."""
    names: list[str] = []
    taking = False
    for arg in argv:
        if arg == "--":
            break
        if arg in _SESSION_FLAGS:
            taking = True
        elif arg.startswith(tuple(f"{flag}=" for flag in _SESSION_FLAGS if flag.startswith("--"))):
            names.append(arg.split("=", 1)[1])
            taking = True
        elif arg.startswith("-"):
            taking = False
        elif taking:
            names.append(arg)
    chosen = set()
    for name in names:
        if name == "matrix":
            return len(labels)
        match = _MATRIX_SESSION.match(name)
        if match:
            chosen.add(match["label"])
    return sum(label in chosen for label in labels) or len(labels)
