"""LoRA with peft: train, checkpoint, save and reload, merge.

Contracts: merge, save and reload give the logits of the adapted model; a freshly
initialised adapter (B = 0) leaves the logits exactly the base model's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _compat import family_param
from _tiny import FAMILIES

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj"]


def lora_model(model: Any, *, fresh: bool = False) -> Any:
    """``model`` with a LoRA adapter: random A and B, or (``fresh``) peft's own init, B = 0."""
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
        r=4,
        lora_alpha=8,
        lora_dropout=0.0,
        target_modules=TARGETS,
        task_type="CAUSAL_LM",
        init_lora_weights=fresh,
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
    [family_param(f, f, False, id=f) for f in FAMILIES]
    + [pytest.param("llama", True, id="llama-grad-checkpointing")],
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

    from _contracts import check_tensors_close

    record_property(
        "max_reload_diff",
        check_tensors_close("LoRA logits after save and reload", reloaded_logits, reference, 1e-5),
    )
    record_property(
        "max_merge_diff",
        check_tensors_close("LoRA logits after merge_and_unload", merged_logits, reference, 1e-4),
    )
    assert not any("lora_" in n for n, _ in merged.named_parameters())


@pytest.mark.operation("lora")
@pytest.mark.requires_packages(peft=">=0.4")
def test_lora_fresh_adapter_keeps_base_logits(
    tiny_model: Any, tokenizer: Any, record_property: Any
):
    run_fresh_adapter(lora_model, tiny_model, tokenizer, record_property)


def run_fresh_adapter(make_adapter: Any, model: Any, tokenizer: Any, record_property: Any) -> None:
    """The case: an adapter as peft initialises it changes nothing until it is trained."""
    import torch
    from _contracts import check_close, check_tensors_close

    inputs = batch(tokenizer)
    model.eval()
    with torch.no_grad():
        base_logits = model(**inputs).logits.clone()
    adapted = make_adapter(model, fresh=True).eval()
    largest_b = max(float(p.abs().max()) for n, p in adapted.named_parameters() if "lora_B" in n)
    with torch.no_grad():
        adapted_logits = adapted(**inputs).logits
    record_property("max_lora_b", largest_b)
    check_close("largest |B| of a fresh LoRA adapter", largest_b, 0.0, 0.0)
    record_property(
        "max_fresh_diff",
        check_tensors_close(
            "logits with a fresh LoRA adapter vs the base model", adapted_logits, base_logits, 1e-6
        ),
    )
