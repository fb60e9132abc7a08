"""The record: what one case did in one cell, its JSON schema, and its files.

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
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from ftmatrix.cell.file_writes import (
    LineAppender,
    append_line,
    locked_folder,
    sync_file,
    write_atomically,
)
from ftmatrix.cell.files import RUN_ID_RULE, CellFiles, is_run_id
from ftmatrix.cell.record_json import LINE_ERRORS, check_values, parse_line
from ftmatrix.cell.redact import Redactor, current_redactor, redact_text
from ftmatrix.cell.signature import clean_paths
from ftmatrix.cell.status import Status

SCHEMA_VERSION = 1

# Case id of a record that stands for the whole cell (it never got to run cases).
WHOLE_CELL = "*"

# Field name -> (JSON type, description). The JSON schema and docs derive from it.
FIELDS: dict[str, tuple[str | list[str], str]] = {
    "schema": ("integer", "Record schema version."),
    "run_id": ("string", "The run this record belongs to."),
    "cell_id": ("string", "Short hash of the cell's canonical form: the storage key."),
    "cell_label": ("string", "Readable cell name, as `nox -l` shows it."),
    "lock_id": (
        ["string", "null"],
        "Short hash of the resolved lock: an unchanged id means an unchanged environment.",
    ),
    "python": ("string", "Python version of the cell."),
    "pins": ("object", "Requested pins: package -> version, null for 'not installed'."),
    "packages": ("object", "Every distribution installed in the cell: name -> version."),
    "host_packages": (
        "object",
        "Those of `packages` the cell took from the host (install.system-packages): "
        "name -> version.",
    ),
    "hardware_class": ("string", "The matrix hardware class the cell was planned for."),
    "hardware": ("object", "Fingerprint of the machine: CPU, GPUs, driver, CUDA."),
    "runner_labels": ("array", "Labels of the CI runner, if any."),
    "case": ("string", "pytest node id of the case, or '*' for the whole cell."),
    "operation": ("string", "Operation family the case reproduces (sft, grpo, lora, ...)."),
    "status": ("string", "One of the statuses; see the legend."),
    "reason": (["string", "null"], "Why it was skipped, n/a, or not installed."),
    "exception_type": (["string", "null"], "Qualified name of the exception raised."),
    "message": (["string", "null"], "The exception message (secrets redacted)."),
    "signature": (["string", "null"], "Hash grouping equal failures across cells."),
    "framework_frame": (["string", "null"], "Innermost frame inside a framework package."),
    "traceback": (["string", "null"], "Full traceback (secrets redacted)."),
    "root_exception_type": (
        ["string", "null"],
        "Type of the root cause: the innermost exception the raised one came from "
        "(its __cause__, a wrapped __context__, a known wrapper's inner error).",
    ),
    "root_message": (["string", "null"], "Message of the root cause (secrets redacted)."),
    "root_frame": (["string", "null"], "Innermost framework frame of the root cause."),
    "raw_message": (
        ["string", "null"],
        "`message` as raised, with the machine's paths (which `message` replaces by "
        "placeholders such as <venv>); null when equal. Never published.",
    ),
    "raw_traceback": (
        ["string", "null"],
        "`traceback` with the machine's paths; null when equal. Never published.",
    ),
    "metrics": ("object", "Numbers the case recorded (loss, grad norm, ...)."),
    "flaky": ("boolean", "True when two tries of the case disagreed."),
    "beyond_cap": (
        ["string", "null"],
        "A cap probe: the declared requirement its install overrode ('unsloth 2026.10.7: "
        "trl<=1.15.0'); null for a plain cell.",
    ),
    "attempts": ("array", "Each try of a retried case: status, reason, message."),
    "reused_from": (
        ["string", "null"],
        "The run that produced this result, when this run reused it because the cell's "
        "lock, cases and hardware were unchanged since (see reuse in the docs); null when it ran.",
    ),
    "duration": ("number", "Seconds the case took."),
    "started_at": ("string", "UTC ISO-8601 start time."),
    "finished_at": ("string", "UTC ISO-8601 end time."),
}


@dataclass(frozen=True, kw_only=True)
class Record:
    """One (cell, case) outcome, as written to and read from a cell's JSONL file."""

    run_id: str
    cell_id: str
    cell_label: str
    python: str
    pins: Mapping[str, str | None]
    hardware_class: str
    case: str
    operation: str
    status: Status
    started_at: str
    finished_at: str
    duration: float = 0.0
    lock_id: str | None = None
    packages: Mapping[str, str] = field(default_factory=dict)
    host_packages: Mapping[str, str] = field(default_factory=dict)
    hardware: Mapping[str, Any] = field(default_factory=dict)
    runner_labels: tuple[str, ...] = ()
    reason: str | None = None
    exception_type: str | None = None
    message: str | None = None
    signature: str | None = None
    framework_frame: str | None = None
    traceback: str | None = None
    root_exception_type: str | None = None
    root_message: str | None = None
    root_frame: str | None = None
    raw_message: str | None = None
    raw_traceback: str | None = None
    metrics: Mapping[str, Any] = field(default_factory=dict)
    flaky: bool = False
    attempts: tuple[Mapping[str, Any], ...] = ()
    beyond_cap: str | None = None
    reused_from: str | None = None
    schema: int = SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        data = {name: getattr(self, name) for name in FIELDS}
        data["status"] = self.status.value
        data["pins"] = dict(self.pins)
        data["packages"] = dict(self.packages)
        data["host_packages"] = dict(self.host_packages)
        data["hardware"] = dict(self.hardware)
        data["runner_labels"] = list(self.runner_labels)
        data["metrics"] = dict(self.metrics)
        data["attempts"] = [dict(a) for a in self.attempts]
        return data

    def published(self) -> Record:
        """This record as a public page shows it: the machine's paths replaced by
        placeholders, the raw text (``raw_message``, ``raw_traceback``) left out."""
        return dataclasses.replace(
            self,
            reason=_clean(self.reason),
            message=_clean(self.message),
            traceback=_clean(self.traceback),
            root_message=_clean(self.root_message),
            raw_message=None,
            raw_traceback=None,
            attempts=tuple(
                {k: _clean(v) if isinstance(v, str) else v for k, v in a.items()}
                for a in self.attempts
            ),
        )

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> Record:
        """Parse one record; ValueError names the first missing or bad field."""
        if data.get("schema") != SCHEMA_VERSION:
            raise ValueError(f"schema {data.get('schema')!r} is not {SCHEMA_VERSION}")
        missing = [name for name in FIELDS if name not in data and name not in _OPTIONAL_FIELDS]
        if missing:
            raise ValueError(f"missing field(s): {', '.join(missing)}")
        for name, types in _FIELD_TYPES.items():
            if name not in data or type(data[name]) in _EXACT_TYPES[name]:
                continue  # what JSON reads is of these exact types: one look, not isinstance's
            if not _is_type(data[name], types):
                kinds = FIELDS[name][0]
                wanted = " or ".join([kinds] if isinstance(kinds, str) else kinds)
                raise ValueError(
                    f"field {name!r}: expected {wanted}, got {type(data[name]).__name__}"
                )
        check_values(data)
        if not is_run_id(data["run_id"]):
            raise ValueError(f"field 'run_id': {data['run_id']!r} is not {RUN_ID_RULE}")
        for name in ("started_at", "finished_at"):
            try:
                datetime.fromisoformat(data[name].replace("Z", "+00:00"))
            except ValueError:
                raise ValueError(
                    f"field {name!r}: {data[name]!r} is not an ISO-8601 time "
                    "(such as '2026-11-25T03:00:00+00:00')"
                ) from None
        values = {name: data[name] for name in FIELDS if name in data}
        values["status"] = Status.parse(str(data["status"]))
        values["runner_labels"] = tuple(data.get("runner_labels") or ())
        values["attempts"] = tuple(data.get("attempts") or ())
        values["flaky"] = bool(data.get("flaky", False))
        values["duration"] = float(data.get("duration") or 0.0)
        return cls(**values)


_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "object": (dict,),
    "array": (list, tuple),
    "null": (type(None),),
}


def _python_types(kinds: str | list[str]) -> tuple[tuple[type, ...], bool]:
    """The Python types of the JSON schema ``kinds``, and whether a bool is one (a bool
    is no number here)."""
    names = [kinds] if isinstance(kinds, str) else kinds
    types = tuple(t for kind in names for t in _JSON_TYPES[kind])
    return types, "boolean" in names


# Each field's types, worked out once: every record read checks each of its fields.
_FIELD_TYPES = {name: _python_types(kinds) for name, (kinds, _) in FIELDS.items()}


# The same as exact types, which is what json.loads makes: a bool is a number to isinstance,
# not to ``type(value) in``.
_EXACT_TYPES = {name: frozenset(allowed) for name, (allowed, _) in _FIELD_TYPES.items()}


def _is_type(value: Any, types: tuple[tuple[type, ...], bool]) -> bool:
    """Is ``value`` of ``types`` (from :func:`_python_types`)?"""
    allowed, bool_allowed = types
    return isinstance(value, allowed) and (bool_allowed or not isinstance(value, bool))


_OPTIONAL_FIELDS = frozenset(
    {
        "duration",
        "lock_id",
        "packages",
        "host_packages",
        "hardware",
        "runner_labels",
        "reason",
        "exception_type",
        "message",
        "signature",
        "framework_frame",
        "traceback",
        "root_exception_type",
        "root_message",
        "root_frame",
        "raw_message",
        "raw_traceback",
        "metrics",
        "flaky",
        "attempts",
        "beyond_cap",
        "reused_from",
    }
)


def json_schema() -> dict[str, Any]:
    """The JSON schema of one record line, derived from FIELDS and Status."""
    properties: dict[str, Any] = {
        name: {"type": kind, "description": text} for name, (kind, text) in FIELDS.items()
    }
    properties["status"]["enum"] = [s.value for s in Status]
    properties["schema"]["const"] = SCHEMA_VERSION
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "ftmatrix record",
        "type": "object",
        "required": [n for n in FIELDS if n not in _OPTIONAL_FIELDS],
        "properties": properties,
    }


class CellRecordFile:
    """The JSONL file of one cell in one run: one line appended per record.

    Adding a record appends its line under an exclusive lock (a cell whose cases run in
    several processes, after a crash, on resume, or in pytest-xdist workers at the same
    time, adds to one file) and costs that line only, whatever the file holds already. A
    case recorded again (a second try, a note added) gets a later line; the last line of a
    case is its record. A line that cannot be read (torn by a full disk or a lost machine,
    damaged by hand) is never rewritten away: readers report it, and a resumed run moves it
    to the cell's quarantine file (:func:`compact_records`) and runs the case again.
    """

    def __init__(self, path: Path, *, keep_open: bool = False) -> None:
        """``keep_open``: the file and its folder stay open between records (the results
        plugin, which adds one after every case); :meth:`close` when done."""
        self.path = path
        self._records: dict[str, Record] | None = None  # read on first use
        self._appender = LineAppender(path) if keep_open else None

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
        if self._appender is not None:
            self._appender.append(line)
        else:
            with locked_folder(self.path):
                append_line(self.path, line)
        if self._records is not None:
            self._records.pop(record.case, None)
            self._records[record.case] = record

    def close(self) -> None:
        """Close what ``keep_open`` kept open."""
        if self._appender is not None:
            self._appender.close()

    def save(self) -> None:
        """Replace the file by ``records``, one line each."""
        with locked_folder(self.path):
            write_atomically(self.path, "".join(_line(r) for r in self.records))


@dataclass(frozen=True, kw_only=True)
class Scan:
    """What one record file holds: each case's record, and the lines that cannot be read."""

    records: tuple[Record, ...]
    problems: tuple[str, ...]  # "<file>:<line>: skipped: <why>", one per damaged line
    damaged: tuple[bytes, ...]  # those lines' bytes, as found
    lines: tuple[bytes, ...] = ()  # each record's line, as written (redacted then)
    superseded: int = 0  # lines of a case that a later line recorded again


def scan_records(path: Path) -> Scan:
    """Read ``path`` line by line: the last record of each case, and every line that is
    not a whole record (not UTF-8, not JSON, not an object, not a record, or the torn end
    of a write that never finished), with its number and why."""
    return RecordScanner(path).scan()


class RecordScanner:
    """:func:`scan_records` of one file as it grows: each scan reads only the lines added
    since the last one, so a supervisor that asks after every pass (which cases have a
    record?) and compacts the file at the end reads each record once, not three times.

    Records files are only appended to, or replaced whole (compaction, a resumed run):
    a file that is another one now (its inode) or shorter is read again from its start.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._start(None)

    def _start(self, identity: tuple[int, int] | None) -> None:
        self._identity = identity
        self._offset = 0  # bytes read, up to the end of the last whole line
        self._lines = 0  # lines read
        self._latest: dict[str, tuple[Record, bytes]] = {}
        self._superseded = 0
        self._problems: list[str] = []
        self._damaged: list[bytes] = []

    def scan(self) -> Scan:
        """The file as it is now: each case's last record, and its unreadable lines."""
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
            return Scan(records=(), problems=(), damaged=())
        except OSError as exc:  # a folder, a file no one may read: nothing of it is a record
            self._start(None)
            problem = f"{self.path}: skipped: cannot be read: {exc.strerror or exc}"
            return Scan(records=(), problems=(problem,), damaged=())
        whole = data[: data.rfind(b"\n") + 1]
        for raw in whole.split(b"\n")[:-1]:
            self._read_line(raw)
        self._offset += len(whole)
        problems, damaged = list(self._problems), list(self._damaged)
        torn = data[len(whole) :]
        if torn.strip():  # no newline after it: a write that never finished (or not yet)
            why = "a torn line (the file ends in the middle of it)"
            problems.append(f"{self.path}:{self._lines + 1}: skipped: {why}")
            damaged.append(torn)
        return Scan(
            records=tuple(record for record, _ in self._latest.values()),
            problems=tuple(problems),
            damaged=tuple(damaged),
            lines=tuple(line for _, line in self._latest.values()),
            superseded=self._superseded,
        )

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
        self._superseded += self._latest.pop(record.case, None) is not None
        self._latest[record.case] = (record, raw)


def compact_records(record_file: Path, scanner: RecordScanner | None = None) -> Scan:
    """Rewrite ``record_file`` with one line per case, its last record, and move its
    unreadable lines to its quarantine file (appended, bytes as found); what it read (the
    records kept, the lines moved). Once per cell (its cases done, or on resume), so
    readers of the file see one record a case. The cases a moved line held have no record
    now: a resumed run runs them again. ``scanner``: one that has read the file so far
    (the supervisor's), which reads only the rest."""
    with locked_folder(record_file):
        scan = (scanner or RecordScanner(record_file)).scan()
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


def operation_from_path(nodeid: str) -> str:
    """``test_sft.py::test_x`` -> ``sft``: the operation of a case without a marker."""
    return _operation_of_file(nodeid.split("::", 1)[0])


@functools.lru_cache(maxsize=1024)
def _operation_of_file(file: str) -> str:
    stem = Path(file).stem
    return stem.removeprefix("test_") or stem


# Set by the supervisor's keeper (ftmatrix.supervise.KEEPER) for the cases' pytest: the
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


def read_records(root: Path) -> ReadResult:
    """Every record in ``root`` (a file, or ``*.jsonl`` below a folder): each file's last
    record of each case; the lines that cannot be read are reported, never raised."""
    records: list[Record] = []
    problems: list[str] = []
    if root.is_file():
        paths = [root]
    else:
        paths = sorted(root.rglob("*.jsonl")) if root.exists() else []
    for path in paths:
        if not path.is_file():  # a pipe would never end a read; a folder, a broken link
            problems.append(f"{path}: skipped: not a file (a folder, a pipe or a broken link)")
            continue
        scan = scan_records(path)
        records.extend(scan.records)
        problems.extend(scan.problems)
    return ReadResult(records=tuple(records), problems=tuple(problems))


def _clean(text: str | None) -> str | None:
    return None if text is None else clean_paths(text)


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
    parts = []
    for name, key in _SORTED_KEYS:
        value = getattr(record, name)
        kind = type(value)
        if value is None:
            parts.append(key + "null")
        elif kind is str:
            parts.append(key + _json_string(redactor.text(value)))
        elif name in _REPEATED_FIELDS:
            parts.append(key + redactor.json_once(value))
        elif kind is bool:
            parts.append(key + ("true" if value else "false"))
        elif kind is int or (kind is float and math.isfinite(value)):
            parts.append(key + repr(value))  # as json.dumps writes them
        elif not value and kind in (dict, list, tuple):
            parts.append(key + ("{}" if kind is dict else "[]"))
        elif isinstance(value, Status):
            parts.append(key + _json_string(redactor.text(value.value)))
        else:
            parts.append(key + _json_other(redactor, value))
    return "{" + ", ".join(parts) + "}\n"


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
_SORTED_KEYS = tuple((name, json.dumps(name) + ": ") for name in sorted(FIELDS))
# The fields each record of a cell holds alike.
_REPEATED_FIELDS = frozenset({"packages", "host_packages", "hardware", "pins", "runner_labels"})


def redact(text: str | None, env: Mapping[str, str]) -> str | None:
    """``text`` with every secret masked (:mod:`ftmatrix.cell.redact`); None stays None."""
    return None if text is None else redact_text(text, env)
