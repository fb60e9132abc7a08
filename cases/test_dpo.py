"""DPO: trl's DPOTrainer steps on a tiny preference set.

Contracts, on the evaluation set before any step (policy equals reference): the
loss is log 2, and the mean chosen and rejected log-probs the trainer reports equal
the summed token log-probs of the completions from our own forward pass over the
tokens the trainer prepared (whose completion part must be the completion's text).
The update: one plain SGD step (learning rate 1) moves every weight by exactly minus
the gradient of the mean sigmoid DPO loss over the pairs, computed by the case from the
model's raw logits; as 4 pairs at once and as 2 micro-batches of 2.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

PREFERENCES = [
    {"prompt": "what is two plus two ?", "chosen": " the answer is four", "rejected": " one"},
    {"prompt": "hello", "chosen": " world good morning", "rejected": " the lazy dog"},
    {"prompt": "one two three", "chosen": " four five six", "rejected": " nine ten"},
    {"prompt": "the quick brown", "chosen": " fox jumps", "rejected": " answer is"},
]
LOGPS_TOLERANCE = 1e-3  # a mean of sums of a handful of float32 log-probs


def eval_metric(trainer: Any, metrics: dict[str, Any], name: str) -> float:
    """An evaluation metric, from what evaluate() returned or, failing that, the log."""
    if name in metrics:
        return float(metrics[name])
    logged = [e[name] for e in trainer.state.log_history if name in e]
    assert logged, f"the trainer reported no {name} (reported: {sorted(metrics)})"
    return float(logged[-1])


def reference_logps(trainer: Any, model: Any, tokenizer: Any) -> dict[str, float]:
    """Mean summed log-prob of the chosen and of the rejected completions, by our own forward."""
    from helpers.compat import preference_sequences
    from helpers.contracts import ContractError, contract_message, sequence_log_prob

    eos = tokenizer.eos_token_id
    sums: dict[str, list[float]] = {"chosen": [], "rejected": []}
    for row, raw in zip(trainer.eval_dataset, PREFERENCES, strict=True):
        for side, values in sums.items():
            ids, start = preference_sequences(row, side)
            text_ids = tokenizer(raw[side], add_special_tokens=False)["input_ids"]
            completion = ids[start:]
            if completion not in (text_ids, [*text_ids, eos]):
                raise ContractError(
                    contract_message(f"DPO {side} completion tokens", completion, text_ids, 0)
                )
            values.append(sequence_log_prob(model, ids, start))
    return {side: sum(values) / len(values) for side, values in sums.items()}


@pytest.mark.operation("dpo")
@pytest.mark.requires_packages(trl=">=0.7")  # before DPOConfig (0.9): TrainingArguments + beta=
def test_dpo_two_steps(tiny_model: Any, tokenizer: Any, tmp_path: Path, record_property: Any):
    from trl import DPOTrainer

    run_dpo_two_steps(DPOTrainer, tiny_model, tokenizer, tmp_path, record_property)


def run_dpo_two_steps(
    trainer_class: type, model: Any, tokenizer: Any, tmp_path: Path, record_property: Any
) -> None:
    """The case: the evaluation contracts, then two DPO steps that move the weights."""
    from datasets import Dataset
    from helpers.compat import dpo_arguments, tokenizer_argument
    from helpers.contracts import check_close
    from helpers.train import train_and_check

    trainer = trainer_class(
        model=model,
        train_dataset=Dataset.from_list(PREFERENCES * 2),
        # The whole evaluation set in one batch: the reported means are over every row.
        eval_dataset=Dataset.from_list(PREFERENCES),
        **dpo_arguments(str(tmp_path), per_device_eval_batch_size=len(PREFERENCES)),
        **tokenizer_argument(trainer_class, tokenizer),
    )
    metrics = trainer.evaluate()
    trainer.model.eval()
    reference = reference_logps(trainer, trainer.model, tokenizer)
    eval_loss = eval_metric(trainer, metrics, "eval_loss")
    record_property("eval_loss", eval_loss)
    # Before any step the policy equals the reference: the DPO loss is log(2).
    check_close("DPO loss before any step", eval_loss, math.log(2), 1e-3)
    for side in ("chosen", "rejected"):
        trainer_value = eval_metric(trainer, metrics, f"eval_logps/{side}")
        record_property(f"logps_{side}", trainer_value)
        record_property(f"reference_logps_{side}", reference[side])
        check_close(f"DPO mean {side} log-prob", trainer_value, reference[side], LOGPS_TOLERANCE)
    trainer.model.train()

    trained = train_and_check(trainer, record_property, steps=2)
    # Before any step the policy equals the reference: the first DPO loss is log(2).
    check_close("DPO loss of the first step", trained.losses[0], math.log(2), 1e-3)


@pytest.mark.operation("dpo")
@pytest.mark.requires_packages(trl=">=0.7")
@pytest.mark.parametrize(
    ("batch", "accumulation"), [(4, 1), (2, 2)], ids=["accumulation-1", "accumulation-2"]
)
def test_dpo_exact_update(
    batch: int,
    accumulation: int,
    tiny_model: Any,
    tokenizer: Any,
    tmp_path: Path,
    record_property: Any,
) -> None:
    from trl import DPOTrainer

    run_dpo_exact_update(
        DPOTrainer, tiny_model, tokenizer, tmp_path, record_property, batch, accumulation
    )


def run_dpo_exact_update(
    trainer_class: type,
    model: Any,
    tokenizer: Any,
    tmp_path: Path,
    record_property: Any,
    batch: int,
    accumulation: int,
) -> None:
    """The case: one SGD step of DPO against minus the reference gradient, its update
    contracts each on their own (exact_update, update_direction, update_scale, and with
    accumulation, accumulation)."""
    from datasets import Dataset
    from helpers.compat import dpo_arguments, tokenizer_argument
    from helpers.contracts import contracts
    from helpers.update import (
        check_accumulation,
        check_update_against,
        expected_after_dpo_step,
        expected_whole_batch_step,
        sgd_step_values,
    )

    trainer = trainer_class(
        model=model,
        train_dataset=Dataset.from_list(PREFERENCES),  # exactly one accumulated batch
        **dpo_arguments(str(tmp_path), **sgd_step_values(batch=batch, accumulation=accumulation)),
        **tokenizer_argument(trainer_class, tokenizer),
    )
    beta = float(getattr(trainer, "beta", None) or trainer.args.beta)

    def reference(trained: Any) -> dict[str, Any]:
        return expected_after_dpo_step(trained.model, trained.train_dataset, beta)

    # With accumulation k, also the step the trainer takes at accumulation 1: minus the
    # gradient of its own loss over the whole batch (scale-free: a break of accumulation
    # alone shows even where the exact step is off for another cause).
    whole = expected_whole_batch_step(trainer) if accumulation > 1 else None
    with contracts(record_property) as check:
        step = check_update_against(
            trainer,
            check,
            reference,
            label=f"batch {batch} x {accumulation}",
            step_name="SGD step of DPO",
        )
        if whole is not None:
            check.check(
                "accumulation",
                check_accumulation,
                f"accumulation {accumulation} (DPO)",
                step,
                whole,
            )
