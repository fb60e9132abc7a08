"""The docs stay true to the code they document: each test reads the page its text lives on."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ftmatrix.cell.status import status_table_markdown
from ftmatrix.settings import ENV_VARS

ROOT = Path(__file__).parent.parent
DOCS = ROOT / "docs"
README = (ROOT / "README.md").read_text()
CI_RUN = (Path(__file__).parent.parent / ".ci" / "run").read_text()


def test_status_table_is_generated_from_the_enum():
    assert status_table_markdown() in (DOCS / "concepts" / "statuses.md").read_text()


def test_every_environment_variable_is_documented():
    page = (DOCS / "reference" / "environment.md").read_text()
    for name in ENV_VARS:
        assert f"`{name}`" in page


def test_ci_runs_the_readme_test_command():
    command = re.search(r"^\$ (.*nox -s tests)$", README, re.MULTILINE)
    assert command, "README.md must show the test command"
    assert command.group(1) in CI_RUN


# The real cell of test_e2e.py's whole-library test (default pins): uv's cache holds it.
REAL_CELL = """
packages:
  torch: ["2.13.0"]
  transformers: ["5.23.0"]
  trl: ["1.16.0"]
  peft: ["0.18.1"]
"""


@pytest.mark.slow
def test_the_docs_case_runs_as_written_and_passes(tmp_path: Path):
    """docs/guides/writing-a-case.md: its example, beside the product's case helpers, in one
    real cell."""
    page = (DOCS / "guides" / "writing-a-case.md").read_text()
    example = re.search(r"```python\n(.*?)```", page, re.DOTALL)
    assert example, "docs/guides/writing-a-case.md must show a case"
    cases = tmp_path / "cases"
    shutil.copytree(
        ROOT / "cases" / "helpers", cases / "helpers", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copy(ROOT / "cases" / "conftest.py", cases / "conftest.py")
    (cases / "test_docs_case.py").write_text(example.group(1))
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(REAL_CELL)
    out = tmp_path / "out"
    ran = subprocess.run(
        [sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py"), "-s", "matrix"]
        + ["--envdir", str(tmp_path / "envs")],
        env={
            **os.environ,
            "FTMATRIX_MATRIX": str(matrix),
            "FTMATRIX_CASES": str(cases),
            "FTMATRIX_OUT": str(out),
        },
        capture_output=True,
        text=True,
        check=False,
    )
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    (record,) = [
        json.loads(line)
        for path in (out / "records").rglob("*.jsonl")
        for line in path.read_text().splitlines()
    ]
    assert (record["case"], record["status"]) == (
        "test_docs_case.py::test_sft_with_neftune",
        "pass",
    ), record
    assert record["metrics"]["steps"] == 2
    assert math.isfinite(record["metrics"]["loss"])


def test_the_layout_names_every_module():
    page = (DOCS / "contributing.md").read_text()
    layout = re.search(r"^## Layout\n.*?```text\n(.*?)```", page, re.DOTALL | re.MULTILINE)
    assert layout, "docs/contributing.md has no Layout section with a tree"
    shown = set(re.findall(r"[\w/]+\.py|\w+/", layout.group(1)))
    package = ROOT / "src" / "ftmatrix"
    for path in package.rglob("*.py"):
        relative = path.relative_to(package)
        if relative.name == "__init__.py":
            if relative.parent != Path():
                assert f"{relative.parent.name}/" in shown, relative.parent
        else:
            assert relative.name in shown, relative


ARCHITECTURE = (ROOT / "ARCHITECTURE.md").read_text()


def test_every_path_the_architecture_names_exists():
    named = re.findall(r"`([\w./-]+(?:\.py|\.md|/))`", ARCHITECTURE)
    assert "src/ftmatrix/pipeline.py" in named
    for path in named:
        assert (ROOT / path).exists(), path


def test_every_module_is_in_the_architecture_or_the_layout_tree():
    page = (DOCS / "contributing.md").read_text()
    layout = re.search(r"^## Layout\n.*?```text\n(.*?)```", page, re.DOTALL | re.MULTILINE)
    assert layout, "docs/contributing.md has no Layout section with a tree"
    named = set(re.findall(r"src/ftmatrix/([\w/]+\.py)", ARCHITECTURE))
    shown = set(re.findall(r"[\w/]+\.py", layout.group(1)))
    package = ROOT / "src" / "ftmatrix"
    for path in package.rglob("*.py"):
        relative = path.relative_to(package)
        if relative.name != "__init__.py" and "templates" not in relative.parts:
            assert relative.as_posix() in named or relative.name in shown, relative
