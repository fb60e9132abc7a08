"""The record: what one case did in one cell, and its JSON schema.

A record is one line of JSON in its cell's file (:mod:`ftmatrix.cell.records`); FIELDS
says what each field holds, and the schema, the docs and the readers derive from it.

This module runs inside each cell's environment (the results plugin uses it), so
it imports the standard library only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ftmatrix.cell.files import RUN_ID_RULE, is_run_id
from ftmatrix.cell.record_json import check_values
from ftmatrix.cell.signature import clean_paths_in
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
        placeholders in every text the record holds (its case id, metrics, packages, the
        machine's description and the runner's labels too: a parametrize id, a value a
        case recorded, a local wheel's version or an import error may hold a path), the
        raw text (``raw_message``, ``raw_traceback``) left out. Only the fields ftmatrix
        writes in a checked format (ids, times, status, the signature's hash) are kept."""
        cleaned = {
            name: clean_paths_in(getattr(self, name))
            for name in _PUBLISHED_TEXTS
            if getattr(self, name) is not None
        }
        cleaned["runner_labels"] = tuple(cleaned["runner_labels"])  # lists, as JSON's
        cleaned["attempts"] = tuple(cleaned["attempts"])
        return dataclasses.replace(self, **cleaned, raw_message=None, raw_traceback=None)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> Record:
        """Parse one record; ValueError names the first missing or bad field."""
        if data.get("schema") != SCHEMA_VERSION:
            raise ValueError(f"schema {data.get('schema')!r} is not {SCHEMA_VERSION}")
        own_keys = data.keys() <= _FIELD_DEFAULTS.keys()
        _check_fields_once(data, own_keys=own_keys)
        check_values(data)
        if data["run_id"] not in _RIGHT_RUN_IDS:
            if not is_run_id(data["run_id"]):
                raise ValueError(f"field 'run_id': {data['run_id']!r} is not {RUN_ID_RULE}")
            _remember(_RIGHT_RUN_IDS, data["run_id"])
        for name in ("started_at", "finished_at"):
            try:
                datetime.fromisoformat(data[name].replace("Z", "+00:00"))
            except ValueError:
                raise ValueError(
                    f"field {name!r}: {data[name]!r} is not an ISO-8601 time "
                    "(such as '2026-11-25T03:00:00+00:00')"
                ) from None
        # Made as the dataclass's __init__ makes it (every field set in its order, nothing
        # else run), in a fraction of its time.
        fields = dict(_FIELD_DEFAULTS)
        if own_keys:
            fields.update(data)
        else:  # keys of no field (a newer ftmatrix's) left out
            fields.update((name, data[name]) for name in FIELDS if name in data)
        fields["status"] = Status.parse(str(data["status"]))
        fields["runner_labels"] = tuple(data.get("runner_labels") or ())
        fields["attempts"] = tuple(data.get("attempts") or ())
        fields["flaky"] = bool(data.get("flaky", False))
        fields["duration"] = float(data.get("duration") or 0.0)
        for name in _MAPPING_FIELDS:  # each record its own (dataclass's default_factory)
            if name not in data:
                fields[name] = {}
        record = object.__new__(cls)
        object.__setattr__(record, "__dict__", fields)
        return record


def _check_fields_once(data: Mapping[str, Any], *, own_keys: bool) -> None:
    """:func:`_check_fields`, once per shape (keys and their types, in order): a cell's
    records share one or two, and the history reads thousands of lines. Only shapes of a
    record's own keys are remembered: a line of a million others is checked each time,
    never kept."""
    shape = (tuple(data), tuple(map(type, data.values()))) if own_keys else None
    if shape is not None and shape in _RIGHT_SHAPES:
        return
    _check_fields(data)
    if shape is not None:
        _remember(_RIGHT_SHAPES, shape)


def _check_fields(data: Mapping[str, Any]) -> None:
    """ValueError naming the missing fields, or the first of a type no record holds."""
    missing = [name for name in _REQUIRED_FIELDS if name not in data]
    if missing:
        raise ValueError(f"missing field(s): {', '.join(missing)}")
    # What JSON reads is of these exact types: one look each, isinstance's only for the rest.
    for name in [n for n, exact in _EXACT_ITEMS if n in data and type(data[n]) not in exact]:
        if not _is_type(data[name], _FIELD_TYPES[name]):
            kinds = FIELDS[name][0]
            wanted = " or ".join([kinds] if isinstance(kinds, str) else kinds)
            raise ValueError(f"field {name!r}: expected {wanted}, got {type(data[name]).__name__}")


# The shapes and run ids found right so far (a few per file; emptied past a bound).
_RIGHT_SHAPES: set[tuple[tuple[Any, ...], tuple[type, ...]]] = set()
_RIGHT_RUN_IDS: set[str] = set()
_SHAPES_KEPT = 256


def _remember(found_right: set[Any], key: Any) -> None:
    if len(found_right) >= _SHAPES_KEPT:
        found_right.clear()
    found_right.add(key)


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

_REQUIRED_FIELDS = tuple(name for name in FIELDS if name not in _OPTIONAL_FIELDS)
_EXACT_ITEMS = tuple(_EXACT_TYPES.items())
# Every field in the dataclass's order, with the default a record read from a line without
# it gets (a required field's None is always replaced); the mappings are made anew for each
# record (default_factory), the rest is shared (immutable).
_FIELD_DEFAULTS = {
    f.name: None if f.default is dataclasses.MISSING else f.default
    for f in dataclasses.fields(Record)
}
_MAPPING_FIELDS = tuple(
    f.name for f in dataclasses.fields(Record) if f.default_factory is not dataclasses.MISSING
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


# The fields whose texts come from the case, the machine or the packages: every one of
# them is cleaned of paths for publishing (the others are ids, times, numbers, a status).
_PUBLISHED_TEXTS = (
    "cell_label", "python", "pins", "hardware_class", "case", "operation", "packages",
    "host_packages", "hardware", "runner_labels", "reason", "exception_type", "message",
    "framework_frame", "traceback", "root_exception_type", "root_message", "root_frame",
    "metrics", "attempts", "beyond_cap",
)  # fmt: skip
