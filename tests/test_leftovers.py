"""Which case started a process the cases left running (the supervisor's attribution)."""

from __future__ import annotations

import os
import subprocess

from ftmatrix.cell.records import RUNNING_CASE_VARIABLE
from ftmatrix.process_tree import Leftover, running_case_of, starter_of

STARTS = [("test_a.py::first", 100.0), ("test_a.py::second", 105.2), ("test_b.py::last", 160.0)]


def test_a_leftover_belongs_to_the_last_case_started_before_it() -> None:
    assert starter_of(Leftover(pid=1, name="sleep", started=103.5), STARTS) == "test_a.py::first"
    assert starter_of(Leftover(pid=2, name="sleep", started=105.3), STARTS) == "test_a.py::second"
    assert starter_of(Leftover(pid=3, name="sleep", started=900.0), STARTS) == "test_b.py::last"


def test_a_process_older_than_every_case_has_no_starter() -> None:
    leftover = Leftover(pid=1, name="server", started=99.0)
    assert starter_of(leftover, STARTS) is None
    assert str(leftover) == "1 (server)"


def test_the_case_a_process_inherited_names_its_starter_whatever_the_clock_says() -> None:
    """Start times are 10 ms coarse: a double fork at the end of one case was put on the
    next case's record (seen in CI). The running case's id it inherited decides."""
    late = Leftover(pid=4, name="sleep", started=105.25, case="test_a.py::first")
    assert starter_of(late, STARTS) == "test_a.py::first"
    # An id no case of this pytest has (a stale environment) falls back to the clock.
    stale = Leftover(pid=5, name="sleep", started=105.25, case="test_gone.py::old")
    assert starter_of(stale, STARTS) == "test_a.py::second"


def test_a_process_inherits_the_running_case_and_the_supervisor_reads_it() -> None:
    env = {**os.environ, RUNNING_CASE_VARIABLE: "test_a.py::first[x]"}
    child = subprocess.Popen(["sleep", "30"], env=env)
    plain = subprocess.Popen(["sleep", "30"], env={"PATH": os.environ["PATH"]})
    try:
        assert running_case_of(child.pid) == "test_a.py::first[x]"
        assert running_case_of(plain.pid) is None
    finally:
        for process in (child, plain):
            process.kill()
            process.wait()
    assert running_case_of(child.pid) is None  # gone: nothing to read
