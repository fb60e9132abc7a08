"""A published report's results.json, read from a file or a URL, as check needs it.

:func:`read_results` is the edge (a file, or HTTP(S) with a timeout); :func:`parse_results`
is pure. What results.json publishes (``ftmatrix.report.results_json``): the
newest record of every (cell, case), and the failure groups with the known issue each
is linked to. The constraints files are not in it; they are derived from its records by
the function that wrote them (:func:`ftmatrix.constraints.derive_constraints`), so check
and ``reports/constraints/`` say the same.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from packaging.version import InvalidVersion

from ftmatrix.cell.record import Record
from ftmatrix.constraints import ConstraintSet, derive_constraints
from ftmatrix.download import read_text
from ftmatrix.errors import UsageError, one_line
from ftmatrix.versions import parse_version, shown, too_long

RESULTS_SCHEMA = 1  # what ftmatrix.report.results_json writes (its "schema")


@dataclass(frozen=True, kw_only=True)
class KnownIssueLink:
    """A failure group's known issue, as results.json carries it."""

    id: str
    title: str
    upstream: str
    workaround: str | None = None
    claim: str | None = None  # its range: "fixed in X (proven DATE: ...)" or "(claimed, ...)"

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "title": self.title,
            "upstream": self.upstream,
            "workaround": self.workaround,
            "claim": self.claim,
        }


@dataclass(frozen=True, kw_only=True)
class Results:
    """The records of one report, with what the report knows about their failures."""

    source: str
    runs: tuple[str, ...]
    records: tuple[Record, ...]
    # member_key(cell id, case) -> the known issues whose signature fits that record
    known: Mapping[str, tuple[KnownIssueLink, ...]] = field(default_factory=dict)
    blame: Mapping[str, str] = field(default_factory=dict)  # group key -> who is to blame
    constraints: tuple[ConstraintSet, ...] = ()

    def known_issues(self, record: Record) -> tuple[KnownIssueLink, ...]:
        return self.known.get(member_key(record.cell_id, record.case), ())

    def blamed(self, record: Record) -> str | None:
        return self.blame.get(group_key(record))


def member_key(cell_id: str, case: str) -> str:
    """A record's place among the groups' members: its cell and case."""
    return f"{cell_id}::{case}"


# Between a group's signature and the ids of the entries that explain it, in its key.
CAUSE_SEPARATOR = " ~ "


def group_key(record: Record) -> str:
    """The failure group a record belongs to: the key ftmatrix.report.failures groups by."""
    return record.signature or f"{record.status.value}: {(record.reason or '')[:200]}"


def read_results(where: str, *, timeout: float = 30) -> Results:
    """results.json from a path or an ``https://`` (or ``http://``) URL."""
    what = f"--results {one_line(where)}"
    text = read_text(where, what, timeout=timeout, kind="a results.json")
    try:
        payload = json.loads(text)
    except RecursionError:
        raise UsageError(f"{what}: nested too deeply to be a results.json") from None
    except json.JSONDecodeError as exc:
        start = " ".join(text[:40].split())
        raise UsageError(
            f"{what}: not JSON ({exc.msg} at line {exc.lineno} column {exc.colno}); "
            f"it starts {start!r}"
        ) from None
    except ValueError:  # an integer of more digits than Python converts (4,300)
        raise UsageError(
            f"{what}: holds a number of more than 4,300 digits, so it is not a results.json"
        ) from None
    return parse_results(payload, source=where)


def parse_results(payload: Any, *, source: str) -> Results:
    """Validate a parsed results.json; a UsageError names the input and what is wrong."""
    what = f"--results {source}"
    if not isinstance(payload, dict) or "records" not in payload:
        raise UsageError(f"{what}: not the results.json of an ftmatrix report (no 'records')")
    schema = payload.get("schema")
    if schema != RESULTS_SCHEMA or type(schema) is not int:  # true and 1.0 are no schema 1
        if type(schema) is int:
            age = "an older" if schema < RESULTS_SCHEMA else "a newer"
            written = f"schema {schema}, written by {age} ftmatrix"
        else:
            written = f"schema {schema!r}"
        raise UsageError(f"{what}: {written}; this ftmatrix reads schema {RESULTS_SCHEMA}")
    if not isinstance(payload["records"], list):
        raise UsageError(f"{what}: 'records' is not a list")
    records = _parse_records(payload["records"], what)
    runs = payload.get("runs") or []
    if not isinstance(runs, list) or not all(isinstance(r, str) for r in runs):
        raise UsageError(f"{what}: 'runs' is not a list of run ids, got {shown(runs)}")
    groups = payload.get("failure_groups") or []
    if not isinstance(groups, list):
        raise UsageError(f"{what}: 'failure_groups' is not a list, got {shown(groups)}")
    known: dict[str, tuple[KnownIssueLink, ...]] = {}
    blame: dict[str, str] = {}
    for group in groups:
        key = group.get("key") if isinstance(group, dict) else None
        if not isinstance(key, str):
            continue
        links = _links(group)
        if links:
            for member in _members(group, records):
                known[member] = links
        if group.get("blame"):
            blame[key.split(CAUSE_SEPARATOR, 1)[0]] = str(group["blame"])
    return results_of(
        records,
        source=source,
        runs=runs,
        known=known,
        blame=blame,
    )


def _links(group: Mapping[str, Any]) -> tuple[KnownIssueLink, ...]:
    """A group's known issues (``known_issues``; an older report's single ``known_issue``)."""
    issues = group.get("known_issues")
    if not isinstance(issues, list):
        issues = [group.get("known_issue")]
    return tuple(
        KnownIssueLink(
            id=str(issue["id"]),
            title=str(issue.get("title") or ""),
            # As the report builds it in memory: the owning report, or that none was found.
            upstream=str(issue.get("reported") or issue.get("upstream") or ""),
            workaround=issue.get("workaround"),
            claim=issue.get("claim") if isinstance(issue.get("claim"), str) else None,
        )
        for issue in issues
        if isinstance(issue, dict) and issue.get("id")
    )


def _members(group: Mapping[str, Any], records: Sequence[Record]) -> list[str]:
    """The member keys of a group: its ``members``, or (an older report) every record of
    its signature."""
    members = group.get("members")
    if isinstance(members, list):
        return [
            member_key(str(m[0]), str(m[1])) for m in members if isinstance(m, list) and len(m) == 2
        ]
    key = group.get("key")
    return [member_key(r.cell_id, r.case) for r in records if group_key(r) == key]


def results_of(
    records: Sequence[Record],
    *,
    source: str,
    runs: Sequence[str] = (),
    known: Mapping[str, tuple[KnownIssueLink, ...]] | None = None,
    blame: Mapping[str, str] | None = None,
) -> Results:
    """The results of a report's records, whether read from its results.json or held by
    the report itself (its page's check): the constraints derived as the report derives
    them for reports/constraints/ (the report writes those files from these)."""
    return Results(
        source=source,
        runs=tuple(runs),
        records=tuple(records),
        known=dict(known or {}),
        blame=dict(blame or {}),
        constraints=tuple(derive_constraints(records)),
    )


def _parse_records(items: list[Any], what: str) -> list[Record]:
    """Every record of results.json, or a UsageError naming the first bad one and why."""
    records = []
    for i, item in enumerate(items):
        try:
            if not isinstance(item, dict):
                raise ValueError("not an object")
            record = Record.from_mapping(item)
            _check_pins(record)
            records.append(record)
        except ValueError as exc:
            raise UsageError(f"{what}: records[{i}]: {exc}") from None
        except (TypeError, KeyError, AttributeError, RecursionError) as exc:
            # A field of the wrong type: said with its place, never a traceback.
            raise UsageError(
                f"{what}: records[{i}]: not a record of schema {RESULTS_SCHEMA} "
                f"({type(exc).__name__}: {exc})"
            ) from None
    return records


def _check_pins(record: Record) -> None:
    """Every pin a version (or None: not installed), and the Python one: a record whose
    pins cannot be read would be compared with nothing, and its break read as untested."""
    for name, version in record.pins.items():
        if version is None:
            continue
        if not isinstance(version, str):
            raise ValueError(f"pins.{name}: {shown(version)} is not a version nor null")
        try:
            parse_version(version)
        except InvalidVersion:
            raise ValueError(
                f"pins.{name}: {shown(version)} is not a version{too_long(version)}"
            ) from None
    try:
        parse_version(record.python)
    except InvalidVersion:
        raise ValueError(f"python: {shown(record.python)} is not a Python version") from None
