"""A cell a run stopped in the middle of its cases is said, counted and fails the report.

tests/data/unfinished_cell/ holds the real files of a cell of the GPU host's run that
`timeout` killed while `test_unsloth_grpo[llama]` ran (its records: 1 pass, 1 skip; the 5
collected cases; the running-case note; no done marker); its log, lock and install list
are left out (no reader of a report reads them). Nothing is installed: the files are
what a killed run leaves.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import holding, make_record

import ftmatrix
from ftmatrix.cell.files import CellFiles
from ftmatrix.cell.record import WHOLE_CELL
from ftmatrix.cell.records import CellRecordFile
from ftmatrix.cell.status import Status
from ftmatrix.errors import SettingsError
from ftmatrix.live_runs import IN_RUN_VARIABLE, RUN_LOCK, hold_run, note_planned
from ftmatrix.report.unfinished import UnfinishedCell, unfinished_cells

EXAMPLE = Path(__file__).parent / "data" / "unfinished_cell"
SMALL_MATRIX = Path(__file__).parent / "data" / "small_matrix.yaml"
CELL = "1c57ad565d2c"
LABEL = "h100-py3.12-torch2.11.0-tf5.17.0-trl1.15.0-peft0.21.2-unsloth2026.10.7"
RUNNING = "test_unsloth.py::test_unsloth_grpo[llama]"
STOPPED = UnfinishedCell(
    run_id="gpu-host",
    cell_id=CELL,
    label=LABEL,
    collected=5,
    without_record=3,
    running=(RUNNING,),
)


def killed_run(out: Path, run_id: str = "gpu-host") -> CellFiles:
    """The GPU host's cell as `timeout` left it, in run ``run_id`` of ``out``."""
    folder = out / "records" / run_id
    folder.mkdir(parents=True)
    for path in EXAMPLE.iterdir():
        shutil.copy(path, folder / path.name)
    return CellFiles.of(out, run_id, CELL)


def finish(files: CellFiles) -> None:
    """What the runner does once a cell's records are whole."""
    files.done.write_text(json.dumps({"key": {}, "since": files.run_folder.name}))
    files.collected.unlink()
    files.running_case().unlink(missing_ok=True)


def test_the_killed_gpu_cell_is_named_with_its_unrecorded_cases_and_running_case(tmp_path):
    killed_run(tmp_path)
    assert unfinished_cells(tmp_path / "records", {}) == [STOPPED]
    # Finished (resumed), it is not news.
    finish(CellFiles.of(tmp_path, "gpu-host", CELL))
    assert unfinished_cells(tmp_path / "records", {}) == []


def test_an_install_error_has_no_done_marker_but_is_finished(tmp_path):
    """A resumed cell whose install failed: its one record is the whole cell's."""
    files = killed_run(tmp_path)
    file = CellRecordFile(files.records)
    file.records = [
        make_record(run_id="gpu-host", cell_id=CELL, case=WHOLE_CELL, status=Status.INSTALL_ERROR)
    ]
    file.save()
    assert unfinished_cells(tmp_path / "records", {}) == []


def test_only_the_newest_run_of_a_cell_counts(tmp_path):
    old = killed_run(tmp_path, "gpu-host")
    later = killed_run(tmp_path, "gpu-host-2")
    os.utime(old.records, (1, 1))  # the old run's files are older
    for path in old.run_folder.iterdir():
        os.utime(path, (1, 1))
    assert [c.run_id for c in unfinished_cells(tmp_path / "records", {})] == ["gpu-host-2"]
    finish(later)  # a later run finished it: the old run's stop is not news
    assert unfinished_cells(tmp_path / "records", {}) == []


def test_a_run_going_on_or_a_cell_running_now_is_not_unfinished(tmp_path):
    files = killed_run(tmp_path)
    holder = holding(files.run_folder / RUN_LOCK)
    try:  # the report says the run is in progress instead
        assert unfinished_cells(tmp_path / "records", {}) == []
    finally:
        holder.kill()
        holder.wait()
    holder = holding(files.owner)
    try:  # a cell of the run that builds this report, side by side with it
        assert unfinished_cells(tmp_path / "records", {IN_RUN_VARIABLE: "gpu-host"}) == []
    finally:
        holder.kill()
        holder.wait()
    assert unfinished_cells(tmp_path / "records", {IN_RUN_VARIABLE: "gpu-host"}) == [STOPPED]


def test_each_xdist_worker_names_its_running_case_and_a_recorded_one_is_dropped(tmp_path):
    files = killed_run(tmp_path)
    files.running_case().unlink()
    notes = {
        "gw0": {"case": "test_unsloth.py::test_unsloth_grpo[mistral]"},
        # Its record beat the note's removal to the disk.
        "gw1": {"case": "test_unsloth.py::test_unsloth_lora_sft"},
        # Its worker died in it before (the controller added how): a crash the supervisor
        # records once the pass ends, not what was running when the run stopped.
        "gw2": {
            "case": "test_unsloth.py::test_unsloth_4bit_qkv_lora_offloaded_checkpointing",
            "exit": -11,
        },
    }
    for worker, note in notes.items():
        files.running_case(worker).write_text(json.dumps({**note, "worker": worker}))
    (cell,) = unfinished_cells(tmp_path / "records", {})
    assert cell.running == ("test_unsloth.py::test_unsloth_grpo[mistral]",)
    for worker in notes:
        files.running_case(worker).unlink()
    (cell,) = unfinished_cells(tmp_path / "records", {})
    assert cell.running == ()
    assert "running when it stopped: none (it stopped between two cases)" in cell.describe()


@pytest.mark.parametrize("damage", ["not json", '{"a": 1}'])
def test_a_damaged_list_of_collected_cases_still_names_the_cell(tmp_path, damage):
    files = killed_run(tmp_path)
    files.collected.write_text(damage)
    (cell,) = unfinished_cells(tmp_path / "records", {})
    assert (cell.label, cell.collected, cell.without_record) == (LABEL, None, None)
    assert "its list of collected cases cannot be read" in cell.describe()


@pytest.mark.parametrize("entry", ["cli", "nox"])
def test_report_fails_and_every_format_says_the_cell_stopped(tmp_path, entry):
    killed_run(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FTMATRIX_")}
    if entry == "cli":
        command = [sys.executable, "-m", "ftmatrix", "report", "--out", str(tmp_path)]
    else:  # the package's own noxfile, as `ftmatrix run` uses it where a folder has none
        command = [
            sys.executable,
            "-m",
            "nox",
            "-f",
            str(Path(ftmatrix.__file__).parent / "_noxfile.py"),
        ]
        command += ["-s", "report"]
        env |= {"FTMATRIX_OUT": str(tmp_path), "FTMATRIX_MATRIX": str(SMALL_MATRIX)}

    def report() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            command, env=env, cwd=tmp_path, capture_output=True, text=True, check=False
        )

    ran = report()
    assert ran.returncode == 1, ran.stderr
    warning = (
        "ftmatrix: 1 cell(s) stopped before they finished, so their cases without a record "
        f"have no verdict: {LABEL} (run gpu-host): 3 of 5 collected case(s) have no record; "
        f"running when it stopped: {RUNNING}; resume the run to finish it "
        "(FTMATRIX_RESUME=1 FTMATRIX_RUN_ID=gpu-host)\n"
    )
    if entry == "cli":
        assert ran.stderr == warning
    else:
        assert warning in ran.stderr and "report ended with exit code 1" in ran.stderr
    headline = (
        "1 cell stopped before finishing its cases (the run was stopped or killed): 3 "
        "collected case(s) have no record, so no verdict for them; resume the run to finish it"
    )
    page = (tmp_path / "index.html").read_text()
    assert f"<section id=unfinished class=problems><h2>{headline}</h2>" in page
    assert (
        f"<li><code>{LABEL}</code> (run gpu-host): 3 of 5 collected case(s) have no record; "
        f"running when it stopped: <code>{RUNNING}</code>; resume: "
        "<code>FTMATRIX_RESUME=1 FTMATRIX_RUN_ID=gpu-host</code> before the run's command "
        "(<code>ftmatrix run</code> or <code>nox -s matrix</code>) runs only the cases "
        "without a record</li>"
    ) in page
    summary = (tmp_path / "summary.md").read_text()
    assert f"**{headline}**" in summary
    assert (
        f"- `{LABEL}` (run gpu-host): 3 of 5 collected case(s) have no record; running when "
        f"it stopped: `{RUNNING}`; resume: `FTMATRIX_RESUME=1 FTMATRIX_RUN_ID=gpu-host` "
        "before the run's command (`ftmatrix run` or `nox -s matrix`) runs only the cases "
        "without a record"
    ) in summary
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["unfinished_cells"] == [
        {**STOPPED.to_dict(), "resume": "FTMATRIX_RESUME=1 FTMATRIX_RUN_ID=gpu-host"}
    ]
    assert results["counts"] == {"pass": 1, "skip": 1}  # the records it has, shown as they are

    finish(CellFiles.of(tmp_path, "gpu-host", CELL))  # resumed to its end
    ran = report()
    assert ran.returncode == 0, ran.stderr
    assert "stopped before" not in ran.stderr
    assert json.loads((tmp_path / "results.json").read_text())["unfinished_cells"] == []
    assert "id=unfinished" not in (tmp_path / "index.html").read_text()


def test_case_ids_are_shown_redacted_as_their_records_are(tmp_path):
    """The plugin's list and notes keep case ids raw; its records keep them redacted."""
    files = killed_run(tmp_path)
    env = {"DEPLOY_TOKEN": "s3cretvalue42"}
    secret = "test_unsloth.py::test_unsloth_grpo[s3cretvalue42]"
    files.collected.write_text(json.dumps([secret, "test_unsloth.py::test_unsloth_lora_sft"]))
    files.running_case().write_text(json.dumps({"case": secret}))
    (cell,) = unfinished_cells(tmp_path / "records", env)
    assert cell.running == ("test_unsloth.py::test_unsloth_grpo[<redacted:DEPLOY_TOKEN>]",)
    assert (cell.collected, cell.without_record) == (2, 1)
    # Recorded (redacted, as the plugin writes it): neither running nor without a record.
    CellRecordFile(files.records).add(
        make_record(
            run_id="gpu-host",
            cell_id=CELL,
            case=secret.replace("s3cretvalue42", "<redacted:DEPLOY_TOKEN>"),
        )
    )
    (cell,) = unfinished_cells(tmp_path / "records", env)
    assert (cell.running, cell.without_record) == ((), 0)


def test_a_cell_killed_in_its_first_case_is_said_as_stopped_not_also_as_missing(tmp_path):
    # No records file yet (it is made by the first record), but its cases were collected
    # and the run planned it: one notice, the stopped cell's, and one warning.
    files = killed_run(tmp_path)
    files.records.unlink()
    note_planned(files.run_folder, {CELL: LABEL})
    env = {k: v for k, v in os.environ.items() if not k.startswith("FTMATRIX_")}
    ran = subprocess.run(
        [sys.executable, "-m", "ftmatrix", "report", "--out", str(tmp_path)],
        env=env, cwd=tmp_path, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert ran.returncode == 1, ran.stderr
    assert "5 of 5 collected case(s) have no record" in ran.stderr
    assert "produced no records" not in ran.stderr
    assert json.loads((tmp_path / "results.json").read_text())["planned_without_records"] == []


def test_a_records_folder_that_cannot_be_written_is_one_line_not_a_traceback(
    tmp_path: Path,
) -> None:
    """The run's folder under a records folder that cannot be written (read-only under a
    writable reports folder; here, a file where a folder should be): exit 7, one line."""
    records = tmp_path / "records"
    records.write_text("not a folder")
    for start in (hold_run, lambda folder: note_planned(folder, {"abc": "cpu-x"})):
        with pytest.raises(SettingsError, match="the run's records folder cannot be written"):
            start(records / "20261127T000000Z")
    if shutil.which("unshare") is None:
        return
    (tmp_path / "cases").mkdir()
    (tmp_path / "cases" / "test_x.py").write_text("def test_x():\n    pass\n")
    (tmp_path / "matrix.yaml").write_text('packages:\n  six: ["1.17.0"]\n')
    (tmp_path / "reports" / "records").mkdir(parents=True)
    ro = tmp_path / "reports" / "records"
    script = f"mount --bind -o ro {ro} {ro} && cd {tmp_path} && {sys.executable} -m ftmatrix run"
    ran = subprocess.run(
        ["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, check=False,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent / "src")},
    )  # fmt: skip
    if "mount" in ran.stderr and ran.returncode != 7:
        pytest.skip(f"no read-only bind mount here: {ran.stderr.strip()[:200]}")
    assert ran.returncode == 7, ran.stdout + ran.stderr
    assert "Traceback" not in ran.stderr
    assert "the run's records folder cannot be written (Read-only file system)" in ran.stderr
