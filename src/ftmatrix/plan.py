"""From a validated matrix to the list of cells to run: a pure function of the matrix.

A cell is one Python version, one pinned package set and one hardware class. Its
label is what people read and select by (``nox -l``, report rows, CI job names);
its id, a short hash of its canonical form, is the storage key.
"""

from __future__ import annotations

import fnmatch
import hashlib
import itertools
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from packaging.utils import canonicalize_name
from packaging.version import Version

from ftmatrix.cell.covering import cover_pairs
from ftmatrix.config import NOT_INSTALLED, Matrix, Rule, pattern_specifier
from ftmatrix.errors import ConfigError, PlanError
from ftmatrix.installable_cover import (
    CANNOT_INSTALL,
    IMPOSSIBLE,
    NO_CELL,
    UNRESOLVED,
    Covering,
    Installability,
    Oracle,
    PlanFinding,
    Value,
    cover_installable,
)

# Where the plan's covering lives; importers of these names from the plan keep working.
__all__ = [
    "CANNOT_INSTALL",
    "IMPOSSIBLE",
    "NO_CELL",
    "UNRESOLVED",
    "Cell",
    "Covering",
    "Installability",
    "Oracle",
    "Plan",
    "PlanFinding",
    "Value",
    "cover_installable",
    "cover_pairs",
    "plan_cells",
    "select_cells",
]

# Short label prefixes for the packages everyone in this field knows; others keep
# their name. Labels must stay stable: changing one renames every cell.
SHORT_NAMES = {
    "transformers": "tf",
    "accelerate": "acc",
    "bitsandbytes": "bnb",
    "datasets": "ds",
}


PROBE_SUFFIX = "pastcap"


@dataclass(frozen=True, kw_only=True)
class Cell:
    """One environment to build and run every case in."""

    python: str
    pins: tuple[tuple[str, str | None], ...]
    hardware: str
    support: tuple[str, ...] = ()
    # A cap probe: requirements handed to uv as overrides (``trl==1.16.0``), and which
    # declared requirement they override ("unsloth 2026.10.7: trl<=1.15.0"). Empty for
    # every plain cell, whose id and label therefore do not change.
    overrides: tuple[str, ...] = ()
    beyond_cap: str | None = None

    @property
    def label(self) -> str:
        """Readable and parseable: ``cpu-py3.11-torch2.13.0-tf4.57.6-trl0.19.1``.

        A cap probe ends in ``-pastcap``: it is another environment than the plain cell.
        """
        parts = [self.hardware, f"py{self.python}"]
        for package, version in self.pins:
            short = SHORT_NAMES.get(canonicalize_name(package), package)
            parts.append(f"{short}{version}" if version is not None else f"no{short}")
        if self.overrides:
            parts.append(PROBE_SUFFIX)
        return "-".join(parts)

    @property
    def id(self) -> str:
        """A short hash of the canonical form: equal cells have equal ids."""
        canonical = json.dumps(self.to_dict(with_label=False), sort_keys=True)
        return hashlib.sha256(canonical.encode()).hexdigest()[:12]

    def pin(self, package: str) -> str | None:
        """The pinned version of ``package`` (None: not installed); KeyError if not an axis."""
        wanted = canonicalize_name(package)
        for name, version in self.pins:
            if canonicalize_name(name) == wanted:
                return version
        raise KeyError(package)

    def requirements(self) -> list[str]:
        """What to hand the installer: exact pins, then support packages unpinned."""
        pinned = [f"{name}=={version}" for name, version in self.pins if version is not None]
        return pinned + list(self.support)

    def to_dict(self, *, with_label: bool = True) -> dict[str, Any]:
        data: dict[str, Any] = {
            "python": self.python,
            "pins": {name: version for name, version in self.pins},
            "hardware": self.hardware,
            "support": list(self.support),
        }
        if self.overrides:
            data["overrides"] = list(self.overrides)
            data["beyond_cap"] = self.beyond_cap
        if with_label:
            data = {"label": self.label, "id": self.id, **data}
        return data

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> Cell:
        return cls(
            python=str(data["python"]),
            pins=tuple((str(k), None if v is None else str(v)) for k, v in data["pins"].items()),
            hardware=str(data["hardware"]),
            support=tuple(data.get("support", ())),
            overrides=tuple(data.get("overrides", ())),
            beyond_cap=data.get("beyond_cap"),
        )


@dataclass(frozen=True, kw_only=True)
class Plan:
    """The cells a matrix expands to, and how many the full product would have been."""

    matrix: Matrix
    cells: tuple[Cell, ...]
    full_size: int
    pairwise_lower_bound: int
    # Set when the pairwise strategy asked the installer (plan_cells with an oracle).
    covering: Covering | None = None


# Combinations of the axes the plan expands (and checks every rule against) at most: past
# this, planning itself takes minutes and gigabytes, before any cell could run.
MAX_COMBINATIONS = 100_000


def plan_cells(matrix: Matrix, oracle: Oracle | None = None) -> Plan:
    """Expand ``matrix`` by its strategy, add includes, drop excludes.

    With ``oracle`` (the installer's answer for a set of pins), ``strategy: pairwise``
    covers only pairs that can co-install, with cells that install
    (:func:`cover_installable`); the pairs that cannot become the plan's findings.
    A rule that matches no combination at all is a PlanError: it is almost always
    a typo, and silently ignoring it would run (or hide) cells the user did not mean.
    """
    axes = _axes(matrix)
    _check_size(matrix, axes)
    full = list(itertools.product(*axes.values()))
    names = list(axes)
    combos = [dict(zip(names, values, strict=True)) for values in full]
    hardware = [h.name for h in matrix.hardware]

    _check_rules_match(matrix, combos, hardware)
    allowed = [c for c in combos if not _excluded_any(matrix.exclude, c, hardware)]
    covering = None
    if matrix.strategy == "pairwise" and oracle is not None:
        covering = cover_installable(allowed, names, oracle)
        chosen = [dict(c) for c in covering.cells]
    elif matrix.strategy == "pairwise":
        chosen = cover_pairs(allowed, names)
    else:
        chosen = allowed
    chosen += [c for c in _included(matrix, combos) if c not in chosen]
    cells = _cells_on_hardware(matrix, chosen, hardware)
    _check_distinct(matrix, cells)
    if not cells and covering is None:
        raise PlanError(f"{matrix.source}: the exclude rules leave no cell to run")
    sizes = sorted((len(v) for v in axes.values()), reverse=True) + [1, 1]
    return Plan(
        matrix=matrix,
        cells=tuple(cells),
        full_size=len(full) * len(hardware),
        pairwise_lower_bound=(covering.lower_bound if covering is not None else sizes[0] * sizes[1])
        * len(hardware),
        covering=covering,
    )


def _check_distinct(matrix: Matrix, cells: Sequence[Cell]) -> None:
    """Two cells of one label would share a records file and a nox session: the checks of
    the config keep every axis value apart, and this holds the plan to it. (Equal ids mean
    equal cells, hence equal labels: the label is the one to check.)"""
    problems = []
    first: dict[str, Cell] = {}
    for cell in cells:
        other = first.setdefault(cell.label, cell)
        if other is cell:
            continue
        both = (
            f"the cell {cell.id} twice"
            if other == cell
            else f"{other.to_dict(with_label=False)} and {cell.to_dict(with_label=False)}"
        )
        problems.append(
            f"{matrix.source}: two cells have the label {cell.label!r} ({both}); list each "
            "python, version and hardware class once, spelled apart from the others"
        )
    if problems:
        raise ConfigError(problems)


def _check_size(matrix: Matrix, axes: Mapping[str, Sequence[Any]]) -> None:
    size = math.prod(len(values) for values in axes.values())
    if size > MAX_COMBINATIONS:
        counts = " x ".join(f"{len(v)} {name}" for name, v in axes.items() if len(v) > 1)
        raise PlanError(
            f"{matrix.source}: the axes make {size:,} combinations ({counts}); ftmatrix plans "
            f"at most {MAX_COMBINATIONS:,}: name fewer versions, or split the matrix into "
            "profiles (strategy: pairwise still starts from every combination)"
        )


def _included(matrix: Matrix, combos: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The combinations an include rule adds back, whatever the strategy chose."""
    return [c for c in combos if any(_rule_matches(r, c, None) for r in matrix.include)]


def _cells_on_hardware(
    matrix: Matrix, chosen: Sequence[Mapping[str, Any]], hardware: Sequence[str]
) -> list[Cell]:
    """Each chosen combination on each hardware class its exclude rules leave."""
    return [
        Cell(
            python=str(combo["python"]),
            pins=tuple((a.package, combo[a.package]) for a in matrix.packages),
            hardware=hw,
            support=matrix.support,
        )
        for combo in chosen
        for hw in hardware
        if not any(_rule_matches(r, combo, hw) for r in matrix.exclude)
    ]


def select_cells(cells: Sequence[Cell], patterns: Iterable[str]) -> list[Cell]:
    """The cells whose label matches any of the glob ``patterns`` (all if none given)."""
    patterns = list(patterns)
    if not patterns:
        return list(cells)
    unmatched = [p for p in patterns if not any(fnmatch.fnmatchcase(c.label, p) for c in cells)]
    if unmatched:
        example = cells[0].label if cells else "cpu-py3.11-torch2.13.0-tf4.57.6"
        raise PlanError(
            f"no cell label matches {', '.join(repr(p) for p in unmatched)}; "
            f"labels look like {example!r} (globs such as 'cpu-*-trl0.19*' work)"
        )
    return [c for c in cells if any(fnmatch.fnmatchcase(c.label, p) for p in patterns)]


def _axes(matrix: Matrix) -> dict[str, tuple[str | None, ...]]:
    axes: dict[str, tuple[str | None, ...]] = {"python": tuple(matrix.python)}
    for axis in matrix.packages:
        axes[axis.package] = axis.versions
    return axes


def _rule_matches(rule: Rule, combo: Mapping[str, Any], hardware: str | None) -> bool:
    """Does ``rule`` hold for this combination (and hardware class, when given)?"""
    for key, pattern in rule.match.items():
        if key == "hardware":
            if hardware is not None and not fnmatch.fnmatchcase(hardware, pattern):
                return False
            continue
        value = combo.get(key)
        if key == "python":
            if not fnmatch.fnmatchcase(str(value), pattern):
                return False
        elif pattern == NOT_INSTALLED or value is None:
            if not (pattern == NOT_INSTALLED and value is None):
                return False
        elif not pattern_specifier(pattern).contains(Version(value), prereleases=True):
            return False
    return True


def _excluded_any(rules: Sequence[Rule], combo: Mapping[str, Any], hardware: list[str]) -> bool:
    # Excluded from the strategy's choice only when excluded on every hardware class;
    # rules naming one class are applied per cell afterwards.
    return any(all(_rule_matches(r, combo, hw) for hw in hardware) for r in rules)


def _check_rules_match(
    matrix: Matrix, combos: Sequence[Mapping[str, Any]], hardware: Sequence[str]
) -> None:
    problems = []
    for kind, rules in (("exclude", matrix.exclude), ("include", matrix.include)):
        for rule in rules:
            if not any(_rule_matches(rule, c, hw) for c in combos for hw in hardware):
                hw_pattern = rule.match.get("hardware")
                if hw_pattern and not any(fnmatch.fnmatchcase(h, hw_pattern) for h in hardware):
                    why = (
                        f"no hardware class matches {hw_pattern!r} (classes: {', '.join(hardware)})"
                    )
                else:
                    why = "it matches no combination of the axes"
                problems.append(
                    f"{matrix.source}: {kind}[{rule.index}]: {dict(rule.match)} "
                    f"matches no cell: {why}"
                )
    if problems:
        raise PlanError("\n".join(problems))
