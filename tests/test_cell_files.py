"""A cell's files by name: one object, and the names a run, a resume, CI's artifacts and
the report's readers find on disk (they must not move)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ftmatrix.cell.files import (
    DONE_SUFFIX,
    OWNER_SUFFIX,
    QUARANTINE_SUFFIX,
    RECORDS_SUFFIX,
    CellFiles,
    is_run_id,
)

OUT = Path("/out")
FILES = CellFiles.of(OUT, "20261127T000000Z", "abc123def456")


@pytest.mark.parametrize(
    ("path", "name"),
    [
        (FILES.records, "abc123def456.jsonl"),
        (FILES.owner, "abc123def456.owner"),
        (FILES.lock, "abc123def456.lock.txt"),
        (FILES.install_list, "abc123def456.install.txt"),
        (FILES.cell_info, "abc123def456.cell.json"),
        (FILES.state, "abc123def456.state.json"),
        (FILES.done, "abc123def456.done.json"),
        (FILES.log, "abc123def456.log"),
        (FILES.quarantine, "abc123def456.jsonl.quarantine"),
        (FILES.collected, "abc123def456.jsonl.cases"),
        (FILES.isolated, "abc123def456.jsonl.isolated"),
        (FILES.starts, "abc123def456.jsonl.starts"),
        (FILES.first_tries, "abc123def456.jsonl.first-tries"),
        (FILES.running_case(), "abc123def456.jsonl.current"),
        (FILES.running_case("gw1"), "abc123def456.jsonl.current.gw1"),
    ],
)
def test_every_file_of_a_cell_lies_in_its_run_folder_under_its_name(path: Path, name: str):
    assert path == OUT / "records" / "20261127T000000Z" / name
    assert FILES.run_folder == path.parent


def test_the_globbed_suffixes_are_the_names_the_files_get():
    """The readers that list a run folder (the history's done markers, the report's
    quarantine notice, the runs in progress) glob these suffixes."""
    assert FILES.records.name.endswith(RECORDS_SUFFIX)
    assert FILES.done.name.endswith(DONE_SUFFIX)
    assert FILES.owner.name.endswith(OWNER_SUFFIX)
    assert FILES.quarantine.name.endswith(QUARANTINE_SUFFIX)
    assert FILES.cell_id == "abc123def456"


def test_the_plugin_and_the_runner_name_the_same_files(tmp_path: Path):
    """The plugin knows only its --ftmatrix-record path; the names it derives are the
    runner's, and a worker's note is found among the cell's, never another cell's."""
    runner = CellFiles.of(tmp_path, "r1", "c1")
    plugin = CellFiles(runner.records)
    assert plugin == runner
    runner.run_folder.mkdir(parents=True)
    for note in (plugin.running_case("gw0"), plugin.running_case("gw1")):
        note.write_text("{}")
    CellFiles.of(tmp_path, "r1", "c10").running_case("gw0").write_text("{}")
    assert runner.workers_running_cases() == [
        runner.run_folder / "c1.jsonl.current.gw0",
        runner.run_folder / "c1.jsonl.current.gw1",
    ]


@pytest.mark.parametrize(
    ("text", "ok"),
    [("20261127T000000Z", True), ("ci-smoke.1_a", True), ("../x", False), ("a..b", False)],
)
def test_a_run_id_is_a_plain_folder_name(text: str, ok: bool):
    assert is_run_id(text) is ok
