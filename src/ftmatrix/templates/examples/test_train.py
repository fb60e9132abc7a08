"""Train: transformers' own Trainer on a tiny offline model, two steps.

An example to start from: build the trainer as you train yours, run it, check what any
training must show. `ftmatrix init --contracts` writes the full suite, whose cases also
check the loss and each step against an independent computation.
"""

import math

import pytest


@pytest.mark.operation("train")
@pytest.mark.requires_packages(transformers=">=4.46")  # the Trainer's arguments as spelt here
def test_trainer_two_steps(tiny_model, tokenizer, tmp_path, record_property):
    import torch
    from helpers.tiny import CORPUS
    from transformers import DataCollatorForLanguageModeling, Trainer, TrainingArguments

    before = [p.detach().clone() for p in tiny_model.parameters()]
    trainer = Trainer(
        model=tiny_model,
        args=TrainingArguments(
            output_dir=str(tmp_path),
            max_steps=2,
            per_device_train_batch_size=2,
            logging_steps=1,
            save_strategy="no",
            report_to=[],
        ),
        train_dataset=[{"input_ids": tokenizer(line)["input_ids"]} for line in CORPUS],
        data_collator=DataCollatorForLanguageModeling(tokenizer, mlm=False),
    )
    trainer.train()

    losses = [log["loss"] for log in trainer.state.log_history if "loss" in log]
    record_property("loss", losses[-1])
    assert trainer.state.global_step == 2
    assert len(losses) == 2 and all(math.isfinite(loss) for loss in losses)
    assert any(not torch.equal(b, p) for b, p in zip(before, tiny_model.parameters(), strict=True))
