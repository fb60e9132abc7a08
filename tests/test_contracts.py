"""The cases' numeric contracts can fail, and say what failed.

Fast tier: the torch-free parts of cases/helpers/contracts.py (the message, scalar and
label checks). Slow tier: the product's case logic, through the real runner in one
cell at the default pins, against the real trainers (pass) and against deliberately
wrong ones (fail, with the quantity, both values and the tolerance in the message).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).parent.parent
DATA = Path(__file__).parent / "data"


def load_contracts() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "helpers.contracts", ROOT / "cases" / "helpers" / "contracts.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


contracts = load_contracts()


def test_a_contract_error_is_an_assertion_so_the_plugin_records_fail() -> None:
    assert issubclass(contracts.ContractError, AssertionError)


def test_close_scalars_pass_and_return_their_gap() -> None:
    assert contracts.check_close("loss", 0.5, 0.50005, 1e-4) == pytest.approx(5e-5)


@pytest.mark.parametrize("trainer", [0.6, float("nan")])
def test_scalars_apart_fail_naming_the_quantity_both_values_and_the_tolerance(
    trainer: float,
) -> None:
    with pytest.raises(contracts.ContractError) as caught:
        contracts.check_close("DPO loss before any step", trainer, 0.6931, 1e-3)
    assert str(caught.value) == (
        f"DPO loss before any step: trainer {trainer} != reference 0.6931 (tolerance 0.001)"
    )


def test_expected_labels_mask_padding_and_the_prompt() -> None:
    pad = 0
    row = [7, 8, 9, 4, 5, 0, 0]  # prompt 7 8 9, completion 4 5, two pads
    assert contracts.expected_labels(row, pad_token_id=pad, prompts=[[7, 8, 9]]) == [
        -100, -100, -100, 4, 5, -100, -100,
    ]  # fmt: skip
    assert contracts.expected_labels(row, pad_token_id=pad) == [7, 8, 9, 4, 5, -100, -100]


def test_a_prompt_missing_from_the_row_fails() -> None:
    with pytest.raises(contracts.ContractError, match="prompt tokens in the batch row"):
        contracts.expected_labels([1, 2, 3], pad_token_id=0, prompts=[[4]])


def test_labels_that_keep_the_prompt_fail_at_its_first_position() -> None:
    expected = [-100, -100, 4, 5]
    assert contracts.check_labels("labels", [-100, -100, 4, 5], expected) == 2
    with pytest.raises(contracts.ContractError) as caught:
        contracts.check_labels("labels of batch row 0", [7, -100, 4, 5], expected)
    assert str(caught.value) == (
        "labels of batch row 0 at position 0: trainer 7 != reference -100 (tolerance 0)"
    )


def test_labels_shifted_by_one_fail() -> None:
    with pytest.raises(contracts.ContractError, match="at position 2: trainer 5 != reference 4"):
        contracts.check_labels("labels", [-100, -100, 5, -100], [-100, -100, 4, 5])


def test_a_packed_sequence_start_may_be_either() -> None:
    expected = [1, 2, 3, 4]
    assert contracts.check_labels("labels", [-100, 2, -100, 4], expected, may_ignore=[0, 2]) == 2
    with pytest.raises(contracts.ContractError):
        contracts.check_labels("labels", [-100, 2, 9, 4], expected, may_ignore=[0, 2])


def test_each_contract_is_recorded_and_a_later_one_still_runs_after_one_broke() -> None:
    recorded: dict[str, object] = {}
    checks = contracts.Contracts(recorded.__setitem__)
    checks.check("exact_update", contracts.check_close, "weights", 0.8, 1.0, 1e-5)
    gap = checks.check("accumulation", contracts.check_close, "k against 1", 1.0, 1.0, 0)
    checks.check("update_scale", contracts.check_close, "length", 0.8, 1.0, 1e-4)
    checks.unverified("resume", "this release cannot resume")
    assert gap == 0.0
    with pytest.raises(contracts.ContractError) as caught:
        checks.conclude()
    assert recorded == {
        "exact_update_contract": "fail",
        "accumulation_contract": "pass",
        "accumulation_gap": 0.0,
        "update_scale_contract": "fail",
        "resume_contract": "unverified: this release cannot resume",
    }
    assert str(caught.value).splitlines() == [
        "contracts broken: exact_update, update_scale",
        "exact_update: weights: trainer 0.8 != reference 1.0 (tolerance 1e-05)",
        "update_scale: length: trainer 0.8 != reference 1.0 (tolerance 0.0001)",
    ]


def test_a_contract_checked_twice_fails_if_either_check_failed() -> None:
    recorded: dict[str, object] = {}
    with (
        pytest.raises(contracts.ContractError, match=r"^contracts broken: mask\n"),
        contracts.contracts(recorded.__setitem__) as check,
    ):
        check.check("mask", contracts.check_close, "row 0", 1, 0, 0)
        check.check("mask", contracts.check_close, "row 1", 1, 1, 0)
    assert recorded["mask_contract"] == "fail"


def test_all_contracts_kept_means_no_failure() -> None:
    recorded: dict[str, object] = {}
    with contracts.contracts(recorded.__setitem__) as check:
        check.check("loss", contracts.check_close, "loss", 0.5, 0.5, 1e-4)
    assert recorded == {"loss_contract": "pass", "loss_gap": 0.0}


@pytest.mark.parametrize("name", ["Loss", "update-scale", "step2", ""])
def test_a_contract_name_is_lower_case_words_without_digits(name: str) -> None:
    with pytest.raises(ValueError, match="lower-case words"):
        contracts.Contracts(lambda *_: None).check(name, lambda: 0.0)


UPDATE_FAILS = (
    r"^contracts broken: exact_update(, update_direction)?(, update_scale)?(, accumulation)?\n"
    r"exact_update: weights after one SGD step \(batch 2 x 2\) against minus the reference gradient, "
    r"[\w.]+ at \[\d+, \d+\] \(largest gap [\d.e+-]+\): trainer -?[\d.e+-]+ "
    r"!= reference -?[\d.e+-]+ \(tolerance 1e-05\)"
)


@pytest.mark.slow
def test_each_contract_fails_against_a_wrong_trainer_and_passes_against_the_real_one(
    tmp_path: Path,
) -> None:
    env = {
        **os.environ,
        "FTMATRIX_MATRIX": str(DATA / "contracts_matrix.yaml"),
        "FTMATRIX_CASES": str(DATA / "contract_cases"),
        "FTMATRIX_OUT": str(tmp_path / "out"),
    }
    ran = subprocess.run(
        [sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py"), "--envdir", str(tmp_path / "envs"),
         "-s", "matrix"],
        env=env, cwd=ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    records = {
        json.loads(line)["case"].split("::")[-1]: json.loads(line)
        for path in (tmp_path / "out" / "records").rglob("*.jsonl")
        for line in path.read_text().splitlines()
    }
    outcome = {case: (r["status"], r.get("message") or "") for case, r in records.items()}
    for case in (
        "test_grpo_contract[real]",
        "test_dpo_contract[real]",
        "test_sft_completion_only_contract[real]",
        "test_lora_fresh_adapter_contract[real]",
        "test_grpo_contract[unnamed]",
        "test_adapter_path_contract[real]",
        "test_update_contract[real]",
        "test_resume_contract[real]",
        "test_qlora_contract[real]",
        "test_dpo_update_contract[real]",
        "test_grpo_update_contract[real]",
        "test_adapter_roundtrip_contract[real]",
        "test_adapter_roundtrip_contract[real-merge]",
        "test_checkpointing_gradient_contract[real]",
        "test_reward_update_contract[real]",
        "test_preference_accumulation_contract[real]",
        "test_sft_mask_contract[real]",
        "test_reference_forward_on_the_models_device",
    ):
        assert outcome[case][0] == "pass", (case, outcome[case])
    expected_failures = {
        "test_grpo_contract[shifted-logps]": r"GRPO per-token log-prob of the completion at \[\d+, \d+\] "
        r"\(largest gap [\d.e+-]+\): trainer -?[\d.e+-]+ != reference -?[\d.e+-]+ \(tolerance 0\.0001\)",
        "test_grpo_contract[mask-drops-first-token]": r"completion mask row \d+: trainer \[0, .*\] "
        r"!= reference \[1, .*\] \(tolerance 0\)",
        "test_dpo_contract[shifted-mask]": r"DPO mean chosen log-prob: trainer -?[\d.]+ "
        r"!= reference -?[\d.]+ \(tolerance 0\.001\)",
        "test_sft_completion_only_contract[prompt-in-labels]": r"labels of batch row 0 at position 0: "
        r"trainer \d+ != reference -100 \(tolerance 0\)",
        "test_lora_fresh_adapter_contract[nonzero-b]": r"largest \|B\| of a fresh LoRA adapter: "
        r"trainer 0\.05\d* != reference 0\.0 \(tolerance 0\)",
        "test_grpo_contract[ignores-logits-to-keep]": r"^positions of logits returned for "
        r"logits_to_keep=\d+: trainer \d+ != reference \d+ \(tolerance 0\)",
        "test_adapter_path_contract[returns-base]": r"^LoRA logits after loading the saved "
        r"adapter back at \[\d+, \d+, \d+\] \(largest gap [\d.e+-]+\): trainer -?[\d.e+-]+ "
        r"!= reference -?[\d.e+-]+ \(tolerance 0\.0001\)",
        # The update contracts: the logged loss may be right, the step is not.
        "test_update_contract[loss-over-accumulation]": UPDATE_FAILS,
        "test_update_contract[drops-a-micro-batch]": UPDATE_FAILS,
        "test_resume_contract[scheduler-restarts]": r"^weights after one step, a checkpoint and "
        r"one step resumed, against two steps in one run, [\w.]+ at \[\d+, \d+\] \(largest gap "
        r"[\d.e+-]+\): trainer -?[\d.e+-]+ != reference -?[\d.e+-]+ \(tolerance 1e-05\)",
    }
    expected_failures["test_dpo_update_contract[accumulation-unscaled]"] = (
        r"^contracts broken: exact_update, update_scale\nexact_update: weights after one SGD "
        r"step of DPO \(batch 2 x 2\) against minus the reference gradient, [\w.]+ at "
        r"\[\d+, \d+\] \(largest gap [\d.e+-]+\): trainer -?[\d.e+-]+ != reference -?[\d.e+-]+ "
        r"\(tolerance 1e-05\)\nupdate_scale: length of the SGD step \(batch 2 x 2\) along minus "
        r"the reference gradient: trainer 2 != reference 1"
    )
    for broken, loss_type in (("normalised-twice", "grpo"), ("drops-a-micro-batch", "dapo")):
        expected_failures[f"test_grpo_update_contract[{broken}]"] = (
            rf"^contracts broken: exact_update.*\nexact_update: weights after one SGD step of "
            rf"GRPO \({loss_type}, batch 2 x 2\) against minus the reference gradient, [\w.]+ at "
            r"\[\d+, \d+\] \(largest gap [\d.e+-]+\): trainer -?[\d.e+-]+ != reference "
            r"-?[\d.e+-]+ \(tolerance 1e-05\)"
        )
    # A loss left undivided under accumulation: the reward step is 2x (exact, scale and
    # accumulation break; its direction holds), KTO's accumulated step is not its whole one.
    expected_failures["test_reward_update_contract[unscaled]"] = (
        r"^contracts broken: exact_update, update_scale, accumulation\n"
        r"exact_update: weights after one SGD step of reward modelling \(batch 2 x 2\)"
    )
    expected_failures["test_preference_accumulation_contract[unscaled]"] = (
        r"^contracts broken: accumulation\naccumulation: SGD step with accumulation 2 \(kto\) "
        r"against the same trainer's step over the whole batch at accumulation 1, [\w.]+ at "
        r"\[\d+(, \d+)*\] \(largest gap [\d.e+-]+\)"
    )
    expected_failures["test_sft_mask_contract[prompt-in-labels]"] = (
        r"^contracts broken: mask\nmask: labels of batch row \d+ \(data=prompt-completion-"
        r"completion_only_loss=none-packing=false-padding_free=false\) at position 0: trainer \d+ "
        r"!= reference -100 \(tolerance 0\)"
    )
    expected_failures["test_qlora_contract[loads-float]"] = (
        r"^nf4 was asked for: model\.layers\.0\.self_attn\.q_proj is "
        r"torch\.nn\.modules\.linear\.Linear, not Linear4bit"
    )
    expected_failures |= {
        "test_adapter_roundtrip_contract[drops-modules-to-save]": r"^contracts broken: "
        r"roundtrip_logits\nroundtrip_logits: logits after the saved adapter came back through "
        r"peft \(LoRA on [\w+]+; modules_to_save lm_head; untied\) at \[\d+, \d+, \d+\] "
        r"\(largest gap [\d.e+-]+\): trainer -?[\d.e+-]+ != reference "
        r"-?[\d.e+-]+ \(tolerance 0\.0001\)",
        "test_adapter_roundtrip_contract[merge-unties]": r"^contracts broken: tied_weights\n"
        r"tied_weights: the merged model: tie_word_embeddings=True, lm_head against embed_tokens "
        r"\(largest gap 0\): trainer two tensors != reference one tensor \(tolerance 0\)",
        "test_adapter_roundtrip_contract[merge-drops-lora]": r"^contracts broken: merged_logits, "
        r"roundtrip_logits\nmerged_logits: logits of the merged adapter \(LoRA on [\w+]+; "
        r"modules_to_save none; tied\) at \[\d+, \d+, \d+\]",
        "test_checkpointing_gradient_contract[no-input-grads]": r"^contracts broken: "
        r"checkpointing_gradient\ncheckpointing_gradient: gradient with checkpointing "
        r"\(use_reentrant=True, enabled after_adapter\) against without: weights with a gradient "
        r"\(16 of 17 have none, ",
    }
    import re

    for case, pattern in expected_failures.items():
        status, message = outcome[case]
        assert status == "fail", (case, status, message)
        assert re.search(pattern, message), (case, message)
    # Each contract's numbers land in the record's metrics.
    roundtrip = records["test_adapter_roundtrip_contract[real-merge]"]["metrics"]
    assert roundtrip["tied_weights_contract"] == "pass", roundtrip
    assert roundtrip["merged_logits_contract"] == "pass", roundtrip
    assert records["test_grpo_contract[real]"]["metrics"]["logps_max_gap"] < 1e-4
    assert records["test_dpo_contract[real]"]["metrics"]["reference_logps_chosen"] < 0
    assert records["test_lora_fresh_adapter_contract[real]"]["metrics"]["max_fresh_diff"] == 0.0
    # Where no signature names the log-prob arguments, they are read at the model's boundary.
    assert records["test_grpo_contract[unnamed]"]["metrics"]["logps_contract"].startswith(
        "checked through the model's boundary (trl 1.16.0: _get_per_token_logps_and_entropies("
    )
    assert records["test_grpo_contract[real]"]["metrics"]["logits_positions_checked"] > 0
    assert records["test_update_contract[real]"]["metrics"]["exact_update_gap"] < 1e-5
    assert records["test_resume_contract[real]"]["metrics"]["resume_gap"] < 1e-5
    reward = records["test_reward_update_contract[real]"]["metrics"]
    assert reward["exact_update_gap"] < 1e-5 and reward["accumulation_contract"] == "pass", reward
    mask = records["test_sft_mask_contract[real]"]["metrics"]
    assert mask["mask_contract"] == "pass", mask
    grpo = records["test_grpo_update_contract[real]"]["metrics"]
    assert grpo["exact_update_gap"] < 1e-5, grpo
    assert grpo["update_direction_contract"] == "pass", grpo
    assert grpo["update_contract"] == "checked over 2 micro-batches", grpo
    # The Trainer's loss options and sequence-classification heads: the contract a knob
    # breaks is named, the scale-free accumulation among them where micro-batches differ.
    for case in ("test_loss_options_contract[real]", "test_classification_contract[real]"):
        assert outcome[case][0] == "pass", (case, outcome[case])
    knob_failures = {
        "test_loss_options_contract[smoothing-ignored]": r"^contracts broken: loss, exact_update, "
        r"update_direction, update_scale\nloss: Trainer loss on the first batch: trainer [\d.]+ "
        r"!= reference [\d.]+ \(tolerance 0\.0001\)",
        "test_loss_options_contract[smoothing-per-micro-batch]": r"^contracts broken: exact_update, "
        r"update_direction, update_scale, accumulation\n",
        "test_classification_contract[sums-rows]": r"^contracts broken: loss, exact_update, "
        r"update_scale\n(.*\n)*update_scale: length of the SGD step \(batch 4 x 1, sequence "
        r"classification, family=llama, problem_type=multi_label_classification\) along minus the "
        r"reference gradient: trainer 4 != reference 1",
    }
    for case, pattern in knob_failures.items():
        status, message = outcome[case]
        assert status == "fail", (case, status, message)
        assert re.search(pattern, message), (case, message)
    assert records["test_loss_options_contract[real]"]["metrics"]["accumulation_contract"] == "pass"
