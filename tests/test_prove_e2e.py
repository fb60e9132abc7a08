"""``nox -s known-issues -- prove`` on real cells: a real CPU entry proven, a wrong one refuted.

Slow tier. The shipped transformers-accumulation-loss-doubled entry (4.47.0 and 4.48.0 take
an accumulated step twice too long; 4.48.1 fixed it) is proven from 4.47.0 on by three real
cells of test_train_exact_update (torch 2.13.0 CPU): 4.47.0 and 4.48.0 show its shape and
4.48.1 does not. A fixture entry of the same shape claiming 4.48.0 fixed it is contradicted
by the 4.48.0 cell, which the command names (exit 1). The proofs are kept in the history,
and the report built from the 4.47.0 cell's records shows its reds under the doubling's
report, never the over-count's.
"""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from ftmatrix.proofs import EntryProof
from ftmatrix.report.render import render_report
from ftmatrix.store import load_proofs, merge_records

ROOT = Path(__file__).parent.parent

pytestmark = pytest.mark.slow


def test_prove_proves_a_real_entry_and_names_the_cell_that_refutes_a_wrong_one(tmp_path: Path):
    shipped = yaml.safe_load((ROOT / "known_issues.yaml").read_text())
    real = next(e for e in shipped if e["id"] == "transformers-accumulation-loss-doubled")
    over_count = next(e for e in shipped if e["id"] == "transformers-num-items-over-count")
    # The real entry as shipped, its plan started at 4.47.0 to keep the test to three cells.
    real["proof"]["oldest"] = {"transformers": "4.47.0"}
    wrong = {
        **real,
        "id": "fixture-wrong-fixed-in",
        "affected": {"transformers": ">=4.47.0,<4.47.1"},
        "fixed-in": {"transformers": "4.48.0"},
    }
    wrong["match"] = {**real["match"], "packages": {"transformers": ">=4.47.0"}}
    (tmp_path / "known_issues.yaml").write_text(yaml.safe_dump([real, wrong, over_count]))
    (tmp_path / "matrix.yaml").write_text(
        "packages:\n  torch: ['2.13.0']\n  transformers: ['4.47.0']\n"
    )
    out = tmp_path / "out"
    env = {
        **os.environ,
        "FTMATRIX_MATRIX": str(tmp_path / "matrix.yaml"),
        "FTMATRIX_CASES": str(ROOT / "cases"),
        "FTMATRIX_OUT": str(out),
    }
    ran = subprocess.run(
        [sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py"), "-s", "known-issues",
         "--", "prove", real["id"], wrong["id"]],
        env=env, cwd=ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    output = ran.stdout + ran.stderr
    assert ran.returncode == 1, output[-4000:]  # a proof contradicts its entry
    label = "cpu-py3.11-torch2.13.0-tf{}".format
    assert (
        f"[ftmatrix] {real['id']}: proven: fixed in transformers 4.48.1 (proven "
        f"{datetime.now(UTC).date()}: 4.47.0 fails, 4.48.0 fails, 4.48.1 fails otherwise)"
    ) in output, output[-4000:]
    assert (
        f"[ftmatrix] {wrong['id']}: contradicted: fixed in transformers 4.48.0 (contradicted "
        f"{datetime.now(UTC).date()}: transformers 4.48.0 fails in {label('4.48.0')})"
    ) in output, output[-4000:]
    proofs = {k: EntryProof.from_mapping(v) for k, v in load_proofs(out / "history.sqlite").items()}
    assert proofs[real["id"]].verdict == "proven"
    assert [c.label for c in proofs[wrong["id"]].contradicting] == [label("4.48.0")]
    assert all(
        c.cell.version in {"4.47.0", "4.48.0", "4.48.1"} for p in proofs.values() for c in p.cells
    )

    # The 4.47.0 cell's records in a report: its red under the doubling's report only.
    report = tmp_path / "report"
    (cell := report / "records" / "cells").mkdir(parents=True)  # the proofs' cells' run
    for path in (out / "proofs" / real["id"] / "records").rglob("*.jsonl"):
        if '"transformers": "4.47.0"' in path.read_text():
            (cell / path.name).write_text(path.read_text())
    assert len(list(cell.iterdir())) == 1
    merge_records(report / "history.sqlite", [report / "records"])
    render_report(report, now=datetime.now(UTC), known_issues=tmp_path / "known_issues.yaml")
    summary = (report / "summary.md").read_text()
    causes = [line for line in summary.splitlines() if line.startswith("- ") and ", fail: " in line]
    assert len(causes) == 1, summary
    assert "transformers/issues/35663" in causes[0] and "proven" in causes[0]
    assert "46204" not in summary and "over-count" not in summary
