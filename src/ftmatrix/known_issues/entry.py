"""A known issue's entry, and the failures it explains (pure).

:mod:`ftmatrix.known_issues` says what an entry's signature is; its YAML is read and
validated by :mod:`ftmatrix.known_issues.parsing`.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from ftmatrix.cell.record import Record
from ftmatrix.cell.status import Status

BROKEN_LINE = re.compile(r"^contracts broken: (.+)$", re.MULTILINE)
CONTRACT_METRIC = "_contract"


@dataclass(frozen=True, kw_only=True)
class Proof:
    """How an entry's range is proven: on which hardware, the other packages held where."""

    hardware: str = "cpu"
    cases: tuple[str, ...] = ()  # case ids under the cases folder, as matrix.yaml's cases:
    hold: Mapping[str, str | None] = field(default_factory=dict)
    support: tuple[str, ...] = ()  # installed at what the resolver picks, as matrix.yaml's
    vary: tuple[str, ...] = ()  # the packages whose boundaries are run (default: every range)
    oldest: Mapping[str, str] = field(default_factory=dict)  # no older release is planned
    note: str | None = None  # why it cannot be proven here, where it cannot


@dataclass(frozen=True, kw_only=True)
class KnownIssue:
    """One upstream problem, its owning report, and the shape of the failure it causes."""

    id: str
    title: str
    package: str
    upstream: str | None  # None: no report in the owning repository exists (see seen_in)
    fix: str | None = None
    seen_in: tuple[str, ...] = ()
    repository: str | None = None  # the owning repository (ftmatrix.repositories)
    signatures: tuple[str, ...] = ()
    exception: re.Pattern[str] | None = None
    message: re.Pattern[str] | None = None
    frame: re.Pattern[str] | None = None  # matched at the start of where it broke
    packages: Mapping[str, SpecifierSet] = field(default_factory=dict)
    cases: tuple[str, ...] = ()
    failing_contracts: tuple[str, ...] = ()
    holding_contracts: tuple[str, ...] = ()
    parametrizations: Mapping[str, str] = field(default_factory=dict)
    affected: Mapping[str, SpecifierSet | None] = field(default_factory=dict)
    fixed_in: Mapping[str, str] = field(default_factory=dict)
    workaround: str | None = None
    proof: Proof = field(default_factory=Proof)

    def matches(
        self,
        record: Record,
        siblings: Mapping[str, Status] | None = None,
        *,
        in_range: bool = True,
    ) -> bool:
        """Does this entry explain ``record``'s failure? ``siblings``: the statuses of the
        other cases of the record's cell (case id -> status), for the parametrisation rule.
        ``in_range=False`` asks only whether the failure has the entry's shape, wherever the
        packages are: how a proof tests the claimed range itself."""
        if not record.status.is_break:  # never our case's error, never a status without a run
            return False
        if record.signature and record.signature in self.signatures:
            return True
        return (
            self._patterns_match(record)
            and (not in_range or self._packages_match(record))
            and self._case_matches(record)
            and self._contracts_fit(record)
            and self._parametrizations_fit(record, siblings or {})
        )

    def _patterns_match(self, record: Record) -> bool:
        if self.exception is None and self.message is None:
            return False
        # The frame where it broke (the root cause's), never the importer that re-raised
        # it: two breaks with one message in different files stay apart.
        broke_at = record.root_frame or record.framework_frame or ""
        if self.frame is not None and not self.frame.match(broke_at):
            return False
        # The raised error or its root cause: a pattern written for either matches
        # both the wrapped and the unwrapped report of one break.
        sides = [
            (record.exception_type, record.message),
            (record.root_exception_type, record.root_message),
        ]
        return any(
            (self.exception is None or bool(self.exception.search(kind or "")))
            and (self.message is None or bool(self.message.search(message or "")))
            for kind, message in sides
            if kind or message
        )

    def _packages_match(self, record: Record) -> bool:
        installed = {canonicalize_name(k): v for k, v in record.packages.items()}
        for package, spec in self.packages.items():
            version = installed.get(canonicalize_name(package))
            if version is None or not spec.contains(Version(version), prereleases=True):
                return False
        return True

    def _case_matches(self, record: Record) -> bool:
        function, _ = case_parts(record.case)
        return not self.cases or any(fnmatch.fnmatchcase(function, c) for c in self.cases)

    def _contracts_fit(self, record: Record) -> bool:
        verdicts = contract_verdicts(record)
        if not verdicts:  # a case that names no contracts: message and parametrisations decide
            return True
        # A contract the case does not check (SFT's exact update has no accumulation k
        # against 1) cannot contradict the shape; one it checked and kept does.
        return all(verdicts.get(c, "fail") == "fail" for c in self.failing_contracts) and all(
            verdicts.get(c) != "fail" for c in self.holding_contracts
        )

    def _parametrizations_fit(self, record: Record, siblings: Mapping[str, Status]) -> bool:
        if not self.parametrizations:
            return True
        function, own = case_parts(record.case)
        # The rule is about the parametrisations it names: a case whose own parameter is
        # none of them (a knob case's accumulation=2-...) is judged by its contracts alone.
        if own is None or not any(fnmatch.fnmatchcase(own, p) for p in self.parametrizations):
            return True
        statuses = {own: record.status.value}
        for case, status in siblings.items():
            other_function, parameter = case_parts(case)
            if other_function == function and parameter is not None and parameter != own:
                statuses[parameter] = status.value
        for pattern, wanted in self.parametrizations.items():
            seen = [s for p, s in statuses.items() if fnmatch.fnmatchcase(p, pattern)]
            # A parametrisation that did not run cannot show the shape: no claim.
            if not seen or any(s != wanted for s in seen):
                return False
        return True

    @property
    def reported(self) -> str:
        """Where to follow it: the owning report, or that none exists and where it was seen."""
        if self.upstream:
            return self.upstream
        seen = f"; seen in {', '.join(self.seen_in)}" if self.seen_in else ""
        return f"no report in {self.repository or self.package} found{seen}"

    def still_failing_after_fix(self, record: Record) -> list[str]:
        """Packages at or past their 'fixed in' release in a record this entry explains."""
        installed = {canonicalize_name(k): v for k, v in record.packages.items()}
        late = []
        for package, fixed in self.fixed_in.items():
            version = installed.get(canonicalize_name(package))
            if version is not None and Version(version) >= Version(fixed):
                late.append(f"{package} {version} (fixed in {fixed})")
        return late

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "title": self.title,
            "package": self.package,
            "upstream": self.upstream,
            "reported": self.reported,
            "fix": self.fix,
            "seen_in": list(self.seen_in),
            "affected": {k: None if v is None else str(v) for k, v in self.affected.items()},
            "fixed_in": dict(self.fixed_in),
            "workaround": self.workaround,
        }


def case_parts(case: str) -> tuple[str, str | None]:
    """``cases/test_x.py::test_f[accumulation-2]`` -> ``("test_f", "accumulation-2")``."""
    name = case.rsplit("::", 1)[-1]
    if name.endswith("]") and "[" in name:
        function, parameter = name[:-1].split("[", 1)
        return function, parameter
    return name, None


def contract_verdicts(record: Record) -> dict[str, str]:
    """Each contract the record names and its verdict (``pass``, ``fail``, ``unverified: ...``):
    its ``<name>_contract`` metrics, else the names on its message's ``contracts broken:`` line."""
    verdicts = {
        key[: -len(CONTRACT_METRIC)]: str(value)
        for key, value in record.metrics.items()
        if key.endswith(CONTRACT_METRIC) and isinstance(value, str)
    }
    if verdicts:
        return verdicts
    for message in (record.message, record.root_message):
        found = BROKEN_LINE.search(message or "")
        if found:
            return {name.strip(): "fail" for name in found[1].split(",") if name.strip()}
    return {}


def cell_statuses(records: Iterable[Record]) -> dict[str, dict[str, Status]]:
    """cell id -> case id -> status: what the parametrisation rule reads of a cell."""
    cells: dict[str, dict[str, Status]] = {}
    for record in records:
        cells.setdefault(record.cell_id, {})[record.case] = record.status
    return cells


def explain_all(
    record: Record,
    known: Sequence[KnownIssue],
    cells: Mapping[str, Mapping[str, Status]] | None = None,
) -> tuple[KnownIssue, ...]:
    """Every entry whose signature fits ``record``'s failure (``cells``: :func:`cell_statuses`
    of the records beside it); empty: unexplained."""
    siblings = (cells or {}).get(record.cell_id, {})
    return tuple(entry for entry in known if entry.matches(record, siblings))


def explain(
    record: Record,
    known: Sequence[KnownIssue],
    cells: Mapping[str, Mapping[str, Status]] | None = None,
) -> KnownIssue | None:
    """The first entry that explains ``record``, or None: an unexplained failure."""
    found = explain_all(record, known, cells)
    return found[0] if found else None
