"""ftmatrix's nox sessions, for any repository: a noxfile that imports them has them all.

``from ftmatrix.sessions import *`` in a repository's noxfile.py gives it one
``matrix(LABEL)`` session per cell of its matrix.yaml and the chores (plan,
report, bisect, autobisect, known-issues, wheelhouse). nox registers a session when its
function is decorated, so importing this module is what adds them.

Thin wiring only: every decision lives in the ``ftmatrix`` package. The cells come
from one call at import, ``pipeline.list_cells``, which reads the plan the last plan
step kept (``plan_cache``), so ``nox -l`` asks no index once a plan exists; the chores
run ``python -m ftmatrix`` itself, so a session and its subcommand cannot disagree.
What is planned is chosen by environment variables (FTMATRIX_MATRIX, FTMATRIX_PROFILE,
FTMATRIX_CASES, FTMATRIX_OUT), since nox builds its session list before any argument
reaches a session. Relative paths are taken from the working directory, which nox
makes the noxfile's folder: the user's repository, never this package's location.
"""

from __future__ import annotations

import atexit
import importlib
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, NoReturn

import nox
from nox import tasks

from ftmatrix.case_selection import check_case_selection, split_pytest_args
from ftmatrix.case_verdicts import no_verdict
from ftmatrix.cell.files import CellFiles
from ftmatrix.cell_launch import worker_count
from ftmatrix.errors import ExitCode, FatalError, os_error_line
from ftmatrix.live_runs import IN_RUN_VARIABLE, hold_run, note_planned
from ftmatrix.path_kinds import kind_problem
from ftmatrix.pipeline import Listing, Loaded, list_cells
from ftmatrix.plan import Cell
from ftmatrix.planview import interpreters_of, write_installability
from ftmatrix.progress import Progress
from ftmatrix.progress_feed import (
    FEED_ENV,
    PRINTED_ENV,
    FeedTail,
    FeedWriter,
    Tally,
    cells_chosen,
)
from ftmatrix.runner import CellContext, record_cell_cannot_start, run_cell
from ftmatrix.sharing import cell_running, cells_at_once, usable_cpus
from ftmatrix.system_packages import venv_interpreter

if TYPE_CHECKING:
    from nox.manifest import Manifest

__all__ = ["autobisect", "bisect", "known_issues", "matrix", "plan", "report", "wheelhouse"]

# Session.parallel (whether nox's parallel scheduler runs this session): 2026.10.20.
nox.needs_version = ">=2026.10.20"
nox.options.sessions = ["matrix"]

# nox has moved into the folder of the noxfile that imports this module: the repository.
ROOT = Path.cwd().resolve()


def envdir_problem(argv: list[str]) -> FatalError | None:
    """Where nox's folder of venvs (``--envdir``, default ``.nox``) is not a folder: said
    as the CLI says it, before nox meets it with a traceback of its own."""
    envdir = ROOT / ".nox"
    for index, arg in enumerate(argv):
        if arg == "--envdir" and index + 1 < len(argv):
            envdir = ROOT / argv[index + 1]
        elif arg.startswith("--envdir="):
            envdir = ROOT / arg.partition("=")[2]
    return kind_problem(envdir, "folder", "nox's folder of venvs (--envdir, default .nox)")


# nox's options that list the sessions and run none.
LISTING = ("-l", "--list", "--list-sessions")
LISTS_ONLY = any(arg in LISTING for arg in sys.argv[1:])
# The cells, or the problem that stops them: one call, from a kept plan where one stands.
# A listing makes no venv: .nox is nothing to it.
NOX_FOLDER_PROBLEM = None if LISTS_ONLY else envdir_problem(sys.argv)
LISTED = (
    Listing(problem=NOX_FOLDER_PROBLEM)
    if NOX_FOLDER_PROBLEM is not None
    else list_cells(os.environ, root=ROOT, now=datetime.now(UTC))
)

# A matrix that cannot be planned is reported once: by the session that meets it (plan
# and matrix print it as the CLI does) or, where none runs (`nox -l`, `nox -s lint`),
# when nox exits.
UNREPORTED: list[FatalError] = [LISTED.problem] if LISTED.problem is not None else []
# A cell's venv is uv's, set on the cells alone: a noxfile's own sessions keep the backend
# its options choose. Nothing is built for a matrix that is refused: its one session needs
# no venv backend (uv itself may be what refused the run, and nox fails to find it with a
# traceback).
CELL_BACKEND = "none" if LISTED.problem is not None else "uv"


@atexit.register
def report_the_rest() -> None:
    """Print what no session reported (at exit: after nox's own output). A listing of a
    matrix that cannot be planned ends with its exit code, as ``ftmatrix plan`` does: a
    script that lists the cells must not take the one ``invalid-matrix`` for the plan."""
    for problem in UNREPORTED:
        print(problem.describe(), file=sys.stderr)
    if UNREPORTED and LISTS_ONLY:
        sys.stdout.flush()
        sys.stderr.flush()
        # nox has already chosen its exit code (0): only leaving now can change it. The
        # handlers registered after this one (the progress feed's) have run.
        os._exit(UNREPORTED[0].return_code)


# The interpreter of each Python the selected cells run, as the plan finds them.
INTERPRETERS = interpreters_of(LISTED.loaded, os.environ) if LISTED.loaded else {}
# A session nox skips for a Python it cannot find (`--force-python 3.99`) is a cell that
# never ran: a failed session (the run's exit code says so), never a quiet skip and exit 0.
# nox decides this for the whole run (a noxfile's own sessions too: docs/reference/
# sessions.md says so); it has no form per session.
nox.options.error_on_missing_interpreters = True
# Why a cell cannot start when nox made it no venv of its own.
NO_VENV = (
    "nox made this cell no venv (--no-venv, or the 'none' venv backend): a cell runs only "
    "in a venv of its own, with its pins"
)


def matrix_params(listed: Listing) -> list[Any]:
    """One nox parameter per selected cell: the venv's interpreter and the cell's label
    (labels, not cells: nox's parallel mode hands parameters to children as JSON). A
    cell that takes the host's packages gets its venv from the host interpreter; one
    whose Python this machine lacks gets no venv (False), and its session records why. A
    matrix that cannot be planned lists one ``invalid-matrix`` session, which reports why
    and has no venv (python False): nothing is built for a matrix that is refused.
    """
    if listed.loaded is None:
        return [nox.param(False, "invalid-matrix", id="invalid-matrix")]
    install = listed.loaded.matrix.install
    params = []
    for cell in listed.loaded.selected:
        found = INTERPRETERS.get(cell.python)
        python: str | bool = venv_interpreter(install, os.environ, cell.python)
        if found is not None:
            python = found.path or False
        params.append(nox.param(python, cell.label, id=cell.label))
    return params


if LISTED.loaded is not None:
    # Children that nox starts for parallel sessions (-j) load this file again:
    # they must join this run, not start their own.
    os.environ["FTMATRIX_RUN_ID"] = LISTED.loaded.settings.run_id
    # The report this nox builds (its last cell, or the report session) is of its own run.
    os.environ[IN_RUN_VARIABLE] = LISTED.loaded.settings.run_id


def progress_feed(listed: Listing) -> FeedWriter | None:
    """Where this process's cells say how they go. The nox process the user started makes
    the feed and tails it (its lines reach the console while nox buffers its parallel
    children's output); those children, started with ``--parallel-worker``, join it."""
    if listed.loaded is None:
        return None
    if "--parallel-worker" in sys.argv and FEED_ENV in os.environ:
        printed = os.environ.get(PRINTED_ENV) == "1"
        return FeedWriter(Path(os.environ[FEED_ENV]), printed=printed)
    try:
        handle, name = tempfile.mkstemp(prefix="ftmatrix-progress-", suffix=".jsonl")
    except OSError:
        return None  # no temporary folder to write in: the run goes on without the lines
    os.close(handle)
    printed = not sys.stdout.isatty()
    os.environ[FEED_ENV] = name
    os.environ[PRINTED_ENV] = "1" if printed else "0"
    labels = [cell.label for cell in listed.loaded.selected]
    tail = FeedTail(
        Path(name),
        Tally(total=cells_chosen(labels, sys.argv[1:]), started=time.monotonic()),
        sys.stdout,
        lines=printed,
        report=listed.loaded.settings.out / "index.html",
    )
    tail.start()
    atexit.register(tail.stop)
    return FeedWriter(Path(name), printed=printed)


PROGRESS = Progress(
    len(LISTED.loaded.selected) if LISTED.loaded else 0,
    sys.stdout,
    live=sys.stdout.isatty(),
    feed=progress_feed(LISTED),
)


def cells_side_by_side(listed: Listing) -> int:
    """How many cells nox runs at once (limits.cells; auto: one per usable CPU, one where
    the cells lease GPUs)."""
    if listed.loaded is None:
        return 1
    loaded = listed.loaded
    hardware = {c.hardware for c in loaded.selected}
    return cells_at_once(
        loaded.matrix.limits,
        len(loaded.selected),
        usable_cpus(),
        gpus=any(h.gpus for h in loaded.matrix.hardware if h.name in hardware),
    )


# Cells side by side are nox's own parallel sessions: `nox -s matrix` runs them so,
# `nox -j 1 -s matrix` one at a time.
CELLS_AT_ONCE = cells_side_by_side(LISTED)
if CELLS_AT_ONCE > 1:
    nox.options.parallel = CELLS_AT_ONCE
    # Only the cells may run side by side; nox warns so whenever the sessions chosen
    # are others (plan, report, a repository's tests), which then run as ever.
    logging.getLogger("nox").addFilter(
        lambda record: "No selected session allows parallel" not in record.getMessage()
    )


# Never a download: a Python the machine lacks is the cell's install-error, not nox's skip.
# Set on the cells alone: a noxfile's own sessions download as nox's options say.
@nox.session(
    reuse_venv=True,
    tags=["matrix"],
    allow_parallel=True,
    venv_backend=CELL_BACKEND,
    download_python="never",
)
@nox.parametrize(["python", "cell"], matrix_params(LISTED))
def matrix(session: nox.Session, cell: str) -> None:
    """Build one cell's environment and run every case in it; the report follows.

    Arguments after `--` go to pytest: case node ids (relative to the cases
    folder) select cases, options are passed through.
    """
    loaded = LISTED.loaded
    if loaded is None:
        # As `python -m ftmatrix run`: the message once, the kind's exit code.
        assert LISTED.problem is not None
        UNREPORTED.clear()
        print(LISTED.problem.describe(), file=sys.stderr)
        fail_as_cli(session, "matrix", LISTED.problem.return_code)
    selection, options = split_pytest_args(session.posargs)
    try:
        # Before anything installs: a selection that names nothing would test nothing.
        check_case_selection(
            loaded.settings.cases, selection, source="arguments after --", from_command_line=True
        )
        check_case_selection(
            loaded.settings.cases,
            loaded.matrix.cases,
            source=str(loaded.settings.matrix),
            from_command_line=False,
        )
    except FatalError as exc:
        print(exc.describe(), file=sys.stderr)
        fail_as_cli(session, "matrix", exc.return_code)
    chosen = next(c for c in loaded.selected if c.label == cell)
    try:
        run_matrix_cell(session, loaded, chosen, selection, options)
    except FatalError as exc:  # in one cell (no GPU to lease, no host to ask): the others run
        session.error(exc.describe())
    except OSError as exc:  # a path of the wrong kind met in the cell: one line, as the CLI
        fatal = os_error_line(exc)
        if fatal is None:
            raise
        session.error(fatal.describe())


def run_matrix_cell(
    session: nox.Session,
    loaded: Loaded,
    cell: Cell,
    selection: tuple[str, ...] = (),
    options: tuple[str, ...] = (),
) -> None:
    """The matrix session's body, for one cell: its records kept, its verdicts counted.

    A cell that produced no verdict (no case collected, or only an install-error or an
    error of the whole cell) fails its session, so the run's exit code says so.
    """
    # Under nox's parallel scheduler, CELLS_AT_ONCE cells share the machine; `-j 1` runs
    # them one after another in this process, each with the whole of it.
    at_once = CELLS_AT_ONCE if session.parallel else 1
    context = cell_context(loaded, cell, selection, options, at_once)
    found = INTERPRETERS.get(cell.python)
    cannot_start = found.missing if found is not None else None
    if cannot_start is None and not session.bin_paths:
        cannot_start = NO_VENV
    write_installability(loaded.settings.out, loaded.settings.run_id, loaded.plan, os.environ)
    PROGRESS.sharing(
        cells_at_once=at_once,
        workers=worker_count(loaded.matrix.limits),
        threads=context.torch_threads_each(),
    )
    files = CellFiles.of(loaded.settings.out, loaded.settings.run_id, cell.id)
    run_folder = files.run_folder
    PROGRESS.log_to(files.log)

    def log(text: str) -> None:
        session.log(text)
        PROGRESS.note(text)

    planned = {cell.id: cell.label}
    if not HELD_RUNS:  # from this nox's first cell to its end: the run goes on
        HELD_RUNS.append(hold_run(run_folder))
        # And every cell this nox queued, before any of them can be lost: a nox that stops
        # before a cell starts (-x after a failed cell, Ctrl-C, killed) must leave it
        # planned without records in the report, not leave a partial run looking complete.
        planned |= cells_queued(session, loaded)
    note_planned(run_folder, planned)
    with cell_running(run_folder) as end:
        if cannot_start is not None:  # no venv was made (no interpreter): recorded, counted
            records = record_cell_cannot_start(cell, context, cannot_start, log=log)
        else:
            venv_python = Path(session.bin) / "python"
            records = run_cell(cell, venv_python, context, log=log, progress=PROGRESS)
        PROGRESS.close()
        report_here = session.parallel and end.last()
        if report_here:
            # No child of nox's parallel scheduler can queue the report; the cell that
            # ends the run builds it (`nox -s matrix report` builds it again after).
            session.log("the last cell of the run to end: building the report")
            code = ftmatrix_command("report")
            if code != ExitCode.OK:
                session.error(f"report ended with exit code {code}")
    counts: dict[str, int] = {}
    for record in records:
        counts[record.status.value] = counts.get(record.status.value, 0) + 1
    session.log(
        f"{cell.label}: "
        + ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
        + f"; pytest's output: {files.log}"
    )
    if not session.parallel:
        # Queued before the verdict check ends the session: a run whose only cells had no
        # verdict (an install-error) still gets its report, never the last run's left as is.
        session.notify("report", posargs=[])  # the cell's pytest arguments are not the report's
    problem = no_verdict(records, files.quarantine)
    if problem:
        session.error(f"{cell.label}: no verdict: {problem}")


# The run's lock, held by this process once it ran a cell (live_runs): a report built
# meanwhile, between two cells of `nox -j 1`, says the run is in progress.
HELD_RUNS: list[IO[str]] = []

# The nox the user started hands its arguments to the children it starts for parallel
# sessions (they inherit its environment), which run one session each: from them a child
# learns which cells that nox queued (cells_queued).
NOX_ARGS_VARIABLE = "FTMATRIX_NOX_ARGS"
# Linux refuses to start a program given an environment string over 128 KiB: arguments
# longer than this (`ftmatrix run`'s `-s` for each cell of a large matrix; it notes its
# cells itself) are not handed down, and each child notes its own cell alone.
NOX_ARGS_LIMIT = 64 * 1024
if "--parallel-worker" not in sys.argv:
    NOX_ARGS = json.dumps(sys.argv[1:])  # ASCII: its length is its size
    if len(NOX_ARGS) <= NOX_ARGS_LIMIT:
        os.environ[NOX_ARGS_VARIABLE] = NOX_ARGS
    else:  # nor an outer nox's, inherited
        os.environ.pop(NOX_ARGS_VARIABLE, None)


def cells_queued(session: nox.Session, loaded: Loaded) -> dict[str, str]:
    """The cells (id -> label) of the matrix sessions this nox invocation queued: those
    already run and those still to come; {} where nox's queue cannot be read."""
    labels = queued_labels(session)
    return {c.id: c.label for c in loaded.selected if c.label in labels}


def queued_labels(session: nox.Session) -> set[str]:
    """The labels of the matrix sessions nox queued in this invocation.

    nox has no public API for its queue; its private one is read here, and where that is
    not there (another nox), nothing is found and the cell notes itself alone, as its
    session always does. A session's runner holds the manifest that runs it
    (``SessionRunner.manifest``), whose sessions queued or consumed are ``in`` it. Under
    nox's parallel scheduler the session runs in a child nox whose manifest holds only it
    (``--parallel-worker -s SESSION``); the queue is its parent's, built again here from
    the parent's arguments by nox's own steps (``nox._cli.execute_workflow``): the same
    arguments, noxfile and environment as the parent's, so the same queue.
    """
    try:
        if session.parallel:
            manifest = parents_manifest()
        else:
            manifest = session._runner.manifest
        if manifest is None:
            return set()
        return {
            getattr(runner.func, "call_spec", {})["cell"]
            for runner, _selected in manifest.list_all_sessions()
            if runner.name == "matrix" and runner in manifest
        }
    # Whatever a moved private API raises (SystemExit: argparse refusing the arguments):
    # the other cells are noted at best, and never at the cost of this one.
    except (Exception, SystemExit):
        return set()


def parents_manifest() -> Manifest | None:
    """The manifest of the nox that started this parallel child, as that nox built it from
    its arguments (NOX_ARGS_VARIABLE); None where they select nothing nox can run."""
    options = importlib.import_module("nox._options").options
    config = options.parse_args(json.loads(os.environ[NOX_ARGS_VARIABLE]))
    noxfile = sys.modules[__name__]  # its docstring is all nox reads of the module here
    tasks.merge_noxfile_options(noxfile, config)
    manifest = tasks.filter_manifest(tasks.discover_manifest(noxfile, config), config)
    return None if isinstance(manifest, int) else manifest


def cell_context(
    loaded: Loaded,
    cell: Cell,
    selection: tuple[str, ...] = (),
    options: tuple[str, ...] = (),
    at_once: int = 1,
) -> CellContext:
    """What running ``cell`` in this run needs besides the cell."""
    return CellContext(
        run_id=loaded.settings.run_id,
        out_dir=loaded.settings.out,
        cases_dir=loaded.settings.cases,
        case_selection=selection or loaded.matrix.cases,
        install=loaded.matrix.install,
        hardware_class=next(h for h in loaded.matrix.hardware if h.name == cell.hardware),
        env=dict(os.environ),
        runner_labels=loaded.settings.runner_labels,
        pytest_args=options,
        timeouts=loaded.matrix.timeouts,
        limits=loaded.matrix.limits,
        resume=loaded.settings.resume,
        reuse_days=loaded.reuse_days,
        cells_at_once=at_once,
    )


def run_cli(session: nox.Session, command: str) -> None:
    """``python -m ftmatrix COMMAND`` with the session's arguments, in the noxfile's folder:
    the subcommand itself, its output and its exit code."""
    code = ftmatrix_command(command, *session.posargs)
    if code != ExitCode.OK:
        fail_as_cli(session, command, code)


def ftmatrix_command(command: str, *args: str) -> int:
    """Run ``python -m ftmatrix COMMAND ARGS`` in the noxfile's folder; its exit code."""
    sys.stdout.flush()
    sys.stderr.flush()
    ran = subprocess.run([sys.executable, "-m", "ftmatrix", command, *args], cwd=ROOT, check=False)
    return ran.returncode if ran.returncode >= 0 else 128 - ran.returncode  # a signal, as sh


def fail_as_cli(session: nox.Session, command: str, code: int) -> NoReturn:
    """End the session as the subcommand ended, its message already printed.

    A fatal error's code ends nox itself, so `nox -s plan` exits as `python -m
    ftmatrix plan` does (nox says 1 for any failed session).
    """
    if code == ExitCode.FAILED:
        session.error(f"{command} ended with exit code {code}")
    session.log(f"Session {session.name} failed: {command} ended with exit code {code}")
    sys.exit(code)


@nox.session(python=False)
def plan(session: nox.Session) -> None:
    """Print the cells and whether each installs; `-- --json` for machines, `--no-resolve`.

    Runs `python -m ftmatrix plan`: a pin the index never had is a config error here too.
    """
    UNREPORTED.clear()  # the plan meets the matrix's problem again, and prints it
    run_cli(session, "plan")


@nox.session(python=False)
def report(session: nox.Session) -> None:
    """Build reports/index.html, summary.md and results.json from whatever records exist."""
    run_cli(session, "report")


@nox.session(python=False)
def bisect(session: nox.Session) -> None:
    """Find the first bad release.

    `nox -s bisect -- --case ID --axis PKG --good V1 --bad V2 [--pins PKG==V ...]`
    """
    run_cli(session, "bisect")


@nox.session(python=False)
def autobisect(session: nox.Session) -> None:
    """Bisect the new failures whose neighbour cell passes, within matrix.yaml's bisect.budget.

    Run after `nox -s matrix`; `-- --dry-run` only prints the choice, `--budget N`
    overrides the budget. Findings go to the history; `nox -s report` shows them.
    """
    run_cli(session, "autobisect")


@nox.session(python=False, name="known-issues")
def known_issues(session: nox.Session) -> None:
    """Prove known_issues.yaml's ranges by the cells at each entry's boundaries.

    ``nox -s known-issues -- prove [ID ...]`` (``--stale``: only missing or outdated proofs,
    within the bisect budget). Proofs go to the history; ``nox -s report`` shows them.
    """
    run_cli(session, "known-issues")


@nox.session(python=False)
def wheelhouse(session: nox.Session) -> None:
    """Download the wheels the selected cells need, for an offline runner.

    `nox -s wheelhouse -- --python 3.12 --platform manylinux_2_28_x86_64 DIR`
    (`--host-packages FREEZE` where install.system-packages takes the host's).
    """
    run_cli(session, "wheelhouse")
