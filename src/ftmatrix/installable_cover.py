"""Covering what installs: pairwise cells chosen among combinations the resolver accepts.

Pairwise covering with constraints, as PICT and NIST ACTS do it, except that the
constraints are not written by hand: the resolver discovers them. Resolutions are
the expensive step (seconds each), so the order is chosen to spend few:
  1. each value alone (with the axes that have a single value, which every cell has);
  2. each pair of values whose parts install alone ('none' pairs with anything that
     installs alone: not installing a package constrains nothing);
  3. greedy covering over the combinations whose every pair can co-install;
  4. each chosen cell; a cell that fails anyway (a conflict of three or more) is
     never chosen again, and the pairs it was to cover are covered again.
A pair that installs alone but in no combination that installs is reported too.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ftmatrix.cell.covering import greedy_cover

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
    needed = _needed_pairs(varying, columns)
    status, pair_findings = _classify_pairs(needed, singles_ok, counted)
    chosen, failed, uncovered = _cover_with_cells(
        combos, columns, varying, status, counted, restarts=restarts
    )
    possible = sum(1 for ok in status.values() if ok)
    return Covering(
        cells=tuple(combos[i] for i in sorted(chosen)),
        findings=(
            *_value_findings(singles_ok),
            *pair_findings,
            *_uncovered_findings(uncovered, failed),
        ),
        failed=tuple(failed),
        pairs_needed=len(needed),
        pairs_possible=possible,
        pairs_covered=possible - len(uncovered),
        resolutions=len(counted.answers),
        lower_bound=_lower_bound(values, varying, singles_ok),
        pair_table=tuple(sorted(status.items(), key=lambda item: tuple(map(str, item[0])))),
    )


def _needed_pairs(varying: Sequence[str], columns: Mapping[str, Sequence[Value]]) -> list[_Pair]:
    """Every pair of values of two varying axes that some allowed combination holds."""
    found = {
        (a, x, b, y)
        for a, b in itertools.combinations(varying, 2)
        for x, y in set(zip(columns[a], columns[b], strict=True))
    }
    return sorted(found, key=lambda p: tuple(map(str, p)))


def _value_findings(singles_ok: Mapping[tuple[str, Value], Installability]) -> list[PlanFinding]:
    """Values that install with nothing (or that the resolver could not answer for)."""
    return [
        PlanFinding(
            kind=CANNOT_INSTALL if verdict.proven else UNRESOLVED,
            pins=((n, v),),
            reason=verdict.reason,
        )
        for (n, v), verdict in singles_ok.items()
        if not verdict.installable
    ]


def _uncovered_findings(
    uncovered: set[_Pair], failed: Sequence[tuple[Mapping[str, Value], str | None]]
) -> list[PlanFinding]:
    """Pairs that co-install alone but in no combination that installs, with a failed
    cell's reason where one held the pair."""
    findings = []
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
    return findings


def _lower_bound(
    values: Mapping[str, Sequence[Value]],
    varying: Sequence[str],
    singles_ok: Mapping[tuple[str, Value], Installability],
) -> int:
    """The largest product of two axes' installable values: no covering has fewer cells."""
    counts = sorted(
        (sum(1 for v in values[n] if v is None or singles_ok[(n, v)].installable) for n in varying),
        reverse=True,
    ) + [1, 1]
    return counts[0] * counts[1]


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
    axis_pairs = list(itertools.combinations(varying, 2))
    rows = _rows_that_may_install(len(combos), columns, axis_pairs, status)
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
        picks = _cover(open_, uncovered, _restarts_for(len(open_), restarts))
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


def _rows_that_may_install(
    count: int,
    columns: Mapping[str, Sequence[Value]],
    axis_pairs: Sequence[tuple[str, str]],
    status: Mapping[_Pair, bool],
) -> list[int]:
    """The combinations holding no pair that cannot co-install."""
    rows = list(range(count))
    for a, b in axis_pairs:
        bad = {(x, y) for (pa, x, pb, y), ok in status.items() if not ok and (pa, pb) == (a, b)}
        if bad:
            rows = [i for i in rows if (columns[a][i], columns[b][i]) not in bad]
    return rows


def _restarts_for(candidates: int, restarts: int) -> int:
    """Restarts cost a greedy pass each: fewer where the candidates are many."""
    if candidates <= 500:
        return restarts
    return restarts // 4 if candidates <= 5000 else 0


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
