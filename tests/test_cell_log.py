"""What a cell's pytest prints to its log: every case's verdict, each failure with what
it printed, and not what a passing case printed (pytest's -rP, whose cost grew with the
square of the cell's cases: each pass looked through every case's reports)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from ftmatrix.config import HardwareClass, InstallOptions
from ftmatrix.runner import CellContext, cell_env, pytest_command

CASES = """
def test_quiet_pass():
    pass


def test_loud_pass():
    print("printed by a passing case")


def test_loud_fail():
    print("printed by a failing case")
    raise AssertionError("fails on purpose")
"""


def test_the_log_lists_each_verdict_and_a_failure_s_output_not_a_pass_s(tmp_path: Path):
    cases = tmp_path / "cases"
    cases.mkdir()
    (cases / "test_log.py").write_text(CASES)
    cell_file = tmp_path / "cell.json"
    cell = {"run_id": "r1", "id": "cell1", "label": "cpu-py3.11-x1", "python": "3.11"}
    cell_file.write_text(json.dumps({**cell, "pins": {}, "hardware": "cpu"}))
    ctx = CellContext(
        run_id="r1",
        out_dir=tmp_path / "out",
        cases_dir=cases,
        case_selection=(),
        install=InstallOptions(),
        hardware_class=HardwareClass(name="cpu", runs_on=()),
        env=dict(os.environ),
    )
    command, targets = pytest_command(Path(sys.executable), cell_file, tmp_path / "r.jsonl", ctx)
    ran = subprocess.run(
        [*command, *targets],
        env=cell_env(ctx.env),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    log = ran.stdout + ran.stderr
    assert ran.returncode == 1, log
    verdicts = sorted(line.split(" ")[0] for line in log.splitlines() if "test_log.py::" in line)
    assert verdicts == ["FAILED", "PASSED", "PASSED"], log
    assert "printed by a failing case" in log
    assert "printed by a passing case" not in log
    assert len((tmp_path / "r.jsonl").read_text().splitlines()) == 3
