"""Pairwise covering: a small subset of combinations in which every value pair occurs.

Used on both sides of the host/cell boundary: the plan covers version pairs with it, and
cases cover the knobs users turn (``cases/helpers/knobs.py``) with it inside a cell. Standard
library only, so a cell's venv can import it.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator, Mapping, Sequence
from typing import Any


def cover_pairs(
    combos: Sequence[dict[str, Any]], names: Sequence[str], *, restarts: int = 20
) -> list[dict[str, Any]]:
    """A small subset of ``combos`` in which every value pair that occurs in them occurs.

    Greedy set cover (each step takes the combination covering the most uncovered
    pairs), run once with ties to the earliest combination and ``restarts`` times
    with seeded random tie-breaking; the smallest cover wins. Seeded, so plans are
    stable from run to run.
    """
    if len(names) < 2:
        return list(combos)
    pair_sets = [frozenset(_pairs(c, names)) for c in combos]
    # Larger matrices get fewer restarts: each costs one full greedy pass.
    tries = [None, *(random.Random(seed) for seed in range(restarts if len(combos) <= 5000 else 0))]
    best = min((greedy_cover(pair_sets, rng) for rng in tries), key=len)
    return [combos[i] for i in best]


def greedy_cover(
    pair_sets: Sequence[frozenset[Any]],
    rng: random.Random | None,
    uncovered: set[Any] | None = None,
) -> list[int]:
    uncovered = set().union(*pair_sets) if uncovered is None else set(uncovered)
    wanted = set(uncovered)
    chosen: list[int] = []
    taken = [False] * len(pair_sets)
    while uncovered:
        best: list[int] = []
        gain = 0
        for i, pairs in enumerate(pair_sets):
            if taken[i]:
                continue
            g = len(pairs & uncovered)
            if g > gain:
                best, gain = [i], g
            elif g == gain and g:
                best.append(i)
        pick = best[0] if rng is None else rng.choice(best)
        taken[pick] = True
        chosen.append(pick)
        uncovered -= pair_sets[pick]
    return _drop_redundant(chosen, pair_sets, wanted)


def _drop_redundant(
    chosen: list[int], pair_sets: Sequence[frozenset[Any]], wanted: set[Any]
) -> list[int]:
    """Greedy's early picks can end up covering nothing the later ones do not: drop them."""
    counts: dict[Any, int] = {}
    for i in chosen:
        for pair in pair_sets[i] & wanted:
            counts[pair] = counts.get(pair, 0) + 1
    kept = []
    for i in chosen:
        mine = pair_sets[i] & wanted
        if all(counts[pair] > 1 for pair in mine):
            for pair in mine:
                counts[pair] -= 1
        else:
            kept.append(i)
    return kept


def _pairs(combo: Mapping[str, Any], names: Sequence[str]) -> Iterator[tuple[Any, ...]]:
    for a, b in itertools.combinations(names, 2):
        yield (a, combo[a], b, combo[b])
