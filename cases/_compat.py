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


def sft_config(output_dir: str, *, max_length: int, **overrides: Any) -> Any:
    """An SFTConfig for a couple of tiny CPU-friendly steps, in the installed trl's spelling."""
    from trl import SFTConfig

    fields = config_fields(SFTConfig)
    values: dict[str, Any] = {
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
    # trl 0.20 renamed max_seq_length to max_length.
    values["max_length" if "max_length" in fields else "max_seq_length"] = max_length
    if "dataset_text_field" in fields:
        values["dataset_text_field"] = "text"
    values.update(overrides)
    return SFTConfig(**{k: v for k, v in values.items() if k in fields})


def tokenizer_argument(trainer_class: type, tokenizer: Any) -> dict[str, Any]:
    """``processing_class=`` (trl >= 0.12, transformers >= 4.46) or the older ``tokenizer=``."""
    name = "processing_class" if "processing_class" in trainer_args(trainer_class) else "tokenizer"
    return {name: tokenizer}
