"""The command line: plan output, exit codes, one message per kind of error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ftmatrix.cli import ExitCode, main

DATA = Path(__file__).parent / "data"


def env_for(matrix: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, "FTMATRIX_MATRIX": str(matrix), **extra}


def test_plan_prints_cells_and_the_count(capsys: pytest.CaptureFixture[str]):
    code = main(["plan", "--no-resolve"], env=env_for(DATA / "small_matrix.yaml"))
    out = capsys.readouterr().out.splitlines()
    assert code == ExitCode.OK
    assert out[0] == f"{DATA / 'small_matrix.yaml'}: strategy full"
    assert out[1].split()[0] == "cpu-py3.11-six1.16.0-attrs23.2.0"
    assert out[1].split()[2:] == ["six==1.16.0", "attrs==23.2.0"]
    assert out[-1] == ("4 cells selected (of 4 planned with strategy full; the full product has 4)")


def test_plan_select_glob(capsys: pytest.CaptureFixture[str]):
    argv = ["plan", "--no-resolve", "--select", "*-six1.17*"]
    assert main(argv, env=env_for(DATA / "small_matrix.yaml")) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("2 cells selected (of 4 planned")


def test_invalid_matrix_exits_with_the_config_code(capsys: pytest.CaptureFixture[str]):
    code = main(["plan"], env=env_for(DATA / "invalid" / "unknown_keys.yaml"))
    assert code == ExitCode.CONFIG
    err = capsys.readouterr().err
    assert err.startswith("ftmatrix: 2 problems in the matrix configuration:")
    assert "Perhaps you meant 'strategy'?" in err


def test_rule_matching_nothing_exits_with_the_plan_code(capsys: pytest.CaptureFixture[str]):
    code = main(["plan"], env=env_for(DATA / "invalid" / "exclude_matches_nothing.yaml"))
    assert code == ExitCode.PLAN
    assert "matches no cell" in capsys.readouterr().err


def test_an_unreachable_index_is_one_line_naming_it(capsys: pytest.CaptureFixture[str]):
    code = main(["plan"], env=env_for(DATA / "invalid" / "unreachable_index.yaml"))
    assert code == ExitCode.INDEX
    assert capsys.readouterr().err == (
        "ftmatrix: package index http://127.0.0.1:9/simple (set by install.index-url) cannot "
        "be read: [Errno 111] Connection refused (listing the releases of six)\n"
    )


def test_an_index_variable_is_named_as_what_chose_the_index(capsys: pytest.CaptureFixture[str]):
    env = env_for(DATA / "small_matrix.yaml", UV_INDEX_URL="http://127.0.0.1:9/simple")
    assert main(["plan", "--json"], env=env) == ExitCode.INDEX
    assert "(set by UV_INDEX_URL) cannot be read" in capsys.readouterr().err


def test_report_from_no_records(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    assert main(["report", "--out", str(tmp_path)], env={}) == ExitCode.OK
    assert capsys.readouterr().out == (
        f"report: {tmp_path / 'index.html'} (0 records, 0 cells); to publish: {tmp_path / 'site'}\n"
    )
    assert "No records found" in (tmp_path / "index.html").read_text()


@pytest.mark.slow
def test_plan_json_resolves_each_cell(capsys: pytest.CaptureFixture[str], tmp_path: Path):
    matrix = tmp_path / "m.yaml"
    matrix.write_text(
        "packages:\n  six: ['1.17.0']\n  trl: ['1.16.0']\n  transformers: ['4.40.0']\n"
    )
    assert main(["plan", "--json"], env=env_for(matrix)) == 0
    payload = json.loads(capsys.readouterr().out)
    (cell,) = payload["cells"]
    assert cell["label"] == "cpu-py3.11-six1.17.0-trl1.16.0-tf4.40.0"
    assert cell["session"] == f"matrix({cell['label']})"
    assert cell["installable"] is False
    assert "trl" in cell["reason"] and "transformers" in cell["reason"]
    assert cell["runs_on"] == ["ubuntu-latest"]


@pytest.mark.slow
def test_plan_table_says_which_cells_install(capsys: pytest.CaptureFixture[str], tmp_path: Path):
    matrix = tmp_path / "m.yaml"
    matrix.write_text("packages:\n  trl: ['1.16.0']\n  transformers: ['4.40.0', '4.57.6']\n")
    assert main(["plan"], env=env_for(matrix)) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].split()[0] == "cpu-py3.11-trl1.16.0-tf4.40.0"
    # The resolver's first step names the conflict; its last only says "unsatisfiable".
    assert "  uninstallable: " in lines[1]
    why = lines[1].split("  uninstallable: ")[1]
    assert why.startswith("trl") and "depends on transformers>=" in why, why
    assert lines[2].endswith("  installable")
    assert lines[-1].endswith("; 1 installable, 1 uninstallable")


@pytest.mark.slow
def test_plan_refuses_a_version_the_index_never_had(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
):
    matrix = tmp_path / "m.yaml"
    matrix.write_text("packages:\n  six: ['1.17.0', '2.0']\n")
    assert main(["plan"], env=env_for(matrix)) == ExitCode.CONFIG
    assert capsys.readouterr().err.splitlines()[1] == (
        f"  - {matrix}: packages.six[1]: '2.0' was never released; closest released: 1.16.0, 1.17.0"
    )


def a_wheel(folder: Path, name: str, version: str) -> None:
    """A minimal pure-Python wheel: what uv needs to resolve and install it."""
    import zipfile

    info = f"{name}-{version}.dist-info"
    with zipfile.ZipFile(folder / f"{name}-{version}-py3-none-any.whl", "w") as wheel:
        wheel.writestr(f"{name}.py", "")
        wheel.writestr(
            f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        )
        wheel.writestr(
            f"{info}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        wheel.writestr(f"{info}/RECORD", "")


@pytest.mark.parametrize("variable", ["UV_OFFLINE", "PIP_NO_INDEX"])
def test_an_offline_plan_reads_no_index(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, variable: str
) -> None:
    # An offline host (the GPU host of 2026-11-27): the plan listed torch's releases on
    # PyPI to check the pins and ended with exit 8. Its wheelhouse and uv decide instead.
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    a_wheel(wheels, "offline_only", "1.0")
    a_wheel(wheels, "pytest", "9.0.0")  # the runner every cell gets, from the wheelhouse too
    matrix = tmp_path / "m.yaml"
    matrix.write_text(f"packages:\n  offline_only: ['1.0']\ninstall: {{find-links: [{wheels}]}}\n")
    unreachable = {"UV_INDEX_URL": "http://127.0.0.1:9/simple", variable: "1"}
    assert main(["plan"], env=env_for(matrix, **unreachable)) == ExitCode.OK
    assert capsys.readouterr().out.splitlines()[1].endswith("  installable")


def test_version_is_the_packages():
    from ftmatrix import __version__

    shown = subprocess.run(
        [sys.executable, "-m", "ftmatrix", "--version"], capture_output=True, text=True, check=True
    )
    assert shown.stdout == f"ftmatrix {__version__}\n"
