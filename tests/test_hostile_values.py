"""Hostile values never end in a traceback: a property over matrix.yaml and results.json.

Values a user (or a damaged file) can put anywhere: NaN, infinities, huge integers, huge
version strings, lone surrogates, wrong types. `plan --no-resolve` and `check` read them
and always answer as bad input does: exit 2 (3 for a matrix), one line per problem,
never a traceback and never the exit 1 that check keeps for "your stack is known broken".
In-process through `ftmatrix.cli.main`, so each example costs milliseconds.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ftmatrix.cli import main
from ftmatrix.errors import ExitCode
from ftmatrix.matrix_schema import matrix_json_schema

DATA = Path(__file__).parent / "data"
HUGE_VERSION = "1" * 5000

HOSTILE = st.one_of(
    st.sampled_from(
        [math.nan, math.inf, -math.inf, 10**400, -(10**400), 2**63, HUGE_VERSION,
         "1." + HUGE_VERSION, "\ud800", "x\udcff", "", -1, 0, True, None, [], {}, 1e308,
         # versions of every form a release can take, and forms none can
         "1.0+local", "1!2.0", "==1.0", "\u0661\u0662\u0663", "1.0 ", "v1", "5m", "1e400",
         False, 1.0, 2.5, -0.0, [1], {"a": 1}, "\x00", "\x1b[2J"]
    ),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.text(max_size=8),
)  # fmt: skip


def run(argv: list[str], root: Path) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv, {"FTMATRIX_OUT": str(root / "out")}, root=root)
    return code, out.getvalue(), err.getvalue()


def yaml_value(value: Any) -> str:
    """``value`` as YAML: floats as YAML writes them (.nan, .inf), text JSON-quoted."""
    if isinstance(value, float) and math.isnan(value):
        return ".nan"
    if isinstance(value, float) and math.isinf(value):
        return ".inf" if value > 0 else "-.inf"
    if isinstance(value, str):
        # JSON escapes a lone surrogate as \\udXXX, which YAML reads back as one.
        return json.dumps(value)
    text = json.dumps(value)
    if isinstance(value, float) and "e" in text and "." not in text:
        return text.replace("e", ".0e")  # YAML 1.1 reads 1e-07 as text, 1.0e-07 as a number
    return text


MATRIX_PLACES = [
    "packages: {{six: [{v}]}}",
    "packages: {{six: ['1.17.0']}}\npython: [{v}]",
    "packages: {{six: ['1.17.0']}}\ntimeouts: {{case: {v}}}",
    "packages: {{six: ['1.17.0']}}\ntimeouts: {{cell: {v}}}",
    "packages: {{six: ['1.17.0']}}\nlimits: {{memory-gib: {v}}}",
    "packages: {{six: ['1.17.0']}}\nlimits: {{workers: {v}}}",
    "packages: {{six: {{latest: {v}}}}}",
    "packages: {{six: {{range: {v}}}}}",
    "packages: {{six: ['1.17.0']}}\nbisect: {{budget: {v}}}",
    "packages: {{six: ['1.17.0']}}\nreuse: {{max-age-days: {v}}}",
    "packages: {{six: ['1.17.0']}}\nhardware: {{cpu: {{gpus: {v}}}}}",
    "packages: {{six: ['1.17.0']}}\nexclude: [{{six: {v}}}]",
]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(place=st.sampled_from(MATRIX_PLACES), value=HOSTILE)
@example(place=MATRIX_PLACES[2], value=math.nan)  # a case never killed
@example(place=MATRIX_PLACES[4], value=math.inf)  # an OverflowError
@example(place=MATRIX_PLACES[0], value=HUGE_VERSION)  # int() refuses 5,000 digits
@example(place=MATRIX_PLACES[1], value="3." + HUGE_VERSION)
@example(place=MATRIX_PLACES[-1], value=HUGE_VERSION)  # packaging int()s a rule's digits
def test_a_hostile_matrix_value_is_one_line_per_problem_never_a_traceback(
    place: str, value: Any
) -> None:
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        (root / "matrix.yaml").write_text(place.format(v=yaml_value(value)), encoding="utf-8")
        code, _, err = run(["plan", "--no-resolve"], root)
    # A valid value plans (0); anything else is the matrix's error, every line a problem.
    assert code in (ExitCode.OK, ExitCode.CONFIG, ExitCode.PLAN), (code, err[-2000:])
    assert "Traceback" not in err
    if code != ExitCode.OK:
        assert all(line.startswith(("ftmatrix: ", "  - ")) for line in err.strip().splitlines()), (
            err[-2000:]
        )


# YAML written as a user writes it, which PyYAML's constructors read into other values than
# written (010 is 8) or choke on (a date of no day, a tag its text cannot be, an alias in
# itself): each is the matrix's problem at its line, whatever place it takes.
YAML_FORMS = st.sampled_from(
    ["2024-02-30", "0000-01-01", "2024-13-01 10:00:00", "!!float abc", "!!bool maybe",
     "!!int abc", "!!timestamp x", "!!binary '@@'", "010", "1:30", "0_10", "&a [*a]",
     "&a {b: *a}", "!!set {a}", "!!omap [a]", "!!python/object:os.system x", "!!map [1]"]
)  # fmt: skip


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(place=st.sampled_from(MATRIX_PLACES), form=YAML_FORMS)
@example(place=MATRIX_PLACES[0], form="2024-02-30")  # a ValueError traceback once
@example(place=MATRIX_PLACES[2], form="&a [*a]")  # a RecursionError traceback once
def test_a_hostile_yaml_form_is_the_matrix_problem_at_its_line(place: str, form: str) -> None:
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        (root / "matrix.yaml").write_text(place.format(v=form), encoding="utf-8")
        code, _, err = run(["plan", "--no-resolve"], root)
    assert code in (ExitCode.CONFIG, ExitCode.PLAN), (code, err[-2000:])
    assert "Traceback" not in err
    assert all(line.startswith(("ftmatrix: ", "  - ")) for line in err.strip().splitlines()), err


RESULTS = json.loads((DATA / "default_results.json").read_text(encoding="utf-8"))
RESULTS["records"] = RESULTS["records"][:12]  # a few cells: each example stays quick
RECORD_FIELDS = sorted(RESULTS["records"][0])


# results.json's own keys, and one it never has: a hostile value goes in any of them.
TOP_FIELDS = sorted({*RESULTS, "runs", "failure_groups", "schema", "unknown"} - {"records"})


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    where=st.sampled_from(["record", "pin", "pins", "top"]),
    field=st.sampled_from(RECORD_FIELDS),
    top=st.sampled_from(TOP_FIELDS),
    value=HOSTILE,
)
@example(where="top", field="case", top="runs", value=math.nan)  # 'runs' of a wrong type
@example(where="pin", field="case", top="runs", value=HUGE_VERSION)
@example(where="pin", field="case", top="runs", value=3.1)  # a pin that is no text
@example(where="top", field="case", top="failure_groups", value=5)  # a TypeError once
@example(where="top", field="case", top="schema", value=True)  # a bool is no schema 1
@example(where="record", field="duration", top="runs", value=10**400)  # an OverflowError
@example(where="record", field="attempts", top="runs", value=[1])  # a TypeError once
def test_a_hostile_results_value_is_exit_2_in_one_line(
    where: str, field: str, top: str, value: Any
) -> None:
    results = json.loads(json.dumps(RESULTS))
    record = results["records"][0]
    if where == "record":
        record[field] = value
    elif where == "pin":
        record["pins"][sorted(record["pins"])[0]] = value
    elif where == "pins":
        record["pins"] = value
    else:
        results[top] = value
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        (root / "results.json").write_text(json.dumps(results), encoding="utf-8")
        (root / "freeze.txt").write_text("trl==0.19.1\ntransformers==4.57.6\ntorch==2.13.0\n")
        code, _, err = run(
            [
                "check",
                "--results",
                str(root / "results.json"),
                "--freeze",
                str(root / "freeze.txt"),
            ],
            root,
        )
    assert "Traceback" not in err
    assert code in (ExitCode.OK, ExitCode.FAILED, ExitCode.USAGE), (code, err[-2000:])
    if code == ExitCode.USAGE:
        assert len(err.strip().splitlines()) == 1, err[-2000:]


# A number of 5,000 digits, written as is (Python will not print one): more digits than
# Python converts, in YAML or JSON.
DIGITS = "9" * 5000


@pytest.mark.parametrize("place", MATRIX_PLACES)
def test_a_number_of_5000_digits_in_a_matrix_is_one_line(place: str) -> None:
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        (root / "matrix.yaml").write_text(place.format(v=DIGITS), encoding="utf-8")
        code, _, err = run(["plan", "--no-resolve"], root)
    assert (code, "Traceback" in err) == (ExitCode.CONFIG, False), err[-2000:]
    assert "invalid YAML: a number of 5,000 digits; no setting takes one" in err


@pytest.mark.parametrize("where", ["top", "record", "pin"])
def test_a_number_of_5000_digits_in_results_is_exit_2_in_one_line(where: str) -> None:
    results = json.loads(json.dumps(RESULTS))
    if where == "top":
        results["unknown"] = "DIGITS"
    elif where == "record":
        results["records"][0]["duration"] = "DIGITS"
    else:
        results["records"][0]["pins"]["peft"] = "DIGITS"
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        text = json.dumps(results).replace('"DIGITS"', DIGITS)
        (root / "results.json").write_text(text, encoding="utf-8")
        (root / "freeze.txt").write_text("trl==0.19.1\n")
        code, _, err = run(["check", "--results", str(root / "results.json"),
                            "--freeze", str(root / "freeze.txt")], root)  # fmt: skip
    assert (code, "Traceback" in err) == (ExitCode.USAGE, False), err[-2000:]
    assert len(err.strip().splitlines()) == 1, err[-2000:]
    assert "holds a number of more than 4,300 digits, so it is not a results.json" in err


HUGE = "1." + "9" * 5000
ROOT = Path(__file__).parent.parent


def cli(*args: str, cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ftmatrix", *args], input=stdin, cwd=cwd,
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip


def nox(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py"), *args],
        cwd=cwd, capture_output=True, text=True, check=False, timeout=300,
        env={**os.environ, **env},
    )  # fmt: skip


@pytest.mark.parametrize(
    ("args", "stdin", "says"),
    [
        (["check", "--freeze", "-"], f"trl=={HUGE}\n",
         "is not a version (5,002 characters; a version has at most 200)"),
        (["check", "--freeze", "freeze.txt"], None,
         "records[0]: pins.peft: '1.999999999999999999999999999999999999999999999999999999... "
         "is not a version (5,002 characters; a version has at most 200)"),
        (["bisect", "--case", "test_x.py::test_x", "--axis", "six", "--good", "1.0", "--bad", HUGE],
         None, "bisect --bad '1.9999"),
        (["bisect", "--case", "test_x.py::test_x", "--axis", "six", "--good", "1.0", "--bad", "2.0",
          "--pins", f"attrs=={HUGE}"], None, "(5,002 characters; a version has at most 200)"),
    ],
)  # fmt: skip
def test_a_version_of_5000_digits_is_bad_input_in_one_line(
    tmp_path: Path, args: list[str], stdin: str | None, says: str
) -> None:
    results = json.loads(json.dumps(RESULTS))
    if "freeze.txt" in args:  # the huge version in the results file instead
        results["records"][0]["pins"]["peft"] = HUGE
    (tmp_path / "results.json").write_text(json.dumps(results))
    (tmp_path / "freeze.txt").write_text("trl==0.19.1\n")
    (tmp_path / "matrix.yaml").write_text('packages:\n  six: ["1.17.0"]\n')
    if args[0] == "check":
        args = [*args, "--results", "results.json"]
    done = cli(*args, cwd=tmp_path, stdin=stdin)
    assert done.returncode == ExitCode.USAGE, done.stderr[-3000:]
    assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1, done.stderr[-3000:]
    assert says in done.stderr


def test_a_version_of_5000_digits_through_nox_bisect(tmp_path: Path) -> None:
    (tmp_path / "matrix.yaml").write_text('packages:\n  six: ["1.17.0"]\n')
    done = nox(
        "-s", "bisect", "--", "--case", "test_x.py::test_x", "--axis", "six",
        "--good", "1.0", "--bad", HUGE,
        cwd=tmp_path, env={"FTMATRIX_MATRIX": str(tmp_path / "matrix.yaml")},
    )  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode != 0 and "Traceback" not in output, output[-3000:]
    assert "not a version, such as 0.19.1 (5,002 characters" in output


BROKEN_CELL = "cpu-py3.11-torch2.13.0-tf5.23.0-trl0.19.1-peft0.17.1-nounsloth"


@pytest.mark.parametrize(("pin", "code"), [("0.19.1", 1), (0.19, 2), ("zero.19", 2)])
def test_a_known_break_whose_pins_cannot_be_read_is_never_untested(
    tmp_path: Path, pin: Any, code: int
) -> None:
    """A record check cannot compare was skipped: the break read "untested", exit 0."""
    full = json.loads((DATA / "default_results.json").read_text(encoding="utf-8"))
    full["records"] = [r for r in full["records"] if r["cell_label"] == BROKEN_CELL]
    for record in full["records"]:
        record["pins"]["trl"] = pin
    (tmp_path / "results.json").write_text(json.dumps(full))
    stack = "peft==0.17.1\ntorch==2.13.0\ntransformers==5.23.0\ntrl==0.19.1\n"
    done = cli(
        "check", "--results", "results.json", "--freeze", "-", "--operation", "sft",
        cwd=tmp_path, stdin=stack,
    )  # fmt: skip
    assert done.returncode == code, done.stdout[-2000:] + done.stderr[-2000:]
    if code == 2:
        assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
        assert f"records[0]: pins.trl: {pin!r} is not a version" in done.stderr
    else:
        assert "summary: 1 broken (exit 1: broken sft on cpu)" in done.stdout


# Every number matrix.yaml limits a run by, where it goes.
LIMIT_PLACES = {
    "timeouts.case": "packages: {{six: ['1.17.0']}}\ntimeouts: {{case: {v}}}",
    "timeouts.cell": "packages: {{six: ['1.17.0']}}\ntimeouts: {{cell: {v}}}",
    "limits.memory-gib": "packages: {{six: ['1.17.0']}}\nlimits: {{memory-gib: {v}}}",
    "limits.workers": "packages: {{six: ['1.17.0']}}\nlimits: {{workers: {v}}}",
    "limits.cells": "packages: {{six: ['1.17.0']}}\nlimits: {{cells: {v}}}",
    "hardware.cpu.gpus": "packages: {{six: ['1.17.0']}}\nhardware: {{cpu: {{gpus: {v}}}}}",
    "bisect.budget": "packages: {{six: ['1.17.0']}}\nbisect: {{budget: {v}}}",
    "reuse.max-age-days": "packages: {{six: ['1.17.0']}}\nreuse: {{max-age-days: {v}}}",
}
WHOLE_NUMBERS = {
    "limits.workers",
    "limits.cells",
    "hardware.cpu.gpus",
    "bisect.budget",
    "reuse.max-age-days",
}
# Below these, nothing runs: a Python running pytest holds 31 to 46 MiB, a pytest takes
# about a second to start, and a case's timeout is watched four times a second.
TOO_SMALL_BELOW = {"limits.memory-gib": 0.0625, "timeouts.case": 1, "timeouts.cell": 1}
MOST_GPUS = 64  # a cell leases its GPUs on one machine: more is a typo
# Numbers at every scale: too small to run anything (a 107-byte memory limit, a
# microsecond's timeout), zero, negative, bools, the bounds themselves and past them.
LIMIT_VALUES = st.one_of(
    st.sampled_from(
        [1e-7, 1e-9, 0.001, 0.06, 0.0625, 0.5, 0.999, 1, 64, 65, 256, 257, 2592000, 2592001,
         1048576, 1048577, 0, -0.0, -1, True, False, math.nan, math.inf, 10**30]
    ),
    st.floats(min_value=-2.0, max_value=2.0),
    st.integers(min_value=-3, max_value=300),
)  # fmt: skip


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(key=st.sampled_from(sorted(LIMIT_PLACES)), value=LIMIT_VALUES)
@example(key="limits.memory-gib", value=1e-7)  # 107 bytes: every case an oom
@example(key="timeouts.case", value=1e-9)  # every case a timeout
@example(key="hardware.cpu.gpus", value=10**30)  # no machine has them
def test_a_limit_plans_only_where_the_documented_schema_allows_it(key: str, value: Any) -> None:
    """What `plan` accepts is what the schema (the reference docs) says is allowed: a limit
    too small to run anything is refused with the smallest allowed value, never planned."""
    text = LIMIT_PLACES[key].format(v=yaml_value(value))
    try:
        jsonschema.validate(yaml.safe_load(text), matrix_json_schema())
        documented = True
    except jsonschema.ValidationError:
        documented = False
    if key in WHOLE_NUMBERS and isinstance(value, float):
        documented = False  # 2.0 is an integer to JSON Schema; a count is written 2
    if isinstance(value, float) and not math.isfinite(value):
        documented = False  # JSON has no NaN or infinity; a NaN passes every comparison
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        (root / "matrix.yaml").write_text(text, encoding="utf-8")
        code, _, err = run(["plan", "--no-resolve"], root)
    assert "Traceback" not in err
    assert code == (ExitCode.OK if documented else ExitCode.CONFIG), (key, value, code, err)
    if code == ExitCode.CONFIG:
        assert f"{key}: must be" in err, err
    least = TOO_SMALL_BELOW.get(key)
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if least is not None and number and 0 < value < least:
        assert code == ExitCode.CONFIG, (key, value)  # nothing can run under it
        assert f"from {least}" in err, err  # the smallest allowed value, said
    if key == "hardware.cpu.gpus" and number and value > MOST_GPUS:
        assert code == ExitCode.CONFIG, (key, value)  # more than any one machine has
