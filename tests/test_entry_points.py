"""`nox -s plan` and `python -m ftmatrix plan` are one code path.

Every matrix in tests/data/invalid ends both with the same exit code and the same
message (nox's own "nox > " lines aside), and neither prints a traceback. Real
subprocesses: the nox that users run, the module that users run.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ftmatrix.errors import ExitCode

ROOT = Path(__file__).parent.parent
INVALID = Path(__file__).parent / "data" / "invalid"

# Each file, the exit code both entry points end with, and the first line they print.
EXPECTED = {
    "bad_rules.yaml": (ExitCode.CONFIG, "ftmatrix: 5 problems in the matrix configuration:"),
    "bad_versions.yaml": (ExitCode.CONFIG, "ftmatrix: 4 problems in the matrix configuration:"),
    "no_packages.yaml": (ExitCode.CONFIG, "ftmatrix: 1 problem in the matrix configuration:"),
    "syntax.yaml": (ExitCode.CONFIG, "ftmatrix: 1 problem in the matrix configuration:"),
    "unknown_keys.yaml": (ExitCode.CONFIG, "ftmatrix: 2 problems in the matrix configuration:"),
    "unknown_profile.yaml": (ExitCode.CONFIG, "ftmatrix: 1 problem in the matrix configuration:"),
    "never_released.yaml": (ExitCode.CONFIG, "ftmatrix: 1 problem in the matrix configuration:"),
    "unknown_package.yaml": (ExitCode.CONFIG, "ftmatrix: 1 problem in the matrix configuration:"),
    "exclude_matches_nothing.yaml": (
        ExitCode.PLAN,
        f"ftmatrix: {INVALID / 'exclude_matches_nothing.yaml'}: exclude[0]: {{'trl': '0.20.*'}} "
        "matches no cell: it matches no combination of the axes",
    ),
    "unreachable_index.yaml": (
        ExitCode.INDEX,
        "ftmatrix: package index http://127.0.0.1:9/simple (set by install.index-url) cannot "
        "be read: [Errno 111] Connection refused (listing the releases of six)",
    ),
}
# The plan asks PyPI which versions exist before it plans: the slow tier's (network).
ASKS_PYPI = {
    "never_released.yaml",
    "unknown_package.yaml",
    "exclude_matches_nothing.yaml",
}


def run(command: list[str], matrix: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "FTMATRIX_MATRIX": str(matrix), "FTMATRIX_OUT": str(tmp_path / "out")}
    return subprocess.run(
        [sys.executable, "-m", *command],
        env=env,
        cwd=tmp_path,  # neither may depend on where it is started
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )


def nox(*args: str, matrix: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return run(
        ["nox", "-f", str(ROOT / "noxfile.py"), "--envdir", str(tmp_path / "envs"), *args],
        matrix,
        tmp_path,
    )


def own_lines(stderr: str) -> list[str]:
    """What ftmatrix printed: stderr without nox's own log lines."""
    return [line for line in stderr.splitlines() if not line.startswith("nox > ")]


def test_every_invalid_matrix_has_an_expected_answer():
    assert sorted(EXPECTED) == sorted(p.name for p in INVALID.glob("*.yaml"))
    assert set(EXPECTED) >= ASKS_PYPI


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(name, marks=[pytest.mark.slow] if name in ASKS_PYPI else [])
        for name in sorted(EXPECTED)
    ],
)
def test_nox_plan_and_the_cli_plan_give_the_same_answer(name: str, tmp_path: Path):
    matrix = INVALID / name
    code, first_line = EXPECTED[name]
    cli = run(["ftmatrix", "plan"], matrix, tmp_path)
    session = nox("-s", "plan", matrix=matrix, tmp_path=tmp_path)
    assert (cli.returncode, cli.stderr.splitlines()[:1]) == (code, [first_line]), cli.stderr
    assert session.returncode == cli.returncode, session.stderr
    assert own_lines(session.stderr) == cli.stderr.splitlines()  # printed once, as the CLI
    for ran in (cli, session):
        assert "Traceback" not in ran.stdout + ran.stderr
    assert cli.stdout == ""


def test_a_config_error_is_printed_once_when_nox_lists_the_sessions(tmp_path: Path):
    matrix = INVALID / "unknown_keys.yaml"
    listed = nox("-l", matrix=matrix, tmp_path=tmp_path)
    # A listing of a broken matrix fails as `ftmatrix plan` does (it exited 0).
    assert listed.returncode == ExitCode.CONFIG, listed.stderr
    assert "* matrix(invalid-matrix) [matrix]" in listed.stdout
    assert (
        own_lines(listed.stderr) == run(["ftmatrix", "plan"], matrix, tmp_path).stderr.splitlines()
    )


def test_nox_matrix_ends_as_the_cli_run_does_on_a_config_error(tmp_path: Path):
    matrix = INVALID / "syntax.yaml"
    cli = run(["ftmatrix", "run"], matrix, tmp_path)
    session = nox("-s", "matrix", matrix=matrix, tmp_path=tmp_path)
    assert cli.returncode == session.returncode == ExitCode.CONFIG, session.stderr
    assert own_lines(session.stderr) == cli.stderr.splitlines()
    # Refused before any venv is built (nox made one for the invalid-matrix session).
    assert not (tmp_path / "envs").exists() or not any((tmp_path / "envs").iterdir())
    assert "Creating virtual environment" not in session.stderr


def test_nox_lists_the_sessions_in_plain_text(tmp_path: Path):
    """`nox -l` prints each session's first docstring line as it is: no RST markup."""
    listed = nox("-l", matrix=ROOT / "tests" / "data" / "small_matrix.yaml", tmp_path=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert "- plan -> Print the cells and whether each installs; `-- --json`" in listed.stdout
    assert "``" not in listed.stdout
