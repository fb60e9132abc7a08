"""The installability-aware plan against the real index, frozen in time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ftmatrix.cli import ExitCode, main
from ftmatrix.config import parse_matrix
from ftmatrix.pipeline import uv_oracle
from ftmatrix.plan import plan_cells

DATA = Path(__file__).parent / "data"
ROOT = Path(__file__).parent.parent
# After vllm 0.32.0 and torch 2.14.1, before vllm 0.33.0 (which needs torch 2.14).
FROZEN = "2026-10-25T00:00:00Z"


@pytest.mark.slow
def test_vllm_and_torch_give_one_impossible_pair_and_vllm_runs(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
):
    env = {
        **os.environ,
        "FTMATRIX_MATRIX": str(DATA / "vllm_torch_matrix.yaml"),
        "UV_EXCLUDE_NEWER": FROZEN,
        "FTMATRIX_CACHE_DIR": str(tmp_path / "resolve"),
    }
    assert main(["plan", "--json"], env=env) == ExitCode.OK
    plan = json.loads(capsys.readouterr().out)
    (pair,) = plan["impossible_pairs"]
    assert pair["pins"] == {"torch": "2.14.1", "vllm": "0.32.0"}
    assert "vllm>=0.32.0 depends on torch==2.13.0" in pair["reason"]  # frozen: no 0.33
    cells = {(c["pins"]["torch"], c["pins"]["vllm"]): c["installable"] for c in plan["cells"]}
    assert cells == {("2.13.0", "0.32.0"): True, ("2.13.0", None): True, ("2.14.1", None): True}
    assert plan["covering"]["pairs_covered"] == plan["covering"]["pairs_possible"] == 3
    # 3 values alone and 2 pairs; each cell asks what one of those asked (none pins nothing).
    assert plan["covering"]["resolutions"] == 5

    assert main(["plan"], env=env) == ExitCode.OK
    table = capsys.readouterr().out.splitlines()
    assert table[-3:] == [
        "pairs covered: 3 of 3 that co-install (4 pairs in all); 5 resolutions",
        "1 pair cannot co-install, whatever else is chosen (findings, not cells):",
        "  torch 2.14.1 x vllm 0.32.0: vllm>=0.32.0 depends on torch==2.13.0 and you require "
        "torch==2.14.1",
    ]


@pytest.mark.slow
def test_a_pin_never_released_is_a_config_error_in_nox_plan_too(capsys: pytest.CaptureFixture[str]):
    matrix = DATA / "never_released_matrix.yaml"
    expected = (
        f"{matrix}: packages.six[1]: '1.16.5' was never released; "
        "closest released: 1.15.0, 1.16.0, 1.17.0"
    )
    env = {**os.environ, "FTMATRIX_MATRIX": str(matrix)}
    assert main(["plan"], env=env) == ExitCode.CONFIG
    assert expected in capsys.readouterr().err
    ran = subprocess.run(
        [sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py"), "-s", "plan"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert ran.returncode != 0
    assert expected in ran.stderr


@pytest.mark.slow
def test_an_unreachable_index_is_retried_then_reported_never_a_crash(tmp_path: Path):
    text = (
        "packages:\n  six: ['1.16.0', '1.17.0']\n  attrs: ['24.2.0', '25.3.0']\n"
        "strategy: pairwise\ninstall: {index-url: 'http://127.0.0.1:9/simple'}\n"
    )
    matrix = parse_matrix(text, source="m.yaml", default_python="3.11")
    pauses: list[float] = []
    env = {
        **os.environ,
        "FTMATRIX_CACHE_DIR": str(tmp_path),
        "PIP_FIND_LINKS": "",
        "UV_HTTP_RETRIES": "0",  # uv's own retries: ours are what is tested
    }
    plan = plan_cells(matrix, uv_oracle(matrix, env, sleep=pauses.append))
    assert plan.cells == ()
    assert plan.covering is not None
    kinds = {f.kind for f in plan.covering.findings}
    assert kinds == {"unresolved"}
    assert len(plan.covering.findings) == 4  # each value, alone
    assert "127.0.0.1" in (plan.covering.findings[0].reason or "")
    assert pauses == [2.0, 8.0]  # retried twice, then reported
