"""Shared helpers for the tool's own tests: paths, and the factories that build records."""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from ftmatrix.cell.files import CellFiles
from ftmatrix.cell.record import Record
from ftmatrix.cell.records import CellRecordFile
from ftmatrix.cell.status import Status

DATA = Path(__file__).parent / "data"
ROOT = Path(__file__).parent.parent

# The tests run as a user's shell does, never as part of a run: under `nox -s tests` the
# noxfile's import of ftmatrix's sessions marks nox's environment (the run it would be,
# uv's settings found good), and every command a test starts would inherit the marks.
RUN_MARKS = ("FTMATRIX_RUN_ID", "FTMATRIX_IN_RUN", "FTMATRIX_UV_CHECKED")
for _mark in RUN_MARKS:
    os.environ.pop(_mark, None)

# The resolutions the tests make are kept in a folder of this test session, never in the
# user's own cache (~/.cache/ftmatrix/resolve), which they would fill and read from; one
# the user named (FTMATRIX_CACHE_DIR) is theirs to share. uv's own cache stays the user's.
if not os.environ.get("FTMATRIX_CACHE_DIR"):
    os.environ["FTMATRIX_CACHE_DIR"] = tempfile.mkdtemp(prefix="ftmatrix-test-resolutions-")
    atexit.register(shutil.rmtree, os.environ["FTMATRIX_CACHE_DIR"], ignore_errors=True)


def pytest_collection_finish(session: pytest.Session) -> None:
    marked = [name for name in RUN_MARKS if name in os.environ]
    if marked:  # a test module imported ftmatrix.sessions (nox's module) into this process
        raise pytest.UsageError(f"collecting the tests set {', '.join(marked)}: see conftest.py")


SFT = "test_sft.py::test_sft"


@pytest.fixture
def data_dir() -> Path:
    return DATA


def make_record(**overrides: Any) -> Record:
    """A passing SFT record of one cell; ``overrides`` set any field."""
    fields: dict[str, Any] = dict(
        run_id="20261122T120000Z",
        cell_id="abc123def456",
        cell_label="cpu-py3.11-trl1.16.0",
        python="3.11",
        pins={"trl": "1.16.0", "vllm": None},
        hardware_class="cpu",
        case=SFT,
        operation="sft",
        status=Status.PASS,
        started_at="2026-11-22T12:00:00+00:00",
        finished_at="2026-11-22T12:00:03+00:00",
        duration=3.0,
        metrics={"loss": 1.5},
    )
    fields.update(overrides)
    return Record(**fields)


def write_records(out: Path, *records: Record) -> None:
    """``records`` added where a run keeps each: its own cell's file in its own run's
    folder under ``out`` (a file holds its run's records of its cell only)."""
    for record in records:
        CellRecordFile(CellFiles.of(out, record.run_id, record.cell_id).records).add(record)


def cell(
    status: Status,
    *,
    case: str = SFT,
    operation: str = "sft",
    hardware: str = "cpu",
    run_id: str = "20261122T120000Z",
    signature: str = "1a2b3c4d5e6f",
    **pins: str | None,
) -> Record:
    """The record of ``case`` in the cell of ``pins``, labelled and keyed as a plan would
    (``cpu-py3.11-trl1.16.0``); a ``fail`` carries an ImportError with ``signature``."""
    label = "-".join([hardware, "py3.11", *(f"{k}{v}" for k, v in pins.items())])
    failed = status is Status.FAIL
    return make_record(
        run_id=run_id,
        cell_id=f"id-{label}",
        cell_label=label,
        pins=pins,
        hardware_class=hardware,
        case=case,
        operation=operation,
        status=status,
        exception_type="ImportError" if failed else None,
        message="cannot import name 'X' from 'transformers'" if failed else None,
        signature=signature if failed else None,
    )


def bare_cell(tmp_path: Path, cases: Path) -> tuple[Path, Any]:
    """A cell of no pins run by this interpreter: its cell file, and the runner's context
    for ``cases`` (records under ``tmp_path/out``)."""
    import json
    import os

    from ftmatrix.config import HardwareClass, InstallOptions
    from ftmatrix.runner import CellContext

    cell_file = tmp_path / "cell.json"
    cell = {"run_id": "r1", "id": "cell1", "label": "cpu-py3.11-x1", "python": "3.11"}
    cell_file.write_text(json.dumps({**cell, "pins": {}, "hardware": "cpu"}))
    context = CellContext(
        run_id="r1",
        out_dir=tmp_path / "out",
        cases_dir=cases,
        case_selection=(),
        install=InstallOptions(),
        hardware_class=HardwareClass(name="cpu", runs_on=()),
        env=dict(os.environ),
    )
    return cell_file, context


@contextlib.contextmanager
def serving(handler: Callable[..., BaseHTTPRequestHandler], **attributes: Any) -> Iterator[str]:
    """A local HTTP server of ``handler`` while the block runs (``attributes`` set on the
    server, where the handler finds them): its base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    for name, value in attributes.items():
        setattr(server, name, value)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


# Helpers shared by several test modules (each module imports from here, never another
# test module).


def run_plugin(
    pytester: pytest.Pytester, tmp_path: Path, timeout: float | None = None
) -> dict[str, dict]:
    """Run pytester's case files with the results plugin; return the records by case name."""
    cell = {
        "run_id": "r1",
        "id": "cell1",
        "label": "cpu-py3.11-x1",
        "python": "3.11",
        "pins": {"x": "1"},
        "hardware": "cpu",
    }
    cell_file = tmp_path / "cell.json"
    cell_file.write_text(json.dumps(cell))
    out = tmp_path / "out.jsonl"
    pytester.runpytest_subprocess(
        "-p",
        "ftmatrix.cell.plugin",
        "--ftmatrix-cell",
        str(cell_file),
        "--ftmatrix-record",
        str(out),
        timeout=timeout,
    )
    return {
        json.loads(line)["case"].split("::")[1]: json.loads(line)
        for line in out.read_text().splitlines()
    }


def run(entry: str, folder: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``ftmatrix run`` or ``nox -s matrix`` over ``folder``'s matrix.yaml and cases/."""
    variables = {
        **os.environ,
        "FTMATRIX_MATRIX": str(folder / "matrix.yaml"),
        "FTMATRIX_CASES": str(folder / "cases"),
        "FTMATRIX_OUT": str(folder / "out"),
        **env,
    }
    if entry == "cli":
        command = [sys.executable, "-m", "ftmatrix", "run", *args]
    else:
        command = [sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py")]
        command += ["--envdir", str(folder / ".nox"), "-s", "matrix", *args]
    return subprocess.run(
        command, env=variables, cwd=folder, capture_output=True, text=True, check=False, timeout=600
    )


def records_of(out: Path) -> list[dict]:
    return [
        json.loads(line)
        for path in sorted((out / "records").rglob("*.jsonl"))
        for line in path.read_text().splitlines()
    ]


def holding(lock: Path) -> subprocess.Popen[str]:
    """Another process that holds a shared lock on ``lock`` until it is ended."""
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import fcntl, sys, time\n"
         f"h = open({str(lock)!r}, 'a'); fcntl.flock(h, fcntl.LOCK_SH)\n"
         "print('held', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert holder.stdout is not None and holder.stdout.readline() == "held\n"
    return holder
