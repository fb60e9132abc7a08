"""Planning at scale: expansion, pairwise against its lower bound, and resolution.

Side by side in one run, printed as a table and JSON (never asserted):
- expanding a 200-cell and a 2,000-cell matrix (full), and the same axes pairwise:
  cells chosen against the full product and the lower bound (largest product of two
  axis sizes);
- resolving 200 distinct cells of small real packages with uv, cold (empty uv cache)
  and warm (same cache), resolver threads in parallel;
- the installable covering of 6 axes x 6 values with about 30% of pairs impossible,
  an oracle in place of uv (a "banded" model, where newer releases need newer partners
  as in real stacks, and uniform random impossibilities): cells chosen against the lower
  bound (the largest product of two axes' installable values), oracle calls (the
  resolutions it would spend), wall time cold (every answer computed) and warm (answers
  cached, as with a warm resolution cache: the planner's own time);
- the nightly profile of matrix.yaml with real uv: cells chosen, installable cells, pairs
  covered of the pairs that co-install, impossible pairs found, cap probes, resolutions
  spent, wall time cold (an empty resolution cache; uv's own cache as it is) and warm;
- peak memory of this process.

    python benchmarks/bench_plan.py [--json out.json] [--no-nightly]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import resource
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from ftmatrix.cli import load, resolve_cells  # noqa: E402
from ftmatrix.config import parse_matrix  # noqa: E402
from ftmatrix.plan import IMPOSSIBLE, Installability, cover_installable, plan_cells  # noqa: E402


def matrix_text(axes: dict[str, list[str]], strategy: str) -> str:
    lines = ["packages:"] + [f"  {k}: {v!r}" for k, v in axes.items()]
    return "\n".join([*lines, f"strategy: {strategy}"])


def timed_plan(axes: dict[str, list[str]], strategy: str) -> tuple[float, object]:
    matrix = parse_matrix(matrix_text(axes, strategy), source="bench", default_python="3.11")
    start = time.perf_counter()
    plan = plan_cells(matrix)
    return time.perf_counter() - start, plan


Pin = tuple[str, str]


def banded_conflicts(names: list[str], size: int, seed: int = 0) -> set[frozenset[Pin]]:
    """Per pair of axes: no constraint, or value i needs a partner within 2 (or 1) releases."""
    rng = random.Random(seed)
    bad: set[frozenset[Pin]] = set()
    for a, b in itertools.combinations(names, 2):
        width = rng.choices([None, 2, 1], weights=[0.35, 0.4, 0.25])[0]
        if width is None:
            continue
        for i, j in itertools.product(range(size), repeat=2):
            if abs(i - j) > width:
                bad.add(frozenset({(a, f"{i}.0"), (b, f"{j}.0")}))
    return bad


def uniform_conflicts(
    names: list[str], size: int, share: float = 0.3, seed: int = 0
) -> set[frozenset[Pin]]:
    rng = random.Random(seed)
    return {
        frozenset({(a, f"{i}.0"), (b, f"{j}.0")})
        for a, b in itertools.combinations(names, 2)
        for i, j in itertools.product(range(size), repeat=2)
        if rng.random() < share
    }


def covering_figures(
    model: str, bad: set[frozenset[Pin]], names: list[str], size: int
) -> dict[str, object]:
    values = {n: [f"{i}.0" for i in range(size)] for n in names}
    combos = [dict(zip(names, c, strict=True)) for c in itertools.product(*values.values())]
    calls = [0]
    answers: dict[tuple[Pin, ...], Installability] = {}

    def oracle(queries):  # type: ignore[no-untyped-def]
        out = []
        for query in queries:
            key = tuple(sorted((k, v) for k, v in query.items() if v is not None))
            if key not in answers:
                calls[0] += 1
                ok = not any(frozenset(p) in bad for p in itertools.combinations(key, 2))
                answers[key] = Installability(installable=ok, reason=None if ok else "conflict")
            out.append(answers[key])
        return out

    figures: dict[str, object] = {}
    for label in ("cold", "warm"):
        start = time.perf_counter()
        covering = cover_installable(combos, names, oracle)
        figures[f"cover_{model}_{label}_s"] = round(time.perf_counter() - start, 2)
        if label == "cold":
            figures[f"cover_{model}_resolutions"] = calls[0]
    impossible = len(covering.of_kind(IMPOSSIBLE))
    pairs = len(list(itertools.combinations(names, 2))) * size * size
    # A tighter bound than the product: the most co-installable pairs two axes have.
    tight = max(
        sum(
            1
            for x, y in itertools.product(values[a], values[b])
            if frozenset({(a, x), (b, y)}) not in bad
        )
        for a, b in itertools.combinations(names, 2)
    )
    figures.update(
        {
            f"cover_{model}_impossible_share": round(impossible / pairs, 2),
            f"cover_{model}_cells": len(covering.cells),
            f"cover_{model}_lower_bound": covering.lower_bound,
            f"cover_{model}_size_over_bound": round(len(covering.cells) / covering.lower_bound, 2),
            f"cover_{model}_tighter_bound": tight,
            f"cover_{model}_pairs_covered": f"{covering.pairs_covered}/{covering.pairs_possible}",
        }
    )
    return figures


def nightly_figures() -> dict[str, object]:
    """The nightly profile planned with real uv, cold (empty resolution cache) and warm."""
    work = Path(tempfile.mkdtemp(prefix="ftmatrix-bench-nightly-"))
    env = {
        **os.environ,
        "FTMATRIX_MATRIX": str(ROOT / "matrix.yaml"),
        "FTMATRIX_PROFILE": "nightly",
        "FTMATRIX_CACHE_DIR": str(work / "resolve"),
    }
    figures: dict[str, object] = {}
    for label in ("cold", "warm"):
        start = time.perf_counter()
        loaded = load(env, root=ROOT, now=datetime.now(UTC))
        answers = resolve_cells(loaded.selected, loaded.matrix.install, env, loaded.matrix.limits)
        figures[f"nightly_{label}_s"] = round(time.perf_counter() - start, 1)
    covering = loaded.plan.covering
    assert covering is not None
    plain = [c for c in loaded.plan.cells if not c.overrides]
    figures.update(
        {
            "nightly_cells": len(plain),
            "nightly_cells_installable": sum(
                1
                for c, a in zip(loaded.selected, answers, strict=True)
                if a.lock is not None and not c.overrides
            ),
            "nightly_pairs_covered": f"{covering.pairs_covered}/{covering.pairs_possible}",
            "nightly_impossible_pairs": len(covering.of_kind(IMPOSSIBLE)),
            "nightly_uninstallable_values": len(covering.findings)
            - len(covering.of_kind(IMPOSSIBLE)),
            "nightly_probes": len(loaded.plan.cells) - len(plain),
            "nightly_resolutions": covering.resolutions,
        }
    )
    shutil.rmtree(work, ignore_errors=True)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--no-nightly", action="store_true", help="skip the real-uv nightly plan")
    args = parser.parse_args()
    figures: dict[str, object] = {}

    names = [f"p{i}" for i in range(6)]
    figures.update(covering_figures("banded", banded_conflicts(names, 6), names, 6))
    figures.update(covering_figures("uniform", uniform_conflicts(names, 6), names, 6))
    if not args.no_nightly:
        figures.update(nightly_figures())

    # 200 = 5 x 5 x 8; 2,000 = 5 x 5 x 8 x 10 (synthetic versions: expansion only).
    small = {
        "a": [f"1.{i}.0" for i in range(5)],
        "b": [f"2.{i}.0" for i in range(5)],
        "c": [f"3.{i}.0" for i in range(8)],
    }
    large = {**small, "d": [f"4.{i}.0" for i in range(10)]}
    for name, axes in (("200", small), ("2000", large)):
        full_s, full = timed_plan(axes, "full")
        pair_s, pair = timed_plan(axes, "pairwise")
        figures[f"plan_{name}_full_s"] = round(full_s, 3)
        figures[f"plan_{name}_pairwise_s"] = round(pair_s, 3)
        figures[f"pairwise_{name}_cells"] = len(pair.cells)  # type: ignore[attr-defined]
        figures[f"pairwise_{name}_lower_bound"] = pair.pairwise_lower_bound  # type: ignore[attr-defined]
        figures[f"pairwise_{name}_full_product"] = len(full.cells)  # type: ignore[attr-defined]

    # 200 real, distinct pin sets of small pure-Python packages.
    real = {
        "six": ["1.15.0", "1.16.0", "1.17.0", "1.14.0", "1.13.0"],
        "attrs": ["21.4.0", "22.2.0", "23.2.0", "24.2.0", "25.3.0"],
        "idna": ["3.4", "3.6", "3.7", "3.8", "3.10", "3.9", "3.5", "3.3"],
    }
    matrix = parse_matrix(matrix_text(real, "full"), source="bench", default_python="3.11")
    cells = plan_cells(matrix).cells
    work = Path(tempfile.mkdtemp(prefix="ftmatrix-bench-plan-"))
    env = {
        **os.environ,
        "UV_CACHE_DIR": str(work / "uv-cache"),
        "FTMATRIX_CACHE_DIR": str(work / "ftmatrix-cache"),
    }
    for label in ("cold", "warm"):
        start = time.perf_counter()
        answers = resolve_cells(cells, matrix.install, env)
        figures[f"resolve_{len(cells)}_{label}_s"] = round(time.perf_counter() - start, 2)
    figures["resolved_installable"] = sum(1 for a in answers if a.lock)
    shutil.rmtree(work, ignore_errors=True)
    figures["peak_memory_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)

    width = max(len(k) for k in figures)
    print(f"{'measure':<{width}}  value")
    for key, value in figures.items():
        print(f"{key:<{width}}  {value}")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
