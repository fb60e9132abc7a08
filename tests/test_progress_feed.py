"""Progress in any log: what cells side by side tell the nox process the user started.

Fast tier: the tally (events in, lines out), the tail over a real file, the cells nox's
arguments choose. Slow tier: `nox -s matrix` over a real two-cell matrix, its output to a
pipe, whose progress lines must reach the reader while the cells still run: each cell's
last case waits for a file the test writes only once it has read a line counting both
cells' failing cases (without the lines, it waits out its minute and the test fails).
A small real matrix (six, pure Python: installs in seconds) rather than the default one
(two torch cells, minutes): the claim is about nox's buffering of parallel cells, which
any two cells side by side meet; the default matrix's own run (tests/test_default_matrix.py)
checks its summary too.
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ftmatrix.cell.status import Status
from ftmatrix.progress import Progress
from ftmatrix.progress_feed import FeedTail, FeedWriter, Tally, cells_chosen

ROOT = Path(__file__).parent.parent
A, B = "cpu-py3.11-six1.16.0", "cpu-py3.11-six1.17.0"
LINE = re.compile(r"^\[ftmatrix \d\d:\d\d\] cells (\d+)/(\d+) done.* \| (\d+) cases?: (\d+) fail")


def test_a_line_per_event_names_cells_done_cases_and_fails_so_far():
    tally = Tally(total=2, started=0.0)
    assert tally.apply({"kind": "cell-started", "cell": A, "log": "/r/a.log"}, 1, own_pid=0) == (
        f"[ftmatrix 00:01] cells 0/2 done, 1 running | 0 cases: 0 fail | {A}: started"
    )
    assert tally.apply({"kind": "case-started", "cell": A, "case": "t.py::x"}, 2, own_pid=0) is None
    # The cases a cell saw end since its last look come as one event: a line each.
    ended = [["t.py::x", "fail"], ["t.py::y", "pass"]]
    assert tally.lines({"kind": "cases-finished", "cell": A, "cases": ended}, 65, own_pid=0) == [
        f"[ftmatrix 01:05] cells 0/2 done, 1 running | 1 case: 1 fail | {A}: t.py::x: fail",
        f"[ftmatrix 01:05] cells 0/2 done, 1 running | 2 cases: 1 fail, 1 pass | {A}: t.py::y: pass",
    ]
    # A note from a cell in another process is a line; this process's own were printed by nox.
    note = {"kind": "note", "cell": A, "text": f"[ftmatrix] {A}: installing 7 packages", "pid": 7}
    assert tally.apply(note, 67, own_pid=7) is None
    assert tally.apply(note, 67, own_pid=8) == (
        f"[ftmatrix 01:07] cells 0/2 done, 1 running | 2 cases: 1 fail, 1 pass | "
        f"{A}: installing 7 packages"
    )
    assert tally.heartbeat(90).endswith(f"| {A}: installing 7 packages")
    assert tally.apply({"kind": "cell-finished", "cell": A}, 70, own_pid=0) == (
        f"[ftmatrix 01:10] cells 1/2 done | 2 cases: 1 fail, 1 pass | {A}: done; "
        "pytest's output: /r/a.log"
    )
    assert tally.summary(75) == [
        "[ftmatrix] 1/2 cells done in 01:15, 2 cases: 1 fail, 1 pass",
        f"[ftmatrix]   fail: {A}: t.py::x",
        f"[ftmatrix] pytest's output of {A}: /r/a.log",
    ]


def test_a_feed_event_of_the_wrong_shape_is_left_out_not_a_traceback():
    """The feed is a file anyone may write: what this version never writes is skipped."""
    tally = Tally(total=1, started=0.0)
    for cases in (None, "t.py::x", [["t.py::x"]], [{"case": "t.py::x"}], [[1, 2, 3]]):
        assert (
            tally.lines({"kind": "cases-finished", "cell": A, "cases": cases}, 1, own_pid=0) == []
        )
    kept = [["t.py::x", "pass"], "junk", ["t.py::y", "crash"]]
    lines = tally.lines({"kind": "cases-finished", "cell": A, "cases": kept}, 1, own_pid=0)
    assert [line.rsplit(" | ", 1)[1] for line in lines] == [
        f"{A}: t.py::x: pass",
        f"{A}: t.py::y: crash",
    ]
    assert tally.summary(2)[1] == f"[ftmatrix]   crash: {A}: t.py::y"


def test_the_tail_reads_what_cells_append_and_ends_with_a_summary(tmp_path: Path):
    feed, out = tmp_path / "feed.jsonl", io.StringIO()
    now = [0.0]
    tail = FeedTail(feed, Tally(total=2, started=0.0), out, lines=True, clock=lambda: now[0])
    tail.poll()  # no cell yet: nothing, not even a heartbeat
    now[0] = 100
    tail.poll()
    assert out.getvalue() == ""
    # Two cells' processes write through Progress, as the matrix session does.
    for label in (A, B):
        progress = Progress(2, io.StringIO(), live=False, feed=FeedWriter(feed))
        progress.log_to(tmp_path / f"{label}.log")
        progress.cell_started(label)
        progress.output("pytest's own line\n")
        progress.case_started("t.py::x")
        progress.case_finished("t.py::x", Status.FAIL if label == A else Status.PASS)
        assert progress.stream.getvalue() == ""  # type: ignore[attr-defined]
        assert (tmp_path / f"{label}.log").read_text() == "pytest's own line\n"
    tail.poll()
    lines = out.getvalue().splitlines()
    assert [LINE.match(line).groups() for line in lines] == [  # type: ignore[union-attr]
        ("0", "2", "0", "0"),
        ("0", "2", "1", "1"),
        ("0", "2", "1", "1"),
        ("0", "2", "2", "1"),
    ]
    now[0] += 31  # nothing new for longer than the heartbeat: a line saying what runs
    tail.poll()
    assert out.getvalue().splitlines()[-1].endswith(f"| {A}: t.py::x; {B}: t.py::x")
    tail.stop()
    assert out.getvalue().splitlines()[-4:] == [
        "[ftmatrix] 0/2 cells done in 02:11, 2 cases: 1 fail, 1 pass",
        f"[ftmatrix]   fail: {A}: t.py::x",
        f"[ftmatrix] pytest's output of {A}: {tmp_path / f'{A}.log'}",
        f"[ftmatrix] pytest's output of {B}: {tmp_path / f'{B}.log'}",
    ]
    assert not feed.exists()


def test_the_cells_nox_is_asked_for():
    labels = [A, B]
    assert cells_chosen(labels, []) == 2
    assert cells_chosen(labels, ["-s", "matrix"]) == 2
    assert cells_chosen(labels, ["-s", f"matrix({A})", "--envdir", "x"]) == 1
    assert cells_chosen(labels, [f"--sessions=matrix({B})"]) == 1
    assert cells_chosen(labels, ["-s", f"matrix({A})", f"matrix({B})"]) == 2
    assert cells_chosen(labels, ["-k", "six1.16"]) == 2  # a filter: counted as all
    assert cells_chosen(labels, ["--", "-s", f"matrix({A})"]) == 2  # pytest's, not nox's


GATED = """
import os, pathlib, time


def test_passes():
    pass


def test_fails():
    assert False, "fails on purpose"


def test_waits_for_the_reader():
    gate = pathlib.Path(os.environ["PROGRESS_GATE"])
    for _ in range(600):
        if gate.exists():
            return
        time.sleep(0.1)
    raise AssertionError("no progress line reached the reader while this cell ran")
"""


@pytest.mark.slow
def test_progress_reaches_a_pipe_while_cells_side_by_side_run(tmp_path: Path):
    cases = tmp_path / "cases"
    cases.mkdir()
    (cases / "test_gated.py").write_text(GATED)
    (tmp_path / "matrix.yaml").write_text(
        'packages: {six: ["1.16.0", "1.17.0"]}\nlimits: {cells: 2, workers: 1}\n'
    )
    gate = tmp_path / "gate"
    env = {
        **os.environ,
        "FTMATRIX_MATRIX": str(tmp_path / "matrix.yaml"),
        "FTMATRIX_CASES": str(cases),
        "FTMATRIX_OUT": str(tmp_path / "out"),
        "PROGRESS_GATE": str(gate),
    }
    nox = subprocess.Popen(
        [sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py"), "-s", "matrix",
         "--envdir", str(tmp_path / "envs")],
        env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    assert nox.stdout is not None
    console, while_running = [], None
    for line in nox.stdout:
        console.append(line)
        match = LINE.match(line)
        if match and while_running is None and match.groups() == ("0", "2", "4", "2"):
            # Both cells' first two cases done, both cells waiting on their third.
            while_running = line
            gate.touch()
    nox.wait()
    output = "".join(console)
    assert while_running is not None, output[-4000:]
    assert nox.returncode == 0, output[-4000:]
    progress = [line for line in console if line.startswith("[ftmatrix ")]
    assert progress and all(LINE.match(line) for line in progress), progress
    assert "[ftmatrix] 2/2 cells done in " in output
    assert ", 6 cases: 2 fail, 4 pass" in output
    # pytest's whole output is in each cell's log, which the lines name; not on the console.
    logs = re.findall(r"pytest's output of \S+: (\S+\.log)", output)
    assert len(logs) == 2
    assert all("fails on purpose" in Path(log).read_text() for log in logs)
    assert "short test summary info" not in output


def test_a_cell_prints_its_own_case_lines_where_the_feed_is_not_printed(tmp_path: Path):
    """On a terminal nox shows each parallel cell's latest line on its board, and the nox
    process prints no feed lines: there the cell's process prints a line per case, as
    without a feed; where the feed is printed (a log), it prints none of its own."""
    for printed, expected in ((False, 1), (True, 0)):
        out = io.StringIO()
        progress = Progress(
            2, out, live=False, feed=FeedWriter(tmp_path / "feed.jsonl", printed=printed)
        )
        progress.cell_started(A)
        progress.case_finished("t.py::x", Status.PASS)
        assert sum("t.py::x: pass" in line for line in out.getvalue().splitlines()) == expected
