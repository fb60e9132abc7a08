"""Cases that hurt what runs them, by other ways than killing their parent
(tests/test_unlucky_run.py): a case that stops the process watching it, an exception no
one can print, a hook of the cases that breaks pytest itself, a metric JSON cannot hold.
Each gets its own verdict and every case after it still runs, through nox and the CLI.

Slow tier: real venvs (six only, from uv's cache) and real subprocesses.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_unlucky_run import records_of, run

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
