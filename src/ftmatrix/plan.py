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
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from packaging.utils import canonicalize_name
from packaging.version import Version

from ftmatrix.cell.covering import cover_pairs, greedy_cover
from ftmatrix.config import NOT_INSTALLED, Matrix, Rule, pattern_specifier
from ftmatrix.errors import PlanError

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
    size = math.prod(len(values) for values in axes.values())
    if size > MAX_COMBINATIONS:
        counts = " x ".join(f"{len(v)} {name}" for name, v in axes.items() if len(v) > 1)
        raise PlanError(
            f"{matrix.source}: the axes make {size:,} combinations ({counts}); ftmatrix plans "
            f"at most {MAX_COMBINATIONS:,}: name fewer versions, or split the matrix into "
            "profiles (strategy: pairwise still starts from every combination)"
        )
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
    for combo in combos:
        if combo not in chosen and any(_rule_matches(r, combo, None) for r in matrix.include):
            chosen.append(combo)

    cells = []
    for combo in chosen:
        for hw in hardware:
            if any(_rule_matches(r, combo, hw) for r in matrix.exclude):
                continue
            cells.append(
                Cell(
                    python=str(combo["python"]),
                    pins=tuple((a.package, combo[a.package]) for a in matrix.packages),
                    hardware=hw,
                    support=matrix.support,
                )
            )
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


# -- Covering what installs ------------------------------------------------------------
#
# Pairwise covering with constraints, as PICT and NIST ACTS do it, except that the
# constraints are not written by hand: the resolver discovers them. Resolutions are
# the expensive step (seconds each), so the order is chosen to spend few:
#   1. each value alone (with the axes that have a single value, which every cell has);
#   2. each pair of values whose parts install alone ('none' pairs with anything that
#      installs alone: not installing a package constrains nothing);
#   3. greedy covering over the combinations whose every pair can co-install;
#   4. each chosen cell; a cell that fails anyway (a conflict of three or more) is
#      never chosen again, and the pairs it was to cover are covered again.
# A pair that installs alone but in no combination that installs is reported too.

Value = str | None


@dataclass(frozen=True, kw_only=True)
class Installability:
    """The installer's answer for one set of pins."""

    installable: bool
    reason: str | None = None
    # False when the resolver gave no answer (network, index): not a proof either way.
    proven: bool = True


# Given sets of pins (axis -> value; None: not installed), the installer's answers, in
# order. Batched so that an implementation may ask in parallel.
Oracle = Callable[[Sequence[Mapping[str, Value]]], Sequence[Installability]]

# What a finding says of its pins.
CANNOT_INSTALL = "cannot-install"  # a value that installs with nothing
IMPOSSIBLE = "impossible"  # a pair that cannot co-install, whatever else is chosen
NO_CELL = "no-cell"  # a pair that co-installs alone but in no combination that installs
UNRESOLVED = "unresolved"  # the resolver failed to answer (after retries)


@dataclass(frozen=True, kw_only=True)
class PlanFinding:
    """Pins the plan could not put in an installable cell, and why."""

    kind: str
    pins: tuple[tuple[str, Value], ...]
    reason: str | None

    def describe(self) -> str:
        """``vllm 0.32.0 x torch 2.14.1``."""
        return " x ".join(f"{k} {v if v is not None else 'none'}" for k, v in self.pins)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "pins": dict(self.pins), "reason": self.reason}


@dataclass(frozen=True, kw_only=True)
class Covering:
    """Installable cells covering every pair that can co-install, and the findings."""

    cells: tuple[Mapping[str, Value], ...]
    findings: tuple[PlanFinding, ...]
    # Cells chosen, resolved and found not to install (a conflict of three or more).
    failed: tuple[tuple[Mapping[str, Value], str | None], ...]
    pairs_needed: int  # pairs the allowed combinations hold
    pairs_possible: int  # of those, pairs that co-install (asked alone)
    pairs_covered: int
    resolutions: int  # sets of pins handed to the oracle
    lower_bound: int  # largest product of two axes' installable values
    # Every pair asked: (axis, value, axis, value) -> installable; the report's matrix.
    pair_table: tuple[tuple[tuple[str, Value, str, Value], bool], ...] = field(default=())

    def of_kind(self, kind: str) -> list[PlanFinding]:
        return [f for f in self.findings if f.kind == kind]


_Pair = tuple[str, Value, str, Value]


class _Counted:
    """The oracle, each distinct set of pins asked once, the number asked counted."""

    def __init__(self, oracle: Oracle, context: Mapping[str, Value]) -> None:
        self.oracle = oracle
        self.context = dict(context)
        self.answers: dict[tuple[tuple[str, str], ...], Installability] = {}

    def ask(self, queries: Sequence[Mapping[str, Value]]) -> list[Installability]:
        # 'none' pins nothing: a cell without vllm asks what its installed values ask.
        keys = [
            tuple(sorted((k, v) for k, v in {**self.context, **q}.items() if v is not None))
            for q in queries
        ]
        fresh = list(dict.fromkeys(k for k in keys if k not in self.answers))
        if fresh:
            verdicts = self.oracle([dict(k) for k in fresh])
            self.answers.update(zip(fresh, verdicts, strict=True))
        return [self.answers[k] for k in keys]


def cover_installable(
    combos: Sequence[Mapping[str, Value]],
    names: Sequence[str],
    oracle: Oracle,
    *,
    restarts: int = 20,
) -> Covering:
    """Installable cells among ``combos`` in which every value pair that can co-install occurs.

    ``oracle`` answers whether a set of pins installs (uv in production, a table in
    tests). Pairs that cannot co-install are findings, never cells; so are values that
    install with nothing, and pairs that co-install but in no combination that does.
    """
    columns = {n: [c[n] for c in combos] for n in names}
    values: dict[str, list[Value]] = {n: list(dict.fromkeys(columns[n])) for n in names}
    # Axes with one value are in every cell: they are asked with every query.
    fixed = {n: v[0] for n, v in values.items() if len(v) == 1}
    varying = [n for n in names if n not in fixed]
    counted = _Counted(oracle, fixed)
    if not varying:
        return _one_combination(combos, counted)
    singles: list[tuple[str, Value]] = [(n, v) for n in varying for v in values[n] if v is not None]
    singles_ok = dict(zip(singles, counted.ask([{n: v} for n, v in singles]), strict=True))
    findings = [
        PlanFinding(
            kind=CANNOT_INSTALL if verdict.proven else UNRESOLVED,
            pins=((n, v),),
            reason=verdict.reason,
        )
        for (n, v), verdict in singles_ok.items()
        if not verdict.installable
    ]
    needed = sorted(
        {
            (a, x, b, y)
            for a, b in itertools.combinations(varying, 2)
            for x, y in set(zip(columns[a], columns[b], strict=True))
        },
        key=lambda p: tuple(map(str, p)),
    )
    status, pair_findings = _classify_pairs(needed, singles_ok, counted)
    findings += pair_findings
    chosen, failed, uncovered = _cover_with_cells(
        combos, columns, varying, status, counted, restarts=restarts
    )
    for pair in sorted(uncovered, key=lambda p: tuple(map(str, p))):
        reasons = [r for c, r in failed if _has_pair(c, pair)]
        findings.append(
            PlanFinding(
                kind=NO_CELL,
                pins=((pair[0], pair[1]), (pair[2], pair[3])),
                reason=reasons[0]
                if reasons
                else "no allowed combination holds it with values that co-install with it",
            )
        )
    possible = sum(1 for ok in status.values() if ok)
    installable_counts = sorted(
        (sum(1 for v in values[n] if v is None or singles_ok[(n, v)].installable) for n in varying),
        reverse=True,
    ) + [1, 1]
    return Covering(
        cells=tuple(combos[i] for i in sorted(chosen)),
        findings=tuple(findings),
        failed=tuple(failed),
        pairs_needed=len(needed),
        pairs_possible=possible,
        pairs_covered=possible - len(uncovered),
        resolutions=len(counted.answers),
        lower_bound=installable_counts[0] * installable_counts[1],
        pair_table=tuple(sorted(status.items(), key=lambda item: tuple(map(str, item[0])))),
    )


def _classify_pairs(
    needed: Sequence[_Pair],
    singles: Mapping[tuple[str, Value], Installability],
    counted: _Counted,
) -> tuple[dict[_Pair, bool], list[PlanFinding]]:
    """Which pairs co-install: asked of the oracle only where neither part settles it."""

    def alone(name: str, value: Value) -> bool:
        return value is None or singles[(name, value)].installable

    status: dict[_Pair, bool] = {}
    ask: list[_Pair] = []
    for pair in needed:
        a, va, b, vb = pair
        if not (alone(a, va) and alone(b, vb)):
            status[pair] = False  # a finding already: the value that installs with nothing
        elif va is None or vb is None:
            status[pair] = True  # not installing a package constrains nothing
        else:
            ask.append(pair)
    findings = []
    verdicts = counted.ask([{p[0]: p[1], p[2]: p[3]} for p in ask])
    for pair, verdict in zip(ask, verdicts, strict=True):
        status[pair] = verdict.installable
        if not verdict.installable:
            findings.append(
                PlanFinding(
                    kind=IMPOSSIBLE if verdict.proven else UNRESOLVED,
                    pins=((pair[0], pair[1]), (pair[2], pair[3])),
                    reason=verdict.reason,
                )
            )
    return status, findings


def _cover_with_cells(
    combos: Sequence[Mapping[str, Value]],
    columns: Mapping[str, Sequence[Value]],
    varying: Sequence[str],
    status: Mapping[_Pair, bool],
    counted: _Counted,
    *,
    restarts: int,
) -> tuple[list[int], list[tuple[Mapping[str, Value], str | None]], set[_Pair]]:
    """Greedy covering over the combinations whose pairs all co-install, each chosen cell
    asked; one that fails anyway is never chosen again and its pairs are covered anew.
    Returns the chosen cells, the failed ones with their reasons, and what stays uncovered."""
    rows: Sequence[int] = range(len(combos))
    axis_pairs = list(itertools.combinations(varying, 2))
    for a, b in axis_pairs:  # drop combinations holding a pair that cannot co-install
        bad = {(x, y) for (pa, x, pb, y), ok in status.items() if not ok and (pa, pb) == (a, b)}
        if bad:
            rows = [i for i in rows if (columns[a][i], columns[b][i]) not in bad]
    # Pairs as small integers: the greedy step intersects many sets of them.
    ids = {pair: n for n, pair in enumerate(status)}
    pair_sets = {
        i: frozenset(ids[(a, columns[a][i], b, columns[b][i])] for a, b in axis_pairs) for i in rows
    }
    uncovered = {ids[p] for p, ok in status.items() if ok}
    chosen: list[int] = []
    failed: list[tuple[Mapping[str, Value], str | None]] = []
    while uncovered:
        open_ = {i: pairs & uncovered for i, pairs in pair_sets.items()}
        open_ = {i: pairs for i, pairs in open_.items() if pairs}
        if not open_:
            break
        # Restarts cost a greedy pass each: fewer where the candidates are many.
        tries = restarts if len(open_) <= 500 else restarts // 4 if len(open_) <= 5000 else 0
        picks = _cover(open_, uncovered, tries)
        verdicts = counted.ask([combos[i] for i in picks])
        for i, verdict in zip(picks, verdicts, strict=True):
            if verdict.installable:
                chosen.append(i)
                uncovered -= pair_sets[i]
            else:
                failed.append((combos[i], verdict.reason))
            del pair_sets[i]  # asked once: installable and chosen, or never again
    pairs = {n: pair for pair, n in ids.items()}
    return chosen, failed, {pairs[n] for n in uncovered}


def _one_combination(combos: Sequence[Mapping[str, Value]], counted: _Counted) -> Covering:
    """Every axis has one value: the one combination, if it installs."""
    (verdict,) = counted.ask([{}]) if combos else [Installability(installable=False, reason=None)]
    findings: tuple[PlanFinding, ...] = ()
    if combos and not verdict.installable:
        kind = CANNOT_INSTALL if verdict.proven else UNRESOLVED
        pins = tuple((k, v) for k, v in combos[0].items() if v is not None)
        findings = (PlanFinding(kind=kind, pins=pins, reason=verdict.reason),)
    return Covering(
        cells=tuple(combos[:1]) if verdict.installable else (),
        findings=findings,
        failed=(),
        pairs_needed=0,
        pairs_possible=0,
        pairs_covered=0,
        resolutions=len(counted.answers),
        lower_bound=1,
    )


def _has_pair(combo: Mapping[str, Value], pair: _Pair) -> bool:
    return combo.get(pair[0]) == pair[1] and combo.get(pair[2]) == pair[3]


def _cover(open_: Mapping[int, frozenset[Any]], uncovered: set[Any], restarts: int) -> list[int]:
    """Greedy set cover of what ``open_`` can cover; the smallest of seeded restarts."""
    reachable = set().union(*open_.values()) & uncovered
    keys = list(open_)
    sets = [open_[k] for k in keys]
    tries = [None, *(random.Random(seed) for seed in range(restarts))]
    best = min((greedy_cover(sets, rng, reachable) for rng in tries), key=len)
    return [keys[i] for i in best]
