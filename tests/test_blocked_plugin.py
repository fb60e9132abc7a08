"""Settings that would take a part of the results plugin away from a real cell: the cases'
own pytest settings (``addopts = -p no:...``), and the caller's PYTEST_ADDOPTS, with
pytest-xdist workers. A part blocked ran the cases unrecorded, or ungated (a case that is
n/a recorded as its failure).

Slow tier: a real venv (six only, from uv's cache) and real subprocesses.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import records_of, run

from ftmatrix.runner import current_python

pytestmark = pytest.mark.slow

GATED = """
import pytest

@pytest.mark.requires_packages(six=">=999")
def test_feature_missing():
    raise AssertionError("must not run")

def test_plain():
    pass
"""
PARTS = ("ftmatrix-recorder", "ftmatrix-gatekeeper", "ftmatrix-channel-guard")
BLOCK = " ".join(f"-p no:{part}" for part in PARTS)


@pytest.mark.parametrize(("where", "workers"), [("addopts", 1), ("PYTEST_ADDOPTS", 2)])
def test_a_cell_whose_settings_block_a_part_of_the_plugin_records_every_case(
    tmp_path: Path, where: str, workers: int
):
    cases = tmp_path / "cases"
    cases.mkdir()
    (cases / "test_gated.py").write_text(GATED)
    if where == "addopts":
        (cases / "pytest.ini").write_text(f"[pytest]\naddopts = {BLOCK}\n")
    (tmp_path / "matrix.yaml").write_text(
        f'python: ["{current_python()}"]\npackages:\n  six: ["1.17.0"]\n'
        f"limits: {{workers: {workers}}}\n"
    )
    ran = run("cli", tmp_path, **({"PYTEST_ADDOPTS": BLOCK} if where != "addopts" else {}))
    output = ran.stdout + ran.stderr
    found = {r["case"].split("::")[-1]: r["status"] for r in records_of(tmp_path / "out")}
    assert found == {"test_feature_missing": "n/a", "test_plain": "pass"}, output[-3000:]
