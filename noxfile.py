"""ftmatrix's sessions: one ``matrix(LABEL)`` session per cell, and the tool's own chores.

Thin wiring only: every decision lives in the ``ftmatrix`` package. What is
planned is chosen by environment variables (FTMATRIX_MATRIX, FTMATRIX_PROFILE,
FTMATRIX_CASES, FTMATRIX_OUT), since nox builds its session list before any
argument reaches a session.
"""

from __future__ import annotations

import json
import os
import sys
from datetime import UTC, datetime
from pathlib import Path

import nox

from ftmatrix.cli import (
    Loaded,
    index_releases,
    load,
    main,
    plan_json,
    print_plan,
    resolve_cells,
    write_installability,
)
from ftmatrix.config import ConfigError
from ftmatrix.plan import Cell, PlanError
from ftmatrix.progress import Progress
from ftmatrix.report.render import render_report
from ftmatrix.runner import CellContext, current_python, run_cell
from ftmatrix.selectors import check_released
from ftmatrix.settings import Settings, SettingsError, known_issues_file
from ftmatrix.store import merge_outputs
from ftmatrix.system_packages import venv_interpreter

nox.needs_version = ">=2025.2.9"
nox.options.default_venv_backend = "uv"
nox.options.sessions = ["matrix"]

ROOT = Path(__file__).resolve().parent
STARTED = datetime.now(UTC)

LOADED: Loaded | None
try:
    LOADED = load(os.environ, root=ROOT, now=STARTED)
    PROBLEM = ""
except (ConfigError, PlanError, SettingsError) as exc:
    LOADED, PROBLEM = None, str(exc)
    print(f"ftmatrix: {exc}", file=sys.stderr)

if LOADED is not None:
    # Children that nox starts for parallel sessions (-j) load this file again:
    # they must join this run, not start their own.
    os.environ["FTMATRIX_RUN_ID"] = LOADED.settings.run_id
    BY_LABEL = {cell.label: cell for cell in LOADED.selected}
    # Parameters are labels, not Cell objects: nox's parallel mode hands them to
    # child processes as JSON.
    # A cell that takes the host's packages gets its venv from the host interpreter.
    CELLS = [
        nox.param(
            venv_interpreter(LOADED.matrix.install, os.environ, cell.python),
            cell.label,
            id=cell.label,
        )
        for cell in LOADED.selected
    ]
    PROGRESS = Progress(len(LOADED.selected), sys.stdout, live=sys.stdout.isatty())
else:
    BY_LABEL = {}
    CELLS = [nox.param(current_python(), "invalid-matrix", id="invalid-matrix")]


@nox.session(reuse_venv=True, tags=["matrix"], allow_parallel=True)
@nox.parametrize(["python", "cell"], CELLS)
def matrix(session: nox.Session, cell: str) -> None:
    """Build one cell's environment and run every case in it; the report follows.

    Arguments after ``--`` go to pytest: case node ids (relative to the cases
    folder) select cases, options are passed through.
    """
    if LOADED is None:
        session.error(PROBLEM)
    run_matrix_cell(session, LOADED, BY_LABEL[cell])


def run_matrix_cell(session: nox.Session, loaded: Loaded, cell: Cell) -> None:
    """The matrix session's body, for one cell."""
    selection = tuple(a for a in session.posargs if not a.startswith("-"))
    options = tuple(a for a in session.posargs if a.startswith("-"))
    hardware = next(h for h in loaded.matrix.hardware if h.name == cell.hardware)
    context = CellContext(
        run_id=loaded.settings.run_id,
        out_dir=loaded.settings.out,
        cases_dir=loaded.settings.cases,
        case_selection=selection or loaded.matrix.cases,
        install=loaded.matrix.install,
        hardware_class=hardware,
        env=dict(os.environ),
        runner_labels=loaded.settings.runner_labels,
        pytest_args=options,
        timeouts=loaded.matrix.timeouts,
        limits=loaded.matrix.limits,
        resume=loaded.settings.resume,
    )
    venv_python = Path(session.bin) / "python"
    write_installability(loaded.settings.out, loaded.settings.run_id, loaded.plan)
    records = run_cell(cell, venv_python, context, log=session.log, progress=PROGRESS)
    PROGRESS.close()
    counts: dict[str, int] = {}
    for record in records:
        counts[record.status.value] = counts.get(record.status.value, 0) + 1
    session.log(f"{cell.label}: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())))
    try:
        session.notify("report")
    except ValueError:
        # Under `nox -j`, each session runs in a child that cannot queue another;
        # `nox -j auto -s matrix report` runs the report after the cells instead.
        session.log("parallel run: the report session runs after the cells when named")


@nox.session(python=False)
def plan(session: nox.Session) -> None:
    """Print the cells and whether each installs; ``-- --json`` for machines, ``--no-resolve``."""
    if LOADED is None:
        session.error(PROBLEM)
    if "--no-resolve" not in session.posargs:
        # As `python -m ftmatrix plan`: a pin the index never had is a config error.
        try:
            check_released(LOADED.matrix, index_releases(LOADED.matrix, os.environ))
        except ConfigError as exc:
            session.error(f"ftmatrix: {exc}")
    if "--json" in session.posargs:
        print(json.dumps(plan_json(LOADED, os.environ), indent=2))
    elif "--no-resolve" in session.posargs:
        print_plan(LOADED, sys.stdout)
    else:
        resolutions = resolve_cells(
            LOADED.selected, LOADED.matrix.install, os.environ, LOADED.matrix.limits
        )
        print_plan(LOADED, sys.stdout, resolutions)


@nox.session(python=False)
def report(session: nox.Session) -> None:
    """Build reports/index.html, summary.md and results.json from whatever records exist."""
    settings = Settings.from_env(os.environ, root=ROOT, now=STARTED)
    out = settings.out
    merged = merge_outputs(out)
    grid = render_report(
        out,
        now=datetime.now(UTC),
        problems=merged.problems,
        known_issues=known_issues_file(settings),
    )
    session.log(f"{out / 'index.html'}: {len(grid.records)} records, {len(grid.rows)} cells")


@nox.session(python=False)
def bisect(session: nox.Session) -> None:
    """Find the first bad release.

    ``nox -s bisect -- --case ID --axis PKG --good V1 --bad V2 [--pins PKG==V ...]``
    """
    code = main(["bisect", *session.posargs])
    if code:
        session.error(f"bisect ended with exit code {code}")


@nox.session(python=False)
def autobisect(session: nox.Session) -> None:
    """Bisect the new failures whose neighbour cell passes, within matrix.yaml's bisect.budget.

    Run after ``nox -s matrix``; ``-- --dry-run`` only prints the choice, ``--budget N``
    overrides the budget. Findings go to the history; ``nox -s report`` shows them.
    """
    code = main(["autobisect", *session.posargs])
    if code:
        session.error(f"autobisect ended with exit code {code}")


@nox.session(python=False)
def wheelhouse(session: nox.Session) -> None:
    """Download the wheels the selected cells need, for an offline runner.

    ``nox -s wheelhouse -- --python 3.12 --platform manylinux_2_28_x86_64 DIR``
    (``--host-packages FREEZE`` where install.system-packages takes the host's).
    """
    code = main(["wheelhouse", *session.posargs])
    if code:
        session.error(f"wheelhouse ended with exit code {code}")


@nox.session
def tests(session: nox.Session) -> None:
    """The tool's own tests; ``-- -m 'not slow'`` skips the real-install tier."""
    session.install("-e", ".[test]")
    session.run("pytest", *session.posargs)


@nox.session(python=False)
def bench(session: nox.Session) -> None:
    """The benchmarks (figures side by side, never asserted): ``-- NAME`` runs one of them."""
    wanted = set(session.posargs)
    for script in sorted((ROOT / "benchmarks").glob("bench_*.py")):
        if not wanted or script.stem.removeprefix("bench_") in wanted:
            session.log(f"benchmark {script.stem}")
            session.run(sys.executable, str(script), external=True)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff and mypy (strict) over the package and this noxfile."""
    session.install("-e", ".[lint]")
    session.run("ruff", "check", "src", "tests", "noxfile.py", "cases", "benchmarks")
    session.run("ruff", "format", "--check", "src", "tests", "noxfile.py", "cases", "benchmarks")
    session.run("mypy")
