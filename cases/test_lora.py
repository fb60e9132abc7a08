"""LoRA with peft: train, checkpoint, save and reload, merge."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _tiny import FAMILIES

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj"]


def lora_model(model: Any) -> Any:
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
        r=4,
        lora_alpha=8,
        lora_dropout=0.0,
        target_modules=TARGETS,
        task_type="CAUSAL_LM",
        init_lora_weights=False,
    )
    return get_peft_model(model, config)


def batch(tokenizer: Any) -> Any:
    from _tiny import CORPUS

    encoded = tokenizer(list(CORPUS[:2]), return_tensors="pt", padding=True)
    encoded["labels"] = encoded["input_ids"].clone()
    return encoded


@pytest.mark.operation("lora")
@pytest.mark.requires_packages(peft=">=0.4")
@pytest.mark.parametrize(
    ("family", "checkpointing"),
    [(f, False) for f in FAMILIES] + [("llama", True)],
    ids=[*FAMILIES, "llama-grad-checkpointing"],
)
def test_lora_forward_backward(
    family: str, tiny_model: Any, tokenizer: Any, checkpointing: bool, record_property: Any
):
    import torch

    if checkpointing:
        tiny_model.gradient_checkpointing_enable()
        tiny_model.enable_input_require_grads()
    model = lora_model(tiny_model)
    model.train()
    output = model(**batch(tokenizer))
    output.loss.backward()
    record_property("loss", float(output.loss))
    assert torch.isfinite(output.loss)
    trainable = {n: p for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable), sorted(trainable)[:5]
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in trainable.values())
    frozen = [p for n, p in model.named_parameters() if not p.requires_grad]
    assert all(p.grad is None for p in frozen), "a frozen base weight received a gradient"


@pytest.mark.operation("lora")
@pytest.mark.requires_packages(peft=">=0.4")
def test_lora_save_reload_and_merge(
    tiny_model: Any, tokenizer: Any, tmp_path: Path, tiny_model_dir: Path, record_property: Any
):
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model = lora_model(tiny_model).eval()
    inputs = batch(tokenizer)
    with torch.no_grad():
        reference = model(**inputs).logits
    model.save_pretrained(tmp_path / "adapter")

    fresh_base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    reloaded = PeftModel.from_pretrained(fresh_base, tmp_path / "adapter").eval()
    with torch.no_grad():
        reloaded_logits = reloaded(**inputs).logits
    merged = reloaded.merge_and_unload().eval()
    with torch.no_grad():
        merged_logits = merged(**inputs).logits

    record_property("max_reload_diff", float((reloaded_logits - reference).abs().max()))
    record_property("max_merge_diff", float((merged_logits - reference).abs().max()))
    torch.testing.assert_close(reloaded_logits, reference)
    torch.testing.assert_close(merged_logits, reference, rtol=1e-4, atol=1e-4)
    assert not any("lora_" in n for n, _ in merged.named_parameters())
