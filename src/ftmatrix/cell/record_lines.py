"""The lines of one cell's records, made the quick way: what every record of the cell
shares written once, each case's own fields filled in.

A record's line is ``json.dumps`` of its redacted fields, keys sorted
(:func:`ftmatrix.cell.records.record_line`). Of a case that passed, skipped or was n/a, all
but eight fields are the cell's (its pins, packages, machine, ids) or empty: the line is the
text of a record whose eight are markers, cut at the markers, with the eight fields' JSON
put in their places, by the same function that writes each field of every record. A record
with anything more (an exception, attempts, a flaky verdict) is written field by field.

Runs inside each cell's environment (the results plugin): the standard library only.
"""

from __future__ import annotations

import dataclasses
import math
from json.encoder import encode_basestring_ascii as _json_string
from typing import Any

from ftmatrix.cell.record import Record
from ftmatrix.cell.records import OWN_FORMAT_FIELDS, SORTED_KEYS, field_json, record_line
from ftmatrix.cell.redact import Redactor, current_redactor
from ftmatrix.cell.status import Status

# A case's own fields, in the order its line holds them (the keys sorted).
CASE_FIELDS = tuple(
    name
    for name, _ in SORTED_KEYS
    if name
    in {"case", "operation", "status", "reason", "started_at", "finished_at", "duration", "metrics"}
)


class CellLines:
    """Lines of the records of one cell: ``base`` holds what they share (its own case
    fields are ignored)."""

    def __init__(self, base: Record) -> None:
        self.base = base
        self._own = {name: getattr(base, name) for name in CASE_FIELDS}
        self._made_for: Redactor | None = None
        self._pieces: tuple[str, ...] = ()

    def line(self, **fields: Any) -> str:
        """The line of ``base`` with ``fields``: quick where they are case fields only."""
        if not fields.keys() <= self._own.keys():
            return record_line(dataclasses.replace(self.base, **fields))
        redactor = current_redactor()
        if redactor is not self._made_for:
            self._pieces = _pieces(self.base)
            self._made_for = redactor
        pieces = self._pieces
        if not pieces:  # a marker did not come through whole (in a shared field)
            return record_line(dataclasses.replace(self.base, **fields))
        own = self._own
        parts = [pieces[0]]
        for at, name in enumerate(CASE_FIELDS, start=1):
            value = fields[name] if name in fields else own[name]
            if value is None:
                parts.append("null")
            elif name in OWN_FORMAT_FIELDS:  # its times, its status: never masked
                parts.append(field_json(redactor, name, value))
            elif type(value) is str:  # the case's id (as field_json writes it)
                parts.append(_json_string(redactor.text(value)))
            else:
                parts.append(field_json(redactor, name, value))
            parts.append(pieces[at])
        return "".join(parts)

    def pass_line(
        self, *, case: str, operation: str, started_at: str, finished_at: str, duration: float
    ) -> str:
        """The line of a case that passed and recorded nothing (no metrics, no reason): what
        :meth:`line` makes of those fields, in one go (the usual case's, after every case)."""
        redactor = current_redactor()
        if redactor is not self._made_for:
            self._pieces = _pieces(self.base)
            self._made_for = redactor
        p = self._pieces
        if not p or type(duration) is not float or not math.isfinite(duration):
            return self.line(
                case=case, operation=operation, status=Status.PASS, started_at=started_at,
                finished_at=finished_at, duration=duration, metrics={}, reason=None,
            )  # fmt: skip
        text = redactor.text
        # In CASE_FIELDS' order: case, duration, finished_at, metrics, operation, reason,
        # started_at, status (a property test holds it to line's); the times and the status
        # are never masked (OWN_FORMAT_FIELDS).
        return (
            f"{p[0]}{_json_string(text(case))}{p[1]}{duration!r}{p[2]}"
            f"{_json_string(finished_at)}{p[3]}{{}}{p[4]}{_json_string(text(operation))}"
            f'{p[5]}null{p[6]}{_json_string(started_at)}{p[7]}"pass"{p[8]}'
        )


def _pieces(base: Record) -> tuple[str, ...]:
    """``base``'s line cut where its case fields are, for the redactor of now; () where a
    marker is not found exactly once (a secret masked across it)."""
    markers: dict[str, Any] = {
        name: f"\x00ftmatrix-case-field-{at}\x00" for at, name in enumerate(CASE_FIELDS)
    }
    text = record_line(dataclasses.replace(base, **markers))
    redactor = current_redactor()
    pieces = []
    for name in CASE_FIELDS:
        marker = field_json(redactor, name, markers[name])
        if text.count(marker) != 1:
            return ()
        head, text = text.split(marker)
        pieces.append(head)
    pieces.append(text)
    return tuple(pieces)
