"""What a cell prints reaches its log file bounded, and the console not at all.

Slow tier: a real cell through nox. pytest prints a failing case's captured output; a case
that printed 100 MB once put all of it into the console, in one line read whole.
The console (and a CI log) gets the progress lines; pytest's output goes to the cell's
log file beside its records.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
DATA = Path(__file__).parent / "data"

pytestmark = pytest.mark.slow

LOUD = """
import sys


def test_prints_a_hundred_megabytes_on_one_line():
    sys.stdout.write("x" * (100 * 2**20))
    sys.stdout.write("\\n")
    raise AssertionError("fails on purpose, so that pytest prints what it printed")
"""


def test_a_case_that_prints_100_mb_costs_the_console_a_few(tmp_path: Path) -> None:
    cases = tmp_path / "cases"
    cases.mkdir()
    (cases / "test_loud.py").write_text(LOUD)
    env = {
        **os.environ,
        "FTMATRIX_MATRIX": str(DATA / "small_matrix.yaml"),
        "FTMATRIX_CASES": str(cases),
        "FTMATRIX_OUT": str(tmp_path / "out"),
        "FTMATRIX_SELECT": "cpu-*-six1.17.0-attrs25.3.0",
    }
    ran = subprocess.run(
        [sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py"), "--envdir", str(tmp_path / "envs"),
         "-s", "matrix"],
        env=env, cwd=tmp_path, capture_output=True, check=False, timeout=600,
    )  # fmt: skip
    output = ran.stdout + ran.stderr
    assert ran.returncode == 0, output[-3000:]
    assert len(output) < 2**20, len(output)
    assert b"1 fail" in output
    (log,) = (tmp_path / "out" / "records").rglob("*.log")
    assert log.stat().st_size < 16 * 2**20, log.stat().st_size
    assert "printed more than 8 MiB; the rest is not echoed" in log.read_text()
