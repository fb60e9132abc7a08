"""unsloth's fast paths: load + LoRA + SFT, GRPO on Llama and Mistral, 4-bit QKV LoRA.

unsloth is imported first (it patches transformers and trl on import). Releases
that need an accelerator say so when imported; on a machine without one that
refusal is recorded as skip with unsloth's own message.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def import_unsloth() -> Any:
    """Import unsloth, or skip with its refusal when this machine has no accelerator."""
    import torch

    try:
        import unsloth
    except NotImplementedError as refusal:
        if not torch.cuda.is_available():
            pytest.skip(f"unsloth refuses this machine: {refusal}")
        raise
    return unsloth


def load(model_dir: Path, **options: Any) -> tuple[Any, Any]:
    import_unsloth()
    from unsloth import FastLanguageModel

    model, tokenizer = FastLanguageModel.from_pretrained(
        model_name=str(model_dir), max_seq_length=64, dtype=None, **options
    )
    return FastLanguageModel, (model, tokenizer)


@pytest.mark.operation("unsloth-sft")
@pytest.mark.requires_packages(unsloth=">=2024.8", trl=">=0.9")
def test_unsloth_lora_sft(tiny_model_dir: Path, tmp_path: Path, record_property: Any):
    fast, (model, tokenizer) = load(tiny_model_dir, load_in_4bit=False)
    from _compat import sft_config, tokenizer_argument
    from _tiny import CORPUS
    from datasets import Dataset
    from trl import SFTTrainer

    model = fast.get_peft_model(
        model,
        r=4,
        lora_alpha=8,
        target_modules=TARGETS,
        use_gradient_checkpointing="unsloth",
        random_state=0,
    )
    trainer = SFTTrainer(
        model=model,
        args=sft_config(str(tmp_path), max_length=32, max_steps=2),
        train_dataset=Dataset.from_list([{"text": line} for line in CORPUS * 4]),
        **tokenizer_argument(SFTTrainer, tokenizer),
    )
    result = trainer.train()
    record_property("loss", float(result.training_loss))
    assert trainer.state.global_step == 2
    assert math.isfinite(result.training_loss)


@pytest.mark.operation("unsloth-grpo")
@pytest.mark.requires_packages(unsloth=">=2025.2", trl=">=0.14")
@pytest.mark.parametrize("family", ["llama", "mistral"])
def test_unsloth_grpo(family: str, tiny_model_dir: Path, tmp_path: Path, record_property: Any):
    """The path where a fast forward once returned logits instead of hidden states
    (`a and b must have same reduction dim` on Mistral, unslothai/unsloth#1790)."""
    fast, (model, tokenizer) = load(tiny_model_dir, load_in_4bit=False, fast_inference=False)
    from _compat import grpo_config, tokenizer_argument
    from datasets import Dataset
    from test_grpo import PROMPTS, reward_distinct_words
    from trl import GRPOTrainer

    model = fast.get_peft_model(
        model,
        r=4,
        lora_alpha=8,
        target_modules=TARGETS,
        use_gradient_checkpointing="unsloth",
        random_state=0,
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=reward_distinct_words,
        args=grpo_config(str(tmp_path)),
        train_dataset=Dataset.from_list([{"prompt": p} for p in PROMPTS * 2]),
        **tokenizer_argument(GRPOTrainer, tokenizer),
    )
    trainer.train()
    logs = [e for e in trainer.state.log_history if "loss" in e]
    assert trainer.state.global_step == 2
    assert logs and all(math.isfinite(float(e["loss"])) for e in logs), logs
    record_property("loss", float(logs[-1]["loss"]))


@pytest.mark.operation("unsloth-qlora-qkv")
@pytest.mark.requires_packages(unsloth=">=2024.8", bitsandbytes=">=0.43", trl=">=0.9")
@pytest.mark.requires_hardware(cuda=True)
def test_unsloth_4bit_qkv_lora_offloaded_checkpointing(
    tiny_model_dir: Path, tmp_path: Path, record_property: Any
):
    """4-bit LoRA on q/k/v with offloaded gradient checkpointing: the fused LoRA_QKV path
    (`mat1 and mat2 shapes cannot be multiplied ... LoRA_QKV` with 2+ visible GPUs under
    plain python, where DataParallel replicas lose the 4-bit quantisation state)."""
    fast, (model, tokenizer) = load(tiny_model_dir, load_in_4bit=True)
    from _compat import sft_config, tokenizer_argument
    from _tiny import CORPUS
    from datasets import Dataset
    from trl import SFTTrainer

    model = fast.get_peft_model(
        model,
        r=4,
        lora_alpha=8,
        target_modules=["q_proj", "k_proj", "v_proj"],
        use_gradient_checkpointing="unsloth",
        random_state=0,
    )
    trainer = SFTTrainer(
        model=model,
        args=sft_config(str(tmp_path), max_length=32, max_steps=2),
        train_dataset=Dataset.from_list([{"text": line} for line in CORPUS * 4]),
        **tokenizer_argument(SFTTrainer, tokenizer),
    )
    result = trainer.train()
    record_property("loss", float(result.training_loss))
    assert math.isfinite(result.training_loss)
