"""The console is a CI job's public log: what ftmatrix itself prints there is masked too.

Not only pytest's output (masked line by line as the cell prints it): the progress lines
nox's tail prints (a line a case, the heartbeat naming the running cases, the summary),
the cell's notes ("resolving ...", "install-error: <uv's stderr>") and the live line. A
case id comes raw from the plugin's running-case note, and a note from uv's stderr, which
names the index URL it failed to reach: each reached the console unmasked. Real files, a
real feed and its tail, a real uv.
"""

from __future__ import annotations

import io
import os
import sys
from pathlib import Path

import pytest

from ftmatrix.case_verdicts import no_verdict
from ftmatrix.cell.status import Status
from ftmatrix.config import HardwareClass, InstallOptions
from ftmatrix.plan import Cell
from ftmatrix.progress import Progress
from ftmatrix.progress_feed import FeedTail, FeedWriter, Tally
from ftmatrix.runner import CellContext, run_cell

SECRET = "zq8x7c6v5b4nQ-feed"
CELL = "cpu-py3.11-six1.17.0"
# A parametrize id holding the value and a machine path, as pytest writes the case's id.
CASE = f"test_login.py::test_login[{SECRET}-/home/zelda/data]"


@pytest.mark.parametrize("printed", [True, False])
def test_no_progress_line_names_a_secret_or_a_machine_path_of_a_case_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, printed: bool
) -> None:
    """A cell's Progress writes the real feed; the tail prints what it says into a file: a
    line per case, the heartbeat naming the case still running, the summary, and, where
    nox's tail prints nothing (a terminal, a cell of its own), the cell's own lines."""
    monkeypatch.setenv("LOGIN_API_TOKEN", SECRET)
    feed, console = tmp_path / "feed.jsonl", tmp_path / "console.txt"
    now = [0.0]
    with console.open("w") as stream:
        tail = FeedTail(feed, Tally(total=1, started=0.0), stream, lines=True, clock=lambda: now[0])
        cell_stream = io.StringIO()
        progress = Progress(
            1, cell_stream, live=False, feed=FeedWriter(feed, printed=printed), clock=lambda: 0.0
        )
        progress.log_to(tmp_path / "cell.log")
        progress.cell_started(CELL)
        progress.note(f"[ftmatrix] {CELL}: index https://pypi.fury.io/{SECRET}/acme/ is slow")
        progress.case_started(CASE)  # as the supervisor reads it from the running-case note
        progress.case_started(f"{CASE}-again")
        tail.poll()
        now[0] = 100.0  # nothing new for longer than the heartbeat: a line naming what runs
        tail.poll()
        progress.case_finished(CASE, Status.FAIL)
        progress.cell_finished()
        tail.stop()
    printed_text = console.read_text() + cell_stream.getvalue()
    assert "test_login.py::test_login[" in printed_text  # the lines were printed
    assert "test_login.py::test_login[" in console.read_text().split("running |")[-1]
    for path_or_text in (printed_text, (tmp_path / "cell.log").read_text()):
        assert SECRET not in path_or_text and "zelda" not in path_or_text, path_or_text


def test_the_tail_prints_no_secret_of_any_feed_it_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The feed is a file any process of the run writes (an older ftmatrix, a cell whose
    own environment held no such secret): the tail masks every line it prints."""
    monkeypatch.setenv("LOGIN_API_TOKEN", SECRET)
    feed, console = tmp_path / "feed.jsonl", tmp_path / "console.txt"
    writer, now = FeedWriter(feed), [0.0]
    with console.open("w") as stream:
        tail = FeedTail(feed, Tally(total=1, started=0.0), stream, lines=True, clock=lambda: now[0])
        writer.emit("cell-started", cell=CELL, log="")
        writer.emit("note", cell=CELL, text=f"[ftmatrix] {CELL}: pulling {SECRET}", pid=-1)
        writer.emit("case-started", cell=CELL, case=CASE)
        tail.poll()
        now[0] = 100.0
        tail.poll()  # the heartbeat
        writer.emit("cases-finished", cell=CELL, cases=[[CASE, "fail"]])
        tail.stop()  # the summary
    text = console.read_text()
    assert text.count("test_login.py::test_login[") == 3, text
    assert SECRET not in text and "zelda" not in text, text


def test_a_live_line_names_no_secret_of_a_running_case(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOGIN_API_TOKEN", SECRET)
    terminal = io.StringIO()
    progress = Progress(1, terminal, live=True, clock=lambda: 0.0)
    progress.cell_started(CELL)
    progress.case_started(CASE)
    assert "test_login.py::test_login[" in terminal.getvalue()
    progress.case_finished(CASE, Status.PASS)
    progress.close()
    assert SECRET not in terminal.getvalue() and "zelda" not in terminal.getvalue()


def test_a_cells_notes_print_no_secret_of_uvs_error(tmp_path: Path) -> None:
    """uv cannot reach the index, whose URL holds a token: its stderr is the cell's
    install-error, which the record masks, and a note printed on the console."""
    env = {
        **os.environ,
        "FURY_TOKEN": SECRET,
        "PIP_INDEX_URL": f"http://127.0.0.1:9/{SECRET}/simple/",
        "FTMATRIX_RESOLVE_TTL": "0",
        "UV_CACHE_DIR": str(tmp_path / "uv-cache"),
        "UV_HTTP_RETRIES": "0",
    }
    cell = Cell(
        python=f"{sys.version_info[0]}.{sys.version_info[1]}",
        pins=(("six", "1.17.0"),),
        hardware="cpu",
    )
    ctx = CellContext(
        run_id="20261122T120000Z",
        out_dir=tmp_path / "out",
        cases_dir=tmp_path / "cases",
        case_selection=(),
        install=InstallOptions(),
        hardware_class=HardwareClass(name="cpu", runs_on=(), gpus=0, gpu_name=None),
        env=env,
        sleep=lambda _seconds: None,
    )
    said: list[str] = []
    [record] = run_cell(cell, Path(sys.executable), ctx, log=said.append)
    assert record.status is Status.INSTALL_ERROR
    # The session prints why the cell has no verdict from the records run_cell returns.
    console = "\n".join([*said, no_verdict([record]) or ""])
    assert "install-error" in console and "127.0.0.1:9/" in console, console
    assert SECRET not in console, console
    assert SECRET not in repr(record)
