"""Which case started a process the cases left running (the supervisor's attribution)."""

from __future__ import annotations

from ftmatrix.supervise import Leftover, starter_of

STARTS = [("test_a.py::first", 100.0), ("test_a.py::second", 105.2), ("test_b.py::last", 160.0)]


def test_a_leftover_belongs_to_the_last_case_started_before_it() -> None:
    assert starter_of(Leftover(pid=1, name="sleep", started=103.5), STARTS) == "test_a.py::first"
    assert starter_of(Leftover(pid=2, name="sleep", started=105.3), STARTS) == "test_a.py::second"
    assert starter_of(Leftover(pid=3, name="sleep", started=900.0), STARTS) == "test_b.py::last"


def test_a_process_older_than_every_case_has_no_starter() -> None:
    leftover = Leftover(pid=1, name="server", started=99.0)
    assert starter_of(leftover, STARTS) is None
    assert str(leftover) == "1 (server)"
