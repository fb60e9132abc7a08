"""Nightly cost against change: three nights on the same real cells, with result reuse.

Side by side in one run, printed as a table and JSON (never asserted):
- night 1, cold (new venvs, an empty resolution cache; uv's own cache warm): every cell runs;
- night 2, nothing changed: every cell's results are reused;
- night 3, one package "released" (UV_EXCLUDE_NEWER moved past a certifi release, which
  the requests cells' locks float on): only the cells whose lock moved run.
Per night: cells executed, cases executed (and, seen from outside the cells, the
lines test_counted appends to a file, one per cell that ran it), wall time of
``nox -s matrix`` (the report included) and its ratio to night 1.
Night 3's cells are checked against the cells whose lock moved, resolved independently.

The cases of tests/data/reuse_cases take no time of their own; ``--case-seconds`` gives
each case that much work (a sleep), as a real case's training steps would: the nights are
measured for each value given.

    python benchmarks/bench_nightly.py [--case-seconds 0 5] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from ftmatrix.cell.records import read_records  # noqa: E402
from ftmatrix.cli import load, resolve_cells  # noqa: E402

MATRIX = ROOT / "tests" / "data" / "reuse_matrix.yaml"
CASES = ROOT / "tests" / "data" / "reuse_cases"
# certifi 2026.7.22 was uploaded 2026-07-22T03:35Z; nothing else these cells lock moved
# between the two dates (tests/test_reuse_e2e.py checks it).
BEFORE = "2026-07-21T00:00:00Z"
AFTER = "2026-07-23T00:00:00Z"


def night(work: Path, number: int, env: dict[str, str]) -> dict[str, Any]:
    """Run one night through nox; what ran and how long it took."""
    run_id = f"2026120{number}T020000Z"
    log = work / "ran.log"
    log.unlink(missing_ok=True)
    start = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "nox",
            "-f",
            str(ROOT / "noxfile.py"),
            "--envdir",
            str(work / "envs"),
            "-s",
            "matrix",
        ],
        env={**env, "FTMATRIX_RUN_ID": run_id, "FTMATRIX_REUSE_LOG": str(log)},
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wall = time.perf_counter() - start
    records = read_records(work / "out" / "records" / run_id).records
    return {
        "wall_s": round(wall, 2),
        "cells": len({r.cell_id for r in records}),
        "cells_executed": sorted({r.cell_label for r in records if r.reused_from is None}),
        "cases_executed": sum(1 for r in records if r.reused_from is None),
        # Seen from outside the cells: test_counted's lines, one per cell that ran it.
        "cells_logged": len(log.read_text().splitlines()) if log.exists() else 0,
        "lock_ids": {r.cell_label: r.lock_id for r in records},
    }


def moved_cells(env: dict[str, str], before: dict[str, str | None]) -> list[str]:
    """The cells whose lock at AFTER differs from their night-1 lock, resolved apart."""
    loaded = load(env, root=ROOT, now=datetime.now(UTC))
    after_env = {**env, "UV_EXCLUDE_NEWER": AFTER}
    answers = resolve_cells(loaded.selected, loaded.matrix.install, after_env, loaded.matrix.limits)
    return sorted(
        cell.label
        for cell, answer in zip(loaded.selected, answers, strict=True)
        if answer.lock_id != before.get(cell.label)
    )


def three_nights(case_seconds: float) -> dict[str, Any]:
    """Nights 1 to 3 in a fresh folder, each case working ``case_seconds``."""
    with tempfile.TemporaryDirectory(prefix="ftmatrix-bench-nightly-") as scratch:
        work = Path(scratch)
        shutil.copytree(CASES, work / "cases")
        env = {
            **os.environ,
            "FTMATRIX_MATRIX": str(MATRIX),
            "FTMATRIX_CASES": str(work / "cases"),
            "FTMATRIX_OUT": str(work / "out"),
            "FTMATRIX_CACHE_DIR": str(work / "resolve-cache"),
            "FTMATRIX_BENCH_CASE_SECONDS": str(case_seconds),
            "UV_EXCLUDE_NEWER": BEFORE,
            # This checkout's ftmatrix in nox too, whichever one is installed.
            "PYTHONPATH": os.pathsep.join(
                p for p in (str(ROOT / "src"), os.environ.get("PYTHONPATH", "")) if p
            ),
        }
        first = night(work, 1, env)
        second = night(work, 2, env)
        expected = moved_cells(env, first["lock_ids"])
        third = night(work, 3, {**env, "UV_EXCLUDE_NEWER": AFTER})
    nights = [first, second, third]
    for result in nights:
        result["wall_ratio"] = round(result["wall_s"] / first["wall_s"], 3)
        del result["lock_ids"]
    return {
        "case_seconds": case_seconds,
        "nights": nights,
        "night3_cells_whose_lock_moved": expected,
        "night3_runs_exactly_those": third["cells_executed"] == expected,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case-seconds", type=float, nargs="+", default=[0.0, 5.0])
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    figures = [three_nights(seconds) for seconds in args.case_seconds]
    print(f"{'case work':<10}  {'night':<28}  cells run  cases run  wall (s)  x night 1")
    names = ("1 cold", "2 nothing changed", "3 certifi released")
    for block in figures:
        for name, result in zip(names, block["nights"], strict=True):
            print(
                f"{block['case_seconds']:<10g}  {name:<28}  "
                f"{len(result['cells_executed'])}/{result['cells']:<7}  "
                f"{result['cases_executed']:<9}  {result['wall_s']:<8}  {result['wall_ratio']}"
            )
        print(
            f"{'':<10}  night 3 ran exactly the cells whose lock moved "
            f"({', '.join(block['night3_cells_whose_lock_moved'])}): "
            f"{block['night3_runs_exactly_those']}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
