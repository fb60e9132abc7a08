"""A selection that names nothing, or lies outside the cases folder, stops a run before it installs.

Fast tier: the checks on real folders. Slow tier: real `nox -s matrix` runs that once
installed every cell and then tested nothing, exiting 0.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import make_record

from ftmatrix.case_selection import check_case_selection, split_pytest_args
from ftmatrix.case_verdicts import no_verdict
from ftmatrix.cell.status import Status
from ftmatrix.errors import ConfigError, ExitCode, SettingsError, UsageError

ROOT = Path(__file__).parent.parent
DATA = Path(__file__).parent / "data"


@pytest.fixture
def cases(tmp_path: Path) -> Path:
    folder = tmp_path / "cases"
    (folder / "sub").mkdir(parents=True)
    (folder / "test_sft.py").write_text("def test_x():\n    pass\n")
    (folder / "sub" / "test_dpo.py").write_text("def test_y():\n    pass\n")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "test_out.py").write_text("def test_z():\n    pass\n")
    return folder


def test_options_keep_their_values_and_the_rest_selects() -> None:
    assert split_pytest_args(
        ["-k", "sft or dpo", "test_sft.py", "-x", "-m=slow", "-p", "no:x"]
    ) == (
        ("test_sft.py",),
        ("-k", "sft or dpo", "-x", "-m=slow", "-p", "no:x"),
    )


def test_files_folders_and_node_ids_inside_the_folder_pass(cases: Path) -> None:
    selection = ["test_sft.py", "sub", "sub/test_dpo.py::test_y", "test_sft.py::test_x[a-b]"]
    check_case_selection(cases, selection, source="m.yaml", from_command_line=False)


def test_a_typo_names_the_file_the_entry_and_the_closest_file(cases: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        check_case_selection(cases, ["test_stf.py"], source="m.yaml", from_command_line=False)
    assert caught.value.problems == (
        f"m.yaml: cases[0]: 'test_stf.py': no such file or folder in {cases}; its test files: "
        "sub/test_dpo.py, test_sft.py. Perhaps you meant 'test_sft.py'?",
    )


@pytest.mark.parametrize("entry", ["../outside/test_out.py", "../../etc/passwd", "/etc/passwd"])
def test_a_path_outside_the_cases_folder_is_refused(cases: Path, entry: str) -> None:
    with pytest.raises(ConfigError, match="lies outside the cases folder"):
        check_case_selection(cases, [entry], source="m.yaml", from_command_line=False)


def test_arguments_are_usage_errors_and_a_missing_folder_a_settings_error(cases: Path) -> None:
    with pytest.raises(UsageError, match=r"arguments after --: .nope\.py.: no such file"):
        check_case_selection(
            cases, ["nope.py"], source="arguments after --", from_command_line=True
        )
    with pytest.raises(SettingsError, match=r"cases folder .* does not exist"):
        check_case_selection(cases / "gone", [], source="m.yaml", from_command_line=False)
    with pytest.raises(SettingsError, match="is not a folder"):
        check_case_selection(cases / "test_sft.py", [], source="m.yaml", from_command_line=False)


def test_a_cell_without_a_verdict_says_why() -> None:
    assert no_verdict([]) is not None
    broken = make_record(case="*", status=Status.INSTALL_ERROR, reason="no space left")
    assert no_verdict([broken]) == "install-error: no space left"
    assert no_verdict([make_record()]) is None
    assert no_verdict([broken, make_record()]) is None


def test_a_cell_whose_records_were_all_unreadable_is_not_said_to_have_collected_nothing(
    tmp_path: Path,
) -> None:
    """Its cases ran, their records went to quarantine: "no case was collected (check
    the selection)" sent the user to the wrong place."""
    quarantine = tmp_path / "cell.jsonl.quarantine"
    assert "no case was collected" in (no_verdict([], quarantine) or "")  # none there
    quarantine.write_bytes(b'{"case": "torn\n{"case": "t.py::b", "started_at": "<redacted>"}\n')
    assert no_verdict([], quarantine) == (
        f"no record of the cell could be read: its quarantine file {quarantine} holds 2 "
        "unreadable record line(s)"
    )
    assert no_verdict([make_record()], quarantine) is None


def nox_matrix(
    tmp_path: Path, matrix: Path, cases: Path, *args: str
) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "FTMATRIX_MATRIX": str(matrix),
        "FTMATRIX_CASES": str(cases),
        "FTMATRIX_OUT": str(tmp_path / "out"),
        "FTMATRIX_SELECT": "cpu-*-six1.17.0-attrs25.3.0",
    }
    command = [sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py")]
    command += ["--envdir", str(tmp_path / "envs"), "-s", "matrix", *args]
    return subprocess.run(
        command, env=env, cwd=tmp_path, capture_output=True, text=True, check=False
    )


@pytest.mark.slow
def test_a_typo_in_cases_stops_the_run_before_anything_installs(tmp_path: Path) -> None:
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text((DATA / "small_matrix.yaml").read_text() + "cases: [test_smal.py]\n")
    ran = nox_matrix(tmp_path, matrix, DATA / "small_cases")
    assert ran.returncode == ExitCode.CONFIG, ran.stdout + ran.stderr
    assert "cases[0]: 'test_smal.py': no such file or folder" in ran.stderr
    assert "Perhaps you meant 'test_small.py'?" in ran.stderr
    assert "Traceback" not in ran.stdout + ran.stderr
    assert not list((tmp_path / "out").rglob("*.lock.txt"))  # nothing was resolved or installed


@pytest.mark.slow
def test_a_run_whose_options_select_no_case_fails(tmp_path: Path) -> None:
    """`-- -k EXPR` once read EXPR as a file to select: no case ran, and the run exited 0."""
    ran = nox_matrix(tmp_path, DATA / "small_matrix.yaml", DATA / "small_cases", "--", "-k", "six")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "1 pass" in ran.stdout + ran.stderr
    nothing = nox_matrix(
        tmp_path, DATA / "small_matrix.yaml", DATA / "small_cases", "--", "-k", "nomatch"
    )
    assert nothing.returncode != 0
    assert "no verdict: no case was collected" in nothing.stdout + nothing.stderr


def test_ftmatrix_run_hands_what_follows_dashes_to_the_cells_pytest(tmp_path: Path) -> None:
    """`ftmatrix run -- ...` gave nox the arguments (a case became a session nox did not
    find, `-l` listed nox's sessions) and the run ended with "no records"; they go to the
    cells' pytest, as after `nox -s matrix --`, and a selection naming nothing stops it."""
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("FTMATRIX_")},
        "FTMATRIX_MATRIX": str(DATA / "small_matrix.yaml"),
        "FTMATRIX_CASES": str(DATA / "small_cases"),
        "FTMATRIX_OUT": str(tmp_path / "out"),
    }
    ran = subprocess.run(
        [sys.executable, "-m", "ftmatrix", "run", "--", "test_smal.py"],
        env=env, cwd=tmp_path, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert ran.returncode == ExitCode.USAGE, ran.stdout + ran.stderr
    assert "arguments after --: 'test_smal.py': no such file or folder" in ran.stderr
    assert "Perhaps you meant 'test_small.py'?" in ran.stderr
    assert not (tmp_path / ".nox").exists()  # stopped before nox made any venv
