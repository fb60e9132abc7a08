"""One real bisect on the CPU: real attrs releases from the index, real cells, real case."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
DATA = Path(__file__).parent / "data"

pytestmark = pytest.mark.slow


def test_bisect_finds_the_release_that_changed_the_outcome(tmp_path: Path):
    env = {
        **os.environ,
        "FTMATRIX_MATRIX": str(DATA / "bisect_matrix.yaml"),
        "FTMATRIX_CASES": str(DATA / "bisect_cases"),
        "FTMATRIX_OUT": str(tmp_path),
    }
    # Searching for the fix: 22.1.0 has the namespace ('good'), 20.1.0 lacks it ('bad').
    ran = subprocess.run(
        [
            sys.executable,
            "-m",
            "nox",
            "-f",
            str(ROOT / "noxfile.py"),
            "-s",
            "bisect",
            "--",
            "--case",
            "test_attrs_namespace.py::test_attrs_namespace_exists",
            "--axis",
            "attrs",
            "--good",
            "22.1.0",
            "--bad",
            "20.1.0",
        ],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    assert "attrs: last good 21.3.0, first bad 21.2.0; " in ran.stdout
    (finding_file,) = (tmp_path / "bisect").glob("*/finding.json")
    finding = json.loads(finding_file.read_text())
    assert finding["last_good"] == "21.3.0"
    assert finding["first_bad"] == "21.2.0"
    assert finding["exact"] is True
    built = [s["version"] for s in finding["steps"]]
    assert built[:2] == ["22.1.0", "20.1.0"]  # the ends are confirmed first
    assert len(built) <= 2 + 3  # 8 releases between: about log2(8) more builds
    assert {s["status"] for s in finding["steps"]} == {"pass", "fail"}


def test_ends_that_do_not_bracket_a_change_exit_with_the_bisect_code(tmp_path: Path):
    env = {
        **os.environ,
        "FTMATRIX_MATRIX": str(DATA / "bisect_matrix.yaml"),
        "FTMATRIX_CASES": str(DATA / "bisect_cases"),
        "FTMATRIX_OUT": str(tmp_path),
    }
    ran = subprocess.run(
        [
            sys.executable,
            "-m",
            "ftmatrix",
            "bisect",
            "--case",
            "test_attrs_namespace.py::test_attrs_namespace_exists",
            "--axis",
            "attrs",
            "--good",
            "21.3.0",
            "--bad",
            "22.1.0",
        ],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert ran.returncode == 5, ran.stderr
    assert "ftmatrix: bisect: attrs 22.1.0 (the bad end) is not bad: pass" in ran.stderr
