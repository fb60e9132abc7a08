"""Command-line arguments a user can get wrong, through the real CLI: exit 2 in one line that
names the argument, never a typo that goes unseen and never a value that breaks the line."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ftmatrix.errors import ExitCode

DATA = Path(__file__).parent / "data"
RESULTS = DATA / "default_results.json"
NEWLINE = "x\ny\x1b[2J"  # a value that would break an error line in two and clear a terminal
BISECT = ["bisect", "--case", "test_a.py::test_one", "--good", "1.16.0", "--bad", "1.17.0"]


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "matrix.yaml").write_text("packages: {six: ['1.17.0']}\n", encoding="utf-8")
    (tmp_path / "cases").mkdir()
    (tmp_path / "cases" / "test_a.py").write_text("def test_one():\n    pass\n")
    (tmp_path / "freeze.txt").write_text("transformers==4.57.6\n", encoding="utf-8")
    return tmp_path


def ftmatrix(folder: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ftmatrix", *argv],
        env={**os.environ, "FTMATRIX_OUT": str(folder / "out")},
        cwd=folder, capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip


def assert_usage_line(ran: subprocess.CompletedProcess[str], says: str) -> None:
    output = ran.stdout + ran.stderr
    assert "Traceback" not in output, output[-3000:]
    assert ran.returncode == ExitCode.USAGE, output[-3000:]
    assert len(ran.stderr.splitlines()) == 1 and says in ran.stderr, output[-3000:]


# Every command but run (whose extra arguments go to pytest) and check (which refused them
# already): an option misspelt, or a word too many, was ignored and the command went on
# as if it were not there: `autobisect --dryrun` built cells, `report --ot x` wrote elsewhere.
@pytest.mark.parametrize(
    "argv",
    [
        ["plan", "--no-resolve", "--jsno"],
        ["plan", "--no-resolve", "extra"],
        ["autobisect", "--dryrun"],
        ["report", "--ot", "elsewhere"],
        ["ci-matrix", "--cells-per-shard", "2", "extra"],
        ["known-issues", "prove", "--bogus"],
        ["wheelhouse", "wh", "--python", "3.11", "--platform", "win_amd64", "--bogus"],
        ["restore-history", "nothing.jsonl", "--missing-ok", "--bogus"],
        ["init", "--bogus"],
        [*BISECT, "--axis", "six", "--bogus"],
    ],
)
def test_an_argument_no_command_takes_is_refused(folder: Path, argv: list[str]) -> None:
    ran = ftmatrix(folder, *argv)
    assert_usage_line(ran, f"ftmatrix: {argv[0]}: unrecognized arguments: ")
    assert not (folder / "elsewhere").exists() and not (folder / "out" / "bisect").exists()


def test_an_unrecognized_argument_is_echoed_in_one_line(folder: Path) -> None:
    assert_usage_line(ftmatrix(folder, "plan", NEWLINE), "unrecognized arguments: x\\ny\\x1b[2J")


# A name that goes into a requirements file and an index URL: an option line or a path
# once passed for a package (the index was asked for /simple/x\ny/, exit 8 in two lines).
@pytest.mark.parametrize(
    ("argv", "says"),
    [
        ([*BISECT, "--axis", NEWLINE], "bisect --axis 'x\\ny\\x1b[2J': 'x\\ny\\x1b[2J' is not a"),
        ([*BISECT, "--axis=--index-url=http://127.0.0.1:9/simple"], "is not a distribution"),
        ([*BISECT, "--axis", "../../etc"], "bisect --axis '../../etc': '../../etc' is not a"),
        ([*BISECT, "--axis", "six", "--pins", "six; os_name=='nt'==1.0"], "is not a distribution"),
        ([*BISECT, "--axis", "six", "--pins", "../x==1.0"], "--pins '../x==1.0': '../x' is not"),
    ],
)
def test_a_bisect_package_that_is_no_distribution_name_is_refused(
    folder: Path, argv: list[str], says: str
) -> None:
    assert_usage_line(ftmatrix(folder, *argv), says)


def test_a_bisect_case_in_no_file_is_refused_before_a_cell_is_built(folder: Path) -> None:
    # It built the good end's cell first, then said exit 5: 'the good end is not good'
    argv = ["bisect", "--case", "test_b.py::test_one", "--axis", "six"]
    ran = ftmatrix(folder, *argv, "--good", "1.16.0", "--bad", "1.17.0")
    assert_usage_line(ran, "bisect --case: 'test_b.py::test_one': no such file or folder")
    assert not (folder / "out").exists() or not any((folder / "out").rglob("*.jsonl"))


# check's inputs echoed as given: a newline in a path, a URL or a name split the one line
@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--results", NEWLINE], "--results x\\ny\\x1b[2J: cannot be read"),
        (["--results", f"http://{NEWLINE}"], "--results http://x\\ny\\x1b[2J: cannot be read"),
        (["--results", str(RESULTS), "--freeze", NEWLINE], "--freeze x\\ny\\x1b[2J: cannot be"),
        (["--results", str(RESULTS), "--python", NEWLINE], "--python x\\ny\\x1b[2J: cannot be"),
        (["--results", str(RESULTS), "--freeze", "freeze.txt", "--operation", NEWLINE],
         "--operation x\\ny\\x1b[2J: the results have no such operation"),
        (["--results", str(RESULTS), "--freeze", "freeze.txt", "--hardware", NEWLINE],
         "--hardware x\\ny\\x1b[2J: the results have no such hardware class"),
    ],
)  # fmt: skip
def test_a_check_input_with_a_newline_is_echoed_in_one_line(
    folder: Path, argv: list[str], says: str
) -> None:
    assert_usage_line(ftmatrix(folder, "check", *argv), says)


def test_check_names_files_with_a_newline_in_one_line_each(folder: Path) -> None:
    shutil.copy(RESULTS, folder / "res\nults.json")
    (folder / "fr\neeze.txt").write_text("garbage\n", encoding="utf-8")
    ran = ftmatrix(folder, "check", "--results", "res\nults.json", "--freeze", "fr\neeze.txt")
    assert_usage_line(ran, "fr\\neeze.txt:1: 'garbage' is not a pinned version")
    (folder / "fr\neeze.txt").write_text("transformers==4.57.6\n", encoding="utf-8")
    ran = ftmatrix(folder, "check", "--results", "res\nults.json", "--freeze", "fr\neeze.txt")
    assert ran.returncode in (0, 1), ran.stdout + ran.stderr
    assert "stack: fr\\neeze.txt (pip freeze)" in ran.stdout.splitlines()[0], ran.stdout
    assert "results: res\\nults.json: " in ran.stdout.splitlines()[1], ran.stdout


# A file given and not needed (install.system-packages is off) was never read: one that is
# not there, or not a freeze, went unsaid and the wheelhouse was made as if none were given
@pytest.mark.parametrize(
    ("content", "says"),
    [
        (None, "--host-packages host.txt: No such file or directory"),
        ("garbage\n", "--host-packages host.txt:1: 'garbage' is not name==version"),
    ],
)
def test_a_host_packages_file_that_cannot_be_read_is_refused_when_unneeded(
    folder: Path, content: str | None, says: str
) -> None:
    if content is not None:
        (folder / "host.txt").write_text(content, encoding="utf-8")
    argv = ["wheelhouse", "wh", "--python", "3.11", "--platform", "manylinux_2_28_x86_64"]
    ran = ftmatrix(folder, *argv, "--host-packages", "host.txt")
    output = ran.stdout + ran.stderr
    assert "Traceback" not in output and ran.returncode == ExitCode.WHEELHOUSE, output[-3000:]
    said = [line for line in ran.stderr.splitlines() if line.startswith("ftmatrix: ")]
    assert len(said) == 1 and says in said[0], output[-3000:]
    assert not any((folder / "wh").glob("*.whl")), output[-3000:]


# An empty value (`--matrix "$UNSET"`) was taken for the option left out: the default
# matrix planned, the default folder written, as if the user had asked for them
@pytest.mark.parametrize(
    "argv",
    [
        ["plan", "--no-resolve", "--matrix", ""],
        ["plan", "--no-resolve", "--profile", ""],
        ["run", "--profile", ""],
        ["report", "--out", ""],
        ["restore-history", "nothing.jsonl", "--missing-ok", "--out", ""],
        ["autobisect", "--dry-run", "--matrix", ""],
        [*BISECT, "--axis", "six", "--matrix", ""],
    ],
)
def test_an_option_given_empty_is_refused(folder: Path, argv: list[str]) -> None:
    option = argv[argv.index("") - 1]
    assert_usage_line(ftmatrix(folder, *argv), f"ftmatrix: {option} '': names nothing")
    assert not (folder / "index.html").exists() and not (folder / "out").exists()
