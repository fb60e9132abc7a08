"""DPO: trl's DPOTrainer steps on a tiny preference set."""

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


@pytest.mark.operation("dpo")
@pytest.mark.requires_packages(trl=">=0.9")  # DPOConfig as a TrainingArguments: trl 0.9
def test_dpo_two_steps(tiny_model: Any, tokenizer: Any, tmp_path: Path, record_property: Any):
    import torch
    from _compat import dpo_config, tokenizer_argument
    from datasets import Dataset
    from trl import DPOTrainer

    before = {n: p.detach().clone() for n, p in tiny_model.named_parameters()}
    trainer = DPOTrainer(
        model=tiny_model,
        args=dpo_config(str(tmp_path)),
        train_dataset=Dataset.from_list(PREFERENCES * 2),
        **tokenizer_argument(DPOTrainer, tokenizer),
    )
    trainer.train()

    logs = [e for e in trainer.state.log_history if "loss" in e]
    assert trainer.state.global_step == 2
    assert logs and all(math.isfinite(float(e["loss"])) for e in logs), logs
    # Before any step the policy equals the reference: the first DPO loss is log(2).
    assert abs(float(logs[0]["loss"]) - math.log(2)) < 1e-3, logs[0]
    record_property("loss", float(logs[-1]["loss"]))
    moved = any(not torch.equal(before[n], p.detach()) for n, p in trainer.model.named_parameters())
    assert moved, "no weight changed after two DPO steps"
