"""known_issues.yaml: failures we can explain, linked to their upstream reports.

An entry matches a record by error signature, or by exception type and message
patterns plus the package ranges installed in the cell (and optionally the
framework frame). The report links each failure group to its entry, marks the
groups no entry explains as new, and flags an entry whose "fixed in" release
still fails.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from ftmatrix.cell.records import Record
from ftmatrix.config import ConfigError
from ftmatrix.yaml_file import parse_yaml, read_yaml_text

ENTRY_KEYS = ("id", "title", "upstream", "match", "affected", "fixed-in", "workaround")
MATCH_KEYS = ("signatures", "exception", "message", "frame", "packages")


@dataclass(frozen=True, kw_only=True)
class KnownIssue:
    """One upstream problem and how to recognise it in a record."""

    id: str
    title: str
    upstream: str
    signatures: tuple[str, ...] = ()
    exception: re.Pattern[str] | None = None
    message: re.Pattern[str] | None = None
    frame: str | None = None
    packages: Mapping[str, SpecifierSet] = field(default_factory=dict)
    affected: Mapping[str, str | None] = field(default_factory=dict)
    fixed_in: Mapping[str, str] = field(default_factory=dict)
    workaround: str | None = None

    def matches(self, record: Record) -> bool:
        """Does this entry explain ``record``'s failure?"""
        if record.signature and record.signature in self.signatures:
            return True
        return self._patterns_match(record) and self._packages_match(record)

    def _patterns_match(self, record: Record) -> bool:
        if self.exception is None and self.message is None:
            return False
        # The raised error or its root cause: a pattern written for either matches
        # both the wrapped and the unwrapped report of one break.
        sides = [
            (record.exception_type, record.message, record.framework_frame),
            (record.root_exception_type, record.root_message, record.root_frame),
        ]
        return any(
            all(
                [
                    self.exception is None or bool(self.exception.search(kind or "")),
                    self.message is None or bool(self.message.search(message or "")),
                    self.frame is None or (frame or "").startswith(self.frame),
                ]
            )
            for kind, message, frame in sides
            if kind or message
        )

    def _packages_match(self, record: Record) -> bool:
        installed = {canonicalize_name(k): v for k, v in record.packages.items()}
        for package, spec in self.packages.items():
            version = installed.get(canonicalize_name(package))
            if version is None or not spec.contains(Version(version), prereleases=True):
                return False
        return True

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
            "upstream": self.upstream,
            "affected": dict(self.affected),
            "fixed_in": dict(self.fixed_in),
            "workaround": self.workaround,
        }


def load_known_issues(path: Path) -> tuple[KnownIssue, ...]:
    """Read and validate ``path``; a missing file means no known issues."""
    if not path.exists():
        return ()
    raw = parse_yaml(read_yaml_text(path), source=str(path))
    return parse_known_issues(raw, source=str(path))


def parse_known_issues(raw: Any, *, source: str) -> tuple[KnownIssue, ...]:
    """Validate parsed YAML; every problem is reported, with its key path."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ConfigError([f"{source}: must be a list of entries, got {type(raw).__name__}"])
    problems: list[str] = []
    entries = []
    seen: set[str] = set()
    for i, item in enumerate(raw):
        entry = _parse_entry(item, f"{source}: [{i}]", seen, problems)
        if entry is not None:
            entries.append(entry)
    if problems:
        raise ConfigError(problems)
    return tuple(entries)


def _parse_entry(item: Any, at: str, seen: set[str], problems: list[str]) -> KnownIssue | None:
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
    for key in ("title", "upstream"):
        if not isinstance(item.get(key), str) or not item[key]:
            problems.append(f"{at}.{key}: missing or not text")
    workaround = item.get("workaround")
    if workaround is not None and (not isinstance(workaround, str) or not workaround.strip()):
        problems.append(f"{at}.workaround: must be text (what to do instead), got {workaround!r}")
    upstream = item.get("upstream")
    if isinstance(upstream, str) and upstream and not re.fullmatch(r"https?://\S+", upstream):
        # Published as a link on the report and in the job summary.
        problems.append(f"{at}.upstream: {upstream[:80]!r} is not an http(s) URL")
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
    packages = {}
    for package, spec in (match.get("packages") or {}).items():
        try:
            packages[str(package)] = SpecifierSet(str(spec))
        except InvalidSpecifier:
            problems.append(f"{at}.match.packages.{package}: {spec!r} is not a specifier")
    fixed_in = {}
    for package, version in (item.get("fixed-in") or {}).items():
        try:
            Version(str(version))
            fixed_in[str(package)] = str(version)
        except InvalidVersion:
            problems.append(f"{at}.fixed-in.{package}: {version!r} is not a version")
    return KnownIssue(
        id=entry_id,
        title=str(item.get("title", "")),
        upstream=str(item.get("upstream", "")),
        signatures=tuple(str(s) for s in match.get("signatures") or ()),
        exception=patterns.get("exception"),
        message=patterns.get("message"),
        frame=match.get("frame"),
        packages=packages,
        affected={
            str(k): (None if v is None else str(v)) for k, v in (item.get("affected") or {}).items()
        },
        fixed_in=fixed_in,
        workaround=item.get("workaround"),
    )


def _patterns(match: Mapping[str, Any], at: str, problems: list[str]) -> dict[str, re.Pattern[str]]:
    patterns = {}
    for key in ("exception", "message"):
        if match.get(key) is None:
            continue
        try:
            patterns[key] = re.compile(str(match[key]))
        except re.error as exc:
            problems.append(f"{at}.match.{key}: {match[key]!r} is not a valid pattern: {exc}")
    return patterns


def explain(record: Record, known: Sequence[KnownIssue]) -> KnownIssue | None:
    """The first entry that explains ``record``, or None: a new failure."""
    return next((entry for entry in known if entry.matches(record)), None)
