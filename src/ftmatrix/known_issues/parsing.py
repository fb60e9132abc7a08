"""known_issues.yaml read and validated: every problem found, each with its key path."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from ftmatrix.config import ConfigError
from ftmatrix.known_issues.entry import KnownIssue, Proof
from ftmatrix.ranges import matches_no_version
from ftmatrix.repositories import (
    fix_repository,
    is_repository,
    report_repository,
    repository_table,
    same_repository,
)
from ftmatrix.versions import parse_version, shown
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
ENTRY_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


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
        repositories = raw.get("repositories") or {}
        if not isinstance(repositories, dict):
            problems.append(
                f"{source}: repositories: must map package names to GitHub repositories "
                f"(owner/name), got {shown(repositories)}"
            )
            repositories = {}
        for package, repository in repositories.items():
            if not isinstance(repository, str) or not is_repository(repository):
                problems.append(
                    f"{source}: repositories.{package}: {repository!r} is not a GitHub "
                    "repository (owner/name)"
                )
            else:
                added[str(package)] = repository
        raw = raw.get("issues") or []
        if not isinstance(raw, list):
            raise ConfigError(
                [f"{source}: issues: must be a list of entries, got {type(raw).__name__}"]
            )
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
    problems += _unknown_keys(item, ENTRY_KEYS, at)
    entry_id = _entry_id(item, at, seen, problems)
    _check_described(item, at, problems)
    package = canonicalize_name(str(item.get("package") or ""))
    affected = _affected(item.get("affected"), at, problems)
    fixed_in = _fixed_in(item, at, affected, problems)
    _check_links(item, at, package=package, fixed_in=fixed_in, table=table, problems=problems)
    seen_in = item.get("seen-in")  # checked with the links (_check_seen_in)
    seen_in = tuple(seen_in) if isinstance(seen_in, list) else ()
    match = item.get("match") or {}
    if not isinstance(match, dict) or not match:
        problems.append(f"{at}.match: must name signatures or an exception/message pattern")
        return None
    problems += _unknown_keys(match, MATCH_KEYS, f"{at}.match")
    patterns = _patterns(match, at, problems)
    packages = _match_packages(match, affected, at, problems)
    failing, holding = _contracts(match.get("contracts"), at, problems)
    return KnownIssue(
        id=entry_id,
        title=str(item.get("title", "")),
        package=package,
        upstream=_text(item.get("upstream")),
        fix=_text(item.get("fix")),
        repository=table.get(package),
        seen_in=seen_in,
        signatures=_strings(match.get("signatures"), f"{at}.match.signatures", problems),
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
        workaround=_text(item.get("workaround")),
        proof=_proof(item.get("proof"), at, problems),
    )


def _unknown_keys(raw: Mapping[str, Any], allowed: Sequence[str], at: str) -> list[str]:
    return [
        f"{at}.{k}: unknown key; allowed: {', '.join(allowed)}" for k in raw if k not in allowed
    ]


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _entry_id(item: Mapping[str, Any], at: str, seen: set[str], problems: list[str]) -> str:
    """The entry's id, once in the file: a plain name, since a proof is kept in a folder
    of that name (proofs/<id>/), which a path in it would leave."""
    raw = item.get("id")
    entry_id = raw if isinstance(raw, str) else ""
    if raw is None or raw == "":
        problems.append(f"{at}.id: missing")
    elif not isinstance(raw, str) or not ENTRY_ID.fullmatch(raw):
        problems.append(
            f"{at}.id: {shown(raw)} is not a name: letters, digits, '.', '_' and '-', "
            "starting with a letter or digit (e.g. trl-sft-dataparallel-batch)"
        )
    elif entry_id in seen:
        problems.append(f"{at}.id: {entry_id!r} is used by an earlier entry")
    seen.add(entry_id)
    return entry_id


def _check_described(item: Mapping[str, Any], at: str, problems: list[str]) -> None:
    """What a reader needs: a title, the package at fault, its report, a workaround as text."""
    for key in ("title", "package"):
        if not isinstance(item.get(key), str) or not item[key]:
            problems.append(f"{at}.{key}: missing or not text")
    if "upstream" not in item:
        problems.append(
            f"{at}.upstream: missing (the owning project's report; null only where none "
            "exists, with the threads that do under seen-in)"
        )
    elif item["upstream"] is None and not item.get("seen-in"):
        problems.append(f"{at}.upstream: null needs the threads that report it under seen-in")
    workaround = item.get("workaround")
    if workaround is not None and (not isinstance(workaround, str) or not workaround.strip()):
        problems.append(f"{at}.workaround: must be text (what to do instead), got {workaround!r}")


def _match_packages(
    match: Mapping[str, Any],
    affected: Mapping[str, SpecifierSet | None],
    at: str,
    problems: list[str],
) -> dict[str, SpecifierSet]:
    """Where the entry explains: ``match.packages``, by default the claimed range."""
    if "packages" not in match:
        return {k: v for k, v in affected.items() if v is not None}
    packages: dict[str, SpecifierSet] = {}
    for name, spec in _mapping(
        match, "packages", f"{at}.match", problems, "version ranges"
    ).items():
        parsed = _range(spec, f"{at}.match.packages.{name}", problems)
        if parsed is not None:
            packages[str(name)] = parsed
    return packages


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
    _check_upstream(item.get("upstream"), at, package=package, owner=owner, problems=problems)
    if item.get("fix") is not None:
        fixers = {table[p] for p in (package, *map(canonicalize_name, fixed_in)) if p in table}
        _check_fix(item["fix"], at, fixers=fixers, problems=problems)
    _check_seen_in(item.get("seen-in") or [], at, problems)


def _check_upstream(
    upstream: Any, at: str, *, package: str, owner: str | None, problems: list[str]
) -> None:
    if upstream is not None and not isinstance(upstream, str):
        problems.append(f"{at}.upstream: must be a URL or null, got {upstream!r}")
    if not isinstance(upstream, str) or not upstream:
        return
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


def _check_fix(fix: Any, at: str, *, fixers: set[str], problems: list[str]) -> None:
    where = fix_repository(fix) if isinstance(fix, str) else None
    if where is None:
        problems.append(f"{at}.fix: {str(fix)[:100]!r} is not a GitHub pull request or commit URL")
    elif fixers and not any(same_repository(where, r) for r in fixers):
        problems.append(
            f"{at}.fix: {fix} is in {where}, not in {', '.join(sorted(fixers))} (the "
            "faulty or the fixed package's repository)"
        )


def _check_seen_in(seen_in: Any, at: str, problems: list[str]) -> None:
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
        parsed = _range(spec, f"{at}.affected.{package}", problems)
        if parsed is not None:
            affected[str(package)] = parsed
    return affected


def _fixed_in(
    item: Mapping[str, Any],
    at: str,
    affected: Mapping[str, SpecifierSet | None],
    problems: list[str],
) -> dict[str, str]:
    fixed_in: dict[str, str] = {}
    for package, version in _mapping(item, "fixed-in", at, problems).items():
        parsed = _version(version, f"{at}.fixed-in.{package}", problems)
        if parsed is None:
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
        problems.append(f"{at}: must be a list of names (text), got {shown(raw)}")
        return ()
    return tuple(raw)


def _contracts(raw: Any, at: str, problems: list[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    if raw is None:
        return (), ()
    if not isinstance(raw, dict):
        problems.append(f"{at}.match.contracts: must be {{fail: [...], pass: [...]}}, got {raw!r}")
        return (), ()
    problems += _unknown_keys(raw, CONTRACT_KEYS, f"{at}.match.contracts")
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
    problems += _unknown_keys(raw, PROOF_KEYS, f"{at}.proof")
    held: dict[str, str | None] = {}
    for package, version in _mapping(
        raw, "hold", f"{at}.proof", problems, "versions (or none)"
    ).items():
        if version is None or version == "none":
            held[str(package)] = None
        elif _version(version, f"{at}.proof.hold.{package}", problems, " or none") is not None:
            held[str(package)] = str(version)
    oldest: dict[str, str] = {}
    for package, version in _mapping(raw, "oldest", f"{at}.proof", problems).items():
        parsed = _version(version, f"{at}.proof.oldest.{package}", problems)
        if parsed is not None:
            oldest[str(package)] = str(parsed)
    return Proof(
        hardware=_name(raw.get("hardware"), f"{at}.proof.hardware", problems) or "cpu",
        oldest=oldest,
        cases=_strings(raw.get("cases"), f"{at}.proof.cases", problems),
        support=_strings(raw.get("support"), f"{at}.proof.support", problems),
        vary=_strings(raw.get("vary"), f"{at}.proof.vary", problems),
        hold=held,
        note=_name(raw.get("note"), f"{at}.proof.note", problems) or None,
    )


def _patterns(match: Mapping[str, Any], at: str, problems: list[str]) -> dict[str, re.Pattern[str]]:
    patterns = {}
    for key in ("exception", "message", "frame"):
        if match.get(key) is None:
            continue
        if not isinstance(match[key], str):
            problems.append(
                f"{at}.match.{key}: must be a pattern (text, a regular expression), "
                f"got {shown(match[key])}"
            )
            continue
        try:
            patterns[key] = re.compile(str(match[key]))
        except re.error as exc:
            problems.append(f"{at}.match.{key}: {match[key]!r} is not a valid pattern: {exc}")
    return patterns


def _mapping(
    raw: Mapping[str, Any], key: str, at: str, problems: list[str], values: str = "versions"
) -> dict[Any, Any]:
    """``raw[key]``: a mapping, or {} (absent, null, or wrong: a problem at ``at.key``)."""
    value = raw.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        problems.append(f"{at}.{key}: must map package names to {values}, got {shown(value)}")
        return {}
    return value


def _name(raw: Any, at: str, problems: list[str]) -> str | None:
    """Optional text: ``raw`` where it is text, else None (a problem, unless null)."""
    if raw is None or isinstance(raw, str):
        return raw
    problems.append(f"{at}: must be text, got {shown(raw)}")
    return None


def _version(raw: Any, at: str, problems: list[str], allowed: str = "") -> Version | None:
    """A release's version, written as text (or a whole number); None with a problem."""
    # A float is refused: YAML reads 0.20 as the number 0.2, another release.
    text = raw if isinstance(raw, str) else str(raw) if type(raw) is int else None
    if text is None:
        problems.append(
            f"{at}: {shown(raw)} is not a version{allowed}; write it as text (e.g. '4.46.0')"
        )
        return None
    try:
        return parse_version(text)
    except InvalidVersion:
        problems.append(f"{at}: {shown(raw)} is not a version{allowed}")
        return None


def _range(raw: Any, at: str, problems: list[str]) -> SpecifierSet | None:
    """A version range written as text (``'>=4.46.0,<4.47.0'``); None with a problem."""
    allowed = "a version range as text (e.g. '>=4.46.0,<4.47.0'; null where not established)"
    if not isinstance(raw, str):
        problems.append(f"{at}: {shown(raw)} is not {allowed}")
        return None
    try:
        spec = SpecifierSet(raw)
        for part in spec:  # a version past int()'s limits would fail each comparison later
            if part.operator != "===" and not part.version.endswith(".*"):
                parse_version(part.version)
        empty = matches_no_version(spec)
    except (InvalidSpecifier, ValueError):  # ValueError: a version past int()'s limits
        problems.append(f"{at}: {shown(raw)} is not {allowed}")
        return None
    if empty:
        problems.append(f"{at}: {raw!r} matches no version (its bounds exclude each other)")
        return None
    return spec
