"""LoRA: peft's adapter on a tiny offline model: it trains, and comes back from disk whole.

An example to start from. `ftmatrix init --contracts` writes the full suite, whose cases
also load adapters through every path users take and check merging.
"""

import pytest


@pytest.mark.operation("lora")
@pytest.mark.requires_packages(peft=">=0.10")
def test_lora_trains_and_reloads(tiny_model, tiny_model_dir, tokenizer, tmp_path):
    import torch
    from peft import LoraConfig, PeftModel, get_peft_model
    from transformers import AutoModelForCausalLM

    model = get_peft_model(
        tiny_model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"])
    )
    batch = tokenizer(["hello world good morning"], return_tensors="pt")
    loss = model(**batch, labels=batch["input_ids"]).loss
    loss.backward()
    assert torch.isfinite(loss)
    lora_grads = [p.grad for n, p in model.named_parameters() if "lora_" in n]
    assert lora_grads and all(g is not None for g in lora_grads)

    with torch.no_grad():  # a trained adapter is not zero: move B off its zero start
        for name, weight in model.named_parameters():
            if "lora_B" in name:
                weight.add_(0.1)
        expected = model(**batch).logits
    model.save_pretrained(tmp_path / "adapter")
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    reloaded = PeftModel.from_pretrained(base, tmp_path / "adapter")
    with torch.no_grad():
        torch.testing.assert_close(reloaded(**batch).logits, expected, atol=1e-5, rtol=0)
