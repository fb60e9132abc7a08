"""What a cell's pytest prints to its log: every case's verdict, each failure with what
it printed, and not what a passing case printed (pytest's -rP, whose cost grew with the
square of the cell's cases: each pass looked through every case's reports)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import bare_cell

from ftmatrix.runner import cell_env, pytest_command

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
    cell_file, ctx = bare_cell(tmp_path, cases)
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
