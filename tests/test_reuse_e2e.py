"""Result reuse with real cells: real nox, uv and pytest, nights after a first night.

Slow tier. Four cells (tests/data/reuse_matrix.yaml): six 1.16.0/1.17.0 x requests
none/2.32.5. The one selected case appends a line to FTMATRIX_REUSE_LOG, so what ran is
seen from outside the cells. UV_EXCLUDE_NEWER freezes the index: on BEFORE the floating
certifi (requests' dependency) resolves to 2026.6.17, on AFTER to 2026.7.22 (released
2026-07-22T03:35Z; nothing else in these cells' locks moved in between, which
test_only_certifi_moves_between_the_two_dates checks).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from ftmatrix.cell.record import Record
from ftmatrix.cell.records import read_records
from ftmatrix.cli import build_parser, dispatch, main
from ftmatrix.pipeline import load, resolve_cells
from ftmatrix.resolve import locked_packages

ROOT = Path(__file__).parent.parent
DATA = Path(__file__).parent / "data"
BEFORE = "2026-07-21T00:00:00Z"
AFTER = "2026-07-23T00:00:00Z"
CELLS = 4
REQUESTS_CELLS = 2

pytestmark = pytest.mark.slow


class Nights:
    """A work folder (cases, reports) whose nights run through nox, one run id each."""

    def __init__(self, work: Path, envdir: Path) -> None:
        self.work = work
        self.envdir = envdir
        self.count = 0

    @property
    def cases(self) -> Path:
        return self.work / "cases"

    @property
    def out(self) -> Path:
        return self.work / "out"

    def env(self, **extra: str) -> dict[str, str]:
        return {
            **os.environ,
            "FTMATRIX_MATRIX": str(DATA / "reuse_matrix.yaml"),
            "FTMATRIX_CASES": str(self.cases),
            "FTMATRIX_OUT": str(self.out),
            "FTMATRIX_REUSE_LOG": str(self.work / "ran.log"),
            "UV_EXCLUDE_NEWER": BEFORE,
            **extra,
        }

    def run(self, *, cells: int = CELLS, **extra: str) -> tuple[list[str], list[Record]]:
        """One night of ``cells`` cells: the lines the cases logged, and the night's records."""
        self.count += 1
        run_id = f"2026120{self.count}T020000Z"
        log = self.work / "ran.log"
        log.unlink(missing_ok=True)
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "nox",
                "-f",
                str(ROOT / "noxfile.py"),
                "--envdir",
                str(self.envdir),
                "-s",
                "matrix",
            ],
            env={**self.env(**extra), "FTMATRIX_RUN_ID": run_id},
            capture_output=True,
            text=True,
            check=False,
        )
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        lines = log.read_text().splitlines() if log.exists() else []
        records = list(read_records(self.out / "records" / run_id).records)
        assert len({r.cell_id for r in records}) == cells, result.stdout[-3000:]
        return lines, records


def ran(records: list[Record]) -> set[str]:
    return {r.cell_label for r in records if r.reused_from is None}


def reused(records: list[Record]) -> set[str]:
    return {r.cell_label for r in records if r.reused_from is not None}


@pytest.fixture(scope="module")
def first_night(tmp_path_factory: pytest.TempPathFactory) -> Nights:
    """Night 1: every cell runs (uv's cache is warm; the venvs are made here)."""
    base = tmp_path_factory.mktemp("reuse")
    nights = Nights(base / "work", base / "envs")
    shutil.copytree(DATA / "reuse_cases", nights.cases)
    lines, records = nights.run()
    assert len(lines) == CELLS
    assert ran(records) == {r.cell_label for r in records}
    return nights


@pytest.fixture
def nights(first_night: Nights, tmp_path: Path) -> Nights:
    """A copy of the first night's work folder (its history included), same venvs."""
    copy = Nights(tmp_path / "work", first_night.envdir)
    shutil.copytree(first_night.work, copy.work)
    copy.count = first_night.count
    return copy


def test_nothing_changed_runs_no_case_and_the_report_shows_every_cell_reused(nights: Nights):
    lines, records = nights.run()
    assert lines == []  # no case ran in any cell
    assert ran(records) == set()
    assert {r.reused_from for r in records} == {"20261201T020000Z"}
    summary = (nights.out / "summary.md").read_text()
    assert f"{CELLS} of {CELLS} cells reused" in summary
    assert summary.count("(reused, unchanged since 20261201T020000Z)") == CELLS
    html = (nights.out / "index.html").read_text()
    assert f"<strong>{CELLS}</strong> cells reused (unchanged since 20261201T020000Z)" in html
    assert "<strong>0</strong> cells ran" in html
    # A third night reuses from the run that really ran them, not from the second.
    _, records = nights.run()
    assert {r.reused_from for r in records} == {"20261201T020000Z"}


def test_case_files_changed_run_again_and_unselected_ones_do_not(nights: Nights):
    (nights.cases / "test_not_selected.py").write_text("def test_other():\n    pass\n")
    lines, records = nights.run()
    assert lines == []  # no cell selects that file
    (nights.cases / "helpers.py").write_text(
        (nights.cases / "helpers.py").read_text() + "\n# changed\n"
    )
    lines, records = nights.run()
    assert len(lines) == CELLS
    assert reused(records) == set()


def test_only_certifi_moves_between_the_two_dates():
    env = {**os.environ, "FTMATRIX_MATRIX": str(DATA / "reuse_matrix.yaml")}
    loaded = load(env, root=ROOT, now=datetime.now(UTC))
    cells = [c for c in loaded.selected if dict(c.pins)["requests"]]
    locks = [
        resolve_cells(cells, loaded.matrix.install, {**env, "UV_EXCLUDE_NEWER": when})[0]
        for when in (BEFORE, AFTER)
    ]
    before, after = (locked_packages(r.lock or "") for r in locks)
    assert {k for k in before if before[k] != after.get(k)} == {"certifi"}
    assert (before["certifi"], after["certifi"]) == ("2026.6.17", "2026.7.22")


def test_a_moved_package_runs_exactly_the_cells_whose_lock_holds_it(nights: Nights):
    lines, records = nights.run(UV_EXCLUDE_NEWER=AFTER)
    assert len(lines) == REQUESTS_CELLS
    assert ran(records) == {r.cell_label for r in records if r.pins.get("requests")}
    moved = {r.packages.get("certifi") for r in records if r.reused_from is None}
    assert moved == {"2026.7.22"}


def test_a_changed_machine_runs_the_cells_last_run_on_another(nights: Nights, tmp_path: Path):
    # A real nvidia-smi answer from a GPU this machine does not have: the fingerprint
    # changes for every cell run with it on PATH.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'NVIDIA L4, 23034, 550.54.15, 8.9'\n")
    smi.chmod(0o755)
    gpu = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "CUDA_VISIBLE_DEVICES": ""}
    lines, records = nights.run(cells=1, **gpu, FTMATRIX_SELECT="*six1.16.0-requests2.32.5")
    assert len(lines) == 1
    [moved] = ran(records)
    assert {r.hardware["gpus"][0]["name"] for r in records} == {"NVIDIA L4"}
    lines, records = nights.run(**gpu)
    assert len(lines) == CELLS - 1  # the one that ran on the L4 already is reused
    assert reused(records) == {moved}


def test_a_flaky_result_is_never_reused(tmp_path: Path):
    nights = Nights(tmp_path / "work", tmp_path / "envs")
    shutil.copytree(DATA / "reuse_cases", nights.cases)
    flaky = {"FTMATRIX_REUSE_FLAKY": "1.16.0"}  # a case crashes once in the six 1.16.0 cells
    _, records = nights.run(**flaky)
    flaky_cells = {r.cell_label for r in records if r.flaky}
    assert flaky_cells == {r.cell_label for r in records if r.pins["six"] == "1.16.0"}
    assert len(flaky_cells) == 2
    lines, records = nights.run(**flaky)
    assert len(lines) == 2
    assert ran(records) == flaky_cells  # the steady cells were reused
    assert not any(r.flaky for r in records)  # the second night's tries did not crash
    lines, records = nights.run(**flaky)
    assert lines == []


def test_no_reuse_runs_every_cell(nights: Nights):
    lines, records = nights.run(FTMATRIX_REUSE="0")
    assert len(lines) == CELLS
    assert reused(records) == set()


def test_the_plan_says_which_cells_run_and_why(nights: Nights, capsys: pytest.CaptureFixture[str]):
    assert main(["plan"], env=nights.env(UV_EXCLUDE_NEWER=AFTER), root=ROOT) == 0
    table = capsys.readouterr().out
    lines = {line.split()[0]: line for line in table.splitlines() if line.startswith("  cpu-")}
    for label, line in lines.items():
        if "requests2.32.5" in label:
            assert line.endswith("[run: new lock: certifi 2026.6.17->2026.7.22]"), line
        else:
            assert line.endswith("[reused (unchanged since 20261201T020000Z)]"), line
    assert table.splitlines()[-1].endswith("4 installable, 2 reused, 2 to run")

    assert main(["plan", "--json", "--no-reuse"], env=nights.env(), root=ROOT) == 0
    plan = json.loads(capsys.readouterr().out)
    assert {c["reuse"]["reason"] for c in plan["cells"]} == {"reuse off"}
    assert main(["plan", "--json"], env=nights.env(), root=ROOT) == 0
    plan = json.loads(capsys.readouterr().out)
    assert [c["reuse"] for c in plan["cells"]] == [
        {"action": "reuse", "reason": "unchanged", "since": "20261201T020000Z"}
    ] * CELLS
    # Forty days on, every cell is past max-age-days: each runs, saying so.
    later = datetime(2027, 1, 10, tzinfo=UTC)
    assert (
        dispatch(
            build_parser().parse_args(["plan", "--json"]), [], nights.env(), root=ROOT, now=later
        )
        == 0
    )
    plan = json.loads(capsys.readouterr().out)
    assert {c["reuse"]["reason"].split(" (")[0] for c in plan["cells"]} == {"too old"}


def test_ci_matrix_starts_jobs_only_for_cells_that_run(
    nights: Nights, capsys: pytest.CaptureFixture[str]
):
    env = nights.env(UV_EXCLUDE_NEWER=AFTER, FTMATRIX_RUN_ID="20261209T020000Z")
    assert main(["ci-matrix"], env=env, root=ROOT) == 0
    output = dict(line.split("=", 1) for line in capsys.readouterr().out.splitlines())
    [job] = json.loads(output["matrix"])["include"]
    running = {label for label in job["select"].split(",")}
    assert running == {
        "cpu-py3.11-six1.16.0-requests2.32.5",
        "cpu-py3.11-six1.17.0-requests2.32.5",
    }
    assert job["cells"] == REQUESTS_CELLS
    # The reused cells' records are in tonight's run already, for the report job.
    carried = read_records(nights.out / "records" / "20261209T020000Z").records
    assert {r.cell_label for r in carried} == {
        "cpu-py3.11-six1.16.0-norequests",
        "cpu-py3.11-six1.17.0-norequests",
    }
    assert {r.reused_from for r in carried} == {"20261201T020000Z"}
    # Nothing changed: no job at all (a shard with nothing to run starts no runner).
    env = nights.env(FTMATRIX_RUN_ID="20261210T020000Z")
    assert main(["ci-matrix"], env=env, root=ROOT) == 0
    output = dict(line.split("=", 1) for line in capsys.readouterr().out.splitlines())
    assert json.loads(output["matrix"]) == {"include": []}
    assert main(["ci-matrix", "--no-reuse"], env=env, root=ROOT) == 0
    output = dict(line.split("=", 1) for line in capsys.readouterr().out.splitlines())
    [job] = json.loads(output["matrix"])["include"]
    assert (len(job["select"].split(",")), job["cells"]) == (CELLS, CELLS)


def test_a_released_support_package_runs_every_cell_it_floats_in_once(tmp_path: Path):
    nights = Nights(tmp_path / "work", tmp_path / "envs")
    shutil.copytree(DATA / "reuse_cases", nights.cases)
    profile = {"FTMATRIX_PROFILE": "support"}
    lines, records = nights.run(cells=2, **profile)
    assert len(lines) == 2
    assert {r.packages["certifi"] for r in records} == {"2026.6.17"}
    lines, records = nights.run(cells=2, **profile, UV_EXCLUDE_NEWER=AFTER)
    assert len(lines) == 2
    assert {r.packages["certifi"] for r in records} == {"2026.7.22"}
    lines, records = nights.run(cells=2, **profile, UV_EXCLUDE_NEWER=AFTER)
    assert lines == []
    assert {r.reused_from for r in records} == {"20261202T020000Z"}
