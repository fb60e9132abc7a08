"""matrix.yaml: read it, apply a profile, validate every key, and say exactly what is wrong.

All problems in a file are gathered and raised together as one :class:`ConfigError`,
each naming the file, the key path, the bad value and what is allowed, before
anything is installed.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion

from ftmatrix.errors import ConfigError
from ftmatrix.matrix_model import (
    BISECT_KEYS,
    DEFAULT_HARDWARE,
    HARDWARE_KEYS,
    INSTALL_KEYS,
    LIMIT_KEYS,
    MAX_WORKERS,
    NOT_INSTALLED,
    OLDEST_PYTHON,
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
)
from ftmatrix.versions import parse_version, shown, too_long
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
            [f"{source}: the file must be a mapping with at least 'packages', got {_kind(raw)}"]
        )
    checker = _Checker(source)
    merged, profile_name = _apply_profile(checker, raw, profile)
    matrix = _build(checker, merged, profile_name, default_python)
    checker.raise_if_any()
    assert matrix is not None
    return matrix


class _Checker:
    """Collects problems so that all of them are reported in one pass."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.problems: list[str] = []

    def add(self, key_path: str, message: str) -> None:
        self.problems.append(f"{self.source}: {key_path}: {message}")

    def unknown_keys(self, mapping: Mapping[str, Any], allowed: Sequence[str], at: str) -> None:
        for key in mapping:
            if key in allowed:
                continue
            hint = difflib.get_close_matches(str(key), allowed, n=1)
            perhaps = f" Perhaps you meant {hint[0]!r}?" if hint else ""
            where = f"{at}.{key}" if at else str(key)
            self.add(where, f"unknown key; allowed: {', '.join(allowed)}.{perhaps}")

    def raise_if_any(self) -> None:
        if self.problems:
            raise ConfigError(self.problems)


def _apply_profile(
    checker: _Checker, raw: dict[str, Any], requested: str | None
) -> tuple[dict[str, Any], str | None]:
    checker.unknown_keys(raw, TOP_LEVEL_KEYS, "")
    profiles = raw.get("profiles") or {}
    if not isinstance(profiles, dict):
        checker.add("profiles", f"must be a mapping of name -> overrides, got {_kind(profiles)}")
        profiles = {}
    name = requested if requested is not None else raw.get("default-profile")
    if name is not None and name not in profiles:
        available = ", ".join(profiles) or "none are defined"
        key = "default-profile" if requested is None else "profile"
        checker.add(key, f"no profile named {name!r}; available: {available}")
        name = None
    merged = {k: v for k, v in raw.items() if k not in ("profiles", "default-profile")}
    for profile_name, overrides in profiles.items():
        if not isinstance(overrides, dict):
            checker.add(f"profiles.{profile_name}", f"must be a mapping, got {_kind(overrides)}")
            continue
        checker.unknown_keys(overrides, PROFILE_KEYS, f"profiles.{profile_name}")
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


def _build(
    checker: _Checker, raw: dict[str, Any], profile: str | None, default_python: str
) -> Matrix | None:
    packages = _packages(checker, raw.get("packages"))
    python = _python(checker, raw.get("python"), default_python)
    support = _requirements(checker, raw.get("support", []), "support")
    strategy = raw.get("strategy", "full")
    if strategy not in STRATEGIES:
        checker.add("strategy", f"{strategy!r} is not a strategy; allowed: {', '.join(STRATEGIES)}")
    hardware = _hardware(checker, raw.get("hardware", DEFAULT_HARDWARE))
    rule_keys = [a.package for a in packages] + list(RULE_EXTRA_KEYS)
    exclude = _rules(checker, raw.get("exclude", []), "exclude", rule_keys)
    include = _rules(checker, raw.get("include", []), "include", rule_keys)
    cases = _names(checker, raw.get("cases", []), "cases")
    timeouts = _timeouts(checker, raw.get("timeouts", {}))
    limits = _limits(checker, raw.get("limits", {}))
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


def _packages(checker: _Checker, raw: Any) -> tuple[Axis, ...]:
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
        parsed: list[str | None] = []
        for i, value in enumerate(versions):
            version = _version(checker, value, f"{at}[{i}]")
            if version is _INVALID:
                continue
            if version in parsed:
                checker.add(f"{at}[{i}]", f"{value!r} is listed twice")
                continue
            parsed.append(version)  # type: ignore[arg-type]
        axes.append(Axis(package=str(package), versions=tuple(parsed)))
    return tuple(axes)


_INVALID = object()


def _selector(checker: _Checker, raw: dict[str, Any], at: str) -> Selector | None:
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


def _version(checker: _Checker, value: Any, at: str) -> str | object | None:
    if value is None or value == NOT_INSTALLED:
        return None
    if isinstance(value, float):
        # YAML reads 2.10 as the float 2.1: the version the user meant is lost.
        checker.add(at, f"{value!r} was read as a number; quote versions, e.g. '{value}'")
        return _INVALID
    try:
        parse_version(str(value))
    except InvalidVersion:
        checker.add(
            at, f"{shown(value)} is not a valid version (PEP 440), nor 'none'{too_long(str(value))}"
        )
        return _INVALID
    return str(value)


def _python(checker: _Checker, raw: Any, default: str) -> tuple[str, ...]:
    if raw is None:
        return (default,)
    values = raw if isinstance(raw, list) else [raw]
    if not values:
        checker.add("python", "empty axis: list at least one Python version such as '3.11'")
    result = []
    for i, value in enumerate(values):
        at = f"python[{i}]" if isinstance(raw, list) else "python"
        if isinstance(value, float):
            checker.add(at, f"{value!r} was read as a number; quote it, e.g. '3.11'")
            continue
        try:
            parsed = parse_version(str(value))
        except InvalidVersion:
            checker.add(
                at, f"{shown(value)} is not a Python version such as '3.11'{too_long(str(value))}"
            )
            continue
        if parsed.release[:2] < OLDEST_PYTHON:
            oldest = ".".join(map(str, OLDEST_PYTHON))
            checker.add(at, f"{value!r}: a cell's pytest and plugin need Python {oldest} or newer")
            continue
        result.append(str(value))
    return tuple(result)


# PEP 508's distribution name: what an axis may be called.
DISTRIBUTION_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?")
REQUIREMENT_FORMS = (
    "a PEP 508 requirement: a distribution name with optional extras, version specifier "
    "and marker, such as 'accelerate', 'datasets>=3' or 'bitsandbytes; platform_machine == "
    '"x86_64"\' (no URLs, paths or installer options)'
)


def _requirements(checker: _Checker, raw: Any, at: str) -> tuple[str, ...]:
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


def _names(checker: _Checker, raw: Any, at: str) -> tuple[str, ...]:
    if not isinstance(raw, list) or not all(isinstance(v, str) and v for v in raw):
        checker.add(at, f"must be a list of names, got {raw!r}")
        return ()
    return tuple(raw)


def _hardware(checker: _Checker, raw: Any) -> tuple[HardwareClass, ...]:
    if not isinstance(raw, dict) or not raw:
        checker.add("hardware", f"must be a non-empty mapping of class -> settings, got {raw!r}")
        return ()
    classes = []
    for name, given in raw.items():
        at = f"hardware.{name}"
        settings = {} if given is None else given
        if not isinstance(settings, dict):
            checker.add(at, f"must be a mapping with 'runs-on' and 'gpus', got {settings!r}")
            continue
        checker.unknown_keys(settings, HARDWARE_KEYS, at)
        runs_on = settings.get("runs-on", [])
        if isinstance(runs_on, str):
            runs_on = [runs_on]
        if not isinstance(runs_on, list) or not all(isinstance(x, str) for x in runs_on):
            checker.add(f"{at}.runs-on", f"must be a list of runner labels, got {runs_on!r}")
            runs_on = []
        gpus = settings.get("gpus", 0)
        if not isinstance(gpus, int) or isinstance(gpus, bool) or gpus < 0:
            checker.add(f"{at}.gpus", f"must be a whole number >= 0, got {gpus!r}")
            gpus = 0
        gpu_name = _gpu_name(checker, settings.get("gpu-name"), at, gpus)
        classes.append(
            HardwareClass(name=str(name), runs_on=tuple(runs_on), gpus=gpus, gpu_name=gpu_name)
        )
    return tuple(classes)


def _gpu_name(checker: _Checker, raw: Any, at: str, gpus: int) -> str | None:
    if raw is None:
        return None
    where = f"{at}.gpu-name"
    if not isinstance(raw, str) or not raw.strip():
        checker.add(where, f"must be a pattern of GPU names such as 'H100|H200', got {raw!r}")
        return None
    try:
        re.compile(raw)
    except re.error as error:
        checker.add(where, f"is not a regular expression ({error}): {raw!r}")
        return None
    if gpus < 1:
        checker.add(where, "names the GPUs of a class with gpus: 0; give gpus: 1 or more")
        return None
    return raw


def _rules(checker: _Checker, raw: Any, at: str, keys: Sequence[str]) -> tuple[Rule, ...]:
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


def _timeouts(checker: _Checker, raw: Any) -> Timeouts:
    if not isinstance(raw, dict):
        checker.add("timeouts", f"must be a mapping such as {{case: 600, cell: 3600}}, got {raw!r}")
        return Timeouts()
    checker.unknown_keys(raw, TIMEOUT_KEYS, "timeouts")
    values: dict[str, float] = {}
    for key in TIMEOUT_KEYS:
        if key not in raw:
            continue
        value = raw[key]
        # NaN passes "<= 0" and no clock reaches infinity: both would never end a case.
        if not _number_within(value, MAX_TIMEOUT):
            checker.add(
                f"timeouts.{key}",
                f"must be a number of seconds > 0 and at most {MAX_TIMEOUT:,} (30 days), "
                f"got {shown(value)}",
            )
            continue
        values[key] = float(value)
    return Timeouts(**values)


# The largest numbers a matrix may give: past them a value is a typo (or .inf), and
# the clock and the memory limit cannot hold it (an OverflowError, a wait that never ends).
MAX_TIMEOUT = 30 * 24 * 3600
MAX_MEMORY_GIB = 1 << 20


def _number_within(value: Any, most: float) -> bool:
    """Is ``value`` a number (not a bool) with 0 < value <= most? False for NaN."""
    return not isinstance(value, bool) and isinstance(value, int | float) and 0 < value <= most


def _limits(checker: _Checker, raw: Any) -> Limits:
    if not isinstance(raw, dict):
        checker.add(
            "limits", f"must be a mapping such as {{memory-gib: 16, workers: 2}}, got {raw!r}"
        )
        return Limits()
    checker.unknown_keys(raw, LIMIT_KEYS, "limits")
    values: dict[str, Any] = {}
    memory = raw.get("memory-gib")
    if memory is not None:
        if not _number_within(memory, MAX_MEMORY_GIB):
            checker.add(
                "limits.memory-gib",
                f"must be a number of GiB > 0 and at most {MAX_MEMORY_GIB:,}, got {shown(memory)}",
            )
        else:
            values["memory_gib"] = float(memory)
    for key, default in (("workers", 1), ("cells", "auto")):
        count = raw.get(key, default)
        # bool is no count; past MAX_WORKERS, each would be a process of its own
        if count == "auto" or (type(count) is int and 1 <= count <= MAX_WORKERS):
            values[key] = count
        else:
            checker.add(
                f"limits.{key}",
                f"must be a whole number from 1 to {MAX_WORKERS} or 'auto' (one per CPU), "
                f"got {count!r}",
            )
    return Limits(**values)


def _install(checker: _Checker, raw: Any) -> InstallOptions:
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
    return InstallOptions(
        find_links=tuple(find_links),
        index_url=index_url,
        extra_index_urls=tuple(extra),
        system_packages=_system_packages(checker, raw.get("system-packages", False)),
    )


def _system_packages(checker: _Checker, raw: Any) -> tuple[str, ...]:
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


def _bisect(checker: _Checker, raw: Any) -> BisectOptions:
    budget = _whole_number(checker, raw, "bisect", BISECT_KEYS, example=8, unit="cells")
    return BisectOptions() if budget is None else BisectOptions(budget=budget)


def _reuse(checker: _Checker, raw: Any) -> ReuseOptions:
    days = _whole_number(checker, raw, "reuse", REUSE_KEYS, example=7, unit="days")
    return ReuseOptions() if days is None else ReuseOptions(max_age_days=days)


def _whole_number(
    checker: _Checker, raw: Any, at: str, keys: tuple[str, ...], *, example: int, unit: str
) -> int | None:
    """A section holding one count ``keys[0]`` (>= 0, 0 meaning off); None when invalid."""
    key = keys[0]
    if not isinstance(raw, dict):
        checker.add(at, f"must be a mapping such as {{{key}: {example}}}, got {raw!r}")
        return None
    checker.unknown_keys(raw, keys, at)
    value = raw.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        checker.add(f"{at}.{key}", f"must be a whole number of {unit} >= 0 (0: off), got {value!r}")
        return None
    return value


def _kind(value: Any) -> str:
    return "nothing" if value is None else f"a {type(value).__name__} ({value!r:.40})"
