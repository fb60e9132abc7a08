"""Each framework imports cleanly beside the others: the most common break of all."""

from __future__ import annotations

import importlib

import pytest

# Distribution -> what users import first from it.
ENTRY_POINTS = {
    "torch": ("torch", ["nn", "optim"]),
    "transformers": ("transformers", ["AutoModelForCausalLM", "Trainer", "TrainingArguments"]),
    "trl": ("trl", ["SFTTrainer", "SFTConfig"]),
    "peft": ("peft", ["LoraConfig", "get_peft_model", "PeftModel"]),
    "accelerate": ("accelerate", ["Accelerator"]),
    "datasets": ("datasets", ["Dataset"]),
    "unsloth": ("unsloth", ["FastLanguageModel"]),
    "vllm": ("vllm", ["LLM", "SamplingParams"]),
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
