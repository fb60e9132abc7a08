"""The runner against cases that misbehave on purpose, through real nox, uv and pytest.

Slow tier. The fixture cases live in tests/data/misbehaving_cases, apart from
cases/, so the product's matrix never shows them.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ftmatrix.case_verdicts import RUN_ENDED_REASON

ROOT = Path(__file__).parent.parent
DATA = Path(__file__).parent / "data"
RUN_ID = "20261122T010000Z"

pytestmark = pytest.mark.slow


def environment(tmp_path: Path, **extra: str) -> dict[str, str]:
    state = tmp_path / "state"
    state.mkdir(exist_ok=True)
    return {
        **os.environ,
        "FTMATRIX_MATRIX": str(DATA / "misbehaving_matrix.yaml"),
        "FTMATRIX_CASES": str(DATA / "misbehaving_cases"),
        "FTMATRIX_OUT": str(tmp_path / "out"),
        "FTMATRIX_RUN_ID": RUN_ID,
        "FTMATRIX_TEST_STATE": str(state),
        **extra,
    }


def nox_command(tmp_path: Path, *args: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "nox",
        "-f",
        str(ROOT / "noxfile.py"),
        "--envdir",
        str(tmp_path / "envs"),
        *args,
    ]


def records(tmp_path: Path) -> dict[str, dict]:
    found = {}
    for path in (tmp_path / "out" / "records").rglob("*.jsonl"):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            found[record["case"].split("::")[-1]] = record
    return found


EXPECTED = {
    "test_import_error.py": "error",
    "test_a_first_healthy_case": "pass",
    "test_b_segfault": "crash",
    "test_c_abort": "crash",
    "test_d_infinite_loop": "timeout",
    "test_e_allocation_blow_up": "oom",
    "test_f_crashes_once_then_passes": "crash",
    "test_g_slow_but_in_time": "pass",
    "test_h_last_healthy_case": "pass",
    "test_i_fails_in_process": "fail",
    "test_i_fails_isolated": "fail",
    "test_j_segfaults_isolated": "crash",
    "test_k_leaves_state_behind": "pass",
    "test_l_finds_nothing_left_behind": "pass",
}
# What an isolated case's record must share with the same case's in-process one.
SAME_WHEN_ISOLATED = (
    "status",
    "operation",
    "exception_type",
    "message",
    "framework_frame",
    "signature",
    "metrics",
    "flaky",
)


def assert_isolated_cases_read_as_in_process(found: dict[str, dict]) -> None:
    """tests/data/misbehaving_cases/test_isolation.py: each isolated case against its twin."""
    for isolated, in_process in [
        ("test_i_fails_isolated", "test_i_fails_in_process"),
        ("test_j_segfaults_isolated", "test_b_segfault"),
    ]:
        for field in SAME_WHEN_ISOLATED:
            assert found[isolated][field] == found[in_process][field], (isolated, field)
    failed = found["test_i_fails_isolated"]
    assert failed["exception_type"] == "packaging.version.InvalidVersion"
    assert failed["framework_frame"].startswith("packaging/version.py:")
    assert failed["metrics"] == {"loss": 0.25}
    assert "Invalid version" in failed["traceback"]
    assert 0 < failed["duration"] < 30
    crashed = found["test_j_segfaults_isolated"]
    assert [a["message"] for a in crashed["attempts"]] == [
        "the process died during the case: signal SIGSEGV"
    ] * 2
    assert "Fatal Python error: Segmentation fault" in crashed["traceback"]


def test_every_bad_case_gets_its_status_and_no_other_record_is_lost(tmp_path: Path):
    ran = subprocess.run(
        nox_command(tmp_path, "-s", "matrix"),
        env=environment(tmp_path),
        capture_output=True,
        text=True,
        check=False,
    )
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    found = records(tmp_path)
    assert {case: r["status"] for case, r in found.items()} == EXPECTED

    segfault = found["test_b_segfault"]
    assert segfault["message"] == "the process died during the case: signal SIGSEGV"
    assert [a["status"] for a in segfault["attempts"]] == ["crash", "crash"]
    assert segfault["flaky"] is False
    assert "Fatal Python error: Segmentation fault" in segfault["traceback"]
    assert segfault["operation"] == "segfault"

    flaky = found["test_f_crashes_once_then_passes"]
    assert flaky["flaky"] is True
    assert [a["status"] for a in flaky["attempts"]] == ["crash", "pass"]

    assert found["test_d_infinite_loop"]["message"] == "the case ran past its 4 s limit"
    assert found["test_e_allocation_blow_up"]["message"] == (
        "the case's processes used more than 0.5 GiB"
    )
    assert found["test_import_error.py"]["exception_type"] == "CollectionError"
    assert "a_module_that_does_not_exist" in found["test_import_error.py"]["traceback"]
    assert_isolated_cases_read_as_in_process(found)


@pytest.mark.parametrize("workers", [1, 2])
def test_kill_9_mid_run_then_resume_loses_nothing(tmp_path: Path, workers: int):
    matrix = {"FTMATRIX_MATRIX": str(matrix_with_workers(tmp_path, workers))}
    kill_under_the_slow_case(tmp_path, environment(tmp_path, **matrix))
    before = records(tmp_path)
    assert "test_g_slow_but_in_time" not in before
    assert before["test_a_first_healthy_case"]["status"] == "pass"
    # The report names the cell it stopped in and the case each worker was running.
    stopped = subprocess.run(
        [sys.executable, "-m", "ftmatrix", "report"],
        env=environment(tmp_path, **matrix), capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert stopped.returncode == 1, stopped.stderr
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    (cell,) = results["unfinished_cells"]
    running = [case.split("::")[-1] for case in cell["running"]]
    assert "test_g_slow_but_in_time" in running and len(running) <= workers
    assert not set(running) & set(before)
    assert cell["without_record"] >= len(running)

    resumed = subprocess.run(
        nox_command(tmp_path, "-s", "matrix"),
        env={**environment(tmp_path, **matrix), "FTMATRIX_RESUME": "1"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    after = records(tmp_path)
    assert {case: r["status"] for case, r in after.items()} == EXPECTED
    for case, record in before.items():  # finished cases were kept, not run again
        assert after[case]["finished_at"] == record["finished_at"], case

    again = subprocess.run(
        nox_command(tmp_path, "-s", "matrix"),
        env={**environment(tmp_path, **matrix), "FTMATRIX_RESUME": "1"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert "nothing to resume" in again.stderr


def kill_under_the_slow_case(tmp_path: Path, env: dict[str, str]) -> None:
    """Run the matrix and kill the whole runner while test_g_slow_but_in_time runs, as a
    lost machine would (or a case that kills the supervisor or the run's group)."""
    earlier = set(running_notes(tmp_path))  # an ended run's note, until its resume reads it
    nox = subprocess.Popen(
        nox_command(tmp_path, "-s", "matrix"),
        env={**env, "FTMATRIX_TEST_SLOW_SECONDS": "60"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if any("test_g_slow" in note for note in set(running_notes(tmp_path)) - earlier):
            break
        time.sleep(0.2)
    else:
        nox.kill()
        pytest.fail("the slow case never started")
    os.killpg(nox.pid, signal.SIGKILL)
    nox.wait()
    time.sleep(1)


def test_a_case_the_run_ended_under_twice_is_a_crash_and_the_rest_runs(tmp_path: Path):
    """A case that ends the run (a signal to the supervisor, its pytest's grandparent, or to
    the run's process group) ended every resume the same way: each ran it again. Here the
    run is ended under the same case twice, from outside as such a case ends it; the first
    resume runs it again (it may have been innocent), the second records it a crash and
    runs every other case."""
    env = environment(tmp_path, FTMATRIX_MATRIX=str(matrix_with_workers(tmp_path, 1)))
    kill_under_the_slow_case(tmp_path, env)
    kill_under_the_slow_case(tmp_path, {**env, "FTMATRIX_RESUME": "1"})
    resumed = subprocess.run(
        nox_command(tmp_path, "-s", "matrix"),
        env={**env, "FTMATRIX_RESUME": "1"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    found = records(tmp_path)
    assert {case: r["status"] for case, r in found.items()} == {
        **EXPECTED,
        "test_g_slow_but_in_time": "crash",
    }
    assert found["test_g_slow_but_in_time"]["message"] == RUN_ENDED_REASON
    assert not list((tmp_path / "out").rglob("*.left-running"))  # the cell is done with it


def running_notes(tmp_path: Path) -> list[str]:
    """The running-case notes of the cell: one, or one per pytest-xdist worker."""
    notes = []
    for path in (tmp_path / "out").rglob("*.jsonl.current*"):
        with contextlib.suppress(OSError):  # a case just ended and took its note away
            notes.append(path.read_text())
    return notes


def test_cell_time_limit_records_the_cases_it_never_reached(tmp_path: Path):
    matrix = tmp_path / "m.yaml"
    matrix.write_text("packages:\n  six: ['1.17.0']\ntimeouts: {case: 60, cell: 6}\n")
    env = environment(tmp_path, FTMATRIX_MATRIX=str(matrix), FTMATRIX_TEST_SLOW_SECONDS="30")
    ran = subprocess.run(
        nox_command(
            tmp_path,
            "-s",
            "matrix",
            "--",
            "test_misbehave.py::test_a_first_healthy_case",
            "test_misbehave.py::test_g_slow_but_in_time",
            "test_misbehave.py::test_h_last_healthy_case",
        ),
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    found = records(tmp_path)
    assert {c: r["status"] for c, r in found.items()} == {
        "test_a_first_healthy_case": "pass",
        "test_g_slow_but_in_time": "timeout",
        "test_h_last_healthy_case": "timeout",
    }
    assert found["test_g_slow_but_in_time"]["message"] == "the cell ran past its 6 s limit"
    assert found["test_h_last_healthy_case"]["message"] == (
        "not run: the cell ran past its 6 s limit first"
    )


def test_a_pin_missing_from_the_index_is_uninstallable(tmp_path: Path):
    matrix = tmp_path / "m.yaml"
    matrix.write_text("packages:\n  six: ['9.9.9']\n")
    ran = subprocess.run(
        nox_command(tmp_path, "-s", "matrix"),
        env=environment(tmp_path, FTMATRIX_MATRIX=str(matrix)),
        capture_output=True,
        text=True,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    (record,) = records(tmp_path).values()
    assert record["status"] == "uninstallable"
    assert "there is no version of six==9.9.9" in record["reason"]


# Within a cell, pytest-xdist workers share the machine (limits.workers).


def matrix_with_workers(tmp_path: Path, workers: int, case_seconds: int = 4) -> Path:
    matrix = tmp_path / "workers.yaml"
    matrix.write_text(
        "packages:\n  six: ['1.17.0']\n"
        f"timeouts: {{case: {case_seconds}, cell: 300}}\n"
        f"limits: {{memory-gib: 0.5, workers: {workers}}}\n"
    )
    return matrix


def record_lines(tmp_path: Path) -> list[dict]:
    (path,) = (tmp_path / "out" / "records").rglob("*.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_two_workers_give_every_bad_case_the_status_one_process_gives(tmp_path: Path):
    env = environment(tmp_path, FTMATRIX_MATRIX=str(matrix_with_workers(tmp_path, 2)))
    ran = subprocess.run(
        nox_command(tmp_path, "-s", "matrix"), env=env, capture_output=True, text=True, check=False
    )
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    (log,) = (tmp_path / "out" / "records").rglob("*.log")  # the cell's pytest output
    text = log.read_text()
    assert "created: 2/2 workers" in text  # pytest-xdist ran the shared pass
    # Every pass's verdict in the log, as with one process: pytest-xdist's controller lists them.
    passes = [line for line in text.splitlines() if line.startswith("PASSED ")]
    assert any(line.endswith("::test_a_first_healthy_case") for line in passes), text[-3000:]
    lines = record_lines(tmp_path)
    assert len(lines) == len({r["case"] for r in lines}) == len(EXPECTED)  # one record a case
    found = records(tmp_path)
    assert {case: r["status"] for case, r in found.items()} == EXPECTED
    assert "pytest-xdist" in found["test_a_first_healthy_case"]["packages"]

    segfault = found["test_b_segfault"]
    assert segfault["message"] == "the process died during the case: signal SIGSEGV"
    assert [a["status"] for a in segfault["attempts"]] == ["crash", "crash"]
    assert "Fatal Python error: Segmentation fault" in segfault["traceback"]
    abort = found["test_c_abort"]
    assert [a["message"] for a in abort["attempts"]] == [
        "the process died during the case: signal SIGABRT"
    ] * 2
    flaky = found["test_f_crashes_once_then_passes"]
    assert flaky["flaky"] is True
    assert [a["status"] for a in flaky["attempts"]] == ["crash", "pass"]
    assert flaky["attempts"][0]["message"] == "the process died during the case: signal SIGABRT"
    assert found["test_d_infinite_loop"]["message"] == "the case ran past its 4 s limit"
    assert found["test_e_allocation_blow_up"]["message"] == (
        "the case's processes used more than 0.5 GiB"
    )
    assert found["test_import_error.py"]["exception_type"] == "CollectionError"
    assert_isolated_cases_read_as_in_process(found)
    # Progress: each case counted once, though several ran at once (the flaky case's
    # line shows its second try, as with one process).
    (done,) = [line for line in ran.stdout.splitlines() if " cells done in " in line]
    assert done.endswith(" 14 cases: 2 fail, 6 pass, 3 crash, 1 timeout, 1 oom, 1 error")


def test_two_workers_run_at_once_and_an_exclusive_case_runs_alone(tmp_path: Path):
    env = environment(
        tmp_path, FTMATRIX_MATRIX=str(matrix_with_workers(tmp_path, 2, case_seconds=6))
    )
    ran = subprocess.run(
        nox_command(tmp_path, "-s", "matrix", "--", "parallel_proof.py"),
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    found = records(tmp_path)
    assert {case: (r["status"], r["message"]) for case, r in found.items()} == {
        "test_p_meets_q": ("pass", None),
        "test_q_meets_p_then_lingers": ("pass", None),
        "test_t_hangs": ("timeout", "the case ran past its 6 s limit"),
        "test_u_outlives_the_hang": ("pass", None),
        "test_s_runs_alone": ("pass", None),
    }
    # Killing the hung case's worker left the case running on the other one alone.
    starts = (tmp_path / "state" / "starts-u").read_text().splitlines()
    assert starts == ["started"]
    assert len(record_lines(tmp_path)) == 5


# GPU leases and working directories: what a cell's case processes receive.

FAKE_NVIDIA_SMI = """#!/bin/sh
# Stands in for the driver's tool: four GPUs, none of them there.
for gpu in 0 1 2 3; do echo "NVIDIA H100 80GB HBM3, 81559, 550.54.15, 9.0"; done
"""


def test_a_case_process_sees_one_gpu_its_children_the_lease_and_a_folder_of_its_own(
    tmp_path: Path,
):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(FAKE_NVIDIA_SMI)
    (bin_dir / "nvidia-smi").chmod(0o755)
    env = environment(
        tmp_path,
        FTMATRIX_MATRIX=str(DATA / "lease_matrix.yaml"),
        FTMATRIX_CASES=str(DATA / "lease_cases"),
        FTMATRIX_LEASE_DIR=str(tmp_path / "leases"),
        CUDA_VISIBLE_DEVICES="2,3",  # the runner's own share of the machine's four
        PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
    )
    ran = subprocess.run(
        nox_command(tmp_path, "-s", "matrix"),
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    found = {(r["hardware_class"], r["case"].split("::")[-1]): r for r in record_list(tmp_path)}
    assert {key: r["status"] for key, r in found.items()} == {
        ("cpu", "test_in_process"): "pass",
        ("cpu", "test_two_gpus"): "skip",
        ("cpu", "test_three_gpus"): "skip",
        ("gpu2", "test_in_process"): "pass",
        ("gpu2", "test_two_gpus"): "pass",
        ("gpu2", "test_three_gpus"): "skip",
    }
    assert found["gpu2", "test_three_gpus"]["reason"] == (
        "needs 3 CUDA GPUs; the cell leased 2 CUDA GPUs (FTMATRIX_GPU_LEASE)"
    )
    assert found["cpu", "test_two_gpus"]["reason"] == (
        "needs 2 CUDA GPUs; this machine has no CUDA GPU"
    )
    state = tmp_path / "state"
    seen = {p.stem: json.loads(p.read_text()) for p in state.glob("*.json")}
    gpu_case, cpu_case = seen["2,3-in-process"], seen["no-lease-in-process"]
    # The case's own process: one GPU (transformers' Trainer would wrap two in
    # DataParallel); the lease named; what a gpus=2 case starts sees the whole lease.
    assert (gpu_case["CUDA_VISIBLE_DEVICES"], gpu_case["FTMATRIX_GPU_LEASE"]) == ("2", "2,3")
    assert seen["2,3-two-gpus-child"]["CUDA_VISIBLE_DEVICES"] == "2,3"
    assert (cpu_case["CUDA_VISIBLE_DEVICES"], cpu_case["FTMATRIX_GPU_LEASE"]) == ("", "")
    assert found["gpu2", "test_in_process"]["hardware"]["gpu_lease"] == "2,3"
    # Each cell ran in a working directory of its own, under the run's out folder.
    work = tmp_path / "out" / "work" / RUN_ID
    assert Path(gpu_case["cwd"]) == work / found["gpu2", "test_in_process"]["cell_id"]
    assert Path(cpu_case["cwd"]) == work / found["cpu", "test_in_process"]["cell_id"]
    assert not gpu_case["found_a_file_left_behind"]
    assert not cpu_case["found_a_file_left_behind"]
    assert not (tmp_path / "left-behind-by-a-case.txt").exists()
    assert not (ROOT / "left-behind-by-a-case.txt").exists()


def record_list(tmp_path: Path) -> list[dict]:
    return [
        json.loads(line)
        for path in (tmp_path / "out" / "records").rglob("*.jsonl")
        for line in path.read_text().splitlines()
    ]
