"""YAML that attacks the parser, through the real CLI: one line naming the file, the line and
what is wrong, exit 3, never a traceback. matrix.yaml and known_issues.yaml share the reader
(yaml_file), so each attack goes through both: `plan --no-resolve` and `report`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ftmatrix.errors import ExitCode

MATRIX = "packages: {six: ['1.17.0']}\n"

# (the text after a valid first line, the line it is on, what the message says)
ATTACKS = [
    # PyYAML's constructors raise ValueError, KeyError or AttributeError on these
    ("x: !!bool abc\n", 2, "'abc' reads as true or false but is not one"),
    ("x: !!float abc\n", 2, "'abc' reads as a number but is not one"),
    ("x: !!int abc\n", 2, "'abc' reads as a number but is not one"),
    ("x: !!timestamp abc\n", 2, "'abc' reads as a date but is not one"),
    ("x: 2024-02-30\n", 2, "'2024-02-30' reads as a date but is not one (day is out of range"),
    ("x: 2024-13-01 10:00:00\n", 2, "reads as a date but is not one (month must be in 1..12)"),
    ("x: [0000-01-01]\n", 2, "'0000-01-01' reads as a date but is not one (year 0"),
    ("x: {a: !!bool maybe}\n", 2, "'maybe' reads as true or false but is not one"),
    # YAML 1.1 reads these as other numbers than written: a timeout of 8 s or 90 s, quietly
    ("timeouts: {case: 010}\n", 2, "010 reads as 8 (octal, as YAML 1.1 reads it)"),
    ("timeouts: {cell: 1:30}\n", 2, "1:30 reads as 90 (base 60, as YAML 1.1 reads it)"),
    ("limits: {workers: 0_10}\n", 2, "0_10 reads as 8 (octal"),
    # an alias inside the value it names: a RecursionError once
    ("x: &a [*a]\n", 2, "an alias stands inside the value it names"),
    ("x: &a {b: [1, *a]}\n", 2, "an alias stands inside the value it names"),
    # characters YAML refuses: said with their line, not PyYAML's '<unicode string>'
    ("# \x00\n", 2, "the character U+0000 is not allowed in YAML text"),
    ("x: \x07\n", 2, "the character U+0007 is not allowed in YAML text"),
    ("x: a\ufffe\n", 2, "the character U+FFFE is not allowed in YAML text"),
]


def ftmatrix(tmp_path: Path, *argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ftmatrix", *argv],
        env={**os.environ, "FTMATRIX_OUT": str(tmp_path / "out"), **env},
        cwd=tmp_path, capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip


def assert_one_line(ran: subprocess.CompletedProcess[str], where: str, says: str) -> None:
    output = ran.stdout + ran.stderr
    assert "Traceback" not in output, output[-3000:]
    assert ran.returncode == ExitCode.CONFIG, output[-3000:]
    problems = [line for line in ran.stderr.splitlines() if line.startswith("  - ")]
    assert len(problems) == 1, output[-3000:]
    assert where in problems[0] and says in problems[0], output[-3000:]


@pytest.mark.parametrize(("text", "line", "says"), ATTACKS)
def test_an_attack_on_the_matrix_file_is_one_line_naming_its_line(
    tmp_path: Path, text: str, line: int, says: str
) -> None:
    (tmp_path / "m.yaml").write_text(MATRIX + text, encoding="utf-8")
    ran = ftmatrix(tmp_path, "plan", "--no-resolve", FTMATRIX_MATRIX="m.yaml")
    assert_one_line(ran, f"m.yaml:{line}:", says)


@pytest.mark.parametrize(("text", "line", "says"), ATTACKS[::3])
def test_an_attack_on_the_known_issues_file_is_one_line_naming_its_line(
    tmp_path: Path, text: str, line: int, says: str
) -> None:
    (tmp_path / "matrix.yaml").write_text(MATRIX, encoding="utf-8")
    (tmp_path / "known_issues.yaml").write_text("- id: a\n  " + text, encoding="utf-8")
    ran = ftmatrix(tmp_path, "report")
    assert_one_line(ran, f"known_issues.yaml:{line}:", says)


def test_a_merge_key_merges_and_the_keys_written_beside_it_win(tmp_path: Path) -> None:
    # `<<` once fell to the duplicate-key check, which knows no merge tag: refused as
    # "could not determine a constructor for the tag 'tag:yaml.org,2002:merge'"
    (tmp_path / "matrix.yaml").write_text(
        "profiles:\n"
        "  base: &base {packages: {six: ['1.16.0'], attrs: ['23.1.0']}}\n"
        "  later: {<<: *base, packages: {six: ['1.17.0']}}\n"
        "packages: {six: ['1.15.0']}\n",
        encoding="utf-8",
    )
    ran = ftmatrix(tmp_path, "plan", "--no-resolve", FTMATRIX_PROFILE="later")
    assert ran.returncode == ExitCode.OK, ran.stdout + ran.stderr
    assert "six==1.17.0" in ran.stdout and "attrs" not in ran.stdout, ran.stdout


def test_a_file_of_millions_of_values_is_refused_as_they_come(tmp_path: Path) -> None:
    # All of them were built before they were counted: 4 million took 3 GB (and 100 s)
    # to be refused. Under 1 GiB of address space the refusal must come all the same.
    items = ",".join(["1"] * 4_000_000)
    (tmp_path / "m.yaml").write_text(f"{MATRIX}x: [{items}]\n", encoding="utf-8")
    ran = subprocess.run(
        [sys.executable, "-c", LIMITED, "plan", "--no-resolve"],
        env={**os.environ, "FTMATRIX_OUT": str(tmp_path / "out"), "FTMATRIX_MATRIX": "m.yaml"},
        cwd=tmp_path, capture_output=True, text=True, check=False, timeout=600,
    )  # fmt: skip
    assert_one_line(ran, "m.yaml:2:", "holds more than 100,000 values")


# python -m ftmatrix, under a limit on its memory
LIMITED = """
import resource, runpy, sys
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
sys.argv = ["ftmatrix", *sys.argv[1:]]
runpy.run_module("ftmatrix", run_name="__main__")
"""


# A control character in a URL or path: planned without a word, then every cell an
# install-error (uv: no such file) or the index refused as unreadable (exit 8), not the file's
@pytest.mark.parametrize(
    ("install", "at"),
    [
        ('{index-url: "http://127.0.0.1:9/a\\nb"}', "install.index-url: 'http://127.0.0.1:9/a\\nb'"),
        ('{extra-index-urls: ["http://x\\e[2J"]}', "install.extra-index-urls[0]: 'http://x\\x1b[2J'"),
        ('{find-links: [wheels, "a\\tb"]}', "install.find-links[1]: 'a\\tb'"),
    ],
)  # fmt: skip
def test_a_control_character_in_an_install_url_or_path_is_the_files_problem(
    tmp_path: Path, install: str, at: str
) -> None:
    (tmp_path / "m.yaml").write_text(f"{MATRIX}install: {install}\n", encoding="utf-8")
    ran = ftmatrix(tmp_path, "plan", "--no-resolve", FTMATRIX_MATRIX="m.yaml")
    assert_one_line(ran, "m.yaml: ", f"{at} holds a control character; a URL or path has none")
