"""Constraints files: the combinations the history shows break, in pip/uv constraints syntax.

What unsloth and trl maintain by hand (``trl!=0.19.1``, ``peft<0.20``), derived
from the evidence, per operation and hardware class. :func:`derive_constraints`
is pure; :func:`write_constraints` writes ``<operation>-<hardware>.txt`` and a
``.json`` beside it.

The rules, chosen so that no line claims more than the records show:

- Only ``fail``, ``crash``, ``timeout`` and ``oom`` count as a break, and only
  ``pass`` as evidence that a version works. ``error`` (our bug), ``skip``,
  ``n/a``, ``uninstallable`` and ``install-error`` say nothing about whether the
  frameworks work together; whole-cell records (the cell never ran its cases) and
  flaky records are left out too.
- Per case, a version ``V`` of a package is excluded (``pkg!=V``) when the case
  broke with it and passed in no cell that had it, while it passed in a neighbour:
  a cell with the same pins but for that package. Without such a contrast, anything
  else in the failing cell (a support package the resolver picked) could be the
  cause. Where a version breaks only together with another pin (it passes with
  other versions of that package), the line is *conditional*: pip cannot say "only
  with transformers 5", so it is written commented out,
  ``# trl!=0.19.1  # with transformers==5.23.0: ...``; drop the leading ``# `` when
  your stack has that pin. The JSON holds each condition as data (``when``).
- Two or more newest releases tried that all break, after one that passes, become
  one bound (``pkg<V``, V the first failing one); likewise the oldest ones
  (``pkg>V``, V the last failing one). A bound never reaches past the failing
  releases into a passing one; a single failing release stays ``!=``.
- A break no single pin and no pair of pins explains (it also passes somewhere
  with every one of them) is listed as unexplained, never turned into a line.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

from ftmatrix.cell.file_writes import write_atomically
from ftmatrix.cell.record import WHOLE_CELL, Record
from ftmatrix.cell.status import Status
from ftmatrix.record_order import newest_per
from ftmatrix.versions import version_order

# Cell labels named in one comment; the JSON lists them all.
LABELS_SHOWN = 3

Pin = tuple[str, str | None]


@dataclass(frozen=True, kw_only=True)
class Evidence:
    """One record a line rests on: which cell broke which case, and how."""

    cell_label: str
    cell_id: str
    case: str
    status: str
    exception_type: str | None
    signature: str | None
    pins: tuple[Pin, ...]

    @classmethod
    def from_record(cls, record: Record) -> Evidence:
        return cls(
            cell_label=record.cell_label,
            cell_id=record.cell_id,
            case=record.case,
            status=record.status.value,
            exception_type=record.exception_type,
            signature=record.signature,
            pins=tuple(sorted(record.pins.items())),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "cell": self.cell_label,
            "cell_id": self.cell_id,
            "case": self.case,
            "status": self.status,
            "exception_type": self.exception_type,
            "signature": self.signature,
            "pins": dict(self.pins),
        }


@dataclass(frozen=True, kw_only=True)
class Constraint:
    """One constraints line, and the records behind it.

    ``kind`` is ``exclude`` (``!=``), ``below`` (``<``) or ``above`` (``>``);
    ``when`` holds the other pins the break needs (empty: it breaks whatever
    else is installed; a None version means "not installed").
    """

    package: str
    specifier: str
    kind: str
    versions: tuple[str, ...]
    evidence: tuple[Evidence, ...]
    when: tuple[Pin, ...] = ()
    passing: tuple[str, ...] = ()

    @property
    def requirement(self) -> str:
        return f"{self.package}{self.specifier}"

    def comment(self, operation: str) -> str:
        """Why, in one line: which cases broke, how, and in which cells."""
        where = f"{_cases_text(self.evidence)} in {_cells_text(self.evidence)}"
        if self.kind == "below":
            return (
                f"every release tried from {self.versions[0]} on fails {operation} "
                f"({', '.join(self.versions)}; {self.passing[0]} passes): {where}"
            )
        if self.kind == "above":
            return (
                f"every release tried up to {self.versions[-1]} fails {operation} "
                f"({', '.join(self.versions)}; {self.passing[0]} passes): {where}"
            )
        if self.when:
            return f"with {_pins_text(self.when)}: fails {operation}: {where}"
        cells = len({e.cell_id for e in self.evidence})
        return f"fails {operation} in every cell tried with it ({cells}): {where}"

    def render(self, operation: str) -> str:
        line = f"{self.requirement}  # {self.comment(operation)}"
        return f"# {line}" if self.when else line

    def to_dict(self) -> dict[str, Any]:
        return {
            "package": self.package,
            "specifier": self.specifier,
            "requirement": self.requirement,
            "kind": self.kind,
            "when": dict(self.when),
            "versions": list(self.versions),
            "passing": list(self.passing),
            "evidence": [e.to_dict() for e in self.evidence],
        }


@dataclass(frozen=True, kw_only=True)
class Unexplained:
    """A break the records cannot pin on one or two packages, and why."""

    evidence: Evidence
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {**self.evidence.to_dict(), "reason": self.reason}


@dataclass(frozen=True, kw_only=True)
class ConstraintSet:
    """Everything derived for one operation on one hardware class."""

    operation: str
    hardware: str
    constraints: tuple[Constraint, ...]
    unexplained: tuple[Unexplained, ...]
    records: int
    cells: int

    @property
    def stem(self) -> str:
        """The file name without suffix: ``<operation>-<hardware>``."""
        return f"{_file_name(self.operation)}-{_file_name(self.hardware)}"

    def render_text(self) -> str:
        """The constraints file: active lines first, then the conditional ones, commented."""
        active = [c for c in self.constraints if not c.when]
        conditional = [c for c in self.constraints if c.when]
        lines = [
            f"# ftmatrix constraints: operation {self.operation!r} on hardware class "
            f"{self.hardware!r}.",
            f"# From {self.records} records in {self.cells} cells (the newest run of each); "
            "only fail, crash,",
            "# timeout and oom count as breaks. Use: uv pip install -c THIS_FILE ...",
            "# Lines starting '# pkg' break only with the pins after 'with': drop the",
            f"# leading '# ' where your stack has them. Every combination: {self.stem}.json.",
            "",
        ]
        if not self.constraints:
            lines.append("# No break known.")
        lines += [c.render(self.operation) for c in active]
        if active and conditional:
            lines.append("")
        lines += [c.render(self.operation) for c in conditional]
        if self.unexplained:
            lines += [
                "",
                "# Breaks no single pin or pair of pins explains (so no line):",
            ]
            lines += [
                f"#   {u.evidence.case} {u.evidence.status} in {u.evidence.cell_label}: {u.reason}"
                for u in self.unexplained
            ]
        return "\n".join(lines) + "\n"

    def to_dict(self) -> dict[str, Any]:
        return {
            "operation": self.operation,
            "hardware": self.hardware,
            "records": self.records,
            "cells": self.cells,
            "constraints": [c.to_dict() for c in self.constraints],
            "unexplained": [u.to_dict() for u in self.unexplained],
        }


def derive_constraints(records: Iterable[Record]) -> list[ConstraintSet]:
    """Per (operation, hardware class), the lines the evidence in ``records`` supports.

    Of several records for one (cell, case), the newest run's counts. Sorted by
    operation, then hardware class; the lines within are in a stable order.
    """
    judged = (
        r
        for r in records
        # cap probes are judged apart (derive_cap_verdicts)
        if r.case != WHOLE_CELL
        and not r.flaky
        and not r.beyond_cap
        and (r.status.is_break or r.status is Status.PASS)
    )
    newest = newest_per(judged, key=lambda r: (r.cell_id, r.case))
    groups: dict[tuple[str, str], list[Record]] = {}
    for record in newest.values():
        groups.setdefault((record.operation, record.hardware_class), []).append(record)
    return [
        _derive_one(operation, hardware, judged)
        for (operation, hardware), judged in sorted(groups.items())
    ]


def write_constraints(
    folder: Path, records: Iterable[Record], *, derived: Sequence[ConstraintSet] | None = None
) -> list[Path]:
    """Write ``<operation>-<hardware>.txt`` and ``.json`` under ``folder``; drop stale ones.

    The cap probes' verdicts go to ``caps.txt`` and ``caps.json`` beside them.
    ``derived``: ``derive_constraints(records)``, where the caller has it already.
    """
    records = list(records)
    written: list[Path] = []
    for found in derive_constraints(records) if derived is None else derived:
        text_file = folder / f"{found.stem}.txt"
        json_file = folder / f"{found.stem}.json"
        write_atomically(text_file, found.render_text())
        write_atomically(json_file, json.dumps(found.to_dict(), indent=1, sort_keys=True) + "\n")
        written += [text_file, json_file]
    verdicts = derive_cap_verdicts(records)
    if verdicts:
        text_file, json_file = folder / "caps.txt", folder / "caps.json"
        write_atomically(text_file, render_caps_text(verdicts))
        payload = [v.to_dict() for v in verdicts]
        write_atomically(json_file, json.dumps(payload, indent=1, sort_keys=True) + "\n")
        written += [text_file, json_file]
    if folder.exists():
        for old in [*folder.glob("*.txt"), *folder.glob("*.json")]:
            if old not in written:
                old.unlink()
    return written


NOTHING_SET_APART = (
    "no pin, and no pair of pins, is set apart by a passing cell that differs from it in "
    "that pin alone"
)


def _blame_record(
    record: Record, passing: Sequence[Mapping[str, str | None]]
) -> tuple[list[tuple[str, str]], list[tuple[tuple[str, str], Pin]]] | None:
    """The pins (else the pairs of pins) a failing record is blamed on; None: neither.

    A pin is blamed only against a passing neighbour: a cell differing in that pin
    alone. Without one, everything else the failing cell holds (a support package the
    resolver picked, another pin) could be the cause just as well.
    """
    pins = _pins(record)
    installed = [(p, v) for p, v in sorted(pins.items()) if v is not None]
    alone = [
        (p, v)
        for p, v in installed
        if _nowhere(passing, {p: v}) and _neighbour_passes(passing, pins, p)
    ]
    if alone:
        return alone, []
    pairs = [
        ((p, v), (q, w))
        for p, v in installed
        for q, w in sorted(pins.items())
        if q != p
        and _nowhere(passing, {p: v, q: w})
        and _neighbour_passes(passing, pins, p)
        and _neighbour_passes(passing, pins, q)
    ]
    return ([], pairs) if pairs else None


def _derive_one(operation: str, hardware: str, judged: Sequence[Record]) -> ConstraintSet:
    by_case: dict[str, list[Record]] = {}
    for record in judged:
        by_case.setdefault(record.case, []).append(record)
    single: dict[tuple[str, str], list[Record]] = {}
    paired: dict[tuple[str, str, Pin], list[Record]] = {}
    unexplained: list[Unexplained] = []
    for case in sorted(by_case):
        bad = [r for r in by_case[case] if r.status.is_break]
        good = [r for r in by_case[case] if r.status is Status.PASS]
        if not good:
            unexplained += [
                Unexplained(evidence=Evidence.from_record(r), reason="passes in no cell tried")
                for r in bad
            ]
            continue
        passing = [_pins(r) for r in good]
        for record in bad:
            blamed = _blame_record(record, passing)
            if blamed is None:
                unexplained.append(
                    Unexplained(evidence=Evidence.from_record(record), reason=NOTHING_SET_APART)
                )
            elif blamed[0]:
                for pin in blamed[0]:
                    single.setdefault(pin, []).append(record)
            else:
                for (p, v), other in blamed[1]:
                    paired.setdefault((p, v, other), []).append(record)
    constraints = _bounds_and_excludes(judged, single)
    excluded = {(canonicalize_name(c.package), v) for c in constraints for v in c.versions}
    for (package, version, other), members in paired.items():
        if (canonicalize_name(package), version) in excluded:
            continue  # another case breaks it whatever else is installed: already a line
        constraints.append(
            Constraint(
                package=package,
                specifier=f"!={version}",
                kind="exclude",
                versions=(version,),
                evidence=_evidence(members),
                when=(other,),
            )
        )
    constraints.sort(key=_line_order)
    return ConstraintSet(
        operation=operation,
        hardware=hardware,
        constraints=tuple(constraints),
        unexplained=tuple(
            sorted(unexplained, key=lambda u: (u.evidence.case, u.evidence.cell_label))
        ),
        records=len(judged),
        cells=len({r.cell_id for r in judged}),
    )


def _bounds_and_excludes(
    judged: Sequence[Record], single: Mapping[tuple[str, str], list[Record]]
) -> list[Constraint]:
    """The unconditional lines: runs of failing releases at either end become bounds."""
    tried: dict[str, set[str]] = {}
    passed: dict[str, set[str]] = {}
    for record in judged:
        for package, version in _pins(record).items():
            if version is None:
                continue
            tried.setdefault(package, set()).add(version)
            if record.status is Status.PASS:
                passed.setdefault(package, set()).add(version)
    constraints: list[Constraint] = []
    for package in sorted({p for p, _ in single}):
        versions = sorted(tried[package], key=version_order)
        failing = {v for p, v in single if p == package}
        suffix = list(itertools.takewhile(failing.__contains__, reversed(versions)))[::-1]
        prefix = list(itertools.takewhile(failing.__contains__, versions))
        bounded: set[str] = set()
        for run, before, kind in (
            (suffix, versions[: len(versions) - len(suffix)], "below"),
            (prefix, versions[len(prefix) :][::-1], "above"),
        ):
            # A bound needs a trend (two releases) and a passing release on its other side.
            if len(run) < 2 or not before or before[-1] not in passed.get(package, set()):
                continue
            members = [r for v in run for r in single[(package, v)]]
            constraints.append(
                Constraint(
                    package=package,
                    specifier=f"<{run[0]}" if kind == "below" else f">{run[-1]}",
                    kind=kind,
                    versions=tuple(run),
                    evidence=_evidence(members),
                    passing=(before[-1],),
                )
            )
            bounded.update(run)
        for version in sorted(failing - bounded, key=version_order):
            constraints.append(
                Constraint(
                    package=package,
                    specifier=f"!={version}",
                    kind="exclude",
                    versions=(version,),
                    evidence=_evidence(single[(package, version)]),
                )
            )
    return constraints


def _pins(record: Record) -> dict[str, str | None]:
    return {str(canonicalize_name(k)): v for k, v in record.pins.items()}


def _neighbour_passes(
    passing: Sequence[Mapping[str, str | None]], pins: Mapping[str, str | None], package: str
) -> bool:
    """Does a passing cell hold ``pins`` with only ``package`` at another version?"""
    return any(
        other.get(package) != pins.get(package)
        and all(other.get(k) == v for k, v in pins.items() if k != package)
        and set(other) == set(pins)
        for other in passing
    )


def _nowhere(passing: Sequence[Mapping[str, str | None]], pattern: Mapping[str, Any]) -> bool:
    """True when no passing cell has every pin of ``pattern``."""
    return not any(all(pins.get(k, "-") == v for k, v in pattern.items()) for pins in passing)


def _evidence(records: Iterable[Record]) -> tuple[Evidence, ...]:
    unique = {(r.case, r.cell_label, r.cell_id): r for r in records}
    return tuple(Evidence.from_record(unique[k]) for k in sorted(unique))


def _line_order(constraint: Constraint) -> tuple[Any, ...]:
    kinds = ("above", "below", "exclude")
    when = [(k, "" if v is None else v) for k, v in constraint.when]
    return (
        bool(constraint.when),
        canonicalize_name(constraint.package),
        kinds.index(constraint.kind),
        version_order(constraint.versions[0]),
        when,
    )


def _pins_text(pins: Iterable[Pin]) -> str:
    return ", ".join(f"{k}=={v}" if v is not None else f"{k} not installed" for k, v in pins)


def _cases_text(evidence: Sequence[Evidence]) -> str:
    seen: dict[str, str] = {}
    for item in evidence:
        how = item.status
        if item.exception_type:
            how += f" {item.exception_type.rsplit('.', 1)[-1]}"
        if item.signature:
            how += f" [{item.signature[:8]}]"
        seen.setdefault(item.case, how)
    return ", ".join(f"{case} ({how})" for case, how in seen.items())


def _cells_text(evidence: Sequence[Evidence]) -> str:
    labels = sorted({e.cell_label for e in evidence})
    shown = ", ".join(labels[:LABELS_SHOWN])
    more = len(labels) - LABELS_SHOWN
    return shown + (f" and {more} more" if more > 0 else "")


def _file_name(text: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in text)


# -- Cap probes: is a declared cap justified? -------------------------------------------


@dataclass(frozen=True, kw_only=True)
class CapVerdict:
    """What the cap probes past one declared requirement show, per hardware class.

    ``justified``: some case breaks past the cap (a break, as above); ``raise_to``: every
    case judged passes past it, up to that version; neither: the probes gave no verdict
    (they did not install, or every case was skipped).
    """

    cap: str
    hardware: str
    justified: bool
    raise_to: str | None
    outcomes: tuple[tuple[str, str], ...]  # (operation, worst status) past the cap
    evidence: tuple[Evidence, ...]

    def render(self) -> str:
        past = ", ".join(f"{op} {status}" for op, status in self.outcomes) or "nothing ran"
        if self.justified:
            verdict = "cap justified"
        elif self.raise_to is not None:
            verdict = f"cap could be raised to {self.raise_to} (all cases pass)"
        else:
            verdict = "no verdict"
        return f"# {self.cap}  # {verdict}; past it: {past}; in {_cells_text(self.evidence)}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "cap": self.cap,
            "hardware": self.hardware,
            "justified": self.justified,
            "raise_to": self.raise_to,
            "outcomes": dict(self.outcomes),
            "evidence": [e.to_dict() for e in self.evidence],
        }


def derive_cap_verdicts(records: Iterable[Record]) -> list[CapVerdict]:
    """Per declared cap (a probe record's ``beyond_cap``) and hardware class, its verdict."""
    groups: dict[tuple[str, str], list[Record]] = {}
    for record in records:
        if record.beyond_cap:
            groups.setdefault((record.beyond_cap, record.hardware_class), []).append(record)
    verdicts = []
    for (cap, hardware), probes in sorted(groups.items()):
        judged = [r for r in probes if r.case != WHOLE_CELL and not r.flaky]
        broke = [r for r in judged if r.status.is_break]
        passed = [r for r in judged if r.status is Status.PASS]
        worst = _worst_per_operation(probes)
        raise_to = None
        if passed and not broke:
            raise_to = ", ".join(
                sorted({f"{name} {version}" for r in passed for name, version in _capped(r)})
            )
        verdicts.append(
            CapVerdict(
                cap=cap,
                hardware=hardware,
                justified=bool(broke),
                raise_to=raise_to or None,
                outcomes=tuple(sorted((op, s.value) for op, s in worst.items())),
                evidence=_evidence(broke or passed or probes),
            )
        )
    return verdicts


def _worst_per_operation(records: Iterable[Record]) -> dict[str, Status]:
    """Each operation's most severe status among ``records``."""
    worst: dict[str, Status] = {}
    for record in records:
        held = worst.get(record.operation)
        if held is None or record.status.severity > held.severity:
            worst[record.operation] = record.status
    return worst


def render_caps_text(verdicts: Sequence[CapVerdict]) -> str:
    """caps.txt: one commented line per cap, never a constraint (the cap is already one)."""
    header = [
        "# ftmatrix cap probes: cells installed past a declared requirement with uv's",
        "# overrides (matrix.yaml: probe-caps). Each line: the package that declares the cap,",
        "# whether the cases past it break (cap justified) or all pass (it could be raised).",
        "",
    ]
    return "\n".join([*header, *(v.render() for v in verdicts)]) + "\n"


def _capped(record: Record) -> list[tuple[str, str]]:
    """(package, version) overridden in a probe: named in its beyond_cap, pinned in its cell."""
    pins = {canonicalize_name(k): (k, v) for k, v in record.pins.items() if v is not None}
    found = []
    for part in (record.beyond_cap or "").split(";"):
        requirement = part.partition(":")[2].strip()
        name = canonicalize_name(_leading_name(requirement))
        if name in pins:
            found.append(pins[name])
    return found


def _leading_name(requirement: str) -> str:
    end = 0
    while end < len(requirement) and (requirement[end].isalnum() or requirement[end] in "-_."):
        end += 1
    return requirement[:end]
