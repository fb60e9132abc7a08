"""QLoRA: a tiny model loaded quantized by bitsandbytes (4-bit nf4 and fp4, 8-bit),
prepared by peft's ``prepare_model_for_kbit_training``, LoRA, two optimizer steps.

Contracts: every targeted linear layer really is a bitsandbytes layer of the kind asked
(``Linear4bit`` with that quant type, ``Linear8bitLt``), so a release that silently loads
the float model passes nothing; the quantized base computes what the float model does,
within quantization error; a fresh adapter (B = 0) leaves the quantized base's logits
exactly as they were; the loss is finite; the steps move every adapter weight and leave
the quantized base untouched.

Hardware: bitsandbytes runs these layers on a CPU from 0.46 (nf4, 8-bit) and 0.47 (fp4),
and transformers loads bitsandbytes models on a CPU from 4.53; older releases need CUDA,
so on a CPU they are ``skip`` with the reason (a GPU runner runs them).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
from packaging.version import Version

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj"]
# bitsandbytes' CPU 4-bit kernels pack the weight in blocks of 64 inputs: a layer needs at
# least that many (every real model has far more; the other cases' tiny models have 32).
HIDDEN = 64
# (kind, the bitsandbytes release from which a CPU runs it)
KINDS = {"nf4": "0.46", "fp4": "0.47", "int8": "0.46"}
CPU_LOADING_TRANSFORMERS = "4.53"


@pytest.fixture(scope="module")
def quantizable_model_dir(tmp_path_factory: pytest.TempPathFactory, tokenizer: Any) -> Path:
    return save_quantizable_model(tmp_path_factory.mktemp("tiny-llama-64"), tokenizer)


def save_quantizable_model(path: Path, tokenizer: Any) -> Path:
    """A tiny Llama wide enough for bitsandbytes' CPU kernels, saved with its tokenizer."""
    from helpers.tiny import build_model

    build_model("llama", tokenizer, hidden_size=HIDDEN).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def device_or_skip(kind: str) -> str:
    """Where the case runs: CUDA when there is one, else the CPU where these releases can."""
    import torch

    if torch.cuda.is_available():
        return "cuda"
    needs, bnb = Version(KINDS[kind]), Version(version("bitsandbytes"))
    if bnb < needs:
        pytest.skip(f"bitsandbytes {bnb} runs {kind} layers on CUDA only (on a CPU from {needs})")
    transformers = Version(version("transformers"))
    if transformers < Version(CPU_LOADING_TRANSFORMERS):
        pytest.skip(
            f"transformers {transformers} loads bitsandbytes models on CUDA only "
            f"(on a CPU from {CPU_LOADING_TRANSFORMERS})"
        )
    return "cpu"


def quantization(kind: str) -> Any:
    import torch
    from transformers import BitsAndBytesConfig

    if kind == "int8":
        return BitsAndBytesConfig(load_in_8bit=True)
    return BitsAndBytesConfig(
        load_in_4bit=True, bnb_4bit_quant_type=kind, bnb_4bit_compute_dtype=torch.float32
    )


def quantization_gap(model: Any, kind: str) -> str | None:
    """Why a targeted layer of ``model`` is not the bitsandbytes layer ``kind`` asks for."""
    import bitsandbytes as bnb

    expected = bnb.nn.Linear8bitLt if kind == "int8" else bnb.nn.Linear4bit
    found = 0
    for name, module in model.named_modules():
        if name.rsplit(".", 1)[-1] not in TARGETS:
            continue
        layer = getattr(module, "base_layer", module)  # under a LoRA wrapper: the base layer
        found += 1
        if not isinstance(layer, expected):
            found_type = f"{type(layer).__module__}.{type(layer).__qualname__}"
            return f"{name} is {found_type}, not {expected.__qualname__}"
        state = getattr(layer.weight, "quant_state", None)
        if kind != "int8" and getattr(state, "quant_type", None) != kind:
            return f"{name} is quantized as {getattr(state, 'quant_type', None)}, not {kind}"
    return None if found else f"no layer named {', '.join(TARGETS)}"


@pytest.mark.operation("qlora")
@pytest.mark.requires_packages(bitsandbytes=">=0.39", peft=">=0.4", transformers=">=4.30")
@pytest.mark.parametrize("kind", list(KINDS))
def test_qlora_two_steps(
    kind: str, quantizable_model_dir: Path, tokenizer: Any, record_property: Any
) -> None:
    run_qlora(kind, quantizable_model_dir, tokenizer, record_property)


def run_qlora(
    kind: str,
    model_dir: Path,
    tokenizer: Any,
    record_property: Any,
    quantization_config: Callable[[str], Any] = quantization,
) -> None:
    """The case; ``quantization_config`` is what a release makes of the kind asked for."""
    import torch
    from helpers.tiny import CORPUS
    from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training
    from transformers import AutoModelForCausalLM

    device = device_or_skip(kind)
    encoded = tokenizer(list(CORPUS[:2]), return_tensors="pt", padding=True).to(device)
    encoded["labels"] = encoded["input_ids"].clone()
    reference = AutoModelForCausalLM.from_pretrained(model_dir).to(device).eval()
    with torch.no_grad():
        exact = reference(**encoded).logits.float()
    model = AutoModelForCausalLM.from_pretrained(
        model_dir,
        quantization_config=quantization_config(kind),
        device_map={"": device},
    )
    gap = quantization_gap(model, kind)
    assert gap is None, f"{kind} was asked for: {gap}"
    model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)
    model.eval()
    with torch.no_grad():
        base = model(**encoded).logits.float()
    # Quantization moves the logits a little, never wholesale: a broken (de)quantization
    # gives numbers unrelated to the model's. Measured: nf4 0.12, fp4 0.18, int8 0.01.
    error = float((base - exact).norm() / exact.norm())
    record_property("quantization_error", error)
    assert error < 0.35, (
        f"{kind}: the quantized logits differ from the float model's by {error:.3f} (relative)"
    )

    peft_model = get_peft_model(
        model,
        LoraConfig(
            r=4, lora_alpha=8, lora_dropout=0.0, target_modules=TARGETS, task_type="CAUSAL_LM"
        ),
    )
    peft_model.eval()
    with torch.no_grad():
        fresh = peft_model(**encoded).logits.float()
    assert torch.equal(fresh, base), (
        f"a fresh adapter (B = 0) changed the quantized base's logits by "
        f"{float((fresh - base).abs().max()):.3g}"
    )
    gap = quantization_gap(peft_model, kind)
    assert gap is None, f"after get_peft_model: {gap}"

    trainable = {n: p for n, p in peft_model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable), sorted(trainable)[:5]
    frozen = {
        n: p.detach().clone() for n, p in peft_model.named_parameters() if not p.requires_grad
    }
    before = {n: p.detach().clone() for n, p in trainable.items()}
    optimizer = torch.optim.AdamW(trainable.values(), lr=1e-2)
    peft_model.train()
    for _ in range(2):
        loss = peft_model(**encoded).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    record_property("loss", float(loss))
    assert math.isfinite(float(loss)), f"{kind}: loss {float(loss)}"
    still = [n for n, p in trainable.items() if torch.equal(p, before[n])]
    assert not still, f"{len(still)} of {len(trainable)} adapter weights did not move: {still[:3]}"
    moved = [
        n
        for n, p in peft_model.named_parameters()
        if not p.requires_grad and not torch.equal(p, frozen[n])
    ]
    assert not moved, f"training changed frozen (quantized) weights: {moved[:3]}"
