"""known_issues.yaml: failures explained by the owning project's report, matched by shape.

An entry names the package whose code is at fault (``package``), that project's own
report (``upstream``: an issue or pull request in the package's repository, per
:mod:`ftmatrix.repositories`), the change that fixed it (``fix``) and where else it was
discussed (``seen-in``). It explains a failed record only where its whole signature fits:

- the exception and message patterns (the message names the quantity a contract
  compared) and the frame where it broke (the root cause's innermost framework frame);
- the installed packages (``match.packages``, by default the ``affected`` ranges);
- the case functions it is about (``match.cases``, globs);
- which contracts fail and which hold (``match.contracts``), read from the record's
  ``<name>_contract`` metrics or its message's ``contracts broken:`` line, where the case
  names its contracts;
- which parametrisations of the case fail together in the same cell and which pass
  (``match.parametrizations``: ``{accumulation-1: pass, accumulation-2: fail}``).

A failure that fits no entry stays unexplained; one that fits several is shown under
each. ``affected`` and ``fixed-in`` are claims until ``ftmatrix known-issues prove``
runs the cells at their boundaries (:mod:`ftmatrix.proofs`).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from ftmatrix.cell.records import Record
from ftmatrix.cell.status import Status
from ftmatrix.config import ConfigError
from ftmatrix.repositories import (
    fix_repository,
    is_repository,
    report_repository,
    repository_table,
    same_repository,
)
from ftmatrix.yaml_file import parse_yaml, read_yaml_text

FILE_KEYS = ("repositories", "issues")
ENTRY_KEYS = (
    "id",
    "title",
    "package",
    "upstream",
    "fix",
    "seen-in",
    "match",
    "affected",
    "fixed-in",
    "workaround",
    "proof",
)
MATCH_KEYS = (
    "signatures",
    "exception",
    "message",
    "frame",
    "packages",
    "cases",
    "contracts",
    "parametrizations",
)
CONTRACT_KEYS = ("fail", "pass")
PROOF_KEYS = ("hardware", "cases", "hold", "support", "vary", "oldest", "note")
SIBLING_STATUSES = ("pass", "fail")
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


def load_known_issues(path: Path) -> tuple[KnownIssue, ...]:
    """Read and validate ``path``; a missing file means no known issues."""
    if not path.exists():
        return ()
    raw = parse_yaml(read_yaml_text(path), source=str(path))
    return parse_known_issues(raw, source=str(path))


def parse_known_issues(raw: Any, *, source: str) -> tuple[KnownIssue, ...]:
    """Validate parsed YAML (a list of entries, or ``{repositories: ..., issues: [...]}``);
    every problem is reported, with its key path."""
    if raw is None:
        return ()
    problems: list[str] = []
    added: dict[str, str] = {}
    if isinstance(raw, dict):
        problems += [
            f"{source}: {k}: unknown key; allowed: {', '.join(FILE_KEYS)}"
            for k in raw
            if k not in FILE_KEYS
        ]
        for package, repository in (raw.get("repositories") or {}).items():
            if not isinstance(repository, str) or not is_repository(repository):
                problems.append(
                    f"{source}: repositories.{package}: {repository!r} is not a GitHub "
                    "repository (owner/name)"
                )
            else:
                added[str(package)] = repository
        raw = raw.get("issues") or []
    if not isinstance(raw, list):
        raise ConfigError([f"{source}: must be a list of entries, got {type(raw).__name__}"])
    table = repository_table(added)
    entries = []
    seen: set[str] = set()
    for i, item in enumerate(raw):
        entry = _parse_entry(item, f"{source}: [{i}]", seen, table, problems)
        if entry is not None:
            entries.append(entry)
    if problems:
        raise ConfigError(problems)
    return tuple(entries)


def _parse_entry(
    item: Any, at: str, seen: set[str], table: Mapping[str, str], problems: list[str]
) -> KnownIssue | None:
    if not isinstance(item, dict):
        problems.append(f"{at}: must be a mapping with {', '.join(ENTRY_KEYS)}")
        return None
    problems += [
        f"{at}.{k}: unknown key; allowed: {', '.join(ENTRY_KEYS)}"
        for k in item
        if k not in ENTRY_KEYS
    ]
    entry_id = str(item.get("id") or "")
    if not entry_id:
        problems.append(f"{at}.id: missing")
    elif entry_id in seen:
        problems.append(f"{at}.id: {entry_id!r} is used by an earlier entry")
    seen.add(entry_id)
    for key in ("title", "package"):
        if not isinstance(item.get(key), str) or not item[key]:
            problems.append(f"{at}.{key}: missing or not text")
    # null is a finding too ("no report found"), shown as such: never a guessed link.
    if "upstream" not in item:
        problems.append(
            f"{at}.upstream: missing (the owning project's report; null only where none "
            "exists, with the threads that do, if any, under seen-in)"
        )
    workaround = item.get("workaround")
    if workaround is not None and (not isinstance(workaround, str) or not workaround.strip()):
        problems.append(f"{at}.workaround: must be text (what to do instead), got {workaround!r}")
    package = canonicalize_name(str(item.get("package") or ""))
    affected = _affected(item.get("affected"), at, problems)
    fixed_in = _fixed_in(item.get("fixed-in"), at, affected, problems)
    _check_links(item, at, package=package, fixed_in=fixed_in, table=table, problems=problems)
    match = item.get("match") or {}
    if not isinstance(match, dict) or not match:
        problems.append(f"{at}.match: must name signatures or an exception/message pattern")
        return None
    problems += [
        f"{at}.match.{k}: unknown key; allowed: {', '.join(MATCH_KEYS)}"
        for k in match
        if k not in MATCH_KEYS
    ]
    patterns = _patterns(match, at, problems)
    packages: dict[str, SpecifierSet] = {}
    for name, spec in (match.get("packages") or {}).items():
        try:
            packages[str(name)] = SpecifierSet(str(spec))
        except InvalidSpecifier:
            problems.append(f"{at}.match.packages.{name}: {spec!r} is not a specifier")
    if "packages" not in match:  # the claimed range is where the entry explains
        packages = {k: v for k, v in affected.items() if v is not None}
    failing, holding = _contracts(match.get("contracts"), at, problems)
    return KnownIssue(
        id=entry_id,
        title=str(item.get("title", "")),
        package=package,
        upstream=item["upstream"] if isinstance(item.get("upstream"), str) else None,
        fix=item.get("fix") if isinstance(item.get("fix"), str) else None,
        repository=table.get(package),
        seen_in=tuple(str(s) for s in item.get("seen-in") or ()),
        signatures=tuple(str(s) for s in match.get("signatures") or ()),
        exception=patterns.get("exception"),
        message=patterns.get("message"),
        frame=patterns.get("frame"),
        packages=packages,
        cases=_strings(match.get("cases"), f"{at}.match.cases", problems),
        failing_contracts=failing,
        holding_contracts=holding,
        parametrizations=_parametrizations(match.get("parametrizations"), at, problems),
        affected=affected,
        fixed_in=fixed_in,
        workaround=item.get("workaround"),
        proof=_proof(item.get("proof"), at, problems),
    )


def _check_links(
    item: Mapping[str, Any],
    at: str,
    *,
    package: str,
    fixed_in: Mapping[str, str],
    table: Mapping[str, str],
    problems: list[str],
) -> None:
    """``upstream`` in the owning repository, ``fix`` there or in a fixed package's,
    ``seen-in`` any https links."""
    owner = table.get(package)
    if package and owner is None:
        problems.append(
            f"{at}.package: {package!r} has no repository in the table; add it under "
            f"repositories: (known: {', '.join(sorted(table))})"
        )
    upstream = item.get("upstream")
    if upstream is not None and not isinstance(upstream, str):
        problems.append(f"{at}.upstream: must be a URL or null, got {upstream!r}")
    if isinstance(upstream, str) and upstream:
        where = report_repository(upstream)
        if where is None:
            problems.append(
                f"{at}.upstream: {upstream[:100]!r} is not a GitHub issue or pull request URL"
            )
        elif owner is not None and not same_repository(where, owner):
            problems.append(
                f"{at}.upstream: {upstream} is in {where}, not in {owner} (the repository of "
                f"{package}, whose code is at fault); put other threads under seen-in"
            )
    fix = item.get("fix")
    if fix is not None:
        fixers = {table[p] for p in (package, *map(canonicalize_name, fixed_in)) if p in table}
        where = fix_repository(fix) if isinstance(fix, str) else None
        if where is None:
            problems.append(
                f"{at}.fix: {str(fix)[:100]!r} is not a GitHub pull request or commit URL"
            )
        elif fixers and not any(same_repository(where, r) for r in fixers):
            problems.append(
                f"{at}.fix: {fix} is in {where}, not in {', '.join(sorted(fixers))} (the "
                "faulty or the fixed package's repository)"
            )
    seen_in = item.get("seen-in") or []
    if not isinstance(seen_in, list):
        problems.append(f"{at}.seen-in: must be a list of links")
        return
    for i, link in enumerate(seen_in):
        if not isinstance(link, str) or not re.fullmatch(r"https://\S+", link):
            problems.append(f"{at}.seen-in[{i}]: {str(link)[:100]!r} is not an https URL")


def _affected(raw: Any, at: str, problems: list[str]) -> dict[str, SpecifierSet | None]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        problems.append(f"{at}.affected: must map packages to version ranges, got {raw!r}")
        return {}
    affected: dict[str, SpecifierSet | None] = {}
    for package, spec in raw.items():
        if spec is None:  # not established: said so, never guessed
            affected[str(package)] = None
            continue
        try:
            affected[str(package)] = SpecifierSet(str(spec))
        except InvalidSpecifier:
            problems.append(
                f"{at}.affected.{package}: {spec!r} is not a version range (e.g. "
                "'>=4.46.0,<4.47.0'; null where it is not established)"
            )
    return affected


def _fixed_in(
    raw: Any, at: str, affected: Mapping[str, SpecifierSet | None], problems: list[str]
) -> dict[str, str]:
    fixed_in: dict[str, str] = {}
    for package, version in (raw or {}).items():
        try:
            parsed = Version(str(version))
        except InvalidVersion:
            problems.append(f"{at}.fixed-in.{package}: {version!r} is not a version")
            continue
        spec = affected.get(str(package))
        if spec is not None and spec.contains(parsed, prereleases=True):
            problems.append(
                f"{at}.fixed-in.{package}: {version} is inside affected {package}{spec}"
            )
        fixed_in[str(package)] = str(version)
    return fixed_in


def _strings(raw: Any, at: str, problems: list[str]) -> tuple[str, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(s, str) and s for s in raw):
        problems.append(f"{at}: must be a list of names, got {raw!r}")
        return ()
    return tuple(raw)


def _contracts(raw: Any, at: str, problems: list[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    if raw is None:
        return (), ()
    if not isinstance(raw, dict):
        problems.append(f"{at}.match.contracts: must be {{fail: [...], pass: [...]}}, got {raw!r}")
        return (), ()
    problems += [
        f"{at}.match.contracts.{k}: unknown key; allowed: {', '.join(CONTRACT_KEYS)}"
        for k in raw
        if k not in CONTRACT_KEYS
    ]
    failing = _strings(raw.get("fail"), f"{at}.match.contracts.fail", problems)
    holding = _strings(raw.get("pass"), f"{at}.match.contracts.pass", problems)
    both = sorted(set(failing) & set(holding))
    if both:
        problems.append(f"{at}.match.contracts: {', '.join(both)} both fail and pass")
    return failing, holding


def _parametrizations(raw: Any, at: str, problems: list[str]) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        problems.append(f"{at}.match.parametrizations: must map parameter ids to pass or fail")
        return {}
    wanted = {}
    for parameter, status in raw.items():
        if status not in SIBLING_STATUSES:
            problems.append(
                f"{at}.match.parametrizations.{parameter}: {status!r}; allowed: "
                f"{', '.join(SIBLING_STATUSES)}"
            )
        else:
            wanted[str(parameter)] = str(status)
    return wanted


def _proof(raw: Any, at: str, problems: list[str]) -> Proof:
    if raw is None:
        return Proof()
    if not isinstance(raw, dict):
        problems.append(f"{at}.proof: must be a mapping with {', '.join(PROOF_KEYS)}")
        return Proof()
    problems += [
        f"{at}.proof.{k}: unknown key; allowed: {', '.join(PROOF_KEYS)}"
        for k in raw
        if k not in PROOF_KEYS
    ]
    hold = raw.get("hold") or {}
    if not isinstance(hold, dict):
        problems.append(f"{at}.proof.hold: must map packages to versions (or none)")
        hold = {}
    held: dict[str, str | None] = {}
    for package, version in hold.items():
        if version in (None, "none"):
            held[str(package)] = None
            continue
        try:
            Version(str(version))
            held[str(package)] = str(version)
        except InvalidVersion:
            problems.append(f"{at}.proof.hold.{package}: {version!r} is not a version or none")
    oldest: dict[str, str] = {}
    for package, version in (raw.get("oldest") or {}).items():
        try:
            oldest[str(package)] = str(Version(str(version)))
        except InvalidVersion:
            problems.append(f"{at}.proof.oldest.{package}: {version!r} is not a version")
    return Proof(
        hardware=str(raw.get("hardware") or "cpu"),
        oldest=oldest,
        cases=_strings(raw.get("cases"), f"{at}.proof.cases", problems),
        support=_strings(raw.get("support"), f"{at}.proof.support", problems),
        vary=_strings(raw.get("vary"), f"{at}.proof.vary", problems),
        hold=held,
        note=str(raw["note"]) if raw.get("note") else None,
    )


def _patterns(match: Mapping[str, Any], at: str, problems: list[str]) -> dict[str, re.Pattern[str]]:
    patterns = {}
    for key in ("exception", "message", "frame"):
        if match.get(key) is None:
            continue
        try:
            patterns[key] = re.compile(str(match[key]))
        except re.error as exc:
            problems.append(f"{at}.match.{key}: {match[key]!r} is not a valid pattern: {exc}")
    return patterns
