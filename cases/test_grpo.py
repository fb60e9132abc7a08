"""GRPO: trl's GRPOTrainer steps with a toy reward, generating with the model itself (no vLLM)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

PROMPTS = ["what is two plus two ?", "hello world", "one two three", "the quick brown fox"]


def reward_distinct_words(completions: list[Any], **_: Any) -> list[float]:
    """More distinct words, more reward: varied enough that advantages are rarely all zero."""
    texts = [c if isinstance(c, str) else " ".join(m["content"] for m in c) for c in completions]
    return [float(len(set(text.split()))) for text in texts]


@pytest.mark.operation("grpo")
@pytest.mark.requires_packages(trl=">=0.14")  # GRPOTrainer first shipped in trl 0.14.0
@pytest.mark.parametrize("family", ["llama", "mistral"])
def test_grpo_two_steps(
    family: str, tiny_model: Any, tokenizer: Any, tmp_path: Path, record_property: Any
):
    import torch
    from _compat import grpo_config, tokenizer_argument
    from datasets import Dataset
    from trl import GRPOTrainer

    torch.manual_seed(0)
    before = {n: p.detach().clone() for n, p in tiny_model.named_parameters()}
    trainer = GRPOTrainer(
        model=tiny_model,
        reward_funcs=reward_distinct_words,
        args=grpo_config(str(tmp_path)),
        train_dataset=Dataset.from_list([{"prompt": p} for p in PROMPTS * 2]),
        **tokenizer_argument(GRPOTrainer, tokenizer),
    )
    trainer.train()

    logs = [e for e in trainer.state.log_history if "loss" in e]
    assert trainer.state.global_step == 2
    assert logs and all(math.isfinite(float(e["loss"])) for e in logs), logs
    rewards = [float(e["reward"]) for e in logs if "reward" in e]
    spread = [float(e.get("reward_std", 0.0)) for e in logs]
    record_property("loss", float(logs[-1]["loss"]))
    record_property("reward", rewards[-1] if rewards else float("nan"))
    assert rewards and all(math.isfinite(r) for r in rewards), logs
    if any(s > 0 for s in spread):
        # Rewards that differ within a group give non-zero advantages: weights must move.
        moved = any(
            not torch.equal(before[n], p.detach()) for n, p in trainer.model.named_parameters()
        )
        assert moved, "rewards differed but no weight changed"
