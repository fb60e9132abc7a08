"""Cases that hurt what runs them, by other ways than killing their parent
(tests/test_unlucky_run.py): a case that stops the process watching it, an exception no
one can print, a hook of the cases that breaks pytest itself, a metric JSON cannot hold.
Each gets its own verdict and every case after it still runs, through nox and the CLI.

Slow tier: real venvs (six only, from uv's cache) and real subprocesses.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import records_of, run

from ftmatrix.runner import current_python

pytestmark = pytest.mark.slow

HURTFUL = """
import os
import signal


class Unprintable(Exception):
    def __str__(self):
        raise RuntimeError("no text")


class Unshowable:
    def __repr__(self):
        raise RuntimeError("no text")


def test_a_stops_its_parent():
    os.kill(os.getppid(), signal.SIGSTOP)


def test_b_raises_what_cannot_be_printed():
    raise Unprintable()


def test_c_breaks_pytest():
    pass


def test_d_records_a_loss_of_nan(record_property):
    record_property("loss", float("nan"))
    record_property("shown", Unshowable())


def test_e_exits_in_the_middle():
    os._exit(0)


def test_f_closes_what_it_did_not_open():
    os.closerange(3, 256)  # pytest's saved output descriptors (not the plugin's kept ones)


def test_g_healthy():
    print("shown")
"""

# A hook of the cases' own conftest that raises: pytest ends in an INTERNALERROR.
BREAKS_PYTEST = """
import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    yield
    if item.name == "test_c_breaks_pytest" and call.when == "call":
        raise RuntimeError("a hook of the cases broke pytest")
"""


@pytest.mark.parametrize("entry", ["cli", "nox"])
def test_every_case_after_a_hurtful_one_runs_and_gets_its_verdict(
    tmp_path: Path, entry: str
) -> None:
    cases = tmp_path / "cases"
    cases.mkdir()
    (cases / "test_hurtful.py").write_text(HURTFUL)
    (cases / "conftest.py").write_text(BREAKS_PYTEST)
    # A cell stuck behind its stopped keeper would end at its time limit, the cases
    # after that not run (recorded as timeouts).
    (tmp_path / "matrix.yaml").write_text(
        f'python: ["{current_python()}"]\n'
        'packages:\n  six: ["1.17.0"]\n'
        "timeouts: {case: 60, cell: 45}\n"
    )

    ran = run(entry, tmp_path, FTMATRIX_RUN_ID="20261127T000000Z")
    output = ran.stdout + ran.stderr
    assert ran.returncode == 0, output[-4000:]
    assert "Traceback" not in output.split("INTERNALERROR")[0]
    found = {r["case"].split("::")[-1]: r for r in records_of(tmp_path / "out")}
    assert {case: r["status"] for case, r in found.items()} == {
        "test_a_stops_its_parent": "pass",
        "test_b_raises_what_cannot_be_printed": "error",
        "test_c_breaks_pytest": "error",
        "test_d_records_a_loss_of_nan": "pass",
        "test_e_exits_in_the_middle": "crash",
        # Its pytest cannot show a case's output after it: the rest ran in a new one.
        "test_f_closes_what_it_did_not_open": "error",
        "test_g_healthy": "pass",
    }
    assert found["test_b_raises_what_cannot_be_printed"]["message"] == (
        "<test_hurtful.Unprintable: its str() raised RuntimeError>"
    )
    assert found["test_c_breaks_pytest"]["reason"] == (
        "the case ran in a process of its own and left no record"
    )
    assert "a hook of the cases broke pytest" in found["test_c_breaks_pytest"]["traceback"]
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    (shown,) = [r for r in results["records"] if r["case"].endswith("test_d_records_a_loss_of_nan")]
    assert shown["metrics"] == {
        "loss": "NaN",
        "shown": "<test_hurtful.Unshowable: its repr() raised RuntimeError>",
    }
    # pytest's output never went into the records file (a kept descriptor of the plugin,
    # opened again on the number pytest restores its output from, took it).
    assert results["unreadable_records"] == []


# Under pytest-xdist workers: cases that close every descriptor they did not open (the
# worker's channel to the controller among them), at once or while they stay busy, and one
# that closes only pytest's saved output (the channel kept: the worker would go on, and the
# cases queued behind it fail to show their output). Each is recorded `error`; its worker
# ends after the record, and pytest-xdist hands the cases queued behind it to a new worker.
CLOSES_IN_A_WORKER = """
import os
import signal
import time
from pathlib import Path

import pytest

RAN = Path(__file__).parent.parent / "ran.txt"


def ran(name):
    with RAN.open("a") as ran:
        ran.write(name + "\\n")


def test_a_closes_every_descriptor():
    ran("a")
    time.sleep(0.5)  # the other worker is busy too: cases wait behind this one
    os.closerange(3, 256)  # the daemon recipe


def test_b_closes_every_descriptor_and_stays_busy():
    ran("b")
    # Busy past the 5 s the controller waits for a worker whose channel closed (and deaf
    # to the SIGINT execnet then sends its own process, as a case in native code is).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.closerange(3, 256)
    time.sleep(7)


def test_c_closes_pytests_saved_output(request):
    ran("c")
    time.sleep(0.5)
    capturing = request.config.pluginmanager.get_plugin("capturemanager")._global_capturing
    for capture in (capturing.out, capturing.err):
        os.close(capture.targetfd_save)


@pytest.mark.parametrize("n", range(8))
def test_d_healthy(n):
    time.sleep(0.1)
    print("shown", n)


def test_e_fails(tmp_path):
    assert not tmp_path.exists()  # pytest made it: a failing check of something real
"""
CLOSERS = (
    "test_a_closes_every_descriptor",
    "test_b_closes_every_descriptor_and_stays_busy",
    "test_c_closes_pytests_saved_output",
)


def test_cases_after_one_that_closes_descriptors_in_a_worker_get_their_verdicts(
    tmp_path: Path,
) -> None:
    cases = tmp_path / "cases"
    cases.mkdir()
    (cases / "test_closer.py").write_text(CLOSES_IN_A_WORKER)
    (tmp_path / "matrix.yaml").write_text(
        f'python: ["{current_python()}"]\n'
        'packages:\n  six: ["1.17.0"]\n'
        "timeouts: {case: 60, cell: 120}\n"
        "limits: {workers: 2}\n"
    )

    ran = run("cli", tmp_path, FTMATRIX_RUN_ID="20261127T000000Z")
    output = ran.stdout + ran.stderr
    assert ran.returncode == 0, output[-4000:]
    lines = records_of(tmp_path / "out")
    found = {r["case"].split("::")[-1]: r for r in lines}
    assert len(lines) == len(found)  # one record a case
    assert {case: r["status"] for case, r in found.items()} == {
        **dict.fromkeys(CLOSERS, "error"),
        **{f"test_d_healthy[{n}]": "pass" for n in range(8)},
        "test_e_fails": "fail",
    }
    # Each closer's own record, not a crash the supervisor made of its worker's end.
    for closer in CLOSERS:
        assert found[closer]["message"] == "[Errno 9] Bad file descriptor"
        assert not found[closer].get("attempts")
    (log,) = (tmp_path / "out" / "records").rglob("*.log")
    shown = output + log.read_text()
    assert "created: 2/2 workers" in shown  # pytest-xdist ran the shared pass
    assert "trying it once more alone" not in shown
    (done,) = [line for line in ran.stdout.splitlines() if " cells done in " in line]
    assert done.endswith(" 12 cases: 1 fail, 8 pass, 3 error")  # no crash counted
    # Each closer ran once: its record came from its one run, not from a run again.
    assert sorted((tmp_path / "ran.txt").read_text().split()) == ["a", "b", "c"]


# A case that closes its worker's channel and dies later than the 5 s pytest-xdist's
# controller waits to note a worker's exit status: nobody notes it, and while the other
# cases kept pytest running, the case was taken for a timeout at the case time limit.
# Its worker is seen gone: a crash.
DIES_UNSEEN_IN_A_WORKER = """
import os
import signal
import time

import pytest


def test_a_closes_its_channel_then_dies():
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # deaf to execnet's SIGINT, as native code
    os.closerange(3, 256)
    time.sleep(7)
    os.kill(os.getpid(), signal.SIGKILL)


@pytest.mark.parametrize("n", range(60))
def test_b_healthy(n):
    time.sleep(0.5)  # pytest runs on past the first case's time limit
"""


def test_a_worker_that_dies_after_its_channel_closed_is_a_crash_not_a_timeout(
    tmp_path: Path,
) -> None:
    cases = tmp_path / "cases"
    cases.mkdir()
    (cases / "test_dies.py").write_text(DIES_UNSEEN_IN_A_WORKER)
    (tmp_path / "matrix.yaml").write_text(
        f'python: ["{current_python()}"]\n'
        'packages:\n  six: ["1.17.0"]\n'
        "timeouts: {case: 10, cell: 300}\n"
        "limits: {workers: 2}\n"
    )

    ran = run("cli", tmp_path, FTMATRIX_RUN_ID="20261127T000000Z")
    output = ran.stdout + ran.stderr
    found = {r["case"].split("::")[-1]: r for r in records_of(tmp_path / "out")}
    assert {case: r["status"] for case, r in found.items()} == {
        "test_a_closes_its_channel_then_dies": "crash",
        **{f"test_b_healthy[{n}]": "pass" for n in range(60)},
    }, output[-4000:]
    died = found["test_a_closes_its_channel_then_dies"]
    assert died["attempts"][0]["reason"] == (
        "the process died during the case: its pytest-xdist worker ended, its exit status unknown"
    )
    assert "timeout" not in json.dumps(died), died


STOPS_THE_SUPERVISOR = """
import os
import signal


def parent_of(pid):
    with open(f"/proc/{pid}/stat") as stat:
        return int(stat.read().rsplit(")", 1)[1].split()[1])


def test_a_stops_the_supervisor():
    os.kill(parent_of(os.getppid()), signal.SIGSTOP)  # the keeper's parent


def test_b_after():
    pass
"""


def test_a_case_that_stops_the_supervisor_does_not_stop_the_run(tmp_path: Path) -> None:
    """The supervisor (its pytest's keeper's parent), stopped, would never see its pytest
    end: the run waited for ever. The keeper continues it."""
    (tmp_path / "cases").mkdir()
    (tmp_path / "cases" / "test_stop.py").write_text(STOPS_THE_SUPERVISOR)
    (tmp_path / "matrix.yaml").write_text(
        f'python: ["{current_python()}"]\npackages:\n  six: ["1.17.0"]\n'
        "limits: {workers: 1}\n"  # the case's parent is the keeper, not a worker's controller
    )
    env = {
        **os.environ,
        "FTMATRIX_MATRIX": str(tmp_path / "matrix.yaml"),
        "FTMATRIX_CASES": str(tmp_path / "cases"),
        "FTMATRIX_OUT": str(tmp_path / "out"),
        "FTMATRIX_RUN_ID": "20261127T090000Z",
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "ftmatrix", "run"],
        env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, start_new_session=True,
    )  # fmt: skip
    try:
        output, _ = process.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        for signal_number in (signal.SIGCONT, signal.SIGKILL):
            os.killpg(process.pid, signal_number)
        process.communicate()
        pytest.fail("the run stayed stopped with its supervisor")
    assert process.returncode == 0, output[-4000:]
    found = {r["case"].split("::")[-1]: r["status"] for r in records_of(tmp_path / "out")}
    assert found == {"test_a_stops_the_supervisor": "pass", "test_b_after": "pass"}
