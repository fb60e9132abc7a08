"""A matrix's wall time against what its cases cost: per cell, for the whole, and by phase.

Side by side in one run, printed as a table and JSON (never asserted):
- the whole matrix: `nox -s matrix` cold (new venvs, empty uv and resolution caches) and
  warm (venvs reused), as it runs by default (cells side by side, `limits.cells`), and
  warm one cell at a time (`nox -j 1`); a warm re-run with nothing to do (FTMATRIX_RESUME);
  each against the sum of its cases' own durations (the records' `duration`: 1.0 is the
  limit where cells run one at a time; side by side the cases overlap and it can be less);
- per cell (warm, one at a time): the session's wall time against its cases' own time and
  against nox + pytest run by hand in the same venv (a session of a noxfile of its own that
  runs pytest over the cases, with the offline settings, the plugin's gates and the cell's
  bytecode folder, no records, no supervisor);
- where the rest goes, per cell: nox and the venv, resolving, installing, pytest's start-up
  and collection, the cases, what lies between them (the plugin and pytest's own work per
  case), and the records after; and the report session.

    python benchmarks/bench_matrix.py [--matrix matrix.yaml] [--cases cases]
                                      [--skip-cold] [--json out.json]

The default is this repository's default matrix and cases; tests/data/small_matrix.yaml
with tests/data/small_cases measures the tool alone (cases that take no time).
"""

from __future__ import annotations

import argparse
import json
import os
import re
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
from ftmatrix.cell_launch import BYTECODE_PREFIX, cell_env  # noqa: E402
from ftmatrix.pipeline import load  # noqa: E402

Lines = list[tuple[float, str]]  # what a command printed, each line with when (seconds in)

# What by-hand pytest runs: the cases with the plugin's gates (n/a, skip) and nothing else.
HAND_NOXFILE = '''
import os
import nox

CELLS = {cells!r}


@nox.session(python=False)
@nox.parametrize("cell", [nox.param(c, id=c) for c in CELLS])
def hand(session, cell):
    """pytest over the cases in the cell's venv, as one would run it by hand."""
    python, env = CELLS[cell]
    session.run(
        python, "-m", "pytest", "-q", "-p", "ftmatrix.cell.plugin", "-p", "no:cacheprovider",
        "-c", os.devnull, "--rootdir", {cases!r}, {cases!r},
        env=env, external=True, success_codes=[0, 1],
    )
'''


def timed_lines(command: list[str], env: dict[str, str], cwd: Path) -> tuple[float, Lines]:
    """Run ``command``; its wall time and every line it printed, with when (seconds in)."""
    start = time.perf_counter()
    process = subprocess.Popen(
        command, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert process.stdout is not None
    lines = [(time.perf_counter() - start, line.rstrip("\n")) for line in process.stdout]
    if process.wait() != 0:
        tail = "\n".join(line for _, line in lines[-40:])
        raise SystemExit(f"{' '.join(command)} failed:\n{tail}")
    return time.perf_counter() - start, lines


def nox(work: Path, env: dict[str, str], *args: str) -> tuple[float, Lines]:
    command = [sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py"), "--envdir"]
    return timed_lines([*command, str(work / "envs"), *args], env, ROOT)


def newest_records(out: Path) -> dict[str, list[Any]]:
    """The newest run's records, by cell label."""
    records = read_records(out / "records").records
    newest = max(r.run_id for r in records)
    by_cell: dict[str, list[Any]] = {}
    for record in records:
        if record.run_id == newest:
            by_cell.setdefault(record.cell_label, []).append(record)
    return by_cell


def case_seconds(by_cell: dict[str, list[Any]]) -> dict[str, float]:
    return {label: sum(r.duration for r in records) for label, records in by_cell.items()}


def first(lines: Lines, pattern: str, after: float = 0.0) -> float:
    """When the first line matching ``pattern`` at or after ``after`` was printed."""
    found = re.compile(pattern)
    return next(t for t, line in lines if t >= after and found.search(line))


def phases(lines: Lines, label: str, cases: float) -> dict[str, float]:
    """Where one cell's session time went, from the lines of a run one cell at a time."""
    name = re.escape(label)
    begin = first(lines, rf"Running session matrix\({name}\)")
    cell = first(lines, rf"\[ftmatrix\] {name}: cell ", begin)
    resolving = first(lines, rf"\[ftmatrix\] {name}: resolving", cell)
    installing = first(lines, rf"\[ftmatrix\] {name}: installing", resolving)
    running = first(lines, rf"\[ftmatrix\] {name}: running cases", installing)
    collected = first(lines, r"^collected \d+ item", running)
    finished = first(lines, rf"\[ftmatrix\] {name}: cases finished", collected)
    end = first(lines, rf"Session matrix\({name}\) (was successful|failed)", finished)
    return {
        "nox_and_venv_s": round(cell - begin, 2),
        "hardware_probe_and_files_s": round(resolving - cell, 2),
        "resolve_s": round(installing - resolving, 2),
        "install_s": round(running - installing, 2),
        "pytest_start_and_collection_s": round(collected - running, 2),
        "cases_own_s": round(cases, 2),
        "between_cases_s": round(finished - collected - cases, 2),
        "after_cases_s": round(end - finished, 2),
        "session_s": round(end - begin, 2),
    }


def session_walls(lines: Lines, name: str) -> dict[str, float]:
    """Each ``name`` or ``name(PARAM)`` session's wall time, from nox's start and end lines;
    by PARAM (or ``name``)."""
    walls, started = {}, {}
    for at, line in lines:
        begun = re.search(rf"Running session {name}(?:\((.*)\))?$", line)
        if begun:
            started[begun.group(1) or name] = at
        ended = re.search(rf"Session {name}(?:\((.*)\))? (was successful|failed)", line)
        if ended and (ended.group(1) or name) in started:
            walls[ended.group(1) or name] = at - started[ended.group(1) or name]
    return walls


def by_hand(
    work: Path, env: dict[str, str], cases: Path, locks: dict[str, str]
) -> dict[str, float]:
    """nox + pytest by hand in each cell's venv (warm): each session's wall time.

    ``locks``: each cell's lock id, which names the bytecode folder in its venv (nox names
    a venv by its session, or by a hash of it where the path would be long).
    """
    cells = {}
    for label, lock in locks.items():
        bytecode = next((work / "envs").glob(f"*/{BYTECODE_PREFIX}{lock}"))
        python = bytecode.parent / "bin" / "python"
        cells[label] = (str(python), cell_env({}, bytecode=bytecode))
    noxfile = work / "hand" / "noxfile.py"
    noxfile.parent.mkdir(exist_ok=True)
    noxfile.write_text(HAND_NOXFILE.format(cells=cells, cases=str(cases)))
    _, lines = timed_lines(
        [sys.executable, "-m", "nox", "-f", str(noxfile), "-s", "hand"], env, noxfile.parent
    )
    return session_walls(lines, "hand")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--matrix", default=str(ROOT / "matrix.yaml"))
    parser.add_argument("--cases", default=str(ROOT / "cases"))
    parser.add_argument("--skip-cold", action="store_true", help="measure warm runs only")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="ftmatrix-bench-"))
    base = {**os.environ, "FTMATRIX_MATRIX": args.matrix, "FTMATRIX_CASES": args.cases}
    base.pop("FTMATRIX_RUN_ID", None)
    loaded = load(base, root=ROOT, now=datetime.now(UTC))
    env = {**base, "FTMATRIX_OUT": str(work / "out")}
    if not args.skip_cold:
        env["UV_CACHE_DIR"] = str(work / "uv-cache")
        env["FTMATRIX_CACHE_DIR"] = str(work / "ftmatrix-cache")
    figures: dict[str, Any] = {"cells": len(loaded.selected), "load_before": os.getloadavg()[0]}

    def whole(name: str, *extra: str) -> Lines:
        figures[f"{name}_load"] = os.getloadavg()[0]
        wall, lines = nox(work, env, *extra, "-s", "matrix")
        cases = sum(case_seconds(newest_records(work / "out")).values())
        figures[f"{name}_s"] = round(wall, 2)
        figures[f"{name}_cases_own_s"] = round(cases, 2)
        figures[f"{name}_vs_cases"] = round(wall / cases, 3) if cases else None
        return lines

    if not args.skip_cold:
        whole("cold")
    whole("warm")
    serial_lines = whole("warm_one_at_a_time", "-j", "1")
    newest = newest_records(work / "out")
    per_cell_cases = case_seconds(newest)
    locks = {label: str(records[0].lock_id) for label, records in newest.items()}
    walls = session_walls(serial_lines, "matrix")
    report = session_walls(serial_lines, "report")
    resume_wall, _ = nox(work, {**env, "FTMATRIX_RESUME": "1"}, "-s", "matrix")
    figures["rerun_nothing_changed_s"] = round(resume_wall, 2)
    figures["by_hand_load"] = os.getloadavg()[0]
    hand = by_hand(work, env, Path(args.cases).resolve(), locks)
    cells = {}
    for label, wall in walls.items():
        cases = per_cell_cases.get(label, 0.0)
        cells[label] = {
            "session_s": round(wall, 2),
            "cases_own_s": round(cases, 2),
            "vs_cases": round(wall / cases, 3) if cases else None,
            "by_hand_s": round(hand[label], 2),
            "vs_by_hand": round(wall / hand[label], 3),
            "phases": phases(serial_lines, label, cases),
        }
    figures["per_cell"] = cells
    figures["report_session_s"] = round(sum(report.values()), 2)
    figures["load_after"] = os.getloadavg()[0]

    print(json.dumps(figures, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
