"""What a user's names, versions and variables may be: each refused one line, naming the key
or variable, what was wrong and what is allowed (tests/test_hostile.py runs the same
classes through the CLI and nox)."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import tracemalloc
from datetime import datetime
from pathlib import Path

import pytest

from ftmatrix.cli import main
from ftmatrix.config import ConfigError, parse_matrix
from ftmatrix.config_checker import Checker
from ftmatrix.errors import ExitCode, SettingsError, UsageError
from ftmatrix.init import parse_package, scaffold
from ftmatrix.plan import Cell, plan_cells
from ftmatrix.settings import Settings, env_flag
from ftmatrix.shard import shard_cells

BASE = "packages: {six: ['1.17.0']}\n"


def problems_of(text: str, profile: str | None = None) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        parse_matrix(text, source="m.yaml", profile=profile, default_python="3.11")
    return list(caught.value.problems)


# Every name that is not plain text would reach a cell's label, a nox session's name or a
# CI job's comma-separated globs.
BAD_NAMES = {
    "a number": "1",
    "null": "null",
    "true": "true",
    "a date": "2024-01-01",
    "a comma": "'a,b'",
    "a glob": "'gpu[1]'",
    "a star": "'gpu*'",
    "a path": "'../../etc'",
    "a space and a slash": "'a b/c'",
    "empty": "''",
    "control characters": '"a\\tb\\u0007\\nc"',
    "a leading dash": "'-x'",
    "65 characters": "'" + "h" * 65 + "'",
}


@pytest.mark.parametrize("name", BAD_NAMES.values(), ids=BAD_NAMES)
def test_a_hardware_class_name_that_is_not_plain_text_is_refused(name: str) -> None:
    found = problems_of(BASE + f"hardware: {{{name}: {{runs-on: [x]}}, cpu: {{}}}}")
    assert len(found) == 1, found
    assert found[0].startswith("m.yaml: hardware[")
    assert "is not a hardware class name: a class's name is text of letters, digits" in found[0]
    assert "\n" not in found[0] and "\t" not in found[0]


@pytest.mark.parametrize("name", BAD_NAMES.values(), ids=BAD_NAMES)
def test_a_profile_name_that_is_not_plain_text_is_refused(name: str) -> None:
    found = problems_of(BASE + f"profiles: {{{name}: {{strategy: full}}}}")
    assert len(found) == 1, found
    assert found[0].startswith("m.yaml: profiles[")
    assert "is not a profile name: a profile's name is text of letters, digits" in found[0]


@pytest.mark.parametrize("value", ["[a]", "{a: 1}", "1", "true"])
def test_a_default_profile_that_is_not_text_is_refused(value: str) -> None:
    found = problems_of(BASE + f"profiles: {{a: {{}}}}\ndefault-profile: {value}")
    assert len(found) == 1, found
    assert found[0].startswith("m.yaml: default-profile: must be the name of one of the profiles")


def test_profiles_that_are_not_a_mapping_are_refused() -> None:
    assert problems_of(BASE + "profiles: [a]") == [
        "m.yaml: profiles: must be a mapping of name -> overrides, got a list (['a'])"
    ]


def test_plain_names_are_taken() -> None:
    text = BASE + "hardware: {gpu-h100.x_2: {}}\nprofiles: {Night.ly-2: {}}"
    matrix = parse_matrix(text, source="m.yaml", profile="Night.ly-2", default_python="3.11")
    assert [h.name for h in matrix.hardware] == ["gpu-h100.x_2"]


@pytest.mark.parametrize(
    ("axis", "says"),
    [
        ("python: ['3.11', '3.11']", "python[1]: '3.11' is listed twice: python[0] is '3.11'"),
        ("python: ['3.11', '3.11.0']", "python[1]: '3.11.0' is listed twice: python[0] is '3.11'"),
        ("python: ['3.12.1', '3.12.01']", "'3.12.01' is listed twice: python[0] is '3.12.1'"),
        (
            "packages: {six: ['1.17.0', 'v1.17.0', '1.17.0.0', '1.17']}",
            "packages.six[1]: 'v1.17.0' is listed twice: packages.six[0] is '1.17.0', the same "
            "version (PEP 440); list each once",
        ),
        ("packages: {six: ['1.0rc1', '1.0-rc.1']}", "'1.0-rc.1' is listed twice"),
        ("packages: {six: [none, null]}", "packages.six[1]: None is listed twice"),
    ],
)
def test_equal_values_of_one_axis_are_listed_twice(axis: str, says: str) -> None:
    text = axis if axis.startswith("packages") else BASE + axis
    found = problems_of(text)
    assert any(says in p for p in found), found
    if "1.17.0.0" in axis:
        assert len(found) == 3  # each spelling of the one release named


def test_versions_with_spaces_around_them_are_refused() -> None:
    assert problems_of("packages: {six: [' 1.17.0']}") == [
        "m.yaml: packages.six[0]: ' 1.17.0' has spaces around it; write '1.17.0'"
    ]


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("3.100", "'3.100': a Python version as a cell label names it"),
        ("'3'", "'3': a Python version as a cell label names it"),
        ("'4.0'", "'4.0': a Python version as a cell label names it"),
        ("'3.11t'", "'3.11t': a Python version"),
        ("'3.8'", "'3.8': a cell's pytest and plugin need Python 3.9 or newer"),
    ],
)
def test_the_matrix_takes_the_pythons_ftmatrix_python_takes(
    tmp_path: Path, value: str, says: str
) -> None:
    if value != "3.100":
        found = problems_of(BASE + f"python: [{value}]")
    else:
        found = problems_of(BASE + "python: ['3.100']")
    assert any(says in p for p in found), found
    env = {"FTMATRIX_PYTHON": value.strip("'"), "FTMATRIX_MATRIX": str(tmp_path / "m.yaml")}
    with pytest.raises(SettingsError, match="FTMATRIX_PYTHON="):
        Settings.from_env(env, root=tmp_path, now=datetime(2026, 1, 1))
    assert parse_matrix(BASE + "python: ['3.12.4']", source="m", default_python="3.11").python == (
        "3.12.4",
    )


def test_a_plan_never_has_two_cells_of_one_label() -> None:
    matrix = parse_matrix(BASE + "python: ['3.11', '3.12']", source="m.yaml", default_python="3.11")
    twice = dataclasses.replace(matrix, python=("3.11", "3.11"))
    with pytest.raises(ConfigError) as caught:
        plan_cells(twice)
    assert caught.value.problems == (
        "m.yaml: two cells have the label 'cpu-py3.11-six1.17.0' (the cell "
        f"{plan_cells(matrix).cells[0].id} twice); list each python, version and hardware "
        "class once, spelled apart from the others",
    )


def test_each_problem_is_said_once_and_counted_once() -> None:
    checker = Checker("m.yaml")
    checker.add("a", "wrong")
    checker.add("a", "wrong")
    assert checker.problems == ["m.yaml: a: wrong"]
    error = ConfigError(["m.yaml: a: wrong", "m.yaml: a: wrong", "m.yaml: b: wrong"])
    assert str(error) == (
        "2 problems in the matrix configuration:\n  - m.yaml: a: wrong\n  - m.yaml: b: wrong"
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [("1", True), ("TRUE", True), ("Yes", True), ("on", True), (" 0 ", False)]
    + [("false", False), ("No", False), ("OFF", False), ("", None)],
)
def test_a_yes_or_no_variable_reads_the_usual_words(text: str, expected: bool | None) -> None:
    for default in (True, False):
        wanted = default if expected is None else expected
        assert env_flag({"FTMATRIX_RESUME": text}, "FTMATRIX_RESUME", default=default) is wanted


@pytest.mark.parametrize("variable", ["FTMATRIX_RESUME", "FTMATRIX_REUSE"])
@pytest.mark.parametrize("text", ["maybe", "2", "-1", "tru", "y"])
def test_a_yes_or_no_variable_refuses_anything_else(
    tmp_path: Path, variable: str, text: str
) -> None:
    (tmp_path / "matrix.yaml").write_text(BASE)
    with pytest.raises(SettingsError) as caught:
        Settings.from_env({variable: text}, root=tmp_path, now=datetime(2026, 1, 1))
    assert str(caught.value) == (
        f"{variable}={text!r}: expected yes or no: 1, true, yes, on or 0, false, no, off (any "
        f"case; unset: {'0' if variable == 'FTMATRIX_RESUME' else '1'})"
    )


@pytest.mark.parametrize("text", ["false", "no", "off", "0", "FALSE"])
def test_resume_false_resumes_nothing(tmp_path: Path, text: str) -> None:
    (tmp_path / "matrix.yaml").write_text(BASE)
    (tmp_path / "reports" / "records" / "old-run").mkdir(parents=True)
    env = {"FTMATRIX_RESUME": text, "FTMATRIX_REUSE": text}
    settings = Settings.from_env(env, root=tmp_path, now=datetime(2026, 1, 1))
    assert (settings.resume, settings.reuse) == (False, False)
    assert settings.run_id != "old-run"


def test_a_shard_count_past_the_most_is_refused_and_none_allocates_per_shard() -> None:
    cells = [Cell(python="3.11", pins=(("six", v),), hardware="cpu") for v in ("1", "2", "3")]
    tracemalloc.start()
    chosen = shard_cells(cells, 2, 10_000, {})
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert [c.label for c in chosen] == ["cpu-py3.11-six2"]
    assert shard_cells(cells, 9_999, 10_000, {}) == []
    assert peak < 20_000  # not 10,000 loads (80 kB)
    env = {"FTMATRIX_SHARD": "1/10001"}
    with pytest.raises(SettingsError, match="N at most 10,000"):
        Settings.from_env(env, root=Path("/nonexistent"), now=datetime(2026, 1, 1))


@pytest.mark.parametrize("variable", ["FTMATRIX_RUN_ID", "FTMATRIX_SELECT", "FTMATRIX_OUT"])
def test_a_long_value_is_echoed_short(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], variable: str
) -> None:
    (tmp_path / "matrix.yaml").write_text(BASE)
    env = {"FTMATRIX_MATRIX": str(tmp_path / "matrix.yaml"), variable: "x-" * 2_500}
    assert main(["plan", "--no-resolve"], env=env) != 0
    err = capsys.readouterr().err
    assert len(err) < 400, err
    assert err.count("\n") == 1 and "characters)" in err, err


@pytest.mark.parametrize(
    "spec", ["six=1.17.0,1.17.0", "six=1.17.0,v1.17.0", "six=1.17.0, 1.17.0.0", "six=none,none"]
)
def test_init_refuses_a_version_named_twice(spec: str) -> None:
    with pytest.raises(UsageError, match="is listed twice"):
        parse_package(spec)


def test_init_refuses_what_plan_would_refuse(tmp_path: Path) -> None:
    ran = subprocess.run(
        [sys.executable, "-m", "ftmatrix", "init", "--dir", str(tmp_path), "six=1.17.0,1.17.0"],
        env=os.environ, capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert ran.returncode == ExitCode.USAGE, ran.stderr
    assert "'1.17.0' is listed twice" in ran.stderr
    assert list(tmp_path.iterdir()) == []
    axes = [parse_package("six=1.17.0")]
    assert "matrix.yaml" in scaffold(axes, ["import"], ftmatrix="ftmatrix")
