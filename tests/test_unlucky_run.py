"""An unlucky run: what a cell meets on the way (a Python the machine lacks, code above the
cases folder, a case that kills the process watching it, damaged records, a report made
while the run goes on), through real nox, uv and pytest, by both entry points.

Slow tier: real venvs (six only, from uv's cache) and real subprocesses.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import make_record, records_of, run

from ftmatrix.cell.files import CellFiles
from ftmatrix.cell.records import CellRecordFile
from ftmatrix.interpreters import find_interpreters
from ftmatrix.runner import current_python

ROOT = Path(__file__).parent.parent

pytestmark = pytest.mark.slow


def absent_python() -> str | None:
    """A Python version a matrix accepts that this machine has no interpreter for."""
    candidates = [f"3.{minor}" for minor in range(9, 16)]
    found = find_interpreters(candidates, os.environ)
    return next((v for v in candidates if found[v].path is None), None)


def write_matrix(folder: Path, pythons: list[str], case_seconds: int = 60) -> None:
    (folder / "matrix.yaml").write_text(
        f"python: {json.dumps(pythons)}\n"
        'packages:\n  six: ["1.17.0"]\n'
        f"timeouts: {{case: {case_seconds}, cell: 300}}\n"
    )


@pytest.mark.parametrize("entry", ["cli", "nox"])
def test_a_cell_that_cannot_start_is_a_counted_install_error_and_code_above_the_cases_never_runs(
    tmp_path: Path, entry: str
) -> None:
    missing = absent_python()
    if missing is None:
        pytest.skip("this machine has an interpreter for every Python 3.9 to 3.15")
    # A conftest.py above the cases folder (a shared /tmp, a parent checkout): it would
    # leave a file behind and end the cell's pytest if it ran.
    (tmp_path / "conftest.py").write_text(
        "import pathlib\n"
        "pathlib.Path(__file__).with_name('ABOVE_RAN').write_text('ran')\n"
        "raise SystemExit('a conftest.py above the cases folder ran')\n"
    )
    cases = tmp_path / "cases"
    cases.mkdir()
    (cases / "conftest.py").write_text(
        "import pathlib\npathlib.Path(__file__).with_name('OWN_RAN').write_text('ran')\n"
    )
    (cases / "test_a.py").write_text(
        "import sys\n\n\ndef test_ok():\n    assert sys.version_info >= (3, 9)\n"
    )
    write_matrix(tmp_path, [current_python(), missing])
    # Other code from outside the cases: pytest settings above them that load a plugin,
    # and the caller's PYTHONPATH (a sitecustomize.py, a module PYTEST_PLUGINS names),
    # each leaving a file where it runs in a cell (under .nox; the host runs it too).
    site = tmp_path / "site"
    site.mkdir()
    # Only a cell's venv leaves the file: the host (under `nox -s tests`, a venv of .nox
    # too) takes the caller's PYTHONPATH as it should.
    leave = (
        "import pathlib, sys\n"
        f"if sys.prefix.startswith({str(tmp_path / '.nox')!r}):\n"
        "    (pathlib.Path(__file__).parent.parent / ('RAN_' + __name__)).write_text('ran')\n"
    )
    for module in ("sitecustomize", "env_plugin", "ini_plugin"):
        (site / f"{module}.py").write_text(leave)
    (tmp_path / "pytest.ini").write_text("[pytest]\naddopts = -p ini_plugin\npythonpath = site\n")
    outside = {"PYTHONPATH": str(site), "PYTEST_PLUGINS": "env_plugin"}

    planned = subprocess.run(
        [sys.executable, "-m", "ftmatrix", "plan", "--json"],
        env={**os.environ, "FTMATRIX_MATRIX": str(tmp_path / "matrix.yaml")},
        cwd=tmp_path, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert planned.returncode == 0, planned.stderr[-3000:]
    plan = json.loads(planned.stdout)
    assert plan["interpreters"]["found"][missing] is None
    assert plan["interpreters"]["found"][current_python()]

    ran = run(entry, tmp_path, **outside)
    output = ran.stdout + ran.stderr
    assert ran.returncode == 1, output[-4000:]
    assert "Traceback" not in output, output[-4000:]
    assert f"Python {missing} on this machine" in output
    assert "Failed to download" not in output  # no interpreter is ever downloaded
    by_python = {r["python"]: r for r in records_of(tmp_path / "out")}
    assert by_python[current_python()]["status"] == "pass"
    stuck = by_python[missing]
    assert (stuck["status"], stuck["case"]) == ("install-error", "*")
    assert f"Python {missing} on this machine" in stuck["reason"]
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert "1 pass, 1 install-error" in summary
    assert not (tmp_path / "ABOVE_RAN").exists()
    assert sorted(p.name for p in tmp_path.glob("RAN_*")) == []
    assert (cases / "OWN_RAN").exists()


PARENT_KILLERS = """
import os
import signal
import sys


def test_a_kills_its_parent():
    os.kill(os.getppid(), signal.SIGKILL)


def test_b_terminates_its_parent():
    os.kill(os.getppid(), signal.SIGTERM)


def test_c_healthy():
    assert sys.version_info >= (3, 9)  # the cell's own interpreter ran it
"""


@pytest.mark.parametrize("entry", ["cli", "nox"])
def test_a_case_that_kills_its_parent_is_a_crash_and_the_run_goes_on(
    tmp_path: Path, entry: str
) -> None:
    one_cell(tmp_path, "test_parents.py", PARENT_KILLERS)
    run_id = {"FTMATRIX_RUN_ID": "20261127T000000Z"}

    ran = run(entry, tmp_path, **run_id)
    output = ran.stdout + ran.stderr
    assert ran.returncode == 0, output[-4000:]
    found = {r["case"].split("::")[-1]: r for r in records_of(tmp_path / "out")}
    assert {case: r["status"] for case, r in found.items()} == {
        "test_a_kills_its_parent": "crash",
        "test_b_terminates_its_parent": "crash",
        "test_c_healthy": "pass",
    }
    assert found["test_a_kills_its_parent"]["message"] == (
        "the process died during the case: signal SIGKILL"
    )
    assert found["test_b_terminates_its_parent"]["message"] == (
        "the process died during the case: signal SIGTERM"
    )
    assert "1 pass, 2 crash" in (tmp_path / "out" / "summary.md").read_text()

    resumed = run(entry, tmp_path, **run_id, FTMATRIX_RESUME="1")
    assert resumed.returncode == 0, (resumed.stdout + resumed.stderr)[-4000:]
    assert "nothing to resume" in resumed.stdout + resumed.stderr


WAITS_FOR_THE_TEST = """
import os
import sys
import time
from pathlib import Path


def test_a_done():
    assert sys.version_info >= (3, 9)  # the cell's own interpreter ran it


def test_b_waits():
    go = Path(os.environ["FTMATRIX_TEST_STATE"]) / "go"
    deadline = time.monotonic() + 120
    while not go.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
"""


def report_now(folder: Path) -> tuple[subprocess.CompletedProcess[str], dict]:
    """``ftmatrix report`` from another terminal, as a user would run it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FTMATRIX_")}
    ran = subprocess.run(
        [sys.executable, "-m", "ftmatrix", "report", "--out", str(folder / "out")],
        env=env, cwd=folder, capture_output=True, text=True, check=False,
    )  # fmt: skip
    return ran, json.loads((folder / "out" / "results.json").read_text())


@pytest.mark.parametrize("entry", ["cli", "nox"])
def test_a_report_built_while_the_run_goes_on_says_it_is_in_progress(
    tmp_path: Path, entry: str
) -> None:
    one_cell(tmp_path, "test_wait.py", WAITS_FOR_THE_TEST)
    state = tmp_path / "state"
    state.mkdir()
    run_id = "20261127T010000Z"
    if entry == "cli":
        command = [sys.executable, "-m", "ftmatrix", "run"]
    else:
        command = [sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py")]
        command += ["--envdir", str(tmp_path / ".nox"), "-s", "matrix"]
    env = {
        **os.environ,
        "FTMATRIX_MATRIX": str(tmp_path / "matrix.yaml"),
        "FTMATRIX_CASES": str(tmp_path / "cases"),
        "FTMATRIX_OUT": str(tmp_path / "out"),
        "FTMATRIX_RUN_ID": run_id,
        "FTMATRIX_TEST_STATE": str(state),
    }
    running = subprocess.Popen(
        command, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        deadline = time.monotonic() + 240
        while not any(
            "test_b_waits" in p.read_text(errors="replace")
            for p in (tmp_path / "out").rglob("*.jsonl.current")
        ):
            assert running.poll() is None and time.monotonic() < deadline, "test_b never started"
            time.sleep(0.2)
        ran, results = report_now(tmp_path)
        assert ran.returncode == 0, ran.stderr
        ((progress),) = results["in_progress"]
        assert progress["run_id"] == run_id
        assert progress["running"] == [f"cpu-py{current_python()}-six1.17.0"]
        summary = (tmp_path / "out" / "summary.md").read_text()
        assert f"**run {run_id} is in progress: this report is partial" in summary
        assert (
            "is in progress: this report is partial"
            in (tmp_path / "out" / "index.html").read_text()
        )
    finally:
        (state / "go").touch()
        output, _ = running.communicate(timeout=240)
    assert running.returncode == 0, output[-4000:]
    # The report the run built itself at its end is whole, not 'in progress'.
    assert "in progress" not in (tmp_path / "out" / "summary.md").read_text()
    ran, results = report_now(tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert results["in_progress"] == []
    assert "in progress" not in (tmp_path / "out" / "summary.md").read_text()


@pytest.mark.parametrize("entry", ["cli", "nox"])
def test_a_torn_record_is_quarantined_on_resume_and_its_case_runs_again(
    tmp_path: Path, entry: str
) -> None:
    two = "import sys\n\n\ndef test_a():\n    assert sys.version_info >= (3, 9)\n\n\n"
    one_cell(
        tmp_path, "test_two.py", two + "def test_b():\n    assert sys.version_info >= (3, 9)\n"
    )
    run_id = {"FTMATRIX_RUN_ID": "20261127T020000Z"}
    first = run(entry, tmp_path, **run_id)
    assert first.returncode == 0, (first.stdout + first.stderr)[-4000:]
    (path,) = (tmp_path / "out" / "records").rglob("*.jsonl")
    whole = path.read_bytes()
    torn = whole[: len(whole) - 100]  # the last record's write never finished
    path.write_bytes(torn)
    lost = json.loads(whole.splitlines()[-1])["case"]

    resumed = run(entry, tmp_path, **run_id, FTMATRIX_RESUME="1")
    output = resumed.stdout + resumed.stderr
    assert resumed.returncode == 0, output[-4000:]
    assert "1 unreadable record line(s) moved to" in output
    assert "nothing to resume" not in output
    found = {r["case"].split("::")[-1]: r["status"] for r in records_of(tmp_path / "out")}
    assert found == {"test_a": "pass", "test_b": "pass"}
    quarantined = path.with_name(path.name + ".quarantine").read_bytes()
    assert quarantined == torn.splitlines()[-1] + b"\n"  # the bytes as found
    assert lost.split("::")[-1] in found
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert "kept apart (quarantined)" in results["unreadable_records"][0]


@pytest.mark.parametrize("entry", ["cli", "nox"])
def test_a_resume_whose_cell_lists_are_damaged_collects_again_and_runs_what_has_no_record(
    tmp_path: Path, entry: str
) -> None:
    """The plugin's lists beside the records (the collected cases, the isolated ones, the
    case starts), damaged: a half-written list, a list of numbers, bytes not UTF-8."""
    one_cell(tmp_path, "test_two.py", "def test_a():\n    pass\n\n\ndef test_b():\n    pass\n")
    run_id = {"FTMATRIX_RUN_ID": "20261127T030000Z"}
    first = run(entry, tmp_path, **run_id)
    assert first.returncode == 0, (first.stdout + first.stderr)[-4000:]
    (path,) = (tmp_path / "out" / "records").rglob("*.jsonl")
    kept = path.read_bytes().splitlines(keepends=True)[0]
    path.write_bytes(kept)  # one case unrecorded
    next(path.parent.glob("*.done.json")).unlink()  # the cell as a stopped run leaves it
    path.with_name(path.name + ".cases").write_text('["test_two.py::test_a", ')
    path.with_name(path.name + ".isolated").write_text("[[1], 2]")
    path.with_name(path.name + ".starts").write_bytes(b"\xff\xfe{\n")

    resumed = run(entry, tmp_path, **run_id, FTMATRIX_RESUME="1")
    output = resumed.stdout + resumed.stderr
    assert resumed.returncode == 0, output[-4000:]
    assert "Traceback" not in output
    found = {r["case"].split("::")[-1]: r["status"] for r in records_of(tmp_path / "out")}
    assert found == {"test_a": "pass", "test_b": "pass"}
    # Only the case without a record ran again: the kept one's record is the first run's.
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    first_record = json.loads(kept)
    again = [r for r in lines if r["case"] == first_record["case"]]
    assert [r["started_at"] for r in again] == [first_record["started_at"]]


@pytest.mark.parametrize(
    ("damage", "said"),
    [
        ("torn state", "its state cannot be read"),
        ("run again", "run started again without FTMATRIX_RESUME"),
    ],
)
def test_records_that_no_longer_apply_are_set_aside_and_said_never_deleted(
    tmp_path: Path, damage: str, said: str
) -> None:
    """A resume whose cell's state file is damaged (or a run id named again without
    resuming) runs the cell anew: its earlier records went without a word."""
    one_cell(tmp_path, "test_two.py", "def test_a():\n    pass\n\n\ndef test_b():\n    pass\n")
    run_id = {"FTMATRIX_RUN_ID": "20261127T040000Z"}
    first = run("cli", tmp_path, **run_id)
    assert first.returncode == 0, (first.stdout + first.stderr)[-4000:]
    (path,) = (tmp_path / "out" / "records").rglob("*.jsonl")
    earlier = path.read_bytes()
    resume = {}
    if damage == "torn state":
        next(path.parent.glob("*.done.json")).unlink()  # as a stopped run leaves it
        state = next(path.parent.glob("*.state.json"))
        state.write_bytes(state.read_bytes()[:20])
        resume = {"FTMATRIX_RESUME": "1"}

    again = run("cli", tmp_path, **run_id, **resume)
    output = again.stdout + again.stderr
    assert again.returncode == 0, output[-4000:]
    assert f"{said}: the 2 record line(s) run 20261127T040000Z had of it are set aside" in output
    assert path.with_name(path.name + ".set-aside").read_bytes() == earlier
    found = {r["case"].split("::")[-1]: r["status"] for r in records_of(tmp_path / "out")}
    assert found == {"test_a": "pass", "test_b": "pass"}


REMOVES_THE_RECORDS = """
import os
import shutil


def test_a_first():
    pass


def test_b_removes_the_records_folder():
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.endswith(".jsonl"):
            shutil.rmtree(os.path.dirname(target))
            return
    raise AssertionError("no records file open")


def test_c_after():
    pass
"""


def test_a_case_that_removes_the_records_loses_no_other_cases_record(tmp_path: Path) -> None:
    one_cell(tmp_path, "test_rm.py", REMOVES_THE_RECORDS)
    ran = run("cli", tmp_path, FTMATRIX_RUN_ID="20261127T050000Z")
    output = ran.stdout + ran.stderr
    assert ran.returncode == 0, output[-4000:]
    assert "1240035f02bc.cell.json was removed under the run (by a case): written again" in output
    found = {r["case"].split("::")[-1]: r["status"] for r in records_of(tmp_path / "out")}
    assert found == {
        "test_a_first": "pass",
        "test_b_removes_the_records_folder": "pass",
        "test_c_after": "pass",
    }
    # The cell's log was in the folder too: what it held before and what came after.
    (log,) = (tmp_path / "out" / "records" / "20261127T050000Z").glob("*.log")
    text = log.read_text()
    assert "collected 3 items" in text and "test_rm.py::test_c_after" in text, text[-4000:]


REMOVES_THE_RECORDS_AND_DIES = """
import os
import shutil
import signal
import time
from pathlib import Path

RAN = Path(__file__).parent.parent / "ran.txt"


def test_a_first():
    with RAN.open("a") as ran:
        ran.write("a\\n")


def test_b_removes_the_records_folder_and_dies():
    time.sleep(1)  # the supervisor has read test_a's record by now
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.endswith(".jsonl"):
            shutil.rmtree(os.path.dirname(target))
            break
    os.kill(os.getpid(), signal.SIGKILL)  # before the plugin can carry a line


def test_c_after():
    pass
"""


def test_records_a_dying_case_removed_are_written_again_before_the_next_pass(
    tmp_path: Path,
) -> None:
    """The plugin cannot carry the lines of a file removed by a case that then dies: the
    supervisor writes again what it read before the next pytest, so no case runs twice."""
    one_cell(tmp_path, "test_rm.py", REMOVES_THE_RECORDS_AND_DIES)
    ran = run("cli", tmp_path, FTMATRIX_RUN_ID="20261127T070000Z")
    output = ran.stdout + ran.stderr
    assert "the records file lost 1 record(s) under the run" in output, output[-4000:]
    found = {r["case"].split("::")[-1]: r["status"] for r in records_of(tmp_path / "out")}
    assert found == {
        "test_a_first": "pass",
        "test_b_removes_the_records_folder_and_dies": "crash",
        "test_c_after": "pass",
    }
    assert (tmp_path / "ran.txt").read_text().split() == ["a"]  # test_a ran once


def _small_disk(folder: Path) -> str | None:
    """Mount a 48 MB tmpfs on ``folder``; why it cannot be done here, or None."""
    folder.mkdir()
    if os.geteuid() != 0:
        return "mounting a small filesystem needs root"
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", str(folder)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    return None if made.returncode == 0 else f"no tmpfs here: {made.stderr.strip()}"


FILLS_THE_DISK = """
import sys
from pathlib import Path


def fill(path):
    for size in (2**16, 2**12, 1):  # to the last byte
        try:
            with open(path, "ab", buffering=0) as ballast:
                while True:
                    ballast.write(b"x" * size)
        except OSError:  # No space left on device
            pass


def test_a_healthy():
    assert sys.version_info >= (3, 9)  # the cell's own interpreter ran it


def test_b_fills_the_disk_where_it_runs():
    fill("ballast")  # in the case's working folder, which the runner removes after the cases
    # A record of many pages (a long message and traceback): a page the disk has not got.
    assert False, "the disk is full " * 2000


def test_c_healthy():
    assert sys.version_info >= (3, 9)  # the cell's own interpreter ran it
"""


# The verdicts of FILLS_THE_DISK's cases, whatever the disk did to their records.
DISK_VERDICTS = {
    "test_a_healthy": "pass",
    "test_b_fills_the_disk_where_it_runs": "fail",
    "test_c_healthy": "pass",
}


def one_cell(folder: Path, name: str, cases: str, workers: int = 1) -> None:
    """In ``folder``: ``cases/NAME`` holding ``cases``, and a matrix of one cell of this
    Python with ``workers`` pytest-xdist workers."""
    (folder / "cases").mkdir()
    (folder / "cases" / name).write_text(cases)
    write_matrix(folder, [current_python()])
    with (folder / "matrix.yaml").open("a") as matrix:
        matrix.write(f"limits: {{workers: {workers}}}\n")


def disk_filling_cell(folder: Path, workers: int = 1) -> None:
    """A matrix of one cell whose middle case fills the disk, in ``folder``."""
    one_cell(folder, "test_disk.py", FILLS_THE_DISK, workers)


@pytest.fixture
def small_disk(tmp_path: Path):
    out = tmp_path / "out"
    why = _small_disk(out)
    if why is not None:
        pytest.skip(why)
    yield out
    subprocess.run(["umount", "-l", str(out)], check=False)


@pytest.mark.parametrize("entry", ["cli", "nox"])
def test_a_full_disk_loses_no_record_and_says_so_in_one_line(
    tmp_path: Path, entry: str, small_disk: Path
) -> None:
    disk_filling_cell(tmp_path)
    run_id = {"FTMATRIX_RUN_ID": "20261127T030000Z"}

    # The case fills the disk in its own working folder: every record is kept all the same.
    ran = run(entry, tmp_path, **run_id)
    output = ran.stdout + ran.stderr
    assert "Traceback" not in output, output[-4000:]
    assert "cannot be written" in output  # the plugin said so once
    found = {r["case"].split("::")[-1]: r["status"] for r in records_of(small_disk)}
    assert found == DISK_VERDICTS, output[-4000:]
    assert ran.returncode == 0, output[-4000:]

    # A disk that stays full: one line, no traceback, what was written is whole; once
    # space is back, a resume records every case.
    (tmp_path / "cases" / "test_disk.py").write_text(
        FILLS_THE_DISK.replace('fill("ballast")', f'fill("{small_disk}/ballast")')
    )
    run_id = {"FTMATRIX_RUN_ID": "20261127T040000Z"}
    full = run(entry, tmp_path, **run_id)
    output = full.stdout + full.stderr
    assert "Traceback" not in output, output[-4000:]
    assert full.returncode == 1, output[-4000:]
    assert f"the output folder {small_disk} is full (No space left on device" in output
    assert "FTMATRIX_RESUME=1 FTMATRIX_RUN_ID=20261127T040000Z" in output
    if entry == "cli":  # the cell it stopped in, named when its nox has ended
        assert (
            "ftmatrix: 1 cell(s) stopped before they finished, so their cases without a record "
            f"have no verdict: cpu-py{current_python()}-six1.17.0 (run 20261127T040000Z): 1 of 3 "
            "collected case(s) have no record"
        ) in output
    (small_disk / "ballast").unlink()
    (tmp_path / "cases" / "test_disk.py").write_text(
        FILLS_THE_DISK.replace('fill("ballast")', "pass")
    )
    resumed = run(entry, tmp_path, **run_id, FTMATRIX_RESUME="1")
    output = resumed.stdout + resumed.stderr
    assert resumed.returncode == 0, output[-4000:]
    newest = [r for r in records_of(small_disk) if r["run_id"] == "20261127T040000Z"]
    assert sorted(r["case"].split("::")[-1] for r in newest) == sorted(found)


def test_a_full_disk_loses_no_record_of_a_pytest_xdist_worker(
    tmp_path: Path, small_disk: Path
) -> None:
    # A worker's running-case note is a file of its own, made when it starts its first
    # case: one the full disk refused ended the worker's pytest (an INTERNALERROR).
    disk_filling_cell(tmp_path, workers=2)
    ran = run("cli", tmp_path, FTMATRIX_RUN_ID="20261127T050000Z")
    output = ran.stdout + ran.stderr
    assert "Traceback" not in output, output[-4000:]
    # The worker handed the record the disk refused to the supervisor, which wrote it
    # once it had freed the case's working folder: the case ran once.
    assert "the record of test_disk.py::test_b_fills_the_disk_where_it_runs waits" in output
    assert all(not r["attempts"] for r in records_of(small_disk))
    found = {r["case"].split("::")[-1]: r["status"] for r in records_of(small_disk)}
    assert found == DISK_VERDICTS, output[-4000:]
    assert ran.returncode == 0, output[-4000:]


HALF_BUILT = """
import sys
from setuptools import setup

if "bdist_wheel" in sys.argv:
    raise SystemExit("halfpkg: the build dies half way")
setup(name="halfpkg", version="1.0", py_modules=["halfpkg"])
"""


@pytest.mark.parametrize("entry", ["cli", "nox"])
def test_a_run_whose_only_cell_has_no_verdict_still_writes_its_report(
    tmp_path: Path, entry: str
) -> None:
    """An install that dies half way (metadata builds, the wheel does not): the cell's one
    record is an install-error, and the report says so. Its session used to end before it
    queued the report: the last run's report stayed, green, as if it were this one's."""
    source = tmp_path / "halfpkg-1.0"
    source.mkdir()
    (source / "setup.py").write_text(HALF_BUILT)
    (source / "halfpkg.py").write_text("")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    subprocess.run(
        ["tar", "czf", str(wheels / "halfpkg-1.0.tar.gz"), "-C", str(tmp_path), "halfpkg-1.0"],
        check=True,
    )
    (tmp_path / "cases").mkdir()
    (tmp_path / "cases" / "test_a.py").write_text("def test_ok():\n    pass\n")
    (tmp_path / "matrix.yaml").write_text(
        f'python: ["{current_python()}"]\n'
        'packages:\n  six: ["1.17.0"]\n  halfpkg: ["1.0"]\n'
        f"install: {{find-links: [{json.dumps(str(wheels))}]}}\n"
    )
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "summary.md").write_text("# the last run's report\n\n1 pass\n")

    ran = run(entry, tmp_path)
    output = ran.stdout + ran.stderr
    assert ran.returncode == 1, output[-4000:]
    assert "Traceback" not in output, output[-4000:]
    [record] = records_of(tmp_path / "out")
    assert (record["status"], record["case"]) == ("install-error", "*")
    assert "the build dies half way" in record["reason"]
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert "1 install-error" in summary and "the last run's report" not in summary


@pytest.mark.parametrize("at_once", ["1", "2"])
def test_the_cells_a_nox_stopped_before_they_started_fail_the_report_built_after(
    tmp_path: Path, at_once: str
) -> None:
    """`nox -x -s matrix` stops once a cell fails (no Python for it: an install-error, its
    verdict): the cells it never started were noted by none, and `ftmatrix report` said the
    run's first cells as if they were all of it, exit 0. The run's first cell notes every
    cell its nox queued, in that nox (`-j 1`) or in a child of its parallel scheduler."""
    missing = absent_python()
    if missing is None:
        pytest.skip("this machine has an interpreter for every Python 3.9 to 3.15")
    (tmp_path / "cases").mkdir()
    (tmp_path / "cases" / "test_a.py").write_text("def test_ok():\n    pass\n")
    (tmp_path / "matrix.yaml").write_text(
        f'python: ["{missing}"]\n'
        'packages:\n  six: ["1.16.0", "1.17.0"]\n  attrs: ["23.2.0", "25.3.0"]\n'
    )
    ran = run("nox", tmp_path, "-x", "-j", at_once)
    output = ran.stdout + ran.stderr
    assert ran.returncode == 1, output[-4000:]
    # -j 2 starts two cells at once, -j 1 one; -x starts none after the first fails.
    started = {r["cell_label"] for r in records_of(tmp_path / "out")}
    assert len(started) == int(at_once), output[-4000:]
    every = {
        f"cpu-py{missing}-six{six}-attrs{attrs}"
        for six in ("1.16.0", "1.17.0")
        for attrs in ("23.2.0", "25.3.0")
    }
    never = sorted(every - started)

    reported = subprocess.run(
        [sys.executable, "-m", "ftmatrix", "report"],
        env={**os.environ, "FTMATRIX_OUT": str(tmp_path / "out"), "CI": "true"},
        cwd=tmp_path, capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    assert reported.returncode == 1, reported.stdout + reported.stderr
    assert (
        f"ftmatrix: {len(never)} planned cell(s) produced no records, so no verdict "
        f"(see plan.json): {', '.join(never)}"
    ) in reported.stderr
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["planned_without_records"] == never


@pytest.mark.parametrize(
    ("options", "says", "recorded"),
    [
        # nox skipped every session for a Python it could not find: exit 0, no report
        (["--force-python", "3.99"], "Python interpreter 3.99 not found", False),
        # nox ran the cells with no venv at all: a traceback, no record
        (["--no-venv"], "nox made this cell no venv (--no-venv", True),
        (["--force-venv-backend", "none"], "nox made this cell no venv (--no-venv", True),
    ],
)
def test_a_cell_nox_would_skip_or_run_without_its_venv_is_counted(
    tmp_path: Path, options: list[str], says: str, recorded: bool
) -> None:
    one_cell(tmp_path, "test_a.py", "def test_ok():\n    pass\n")
    ran = run("nox", tmp_path, *options)
    output = ran.stdout + ran.stderr
    assert ran.returncode == 1, output[-4000:]
    assert "Traceback" not in output, output[-4000:]
    assert says in output, output[-4000:]
    if recorded:  # the cell's one record says why, and the report counts it
        [record] = records_of(tmp_path / "out")
        assert (record["status"], record["case"]) == ("install-error", "*")
        assert "1 install-error" in (tmp_path / "out" / "summary.md").read_text()


def fill_disk(path: Path) -> None:
    """Write ``path`` until its disk refuses a byte more."""
    for size in (2**16, 2**12, 1):
        try:
            with path.open("ab", buffering=0) as ballast:
                while True:
                    ballast.write(b"x" * size)
        except OSError:  # No space left on device
            pass


def report_into(entry: str, out: Path) -> subprocess.CompletedProcess[str]:
    """``ftmatrix report`` or ``nox -s report`` into ``out``."""
    if entry == "cli":
        command = [sys.executable, "-m", "ftmatrix", "report", "--out", str(out)]
    else:
        command = [sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py"), "-s", "report"]
    return subprocess.run(
        command, env={**os.environ, "FTMATRIX_OUT": str(out)}, cwd=out.parent,
        capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip


@pytest.mark.parametrize("entry", ["cli", "nox"])
@pytest.mark.parametrize("stage", ["the report", "the site"])
def test_a_disk_that_fills_in_the_middle_of_the_report_is_one_line_and_keeps_the_last_site(
    small_disk: Path, entry: str, stage: str
) -> None:
    run_id = "20261127T040000Z"
    CellRecordFile(CellFiles.of(small_disk, run_id, "abc123def456").records).add(
        make_record(run_id=run_id)
    )
    first = report_into(entry, small_disk)
    assert first.returncode == 0, (first.stdout + first.stderr)[-3000:]
    site = (small_disk / "site" / "index.html").read_bytes()
    room = 32 * 1024  # the history's journal fits, the page (with its styles) does not
    assert len(site) > room
    ballast = small_disk / "ballast"
    fill_disk(ballast)
    os.truncate(ballast, ballast.stat().st_size - room)
    if stage == "the site":  # the rendered files written anew fit; their copies do not
        for name in ("index.html", "results.json", "summary.md"):
            (small_disk / name).unlink()

    ran = report_into(entry, small_disk)
    output = ran.stdout + ran.stderr
    assert ran.returncode == 13, output[-3000:]  # nox's session ends with the same code
    assert "Traceback" not in output, output[-3000:]
    assert "cannot be written: No space left on device. What was written before is whole" in output
    assert (small_disk / "site" / "index.html").read_bytes() == site
    assert not (small_disk / ".site.building").exists()  # its space given back
    ballast.unlink()
    again = report_into(entry, small_disk)
    assert again.returncode == 0, (again.stdout + again.stderr)[-3000:]


# Counts every call of check_uv_settings in every Python process of the run that imports
# ftmatrix (the CLI, nox, nox's parallel children, the chores; a cell's processes do not
# get the caller's PYTHONPATH), a line each in the file FTMATRIX_TEST_UV_CHECKS names.
COUNTING_SITECUSTOMIZE = """
import os

try:
    from ftmatrix import interpreters
except ImportError:
    pass
else:
    checked = interpreters.check_uv_settings

    def counted(env, folder=None):
        with open(os.environ["FTMATRIX_TEST_UV_CHECKS"], "a") as log:
            log.write(f"{os.getpid()}\\n")
        return checked(env, folder)

    interpreters.check_uv_settings = counted
"""


@pytest.mark.parametrize("entry", ["cli", "nox", "nox-plan"])
def test_the_uv_settings_are_checked_once_a_run(tmp_path: Path, entry: str) -> None:
    """`ftmatrix run` checked them, then the nox it started checked them again (and each
    parallel child of nox, which loads the noxfile again, once more); `nox -s plan` in its
    listing, then in the `ftmatrix plan` it runs."""
    (tmp_path / "cases").mkdir()
    (tmp_path / "cases" / "test_one.py").write_text("def test_one():\n    pass\n")
    (tmp_path / "matrix.yaml").write_text(
        f'python: ["{current_python()}"]\n'
        'packages:\n  six: ["1.16.0", "1.17.0"]\n'
        "limits: {cells: 2}\n"  # two cells side by side: nox's parallel children
    )
    spy = tmp_path / "spy"
    spy.mkdir()
    (spy / "sitecustomize.py").write_text(COUNTING_SITECUSTOMIZE)
    checks = tmp_path / "checks.txt"
    variables = {"PYTHONPATH": str(spy), "FTMATRIX_TEST_UV_CHECKS": str(checks)}
    if entry == "nox-plan":
        ran = subprocess.run(
            [sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py"), "-s", "plan"],
            env={**os.environ, "FTMATRIX_MATRIX": str(tmp_path / "matrix.yaml"), **variables},
            cwd=tmp_path,
            capture_output=True,
            text=True,
            check=False,
            timeout=600,
        )
        assert "2 cells selected" in ran.stdout, (ran.stdout + ran.stderr)[-4000:]
    else:
        ran = run(entry, tmp_path, FTMATRIX_RUN_ID="20261127T000000Z", **variables)
        assert len(records_of(tmp_path / "out")) == 2  # both cells ran
    assert ran.returncode == 0, (ran.stdout + ran.stderr)[-4000:]
    assert len(checks.read_text().split()) == 1


OWN_SESSIONS = """
import sys

import nox
{imported}


@nox.session(python="3.99")
def own(session):
    session.run("python", "--version")


@nox.session(python=sys.executable)
def own_venv(session):
    pass
"""


@pytest.mark.parametrize(
    ("imported", "options", "code", "says"),
    [
        # nox's default outside CI: a session whose Python the machine lacks is skipped
        ("", [], 0, "Session own skipped: Python interpreter 3.99 not found"),
        # ftmatrix's sessions set error_on_missing_interpreters for the whole nox run
        ("from ftmatrix.sessions import *", [], 1, "Session own failed: Python interpreter 3.99"),
        # the command line beats the noxfile (and would let a skipped cell pass too)
        (
            "from ftmatrix.sessions import *",
            ["--no-error-on-missing-interpreters"],
            0,
            "Session own skipped: Python interpreter 3.99 not found",
        ),
    ],
)
def test_a_noxfiles_own_session_whose_python_is_missing_fails_once_it_imports_the_sessions(
    tmp_path: Path, imported: str, options: list[str], code: int, says: str
) -> None:
    """nox decides error_on_missing_interpreters for the whole run, not per session (nox
    2026.10.20: SessionRunner.execute reads global_config alone), so the strictness the
    matrix needs reaches a noxfile's own sessions: docs/reference/sessions.md says so.
    download_python has a form per session: the cells' "never" stays theirs."""
    ran = own_nox(tmp_path, imported, *options, "-s", "own")
    output = ran.stdout + ran.stderr
    assert ran.returncode == code, output[-3000:]
    assert says in output, output[-3000:]
    # The noxfile's own session asks for a download as nox's default does (nox says it has
    # no downloader for its default backend): the cells' "never" is not its.
    assert "can't download Python" in output, output[-3000:]


def test_a_noxfiles_own_session_keeps_noxs_venv_backend_and_the_cells_have_uvs(
    tmp_path: Path,
) -> None:
    ran = own_nox(tmp_path, "from ftmatrix.sessions import *", "-s", "own_venv", "matrix")
    assert ran.returncode == 0, (ran.stdout + ran.stderr)[-3000:]
    made = {cfg.parent.name: cfg.read_text() for cfg in (tmp_path / ".nox").glob("*/pyvenv.cfg")}
    assert "virtualenv = " in made.pop("own_venv")  # nox's default backend, not ours
    assert made, "the cell made no venv"
    assert all("uv = " in text for text in made.values()), made


def own_nox(tmp_path: Path, imported: str, *args: str) -> subprocess.CompletedProcess[str]:
    """nox over a noxfile with sessions of its own (and ftmatrix's where ``imported``)."""
    write_matrix(tmp_path, [current_python()])
    (tmp_path / "cases").mkdir(exist_ok=True)
    (tmp_path / "cases" / "test_one.py").write_text("def test_one():\n    pass\n")
    (tmp_path / "noxfile.py").write_text(OWN_SESSIONS.format(imported=imported))
    # nox errors on CI anyway; NOX_* settings (a runner's default backend) are not nox's
    # defaults these tests expect.
    env = {k: v for k, v in os.environ.items() if k != "CI" and not k.startswith("NOX_")}
    return subprocess.run(
        [sys.executable, "-m", "nox", "-f", "noxfile.py", *args],
        env={**env, "FTMATRIX_OUT": str(tmp_path / "out")},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
