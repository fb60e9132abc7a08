"""Planning at scale: expansion, pairwise against its lower bound, and resolution.

Side by side in one run, printed as a table and JSON (never asserted):
- expanding a 200-cell and a 2,000-cell matrix (full), and the same axes pairwise:
  cells chosen against the full product and the lower bound (largest product of two
  axis sizes);
- resolving 200 distinct cells of small real packages with uv, cold (empty uv cache)
  and warm (same cache), resolver threads in parallel;
- peak memory of this process.

    python benchmarks/bench_plan.py [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from ftmatrix.cli import resolve_cells  # noqa: E402
from ftmatrix.config import parse_matrix  # noqa: E402
from ftmatrix.plan import plan_cells  # noqa: E402


def matrix_text(axes: dict[str, list[str]], strategy: str) -> str:
    lines = ["packages:"] + [f"  {k}: {v!r}" for k, v in axes.items()]
    return "\n".join([*lines, f"strategy: {strategy}"])


def timed_plan(axes: dict[str, list[str]], strategy: str) -> tuple[float, object]:
    matrix = parse_matrix(matrix_text(axes, strategy), source="bench", default_python="3.11")
    start = time.perf_counter()
    plan = plan_cells(matrix)
    return time.perf_counter() - start, plan


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    figures: dict[str, object] = {}

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
