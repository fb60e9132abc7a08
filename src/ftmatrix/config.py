"""matrix.yaml: read it, apply a profile, validate every key, and say exactly what is wrong.

All problems in a file are gathered and raised together as one :class:`ConfigError`,
each naming the file, the key path, the bad value and what is allowed, before
anything is installed.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from ftmatrix import config_machine
from ftmatrix.config_checker import Checker, kind, whole_number
from ftmatrix.errors import ConfigError
from ftmatrix.matrix_model import (
    BISECT_KEYS,
    DEFAULT_HARDWARE,
    HARDWARE_KEYS,
    INSTALL_KEYS,
    LIMIT_KEYS,
    MAX_WORKERS,
    NOT_INSTALLED,
    PLAIN_NAME_RULE,
    PROFILE_KEYS,
    REUSE_KEYS,
    RULE_EXTRA_KEYS,
    SELECTOR_KEYS,
    STRATEGIES,
    TIMEOUT_KEYS,
    TOP_LEVEL_KEYS,
    Axis,
    BisectOptions,
    HardwareClass,
    InstallOptions,
    Limits,
    Matrix,
    ReuseOptions,
    Rule,
    Selector,
    Timeouts,
    is_plain_name,
)
from ftmatrix.versions import (
    OLDEST_PYTHON,
    parse_version,
    python_version_problem,
    shown,
    too_long,
)
from ftmatrix.yaml_file import parse_yaml, read_yaml_text

# The model's names stay importable from here, where every stage imports them.
__all__ = [
    "BISECT_KEYS",
    "DEFAULT_HARDWARE",
    "HARDWARE_KEYS",
    "INSTALL_KEYS",
    "LIMIT_KEYS",
    "MAX_WORKERS",
    "NOT_INSTALLED",
    "OLDEST_PYTHON",
    "PROFILE_KEYS",
    "REUSE_KEYS",
    "RULE_EXTRA_KEYS",
    "SELECTOR_KEYS",
    "STRATEGIES",
    "TIMEOUT_KEYS",
    "TOP_LEVEL_KEYS",
    "Axis",
    "BisectOptions",
    "ConfigError",
    "HardwareClass",
    "InstallOptions",
    "Limits",
    "Matrix",
    "ReuseOptions",
    "Rule",
    "Selector",
    "Timeouts",
    "load_matrix",
    "parse_matrix",
    "pattern_specifier",
]


def load_matrix(path: Path, *, profile: str | None = None, default_python: str) -> Matrix:
    """Read and validate ``path``; ``profile`` overrides the file's ``default-profile``.

    ``default_python`` is the interpreter version cells use when the file names none.
    """
    text = read_yaml_text(path)
    return parse_matrix(text, source=str(path), profile=profile, default_python=default_python)


def parse_matrix(
    text: str, *, source: str, profile: str | None = None, default_python: str
) -> Matrix:
    """Validate the YAML ``text`` of a matrix file named ``source``."""
    raw = parse_yaml(text, source=source)
    if not isinstance(raw, dict):
        raise ConfigError(
            [f"{source}: the file must be a mapping with at least 'packages', got {kind(raw)}"]
        )
    checker = Checker(source)
    merged, profile_name = _apply_profile(checker, raw, profile)
    matrix = _build(checker, merged, profile_name, default_python)
    checker.raise_if_any()
    assert matrix is not None
    return matrix


def _apply_profile(
    checker: Checker, raw: dict[str, Any], requested: str | None
) -> tuple[dict[str, Any], str | None]:
    checker.unknown_keys(raw, TOP_LEVEL_KEYS, "")
    profiles = _profiles(checker, raw.get("profiles"))
    name = _chosen_profile(checker, profiles, "default-profile", raw.get("default-profile"))
    if requested is not None:
        name = _chosen_profile(checker, profiles, "profile", requested)
    merged = {k: v for k, v in raw.items() if k not in ("profiles", "default-profile")}
    if name is not None:
        for key, value in profiles[name].items():
            # Mappings merge one level deep so a profile can change one axis or one
            # hardware class; anything else replaces the base value.
            base = merged.get(key)
            if isinstance(base, dict) and isinstance(value, dict):
                merged[key] = {**base, **value}
            else:
                merged[key] = value
    return merged, name


def _profiles(checker: Checker, raw: Any) -> dict[str, dict[str, Any]]:
    """The profiles a file defines, by name; one whose name or shape is wrong is left out
    (its problem added), so that no name but text reaches a membership test or a join."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        checker.add("profiles", f"must be a mapping of name -> overrides, got {kind(raw)}")
        return {}
    profiles = {}
    for name, overrides in raw.items():
        if not is_plain_name(name):
            checker.add(
                f"profiles[{shown(name)}]",
                f"{shown(name)} is not a profile name: a profile's name is {PLAIN_NAME_RULE}",
            )
            continue
        if not isinstance(overrides, dict):
            checker.add(f"profiles.{name}", f"must be a mapping, got {kind(overrides)}")
            continue
        checker.unknown_keys(overrides, PROFILE_KEYS, f"profiles.{name}")
        profiles[name] = overrides
    return profiles


def _chosen_profile(
    checker: Checker, profiles: dict[str, dict[str, Any]], key: str, name: Any
) -> str | None:
    """``name`` (``key``'s value: default-profile, or the profile asked for) where it names
    one of ``profiles``; else None, and the problem added."""
    if name is None:
        return None
    if not isinstance(name, str):
        checker.add(key, f"must be the name of one of the profiles, got {kind(name)}")
        return None
    if name not in profiles:
        available = ", ".join(profiles) or "none are defined"
        checker.add(key, f"no profile named {shown(name)}; available: {available}")
        return None
    return name


def _build(
    checker: Checker, raw: dict[str, Any], profile: str | None, default_python: str
) -> Matrix | None:
    packages = _packages(checker, raw.get("packages"))
    python = _python(checker, raw.get("python"), default_python)
    support = _requirements(checker, raw.get("support", []), "support")
    strategy = raw.get("strategy", "full")
    if strategy not in STRATEGIES:
        checker.add("strategy", f"{strategy!r} is not a strategy; allowed: {', '.join(STRATEGIES)}")
    hardware = config_machine.hardware_classes(checker, raw.get("hardware", DEFAULT_HARDWARE))
    rule_keys = [a.package for a in packages] + list(RULE_EXTRA_KEYS)
    exclude = _rules(checker, raw.get("exclude", []), "exclude", rule_keys)
    include = _rules(checker, raw.get("include", []), "include", rule_keys)
    cases = _names(checker, raw.get("cases", []), "cases")
    timeouts = config_machine.timeouts(checker, raw.get("timeouts", {}))
    limits = config_machine.limits(checker, raw.get("limits", {}))
    install = _install(checker, raw.get("install", {}))
    bisect = _bisect(checker, raw.get("bisect", {}))
    reuse = _reuse(checker, raw.get("reuse", {}))
    probe_caps = raw.get("probe-caps", False)
    if not isinstance(probe_caps, bool):
        checker.add("probe-caps", f"must be true or false, got {probe_caps!r}")
    if checker.problems:
        return None
    return Matrix(
        source=checker.source,
        profile=profile,
        packages=packages,
        python=python,
        support=support,
        strategy=strategy,
        exclude=exclude,
        include=include,
        cases=cases,
        timeouts=timeouts,
        limits=limits,
        install=install,
        hardware=hardware,
        bisect=bisect,
        reuse=reuse,
        probe_caps=probe_caps,
    )


def _packages(checker: Checker, raw: Any) -> tuple[Axis, ...]:
    if raw is None:
        checker.add("packages", "missing; the simplest matrix is 'packages: {name: [version]}'")
        return ()
    if not isinstance(raw, dict) or not raw:
        checker.add("packages", f"must be a non-empty mapping of package -> versions, got {raw!r}")
        return ()
    axes = []
    seen: dict[str, str] = {}
    for package, versions in raw.items():
        at = f"packages.{package}"
        if not isinstance(package, str) or not DISTRIBUTION_NAME.fullmatch(package):
            checker.add(
                at,
                f"{package!r} is not a distribution name (letters, digits, '.', '_' and '-', "
                "starting and ending with a letter or digit), such as 'transformers'",
            )
            continue
        name = canonicalize_name(str(package))
        if name in seen:
            checker.add(at, f"the same package as packages.{seen[name]}")
            continue
        seen[name] = str(package)
        if isinstance(versions, dict):
            selector = _selector(checker, versions, at)
            if selector is not None:
                axes.append(Axis(package=str(package), versions=(), selector=selector))
            continue
        if not isinstance(versions, list):
            checker.add(at, f"must be a list of versions such as ['1.2.0', none], got {versions!r}")
            continue
        if not versions:
            checker.add(at, "empty axis: list at least one version (or 'none')")
            continue
        axes.append(Axis(package=str(package), versions=_axis_versions(checker, versions, at)))
    return tuple(axes)


def _axis_versions(checker: Checker, values: list[Any], at: str) -> tuple[str | None, ...]:
    parsed: list[str | None] = []
    seen: dict[Version, tuple[str, str]] = {}
    for i, value in enumerate(values):
        version = _version(checker, value, f"{at}[{i}]")
        if version is _INVALID:
            continue
        if version is None and None in parsed:
            checker.add(f"{at}[{i}]", f"{value!r} is listed twice")
            continue
        if isinstance(version, str) and _listed_twice(checker, seen, version, f"{at}[{i}]"):
            continue
        parsed.append(version)  # type: ignore[arg-type]
    return tuple(parsed)


def _listed_twice(
    checker: Checker, seen: dict[Version, tuple[str, str]], text: str, at: str
) -> bool:
    """Is ``text`` a version equal under PEP 440 to one listed before it ('v4.57.6' and
    '4.57.6.0' are '4.57.6')? Two such cells would be one environment under two labels."""
    version = parse_version(text)
    if version not in seen:
        seen[version] = (text, at)
        return False
    first, first_at = seen[version]
    checker.add(
        at,
        f"{shown(text)} is listed twice: {first_at} is {shown(first)}, the same version "
        "(PEP 440); list each once",
    )
    return True


_INVALID = object()


def _selector(checker: Checker, raw: dict[str, Any], at: str) -> Selector | None:
    before = len(checker.problems)
    checker.unknown_keys(raw, SELECTOR_KEYS, at)
    counts: dict[str, int | None] = {}
    for key in ("latest", "latest-minor"):
        value = raw.get(key)
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < 1
        ):
            checker.add(f"{at}.{key}", f"must be a whole number >= 1, got {value!r}")
        counts[key] = value if isinstance(value, int) else None
    spec = raw.get("range")
    if spec is not None:
        try:
            SpecifierSet(str(spec))
        except InvalidSpecifier:
            checker.add(f"{at}.range", f"{spec!r} is not a specifier such as '>=0.14,<1.0'")
    if counts["latest"] is None and counts["latest-minor"] is None and spec is None:
        checker.add(at, "a selector needs latest, latest-minor or range, e.g. {latest: 3}")
    for key in ("prereleases", "none"):
        if key in raw and not isinstance(raw[key], bool):
            checker.add(f"{at}.{key}", f"must be true or false, got {raw[key]!r}")
    if len(checker.problems) > before:
        return None
    return Selector(
        latest=counts["latest"],
        latest_minor=counts["latest-minor"],
        range=None if spec is None else str(spec),
        prereleases=bool(raw.get("prereleases", False)),
        include_none=bool(raw.get("none", False)),
    )


def _version(checker: Checker, value: Any, at: str) -> str | object | None:
    if value is None or value == NOT_INSTALLED:
        return None
    if isinstance(value, float):
        # YAML reads 2.10 as the float 2.1: the version the user meant is lost.
        checker.add(at, f"{value!r} was read as a number; quote versions, e.g. '{value}'")
        return _INVALID
    text = str(value)
    try:
        parse_version(text)
    except InvalidVersion:
        checker.add(
            at, f"{shown(value)} is not a valid version (PEP 440), nor 'none'{too_long(text)}"
        )
        return _INVALID
    if text != text.strip():  # PEP 440 allows it; a cell's label would hold the spaces
        checker.add(at, f"{shown(value)} has spaces around it; write {text.strip()!r}")
        return _INVALID
    return text


def _python(checker: Checker, raw: Any, default: str) -> tuple[str, ...]:
    if raw is None:
        return (default,)
    values = raw if isinstance(raw, list) else [raw]
    if not values:
        checker.add("python", "empty axis: list at least one Python version such as '3.11'")
    result = []
    seen: dict[Version, tuple[str, str]] = {}
    for i, value in enumerate(values):
        at = f"python[{i}]" if isinstance(raw, list) else "python"
        if isinstance(value, float):
            checker.add(at, f"{value!r} was read as a number; quote it, e.g. '3.11'")
            continue
        # The same rule as FTMATRIX_PYTHON's: the label names the version as written.
        problem = python_version_problem(str(value))
        if problem is not None:
            checker.add(at, f"{shown(value)}: {problem}")
            continue
        if not _listed_twice(checker, seen, str(value), at):
            result.append(str(value))
    return tuple(result)


# PEP 508's distribution name: what an axis may be called.
DISTRIBUTION_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?")
REQUIREMENT_FORMS = (
    "a PEP 508 requirement: a distribution name with optional extras, version specifier "
    "and marker, such as 'accelerate', 'datasets>=3' or 'bitsandbytes; platform_machine == "
    '"x86_64"\' (no URLs, paths or installer options)'
)


def _requirements(checker: Checker, raw: Any, at: str) -> tuple[str, ...]:
    """Each entry a PEP 508 requirement of a package index's distribution, nothing else.

    uv reads a requirement string as it would a line of a requirements file: an option
    (``--index-url=...``) would switch its index, a path or ``-e DIR`` would build a
    local project (running its setup.py at plan time). Only name, extras, specifier and
    marker pass.
    """
    names = _names(checker, raw, at)
    kept = []
    for index, text in enumerate(names):
        where = f"{at}[{index}]"
        stripped = text.strip()
        if stripped.startswith("-") or "/" in stripped.split(";", 1)[0] or "\\" in stripped:
            checker.add(where, f"{text!r} is not {REQUIREMENT_FORMS}")
            continue
        try:
            requirement = Requirement(stripped)
        except InvalidRequirement as error:
            checker.add(where, f"{text!r} is not {REQUIREMENT_FORMS} ({error})")
            continue
        if requirement.url:
            checker.add(where, f"{text!r} names a URL; it must be {REQUIREMENT_FORMS}")
            continue
        kept.append(stripped)
    return tuple(kept)


def _names(checker: Checker, raw: Any, at: str) -> tuple[str, ...]:
    if not isinstance(raw, list) or not all(isinstance(v, str) and v for v in raw):
        checker.add(at, f"must be a list of names, got {raw!r}")
        return ()
    return tuple(raw)


def _rules(checker: Checker, raw: Any, at: str, keys: Sequence[str]) -> tuple[Rule, ...]:
    if not isinstance(raw, list):
        checker.add(at, f"must be a list of rules such as {{trl: '0.19.*'}}, got {raw!r}")
        return ()
    rules = []
    for i, rule in enumerate(raw):
        where = f"{at}[{i}]"
        if not isinstance(rule, dict) or not rule:
            checker.add(where, f"must be a non-empty mapping of key -> pattern, got {rule!r}")
            continue
        checker.unknown_keys(rule, keys, where)
        match: dict[str, str] = {}
        for key, pattern in rule.items():
            if isinstance(pattern, float):
                checker.add(f"{where}.{key}", f"{pattern!r} was read as a number; quote it")
                continue
            text = NOT_INSTALLED if pattern is None else str(pattern)
            if key not in RULE_EXTRA_KEYS and text != NOT_INSTALLED:
                try:
                    if too_long(text):
                        raise InvalidSpecifier(text)
                    pattern_specifier(text)
                except (InvalidSpecifier, ValueError):  # packaging's int() of a huge number
                    checker.add(
                        f"{where}.{key}",
                        f"{shown(text)} is neither a version, a wildcard like '0.19.*' "
                        f"nor a specifier like '>=0.19,<1'{too_long(text)}",
                    )
                    continue
            match[str(key)] = text
        rules.append(Rule(index=i, match=match))
    return tuple(rules)


def pattern_specifier(pattern: str) -> SpecifierSet:
    """A rule's version pattern as a specifier: '0.19.*' and '0.19.1' mean '==' them."""
    text = pattern.strip()
    if text[:1] not in "=!<>~":
        text = f"=={text}"
    return SpecifierSet(text)


def _install(checker: Checker, raw: Any) -> InstallOptions:
    if not isinstance(raw, dict):
        checker.add("install", f"must be a mapping with {', '.join(INSTALL_KEYS)}, got {raw!r}")
        return InstallOptions()
    checker.unknown_keys(raw, INSTALL_KEYS, "install")
    find_links = raw.get("find-links", []) or []
    extra = raw.get("extra-index-urls", []) or []
    index_url = raw.get("index-url")
    for key, value in (("find-links", find_links), ("extra-index-urls", extra)):
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            checker.add(f"install.{key}", f"must be a list of paths or URLs, got {value!r}")
            return InstallOptions()
    if index_url is not None and not isinstance(index_url, str):
        checker.add("install.index-url", f"must be a URL or null, got {index_url!r}")
        return InstallOptions()
    listed = {"find-links": find_links, "extra-index-urls": extra}
    places = [(f"install.{key}[{i}]", v) for key, vs in listed.items() for i, v in enumerate(vs)]
    for at, where in [*places, ("install.index-url", index_url or "")]:
        if not where.isprintable():  # uv and the index reader fail on it, cell by cell
            checker.add(at, f"{where!r} holds a control character; a URL or path has none")
    return InstallOptions(
        find_links=tuple(find_links),
        index_url=index_url,
        extra_index_urls=tuple(extra),
        system_packages=_system_packages(checker, raw.get("system-packages", False)),
    )


def _system_packages(checker: Checker, raw: Any) -> tuple[str, ...]:
    """``install.system-packages``: true (all of the host's), false, or names/globs."""
    at = "install.system-packages"
    if raw is True:
        return ("*",)
    if raw is False or raw is None:
        return ()
    if not isinstance(raw, list) or not raw:
        checker.add(
            at,
            f"must be true, false or a list of distribution names such as "
            f"[torch, triton, 'nvidia-*'], got {raw!r}",
        )
        return ()
    names = []
    for i, name in enumerate(raw):
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9*?\[\]._-]+", name):
            checker.add(
                f"{at}[{i}]", f"{name!r} is not a distribution name or glob like 'nvidia-*'"
            )
            continue
        names.append(name)
    return tuple(names)


def _bisect(checker: Checker, raw: Any) -> BisectOptions:
    budget = whole_number(checker, raw, "bisect", BISECT_KEYS, example=8, unit="cells")
    return BisectOptions() if budget is None else BisectOptions(budget=budget)


def _reuse(checker: Checker, raw: Any) -> ReuseOptions:
    days = whole_number(checker, raw, "reuse", REUSE_KEYS, example=7, unit="days")
    return ReuseOptions() if days is None else ReuseOptions(max_age_days=days)
