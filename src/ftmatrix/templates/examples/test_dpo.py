"""DPO: trl's DPOTrainer on a tiny offline model, two steps on preference pairs.

An example to start from. `ftmatrix init --contracts` writes the full suite, whose cases
also check the log-probs, the loss and each step against an independent computation.
"""

import math

import pytest

PAIRS = [
    {"prompt": "what is two plus two ?", "chosen": " the answer is four", "rejected": " a dog"},
    {"prompt": "hello world", "chosen": " good morning", "rejected": " lazy fox"},
]


@pytest.mark.operation("dpo")
@pytest.mark.requires_packages(trl=">=0.20")  # DPOConfig(max_length=...), processing_class
def test_dpo_two_steps(tiny_model, tokenizer, tmp_path, record_property):
    from datasets import Dataset
    from trl import DPOConfig, DPOTrainer

    trainer = DPOTrainer(
        model=tiny_model,
        processing_class=tokenizer,
        train_dataset=Dataset.from_list(PAIRS * 2),
        args=DPOConfig(
            output_dir=str(tmp_path),
            max_length=32,
            max_steps=2,
            per_device_train_batch_size=2,
            logging_steps=1,
            save_strategy="no",
            report_to=[],
            bf16=False,
        ),
    )
    trainer.train()

    losses = [log["loss"] for log in trainer.state.log_history if "loss" in log]
    record_property("loss", losses[-1])
    assert trainer.state.global_step == 2
    # Before the first step the policy is its own reference: the loss is log 2.
    assert math.isclose(losses[0], math.log(2), abs_tol=1e-3)
    assert all(math.isfinite(loss) for loss in losses)
