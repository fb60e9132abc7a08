"""The pipeline: settings -> matrix -> plan -> resolved cells -> reuse -> run -> report.

Each step is a function the CLI's subcommands and the nox sessions share: :func:`load`
reads the settings and the matrix file and plans it (:func:`plan_matrix`: selectors
resolved against the index, ``strategy: pairwise`` covered with cells uv says install,
cap probes added; the noxfile's :func:`list_cells` reads the plan kept by the last one),
:func:`resolve_cells` asks uv for each selected cell's lock, :func:`plan_reuse` says
which cells run and which reuse their newest results, :func:`run_nox` runs the
selected cells through nox (each cell: ``runner``), and :func:`report` merges the
records into the history and renders the report. How a plan is shown is ``planview``;
the nightly's fan-out is ``ci``.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from packaging.version import Version

from ftmatrix.caps import RequiresLookup, plan_probes
from ftmatrix.case_selection import check_case_selection, split_pytest_args
from ftmatrix.cell.records import read_records
from ftmatrix.cell.status import Status
from ftmatrix.config import InstallOptions, Limits, Matrix, load_matrix
from ftmatrix.errors import FatalError, UsageError
from ftmatrix.index import index_disabled, list_releases
from ftmatrix.interpreters import check_uv_settings
from ftmatrix.live_runs import (
    IN_RUN_VARIABLE,
    note_planned,
    planned_without_records,
    run_going_on,
    runs_in_progress,
)
from ftmatrix.path_kinds import check_cache_folder, check_kinds
from ftmatrix.plan import Cell, Installability, Oracle, Plan, plan_cells, select_cells
from ftmatrix.plan_cache import keep_plan, kept_plan
from ftmatrix.report.planned import cells_without_records
from ftmatrix.report.publish import write_site
from ftmatrix.report.render import render_report
from ftmatrix.report.unfinished import UnfinishedCell, unfinished_cells
from ftmatrix.resolve import (
    TRANSIENT,
    Resolution,
    cache_dir,
    resolve_cell,
    uv_binary,
    with_test_runners,
)
from ftmatrix.retry import retried_each
from ftmatrix.reuse import Decision, EarlierRun, cases_key, earlier_runs, plan_decisions
from ftmatrix.settings import Settings, known_issues_file
from ftmatrix.shard import cell_costs, shard_cells
from ftmatrix.sharing import one_report_at_a_time
from ftmatrix.store import merge_outputs
from ftmatrix.system_packages import HOST_PYTHON_VARIABLE
from ftmatrix.version_selectors import check_released, resolve_selectors


@dataclass(frozen=True, kw_only=True)
class Loaded:
    """A matrix file read with its profile applied, planned, and optionally filtered."""

    settings: Settings
    matrix: Matrix
    plan: Plan
    selected: tuple[Cell, ...]

    @property
    def reuse_days(self) -> int:
        """reuse.max-age-days for this run: 0 (off) under FTMATRIX_REUSE=0 or --no-reuse."""
        return self.matrix.reuse.max_age_days if self.settings.reuse else 0


def load(
    env: Mapping[str, str],
    *,
    root: Path,
    now: datetime,
    select: Sequence[str] = (),
    resolve: bool = True,
    check: bool = False,
) -> Loaded:
    """Settings from ``env``, the matrix file they name, its plan, the selected cells.

    With ``resolve`` (the default), ``strategy: pairwise`` asks uv which pairs co-install
    and covers them with cells that install; without, it covers every pair blindly.
    With ``check``, a pin the index never had is a ConfigError first, never a cell.
    A plan made with the resolver is kept for the noxfile's listing (``plan_cache``).
    """
    settings = Settings.from_env(env, root=root, now=now)
    matrix = load_matrix(settings.matrix, profile=settings.profile, default_python=settings.python)
    check_cache_folder(cache_dir(env))
    if resolve:  # the resolver, the interpreters and the cells all need uv to start
        check_uv_once(env, _noxfile(root).parent.resolve())  # where nox makes the venvs
    plan = plan_matrix(matrix, env, resolve=resolve, check=check)
    if resolve:
        keep_plan(plan, settings, env, now=now)
    return with_selection(settings, plan, select)


def plan_matrix(
    matrix: Matrix, env: Mapping[str, str], *, resolve: bool = True, check: bool = False
) -> Plan:
    """The cells ``matrix`` expands to: selectors resolved against the index, then the
    strategy (pairwise covering what uv says installs, with ``resolve``), then cap probes."""
    if any(axis.selector for axis in matrix.packages):
        matrix = resolve_selectors(matrix, index_releases(matrix, env))
    # Offline, the index cannot say what was released (the host's own torch is in no
    # folder): the resolver decides, naming what is missing.
    if check and not index_disabled(env):
        check_released(matrix, index_releases(matrix, env))
    oracle = uv_oracle(matrix, env) if resolve and matrix.strategy == "pairwise" else None
    plan = plan_cells(matrix, oracle)
    if resolve and matrix.probe_caps:
        probes = plan_probes(
            plan,
            RequiresLookup(matrix.install, env),
            lambda cells: resolve_cells(cells, matrix.install, env, matrix.limits),
        )
        plan = replace(plan, cells=(*plan.cells, *probes))
    return plan


@dataclass(frozen=True, kw_only=True)
class Listing:
    """What the noxfile lists: the loaded plan, or the problem that stops it."""

    loaded: Loaded | None = None
    problem: FatalError | None = None


def list_cells(env: Mapping[str, str], *, root: Path, now: datetime) -> Listing:
    """The cells nox lists, one ``matrix(LABEL)`` session each: from the plan a plan step
    kept while it stands (``plan_cache``: no network), else planned now (and kept); or the
    fatal error that stops the matrix, for the session that meets it to report."""
    try:
        settings = Settings.from_env(env, root=root, now=now)
        check_cache_folder(cache_dir(env))  # its kept plan is read next
        matrix = load_matrix(
            settings.matrix, profile=settings.profile, default_python=settings.python
        )
        check_uv_once(env, root)  # a cell's venv is made by uv: said once, not per cell
        plan = kept_plan(settings, matrix, env, now=now)
        if plan is None:
            plan = plan_matrix(matrix, env)
            keep_plan(plan, settings, env, now=now)
        return Listing(loaded=with_selection(settings, plan))
    except FatalError as exc:
        return Listing(problem=exc)


def check_uv_once(env: Mapping[str, str], folder: Path | None = None) -> None:
    """:func:`check_uv_settings`, once for the same settings: not again in this process,
    nor in a process whose ``UV_CHECKED_VARIABLE`` says its starter found these settings
    good (the nox `ftmatrix run` starts: :func:`uv_checked`; nox's sessions and parallel
    children: set here in nox's environment). Settings that differ (a ``UV_*`` variable
    or ``PATH`` set for one command) are checked again."""
    mark = uv_settings_mark(env, folder)
    if env.get(UV_CHECKED_VARIABLE) == mark or mark in _FOUND_GOOD:
        return
    check_uv_settings(env, folder)
    _FOUND_GOOD.add(mark)
    if env is os.environ:  # (nox's own) what it starts takes the settings it checked
        os.environ[UV_CHECKED_VARIABLE] = mark


def uv_checked(env: Mapping[str, str], root: Path | None = None) -> dict[str, str]:
    """For a process this one starts with ``env``: the mark that its uv settings were
    found good here, where they were."""
    mark = uv_settings_mark(env, root)
    found = mark in _FOUND_GOOD or env.get(UV_CHECKED_VARIABLE) == mark
    return {UV_CHECKED_VARIABLE: mark} if found else {}


_UV_READS = frozenset({"PATH", "HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME"})
# Set for a process whose starter found its environment's uv settings good.
UV_CHECKED_VARIABLE = "FTMATRIX_UV_CHECKED"
_FOUND_GOOD: set[str] = set()  # the marks of the settings this process found good


def uv_settings_mark(env: Mapping[str, str], folder: Path | None = None) -> str:
    """A short digest of what decides whether uv starts: ``env``'s ``UV_*`` variables,
    ``PATH``, where its cache and settings are by default, and the ``folder`` (and its
    settings files) it runs in."""
    settings = sorted((k, v) for k, v in env.items() if k.startswith("UV_") or k in _UV_READS)
    files = [_stamp(folder / name) for name in ("uv.toml", "pyproject.toml")] if folder else []
    digest = json.dumps([settings, str(folder), files]).encode()
    return hashlib.sha256(digest).hexdigest()[:16]


def _stamp(path: Path) -> list[float] | None:
    """When ``path`` last changed and its size (None: no such file): a settings file
    edited since is checked again."""
    try:
        found = path.stat()
    except OSError:
        return None
    return [found.st_mtime, found.st_size]


def with_selection(settings: Settings, plan: Plan, select: Sequence[str] = ()) -> Loaded:
    """``plan`` with the cells the settings (and ``select``) choose: globs, then a shard."""
    cells = select_cells(plan.cells, [*settings.select, *select])
    if settings.shard is not None:
        costs = cell_costs(read_records(settings.out / "records").records)
        cells = shard_cells(cells, *settings.shard, costs)
    return Loaded(settings=settings, matrix=plan.matrix, plan=plan, selected=tuple(cells))


def uv_oracle(
    matrix: Matrix, env: Mapping[str, str], *, sleep: Callable[[float], None] = time.sleep
) -> Oracle:
    """The planner's installability oracle: uv, for the matrix's Python and support packages.

    Each set of pins is resolved as a cell holding only those pins (plus the support
    packages and the test runners, as the runner installs them), in parallel and through
    the resolution cache. Answers that are no proof (network, index) are asked again
    after a pause, then given back unproven: reported, never a crash.
    """

    def cell_of(pins: Mapping[str, str | None], python: str) -> Cell:
        order = [a.package for a in matrix.packages]
        return Cell(
            python=python,
            pins=tuple((name, pins[name]) for name in order if name in pins),
            hardware=matrix.hardware[0].name if matrix.hardware else "cpu",
            support=matrix.support,
        )

    def answer(queries: Sequence[Mapping[str, str | None]]) -> list[Installability]:
        verdicts: list[Installability | None] = [None] * len(queries)
        # Pins without a Python install if they do on any of the matrix's Pythons.
        for python in matrix.python:
            todo = [
                i
                for i, q in enumerate(queries)
                if (verdicts[i] is None or not verdicts[i].installable)  # type: ignore[union-attr]
                and str(q.get("python", python)) == python
            ]
            cells = [cell_of(queries[i], python) for i in todo]
            for i, resolution in zip(
                todo, _resolve_with_retries(cells, matrix, env, sleep), strict=True
            ):
                if verdicts[i] is None or resolution.lock is not None:
                    verdicts[i] = _verdict(resolution)
        return [
            v or Installability(installable=False, reason="no Python of the matrix")
            for v in verdicts
        ]

    return answer


def _verdict(resolution: Resolution) -> Installability:
    if resolution.lock is not None:
        return Installability(installable=True)
    return Installability(
        installable=False,
        reason=resolution.reason,
        proven=resolution.status is Status.UNINSTALLABLE,
    )


def _resolve_with_retries(
    cells: Sequence[Cell],
    matrix: Matrix,
    env: Mapping[str, str],
    sleep: Callable[[float], None],
) -> list[Resolution]:
    return retried_each(
        cells,
        lambda some: resolve_cells(some, matrix.install, env, matrix.limits),
        lambda a: a.status is Status.INSTALL_ERROR and bool(TRANSIENT.search(a.reason or "")),
        sleep=sleep,
    )


def index_releases(matrix: Matrix, env: Mapping[str, str]) -> Any:
    """Release lists from the configured index, frozen at UV_EXCLUDE_NEWER when set."""
    cutoff = env.get("UV_EXCLUDE_NEWER")
    exclude_newer = datetime.fromisoformat(cutoff.replace("Z", "+00:00")) if cutoff else None
    if exclude_newer is not None and exclude_newer.tzinfo is None:
        exclude_newer = exclude_newer.replace(tzinfo=UTC)

    # One listing a package per command: prove --stale and bisection ask for one many times.
    @functools.cache
    def releases(package: str) -> tuple[Version, ...]:
        found = list_releases(package, matrix.install, env, exclude_newer=exclude_newer)
        return tuple(r.version for r in found)

    return releases


def resolve_cells(
    cells: Sequence[Cell],
    install: InstallOptions,
    env: Mapping[str, str],
    limits: Limits | None = None,
) -> list[Resolution]:
    """Resolve cells in parallel (uv is I/O-bound here), each pin set once.

    With ``limits``, each cell is resolved as the runner installs it (pytest-xdist
    joins it when workers share it), so the plan's lock_id is the records' lock_id.
    """
    unique = {
        cell.id: with_test_runners(cell, limits) if limits is not None else cell for cell in cells
    }
    # Found once before the threads: locating it reads sysconfig, which is not thread-safe.
    uv_binary()
    with ThreadPoolExecutor(max_workers=min(8, len(unique) or 1)) as pool:
        answers = dict(
            zip(
                unique,
                pool.map(lambda c: resolve_cell(c, install, env), unique.values()),
                strict=True,
            )
        )
    return [answers[cell.id] for cell in cells]


def earlier_runs_of(loaded: Loaded) -> dict[str, EarlierRun]:
    """Each selected cell's newest run in the history before tonight's ({} with reuse off)."""
    if not loaded.reuse_days:
        return {}
    return earlier_runs(
        loaded.settings.out / "history.sqlite",
        cell_ids=[c.id for c in loaded.selected],
        excluding=loaded.settings.run_id,
    )


def plan_reuse(
    loaded: Loaded,
    resolutions: Sequence[Resolution],
    *,
    now: datetime,
    earlier: Mapping[str, EarlierRun] | None = None,
) -> list[Decision]:
    """Whether each selected cell will run or reuse its newest results, and why it runs
    (``reuse.plan_decisions``). ``earlier``: the history's runs where the caller read them
    already (:func:`earlier_runs_of`)."""
    settings, matrix = loaded.settings, loaded.matrix
    cases = (
        cases_key(settings.cases, matrix.cases, (), matrix.timeouts, matrix.limits)
        if loaded.reuse_days
        else ""
    )
    return plan_decisions(
        loaded.selected,
        [r.locked for r in resolutions],
        cases=cases,
        earlier=earlier_runs_of(loaded) if earlier is None else earlier,
        max_age_days=loaded.reuse_days,
        today=now.astimezone(UTC).date(),
    )


def plan_for_python(
    env: Mapping[str, str], *, root: Path, now: datetime, python: str, select: Sequence[str]
) -> tuple[Matrix, list[Cell]]:
    """The matrix planned for another machine's Python (cells that name none run on it
    there: selectors resolved, pairs covered blindly) and the selected cells that run it;
    a UsageError where none does."""
    settings = Settings.from_env(env, root=root, now=now)
    matrix = load_matrix(settings.matrix, profile=settings.profile, default_python=python)
    if any(axis.selector for axis in matrix.packages):
        matrix = resolve_selectors(matrix, index_releases(matrix, env))
    chosen = select_cells(plan_cells(matrix).cells, [*settings.select, *select])
    cells = [c for c in chosen if c.python == python]
    if not cells:
        pythons = ", ".join(sorted({c.python for c in chosen}))
        raise UsageError(f"--python {python}: no selected cell runs it (cells run {pythons})")
    return matrix, cells


@dataclass(frozen=True, kw_only=True)
class Reported:
    """What :func:`report` wrote, and what the report shows that fails the night."""

    written: str  # where the report is, and how many records and cells it has
    missing: list[str]  # planned cells that produced no records
    unfinished: list[UnfinishedCell]  # cells whose newest run stopped in their cases
    unreadable: list[str]  # record lines that could not be read

    @property
    def failed(self) -> bool:
        return bool(self.missing or self.unfinished or self.unreadable)


def report(settings: Settings, *, now: datetime, env: Mapping[str, str] | None = None) -> Reported:
    """The last stage: the run's records merged into the history, the report rendered from
    it and the site to publish written. What was written, and what it shows that the night
    failed on: the planned cells that produced no records, the cells a run stopped in the
    middle of, and the record lines that could not be read. A run still going on (``env``
    tells the run that builds its own report) is said to be in progress."""
    env = env or {}
    records_root = settings.out / "records"
    with one_report_at_a_time(settings.out):
        merged = merge_outputs(settings.out, now=now)
        in_progress = runs_in_progress(records_root, env)
        unfinished = unfinished_cells(records_root, env, {run.run_id for run in in_progress})
        # A cell killed in its first case has no records file but is said as stopped.
        stopped = {cell.label for cell in unfinished}
        missing = [label for label in cells_without_records(settings.out) if label not in stopped]
        # A run of this machine's own (`ftmatrix run`, `nox -s matrix`): its cells too.
        missing += [
            label
            for label in planned_without_records(records_root, env)
            if label not in missing and label not in stopped
        ]
        grid = render_report(
            settings.out,
            now=now,
            problems=merged.problems,
            known_issues=known_issues_file(settings),
            missing=missing,
            unfinished=unfinished,
            in_progress=in_progress,
        )
        site = write_site(settings.out)
    written = (
        f"report: {settings.out / 'index.html'} ({len(grid.records)} records, "
        f"{len(grid.rows)} cells); to publish: {site}"
    )
    return Reported(
        written=written,
        missing=missing,
        unfinished=unfinished,
        unreadable=list(merged.problems),
    )


# What a repository's noxfile imports to have the matrix sessions (ftmatrix init writes it).
SESSIONS_MODULE = "ftmatrix.sessions"


def run_nox(
    loaded: Loaded, env: Mapping[str, str], extra: Sequence[str], *, root: Path | None = None
) -> int:
    """Run the selected cells through nox (the engine), then the report.

    ``root`` (default: the working directory) is the user's folder: its noxfile.py where
    that imports ftmatrix's sessions, else the package's own; the venvs go to its .nox/.
    """
    root = Path.cwd() if root is None else root
    # This interpreter's nox (a dependency): a nox elsewhere on PATH may not see ftmatrix.
    nox = [sys.executable, "-m", "nox"]
    sessions = [f"matrix({cell.label})" for cell in loaded.selected]
    settings = loaded.settings
    noxfile = _noxfile(root)
    # Said here, before nox meets it with a traceback of its own.
    check_kinds([(root / ".nox", "folder", "nox's folder of venvs (.nox)")])
    # nox runs in the noxfile's folder, which may be this package's: the run's files and
    # venvs are named absolutely, so they stay in the user's folder.
    command = [*nox, "-f", str(noxfile), "--envdir", str(root / ".nox")]
    # What follows `ftmatrix run --` goes to the cells' pytest, as after `nox -s matrix --`
    # (it went to nox, which took a pytest option for its own or a case for a session).
    selection, _options = split_pytest_args(extra)
    check_case_selection(
        settings.cases, selection, source="arguments after --", from_command_line=True
    )
    command += ["-s", *sessions, *(["--", *extra] if extra else [])]
    child_env = {
        **env,
        **uv_checked(env, noxfile.parent.resolve()),
        "FTMATRIX_RUN_ID": settings.run_id,
        IN_RUN_VARIABLE: settings.run_id,
        "FTMATRIX_MATRIX": str(settings.matrix.resolve()),
        "FTMATRIX_CASES": str(settings.cases.resolve()),
        "FTMATRIX_OUT": str(settings.out.resolve()),
    }
    if loaded.matrix.install.system_packages:
        # The host is this interpreter, whichever Python the nox found on PATH runs on.
        child_env.setdefault(HOST_PYTHON_VARIABLE, sys.executable)
    # The run's cells, and its lock for as long as it lasts: a report built meanwhile says
    # which cells have not finished.
    run_folder = settings.out / "records" / settings.run_id
    note_planned(run_folder, {cell.id: cell.label for cell in loaded.selected})
    with run_going_on(run_folder):
        return subprocess.run(command, env=child_env, check=False).returncode


@dataclass(frozen=True, kw_only=True)
class RunEnded:
    """How a run's nox ended, and what the report says of its cells that failed it."""

    code: int  # nox's exit code
    unrecorded: list[str]  # planned cells that ended without a record
    unfinished: list[UnfinishedCell]  # its cells it stopped in the middle of
    # Why the report could not be built again to show them (a full disk), or None.
    report_problem: FatalError | None = None

    @property
    def failed(self) -> bool:
        return self.code != 0 or bool(self.unrecorded or self.unfinished or self.report_problem)


def run_cells(
    loaded: Loaded,
    env: Mapping[str, str],
    extra: Sequence[str],
    *,
    root: Path | None = None,
    now: datetime,
) -> RunEnded:
    """:func:`run_nox`, then the cells it planned that ended without a record (a session
    nox skipped or lost, which the report built inside the run could not know) and those
    of its cells it stopped in the middle of (a cell's session that died: the report is
    built by a cell that ends, never by one that dies): the report is built again to show
    them. Where it cannot be (the disk that stopped the cell is full), the run still
    says what it knows."""
    code = run_nox(loaded, env, extra, root=root)
    records_root = loaded.settings.out / "records"
    unfinished = [
        cell
        for cell in unfinished_cells(records_root, env)
        if cell.run_id == loaded.settings.run_id
    ]
    stopped = {cell.label for cell in unfinished}  # said once: as stopped, not as missing
    ended = RunEnded(
        code=code,
        unrecorded=[c for c in planned_without_records(records_root, env) if c not in stopped],
        unfinished=unfinished,
    )
    if ended.unrecorded or ended.unfinished:
        try:
            report(loaded.settings, now=now, env=env)
        except FatalError as exc:
            return replace(ended, report_problem=exc)
    return ended


def _noxfile(folder: Path) -> Path:
    """The folder's noxfile.py where it imports ftmatrix's sessions, else the package's own."""
    own = folder / "noxfile.py"
    if own.is_file() and SESSIONS_MODULE in own.read_text(encoding="utf-8", errors="replace"):
        return own
    return Path(__file__).resolve().parent / "_noxfile.py"
