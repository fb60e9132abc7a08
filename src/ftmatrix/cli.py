"""``python -m ftmatrix``: plan, run, report, outside nox as inside it.

``main()`` prints each fatal error's message and returns its exit code (the
table is ``errors.py``); the inner functions raise, so tests call them directly.
The noxfile's sessions call ``main()`` too: one code path for both entry points.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from packaging.version import InvalidVersion, Version

from ftmatrix.bisect.auto import AutoJob, ReleasesUnavailable, choose_bisects, immediate_finding
from ftmatrix.bisect.cells import BisectRequest, finding_document, run_bisect
from ftmatrix.caps import RequiresLookup, plan_probes
from ftmatrix.cell.records import Record, read_records, write_atomically
from ftmatrix.cell.status import Status
from ftmatrix.check.command import add_check_parser, run_check
from ftmatrix.config import InstallOptions, Limits, Matrix, load_matrix
from ftmatrix.download import NotFound
from ftmatrix.errors import BisectError, ExitCode, FatalError, PackageIndexError, UsageError
from ftmatrix.index import list_releases
from ftmatrix.init import parse_operations, parse_package, scaffold, write_scaffold
from ftmatrix.known_issues import load_known_issues
from ftmatrix.plan import (
    CANNOT_INSTALL,
    IMPOSSIBLE,
    NO_CELL,
    UNRESOLVED,
    Cell,
    Oracle,
    Plan,
    Verdict,
    plan_cells,
    select_cells,
)
from ftmatrix.report.planned import PLAN_FILE, cells_without_records, write_plan
from ftmatrix.report.publish import restore_history, write_site
from ftmatrix.report.render import INSTALLABILITY_FILE, render_report
from ftmatrix.resolve import (
    RETRY_DELAYS,
    TRANSIENT,
    Resolution,
    conflict_summary,
    resolve_cell,
    uv_binary,
    with_test_runners,
)
from ftmatrix.reuse import (
    Decision,
    EarlierRun,
    cases_key,
    earlier_runs,
    plan_decisions,
    reuse_records_of_cell,
)
from ftmatrix.selectors import check_released, resolve_selectors
from ftmatrix.settings import Settings, known_issues_file
from ftmatrix.shard import cell_costs, shard_cells
from ftmatrix.store import load_findings, merge_outputs, newest_records, save_finding
from ftmatrix.system_packages import HOST_PYTHON_VARIABLE
from ftmatrix.versions import version_order
from ftmatrix.wheelhouse import Target, build_wheelhouse, summary_line


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
    """
    settings = Settings.from_env(env, root=root, now=now)
    matrix = load_matrix(settings.matrix, profile=settings.profile, default_python=settings.python)
    if any(axis.selector for axis in matrix.packages):
        matrix = resolve_selectors(matrix, index_releases(matrix, env))
    if check:
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
    selected = select_cells(plan.cells, [*settings.select, *select])
    if settings.shard is not None:
        costs = cell_costs(read_records(settings.out / "records").records)
        selected = shard_cells(selected, *settings.shard, costs)
    return Loaded(settings=settings, matrix=matrix, plan=plan, selected=tuple(selected))


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

    def answer(queries: Sequence[Mapping[str, str | None]]) -> list[Verdict]:
        verdicts: list[Verdict | None] = [None] * len(queries)
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
        return [v or Verdict(installable=False, reason="no Python of the matrix") for v in verdicts]

    return answer


def _verdict(resolution: Resolution) -> Verdict:
    if resolution.lock is not None:
        return Verdict(installable=True)
    return Verdict(
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
    answers = resolve_cells(cells, matrix.install, env, matrix.limits)
    for delay in RETRY_DELAYS:
        again = [
            i
            for i, a in enumerate(answers)
            if a.status is Status.INSTALL_ERROR and TRANSIENT.search(a.reason or "")
        ]
        if not again:
            break
        sleep(delay)
        retried = resolve_cells([cells[i] for i in again], matrix.install, env, matrix.limits)
        for i, resolution in zip(again, retried, strict=True):
            answers[i] = resolution
    return answers


def index_releases(matrix: Matrix, env: Mapping[str, str]) -> Any:
    """Release lists from the configured index, frozen at UV_EXCLUDE_NEWER when set."""
    cutoff = env.get("UV_EXCLUDE_NEWER")
    exclude_newer = datetime.fromisoformat(cutoff.replace("Z", "+00:00")) if cutoff else None
    if exclude_newer is not None and exclude_newer.tzinfo is None:
        exclude_newer = exclude_newer.replace(tzinfo=UTC)

    def releases(package: str) -> list[Version]:
        found = list_releases(package, matrix.install, env, exclude_newer=exclude_newer)
        return [r.version for r in found]

    return releases


def plan_json(
    loaded: Loaded, env: Mapping[str, str], *, now: datetime | None = None
) -> dict[str, Any]:
    """The machine form of the plan (documented in README.md), each cell resolved."""
    matrix = loaded.matrix
    resolutions = resolve_cells(loaded.selected, matrix.install, env, matrix.limits)
    decisions = plan_reuse(loaded, resolutions, now=now or datetime.now(UTC))
    return {
        "matrix": matrix.source,
        "profile": matrix.profile,
        "strategy": matrix.strategy,
        "full_size": loaded.plan.full_size,
        "pairwise_lower_bound": loaded.plan.pairwise_lower_bound,
        "selectors": {
            axis.package: {
                "selector": axis.selector.describe(),
                "versions": [v or "none" for v in axis.versions],
            }
            for axis in matrix.packages
            if axis.selector is not None
        },
        "cells": [
            {
                **cell.to_dict(),
                "session": f"matrix({cell.label})",
                "runs_on": list(_hardware(matrix, cell.hardware).runs_on),
                "installable": resolution.lock is not None,
                "lock_id": resolution.lock_id,
                "reason": resolution.reason,
                "reuse": decision.to_dict(),
            }
            for cell, resolution, decision in zip(
                loaded.selected, resolutions, decisions, strict=True
            )
        ],
        **installability_json(loaded.plan),
    }


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


def installability_json(plan: Plan) -> dict[str, Any]:
    """What the installability-aware covering found: pairs that cannot co-install (with
    uv's reason), values that install with nothing, and how much of the pairs is covered."""
    covering = plan.covering
    if covering is None:
        return {"impossible_pairs": []}

    def of(kind: str) -> list[dict[str, Any]]:
        return [f.to_dict() for f in covering.of_kind(kind)]

    return {
        "impossible_pairs": of(IMPOSSIBLE),
        "uninstallable_values": of(CANNOT_INSTALL),
        "uncovered_pairs": of(NO_CELL),
        "unresolved": of(UNRESOLVED),
        "pairs": [[*pair, ok] for pair, ok in covering.pair_table],
        "covering": {
            "pairs_needed": covering.pairs_needed,
            "pairs_possible": covering.pairs_possible,
            "pairs_covered": covering.pairs_covered,
            "resolutions": covering.resolutions,
            "lower_bound": covering.lower_bound,
            "failed_cells": [
                {"pins": dict(combo), "reason": reason} for combo, reason in covering.failed
            ],
        },
    }


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


def ci_matrix(
    loaded: Loaded, cells_per_shard: int, reused: frozenset[str] = frozenset()
) -> dict[str, Any]:
    """The nightly workflow's job matrix: each hardware class's cells split into shards.

    Each job gets the exact labels of the cells it runs (cells in ``reused``, ids, start
    none; a class with none left starts no job), the Python the plan gave cells that name
    none (``python``: FTMATRIX_PYTHON there, so the job's labels are the plan's whatever
    the runner's own ``python3``) and every Python its cells need (``pythons``, one per
    line, as actions/setup-python takes them).
    """
    include = []
    for hardware in loaded.matrix.hardware:
        running = [c for c in loaded.selected if c.hardware == hardware.name and c.id not in reused]
        count = len(running)
        if not count:
            continue
        shards = -(-count // max(cells_per_shard, 1))
        for index in range(1, shards + 1):
            include.append(
                {
                    "hardware": hardware.name,
                    "runs_on": list(hardware.runs_on),
                    "select": ",".join(c.label for c in running),
                    "shard": f"{index}/{shards}",
                    "cells": count,
                    **job_pythons(loaded, running),
                }
            )
    return {"include": include}


def job_pythons(loaded: Loaded, cells: Sequence[Cell]) -> dict[str, str]:
    """``python`` (the default cell Python of the plan) and ``pythons`` (each one a job's
    cells need, the default last: actions/setup-python makes its last the default)."""
    default = loaded.settings.python
    others = sorted({c.python for c in cells} - {default}, key=version_order)
    return {"python": default, "pythons": "\n".join([*others, default])}


def carry_reused(
    loaded: Loaded, env: Mapping[str, str], *, now: datetime, log: TextIO
) -> frozenset[str]:
    """Before the fan-out: write the records of the cells whose results still stand into
    tonight's run (so the report has them) and return their ids: they start no job."""
    if not loaded.reuse_days:
        return frozenset()
    matrix, settings = loaded.matrix, loaded.settings
    resolutions = resolve_cells(loaded.selected, matrix.install, env, matrix.limits)
    earlier = earlier_runs_of(loaded)  # read once: for the decisions and the records
    decisions = plan_reuse(loaded, resolutions, now=now, earlier=earlier)
    reused = set()
    for cell, resolution, decision in zip(loaded.selected, resolutions, decisions, strict=True):
        log.write(f"{cell.label}: {decision.describe()}\n")
        run = earlier.get(cell.id)
        if decision.reuse and run is not None and run.key is not None and resolution.lock:
            reuse_records_of_cell(settings.out, settings.run_id, cell.id, run, run.key)
            reused.add(cell.id)
    running = len(loaded.selected) - len(reused)
    log.write(f"{len(reused)} of {len(loaded.selected)} cells reused; {running} to run\n")
    return frozenset(reused)


def bisect_jobs(loaded: Loaded, jobs: Mapping[str, Any]) -> dict[str, Any]:
    """The nightly's autobisect jobs: one per hardware class that runs cells, on its own
    runners (a GPU failure is bisected on a GPU); none while bisect.budget is 0."""
    if loaded.matrix.bisect.budget <= 0:
        return {"include": []}
    classes: dict[str, Any] = {}
    for job in jobs["include"]:
        classes.setdefault(
            job["hardware"],
            {
                "hardware": job["hardware"],
                "runs_on": job["runs_on"],
                # A bisect cell holds all but one of a failing cell's pins: its Pythons.
                **job_pythons(
                    loaded, [c for c in loaded.selected if c.hardware == job["hardware"]]
                ),
            },
        )
    return {"include": list(classes.values())}


def print_plan(
    loaded: Loaded,
    out: TextIO,
    resolutions: Sequence[Resolution] | None = None,
    decisions: Sequence[Decision] | None = None,
) -> None:
    """The human form: one line per cell (with its installability when resolved, and
    whether it runs or is reused when reuse is on), then counts."""
    matrix = loaded.matrix
    profile = f", profile {matrix.profile}" if matrix.profile else ""
    out.write(f"{matrix.source}: strategy {matrix.strategy}{profile}\n")
    width = max((len(c.label) for c in loaded.selected), default=10)
    verdicts: Counter[str] = Counter()
    for index, cell in enumerate(loaded.selected):
        pins = " ".join(f"{k}=={v}" if v else f"{k}:none" for k, v in cell.pins)
        if cell.beyond_cap:
            pins += f" (probe past {cell.beyond_cap})"
        line = f"  {cell.label:<{width}}  {cell.id}  {pins}"
        if resolutions is not None:
            resolution = resolutions[index]
            verdict = "installable" if resolution.lock else resolution.status.value  # type: ignore[union-attr]
            verdicts[verdict] += 1
            why = ""
            if resolution.status is Status.UNINSTALLABLE:
                why = conflict_summary(resolution.reason or "")
            elif resolution.reason:
                why = resolution.reason.strip().splitlines()[-1]
            line += f"  {verdict}" + (f": {why}" if why else "")
        if decisions is not None:
            decision = decisions[index]
            verdicts["reused" if decision.reuse else "to run"] += 1
            line += f"  [{decision.describe()}]"
        out.write(line + "\n")
    total = len(loaded.plan.cells)
    counts = "; " + ", ".join(f"{n} {v}" for v, n in sorted(verdicts.items())) if verdicts else ""
    out.write(
        f"{len(loaded.selected)} cells selected (of {total} planned with strategy "
        f"{matrix.strategy}; the full product has {loaded.plan.full_size}){counts}\n"
    )
    print_findings(loaded.plan, out)


def write_installability(out: Path, run_id: str, plan: Plan) -> None:
    """Keep the plan's installability findings beside the run's records, for the report."""
    if plan.covering is not None:
        document = {"matrix": plan.matrix.source, **installability_json(plan)}
        write_atomically(
            out / "records" / run_id / INSTALLABILITY_FILE, json.dumps(document, indent=1)
        )


# How the plan table heads each kind of finding.
FINDING_HEADINGS = (
    (CANNOT_INSTALL, "installs with nothing (a finding, not a cell)"),
    (IMPOSSIBLE, "cannot co-install, whatever else is chosen (findings, not cells)"),
    (NO_CELL, "co-install alone, but in no combination that installs"),
    (UNRESOLVED, "the resolver gave no answer, after retries"),
)


def print_findings(plan: Plan, out: TextIO) -> None:
    """The installability-aware covering's findings, after the cells: one line each."""
    covering = plan.covering
    if covering is None:
        return
    out.write(
        f"pairs covered: {covering.pairs_covered} of {covering.pairs_possible} that co-install "
        f"({covering.pairs_needed} pairs in all); {covering.resolutions} resolutions\n"
    )
    for kind, heading in FINDING_HEADINGS:
        found = covering.of_kind(kind)
        if not found:
            continue
        out.write(
            f"{len(found)} {'value' if kind == CANNOT_INSTALL else 'pair'}"
            f"{'s' if len(found) != 1 else ''} {heading}:\n"
        )
        for finding in found:
            why = conflict_summary(finding.reason) if finding.reason else ""
            out.write(f"  {finding.describe()}" + (f": {why}" if why else "") + "\n")


def _hardware(matrix: Matrix, name: str) -> Any:
    return next(h for h in matrix.hardware if h.name == name)


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
    # nox runs in the noxfile's folder, which may be this package's: the run's files and
    # venvs are named absolutely, so they stay in the user's folder.
    command = [*nox, "-f", str(noxfile), "--envdir", str(root / ".nox")]
    command += ["-s", *sessions, *extra]
    child_env = {
        **env,
        "FTMATRIX_RUN_ID": settings.run_id,
        "FTMATRIX_MATRIX": str(settings.matrix.resolve()),
        "FTMATRIX_CASES": str(settings.cases.resolve()),
        "FTMATRIX_OUT": str(settings.out.resolve()),
    }
    if loaded.matrix.install.system_packages:
        # The host is this interpreter, whichever Python the nox found on PATH runs on.
        child_env.setdefault(HOST_PYTHON_VARIABLE, sys.executable)
    return subprocess.run(command, env=child_env, check=False).returncode


def _noxfile(folder: Path) -> Path:
    """The folder's noxfile.py where it imports ftmatrix's sessions, else the package's own."""
    own = folder / "noxfile.py"
    if own.is_file() and SESSIONS_MODULE in own.read_text(encoding="utf-8", errors="replace"):
        return own
    return Path(__file__).resolve().parent / "_noxfile.py"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ftmatrix",
        description="A compatibility matrix for the LLM fine-tuning stack.",
        epilog="The FTMATRIX_MATRIX, FTMATRIX_PROFILE, FTMATRIX_CASES and FTMATRIX_OUT "
        "environment variables choose the files; --matrix/--profile override them.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for name, text in (
        ("plan", "print the cells the matrix expands to"),
        ("run", "run the selected cells (through nox) and build the report"),
    ):
        command = sub.add_parser(name, help=text, description=text)
        command.add_argument("--matrix", help="matrix file (default: matrix.yaml)")
        command.add_argument("--profile", help="profile to apply")
        command.add_argument(
            "--select",
            action="append",
            default=[],
            metavar="GLOB",
            help="only cells whose label matches GLOB (repeatable)",
        )
        command.add_argument(
            "--no-reuse",
            action="store_true",
            help="run every cell: reuse no earlier result (as FTMATRIX_REUSE=0)",
        )
        if name == "plan":
            command.add_argument("--json", action="store_true", help="machine-readable output")
            command.add_argument(
                "--no-resolve",
                action="store_true",
                help="do not ask the resolver whether each cell can be installed",
            )
    search = sub.add_parser(
        "bisect",
        help="find the first release of a package where a case breaks",
        description="Binary search over the releases of --axis between --good and --bad, "
        "building a real cell for each, holding the --pins fixed.",
    )
    search.add_argument("--case", required=True, help="case id, e.g. test_sft.py::test_sft")
    search.add_argument("--axis", required=True, metavar="PKG", help="the package to move")
    search.add_argument("--good", required=True, metavar="V1", help="a release where it passes")
    search.add_argument("--bad", required=True, metavar="V2", help="a release where it breaks")
    search.add_argument(
        "--pins", nargs="*", default=[], metavar="PKG==V", help="other pins to hold fixed"
    )
    search.add_argument("--hardware", help="hardware class (default: the matrix's first)")
    search.add_argument("--python", help="Python version (default: the running one)")
    search.add_argument("--matrix", help="matrix file for install settings (default: matrix.yaml)")
    auto = sub.add_parser(
        "autobisect",
        help="bisect the new failures whose neighbour cell passes, within a budget of cells",
        description="After a run: pick the new failures (no known issue, not bisected yet) "
        "whose cell differs from a passing one in one package, and search that package's "
        "releases between the two, building at most the budget's cells in all.",
    )
    auto.add_argument(
        "--budget",
        type=count_at_least(0),
        metavar="CELLS",
        help="cells to build at most (default: the matrix file's bisect.budget)",
    )
    auto.add_argument(
        "--dry-run", action="store_true", help="print what would be bisected, build nothing"
    )
    auto.add_argument(
        "--hardware",
        metavar="CLASS",
        help="only the failures of this hardware class (a runner bisects what it can build)",
    )
    auto.add_argument("--matrix", help="matrix file (default: matrix.yaml)")
    auto.add_argument("--profile", help="profile to apply")
    ci = sub.add_parser(
        "ci-matrix",
        help="print the GitHub Actions job matrix (one job per hardware class and shard)",
    )
    ci.add_argument("--cells-per-shard", type=count_at_least(1), default=8, metavar="N")
    ci.add_argument(
        "--no-reuse",
        action="store_true",
        help="start a job for every cell: reuse no earlier result (as FTMATRIX_REUSE=0)",
    )
    add_check_parser(sub)
    house = sub.add_parser(
        "wheelhouse",
        help="download every wheel the selected cells need, for an offline runner",
        description="Resolve each selected cell for --python on --platform and download "
        "the wheels into DIR (with a manifest); an offline runner then runs the cells with "
        "install.find-links: [DIR] and UV_OFFLINE=1.",
    )
    house.add_argument("folder", metavar="DIR", help="where the wheels go")
    house.add_argument("--python", required=True, help="the runner's Python, e.g. 3.12")
    house.add_argument(
        "--platform",
        required=True,
        help="the runner's wheel platform tag, e.g. manylinux_2_28_x86_64",
    )
    house.add_argument(
        "--host-packages",
        metavar="FILE",
        help="`pip list --format=freeze` of the runner's host: what install.system-packages "
        "takes from it is pinned to those versions and not downloaded",
    )
    house.add_argument("--matrix", help="matrix file (default: matrix.yaml)")
    house.add_argument("--profile", help="profile to apply")
    house.add_argument("--select", action="append", default=[], metavar="GLOB")
    report = sub.add_parser("report", help="build the report from the records that exist")
    report.add_argument("--out", help="reports folder (default: reports/)")
    restore_parser = sub.add_parser(
        "restore-history",
        help="add a published history.jsonl's records to reports/history.sqlite",
        description="Restore the history from its published copy (reports/site/history.jsonl, "
        "deployed with the report): the records and bisect findings the local history "
        "lacks are added; a record it has is kept as it is.",
    )
    restore_parser.add_argument("source", metavar="FILE_OR_URL", help="a path or http(s) URL")
    restore_parser.add_argument("--out", help="reports folder (default: reports/)")
    restore_parser.add_argument(
        "--missing-ok",
        action="store_true",
        help="nothing published there yet (HTTP 404, no such file) is not an error",
    )
    restore_parser.add_argument(
        "--timeout",
        type=float,
        default=120,
        help="seconds for the whole download (default: 120)",
    )
    init = sub.add_parser(
        "init",
        help="write a matrix.yaml, example cases, a noxfile and the nightly into a repository",
        description="Scaffold a compatibility matrix in an existing repository: matrix.yaml "
        "over the PACKAGEs, cases/ with an example per --operation, noxfile.py and the "
        "nightly workflow. Writes nothing if any of these files exists (unless --force).",
    )
    init.add_argument(
        "packages",
        nargs="*",
        metavar="PACKAGE",
        help="NAME (the newest 2 releases), NAME=latest:N, NAME=latest-minor:N or NAME=V1,V2",
    )
    init.add_argument(
        "--operation",
        action="append",
        default=[],
        metavar="OPS",
        help="comma-separated operation families to write example cases for: "
        "import (the default), sft, lora, dpo, grpo",
    )
    init.add_argument("--dir", default=".", help="the repository (default: this folder)")
    init.add_argument("--force", action="store_true", help="overwrite files that exist")
    return parser


def _init(args: argparse.Namespace) -> int:
    """``ftmatrix init``: plan every file first, then write them all or none."""
    planned = scaffold(
        [parse_package(text) for text in args.packages], parse_operations(args.operation)
    )
    folder = Path(args.dir)
    for path in write_scaffold(folder, planned, force=args.force):
        print(f"wrote {path}")
    print(
        "next: `nox -s plan` shows the cells, `ftmatrix run` runs them and builds "
        "reports/index.html; add reports/ and .nox/ to .gitignore"
    )
    return ExitCode.OK


def count_at_least(lowest: int) -> Callable[[str], int]:
    """An argparse type: a whole number of at least ``lowest`` (argparse says which, exit 2)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = lowest - 1
        if value < lowest:
            raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number >= {lowest}")
        return value

    return parse


def check_bisect_arguments(
    args: argparse.Namespace, matrix: Matrix, env: Mapping[str, str]
) -> None:
    """The ends are versions, the hardware class exists, the Python can be found: else a
    UsageError before any cell is built."""
    for flag, text in (("--good", args.good), ("--bad", args.bad)):
        try:
            Version(text)
        except InvalidVersion:
            raise UsageError(f"bisect {flag} {text!r}: not a version, such as 0.19.1") from None
    classes = [h.name for h in matrix.hardware]
    if args.hardware is not None and args.hardware not in classes:
        raise UsageError(
            f"bisect --hardware {args.hardware!r}: no such hardware class; classes: "
            + ", ".join(classes)
        )
    if args.python is not None:
        found = subprocess.run(
            [uv_binary(), "python", "find", args.python],
            env=dict(env), capture_output=True, text=True, check=False,
        )  # fmt: skip
        if found.returncode != 0:
            raise UsageError(
                f"bisect --python {args.python!r}: uv finds no such interpreter here "
                "(a version such as 3.11, installed or installable by uv)"
            )


def _bisect(args: argparse.Namespace, env: Mapping[str, str], *, root: Path, now: datetime) -> int:
    pins = []
    for text in args.pins:
        package, sep, version = text.partition("==")
        if not sep or not package or not version:
            raise UsageError(f"--pins {text!r}: expected PKG==VERSION, such as trl==0.19.1")
        pins.append((package, version))
    settings = Settings.from_env(env, root=root, now=now)
    matrix = load_matrix(settings.matrix, profile=settings.profile, default_python=settings.python)
    check_bisect_arguments(args, matrix, env)
    request = BisectRequest(
        case=args.case,
        axis=args.axis,
        good=args.good,
        bad=args.bad,
        pins=tuple(pins),
        hardware=args.hardware,
        python=args.python,
    )
    finding = run_bisect(request, matrix, cases_dir=settings.cases, out_dir=settings.out, env=env)
    exact = "" if finding.exact else f" (untested between: {', '.join(finding.untested_between)})"
    print(
        f"{args.axis}: last good {finding.last_good}, first bad {finding.first_bad}{exact}; "
        f"{len(finding.steps)} cells built"
        + (f", skipped {', '.join(finding.skipped)}" if finding.skipped else "")
    )
    return ExitCode.OK


def _of_hardware(records: list[Record], matrix: Matrix, hardware: str | None) -> list[Record]:
    """The records of one hardware class (all of them for None); UsageError for a typo."""
    if hardware is None:
        return records
    classes = sorted(h.name for h in matrix.hardware)
    if hardware not in classes:
        raise UsageError(
            f"--hardware {hardware!r}: {matrix.source} has no such hardware class "
            f"(classes: {', '.join(classes)})"
        )
    mine = [r for r in records if r.hardware_class == hardware]
    print(f"autobisect: hardware class {hardware!r} only: {len(mine)} of {len(records)} records")
    return mine


def _autobisect(
    args: argparse.Namespace, env: Mapping[str, str], *, root: Path, now: datetime
) -> int:
    settings = Settings.from_env(env, root=root, now=now)
    matrix = load_matrix(settings.matrix, profile=settings.profile, default_python=settings.python)
    budget = matrix.bisect.budget if args.budget is None else args.budget
    store = settings.out / "history.sqlite"
    merge_outputs(settings.out)  # what the report merges: tonight's records, findings on disk
    lookup = index_releases(matrix, env)

    def releases(package: str) -> list[str]:
        try:
            return [str(v) for v in lookup(package)]
        except PackageIndexError as exc:
            raise ReleasesUnavailable(str(exc)) from exc

    records = _of_hardware(newest_records(store), matrix, args.hardware)
    selection = choose_bisects(
        records,
        budget=budget,
        releases=releases,
        known=load_known_issues(known_issues_file(settings)),
        findings=load_findings(store),
    )
    nothing = selection.nothing_reason()
    if nothing is not None:
        print(f"nothing to bisect: {nothing}")
        for item in selection.left_out:
            print(f"  not bisected: {item.what}: {item.reason}")
        return ExitCode.OK
    searches = len(selection.jobs)
    print(
        f"autobisect: {searches} search{'es' if searches != 1 else ''} chosen, for "
        f"{sum(job.shared for job in selection.jobs)} of {selection.failures} failing cases; "
        f"about {selection.estimated} of {budget} cells"
    )
    for job in selection.jobs:
        print(f"  bisect: {job.describe()}")
    for job in selection.over_budget:
        print(f"  over budget: {job.describe()}")
    for item in selection.left_out:
        print(f"  not bisected: {item.what}: {item.reason}")
    if args.dry_run:
        return ExitCode.OK
    left, found = budget, 0
    for job in selection.jobs:
        if job.cost > left:
            print(f"{job.request.id}: budget spent ({left} cells left, about {job.cost} needed)")
            continue
        try:
            finding = (
                immediate_finding(job)
                if job.immediate
                else run_bisect(
                    job.request,
                    matrix,
                    cases_dir=settings.cases,
                    out_dir=settings.out,
                    env=env,
                    max_cells=left,
                )
            )
        except BisectError as exc:
            left -= 2  # the ends were built (at most) before the search gave up
            print(f"{job.request.id}: not bisected: {exc}")
            continue
        except ValueError as exc:  # no such hardware class in this matrix: nothing built
            print(f"{job.request.id}: not bisected: {exc}")
            continue
        left -= 0 if job.immediate else len(finding.steps)
        _keep_finding(job, finding_document(job.request, finding), settings.out, store)
        found += 1
        exact = (
            "" if finding.exact else f" (untested between: {', '.join(finding.untested_between)})"
        )
        print(
            f"{job.request.axis}: last good {finding.last_good}, first bad {finding.first_bad}"
            f"{exact}; {0 if job.immediate else len(finding.steps)} cells built"
        )
    findings = "finding" if found == 1 else "findings"
    print(
        f"autobisect: {found} {findings} saved to {store}; {budget - left} of {budget} cells used"
    )
    return ExitCode.OK


def _keep_finding(job: AutoJob, document: dict[str, Any], out: Path, store: Path) -> None:
    """Write finding.json (the report re-reads it) with the signature it explains, and store it."""
    document = {
        **document,
        "signature": job.signature,
        "source": "autobisect",
        "immediate": job.immediate,
    }
    write_atomically(
        out / "bisect" / job.request.id / "finding.json", json.dumps(document, indent=1)
    )
    save_finding(store, document)


def _wheelhouse(
    args: argparse.Namespace, env: Mapping[str, str], *, root: Path, now: datetime
) -> int:
    """Plan the matrix for the runner's Python, then gather the wheels of its cells."""
    if not re.fullmatch(r"3\.\d+", args.python):
        raise UsageError(f"--python {args.python!r}: expected a version such as 3.12")
    target = Target(python=args.python, platform=args.platform)
    target.uv_platform  # noqa: B018 -- an unknown platform is an error before any work
    settings = Settings.from_env(env, root=root, now=now)
    # Cells with no python of their own run on the runner's, as they will there.
    matrix = load_matrix(settings.matrix, profile=settings.profile, default_python=args.python)
    if any(axis.selector for axis in matrix.packages):
        matrix = resolve_selectors(matrix, index_releases(matrix, env))
    selected = select_cells(plan_cells(matrix).cells, [*settings.select, *args.select])
    cells = [c for c in selected if c.python == args.python]
    if not cells:
        pythons = ", ".join(sorted({c.python for c in selected}))
        raise UsageError(f"--python {args.python}: no selected cell runs it (cells run {pythons})")
    print(
        f"{len(cells)} cells selected; resolving each for Python {args.python} on {args.platform}"
    )
    summary = build_wheelhouse(
        cells,
        matrix.install,
        env,
        target,
        Path(args.folder),
        limits=matrix.limits,
        host_freeze=Path(args.host_packages) if args.host_packages else None,
        describe={"matrix": matrix.source, "profile": matrix.profile},
    )
    print(summary_line(summary))
    return ExitCode.OK


def main(
    argv: Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
    *,
    root: Path | None = None,
) -> int:
    """Entry point: parse, dispatch, print errors, return an exit code.

    The noxfile's sessions call it too (``root``: the noxfile's folder), so
    ``nox -s plan`` and ``python -m ftmatrix plan`` run one code path.
    """
    args, extra = build_parser().parse_known_args(argv)
    env = dict(os.environ if env is None else env)
    for key, variable in (
        ("matrix", "FTMATRIX_MATRIX"),
        ("profile", "FTMATRIX_PROFILE"),
        ("out", "FTMATRIX_OUT"),
    ):
        value = getattr(args, key, None)
        if value:
            env[variable] = value
    if getattr(args, "no_reuse", False):
        env["FTMATRIX_REUSE"] = "0"
    try:
        code = dispatch(args, extra, env, root=root or Path.cwd(), now=datetime.now(UTC))
        sys.stdout.flush()  # here, not at exit: a closed pipe is met where it is handled
    except FatalError as exc:
        print(exc.describe(), file=sys.stderr)
        return exc.return_code
    except BrokenPipeError:
        # The reader went away (`ftmatrix check --json | head`): not an error of ours.
        # Python's own recipe: send what is still buffered to devnull, exit as a shell
        # reports a program ended by SIGPIPE.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return BROKEN_PIPE
    return code


BROKEN_PIPE = 128 + 13  # as `sh` reports a program ended by SIGPIPE


Handler = Callable[[argparse.Namespace, list[str], Mapping[str, str], Path, datetime], int]


def dispatch(
    args: argparse.Namespace,
    extra: list[str],
    env: Mapping[str, str],
    *,
    root: Path,
    now: datetime,
) -> int:
    """Run one subcommand; fatal errors propagate to :func:`main`."""
    handlers: dict[str, Handler] = {
        "check": lambda a, x, e, r, n: run_check(a, x),
        "init": lambda a, x, e, r, n: _init(a),
        "bisect": lambda a, x, e, r, n: _bisect(a, e, root=r, now=n),
        "autobisect": lambda a, x, e, r, n: _autobisect(a, e, root=r, now=n),
        "wheelhouse": lambda a, x, e, r, n: _wheelhouse(a, e, root=r, now=n),
        "report": _report,
        "restore-history": _restore_history,
        "ci-matrix": _ci_matrix,
        "plan": _plan,
        "run": _run,
    }
    return handlers[args.command](args, extra, env, root, now)


def _report(
    args: argparse.Namespace, extra: list[str], env: Mapping[str, str], root: Path, now: datetime
) -> int:
    settings = Settings.from_env(env, root=root, now=now)
    merged = merge_outputs(settings.out)
    missing = cells_without_records(settings.out)
    grid = render_report(
        settings.out,
        now=now,
        problems=merged.problems,
        known_issues=known_issues_file(settings),
        missing=missing,
    )
    site = write_site(settings.out)
    print(
        f"report: {settings.out / 'index.html'} ({len(grid.records)} records, "
        f"{len(grid.rows)} cells); to publish: {site}"
    )
    if missing:  # the report is written and shows them; the night still failed
        sys.stderr.write(
            f"ftmatrix: {len(missing)} planned cell(s) produced no records, so no verdict "
            f"(see {PLAN_FILE}): " + ", ".join(missing) + "\n"
        )
        return ExitCode.FAILED
    return ExitCode.OK


def _restore_history(
    args: argparse.Namespace, extra: list[str], env: Mapping[str, str], root: Path, now: datetime
) -> int:
    settings = Settings.from_env(env, root=root, now=now)
    store = settings.out / "history.sqlite"
    try:
        added, findings = restore_history(args.source, store, timeout=args.timeout)
    except NotFound as exc:
        if not args.missing_ok:
            raise
        print(
            f"restore-history: nothing published yet "
            f"({exc.describe().removeprefix('ftmatrix: ')}); {store} unchanged"
        )
        return ExitCode.OK
    print(f"restore-history: {added} records and {findings} bisect findings added to {store}")
    return ExitCode.OK


def _ci_matrix(
    args: argparse.Namespace, extra: list[str], env: Mapping[str, str], root: Path, now: datetime
) -> int:
    loaded = load(env, root=root, now=now)
    reused = carry_reused(loaded, env, now=now, log=sys.stderr)
    jobs = ci_matrix(loaded, args.cells_per_shard, reused)
    # The report job checks the night against it: a planned cell without records is loud.
    write_plan(loaded.settings.out, loaded.settings.run_id, [c.label for c in loaded.selected])
    print(f"matrix={json.dumps(jobs)}")
    print(f"bisect={json.dumps(bisect_jobs(loaded, jobs))}")
    print(f"run-id={loaded.settings.run_id}")
    return ExitCode.OK


def _plan(
    args: argparse.Namespace, extra: list[str], env: Mapping[str, str], root: Path, now: datetime
) -> int:
    # The plan asks the index anyway: a pin it never had is a config error here.
    resolve = not args.no_resolve
    loaded = load(env, root=root, now=now, select=args.select, resolve=resolve, check=resolve)
    if args.json:
        print(json.dumps(plan_json(loaded, env, now=now), indent=2))
        return ExitCode.OK
    resolutions = (
        None
        if args.no_resolve
        else resolve_cells(loaded.selected, loaded.matrix.install, env, loaded.matrix.limits)
    )
    decisions = (
        plan_reuse(loaded, resolutions, now=now)
        if resolutions is not None and loaded.reuse_days
        else None
    )
    print_plan(loaded, sys.stdout, resolutions, decisions)
    return ExitCode.OK


def _run(
    args: argparse.Namespace, extra: list[str], env: Mapping[str, str], root: Path, now: datetime
) -> int:
    loaded = load(env, root=root, now=now, select=args.select)
    if extra and extra[0] == "--":
        extra = extra[1:]
    print_plan(loaded, sys.stdout)
    return ExitCode.OK if run_nox(loaded, env, extra, root=root) == 0 else ExitCode.FAILED
