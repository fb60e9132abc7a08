"""A cell's records files: a line appended per record, read as they grow, compacted.

One JSONL file per cell, a line appended whole after every case (compaction rewrites it
through a temporary file and a rename: :mod:`ftmatrix.cell.file_writes`), so a run killed at
any moment leaves each file as it was before the last case or as it is after it.

This module runs inside each cell's environment (the results plugin uses it), so
it imports the standard library only.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import stat
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ftmatrix.cell.file_writes import (
    append_line,
    locked_folder,
    sync_file,
    write_atomically,
)
from ftmatrix.cell.files import QUARANTINE, RECORDS_SUFFIX, CellFiles
from ftmatrix.cell.record import FIELDS, Record
from ftmatrix.cell.record_json import LINE_ERRORS, parse_line
from ftmatrix.cell.redact import Redactor, current_redactor, redact_text
from ftmatrix.cell.status import Status


class CellRecordFile:
    """The JSONL file of one cell in one run: one line appended per record.

    Adding a record appends its line under an exclusive lock (a cell whose cases run in
    several processes, after a crash, on resume, or in pytest-xdist workers at the same
    time, adds to one file) and costs that line only, whatever the file holds already. A
    case recorded again (a second try, a note added) gets a later line; the last line of a
    case is its record. A line that cannot be read (torn by a full disk or a lost machine,
    damaged by hand), or that is another run's or cell's record (copied, renamed or
    concatenated in, written by a case), is never rewritten away nor taken for this cell's:
    readers report it, and a resumed run moves it to the cell's quarantine file
    (:func:`compact_records`) and runs the case again.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._records: dict[str, Record] | None = None  # read on first use

    @property
    def records(self) -> list[Record]:
        """The record of each case, in the order they were last written."""
        if self._records is None:
            self._records = {r.case: r for r in scan_records(self.path).records}
        return list(self._records.values())

    @records.setter
    def records(self, records: Iterable[Record]) -> None:
        self._records = {r.case: r for r in records}

    def add(self, record: Record) -> None:
        """Append ``record``; it replaces an earlier record of the same case."""
        line = _line(record).encode("utf-8")
        with locked_folder(self.path):
            append_line(self.path, line)
        if self._records is not None:
            self._records.pop(record.case, None)
            self._records[record.case] = record

    def save(self) -> int:
        """Replace the file by ``records``, one line each. Each line it held before that is
        not one of them (an earlier pass's records, on resume, of a cell that now ends as a
        whole: an install that fails, another machine) is appended to the cell's set-aside
        file, never dropped unsaid: how many lines."""
        text = "".join(_line(r) for r in self.records)
        with locked_folder(self.path):
            try:
                held = self.path.read_bytes()
            except FileNotFoundError:
                held = b""
            kept = set(text.encode("utf-8").splitlines())
            moved = [line for line in held.splitlines() if line.strip() and line not in kept]
            if moved:
                aside = CellFiles(self.path).set_aside
                append_line(aside, b"".join(line + b"\n" for line in moved))
            write_atomically(self.path, text)
        return len(moved)


@dataclass(frozen=True, kw_only=True)
class Scan:
    """What one record file holds: each case's record, and the lines that cannot be read."""

    records: tuple[Record, ...]
    problems: tuple[str, ...]  # "<file>:<line>: skipped: <why>", one per damaged line
    damaged: tuple[bytes, ...]  # those lines' bytes, as found
    foreign: int = 0  # of them, whole records of another run or cell (:func:`foreign_to`)
    lines: tuple[bytes, ...] = ()  # each record's line, as written (redacted then)
    superseded: int = 0  # lines of a case that a later line recorded again
    restored: int = 0  # records the file lost under the run (a case deleted it), written again

    def kept_apart(self) -> str:
        """What ``damaged`` holds, in words: '2 unreadable record line(s)', '1 record
        line(s) of another run or cell', or both."""
        return lines_kept_apart(len(self.damaged) - self.foreign, self.foreign)


def lines_kept_apart(unreadable: int, foreign: int) -> str:
    """'2 unreadable record line(s) and 1 record line(s) of another run or cell' (either
    part alone where the other is 0)."""
    parts = [f"{unreadable} unreadable record line(s)"] if unreadable or not foreign else []
    parts += [f"{foreign} record line(s) of another run or cell"] if foreign else []
    return " and ".join(parts)


def scan_records(path: Path) -> Scan:
    """Read ``path`` line by line: the last record of each case, and every line that is
    not a whole record of the file's cell (not UTF-8, not JSON, not an object, not a
    record, another run's or cell's record, or the torn end of a write that never
    finished), with its number and why."""
    return RecordScanner(path).scan()


def foreign_to(files: CellFiles, record: Record) -> str | None:
    """Why ``record`` cannot be one of the records ``files`` names, or None where it can.

    A cell's records file in a run (``records/<run-id>/<cell-id>.jsonl``) holds that run's
    records of that cell only: every flow that writes one writes them so (the plugin, the
    supervisor's verdicts, the records reuse carries into a run, with tonight's run id). A
    line of another run or cell was put there by hand or by a case: it is no verdict of
    this cell's, and taken for one it would stand for a case never run (a resume would skip
    it) or count in another run's or cell's results. A file elsewhere names no run: None.
    """
    if not files.in_a_run:
        return None
    wrong = [
        f"{field} {_shown(value)}, not this file's {_shown(expected)}"
        for field, value, expected in (
            ("run_id", record.run_id, files.run_id),
            ("cell_id", record.cell_id, files.cell_id),
        )
        if value != expected
    ]
    return f"a record of another run or cell ({'; '.join(wrong)})" if wrong else None


def quarantined_lines(quarantine: Path) -> tuple[int, int]:
    """What a cell's quarantine file (:attr:`CellFiles.quarantine`) keeps: how many lines
    could not be read, and how many are whole records of another run or cell (OSError
    where it cannot be read)."""
    files = CellFiles(quarantine.with_name(quarantine.name.removesuffix(QUARANTINE)))
    unreadable = foreign = 0
    for raw in quarantine.read_bytes().split(b"\n"):
        if not raw.strip():
            continue
        try:
            value = parse_line(raw)
            record = Record.from_mapping(value) if isinstance(value, dict) else None
        except LINE_ERRORS:
            record = None
        if record is not None and foreign_to(files, record) is not None:
            foreign += 1
        else:
            unreadable += 1
    return unreadable, foreign


def _shown(value: str) -> str:
    """``value`` quoted on one line, at most 80 characters of it."""
    return repr(value if len(value) <= 80 else value[:80] + "...")


@dataclass(frozen=True)
class _Look:
    """One read of the lines added to a record file: the torn end after its last newline
    (a write not finished, or not yet), or why nothing could be read."""

    torn: bytes = b""
    gone: bool = False  # no file there (yet)
    problem: str | None = None  # it cannot be read: a folder, a pipe, no permission


class RecordScanner:
    """:func:`scan_records` of one file as it grows: each scan reads only the lines added
    since the last one, so a supervisor that asks after every pass (which cases have a
    record?) and compacts the file at the end reads each record once, not three times.

    Records files are only appended to, or replaced whole (compaction, a resumed run):
    a file that is another one now (its inode) or shorter is read again from its start.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        # Records read and not yet taken by :meth:`new_records` (None: nobody takes them).
        self._unclaimed: list[Record] | None = None
        # Whose records the file holds, by its place (None: a file no run names), checked
        # at the cost of one comparison a line.
        self._files = CellFiles(path)
        self._own = (self._files.run_id, self._files.cell_id) if self._files.in_a_run else None
        # Each case's last line ever read, kept across a file deleted or replaced under the
        # run (a case that removed the records folder): what it lost is written again.
        self._ever: dict[str, bytes] = {}
        self._start(None)

    def _start(self, identity: tuple[int, int] | None) -> None:
        self._identity = identity
        self._offset = 0  # bytes read, up to the end of the last whole line
        self._lines = 0  # lines read
        self._latest: dict[str, tuple[Record, bytes]] = {}
        self._superseded = 0
        self._problems: list[str] = []
        self._damaged: list[bytes] = []
        self._foreign = 0

    def new_records(self) -> list[Record]:
        """The records read since the last call, by this look or any scan between (the
        supervisor's progress: each line is read once, for it and for the verdicts)."""
        if self._unclaimed is None:
            self._unclaimed = list(self._latest_records())
        self._read_more()
        taken, self._unclaimed = self._unclaimed, []
        return taken

    def ever_read(self) -> set[str]:
        """Every case a record was read of, in this file or one it replaced."""
        return set(self._ever)

    def lost(self) -> list[bytes]:
        """The lines of the cases read before whose record the file holds no more (at the
        last scan): a file deleted or replaced under the run."""
        return [raw for case, raw in self._ever.items() if case not in self._latest]

    def _latest_records(self) -> list[Record]:
        return [record for record, _ in self._latest.values()]

    def scan(self) -> Scan:
        """The file as it is now: each case's last record, and its unreadable lines."""
        look = self._read_more()
        if look.gone:
            return Scan(records=(), problems=(), damaged=())
        if look.problem is not None:
            return Scan(records=(), problems=(look.problem,), damaged=())
        problems, damaged = list(self._problems), list(self._damaged)
        if look.torn.strip():  # no newline after it: a write that never finished (or not yet)
            why = "a torn line (the file ends in the middle of it)"
            problems.append(f"{self.path}:{self._lines + 1}: skipped: {why}")
            damaged.append(look.torn)
        return Scan(
            records=tuple(self._latest_records()),
            problems=tuple(problems),
            damaged=tuple(damaged),
            lines=tuple(line for _, line in self._latest.values()),
            superseded=self._superseded,
            foreign=self._foreign,
        )

    def _read_more(self) -> _Look:
        """Read the lines added since the last look."""
        try:
            # Non-blocking: a pipe in the file's place would hold its reader for ever.
            with os.fdopen(os.open(self.path, os.O_RDONLY | os.O_NONBLOCK), "rb") as handle:
                status = os.fstat(handle.fileno())
                if not stat.S_ISREG(status.st_mode):
                    raise OSError("not a file (a folder or a pipe)")
                identity = (status.st_dev, status.st_ino)
                if identity != self._identity or status.st_size < self._offset:
                    self._start(identity)
                handle.seek(self._offset)
                data = handle.read()
        except FileNotFoundError:
            self._start(None)
            return _Look(gone=True)
        except OSError as exc:  # a folder, a file no one may read: nothing of it is a record
            self._start(None)
            return _Look(problem=f"{self.path}: skipped: cannot be read: {exc.strerror or exc}")
        end = data.rfind(b"\n") + 1
        for raw in data[:end].split(b"\n")[:-1]:
            self._read_line(raw)
        self._offset += end
        return _Look(torn=data[end:])

    def _read_line(self, raw: bytes) -> None:
        self._lines += 1
        if not raw.strip():
            return
        try:
            value = parse_line(raw)
            if not isinstance(value, dict):
                raise ValueError(f"a JSON {type(value).__name__}, not a record object")
            record = Record.from_mapping(value)
        except LINE_ERRORS as exc:  # UnicodeDecodeError is a ValueError
            self._problems.append(f"{self.path}:{self._lines}: skipped: {exc}")
            self._damaged.append(raw)
            return
        if self._own is not None and (record.run_id, record.cell_id) != self._own:
            # Kept apart as a damaged line is: never this cell's verdict.
            foreign = foreign_to(self._files, record)
            self._problems.append(f"{self.path}:{self._lines}: skipped: {foreign}")
            self._damaged.append(raw)
            self._foreign += 1
            return
        self._superseded += self._latest.pop(record.case, None) is not None
        self._latest[record.case] = (record, raw)
        self._ever[record.case] = raw
        if self._unclaimed is not None:
            self._unclaimed.append(record)


def compact_records(record_file: Path, scanner: RecordScanner | None = None) -> Scan:
    """Rewrite ``record_file`` with one line per case, its last record, and move its
    unreadable lines to its quarantine file (appended, bytes as found); what it read (the
    records kept, the lines moved). Once per cell (its cases done, or on resume), so
    readers of the file see one record a case. The cases a moved line held have no record
    now: a resumed run runs them again. ``scanner``: one that has read the file so far
    (the supervisor's), which reads only the rest."""
    record_file.parent.mkdir(parents=True, exist_ok=True)  # (a case may have removed it)
    with locked_folder(record_file):
        scanner = scanner or RecordScanner(record_file)
        restored = _restore_lost(record_file, scanner)
        scan = dataclasses.replace(scanner.scan(), restored=restored)
        if scan.damaged:
            with CellFiles(record_file).quarantine.open("ab") as kept:
                kept.write(b"".join(line + b"\n" for line in scan.damaged))
                kept.flush()
                os.fsync(kept.fileno())
        if scan.damaged or scan.superseded:
            # The lines kept as written: they were redacted then, and need no second pass.
            text = b"".join(line + b"\n" for line in scan.lines).decode("utf-8")
            write_atomically(record_file, text)
        else:
            sync_file(record_file)
    return scan


def restore_lost(record_file: Path, scanner: RecordScanner) -> int:
    """Write again the records ``scanner`` read that ``record_file`` lost (a case removed
    or replaced it under the run), before the next pytest decides which cases have run:
    how many. A case must not erase the others' records, nor have them run again."""
    record_file.parent.mkdir(parents=True, exist_ok=True)
    with locked_folder(record_file):
        return _restore_lost(record_file, scanner)


def _restore_lost(record_file: Path, scanner: RecordScanner) -> int:
    scanner.scan()
    lost = scanner.lost()
    if lost:  # written again as they were read (masked then)
        append_line(record_file, b"".join(line + b"\n" for line in lost))
    return len(lost)


def operation_from_path(nodeid: str) -> str:
    """``test_sft.py::test_x`` -> ``sft``: the operation of a case without a marker."""
    return _operation_of_file(nodeid.split("::", 1)[0])


@functools.lru_cache(maxsize=1024)
def _operation_of_file(file: str) -> str:
    stem = Path(file).stem
    return stem.removeprefix("test_") or stem


# Set by the supervisor's keeper (ftmatrix.keeper) for the cases' pytest: the
# keeper's pid, the parent a case might end.
KEEPER_VARIABLE = "FTMATRIX_KEEPER"

# Set in the cases' pytest process to the running case's id while it runs: every process a
# case starts inherits it, so the supervisor can tell exactly which case started a process
# it had to end (start times alone are 10 ms coarse, and the next case starts sooner).
RUNNING_CASE_VARIABLE = "FTMATRIX_RUNNING_CASE"


@dataclass(frozen=True, kw_only=True)
class ReadResult:
    """Records found under a directory, and the lines that could not be read, with why."""

    records: tuple[Record, ...]
    problems: tuple[str, ...]


def read_records(root: Path, *, runs: bool = False) -> ReadResult:
    """Every record in ``root`` (a file, or ``*.jsonl`` below a folder): each file's last
    record of each case; the lines that cannot be read are reported, never raised.

    ``runs``: ``root`` is a reports folder's ``records/``, where a run keeps each cell's
    records at ``<run-id>/<cell-id>.jsonl``: a ``*.jsonl`` anywhere else there (beside the
    runs, in a folder within a run's) names no run and cell its lines could be checked
    against, so none of them is read, and it is said."""
    records: list[Record] = []
    problems: list[str] = []
    if root.is_file():
        paths = [root]
    else:
        paths = sorted(root.rglob("*.jsonl")) if root.exists() else []
    for path in paths:
        if runs and path.parent.parent != root:
            problems.append(
                f"{path}: skipped: not where a run keeps a cell's records "
                f"({root}/<run-id>/<cell-id>{RECORDS_SUFFIX}); none of its lines was read"
            )
            continue
        if not path.is_file():  # a pipe would never end a read; a folder, a broken link
            problems.append(f"{path}: skipped: not a file (a folder, a pipe or a broken link)")
            continue
        scan = scan_records(path)
        records.extend(scan.records)
        problems.extend(scan.problems)
    return ReadResult(records=tuple(records), problems=tuple(problems))


# What a record keeps of one text: a message or a traceback of megabytes (a case that
# formats a whole tensor into its error) keeps its head and tail, so the record, the
# history and the report stay small and every transform over them stays quick.
TEXT_LIMIT = 64_000


def shorten(text: str, limit: int = TEXT_LIMIT) -> str:
    """``text`` if it has at most ``limit`` characters, else its head and tail around a marker.

    The marker says how many characters were cut; the result has at most ``limit``
    characters plus the marker's length.
    """
    if len(text) <= limit:
        return text
    head = limit // 2
    tail = limit - head
    cut = len(text) - head - tail
    return f"{text[:head]}\n[... {cut:,} characters cut ...]\n{text[-tail:]}"


# What the results plugin prints before a record it could not write (a full disk), the
# record's line after it: the supervisor, reading the cell's output, writes it once it can.
UNWRITTEN_RECORD = "[ftmatrix-unwritten-record] "


def record_line(record: Record) -> str:
    """``record`` as its file holds it: one line of JSON, every secret masked."""
    return _line(record)


def _line(record: Record) -> str:
    # The one place every record passes before it is written: every string of it
    # (case ids, reasons, messages, metrics, their names) redacted by value, for the
    # environment as it is now (a case may have set a secret in it). The text is
    # json.dumps(the redacted fields, sort_keys=True) to the byte, put together field by
    # field: a trivial case's record is mostly None, short strings and the fields every
    # record of the cell repeats, whose JSON is made once.
    redactor = current_redactor()
    fields = ", ".join(
        key + field_json(redactor, name, getattr(record, name)) for name, key in SORTED_KEYS
    )
    return "{" + fields + "}\n"


# Fields whose text this code makes in a format the record's reading checks (an ISO time,
# a run id, a hash, a status): no secret is in them, and masking one that a secret's value
# happened to match (a date, "timeout") made the record unreadable, so the case's result
# was lost. Never masked.
OWN_FORMAT_FIELDS = frozenset(
    {"run_id", "cell_id", "lock_id", "status", "started_at", "finished_at"}
)


def field_json(redactor: Redactor, name: str, value: Any) -> str:  # noqa: PLR0911 -- a return per kind
    """The JSON text of the record's field ``name`` holding ``value``, redacted."""
    kind = type(value)
    if value is None:
        return "null"
    if name in OWN_FORMAT_FIELDS:
        return _json_string(value.value if isinstance(value, Status) else str(value))
    if kind is str:
        return _json_string(redactor.text(value))
    if name in _REPEATED_FIELDS:
        return redactor.json_once(value)
    if kind is bool:
        return "true" if value else "false"
    if kind is int or (kind is float and math.isfinite(value)):
        return repr(value)  # as json.dumps writes them
    if not value and kind in (dict, list, tuple):
        return "{}" if kind is dict else "[]"
    if isinstance(value, Status):
        return _json_string(redactor.text(value.value))
    return _json_other(redactor, value)


def _json_other(redactor: Redactor, value: Any) -> str:
    """``value`` (not None, a str, a bool or a number) redacted, as json.dumps writes it."""
    if isinstance(value, Mapping):
        value = dict(value)
    elif isinstance(value, tuple):
        value = [dict(v) if isinstance(v, Mapping) else v for v in value]
    if isinstance(value, dict | list | tuple):
        value = redactor.data(value)
    elif isinstance(value, str):
        value = redactor.text(value)
    return json.dumps(value, sort_keys=True, default=str)


# json.dumps's own string encoder (its C version where there is one).
_json_string: Callable[[str], str] = json.encoder.encode_basestring_ascii
# Each field's name, in the order sort_keys writes them, and its '"name": ' text.
SORTED_KEYS = tuple((name, json.dumps(name) + ": ") for name in sorted(FIELDS))
# The fields each record of a cell holds alike.
_REPEATED_FIELDS = frozenset({"packages", "host_packages", "hardware", "pins", "runner_labels"})


def redact(text: str | None, env: Mapping[str, str]) -> str | None:
    """``text`` with every secret masked (:mod:`ftmatrix.cell.redact`); None stays None."""
    return None if text is None else redact_text(text, env)
