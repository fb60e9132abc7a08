"""Proofs of known issues' ranges: the cells at an entry's boundaries, and what they showed.

An entry's ``affected`` and ``fixed-in`` are claims. For each package whose range it
states, the proof plans the cells at the boundaries (the release before the first
affected one, where the range has a lower bound; the first and the last affected
release; the first fixed one), the other packages held at ``proof.hold``, and judges each
cell by the entry's own signature: an affected cell must show it, a good one must not.
A cell that shows the opposite contradicts the entry and is named. Pure: the runner
(:mod:`ftmatrix.prove`) runs the cells and the store keeps the result.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from ftmatrix.cell.record import Record
from ftmatrix.cell.status import Status
from ftmatrix.history_checks import proof_problem
from ftmatrix.known_issues import KnownIssue, cell_statuses

# What a cell shows of an entry: its signature (fails), its cases all passing (passes), or
# its cases failing some other way (fails otherwise: not this entry, so not affected by it).
FAILS, PASSES, OTHERWISE = "fails", "passes", "fails otherwise"
_CLEAR = (PASSES, OTHERWISE)


@dataclass(frozen=True, kw_only=True)
class BoundaryCell:
    """One cell a proof runs: the package moved to ``version``, what the entry claims there."""

    package: str
    version: str
    claim: str  # FAILS (affected) or PASSES (before the range, or fixed)
    pins: Mapping[str, str | None] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class CellVerdict:
    """What one boundary cell showed against the entry's claim there."""

    cell: BoundaryCell
    label: str
    observed: str  # FAILS (the entry's signature fits), PASSES (its cases pass), or why not

    @property
    def agrees(self) -> bool:
        if self.cell.claim == FAILS:
            return self.observed == FAILS
        return self.observed in _CLEAR

    @property
    def contradicts(self) -> bool:
        # Only a clear opposite contradicts: a cell that did not run proves nothing.
        if self.cell.claim == FAILS:
            return self.observed in _CLEAR
        return self.observed == FAILS

    def to_dict(self) -> dict[str, Any]:
        return {
            "package": self.cell.package,
            "version": self.cell.version,
            "claim": self.cell.claim,
            "pins": dict(self.cell.pins),
            "label": self.label,
            "observed": self.observed,
        }

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> CellVerdict:
        cell = BoundaryCell(
            package=str(data["package"]),
            version=str(data["version"]),
            claim=str(data["claim"]),
            pins=dict(data.get("pins") or {}),
        )
        return cls(cell=cell, label=str(data["label"]), observed=str(data["observed"]))


@dataclass(frozen=True, kw_only=True)
class EntryProof:
    """A proof of one entry as the history keeps it."""

    entry: str
    date: str  # YYYY-MM-DD
    ftmatrix_version: str
    cells: tuple[CellVerdict, ...]
    claim: str = ""  # the claim it was made for (claim_key): another claim needs a new proof

    @property
    def verdict(self) -> str:
        """proven (every cell agrees), contradicted (a cell shows the opposite), or inconclusive."""
        if any(c.contradicts for c in self.cells):
            return "contradicted"
        return "proven" if self.cells and all(c.agrees for c in self.cells) else "inconclusive"

    @property
    def contradicting(self) -> tuple[CellVerdict, ...]:
        return tuple(c for c in self.cells if c.contradicts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "entry": self.entry,
            "date": self.date,
            "ftmatrix_version": self.ftmatrix_version,
            "claim": self.claim,
            "verdict": self.verdict,
            "cells": [c.to_dict() for c in self.cells],
        }

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> EntryProof:
        return cls(
            entry=str(data["entry"]),
            date=str(data["date"]),
            ftmatrix_version=str(data.get("ftmatrix_version") or ""),
            cells=tuple(CellVerdict.from_mapping(c) for c in data.get("cells") or ()),
            claim=str(data.get("claim") or ""),
        )


def entry_proofs(stored: Mapping[str, Mapping[str, Any]]) -> dict[str, EntryProof]:
    """The history's proofs (entry id -> its stored mapping) as values; one an earlier
    ftmatrix kept though damaged is left out (a proof is checked before it is kept now),
    never a traceback on every report after."""
    return {
        entry: EntryProof.from_mapping(data)
        for entry, data in stored.items()
        if proof_problem(data) is None
    }


class NotProvable(ValueError):
    """An entry whose boundaries cannot be planned (said why, in one line)."""


def claim_key(entry: KnownIssue) -> str:
    """The claim a proof is of: the entry's ranges and fixed releases, as text."""
    affected = ",".join(f"{p}{s}" for p, s in sorted(entry.affected.items()) if s is not None)
    fixed = ",".join(f"{p}=={v}" for p, v in sorted(entry.fixed_in.items()))
    return f"affected {affected or '-'}; fixed {fixed or '-'}"


def unprovable_reason(entry: KnownIssue, hardware_class: str = "cpu") -> str | None:
    """Why ``entry`` cannot be proven by cells of ``hardware_class``, or None where it can."""
    hardware = entry.proof.hardware
    if hardware != hardware_class:
        return (
            f"needs {hardware}"
            if hardware.endswith("GPUs")
            else (f"needs {_article(hardware)} {hardware} GPU")
        )
    if entry.proof.note:
        return entry.proof.note
    if not entry.proof.cases:
        return "no cases named to prove it with (proof.cases)"
    if not any(spec is not None for spec in entry.affected.values()):
        return "no affected range established"
    return None


def plan_boundaries(
    entry: KnownIssue, releases: Callable[[str], Sequence[str]], *, hardware: str = "cpu"
) -> tuple[BoundaryCell, ...]:
    """The cells at ``entry``'s boundaries, for each package whose range it states.

    ``releases(package)`` lists the package's releases; pre-releases are left out.
    """
    why = unprovable_reason(entry, hardware)
    if why is not None:
        raise NotProvable(f"{entry.id}: cannot be proven here: {why}")
    cells: list[BoundaryCell] = []
    for package, spec in entry.affected.items():
        if spec is None or (entry.proof.vary and package not in entry.proof.vary):
            continue
        held = _held_for(entry, package)
        seen: set[str] = set()
        for version, claim in _boundaries(entry, package, spec, releases(package)):
            if str(version) not in seen:
                seen.add(str(version))
                pins = {**held, package: str(version)}
                cells.append(
                    BoundaryCell(package=package, version=str(version), claim=claim, pins=pins)
                )
    return tuple(cells)


def _held_for(entry: KnownIssue, package: str) -> dict[str, str | None]:
    """proof.hold less ``package``; every other affected package must be held affected."""
    held = {k: v for k, v in entry.proof.hold.items() if k != package}
    for other, other_spec in entry.affected.items():
        if other == package or other_spec is None:
            continue
        version = held.get(other)
        if version is None or not other_spec.contains(Version(version), prereleases=True):
            raise NotProvable(
                f"{entry.id}: proof.hold.{other} must be an affected release "
                f"({other}{other_spec}) to move {package} alone"
            )
    return held


def _boundaries(
    entry: KnownIssue, package: str, spec: SpecifierSet, listed: Sequence[str]
) -> list[tuple[Version, str]]:
    """(version, claim) at each boundary of ``package``'s range, oldest first."""
    ordered = sorted(Version(v) for v in listed if not Version(v).is_prerelease)
    floor = entry.proof.oldest.get(package)
    if floor is not None:
        ordered = [v for v in ordered if v >= Version(floor)]
    inside = [v for v in ordered if spec.contains(v)]
    if not inside:
        raise NotProvable(f"{entry.id}: no release of {package} is in {package}{spec}")
    wanted: list[tuple[Version, str]] = []
    before = [v for v in ordered if v < inside[0]]
    if before and _has_lower_bound(str(spec)):
        wanted.append((before[-1], PASSES))
    wanted += [(inside[0], FAILS), (inside[-1], FAILS)]
    if package in entry.fixed_in:
        fixed_at = Version(entry.fixed_in[package])
        last_before_fix = [v for v in inside if v < fixed_at]
        if last_before_fix:
            wanted[-1] = (last_before_fix[-1], FAILS)
        wanted.append((fixed_at, PASSES))
    return wanted


def observe(entry: KnownIssue, records: Sequence[Record]) -> str:
    """What one cell's records of the entry's cases show: FAILS where the entry's signature
    fits one of them, PASSES where all passed, OTHERWISE where they failed another way."""
    ran = [r for r in records if r.status is Status.PASS or r.status.is_break]
    if not ran:
        shown = ", ".join(sorted({r.status.value for r in records})) or "no records"
        return f"did not run its cases ({shown})"
    cells = cell_statuses(records)
    # The shape alone: the claimed range is what the proof tests, so it cannot be asked.
    if any(entry.matches(r, cells.get(r.cell_id, {}), in_range=False) for r in ran):
        return FAILS
    return PASSES if all(r.status is Status.PASS for r in ran) else OTHERWISE


def claim_text(entry: KnownIssue, proof: EntryProof | None, *, hardware: str = "cpu") -> str:
    """The range as the report and check say it: proven, contradicted, or only claimed.

    A proof made for another claim than the entry's now counts as none."""
    fixed = ", ".join(f"{p} {v}" for p, v in entry.fixed_in.items())
    affected = ", ".join(f"{p}{s}" for p, s in entry.affected.items() if s is not None)
    claim = f"fixed in {fixed}" if fixed else f"affects {affected or 'an unestablished range'}"
    why = unprovable_reason(entry, hardware)
    if proof is not None and proof.claim and proof.claim != claim_key(entry):
        proof = None
    if proof is None:
        return f"{claim} (claimed, not proven: {why or 'no proof run yet'})"
    if proof.verdict == "contradicted":
        against = "; ".join(
            f"{c.cell.package} {c.cell.version} {c.observed} in {c.label}"
            for c in proof.contradicting
        )
        return f"{claim} (contradicted {proof.date}: {against})"
    # The package beside each version where the proof moved more than one.
    named = len({c.cell.package for c in proof.cells}) > 1

    def where(c: CellVerdict) -> str:
        return f"{c.cell.package} {c.cell.version}" if named else c.cell.version

    seen = ", ".join(f"{where(c)} {c.observed}" for c in proof.cells if c.agrees)
    if proof.verdict == "proven":
        return f"{claim} (proven {proof.date}: {seen})"
    return f"{claim} (not proven {proof.date}: " + (
        "; ".join(f"{where(c)} {c.observed}" for c in proof.cells if not c.agrees) + ")"
    )


def _has_lower_bound(spec: str) -> bool:
    return any(part.strip().startswith((">", "==", "~=")) for part in spec.split(","))


def _article(word: str) -> str:
    return "an" if word[:1].lower() in "aefhilmnorsx" else "a"
