"""SFT: trl's SFTTrainer on a tiny offline model, two steps.

An example to start from: build the trainer as you train yours, run it, check what any
training must show. `ftmatrix init --contracts` writes the full suite, whose cases also
check the loss, the labels and each step against an independent computation.
"""

import math

import pytest


@pytest.mark.operation("sft")
@pytest.mark.requires_packages(trl=">=0.20")  # SFTConfig(max_length=...), processing_class
def test_sft_two_steps(tiny_model, tokenizer, tmp_path, record_property):
    import torch
    from datasets import Dataset
    from helpers.tiny import CORPUS
    from trl import SFTConfig, SFTTrainer

    before = [p.detach().clone() for p in tiny_model.parameters()]
    trainer = SFTTrainer(
        model=tiny_model,
        processing_class=tokenizer,
        train_dataset=Dataset.from_list([{"text": line} for line in CORPUS * 2]),
        args=SFTConfig(
            output_dir=str(tmp_path),
            max_length=32,
            max_steps=2,
            per_device_train_batch_size=2,
            logging_steps=1,
            save_strategy="no",
            report_to=[],
            bf16=False,  # a CPU: trl's default may be bf16
        ),
    )
    trainer.train()

    losses = [log["loss"] for log in trainer.state.log_history if "loss" in log]
    record_property("loss", losses[-1])
    assert trainer.state.global_step == 2
    assert len(losses) == 2 and all(math.isfinite(loss) for loss in losses)
    assert any(not torch.equal(b, p) for b, p in zip(before, tiny_model.parameters(), strict=True))
