"""Each framework imports cleanly beside the others: the most common break of all.

A name a release never had (``SFTConfig`` before trl 0.9) is ``n/a`` for that
release, its own case, never a failure of the distribution's import.
"""

from __future__ import annotations

import importlib

import pytest

# Distribution -> (module, names every release the matrix accepts has). The oldest:
# torch 2.x, transformers 4.38, trl 0.7, peft 0.10, accelerate 0.27, datasets 2.18.
ENTRY_POINTS = {
    "torch": ("torch", ["nn", "optim"]),
    "transformers": ("transformers", ["AutoModelForCausalLM", "Trainer", "TrainingArguments"]),
    "trl": ("trl", ["SFTTrainer", "DPOTrainer"]),
    "peft": ("peft", ["LoraConfig", "get_peft_model", "PeftModel"]),
    "accelerate": ("accelerate", ["Accelerator"]),
    "datasets": ("datasets", ["Dataset"]),
    "unsloth": ("unsloth", ["FastLanguageModel"]),
    "vllm": ("vllm", ["LLM", "SamplingParams"]),
}

# Names that arrived later: (distribution, name) -> the releases that have it.
LATER_NAMES = {
    ("trl", "SFTConfig"): ">=0.9",  # trl 0.9: SFTConfig and DPOConfig, TrainingArguments subclasses
    ("trl", "DPOConfig"): ">=0.9",
    ("trl", "GRPOTrainer"): ">=0.14",  # trl 0.14: GRPO
    ("trl", "GRPOConfig"): ">=0.14",
}


@pytest.mark.operation("import")
@pytest.mark.parametrize(
    "distribution",
    # Not installed in this cell (an axis at 'none'): n/a, not a failure.
    [
        pytest.param(d, marks=pytest.mark.requires_packages(**{d: ">=0"}))
        for d in sorted(ENTRY_POINTS)
    ],
)
def test_imports(distribution: str) -> None:
    module_name, names = ENTRY_POINTS[distribution]
    if distribution == "unsloth":
        # Releases that need an accelerator refuse at import: that is skip on this machine.
        from test_unsloth import import_unsloth

        import_unsloth()
    module = importlib.import_module(module_name)
    missing = [name for name in names if getattr(module, name, None) is None]
    assert not missing, f"{module_name} lacks {missing}"


@pytest.mark.operation("import")
@pytest.mark.parametrize(
    ("distribution", "name"),
    [
        pytest.param(d, n, marks=pytest.mark.requires_packages(**{d: spec}), id=f"{d}.{n}")
        for (d, n), spec in sorted(LATER_NAMES.items())
    ],
)
def test_import_later_names(distribution: str, name: str) -> None:
    module = importlib.import_module(ENTRY_POINTS[distribution][0])
    assert getattr(module, name, None) is not None, f"{distribution} lacks {name}"
