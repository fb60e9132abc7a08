"""Whole-matrix wall time and per-cell overhead: ftmatrix against the naive approach.

Side by side in one run, printed as a table and JSON (never asserted):
- ftmatrix (nox + uv, supervised cells) cold (empty uv cache, fresh venvs) and warm
  (same cache, venvs reused), and a warm re-run with FTMATRIX_RESUME (nothing to do);
- the naive approach: for each cell a fresh `python -m venv`, `pip install` of the
  pins and pytest, then pytest over the cases, one cell after another;
- per-cell overhead: cell wall time minus the cases' own durations from the records;
- parallel cells (`nox -j N`, warm) against the ideal: the cases' own time divided by N.

    python benchmarks/bench_matrix.py [--matrix tests/data/small_matrix.yaml]
                                      [--cases tests/data/small_cases] [--jobs 2]
                                      [--json out.json]
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from ftmatrix.cell.records import read_records  # noqa: E402
from ftmatrix.cli import load  # noqa: E402


def run_ftmatrix(work: Path, env: dict[str, str], *, resume: bool = False, jobs: int = 1) -> float:
    run_env = {**env, "FTMATRIX_OUT": str(work / "out")}
    if resume:
        run_env["FTMATRIX_RESUME"] = "1"
    else:
        run_env.pop("FTMATRIX_RUN_ID", None)
    start = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "nox",
            "-f",
            str(ROOT / "noxfile.py"),
            *(["-j", str(jobs)] if jobs > 1 else []),
            "-s",
            "matrix",
            "--envdir",
            str(work / "envs"),
        ],
        env=run_env,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return time.perf_counter() - start


def run_naive(work: Path, env: dict[str, str], cells: list, cases: Path) -> float:
    """The baseline: fresh venv, pip install, pytest; one cell after another."""
    start = time.perf_counter()
    for cell in cells:
        venv = work / "naive" / cell.id
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        pip = [
            str(venv / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            *cell.requirements(),
            "pytest",
        ]
        # pip reads PIP_FIND_LINKS and its config itself: the wheelhouse applies as is.
        subprocess.run(pip, env=env, check=True)
        subprocess.run(
            [
                str(venv / "bin" / "python"),
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                str(cases),
            ],
            env=env,
            check=False,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    return time.perf_counter() - start


def case_seconds(out: Path) -> float:
    records = read_records(out / "records").records
    newest = max(r.run_id for r in records)
    return sum(r.duration for r in records if r.run_id == newest)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--matrix", default=str(ROOT / "tests/data/small_matrix.yaml"))
    parser.add_argument("--cases", default=str(ROOT / "tests/data/small_cases"))
    parser.add_argument("--jobs", type=int, default=2, help="parallel cells for `nox -j`")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="ftmatrix-bench-"))
    env = {**os.environ, "FTMATRIX_MATRIX": args.matrix, "FTMATRIX_CASES": args.cases}
    cells = list(load(env, root=ROOT, now=datetime.now(UTC)).selected)
    cold_env = {
        **env,
        "UV_CACHE_DIR": str(work / "uv-cache"),
        "FTMATRIX_CACHE_DIR": str(work / "ftmatrix-cache"),
    }

    cold = run_ftmatrix(work, cold_env)
    cold_cases = case_seconds(work / "out")
    warm = run_ftmatrix(work, cold_env)
    warm_cases = case_seconds(work / "out")
    rerun = run_ftmatrix(work, cold_env, resume=True)
    parallel = run_ftmatrix(work, cold_env, jobs=args.jobs)
    parallel_cases = case_seconds(work / "out")
    naive = run_naive(work, env, cells, Path(args.cases))

    n = len(cells)
    figures = {
        "cells": n,
        "ftmatrix_cold_s": round(cold, 2),
        "ftmatrix_warm_s": round(warm, 2),
        "ftmatrix_rerun_nothing_changed_s": round(rerun, 2),
        "naive_pip_sequential_s": round(naive, 2),
        "cases_own_time_cold_s": round(cold_cases, 2),
        "cases_own_time_warm_s": round(warm_cases, 2),
        "overhead_per_cell_cold_s": round((cold - cold_cases) / n, 2),
        "overhead_per_cell_warm_s": round((warm - warm_cases) / n, 2),
        "warm_vs_naive": round(warm / naive, 3),
        "rerun_vs_cold": round(rerun / cold, 3),
        "jobs": args.jobs,
        "ftmatrix_warm_parallel_s": round(parallel, 2),
        "cases_own_time_parallel_s": round(parallel_cases, 2),
        # 1.0 would be the cases alone, spread perfectly over the jobs.
        "parallel_vs_ideal": round(parallel / (parallel_cases / args.jobs), 2),
    }
    width = max(len(k) for k in figures)
    print(f"{'measure':<{width}}  value")
    for key, value in figures.items():
        print(f"{key:<{width}}  {value}")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
