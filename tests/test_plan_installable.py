"""The installability-aware plan against the real index, frozen in time."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ftmatrix.cli import ExitCode, main

DATA = Path(__file__).parent / "data"
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
