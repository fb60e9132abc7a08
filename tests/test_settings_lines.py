"""FTMATRIX_* variables a user can get wrong, through the CLI and nox: exit 7 (14 for a path
of the wrong kind) in one line, whatever the value holds (a newline, an escape code)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ftmatrix.errors import ExitCode

ROOT = Path(__file__).parent.parent


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "matrix.yaml").write_text("packages: {six: ['1.17.0']}\n", encoding="utf-8")
    (tmp_path / "cases").mkdir()
    (tmp_path / "cases" / "test_a.py").write_text("def test_one():\n    pass\n")
    (tmp_path / "a\nfile").write_text("not a folder\n")
    return tmp_path


def plan(folder: Path, entry: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    if entry == "cli":
        argv = [sys.executable, "-m", "ftmatrix", "plan", "--no-resolve"]
    else:
        argv = [sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py"), "-s", "plan"]
        argv += ["--", "--no-resolve"]
    variables = {
        "FTMATRIX_MATRIX": str(folder / "matrix.yaml"),
        "FTMATRIX_OUT": str(folder / "out"),
    }
    return subprocess.run(
        argv, env={**os.environ, **variables, **env}, cwd=folder, capture_output=True,
        text=True, check=False, timeout=300,
    )  # fmt: skip


# A path echoed as given split the error line in two: every error but those that list
# several problems (a matrix's, a plan's, the arguments') is one line.
@pytest.mark.parametrize("entry", ["cli", "nox"])
@pytest.mark.parametrize(
    ("variable", "code", "says"),
    [
        ("FTMATRIX_OUT", ExitCode.SETTINGS, "FTMATRIX_OUT={folder}/a\\nfile: is a file"),
        ("FTMATRIX_CASES", ExitCode.PATH_KIND, "{folder}/a\\nfile: is a file, where the cases"),
        ("FTMATRIX_CACHE_DIR", ExitCode.PATH_KIND, "{folder}/a\\nfile: is a file, where the"),
    ],
)
def test_a_path_with_a_newline_is_said_in_one_line(
    folder: Path, entry: str, variable: str, code: int, says: str
) -> None:
    ran = plan(folder, entry, {variable: str(folder / "a\nfile")})
    assert "Traceback" not in ran.stdout + ran.stderr, ran.stderr[-3000:]
    assert ran.returncode == code, ran.stdout + ran.stderr
    said = [line for line in ran.stderr.splitlines() if line.startswith("ftmatrix: ")]
    assert len(said) == 1 and says.format(folder=folder) in said[0], ran.stderr
    assert "file: is a file" not in ran.stderr.replace(said[0], ""), ran.stderr  # no 2nd line


# Recorded in every record of the run: a newline, an escape code or bytes that are no
# text (a surrogate from invalid UTF-8) went into the records as they were.
@pytest.mark.parametrize("labels", ["gpu,a\nb", "\x1b[31mred", "self-hosted,gpu\udcff"])
def test_a_runner_label_that_is_no_text_is_refused(folder: Path, labels: str) -> None:
    ran = plan(folder, "cli", {"FTMATRIX_RUNNER_LABELS": labels})
    assert ran.returncode == ExitCode.SETTINGS, ran.stdout + ran.stderr
    assert len(ran.stderr.splitlines()) == 1, ran.stderr
    assert "FTMATRIX_RUNNER_LABELS=" in ran.stderr and "labels are text" in ran.stderr


def test_runner_labels_of_text_are_taken(folder: Path) -> None:
    ran = plan(folder, "cli", {"FTMATRIX_RUNNER_LABELS": "self-hosted, gpu ,Größe"})
    assert ran.returncode == ExitCode.OK, ran.stderr
