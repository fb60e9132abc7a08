"""End to end, for real: nox builds uv venvs, installs from the index, runs cases, reports.

Slow tier: real installs (the uv cache makes repeats quick) and real subprocesses.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import records_of

from ftmatrix.cell.records import read_records
from ftmatrix.known_issues import cell_statuses, explain, load_known_issues
from ftmatrix.resolve import lock_id
from ftmatrix.sharing import usable_cpus

ROOT = Path(__file__).parent.parent
DATA = Path(__file__).parent / "data"

pytestmark = pytest.mark.slow


def nox(*args: str, env: dict[str, str], cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py"), *args],
        env={**os.environ, **env},
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
    )


def test_small_matrix_runs_every_cell_and_reports(tmp_path: Path):
    env = {
        "FTMATRIX_MATRIX": str(DATA / "small_matrix.yaml"),
        "FTMATRIX_CASES": str(DATA / "small_cases"),
        "FTMATRIX_OUT": str(tmp_path / "out"),
        "FTMATRIX_RUN_ID": "20261122T000000Z",
    }
    listed = nox("-l", env=env)
    assert listed.returncode == 0, listed.stderr
    sessions = [line.split()[1] for line in listed.stdout.splitlines() if line.startswith("* ")]
    assert sessions == [
        "matrix(cpu-py3.11-six1.16.0-attrs23.2.0)",
        "matrix(cpu-py3.11-six1.16.0-attrs25.3.0)",
        "matrix(cpu-py3.11-six1.17.0-attrs23.2.0)",
        "matrix(cpu-py3.11-six1.17.0-attrs25.3.0)",
    ]

    ran = nox("-s", "matrix", "--envdir", str(tmp_path / "envs"), env=env)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    if usable_cpus() > 1:
        # Cells side by side by default (nox's parallel sessions): the last to end reports.
        # The nox process the user started prints each cell's progress and the summary.
        assert "[ftmatrix] 4/4 cells done in " in ran.stdout
        assert "the last cell of the run to end: building the report" in ran.stdout
    else:
        assert "Running session report" in ran.stderr

    records = records_of(tmp_path / "out")
    assert len(records) == 4 * 6
    by_cell: dict[str, dict[str, str]] = {}
    for record in records:
        by_cell.setdefault(record["cell_label"], {})[record["case"].split("::")[1]] = record[
            "status"
        ]
        assert record["run_id"] == "20261122T000000Z"
        assert record["packages"]["six"] == record["pins"]["six"]  # the pins were installed
        assert "pytest" in record["packages"]
    # Each record names its environment by the hash of the lock kept beside it.
    locks = {
        path.name.split(".")[0]: lock_id(path.read_text())
        for path in (tmp_path / "out" / "records").rglob("*.lock.txt")
    }
    assert len(set(locks.values())) == 4
    assert all(record["lock_id"] == locks[record["cell_id"]] for record in records)
    # The cells' bytecode stays with their venvs (one folder per lock), not in the cases.
    assert not list((DATA / "small_cases").rglob("__pycache__"))
    kept = {p.name for p in (tmp_path / "envs").glob("*/ftmatrix-bytecode-*")}
    assert kept == {f"ftmatrix-bytecode-{lock}" for lock in locks.values()}
    old_six_old_attrs = by_cell["cpu-py3.11-six1.16.0-attrs23.2.0"]
    assert old_six_old_attrs == {
        "test_six_imports": "pass",
        "test_attrs_feature_gated": "n/a",
        "test_needs_two_gpus": "skip",
        "test_framework_result_is_checked": "fail",
        "test_framework_raises": "fail",
        "test_case_bug": "error",
    }
    new_six_new_attrs = by_cell["cpu-py3.11-six1.17.0-attrs25.3.0"]
    assert new_six_new_attrs["test_attrs_feature_gated"] == "pass"
    assert new_six_new_attrs["test_framework_result_is_checked"] == "pass"

    page = (tmp_path / "out" / "index.html").read_text()
    # One grid row per cell, named by the axes that vary, the full label kept beside it.
    assert page.count('<tr><th scope=row class=label data-cell="cpu-py3.11-six') == 4
    assert "six 1.16.0 gives the wrong answer" in page

    # The report alone re-runs nothing: same records, rebuilt page.
    again = nox("-s", "report", env=env)
    assert again.returncode == 0
    assert "Running session matrix" not in again.stderr
    assert len(records_of(tmp_path / "out")) == 4 * 6


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_cells_one_at_a_time_or_side_by_side_share_one_run_and_the_report_follows(
    tmp_path: Path, jobs: str
):
    env = {
        "FTMATRIX_MATRIX": str(DATA / "small_matrix.yaml"),
        "FTMATRIX_CASES": str(DATA / "small_cases"),
        "FTMATRIX_OUT": str(tmp_path / "out"),
    }
    ran = nox("-j", jobs, "-s", "matrix", "--envdir", str(tmp_path / "envs"), env=env)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    records = records_of(tmp_path / "out")
    assert len(records) == 4 * 6
    assert len({r["run_id"] for r in records}) == 1
    page = (tmp_path / "out" / "index.html").read_text()
    assert page.count('<tr><th scope=row class=label data-cell="cpu-py3.11-six') == 4
    if jobs == "1":  # one after another in one nox: the report session is queued after them
        assert "Running session report" in ran.stderr
        assert (
            "cells 0/4 done, 1 running | 0 cases: 0 fail | cpu-py3.11-six1.16.0-attrs23.2.0: started"
            in ran.stdout
        )
    else:  # each cell in a child nox: the one that ends the run builds the report
        assert "the last cell of the run to end: building the report" in ran.stdout
        assert "Running session report" not in ran.stderr


def test_uninstallable_cell_is_recorded_with_the_resolver_reason(tmp_path: Path):
    matrix = tmp_path / "m.yaml"
    matrix.write_text("packages:\n  trl: ['1.16.0']\n  transformers: ['4.40.0']\n")
    env = {
        "FTMATRIX_MATRIX": str(matrix),
        "FTMATRIX_CASES": str(DATA / "small_cases"),
        "FTMATRIX_OUT": str(tmp_path / "out"),
    }
    ran = nox("-s", "matrix", "--envdir", str(tmp_path / "envs"), env=env)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    (record,) = records_of(tmp_path / "out")
    assert record["status"] == "uninstallable"
    assert record["case"] == "*"
    assert "trl>=1.16.0 depends on transformers>=" in record["reason"]
    assert "requirements are unsatisfiable" in record["reason"]


SFT_MATRIX = """
packages:
  torch: ["2.13.0"]
  transformers: ["{transformers}"]
  trl: ["{trl}"]
  peft: ["{peft}"]
support: [bitsandbytes]
"""


def test_one_real_cell_runs_the_whole_case_library(tmp_path: Path):
    """Real installs of torch, transformers, trl and peft, and every case of cases/ on CPU."""
    matrix = tmp_path / "m.yaml"
    # peft 0.21.2: with transformers 5.4+, peft < 0.19 breaks transformers' own adapter loading
    # (a known issue the default matrix shows); this cell is one where everything works.
    matrix.write_text(SFT_MATRIX.format(transformers="5.23.0", trl="1.16.0", peft="0.21.2"))
    env = {"FTMATRIX_MATRIX": str(matrix), "FTMATRIX_OUT": str(tmp_path / "out")}
    ran = nox("-s", "matrix", "--envdir", str(tmp_path / "envs"), env=env)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    records = records_of(tmp_path / "out")
    statuses = {r["case"]: r["status"] for r in records}
    by_operation: dict[str, set[str]] = {}
    for record in records:
        by_operation.setdefault(record["operation"], set()).add(record["status"])
    # What a CPU can run passes; GPU-only cases are skip; absent packages are n/a.
    green = (
        "sft",
        "grpo",
        "dpo",
        "qlora",
        "multiprocess",
        "import",
        "reward",
        "orpo",
        "kto",
        "cpo",
    )
    for operation in green:
        assert by_operation[operation] <= {"pass", "n/a"}, (operation, statuses)
        assert "pass" in by_operation[operation], (operation, statuses)
    # The Trainer's and the adapters' knob cases find real upstream breaks at these pins
    # (classification heads under accumulation, transformers#47688; GPT-2's over-count past
    # #46204's fix, unreported; LoRA on a tied head merged, peft#2018): red, never an error.
    for operation in ("train", "lora"):
        assert by_operation[operation] <= {"pass", "n/a", "fail"}, (operation, statuses)
        assert "pass" in by_operation[operation], (operation, statuses)
    # Each red fits an entry of known_issues.yaml, but GPT-2's over-count past its fix.
    known = load_known_issues(ROOT / "known_issues.yaml")
    parsed = read_records(tmp_path / "out" / "records").records
    cells = cell_statuses(parsed)
    unexplained = {
        r.case for r in parsed if r.status.value == "fail" and explain(r, known, cells) is None
    }
    assert all("family=gpt2" in c for c in unexplained), unexplained
    for operation in ("sft-multigpu", "vllm-generate", "grpo-vllm", "unsloth-qlora-qkv"):
        assert by_operation[operation] <= {"skip", "n/a"}, (operation, statuses)
    assert statuses["test_import.py::test_imports[vllm]"] == "n/a"
    sft = [r for r in records if r["operation"] == "sft"]
    # five families plain, packing, gradient checkpointing, completion-only; the exact update
    # with and without accumulation; the mask over its knob table (pairwise)
    assert len([r for r in sft if "test_sft_mask" not in r["case"]]) == 10
    assert len([r for r in sft if "test_sft_mask" in r["case"]]) >= 4
    for record in (r for r in sft if "two_steps" in r["case"]):
        assert record["packages"]["trl"] == "1.16.0"
        assert record["packages"]["torch"].startswith("2.13.0")
        assert math.isfinite(record["metrics"]["loss"])
    plain = next(r for r in sft if "plain-llama" in r["case"])
    assert math.isfinite(plain["metrics"]["reference_loss"])
