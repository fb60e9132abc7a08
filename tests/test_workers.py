"""Cases sharing a cell's machine through pytest-xdist workers: the setting, the
arguments, and record files several processes write at once.

The real runs (workers that crash, hang and blow up) are in test_runner_e2e.py.
"""

from __future__ import annotations

import json
import multiprocessing
import threading
from pathlib import Path

import pytest
from conftest import make_record

from ftmatrix.cell.files import CellFiles
from ftmatrix.cell.record import Record
from ftmatrix.cell.records import CellRecordFile, read_records
from ftmatrix.cell_launch import cell_env, parallel_args, worker_count
from ftmatrix.config import ConfigError, Limits, parse_matrix
from ftmatrix.plan import Cell
from ftmatrix.resolve import with_test_runners
from ftmatrix.runner import memory_limit_bytes
from ftmatrix.sharing import cell_running, cells_at_once, one_install_at_a_time, torch_threads

pytest_plugins = ["pytester"]


def parse(text: str):
    return parse_matrix(text, source="m.yaml", profile=None, default_python="3.11")


def test_workers_default_to_one_and_take_a_count_or_auto():
    assert parse("packages: {six: ['1.17.0']}\n").limits.workers == 1
    assert parse("packages: {six: ['1.17.0']}\nlimits: {workers: 4}\n").limits.workers == 4
    assert parse("packages: {six: ['1.17.0']}\nlimits: {workers: auto}\n").limits == Limits(
        workers="auto"
    )


@pytest.mark.parametrize("value", ["0", "two", "true", "1.5"])
def test_a_bad_worker_count_names_its_key(value: str):
    with pytest.raises(ConfigError) as caught:
        parse(f"packages: {{six: ['1.17.0']}}\nlimits: {{memory-gib: 0, workers: {value}}}\n")
    shown = {"0": "0", "two": "'two'", "true": "True", "1.5": "1.5"}[value]
    assert caught.value.problems == (
        "m.yaml: limits.memory-gib: must be a number of GiB from 0.0625 (64 MiB) to 1,048,576, got 0",
        f"m.yaml: limits.workers: must be a whole number from 1 to 256 or 'auto' (one per CPU), "
        f"got {shown}",
    )


def test_one_worker_runs_as_before_and_more_bring_pytest_xdist():
    cell = Cell(python="3.11", pins=(("six", "1.17.0"),), hardware="cpu")
    assert with_test_runners(cell, Limits()) is cell
    assert parallel_args(1) == []
    shared = with_test_runners(cell, Limits(workers=2))
    assert shared.requirements() == ["six==1.17.0", "pytest-xdist"]
    assert parallel_args(3) == ["-n", "3", "--dist", "load", "--ftmatrix-parallel"]
    assert worker_count(Limits(workers=3)) == 3
    assert worker_count(Limits(workers="auto")) >= 1


def test_cells_run_one_per_cpu_by_default_and_take_a_count():
    assert parse("packages: {six: ['1.17.0']}\n").limits.cells == "auto"
    assert parse("packages: {six: ['1.17.0']}\nlimits: {cells: 3}\n").limits.cells == 3
    with pytest.raises(ConfigError) as caught:
        parse("packages: {six: ['1.17.0']}\nlimits: {cells: 0}\n")
    assert caught.value.problems == (
        "m.yaml: limits.cells: must be a whole number from 1 to 256 or 'auto' (one per CPU), got 0",
    )
    assert cells_at_once(Limits(), cells=4, cpus=2) == 2
    assert cells_at_once(Limits(), cells=1, cpus=8) == 1  # never more than the cells
    assert cells_at_once(Limits(cells=3), cells=10, cpus=2) == 3
    assert cells_at_once(Limits(cells=1), cells=10, cpus=8) == 1
    # Cells that lease GPUs wait for the lease: one at a time unless asked for more.
    assert cells_at_once(Limits(), cells=4, cpus=8, gpus=True) == 1
    assert cells_at_once(Limits(cells=2), cells=4, cpus=8, gpus=True) == 2


def test_processes_at_once_share_the_cpus_for_torch_threads_and_the_memory():
    assert torch_threads(1, cpus=2) is None  # one process: torch's own default, every core
    assert torch_threads(2, cpus=2) == 1
    assert torch_threads(2, cpus=8) == 4
    assert torch_threads(4, cpus=2) == 1
    assert cell_env({}, threads=2)["OMP_NUM_THREADS"] == "2"
    assert cell_env({"OMP_NUM_THREADS": "6"}, threads=2)["OMP_NUM_THREADS"] == "6"  # yours wins
    assert "OMP_NUM_THREADS" not in cell_env({})
    machine = {"memory_gib": 20}
    assert memory_limit_bytes(Limits(), machine) == 18 * 2**30
    assert memory_limit_bytes(Limits(), machine, cells_at_once=2) == 9 * 2**30
    assert memory_limit_bytes(Limits(memory_gib=4), machine, cells_at_once=2) == 4 * 2**30


def test_the_cell_that_ends_the_run_is_the_one_that_finds_no_other_running(tmp_path: Path):
    with cell_running(tmp_path) as first:
        with cell_running(tmp_path) as second:
            assert not second.last()  # the first still runs
        assert first.last()  # the second has ended: the first ends the run


def test_cells_side_by_side_resolve_and_install_one_at_a_time(tmp_path: Path):
    """The second waits (and says so) until the first is done: uv's cache then serves it
    what the first fetched, instead of both fetching the same wheels at once."""
    events: list[str] = []
    with one_install_at_a_time(tmp_path, lambda: events.append("never")):
        second = threading.Thread(
            target=lambda: _install_after(tmp_path, events), name="second cell"
        )
        second.start()
        second.join(timeout=0.5)
        assert second.is_alive()  # waiting for the first
        events.append("first done")
    second.join(timeout=10)
    assert events == ["waits", "first done", "second installs"]


def _install_after(folder: Path, events: list[str]) -> None:
    with one_install_at_a_time(folder, lambda: events.append("waits")):
        events.append("second installs")


def _add_records(path: str, worker: int, count: int) -> None:
    for i in range(count):
        CellRecordFile(Path(path)).add(_record(f"test_w{worker}.py::test_{i}"))


def _record(case: str) -> Record:
    return make_record(run_id="r", cell_id="c", case=case, operation="w")


def test_processes_adding_to_one_cell_file_at_once_lose_no_record(tmp_path: Path):
    path = tmp_path / "cell.jsonl"
    context = multiprocessing.get_context("spawn")
    writers = [context.Process(target=_add_records, args=(str(path), w, 40)) for w in range(4)]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(600)  # a correctness test: a loaded machine may be slow
        assert writer.exitcode == 0
    result = read_records(path)
    assert result.problems == ()
    assert sorted(r.case for r in result.records) == sorted(
        f"test_w{w}.py::test_{i}" for w in range(4) for i in range(40)
    )


SHARED_AND_EXCLUSIVE = """
import pytest

def test_shares():
    pass

@pytest.mark.exclusive("starts processes of its own")
def test_marked_exclusive():
    pass

@pytest.mark.requires_hardware(cuda=True)
def test_wants_a_gpu():
    pass
"""


@pytest.mark.parametrize("parallel", [False, True])
def test_the_shared_pass_leaves_the_exclusive_cases_to_run_alone(
    pytester: pytest.Pytester, tmp_path: Path, parallel: bool
):
    pytester.makepyfile(test_cases=SHARED_AND_EXCLUSIVE)
    cell = {"run_id": "r", "id": "c", "label": "l", "python": "3.11", "pins": {}, "hardware": "cpu"}
    (tmp_path / "cell.json").write_text(json.dumps(cell))
    out = tmp_path / "out.jsonl"
    pytester.runpytest_subprocess(
        "-p",
        "ftmatrix.cell.plugin",
        "--ftmatrix-cell",
        str(tmp_path / "cell.json"),
        "--ftmatrix-record",
        str(out),
        *(["--ftmatrix-parallel"] if parallel else []),
    )
    ran = {r.case.split("::")[1]: r.status.value for r in read_records(out).records}
    everything = ["test_shares", "test_marked_exclusive", "test_wants_a_gpu"]
    if parallel:
        # The exclusive case waits to run alone; the GPU case's gate answers on this
        # machine (no CUDA): recorded in the shared pass, with no process of its own.
        assert ran == {"test_shares": "pass", "test_wants_a_gpu": "skip"}
    else:
        assert ran == {
            "test_shares": "pass",
            "test_marked_exclusive": "pass",
            "test_wants_a_gpu": "skip",
        }
    # The supervisor learns every case either way: the left-out ones are still to run.
    listed = json.loads(CellFiles(out).collected.read_text())
    assert [case.split("::")[1] for case in listed] == everything
