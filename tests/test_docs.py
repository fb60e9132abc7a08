"""README.md stays true to the code it documents."""

from __future__ import annotations

import re
from pathlib import Path

from ftmatrix.settings import ENV_VARS
from ftmatrix.status import status_table_markdown

README = (Path(__file__).parent.parent / "README.md").read_text()
CI_RUN = (Path(__file__).parent.parent / ".ci" / "run").read_text()


def test_status_table_is_generated_from_the_enum():
    assert status_table_markdown() in README


def test_every_environment_variable_is_documented():
    for name in ENV_VARS:
        assert f"`{name}`" in README


def test_ci_runs_the_readme_test_command():
    command = re.search(r"^\$ (.*nox -s tests)$", README, re.MULTILINE)
    assert command, "README.md must show the test command"
    assert command.group(1) in CI_RUN
