"""A record line's JSON, read as strictly as the history and the report need it.

A records file is written by the results plugin, but read after crashes, hand edits and
other tools: a line may hold what Python's JSON reader accepts and nothing downstream
can keep (``NaN``, ``1e400``, a lone surrogate that UTF-8 cannot hold, a field of the
right type holding values of the wrong one). :func:`parse_line` reads what can be kept
as text; :func:`check_values` rejects a record whose values are of the wrong kind, so
its line is reported and quarantined like any damaged line, never a traceback later.

Runs inside the cell (the standard library only).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from ftmatrix.cell.redact import writable

# The errors reading one line can raise: not UTF-8 or not JSON (ValueError), a number of
# too many digits (ValueError), nesting deeper than the interpreter's stack (RecursionError).
LINE_ERRORS = (ValueError, TypeError, RecursionError, OverflowError)


def parse_line(raw: bytes) -> Any:
    """The JSON value of ``raw``: ``NaN`` and ``Infinity`` (which JSON cannot hold) as
    their text, a lone surrogate as its escape (``\\ud800``)."""
    value = _DECODER.decode(raw.decode("utf-8"))
    # An escaped surrogate, perhaps a lone one (one look for any escape first: most lines
    # have none, and each look costs a scan of the line).
    if b"\\u" in raw and (b"\\ud" in raw or b"\\uD" in raw):
        value = _writable(value)
    return value


def strict_data(value: Any) -> Any:
    """``value`` with every number JSON cannot hold (NaN, an infinity) as its text, as
    :func:`parse_line` reads it: a record made in memory (restored from a published
    history, or handed by a plugin) goes into the history's strict JSON too."""
    if isinstance(value, float) and not math.isfinite(value):
        return json.dumps(value)  # NaN, Infinity, -Infinity
    if isinstance(value, list | tuple):
        return [strict_data(v) for v in value]
    if isinstance(value, dict):
        return {k: strict_data(v) for k, v in value.items()}
    return value


# Made once: json.loads with a hook makes a decoder a call. The hook is called for NaN and
# Infinity only (no cost to a plain line); 1e400 reads as inf, which check_values refuses
# for a duration and the history keeps as text elsewhere (store.py).
_DECODER = json.JSONDecoder(parse_constant=str)


def _writable(value: Any) -> Any:
    if isinstance(value, str):
        return writable(value)
    if isinstance(value, list):
        return [_writable(v) for v in value]
    if isinstance(value, dict):
        return {writable(k): _writable(v) for k, v in value.items()}
    return value


def check_values(data: Mapping[str, Any]) -> None:
    """ValueError naming the first field whose values are not what a record holds: pins
    of version text (or null), packages of version text, runner labels of text, attempts
    of objects, a finite duration."""
    for name, allow_null in (("pins", True), ("packages", False), ("host_packages", False)):
        versions = data.get(name) or {}
        if versions == _CHECKED_VERSIONS.get(name):
            continue  # as the last record's: a cell's records share their pins and packages
        for key, value in versions.items():
            if type(value) is not str and not (allow_null and value is None):
                wanted = "a version nor null" if allow_null else "a version"
                raise ValueError(f"{name}.{key}: {value!r:.40} is not {wanted}")
        # A copy: equal to it, a later record's are text (or null) too (no number equals
        # a text), and nothing done to this record's can change it.
        _CHECKED_VERSIONS[name] = dict(versions)
    for name, kind in (("runner_labels", str), ("attempts", dict)):
        if not all(type(v) is kind for v in data.get(name) or ()):
            raise ValueError(f"field {name!r}: expected a list of {_JSON_NAMES[kind]}")
    duration = data.get("duration") or 0
    try:
        finite = math.isfinite(duration)
    except OverflowError:  # an integer of hundreds of digits
        finite = False
    if not finite:
        raise ValueError(f"field 'duration': {duration!r:.40} is not a finite number of seconds")


_JSON_NAMES = {str: "strings", dict: "objects"}
# The versions of the last record whose versions were found right, by field.
_CHECKED_VERSIONS: dict[str, Any] = {}
