"""Failures as a reader looks for them: one cause per known issue, headed by its title.

:mod:`ftmatrix.report.failures` groups records by error signature, and one known issue
often fits several signatures (the same over-count breaks an SFT case and a Trainer
case with different contracts). A :class:`Cause` gathers every group one explanation
covers, so one upstream report is one heading; a group no entry explains stays a cause
of its own, headed by a readable short form of what broke. Where two entries fit the same
records (overlapping reports), they are that cause's explanation together: its records
are counted once, under one heading naming both.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ftmatrix.cell.record import WHOLE_CELL, Record
from ftmatrix.cell.status import Status
from ftmatrix.known_issues import KnownIssue
from ftmatrix.messages import headline
from ftmatrix.report.failures import FailureGroup

# A heading is read at a glance: longer text is cut at a word and the whole kept below.
HEADING_CHARACTERS = 120
_BROKEN = re.compile(r"^contracts broken: (?P<names>[\w, ]+)$")


@dataclass(frozen=True, kw_only=True)
class Cause:
    """Failures with one explanation: a known issue, or one unexplained signature."""

    key: str  # "known:<entry id>[+<entry id>...]", or the unexplained group's key
    title: str  # the (first) known issue's title, or the short form of what broke
    entries: tuple[KnownIssue, ...]  # the known issues that explain it; none: unexplained
    groups: tuple[FailureGroup, ...]  # the signatures it covers, largest first
    records: tuple[Record, ...]  # each (cell, case) once, by cell then case

    @property
    def known(self) -> KnownIssue | None:
        """The known issue it is headed by; None: unexplained."""
        return self.entries[0] if self.entries else None

    @property
    def link(self) -> str | None:
        """The owning project's report of its heading's issue, where it is a web page."""
        return web_link(self.known)

    @property
    def status(self) -> Status:
        """The worst status among its records."""
        return max((r.status for r in self.records), key=lambda s: s.severity)

    @property
    def cells(self) -> dict[str, tuple[str, ...]]:
        """Each cell once (its label) -> the cases that broke there."""
        out: dict[str, list[str]] = {}
        for record in self.records:
            out.setdefault(record.cell_label, []).append(record.case)
        return {label: tuple(cases) for label, cases in out.items()}

    @property
    def anchor(self) -> str:
        """The id of its section on the page (``#group=...`` opens it): stable per cause."""
        return "g-" + hashlib.sha256(self.key.encode()).hexdigest()[:10]

    def count_text(self) -> str:
        """``8 results in 1 cell``: each (cell, case) once, each cell once."""
        results, cells = len(self.records), len(self.cells)
        noun = "result" if results == 1 else "results"
        return f"{results} {noun} in {cells} {'cell' if cells == 1 else 'cells'}"


def causes_of(groups: Sequence[FailureGroup]) -> list[Cause]:
    """One cause per known issue among ``groups``, one per unexplained group; largest first."""
    gathered: dict[str, list[FailureGroup]] = {}
    for group in groups:
        key = "known:" + "+".join(e.id for e in group.causes) if group.causes else group.key
        gathered.setdefault(key, []).append(group)
    causes = []
    for key, members in gathered.items():
        entries = members[0].causes
        causes.append(
            Cause(
                key=key,
                title=entries[0].title if entries else short_form(members[0]),
                entries=entries,
                groups=tuple(members),
                records=_each_once(r for g in members for r in g.records),
            )
        )
    return sorted(causes, key=lambda c: (-len(c.records), c.title))


def web_link(entry: KnownIssue | None) -> str | None:
    """An entry's owning report, where it is a web page (never another scheme)."""
    upstream = entry.upstream if entry else None
    return upstream if upstream and upstream.startswith("https://") else None


def _each_once(records: Iterable[Record]) -> tuple[Record, ...]:
    seen: dict[tuple[str, str], Record] = {}
    for record in records:
        seen.setdefault((record.cell_id, record.case), record)
    return tuple(sorted(seen.values(), key=lambda r: (r.cell_label, r.case)))


def short_form(group: FailureGroup) -> str:
    """A readable heading for failures no known issue explains.

    What the trace blames where it names it ("peft 0.17.1 imports HybridCache, which
    ..."); broken contracts by name and operation ("train: exact update and update
    scale broken"); a cell that never ran by its status and reason; otherwise the
    exception and its message's first line, cut at a word.
    """
    if group.blame:
        return cut(group.blame)
    first = headline(group.message)
    contracts = _BROKEN.match(first)
    operation = group.records[0].operation if group.records else ""
    if contracts:
        names = [n.strip().replace("_", " ") for n in contracts["names"].split(",")]
        listed = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
        verb = "is" if len(names) == 1 else "are"
        return cut(f"{operation}: {listed} {verb} wrong")
    if group.records and group.records[0].case == WHOLE_CELL:
        return cut(f"{group.status.value}: {first}")
    kind = (group.exception_type or "").rsplit(".", 1)[-1]
    return cut(f"{kind}: {first}" if kind and first else first or group.status.value)


def cut(text: str, limit: int = HEADING_CHARACTERS) -> str:
    """``text`` up to ``limit`` characters, cut at a word with an ellipsis."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    head = text[: limit - 1]
    space = head.rfind(" ")
    return (head[:space] if space > limit // 2 else head).rstrip(" ,;:") + "\u2026"
