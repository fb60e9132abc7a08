"""Record lines of another run or cell in a cell's records file (``records/<run-id>/
<cell-id>.jsonl``): a line copied from another run's file, a file renamed or concatenated
by hand, a line a case wrote. None is a verdict of the cell: each is said where damaged
lines are said (the report's notice, the run's log), kept apart in the cell's quarantine
file, never counted, and its case runs again on resume. The flows that honestly write a
cell's records (the plugin, the supervisor's verdicts, reuse carrying an earlier night's
records) still read back whole.

The resume and the supervisor's side run real cells (slow tier), as tests/test_unlucky_run.py
does; the rest reads real files.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import date
from pathlib import Path

import pytest
from conftest import make_record, records_of, run

from ftmatrix.case_verdicts import no_verdict
from ftmatrix.cell.files import CellFiles
from ftmatrix.cell.records import CellRecordFile, compact_records, scan_records
from ftmatrix.cell.status import Status
from ftmatrix.reuse import CellKey, EarlierRun, reuse_records_of_cell
from ftmatrix.runner import current_python

RUN, CELL = "20261127T000000Z", "abc123def456"
OTHER_RUN, OTHER_CELL = "20261126T000000Z", "def456abc123"

# Another run's record of the cell, another cell's record of the run, and both at once.
FOREIGN = [
    pytest.param(
        {"run_id": OTHER_RUN},
        f"run_id '{OTHER_RUN}', not this file's '{RUN}'",
        id="another run",
    ),
    pytest.param(
        {"cell_id": OTHER_CELL},
        f"cell_id '{OTHER_CELL}', not this file's '{CELL}'",
        id="another cell",
    ),
    pytest.param(
        {"run_id": OTHER_RUN, "cell_id": OTHER_CELL},
        f"run_id '{OTHER_RUN}', not this file's '{RUN}'; "
        f"cell_id '{OTHER_CELL}', not this file's '{CELL}'",
        id="another run and cell",
    ),
]


def ours(**fields: object) -> dict[str, object]:
    """A record of cell CELL in run RUN, as a mapping; ``fields`` set any field."""
    return {**make_record(run_id=RUN, cell_id=CELL).to_dict(), **fields}


def cell_file(out: Path, *lines: dict[str, object]) -> Path:
    """CELL's records file in run RUN under ``out``, holding ``lines`` (as written)."""
    path = CellFiles.of(out, RUN, CELL).records
    path.parent.mkdir(parents=True)
    path.write_text("".join(json.dumps(line, sort_keys=True) + "\n" for line in lines))
    return path


def report(out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ftmatrix", "report", "--out", str(out)],
        env={k: v for k, v in os.environ.items() if not k.startswith("FTMATRIX_")},
        capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip


@pytest.mark.parametrize(("foreign", "why"), FOREIGN)
def test_a_line_of_another_run_or_cell_is_no_record_of_the_cell_and_says_why(
    tmp_path: Path, foreign: dict[str, object], why: str
) -> None:
    path = cell_file(tmp_path, ours(case="a.py::t"), ours(case="b.py::t", status="fail", **foreign))
    scan = scan_records(path)
    assert [r.case for r in scan.records] == ["a.py::t"]
    assert scan.problems == (f"{path}:2: skipped: a record of another run or cell ({why})",)
    assert (len(scan.damaged), scan.foreign) == (1, 1)
    # Not even as the newer line of a case the file has a record of.
    cell_file(tmp_path / "later", ours(case="a.py::t"), ours(case="a.py::t", **foreign))
    later = scan_records(CellFiles.of(tmp_path / "later", RUN, CELL).records)
    assert [(r.case, r.run_id, r.cell_id) for r in later.records] == [("a.py::t", RUN, CELL)]


def test_compacting_moves_them_to_the_quarantine_and_says_what_it_moved(tmp_path: Path) -> None:
    foreign = ours(case="b.py::t", run_id=OTHER_RUN)
    path = cell_file(tmp_path, ours(case="a.py::t"), foreign)
    with path.open("ab") as handle:
        handle.write(b'{"case": "torn\n')
    scan = compact_records(path)
    kept = CellFiles(path).quarantine.read_bytes().splitlines()
    assert kept == [json.dumps(foreign, sort_keys=True).encode(), b'{"case": "torn']
    assert [json.loads(line)["case"] for line in path.read_text().splitlines()] == ["a.py::t"]
    assert scan.kept_apart() == (
        "1 unreadable record line(s) and 1 record line(s) of another run or cell"
    )
    assert scan_records(path).problems == ()


def test_the_report_never_counts_them_says_so_and_exits_1(tmp_path: Path) -> None:
    """An earlier run's file copied into this run's, a line of another cell appended: the
    earlier run's own record stands, the other cell gets no record it never made."""
    earlier = CellFiles.of(tmp_path, OTHER_RUN, CELL).records
    CellRecordFile(earlier).add(make_record(run_id=OTHER_RUN, cell_id=CELL, case="b.py::t"))
    copied = ours(
        case="b.py::t", run_id=OTHER_RUN, status="fail", finished_at="2026-11-27T01:00:00+00:00"
    )
    elsewhere = ours(case="c.py::t", cell_id=OTHER_CELL, cell_label="cpu-other")
    path = cell_file(tmp_path, ours(case="a.py::t"), copied, elsewhere)
    ran = report(tmp_path)
    assert (ran.returncode, "Traceback" in ran.stderr) == (1, False), ran.stderr
    assert "ftmatrix: 2 record line(s) could not be read or were kept out" in ran.stderr
    assert f"{path}:2: skipped: a record of another run or cell (run_id '{OTHER_RUN}'" in ran.stderr
    assert (
        f"{path}:3: skipped: a record of another run or cell (cell_id '{OTHER_CELL}'" in ran.stderr
    )
    results = json.loads((tmp_path / "results.json").read_text())
    assert len(results["unreadable_records"]) == 2
    shown = {(r["run_id"], r["cell_id"], r["case"], r["status"]) for r in results["records"]}
    assert shown == {(RUN, CELL, "a.py::t", "pass")}
    history = sqlite_rows(tmp_path / "history.sqlite")
    assert history == [(OTHER_RUN, CELL, "b.py::t", "pass"), (RUN, CELL, "a.py::t", "pass")]
    assert "2 record line(s) could not be read" in (tmp_path / "summary.md").read_text()

    compact_records(path)  # as a resume does
    ran = report(tmp_path)
    assert ran.returncode == 0, ran.stderr
    (kept,) = json.loads((tmp_path / "results.json").read_text())["unreadable_records"]
    assert kept.endswith(
        f"{CELL}.jsonl.quarantine: 2 record line(s) of another run or cell kept apart "
        "(quarantined); a resumed run ran their cases again"
    )


@pytest.mark.parametrize(
    "place",
    [
        "stray.jsonl",  # beside the runs
        f"{RUN}/sub/{CELL}.jsonl",  # in a folder within a run's
        f"{RUN}/.kept/{CELL}.jsonl",
        f".old/{RUN}/{CELL}.jsonl",  # a run's folder kept in a hidden folder
        f"backup/{RUN}/old/{CELL}.jsonl",
    ],
)
def test_a_records_file_out_of_a_runs_place_is_never_merged_and_says_so(
    tmp_path: Path, place: str
) -> None:
    """Only ``records/<run-id>/<cell-id>.jsonl`` says whose records a file holds: a file
    anywhere else under records/ would have its lines merged unchecked (another run's, a
    cell's pass it never made)."""
    cell_file(tmp_path, ours(case="a.py::t"))
    stray = tmp_path / "records" / place
    stray.parent.mkdir(parents=True, exist_ok=True)
    stray.write_text(json.dumps(ours(case="z.py::t", status="fail"), sort_keys=True) + "\n")
    ran = report(tmp_path)
    assert "Traceback" not in ran.stderr, ran.stderr
    if ran.returncode == 14:  # a folder where the run's files belong: the run's own check
        assert ran.stderr.count("\n") == 1 and "is a folder" in ran.stderr
        return
    assert ran.returncode == 1, ran.stderr
    assert f"{stray}: skipped: not where a run keeps a cell's records" in ran.stderr
    results = json.loads((tmp_path / "results.json").read_text())
    assert {r["case"] for r in results["records"]} == {"a.py::t"}
    assert sqlite_rows(tmp_path / "history.sqlite") == [(RUN, CELL, "a.py::t", "pass")]


def sqlite_rows(path: Path) -> list[tuple[str, ...]]:
    import sqlite3

    connection = sqlite3.connect(path)
    try:
        return sorted(
            connection.execute("SELECT run_id, cell_id, case_id, status FROM records").fetchall()
        )
    finally:
        connection.close()


def test_a_cell_whose_every_line_is_foreign_says_so_as_it_has_no_verdict(tmp_path: Path) -> None:
    path = cell_file(tmp_path, ours(case="a.py::t", run_id=OTHER_RUN))
    compact_records(path)
    quarantine = CellFiles(path).quarantine
    assert no_verdict([], quarantine) == (
        f"no record of the cell could be read: its quarantine file {quarantine} holds "
        "1 record line(s) of another run or cell"
    )


def test_the_records_reuse_carries_into_a_run_stay_the_cells(tmp_path: Path) -> None:
    """Reuse writes an earlier night's records into tonight's run: with tonight's run id
    (``reused_from`` keeps the night that ran them), so they read back whole."""
    key = CellKey(lock_id="lock", cases_id="cases", hardware_id="cpu")
    earlier = EarlierRun(
        run_id=OTHER_RUN,
        key=key,
        records=(make_record(run_id=OTHER_RUN, cell_id=CELL, case="a.py::t"),),
        since=OTHER_RUN,
        ran_on=date(2026, 11, 26),
    )
    reuse_records_of_cell(tmp_path, RUN, CELL, earlier, key)
    scan = scan_records(CellFiles.of(tmp_path, RUN, CELL).records)
    assert scan.problems == ()
    assert [(r.run_id, r.reused_from) for r in scan.records] == [(RUN, OTHER_RUN)]


def test_a_file_no_run_names_is_read_as_it_is(tmp_path: Path) -> None:
    """Only a file in a run's place says whose records it holds."""
    path = tmp_path / "kept" / "cell.jsonl"
    CellRecordFile(path).add(make_record(run_id=OTHER_RUN, cell_id=OTHER_CELL))
    assert (len(scan_records(path).records), scan_records(path).problems) == (1, ())


# The real path: a run, a resume, a case that writes a line of another run into its cell's
# records. Slow tier: real venvs (six only, from uv's cache) and real subprocesses.

TWO_CASES = """
import sys


def test_a():
    assert sys.version_info >= (3, 9)


def test_b():
    assert sys.version_info >= (3, 9)
"""


def one_cell(folder: Path, cases: str) -> None:
    """In ``folder``: ``cases/test_cell.py`` holding ``cases``, and a matrix of one cell."""
    (folder / "cases").mkdir()
    (folder / "cases" / "test_cell.py").write_text(cases)
    (folder / "matrix.yaml").write_text(
        f'python: ["{current_python()}"]\npackages:\n  six: ["1.17.0"]\n'
        "timeouts: {case: 60, cell: 300}\nlimits: {workers: 1}\n"
    )


@pytest.mark.slow
@pytest.mark.parametrize("field", ["run_id", "cell_id"])
def test_a_resume_runs_again_a_case_whose_only_record_is_another_runs_or_cells(
    tmp_path: Path, field: str
) -> None:
    one_cell(tmp_path, TWO_CASES)
    first, second = {"FTMATRIX_RUN_ID": OTHER_RUN}, {"FTMATRIX_RUN_ID": RUN}
    for run_id in (first, second):
        ran = run("cli", tmp_path, **run_id)
        assert ran.returncode == 0, (ran.stdout + ran.stderr)[-4000:]
    (path,) = (tmp_path / "out" / "records" / RUN).glob("*.jsonl")
    (earlier,) = (tmp_path / "out" / "records" / OTHER_RUN).glob("*.jsonl")
    # test_b's line replaced: by the earlier run's (a file copied in), or by the same
    # run's line of a cell renamed (another cell's), as a failure; the cell unfinished.
    mine, theirs = (
        [json.loads(line) for line in p.read_text().splitlines()] for p in (path, earlier)
    )
    kept = [r for r in mine if r["case"].endswith("test_a")]
    (foreign,) = (
        r for r in (theirs if field == "run_id" else mine) if r["case"].endswith("test_b")
    )
    foreign = {**foreign, "status": "fail", "message": "not this cell's"}
    if field == "cell_id":
        foreign["cell_id"] = OTHER_CELL
    path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in [*kept, foreign]))
    CellFiles(path).done.unlink()

    resumed = run("cli", tmp_path, **second, FTMATRIX_RESUME="1")
    output = resumed.stdout + resumed.stderr
    assert resumed.returncode == 0, output[-4000:]
    assert "Traceback" not in output
    assert "1 record line(s) of another run or cell moved to" in output
    assert "1 case: 0 fail, 1 pass" in output  # test_b ran again; test_a did not
    now = {r["case"].split("::")[-1]: (r["run_id"], r["status"]) for r in records_of_file(path)}
    assert now == {"test_a": (RUN, "pass"), "test_b": (RUN, "pass")}
    (quarantined,) = CellFiles(path).quarantine.read_bytes().splitlines()
    assert json.loads(quarantined) == foreign  # the bytes as found
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    (notice,) = results["unreadable_records"]
    assert "1 record line(s) of another run or cell kept apart (quarantined)" in notice
    assert {r["status"] for r in records_of(tmp_path / "out")} == {"pass"}


def records_of_file(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


WRITES_ANOTHER_RUNS_LINE_AND_DIES = """
import json
import os
import sys
from pathlib import Path


def test_a():
    assert sys.version_info >= (3, 9)


def test_b_claims_a_pass_of_another_run_and_dies():
    (records,) = Path(os.environ["FTMATRIX_TEST_OUT"]).glob("records/*/*.jsonl")
    line = json.loads(records.read_text().splitlines()[0])
    line.update(case=os.environ["FTMATRIX_RUNNING_CASE"], run_id="20200101T000000Z")
    with records.open("a") as handle:
        handle.write(json.dumps(line) + "\\n")
    os._exit(3)
"""


@pytest.mark.slow
def test_a_line_of_another_run_a_case_writes_is_no_verdict_and_its_crash_is(
    tmp_path: Path,
) -> None:
    """The supervisor reads the records as they grow: a line of another run that a case
    wrote before it died is not the case's record; the case is a crash, the line kept apart."""
    one_cell(tmp_path, WRITES_ANOTHER_RUNS_LINE_AND_DIES)
    out = str(tmp_path / "out")
    ran = run("cli", tmp_path, FTMATRIX_RUN_ID=RUN, FTMATRIX_TEST_OUT=out)
    output = ran.stdout + ran.stderr
    assert ran.returncode == 0, output[-4000:]
    assert "Traceback" not in output
    (path,) = (tmp_path / "out" / "records" / RUN).glob("*.jsonl")
    found = {r["case"].split("::")[-1]: r for r in records_of_file(path)}
    dies = found["test_b_claims_a_pass_of_another_run_and_dies"]
    assert (dies["run_id"], dies["status"]) == (RUN, Status.CRASH.value)
    assert found["test_a"]["status"] == "pass"
    kept = CellFiles(path).quarantine.read_bytes().splitlines()
    assert {json.loads(line)["run_id"] for line in kept} == {"20200101T000000Z"}
    assert (
        f"{len(kept)} record line(s) of another run or cell moved to"
        in path.with_name(path.name.removesuffix(".jsonl") + ".log").read_text()
    )
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert {r["run_id"] for r in results["records"]} == {RUN}
