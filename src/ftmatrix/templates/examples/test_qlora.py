"""QLoRA: a tiny model loaded in 4-bit by bitsandbytes, a LoRA adapter, two optimizer steps.

bitsandbytes 0.46 and later run 4-bit layers on a CPU; transformers loads 4-bit models
there from 4.53. An example to start from; `ftmatrix init --contracts` writes the full
suite (fp4 and 8-bit too, and the quantized logits against the float model's).
"""

import math

import pytest


@pytest.mark.operation("qlora")
@pytest.mark.requires_packages(bitsandbytes=">=0.46", transformers=">=4.53", peft=">=0.10")
def test_qlora_two_steps(tiny_model_dir, tokenizer):
    import torch
    from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    model = AutoModelForCausalLM.from_pretrained(
        tiny_model_dir,
        quantization_config=BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4"),
    )
    model = prepare_model_for_kbit_training(model)
    model = get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    # Where the 4-bit model was put: on a CUDA machine transformers puts it on the GPU.
    batch = tokenizer(["hello world good morning"], return_tensors="pt").to(model.device)
    for _ in range(2):
        loss = model(**batch, labels=batch["input_ids"]).loss
        assert math.isfinite(loss.item())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
