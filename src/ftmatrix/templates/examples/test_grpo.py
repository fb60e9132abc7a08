"""GRPO: trl's GRPOTrainer on a tiny offline model, two steps with a toy reward.

An example to start from: the model generates its own completions (no vLLM). `ftmatrix
init --contracts` writes the full suite, whose cases also check the log-probs, the
completion mask and each step against an independent computation.
"""

import math

import pytest

PROMPTS = ["what is two plus two ?", "hello world", "one two three", "the quick brown fox"]


def reward_distinct_words(completions, **_):
    """More distinct words, more reward."""
    return [float(len(set(text.split()))) for text in completions]


@pytest.mark.operation("grpo")
@pytest.mark.requires_packages(trl=">=0.20")  # GRPOConfig as spelt here, processing_class
def test_grpo_two_steps(tiny_model, tokenizer, tmp_path, record_property):
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    trainer = GRPOTrainer(
        model=tiny_model,
        processing_class=tokenizer,
        reward_funcs=reward_distinct_words,
        train_dataset=Dataset.from_list([{"prompt": p} for p in PROMPTS]),
        args=GRPOConfig(
            output_dir=str(tmp_path),
            max_steps=2,
            per_device_train_batch_size=2,
            num_generations=2,
            max_completion_length=8,
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
    assert all(math.isfinite(loss) for loss in losses)
