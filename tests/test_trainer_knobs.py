"""A second break never hidden behind the first: the Trainer's knob cases in real cells.

Slow tier. tests/data/trainer_knobs_matrix.yaml runs two of cases/test_train.py's knob
cases on transformers 4.57.6 and 5.15.0 through the real runner. On 4.57.6 every step is
over-counted (transformers#46204) and label smoothing under accumulation is also broken
(transformers#46731): the smoothing case fails as its own group, with the scale-free
contracts named, and each failure is explained by its own known issue. On 5.15.0 both pass.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ftmatrix.cell.records import read_records
from ftmatrix.known_issues import explain, load_known_issues

ROOT = Path(__file__).parent.parent
DATA = Path(__file__).parent / "data"

pytestmark = pytest.mark.slow

OVER_COUNT_ONLY = (
    "test_train_loss_options[accumulation=1-compute_loss_func=true-family=llama-"
    "label_smoothing_factor=0.0-average_tokens_across_devices=false]"
)
SMOOTHING = (
    "test_train_loss_options[accumulation=2-compute_loss_func=false-family=llama-"
    "label_smoothing_factor=0.1-average_tokens_across_devices=true]"
)


def test_a_knob_break_shows_as_its_own_group_inside_a_release_already_red(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "FTMATRIX_MATRIX": str(DATA / "trainer_knobs_matrix.yaml"),
        "FTMATRIX_CASES": str(ROOT / "cases"),
        "FTMATRIX_OUT": str(tmp_path / "out"),
    }
    ran = subprocess.run(
        [sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py"), "--envdir", str(tmp_path / "envs"),
         "-s", "matrix"],
        env=env, cwd=ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    records = {
        (r.packages["transformers"], r.case.split("::")[-1]): r
        for r in read_records(tmp_path / "out" / "records").records
    }
    broken = {case: records["4.57.6", case] for case in (OVER_COUNT_ONLY, SMOOTHING)}
    assert {case: r.status.value for case, r in broken.items()} == {
        OVER_COUNT_ONLY: "fail",
        SMOOTHING: "fail",
    }
    first_lines = {case: (r.message or "").splitlines()[0] for case, r in broken.items()}
    assert first_lines == {
        OVER_COUNT_ONLY: "contracts broken: exact_update, update_scale",
        SMOOTHING: "contracts broken: exact_update, update_direction, update_scale, accumulation",
    }
    assert broken[OVER_COUNT_ONLY].signature != broken[SMOOTHING].signature
    known = load_known_issues(ROOT / "known_issues.yaml")
    explained = {case: getattr(explain(r, known), "id", None) for case, r in broken.items()}
    assert explained == {
        OVER_COUNT_ONLY: "transformers-num-items-over-count",
        SMOOTHING: "transformers-label-smoothing-accumulation",
    }
    metrics = broken[SMOOTHING].metrics
    assert metrics["accumulation_contract"] == "fail"
    assert metrics["loss_contract"] == "pass"  # the loss on a batch is right; the step is not
    for case in (OVER_COUNT_ONLY, SMOOTHING):
        assert records["5.15.0", case].status.value == "pass", records["5.15.0", case].message
