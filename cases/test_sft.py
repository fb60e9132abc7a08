"""SFT: trl's SFTTrainer, two optimizer steps on a tiny random Llama."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest


@pytest.mark.operation("sft")
@pytest.mark.requires_packages(trl=">=0.9")
def test_sft_two_steps(tiny_llama: Any, tokenizer: Any, tmp_path: Path, record_property: Any):
    import torch
    from _compat import sft_config, tokenizer_argument
    from _tiny import CORPUS
    from datasets import Dataset
    from trl import SFTTrainer

    dataset = Dataset.from_list([{"text": line} for line in CORPUS * 4])
    before = {n: p.detach().clone() for n, p in tiny_llama.named_parameters()}
    trainer = SFTTrainer(
        model=tiny_llama,
        args=sft_config(str(tmp_path), max_length=32, max_steps=2),
        train_dataset=dataset,
        **tokenizer_argument(SFTTrainer, tokenizer),
    )
    result = trainer.train()

    losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
    record_property("loss", float(result.training_loss))
    record_property("steps", trainer.state.global_step)
    assert trainer.state.global_step == 2
    assert len(losses) == 2 and all(math.isfinite(float(x)) for x in losses), losses
    changed = [
        n for n, p in trainer.model.named_parameters() if not torch.equal(before[n], p.detach())
    ]
    assert changed, "no weight changed after two optimizer steps"
