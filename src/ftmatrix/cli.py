"""``python -m ftmatrix``: argument parsing and one short handler per subcommand.

``main()`` prints each fatal error's message and returns its exit code (the
table is ``errors.py``); the inner functions raise, so tests call them directly.
The noxfile's chores (``nox -s plan``, ...) run ``python -m ftmatrix``: one code path.
The work is the pipeline's: ``pipeline`` (load, plan, resolve, run), ``planview``
(the plan shown), ``ci`` (the nightly's fan-out) and ``bisection.orchestrate``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ftmatrix import __version__
from ftmatrix.bisection.cells import BisectRequest
from ftmatrix.bisection.orchestrate import autobisect, bisect_once, parse_pins
from ftmatrix.check.command import add_check_parser, run_check
from ftmatrix.ci import bisect_jobs, carry_reused, ci_matrix
from ftmatrix.config import Matrix, load_matrix
from ftmatrix.download import NotFound, download_timeout
from ftmatrix.errors import ExitCode, FatalError, UsageError, one_line, os_error_line
from ftmatrix.init import add_init_parser, run_init
from ftmatrix.pipeline import Loaded, load, report, resolve_cells, run_cells
from ftmatrix.planview import interpreters_of, plan_json, print_plan, show_plan
from ftmatrix.prove import add_known_issues_parser, run_known_issues
from ftmatrix.report.notices import UNREADABLE
from ftmatrix.report.planned import PLAN_FILE, write_plan
from ftmatrix.report.publish import restore_history
from ftmatrix.report.unfinished import UNFINISHED_WARNING
from ftmatrix.settings import Settings
from ftmatrix.wheelhouse import run_wheelhouse

# Loaded, load and resolve_cells live in ftmatrix.pipeline; scripts import them from here too.
__all__ = ["ExitCode", "Loaded", "build_parser", "dispatch", "load", "main", "resolve_cells"]


def main(
    argv: Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
    *,
    root: Path | None = None,
) -> int:
    """Entry point: parse, dispatch, print errors, return an exit code.

    ``root`` (default: the working directory) is where relative paths are taken from;
    the noxfile's chores run ``python -m ftmatrix`` in the noxfile's folder.
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
    except BrokenPipeError:
        # The reader went away (`ftmatrix check --json | head`): not an error of ours.
        # Python's own recipe: send what is still buffered to devnull, exit as a shell
        # reports a program ended by SIGPIPE.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return BROKEN_PIPE
    except (FatalError, OSError) as exc:  # an OSError: one line for a full disk, a wrong path
        fatal = exc if isinstance(exc, FatalError) else os_error_line(exc)
        if fatal is None:
            raise
        print(fatal.describe(), file=sys.stderr)
        return fatal.return_code
    return code


BROKEN_PIPE = 128 + 13  # as `sh` reports a program ended by SIGPIPE


@dataclass(frozen=True, kw_only=True)
class _Call:
    """What a handler gets besides its arguments: those argparse left (pytest's, for
    ``run``), the environment, the folder paths are taken from, and the time."""

    extra: list[str]
    env: Mapping[str, str]
    root: Path
    now: datetime

    def settings(self) -> Settings:
        return Settings.from_env(self.env, root=self.root, now=self.now)

    def matrix(self, settings: Settings) -> Matrix:
        return load_matrix(
            settings.matrix, profile=settings.profile, default_python=settings.python
        )

    def load(self, **options: Any) -> Loaded:
        return load(self.env, root=self.root, now=self.now, **options)


def dispatch(
    args: argparse.Namespace,
    extra: list[str],
    env: Mapping[str, str],
    *,
    root: Path,
    now: datetime,
) -> int:
    """Run one subcommand; fatal errors propagate to :func:`main`."""
    if extra and args.command != "run":  # run's go to pytest; elsewhere a typo went unseen
        given = one_line(" ".join(extra))
        raise UsageError(f"{args.command}: unrecognized arguments: {given}; see --help")
    for option in ("matrix", "profile", "out"):  # an empty one was taken for none given
        if getattr(args, option, None) == "":
            raise UsageError(f"--{option} '': names nothing; give one, or leave the option out")
    return HANDLERS[args.command](args, _Call(extra=extra, env=env, root=root, now=now))


def _plan(args: argparse.Namespace, call: _Call) -> int:
    # The plan asks the index anyway: a pin it never had is a config error here.
    resolve = not args.no_resolve
    loaded = call.load(select=args.select, resolve=resolve, check=resolve)
    if args.json:
        print(json.dumps(plan_json(loaded, call.env, now=call.now), indent=2))
    else:
        show_plan(loaded, call.env, now=call.now, resolve=resolve, out=sys.stdout)
    return ExitCode.OK


def _run(args: argparse.Namespace, call: _Call) -> int:
    loaded = call.load(select=args.select)
    extra = call.extra[1:] if call.extra[:1] == ["--"] else call.extra
    print_plan(loaded, sys.stdout, interpreters=interpreters_of(loaded, call.env))
    ended = run_cells(loaded, call.env, extra, root=call.root, now=call.now)
    run = loaded.settings.run_id  # each below is shown in the report too
    _warn(ended.unrecorded, f"cell(s) of run {run} produced no records, so no verdict")
    _warn([cell.describe() for cell in ended.unfinished], UNFINISHED_WARNING, "; ")
    if ended.report_problem is not None:
        problem = ended.report_problem.describe().removeprefix("ftmatrix: ")
        sys.stderr.write(f"ftmatrix: the report could not be built again to show them: {problem}\n")
    return ExitCode.FAILED if ended.failed else ExitCode.OK


def _report(args: argparse.Namespace, call: _Call) -> int:
    reported = report(call.settings(), now=call.now, env=call.env)
    print(reported.written)
    # The report is written and shows them; the night still failed.
    _warn(reported.missing, f"planned cell(s) produced no records, so no verdict (see {PLAN_FILE})")
    _warn([cell.describe() for cell in reported.unfinished], UNFINISHED_WARNING, "; ")
    again = "a resumed run keeps those lines apart and runs their cases again"
    _warn(reported.unreadable, f"{UNREADABLE} ({again})", "; ")
    return ExitCode.FAILED if reported.failed else ExitCode.OK


def _warn(items: Sequence[str], what: str, separator: str = ", ") -> None:
    if items:
        sys.stderr.write(f"ftmatrix: {len(items)} {what}: {separator.join(items)}\n")


def _restore_history(args: argparse.Namespace, call: _Call) -> int:
    store = call.settings().out / "history.sqlite"
    try:
        added, findings = restore_history(
            args.source,
            store,
            timeout=download_timeout(args.timeout),
            now=call.now,
            say=lambda line: sys.stderr.write(f"ftmatrix: {line}\n"),
        )
    except NotFound as exc:
        if not args.missing_ok:
            raise
        said = exc.describe().removeprefix("ftmatrix: ")
        print(f"restore-history: nothing published yet ({said}); {store} unchanged")
        return ExitCode.OK
    print(f"restore-history: {added} records and {findings} bisect findings added to {store}")
    return ExitCode.OK


def _ci_matrix(args: argparse.Namespace, call: _Call) -> int:
    loaded = call.load()
    reused = carry_reused(loaded, call.env, now=call.now, log=sys.stderr)
    jobs = ci_matrix(loaded, args.cells_per_shard, reused)
    # The report job checks the night against it: a planned cell without records is loud.
    write_plan(loaded.settings.out, loaded.settings.run_id, [c.label for c in loaded.selected])
    print(f"matrix={json.dumps(jobs)}")
    print(f"bisect={json.dumps(bisect_jobs(loaded, jobs))}")
    print(f"run-id={loaded.settings.run_id}")
    return ExitCode.OK


def _bisect(args: argparse.Namespace, call: _Call) -> int:
    pins = parse_pins(args.pins)
    settings = call.settings()
    request = BisectRequest(
        case=args.case,
        axis=args.axis,
        good=args.good,
        bad=args.bad,
        pins=pins,
        hardware=args.hardware,
        python=args.python,
    )
    print(bisect_once(request, settings, call.matrix(settings), call.env))
    return ExitCode.OK


def _autobisect(args: argparse.Namespace, call: _Call) -> int:
    settings = call.settings()
    matrix = call.matrix(settings)
    budget = matrix.bisect.budget if args.budget is None else args.budget
    autobisect(
        settings, matrix, call.env, budget=budget, hardware=args.hardware, dry_run=args.dry_run
    )
    return ExitCode.OK


def _known_issues(args: argparse.Namespace, call: _Call) -> int:
    at = call.settings()
    return run_known_issues(args, settings=at, matrix=call.matrix(at), env=call.env, now=call.now)


def _wheelhouse(args: argparse.Namespace, call: _Call) -> int:
    return run_wheelhouse(args, call.env, root=call.root, now=call.now)


HANDLERS: dict[str, Callable[[argparse.Namespace, _Call], int]] = {
    "check": lambda args, call: run_check(args, call.extra),
    "init": lambda args, call: run_init(args),
    "bisect": _bisect,
    "autobisect": _autobisect,
    "wheelhouse": _wheelhouse,
    "report": _report,
    "restore-history": _restore_history,
    "ci-matrix": _ci_matrix,
    "plan": _plan,
    "run": _run,
    "known-issues": _known_issues,
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ftmatrix",
        description="A compatibility matrix for the LLM fine-tuning stack.",
        epilog="The FTMATRIX_MATRIX, FTMATRIX_PROFILE, FTMATRIX_CASES and FTMATRIX_OUT "
        "environment variables choose the files; --matrix/--profile override them.",
    )
    parser.add_argument("--version", action="version", version=f"ftmatrix {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, text in (
        ("plan", "print the cells the matrix expands to"),
        ("run", "run the selected cells (through nox) and build the report"),
    ):
        command = sub.add_parser(name, help=text, description=text)
        _matrix_options(command)
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
    _matrix_options(auto)
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
    add_known_issues_parser(sub)
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
    _matrix_options(house)
    house.add_argument("--select", action="append", default=[], metavar="GLOB")
    report_parser = sub.add_parser("report", help="build the report from the records that exist")
    report_parser.add_argument("--out", help="reports folder (default: reports/)")
    restore_parser = sub.add_parser(
        "restore-history",
        help="add a published history.jsonl's records to reports/history.sqlite",
        description="Restore the history from its published copy (reports/site/history.jsonl, "
        "deployed with the report): the records and bisect findings the local history "
        "lacks are added; a record it has is kept as it is. At most 200 MB is read.",
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
        default="120",
        help="seconds for the whole download (default: 120)",
    )
    add_init_parser(sub)
    return parser


def _matrix_options(command: argparse.ArgumentParser) -> None:
    command.add_argument("--matrix", help="matrix file (default: matrix.yaml)")
    command.add_argument("--profile", help="profile to apply")


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
