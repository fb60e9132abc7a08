"""The progress line: live on a terminal, plain lines in logs."""

from __future__ import annotations

import io

from ftmatrix.cell.status import Status
from ftmatrix.progress import Progress


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_plain_lines_for_logs():
    out, clock = io.StringIO(), Clock()
    progress = Progress(2, out, live=False, clock=clock)
    progress.cell_started("cpu-py3.11-trl1.16.0")
    progress.case_started("test_sft.py::test_sft")
    clock.now = 75
    progress.case_finished("test_sft.py::test_sft", Status.PASS)
    progress.cell_finished()
    assert out.getvalue().splitlines() == [
        "[ftmatrix] [0/2 cells] cpu-py3.11-trl1.16.0 01:15 | 1 pass | test_sft.py::test_sft: pass",
        "[ftmatrix] [1/2 cells] cpu-py3.11-trl1.16.0 01:15 | 1 pass | cell done",
    ]


def test_live_line_is_redrawn_below_the_output():
    out = io.StringIO()
    progress = Progress(1, out, live=True, clock=Clock())
    progress.cell_started("cell")
    progress.output("a line of pytest output\n")
    progress.case_finished("c", Status.FAIL)
    progress.close()
    text = out.getvalue()
    assert text.startswith("[0/1 cells] cell 00:00\r\x1b[2Ka line of pytest output\n")
    assert text.endswith("[0/1 cells] cell 00:00 | 1 fail\n")


def test_the_line_shows_how_cells_and_cases_share_the_machine():
    out, clock = io.StringIO(), Clock()
    # One cell's process among two at once (nox names the cell beside it): no label.
    progress = Progress(4, out, live=False, clock=clock)
    progress.sharing(cells_at_once=2, workers=1, threads=1)
    progress.cell_started("cpu-py3.11-trl1.16.0")
    progress.case_started("test_sft.py::test_sft")
    assert progress.status_line() == (
        "[4 cells, 2 at once, 1 torch thread each] test_sft.py::test_sft 00:00"
    )
    # pytest-xdist workers in one cell: every case running now.
    progress = Progress(2, out, live=False, clock=clock)
    progress.sharing(cells_at_once=1, workers=2, threads=1)
    progress.cell_started("cell")
    progress.case_started("test_b.py::b")
    progress.case_started("test_a.py::a")
    assert progress.status_line() == (
        "[0/2 cells, 2 workers, 1 torch thread each] cell test_a.py::a, test_b.py::b 00:00"
    )
    progress.case_finished("test_a.py::a", Status.PASS)
    assert progress.status_line() == (
        "[0/2 cells, 2 workers, 1 torch thread each] cell test_b.py::b 00:00 | 1 pass"
    )


def test_a_log_file_the_disk_refuses_sends_the_output_to_the_console_not_a_traceback():
    """A full disk (``/dev/full`` refuses every write with ENOSPC) must not end the thread
    that carries the cases' output: the records matter, the log goes to the console."""
    from pathlib import Path

    out = io.StringIO()
    progress = Progress(1, out, live=False)
    progress.log_to(Path("/dev/full"))
    progress.output("collected 3 items")
    progress.note("installing 6 packages")
    progress.output("test_a.py::test_b PASSED")
    lines = out.getvalue().splitlines()
    assert lines[0] == (
        "[ftmatrix] the cell's log /dev/full cannot be written (No space left on device): "
        "its output goes here"
    )
    assert lines[1:] == ["collected 3 items", "test_a.py::test_b PASSED"]
    progress.close()
