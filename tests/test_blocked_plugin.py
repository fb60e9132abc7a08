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


def test_options_after_the_double_dash_never_undo_the_cells_own(tmp_path: Path):
    """The options after ``--`` came after ours, and the last given wins: a ``-p no:`` of
    the plugin ran the cases unrecorded, ``--confcutdir=/`` ran a conftest.py above the
    cases folder."""
    (tmp_path / "conftest.py").write_text(
        "import pathlib\npathlib.Path(__file__).with_name('ABOVE_RAN').write_text('ran')\n"
    )
    cases = tmp_path / "cases"
    cases.mkdir()
    (cases / "test_gated.py").write_text(GATED)
    (tmp_path / "matrix.yaml").write_text(
        f'python: ["{current_python()}"]\npackages:\n  six: ["1.17.0"]\nlimits: {{workers: 1}}\n'
    )
    options = ["-p", "no:ftmatrix.cell.plugin", *BLOCK.split(), f"--confcutdir={tmp_path}"]
    ran = run("cli", tmp_path, "--", *options, "--rootdir=/")
    output = ran.stdout + ran.stderr
    found = {r["case"].split("::")[-1]: r["status"] for r in records_of(tmp_path / "out")}
    assert found == {"test_feature_missing": "n/a", "test_plain": "pass"}, output[-3000:]
    assert not (tmp_path / "ABOVE_RAN").exists()
