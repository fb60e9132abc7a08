"""LoRA with peft: train, checkpoint, save and reload, merge, and every path an adapter travels.

Contracts: a freshly initialised adapter (B = 0) leaves the logits exactly the base
model's; an adapter saved by peft comes back with the adapted model's logits through
each path users take, at the settings users train with (one knob table, cases/helpers/adapters.py:
``modules_to_save`` of the head, the embeddings or a classifier's ``score``, LoRA on the
embeddings or the head, tied word embeddings; peft's PeftModel.from_pretrained,
transformers' load_adapter and from_pretrained of the adapter folder, merge -> save ->
reload; ``roundtrip_logits``, ``merged_logits``, ``tied_weights``), and through
AutoPeftModelForCausalLM; gradient checkpointing leaves every trainable weight's
gradient as it is without (``checkpointing_gradient``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers.adapters import CHECKPOINTING_KNOBS
from helpers.compat import family_param
from helpers.knobs import knob_params
from helpers.tiny import FAMILIES

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
    from helpers.tiny import CORPUS

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
def test_lora_fresh_adapter_keeps_base_logits(
    tiny_model: Any, tokenizer: Any, record_property: Any
):
    run_fresh_adapter(lora_model, tiny_model, tokenizer, record_property)


def run_fresh_adapter(make_adapter: Any, model: Any, tokenizer: Any, record_property: Any) -> None:
    """The case: an adapter as peft initialises it changes nothing until it is trained."""
    import torch
    from helpers.contracts import check_close, check_tensors_close

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


def load_with_peft(adapter_dir: Path, base_dir: Path) -> Any:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    return PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base_dir), adapter_dir)


def load_with_transformers_load_adapter(adapter_dir: Path, base_dir: Path) -> Any:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(base_dir)
    model.load_adapter(str(adapter_dir))
    return model


def load_adapter_folder_with_transformers(adapter_dir: Path, base_dir: Path) -> Any:
    """transformers reads adapter_config.json and loads the base it names, then the adapter."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(adapter_dir)


def load_with_auto_peft_model(adapter_dir: Path, base_dir: Path) -> Any:
    from peft import AutoPeftModelForCausalLM

    return AutoPeftModelForCausalLM.from_pretrained(adapter_dir)


def load_and_merge(adapter_dir: Path, base_dir: Path) -> Any:
    return load_with_peft(adapter_dir, base_dir).merge_and_unload()


# Each path an adapter saved by peft travels back, with what it needs: transformers'
# PEFT integration arrived in 4.34, AutoPeftModelForCausalLM in peft 0.6. The adapter
# table (test_adapter_roundtrip) runs the first four at the settings users turn; this
# case runs the paths it does not.
ADAPTER_PATHS = {
    "peft-from-pretrained": (load_with_peft, {}),
    "transformers-load-adapter": (load_with_transformers_load_adapter, {"transformers": ">=4.34"}),
    "transformers-from-pretrained-adapter-folder": (
        load_adapter_folder_with_transformers,
        {"transformers": ">=4.34"},
    ),
    "auto-peft-model": (load_with_auto_peft_model, {"peft": ">=0.6"}),
    "merge-and-unload": (load_and_merge, {}),
}
TABLE_PATHS = {
    "peft-from-pretrained",
    "transformers-load-adapter",
    "transformers-from-pretrained-adapter-folder",
    "merge-and-unload",
}


@pytest.mark.operation("lora")
@pytest.mark.requires_packages(peft=">=0.4")
@pytest.mark.parametrize(
    "path",
    [
        pytest.param(name, marks=[pytest.mark.requires_packages(**needs)] if needs else [], id=name)
        for name, (_, needs) in ADAPTER_PATHS.items()
        if name not in TABLE_PATHS
    ],
)
def test_lora_adapter_paths(
    path: str,
    tiny_model: Any,
    tokenizer: Any,
    tmp_path: Path,
    tiny_model_dir: Path,
    record_property: Any,
) -> None:
    run_adapter_path(
        ADAPTER_PATHS[path][0], tiny_model, tokenizer, tmp_path, tiny_model_dir, record_property
    )


def run_adapter_path(
    load: Any,
    model: Any,
    tokenizer: Any,
    tmp_path: Path,
    base_dir: Path,
    record_property: Any,
) -> None:
    """The case: a non-zero adapter saved by peft, loaded back by ``load``, gives the
    adapted model's logits (and not the base model's)."""
    import torch
    from helpers.contracts import check_tensors_close

    inputs = batch(tokenizer)
    model.eval()
    with torch.no_grad():
        base_logits = model(**inputs).logits.clone()
    adapted = lora_model(model).eval()  # random A and B: the adapter changes the logits
    with torch.no_grad():
        reference = adapted(**inputs).logits
    record_property("adapter_effect", float((reference - base_logits).abs().max()))
    adapted.save_pretrained(tmp_path / "adapter")
    loaded = load(tmp_path / "adapter", base_dir).eval()
    with torch.no_grad():
        logits = loaded(**inputs).logits
    record_property(
        "max_path_diff",
        check_tensors_close(
            "LoRA logits after loading the saved adapter back", logits, reference, 1e-4
        ),
    )


@pytest.fixture(scope="session")
def adapter_bases(
    tmp_path_factory: pytest.TempPathFactory, tokenizer: Any
) -> Callable[[Any], Path]:
    """Each base an adapter setting needs (its head, its tie), saved once per session."""
    from helpers.adapters import save_base

    saved: dict[tuple[str, bool], Path] = {}

    def folder(shape: Any) -> Path:
        key = (shape.head, shape.tied)
        if key not in saved:
            path = tmp_path_factory.mktemp(f"adapter-base-{shape.head}-tied-{shape.tied}")
            saved[key] = save_base(path, tokenizer, shape)
        return saved[key]

    return folder


def adapter_params() -> list[Any]:
    """The adapter table covered pairwise, then the tied merges pairs do not reach."""
    from helpers.adapters import ADAPTER_KNOBS, PATH_NEEDS, tied_merges

    settings = [param.values[0] for param in knob_params(ADAPTER_KNOBS)]
    settings += [extra for extra in tied_merges() if extra not in settings]
    return [
        pytest.param(
            setting,
            id=setting.id,
            marks=[pytest.mark.requires_packages(transformers=PATH_NEEDS[setting["path"]])]
            if setting["path"] in PATH_NEEDS
            else [],
        )
        for setting in settings
    ]


@pytest.mark.operation("lora")
@pytest.mark.requires_packages(peft=">=0.4")
@pytest.mark.parametrize("setting", adapter_params())
def test_adapter_roundtrip(
    setting: Any,
    tokenizer: Any,
    tmp_path: Path,
    adapter_bases: Callable[[Any], Path],
    record_property: Any,
) -> None:
    from helpers.adapters import adapter_shape, run_adapter_roundtrip

    setting.require()
    base_dir = adapter_bases(adapter_shape(setting))
    run_adapter_roundtrip(setting, tokenizer, tmp_path, base_dir, record_property)


@pytest.mark.operation("lora")
@pytest.mark.requires_packages(peft=">=0.4")
@pytest.mark.parametrize("setting", knob_params(CHECKPOINTING_KNOBS))
def test_lora_checkpointing_gradient(
    setting: Any,
    tokenizer: Any,
    adapter_bases: Callable[[Any], Path],
    record_property: Any,
) -> None:
    from helpers.adapters import AdapterShape, run_checkpointing_gradient

    setting.require()
    base_dir = adapter_bases(AdapterShape("causal", False, (), ()))
    run_checkpointing_gradient(setting, tokenizer, base_dir, record_property)
