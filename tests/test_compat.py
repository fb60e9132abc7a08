"""The cases' release adapters (cases/helpers/compat.py) that need no framework installed.

The adapters that build trl and transformers objects run for real in the slow
tier's cells (tests/test_oldest.py, tests/test_contracts.py).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).parent.parent


def load_compat() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "helpers.compat", ROOT / "cases" / "helpers" / "compat.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


compat = load_compat()


@pytest.mark.parametrize(
    "row",
    [
        # trl <= 0.11: the whole sequence, the prompt's labels -100.
        {"chosen_input_ids": [1, 7, 8, 4, 5, 2], "chosen_labels": [-100, -100, -100, 4, 5, 2]},
        # trl 0.12 to 0.28: the prompt and the completion apart.
        {"prompt_input_ids": [1, 7, 8], "chosen_input_ids": [4, 5, 2]},
        # trl 0.29 and later.
        {"prompt_ids": [1, 7, 8], "chosen_ids": [4, 5, 2]},
    ],
    ids=["labels", "prompt_input_ids", "prompt_ids"],
)
def test_every_release_s_tokenized_preference_row_gives_the_sequence_and_its_split(
    row: dict[str, Any],
) -> None:
    assert compat.preference_sequences(row, "chosen") == ([1, 7, 8, 4, 5, 2], 3)


def test_a_row_of_an_unknown_layout_is_our_error_naming_its_keys() -> None:
    with pytest.raises(KeyError, match="no tokenized rejected sequence among"):
        compat.preference_sequences({"chosen_ids": [1]}, "rejected")


class Scorer:
    def _get_per_token_logps(
        self, model: Any, input_ids: Any, attention_mask: Any, logits_to_keep: int
    ) -> None:
        """trl 0.15 to 0.19's signature."""


class Overridden(Scorer):
    def _get_per_token_logps(self, *args: Any, **kwargs: Any) -> None:
        """A subclass that passes everything through."""


@pytest.mark.parametrize("trainer", [Scorer(), Overridden()], ids=["release", "subclass"])
def test_a_log_prob_call_is_read_by_name_whatever_the_order(trainer: Any) -> None:
    call = compat.grpo_logps_call(
        trainer,
        "_get_per_token_logps",
        ("m", "ids"),
        {"logits_to_keep": 3, "attention_mask": "mask"},
    )
    assert call == {"model": "m", "input_ids": "ids", "attention_mask": "mask", "logits_to_keep": 3}
    assert compat.grpo_logps_method(trainer) == "_get_per_token_logps"


def test_a_trainer_without_the_method_has_no_observable_log_probs() -> None:
    assert compat.grpo_logps_method(object()) is None


def test_a_tuple_result_gives_its_log_probs() -> None:
    assert compat.grpo_logps_result(("logps", "entropies")) == "logps"
    assert compat.grpo_logps_result("logps") == "logps"


class Experimental:
    def __init__(self, model: Any, args: Any = None, processing_class: Any = None) -> None:
        """trl.experimental.orpo.ORPOTrainer's constructor, as of trl 0.26 to 0.28."""


class Relocated(Experimental):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """trl.ORPOTrainer in those releases: a warning, then everything passed on."""
        super().__init__(*args, **kwargs)


@pytest.mark.parametrize("trainer_class", [Experimental, Relocated], ids=["class", "shim"])
def test_a_shim_s_arguments_are_those_of_the_class_it_passes_them_to(trainer_class: type) -> None:
    assert compat.tokenizer_argument(trainer_class, "tok") == {"processing_class": "tok"}
