"""Adding records is linear: what a cell's records cost, from 250 to 4,000 cases.

Two figures side by side (printed, never asserted):

- writing N records to a cell's file (``CellRecordFile.add``, as the plugin does), with
  the time per record: linear writing keeps that column flat;
- a cell of N trivial cases: its cases stage as the runner runs it (the supervisor, the
  results plugin, the records, and the run's progress as ``nox -s matrix`` prints it in a
  log: a line a case; ``--no-progress`` leaves it out; a real venv of six made by
  ``python -m ftmatrix run``)
  against the same cases run by plain ``pytest -q`` in the same venv (the cases' own
  time), in wall seconds and in CPU seconds (on a shared machine the CPU ratio is the
  steadier); and, beside it, against the very pytest command the cell runs without
  ftmatrix's plugin (its options: the log's verbosity, ``-ra``), which tells what
  ftmatrix adds from what pytest's options cost. Each size is measured ``--repeat``
  times, the three sides in turn: the times shown are medians, each ratio the median of
  the ratios within a repeat.
  Both sides keep their bytecode as the runner has a cell's processes keep it
  (``PYTHONPYCACHEPREFIX``), warmed first; ``--no-bytecode`` runs them with the caller's
  settings instead (with ``PYTHONDONTWRITEBYTECODE`` set, both sides compile pytest anew
  each time: a constant that makes the ratio look smaller than a cell's).

    python benchmarks/bench_records.py [--json out.json] [--sizes 250,1000,2000] [--repeat 3]
        [--no-bytecode] [--no-progress]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from ftmatrix.case_ends import CaseLimits  # noqa: E402
from ftmatrix.cell.record import Record  # noqa: E402
from ftmatrix.cell.records import CellRecordFile  # noqa: E402 -- after the path above
from ftmatrix.cell.status import Status  # noqa: E402
from ftmatrix.cell_launch import cell_env, pytest_command  # noqa: E402
from ftmatrix.config import HardwareClass, InstallOptions  # noqa: E402
from ftmatrix.progress import Progress  # noqa: E402
from ftmatrix.progress_feed import FeedTail, FeedWriter, Tally  # noqa: E402
from ftmatrix.runner import CellContext  # noqa: E402
from ftmatrix.supervise import run_cases  # noqa: E402

CASES = """
import pytest


@pytest.mark.parametrize("number", range({count}))
def test_trivial(number):
    assert number >= 0
"""


def record(case: str) -> Record:
    return Record(
        run_id="20261127T000000Z",
        cell_id="abc123def456",
        cell_label="cpu-py3.11-six1.17.0",
        python="3.11",
        pins={"six": "1.17.0"},
        hardware_class="cpu",
        case=case,
        operation="trivial",
        status=Status.PASS,
        started_at="2026-11-27T00:00:00+00:00",
        finished_at="2026-11-27T00:00:00+00:00",
        packages={f"package{i}": "1.0" for i in range(40)},
    )


def writing(count: int, folder: Path) -> float:
    """Seconds to add ``count`` records to a new cell file."""
    file = CellRecordFile(folder / f"{count}.jsonl")
    started = time.perf_counter()
    for number in range(count):
        file.add(record(f"test_many.py::test_trivial[{number}]"))
    return time.perf_counter() - started


def venv(folder: Path) -> tuple[Path, Path]:
    """A real cell's venv (six), made by ``python -m ftmatrix run``: its python and the
    cell's file for the plugin."""
    (folder / "cases").mkdir(parents=True, exist_ok=True)
    (folder / "cases" / "test_many.py").write_text(CASES.format(count=1))
    (folder / "matrix.yaml").write_text('packages:\n  six: ["1.17.0"]\nlimits: {workers: 1}\n')
    env = {
        **os.environ,
        "FTMATRIX_MATRIX": str(folder / "matrix.yaml"),
        "FTMATRIX_CASES": str(folder / "cases"),
        "FTMATRIX_OUT": str(folder / "out"),
    }
    subprocess.run(
        [sys.executable, "-m", "ftmatrix", "run"],
        env=env,
        cwd=folder,
        capture_output=True,
        check=True,
    )
    (python,) = (folder / ".nox").glob("*/bin/python")
    (cell_file,) = (folder / "out" / "records").rglob("*.cell.json")
    return python, cell_file


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def shown(folder: Path) -> tuple[Progress, FeedTail]:
    """The run's progress as ``nox -s matrix`` shows it in a log (CI's, no terminal): the
    cell tells a feed of each case, nox's tail prints a line for each, and the cell's
    output goes to its log file."""
    feed = folder / "progress.jsonl"
    feed.write_bytes(b"")
    # Printed into a file, as nox's output goes to a pipe or a file in CI: each flush a write.
    console = (folder / "console.log").open("w")
    tail = FeedTail(
        feed, Tally(total=1, started=time.monotonic()), console, lines=True, report=None
    )
    tail.start()
    progress = Progress(1, console, live=False, feed=FeedWriter(feed, printed=True))
    progress.log_to(folder / "cell.log")
    progress.cell_started("cpu-py3.11-six1.17.0")
    return progress, tail


def cell(
    count: int,
    folder: Path,
    python: Path,
    cell_file: Path,
    bytecode: Path | None,
    *,
    progress: bool = True,
) -> dict[str, float]:
    """The cases stage of a cell of ``count`` trivial cases, as the runner runs it (the
    supervisor, the plugin, the records, and with ``progress`` the run's progress lines as
    nox prints them), against the same cases in plain pytest in the same venv: wall seconds
    and CPU seconds (this process and its children) of each. ``bytecode``: where both keep
    their bytecode (None: as the caller's environment says)."""
    (folder / "cases" / "test_many.py").write_text(CASES.format(count=count))
    shutil.rmtree(folder / "bench-out", ignore_errors=True)  # a size measured again starts anew
    ctx = CellContext(
        run_id="20261127T000000Z",
        out_dir=folder / "bench-out",
        cases_dir=folder / "cases",
        case_selection=(),
        install=InstallOptions(),
        hardware_class=HardwareClass(name="cpu", runs_on=()),
        env=dict(os.environ),
    )
    records = folder / "bench-out" / f"{count}.jsonl"
    command, targets = pytest_command(python, cell_file, records, ctx)
    (folder / "bench-out").mkdir(parents=True)
    started, cpu = time.perf_counter(), time.process_time() + children_cpu()
    with contextlib.redirect_stdout(io.StringIO()):
        watching = shown(folder / "bench-out") if progress else None
        run_cases(
            command,
            targets,
            record_file=records,
            cases_dir=ctx.cases_dir.resolve(),
            env=cell_env(ctx.env, bytecode=bytecode),
            limits=CaseLimits(case_seconds=60, cell_seconds=3600, memory_bytes=None),
            make_record=lambda **fields: record(fields["case"]),
            log=lambda line: None,
            cwd=folder,
            progress=watching[0] if watching else None,
        )
        if watching:
            watching[0].cell_finished()
            watching[0].close()
            watching[1].stop()
    stage = time.perf_counter() - started
    stage_cpu = time.process_time() + children_cpu() - cpu
    started, cpu = time.perf_counter(), children_cpu()
    plain(python, folder, bytecode)
    own, own_cpu = time.perf_counter() - started, children_cpu() - cpu
    cpu = children_cpu()
    subprocess.run(
        [*without_the_plugin(command), *targets], cwd=folder, capture_output=True, check=True,
        env=cell_env(dict(os.environ), bytecode=bytecode) if bytecode else None,
    )  # fmt: skip
    return {
        "stage_s": stage,
        "stage_cpu_s": stage_cpu,
        "own_s": own,
        "own_cpu_s": own_cpu,
        "options_cpu_s": children_cpu() - cpu,
    }


def without_the_plugin(command: list[str]) -> list[str]:
    """The cell's pytest command without ftmatrix's plugin and its two options."""
    left, skip = [], 0
    for at, arg in enumerate(command):
        if skip:
            skip -= 1
        elif arg in ("--ftmatrix-cell", "--ftmatrix-record") or command[at : at + 2] == [
            "-p",
            "ftmatrix.cell.plugin",
        ]:
            skip = 1  # the option and its value
        else:
            left.append(arg)
    return left


def plain(python: Path, folder: Path, bytecode: Path | None) -> None:
    """The cell's cases in plain pytest, in the environment the cell's pytest has."""
    subprocess.run(
        [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", str(folder / "cases")],
        cwd=folder, capture_output=True, check=True,
        env=cell_env(dict(os.environ), bytecode=bytecode) if bytecode else None,
    )  # fmt: skip


def paired(runs: list[dict[str, float]], side: str, base: str) -> float:
    """The median of ``side / base`` over the runs, each taken within one run."""
    return round(statistics.median(r[side] / r[base] for r in runs), 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--sizes", default="250,1000,2000")
    parser.add_argument("--repeat", type=int, default=5, help="runs of each size (medians)")
    parser.add_argument(
        "--bytecode",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="keep both sides' bytecode as the runner does (default)",
    )
    parser.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="show the run's progress as nox does in a log (default); --no-progress: the "
        "records alone",
    )
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    rows = []
    print(
        f"{'records':>8} {'write s':>8} {'ms/rec':>7} {'stage s':>8} {'own s':>6} {'wall x':>7}"
        f" {'stage cpu':>9} {'own cpu':>8} {'cpu x':>6} {'opts cpu':>8} {'opts x':>6}"
    )
    with tempfile.TemporaryDirectory(prefix="bench-records-") as scratch:
        python, cell_file = venv(Path(scratch) / "cell")
        bytecode = Path(scratch) / "bytecode" if args.bytecode else None
        plain(python, Path(scratch) / "cell", bytecode)  # the bytecode written, not timed
        scratch_cell = Path(scratch) / "cell"
        for count in sizes:
            write = writing(count, Path(scratch))
            runs = [
                cell(count, scratch_cell, python, cell_file, bytecode, progress=args.progress)
                for _ in range(args.repeat)
            ]
            run = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
            row = {
                "records": count,
                "write_s": round(write, 3),
                "ms_per_record": round(1000 * write / count, 3),
                **{k: round(v, 2) for k, v in run.items()},
                # Each ratio of sides measured back to back, then their median: on a
                # shared machine the load drifts between repeats more than within one.
                "wall_ratio": paired(runs, "stage_s", "own_s"),
                "cpu_ratio": paired(runs, "stage_cpu_s", "own_cpu_s"),
                "options_ratio": paired(runs, "stage_cpu_s", "options_cpu_s"),
            }
            rows.append(row)
            print(
                f"{count:>8} {write:>8.2f} {row['ms_per_record']:>7.3f} {run['stage_s']:>8.1f}"
                f" {run['own_s']:>6.1f} {row['wall_ratio']:>7.2f} {run['stage_cpu_s']:>9.1f}"
                f" {run['own_cpu_s']:>8.1f} {row['cpu_ratio']:>6.2f}"
                f" {run['options_cpu_s']:>8.1f} {row['options_ratio']:>6.2f}"
            )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
