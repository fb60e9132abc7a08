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
    """The keyword arguments a trainer class's constructor accepts.

    A constructor that only passes ``*args, **kwargs`` on (trl 0.26 to 0.28 keep
    ``trl.ORPOTrainer`` and others as such shims over ``trl.experimental``) names none:
    the first class along the MRO that names its arguments does.
    """
    passing_on = {inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD}
    for cls in trainer_class.__mro__:
        if "__init__" not in vars(cls):
            continue
        parameters = inspect.signature(cls.__init__).parameters
        if any(p.kind not in passing_on for name, p in parameters.items() if name != "self"):
            return set(parameters)
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


def max_length_name(accepted: set[str]) -> str:
    """trl 0.20 renamed max_seq_length to max_length (in SFTConfig; before trl 0.9, an
    argument of SFTTrainer's own): the spelling among the ``accepted`` names."""
    return "max_length" if "max_length" in accepted else "max_seq_length"


def sft_config(output_dir: str, *, max_length: int, **overrides: Any) -> Any:
    """An SFTConfig for a couple of tiny CPU-friendly steps, in the installed trl's spelling."""
    from trl import SFTConfig

    spelled = {max_length_name(config_fields(SFTConfig)): max_length, "dataset_text_field": "text"}
    return make_config(SFTConfig, {**tiny_run_values(output_dir), **spelled, **overrides})


def tokenizer_argument(trainer_class: type, tokenizer: Any) -> dict[str, Any]:
    """``processing_class=`` (trl >= 0.12, transformers >= 4.46) or the older ``tokenizer=``."""
    name = "processing_class" if "processing_class" in trainer_args(trainer_class) else "tokenizer"
    return {name: tokenizer}


def grpo_config(output_dir: str, **overrides: Any) -> Any:
    """A GRPOConfig: two steps of two prompts x two short generations, no vLLM."""
    from trl import GRPOConfig

    settings = {
        "max_steps": 2,
        "per_device_train_batch_size": 2,
        "num_generations": 2,
        "max_completion_length": 8,
        "max_prompt_length": 32,  # removed in newer trl, which no longer truncates prompts
        "temperature": 1.0,
        "use_vllm": False,
        "beta": 0.0,
    }
    return make_config(GRPOConfig, {**tiny_run_values(output_dir), **settings, **overrides})


# transformers releases that first shipped each model family's config class: before
# them the family is not offered (n/a), never a failure of the case.
FAMILY_SINCE = {"phi3": ">=4.40", "gemma": ">=4.38", "qwen2": ">=4.37", "mistral": ">=4.34"}


def family_param(family: str, *values: Any, **param: Any) -> Any:
    """``pytest.param(*values)`` marked n/a on transformers releases without ``family``."""
    import pytest

    since = FAMILY_SINCE.get(family)
    marks = [pytest.mark.requires_packages(transformers=since)] if since else []
    return pytest.param(*values, marks=marks, **param)


def split_settings(
    values: dict[str, Any], accepted: set[str]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``values`` split into those ``accepted`` names and the rest."""
    inside = {k: v for k, v in values.items() if k in accepted}
    return inside, {k: v for k, v in values.items() if k not in accepted}


def trainer_settings(
    trainer_class: type, config_name: str, output_dir: str, settings: dict[str, Any]
) -> dict[str, Any]:
    """The keyword arguments that carry ``settings`` to ``trainer_class``: ``args=`` and more.

    A trl release with its own config class (SFTConfig and DPOConfig from trl 0.9)
    takes every setting there. Before it, the trainer took transformers'
    ``TrainingArguments`` plus its own settings as keyword arguments
    (``max_seq_length``, ``packing``, ``beta``): those go to the trainer.
    Settings neither accepts are left out, as ``make_config`` does.
    """
    import trl

    values = {**tiny_run_values(output_dir), **settings}
    config_class = getattr(trl, config_name, None)
    if config_class is not None:
        return {"args": make_config(config_class, values)}
    from transformers import TrainingArguments

    training, own = split_settings(values, config_fields(TrainingArguments))
    accepted, _ = split_settings(own, trainer_args(trainer_class))
    return {"args": TrainingArguments(**training), **accepted}


def sft_arguments(output_dir: str, *, max_length: int | None, **overrides: Any) -> dict[str, Any]:
    """SFTTrainer's keyword arguments for a couple of tiny steps, in the installed trl's API."""
    from trl import SFTTrainer

    settings: dict[str, Any] = {"dataset_text_field": "text", **overrides}
    settings[max_length_name(trainer_args(SFTTrainer) | sft_config_fields())] = max_length
    return trainer_settings(SFTTrainer, "SFTConfig", output_dir, settings)


def sft_config_fields() -> set[str]:
    """The fields of the installed trl's SFTConfig; none before trl 0.9, which had none."""
    import trl

    config = getattr(trl, "SFTConfig", None)
    return config_fields(config) if config is not None else set()


def dpo_arguments(output_dir: str, **overrides: Any) -> dict[str, Any]:
    """DPOTrainer's keyword arguments: DPOConfig, or (trl < 0.9) TrainingArguments + ``beta=``."""
    from trl import DPOTrainer

    settings = {"max_steps": 2, "max_length": 48, "max_prompt_length": 24, "beta": 0.1}
    return trainer_settings(DPOTrainer, "DPOConfig", output_dir, {**settings, **overrides})


def completion_only_sft(
    tokenizer: Any, rows: list[tuple[str, str]]
) -> tuple[list[dict[str, str]], dict[str, Any], dict[str, Any]]:
    """How this trl trains on completions only: (dataset rows, config settings, trainer arguments).

    trl >= 0.17 masks the prompt of a prompt-completion dataset itself
    (``completion_only_loss``); earlier releases through a collator that masks
    everything up to a response template (``DataCollatorForCompletionOnlyLM``).
    Each row of ``rows`` is (prompt, completion); prompts end with the template.
    """
    import trl

    if "completion_only_loss" in sft_config_fields():
        data = [{"prompt": p, "completion": c} for p, c in rows]
        return data, {"completion_only_loss": True}, {}
    collator_class = getattr(trl, "DataCollatorForCompletionOnlyLM", None)
    if collator_class is None:
        from ftmatrix.cell.api import not_applicable

        not_applicable(
            "this trl has neither completion_only_loss nor DataCollatorForCompletionOnlyLM"
        )
    template = rows[0][0].split()[-1]
    collator = collator_class(template, tokenizer=tokenizer)
    return [{"text": p + c} for p, c in rows], {}, {"data_collator": collator}


# GRPOTrainer's method that turns (model, prompt + completion ids, attention mask,
# number of completion tokens) into per-token log-probs, by release: trl 0.15 to 0.19
# `_get_per_token_logps`, later `_get_per_token_logps_and_entropies`. trl 0.14 computed
# them in a closure inside compute_loss: nothing to observe there.
GRPO_LOGPS_METHODS = ("_get_per_token_logps_and_entropies", "_get_per_token_logps")


def grpo_logps_method(trainer: Any) -> str | None:
    """The name of this GRPOTrainer's per-token log-prob method, or None where it has none."""
    return next((name for name in GRPO_LOGPS_METHODS if hasattr(trainer, name)), None)


# Where a release's log-prob method takes ``(model, *args, **kwargs)`` and hands them on
# (trl 1.14: to `_full_logits_logps` or `_chunked_logps`), the arguments are named by the
# method it hands them to.
GRPO_LOGPS_DELEGATES = ("_full_logits_logps", "_chunked_logps", "_get_per_token_logps")
LOGPS_ARGUMENTS = ("model", "input_ids", "attention_mask", "logits_to_keep")


def grpo_logps_call(
    trainer: Any, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> dict[str, Any] | None:
    """One call's arguments by name, in whatever order the release passed them, or None
    where no signature in this release names them (the case then reads them at the
    model's boundary: :func:`grpo_signature_found` says what it found instead).

    The names come from the first class in the trainer's MRO that spells them out
    (a subclass may override the method with ``*args, **kwargs``), else from the
    method the release delegates to.
    """
    for method in (name, *GRPO_LOGPS_DELEGATES):
        for cls in type(trainer).__mro__:
            function = vars(cls).get(method)
            if function is None or not callable(function):
                continue
            signature = inspect.signature(function)
            if not set(LOGPS_ARGUMENTS) <= set(signature.parameters):
                continue
            try:
                named = dict(signature.bind(trainer, *args, **kwargs).arguments)
            except TypeError:
                continue  # not the signature these arguments were passed for
            return {
                "model": named["model"],
                "input_ids": named["input_ids"],
                "attention_mask": named["attention_mask"],
                "logits_to_keep": int(named["logits_to_keep"]),
            }
    return None


def grpo_signature_found(trainer: Any, name: str) -> str:
    """``trl 1.14.2: _get_per_token_logps_and_entropies(self, model, *args, ...)``: what a
    release offers where its log-prob arguments cannot be named, for the record."""
    import trl

    method = getattr(type(trainer), name, None)
    shown = str(inspect.signature(method)) if method is not None else "(absent)"
    return f"trl {trl.__version__}: {name}{shown}"


def grpo_logps_result(result: Any) -> Any:
    """The per-token log-probs out of what the method returned (a tensor, or a tuple)."""
    return result[0] if isinstance(result, tuple) else result


def preference_sequences(row: dict[str, Any], side: str) -> tuple[list[int], int]:
    """(prompt + completion token ids, index of the first completion token) of a tokenized row.

    ``side`` is ``chosen`` or ``rejected``. DPOTrainer's tokenized rows, by release:
    up to trl 0.11 the whole sequence with labels (-100 over the prompt); trl 0.12 to
    0.28 ``prompt_input_ids`` + ``{side}_input_ids``; from 0.29 ``prompt_ids`` + ``{side}_ids``.
    """
    if f"{side}_labels" in row:
        ids = list(row[f"{side}_input_ids"])
        start = next(i for i, label in enumerate(row[f"{side}_labels"]) if label != -100)
        return ids, start
    for prompt_key, side_key in (
        ("prompt_input_ids", f"{side}_input_ids"),
        ("prompt_ids", f"{side}_ids"),
    ):
        if prompt_key in row and side_key in row:
            prompt = list(row[prompt_key])
            return prompt + list(row[side_key]), len(prompt)
    raise KeyError(f"no tokenized {side} sequence among {sorted(row)}")


def grpo_loss_types() -> tuple[str, ...]:
    """The GRPO loss normalisations this trl offers, as its GRPOConfig documents them.

    Before ``loss_type`` existed (trl 0.14, 0.15) the loss was always the per-sequence
    mean that later releases call ``"grpo"``.
    """
    from trl import GRPOConfig

    if "loss_type" not in config_fields(GRPOConfig):
        return ("grpo",)
    documented = GRPOConfig.__doc__ or ""
    return tuple(name for name in ("grpo", "bnpo", "dr_grpo", "dapo") if f'"{name}"' in documented)


def reward_rows_untokenized() -> bool:
    """Does this trl's RewardTrainer tokenize preference text itself? Before trl 0.12 it
    trained only on rows already tokenized (``input_ids_chosen``, ``attention_mask_chosen``,
    ``input_ids_rejected``, ``attention_mask_rejected``); 0.12 to 0.2x tokenize in a module
    function ``_tokenize``, and 1.x names those columns no more."""
    import inspect

    from trl import RewardTrainer

    module = inspect.getmodule(RewardTrainer)
    source = inspect.getsource(module) if module is not None else ""
    return "input_ids_chosen" not in source or hasattr(module, "_tokenize")


def tokenized_reward_rows(rows: list[dict[str, str]], tokenizer: Any) -> list[dict[str, Any]]:
    """Preference text rows tokenized as trl before 0.12 expects them."""
    tokenized = []
    for row in rows:
        chosen, rejected = tokenizer(row["chosen"]), tokenizer(row["rejected"])
        tokenized.append(
            {
                "input_ids_chosen": chosen["input_ids"],
                "attention_mask_chosen": chosen["attention_mask"],
                "input_ids_rejected": rejected["input_ids"],
                "attention_mask_rejected": rejected["attention_mask"],
            }
        )
    return tokenized
