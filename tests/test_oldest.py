"""The oldest releases the matrix accepts, run for real: no red of ours on any of them.

Slow tier. tests/data/oldest_matrix.yaml holds two cells (every axis at its oldest
accepted release: trl 0.7, transformers 4.38, peft 0.10, accelerate 0.27, datasets
2.18; and a mid-2024 set) and the import and adapter-level cases. On them a case
passes, or is n/a with the reason the release lacks the feature, or fails with an
upstream break that known_issues.yaml links: never a failure of our own making.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ftmatrix.cell.records import read_records
from ftmatrix.known_issues import cell_statuses, explain, load_known_issues

ROOT = Path(__file__).parent.parent
DATA = Path(__file__).parent / "data"

pytestmark = pytest.mark.slow

OLDEST = "cpu-py3.11-torch2.13.0-tf4.38.2-trl0.7.11-peft0.10.0-acc0.27.2-ds2.18.0"
MID = "cpu-py3.11-torch2.13.0-tf4.46.3-trl0.12.2-peft0.13.2-acc1.1.1-ds3.1.0"


def test_oldest_releases_show_no_red_of_ours(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "FTMATRIX_MATRIX": str(DATA / "oldest_matrix.yaml"),
        "FTMATRIX_CASES": str(ROOT / "cases"),
        "FTMATRIX_OUT": str(tmp_path / "out"),
    }
    ran = subprocess.run(
        [sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py"), "--envdir", str(tmp_path / "envs"),
         "-s", "matrix"],
        env=env, cwd=ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    records = read_records(tmp_path / "out" / "records").records
    known = load_known_issues(ROOT / "known_issues.yaml")
    cells = cell_statuses(records)  # an entry fits by which parametrisations fail together
    by_cell: dict[str, dict[str, str]] = {}
    for record in records:
        by_cell.setdefault(record.cell_label, {})[record.case.split("::")[-1]] = record.status.value
        if record.status.value in ("n/a", "skip"):
            assert record.reason, f"{record.case}: {record.status.value} without a reason"
        elif record.status.value != "pass":
            entry = explain(record, known, cells)
            assert entry is not None, (
                f"{record.cell_label} {record.case}: {record.status.value}: {record.message}"
            )
    assert set(by_cell) == {OLDEST, MID}
    oldest, mid = by_cell[OLDEST], by_cell[MID]
    # The operations run on the oldest releases through their own APIs, contracts included.
    for case in ("test_sft_two_steps[completion-only-llama]", "test_sft_two_steps[packing-llama]",
                 "test_sft_two_steps[plain-llama]", "test_dpo_two_steps",
                 "test_lora_fresh_adapter_keeps_base_logits", "test_imports[trl]"):  # fmt: skip
        assert oldest[case] == "pass", (case, oldest[case])
        assert mid[case] == "pass", (case, mid[case])
    # What those releases never had is n/a, never fail.
    assert oldest["test_import_later_names[trl.SFTConfig]"] == "n/a"
    assert mid["test_import_later_names[trl.SFTConfig]"] == "pass"
    assert oldest["test_sft_two_steps[plain-phi3]"] == "n/a"  # Phi3Config: transformers 4.40
    assert oldest["test_grpo_two_steps[llama]"] == mid["test_grpo_two_steps[llama]"] == "n/a"
    # transformers' Trainer without trl: the steps run on both eras; the update contracts
    # find the upstream breaks of each era (each a known issue, checked above).
    assert oldest["test_train_two_steps[llama]"] == mid["test_train_two_steps[llama]"] == "pass"
    assert oldest["test_train_exact_update[accumulation-1]"] == "pass"
    assert oldest["test_train_exact_update[accumulation-2]"] == "fail"  # per micro-batch mean
    assert mid["test_train_exact_update[accumulation-1]"] == "fail"  # num_items over-count
    assert oldest["test_train_resume_equivalence"] == "fail"  # rng state under torch 2.6+
    # DPO's update: right on both eras without accumulation; under accumulation 2 the mid
    # era's step is exactly twice too long (trl < 0.14 with transformers 4.46+, a known issue).
    assert oldest["test_dpo_exact_update[accumulation-1]"] == "pass"
    assert oldest["test_dpo_exact_update[accumulation-2]"] == "pass"
    assert mid["test_dpo_exact_update[accumulation-1]"] == "pass"
    assert mid["test_dpo_exact_update[accumulation-2]"] == "fail"
    # The preference trainers: RewardTrainer's step is right on the oldest trl (rows it
    # did not tokenize itself, tokenized by the case) and 2x under accumulation 2 on
    # transformers 4.46 (a known issue, checked above); ORPO, KTO, CPO came in trl 0.8.
    assert oldest["test_reward_update[center_rewards_coefficient=none]"] == "pass"
    assert mid["test_reward_update[center_rewards_coefficient=none]"] == "fail"
    assert oldest["test_preference_accumulation[kto-kto]"] == "n/a"
    assert mid["test_preference_accumulation[kto-kto]"] == "fail"
    # QLoRA: transformers before 4.53 loads bitsandbytes models on CUDA only: skip, saying so.
    qlora = [r for r in records if "test_qlora_two_steps" in r.case]
    assert len(qlora) == 6 and {r.status.value for r in qlora} == {"skip"}, qlora
    assert all("loads bitsandbytes models on CUDA only" in (r.reason or "") for r in qlora)
