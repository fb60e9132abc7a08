"""Each release's own API, chosen by inspecting the installed release, never by guessing.

API evolution (a renamed argument, a moved config field) is not breakage: the
adapter picks the spelling the installed release documents. A documented API
that then fails is a real break, and the case records it.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any


def config_fields(config_class: type) -> set[str]:
    """The arguments a trl/transformers config dataclass accepts."""
    if dataclasses.is_dataclass(config_class):
        return {f.name for f in dataclasses.fields(config_class)}
    return set(inspect.signature(config_class.__init__).parameters)


def trainer_args(trainer_class: type) -> set[str]:
    return set(inspect.signature(trainer_class.__init__).parameters)


def tiny_run_values(output_dir: str) -> dict[str, Any]:
    """Training arguments every case shares: a couple of fp32 steps, no saving, no logging out."""
    return {
        "output_dir": output_dir,
        "per_device_train_batch_size": 2,
        "gradient_accumulation_steps": 1,
        "learning_rate": 1e-2,
        "logging_steps": 1,
        "save_strategy": "no",
        "report_to": [],
        "disable_tqdm": True,
        "dataloader_num_workers": 0,
        "seed": 0,
        # fp32 everywhere: the tiny model is about correctness, not speed, and
        # newer trl defaults bf16 on, which a CPU cannot do.
        "bf16": False,
        "fp16": False,
    }


def make_config(config_class: type, values: dict[str, Any]) -> Any:
    """``config_class(**values)`` keeping only the arguments this release accepts.

    Only for optional settings that older releases lack; what a case relies on is
    checked by the case itself (a release without it is n/a, not silently different).
    """
    fields = config_fields(config_class)
    return config_class(**{k: v for k, v in values.items() if k in fields})


def sft_config(output_dir: str, *, max_length: int, **overrides: Any) -> Any:
    """An SFTConfig for a couple of tiny CPU-friendly steps, in the installed trl's spelling."""
    from trl import SFTConfig

    fields = config_fields(SFTConfig)
    values = tiny_run_values(output_dir)
    # trl 0.20 renamed max_seq_length to max_length.
    values["max_length" if "max_length" in fields else "max_seq_length"] = max_length
    if "dataset_text_field" in fields:
        values["dataset_text_field"] = "text"
    values.update(overrides)
    return make_config(SFTConfig, values)


def tokenizer_argument(trainer_class: type, tokenizer: Any) -> dict[str, Any]:
    """``processing_class=`` (trl >= 0.12, transformers >= 4.46) or the older ``tokenizer=``."""
    name = "processing_class" if "processing_class" in trainer_args(trainer_class) else "tokenizer"
    return {name: tokenizer}


def grpo_config(output_dir: str, **overrides: Any) -> Any:
    """A GRPOConfig: two steps of two prompts x two short generations, no vLLM."""
    from trl import GRPOConfig

    values = tiny_run_values(output_dir)
    values.update(
        max_steps=2,
        per_device_train_batch_size=2,
        num_generations=2,
        max_completion_length=8,
        max_prompt_length=32,  # removed in newer trl, which no longer truncates prompts
        temperature=1.0,
        use_vllm=False,
        beta=0.0,
    )
    values.update(overrides)
    return make_config(GRPOConfig, values)


def dpo_config(output_dir: str, **overrides: Any) -> Any:
    """A DPOConfig for two steps on a tiny preference set."""
    from trl import DPOConfig

    values = tiny_run_values(output_dir)
    values.update(max_steps=2, max_length=48, max_prompt_length=24, beta=0.1)
    values.update(overrides)
    return make_config(DPOConfig, values)
