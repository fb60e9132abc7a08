"""Reward, ORPO, KTO and CPO: trl's other preference trainers, one SGD step under accumulation.

Each of these trainers computes its own loss and hands it to transformers' Trainer, which
divides it by the accumulation steps only where it believes the model did not normalise
it already (``model_accepts_loss_kwargs``, ``loss_is_scaled_for_ga``): a release that
gets this wrong moves the weights k times too far at accumulation k, silently (the same
class as DPO's trl#2615). Over rows whose rejected completions differ in length (so
batches pad):

- ``accumulation``: one SGD step (learning rate 1) over 4 rows as 2 micro-batches of 2 equals
  minus the gradient of the trainer's own loss over the 4 rows at once, the step it takes
  at accumulation 1 (scale-free: it needs no reference loss, so it holds for every trainer
  here; one trainer, its whole batch collated by its own dataloader). The rows are chosen so that
  every loss here is the same mean over the batch whichever way it is cut (prompts
  and chosen completions of one length: ORPO's and CPO's NLL term is a token mean per
  micro-batch; KTO's KL estimate is zero before any step, the policy being the reference).
- RewardTrainer, also ``exact_update`` / ``update_direction`` / ``update_scale``: the step
  is minus the gradient of the Bradley-Terry loss ``-log sigmoid(r_chosen - r_rejected)``
  (plus ``center_rewards_coefficient * (r_chosen + r_rejected)^2``), the rewards read by our
  own forward of each unpadded sequence through the sequence-classification head.

A trainer this trl does not ship (KTO before 0.8, ORPO before 0.8.2, in ``trl.experimental``
from 1.0 where it moved) is ``n/a`` with where it was looked for.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from helpers.knobs import Knob, knob_params

# Rejected completions of every length (padding in every batch); prompts of one length and
# chosen completions of one length: ORPO's NLL term is a token mean over the chosen
# sequences (prompt and completion) of a micro-batch, CPO's over the chosen completions,
# equal to the whole batch's mean only where they are of one length.
PAIRS = [
    {"prompt": "what is two", "chosen": " plus two ?", "rejected": " five"},
    {
        "prompt": "hello world good",
        "chosen": " morning and night",
        "rejected": " the lazy dog jumps",
    },
    {"prompt": "one two three", "chosen": " four five six", "rejected": " nine ten"},
    {"prompt": "the quick brown", "chosen": " fox jumps over", "rejected": " a model learns to"},
]


@dataclass(frozen=True)
class PreferenceTrainer:
    """A trl trainer of preference data: where each release keeps it, and its data's shape."""

    name: str  # the trainer class
    config: str  # its config class
    modules: tuple[str, ...]  # where releases keep both, tried in order
    rows: Callable[[], list[dict[str, Any]]]
    settings: tuple[tuple[str, Any], ...] = ()

    def classes(self) -> tuple[type, type]:
        """(trainer class, config class) from the first module that has both; else n/a."""
        from ftmatrix.cell.api import not_applicable

        for module_name in self.modules:
            try:
                module = importlib.import_module(module_name)
            except ImportError:
                continue
            trainer = getattr(module, self.name, None)
            config = getattr(module, self.config, None)
            if isinstance(trainer, type) and isinstance(config, type):
                return trainer, config
        not_applicable(f"this trl has no {self.name} (looked in {', '.join(self.modules)})")
        raise AssertionError("unreachable")


def kto_rows() -> list[dict[str, Any]]:
    """Unpaired rows: two desirable completions, two undesirable."""
    return [
        {"prompt": PAIRS[0]["prompt"], "completion": PAIRS[0]["chosen"], "label": True},
        {"prompt": PAIRS[1]["prompt"], "completion": PAIRS[1]["rejected"], "label": False},
        {"prompt": PAIRS[2]["prompt"], "completion": PAIRS[2]["chosen"], "label": True},
        {"prompt": PAIRS[3]["prompt"], "completion": PAIRS[3]["rejected"], "label": False},
    ]


def reward_rows() -> list[dict[str, Any]]:
    """Preference pairs as RewardTrainer reads them: the prompt inside each side."""
    return [
        {"chosen": p["prompt"] + p["chosen"], "rejected": p["prompt"] + p["rejected"]}
        for p in PAIRS
    ]


TRAINERS = {
    "reward": PreferenceTrainer("RewardTrainer", "RewardConfig", ("trl",), reward_rows),
    "orpo": PreferenceTrainer(
        "ORPOTrainer", "ORPOConfig", ("trl", "trl.experimental.orpo"), lambda: list(PAIRS)
    ),
    "cpo": PreferenceTrainer(
        "CPOTrainer", "CPOConfig", ("trl", "trl.experimental.cpo"), lambda: list(PAIRS)
    ),
    # KTO's KL term pairs each row with its neighbour in a fixed order: trl 1.x asks for it.
    "kto": PreferenceTrainer(
        "KTOTrainer",
        "KTOConfig",
        ("trl", "trl.experimental.kto"),
        kto_rows,
        (("train_sampling_strategy", "sequential"),),
    ),
}

# RewardTrainer's knobs: values[0] changes nothing.
# Every case steps at accumulation 2 and at 1 (the accumulation contract needs both).
REWARD_KNOBS = (Knob("center_rewards_coefficient", (None, 0.01), package="trl", exists=">=0.10.0"),)


def reward_model(model_dir: Path) -> Any:
    """The tiny model's backbone under a one-output sequence-classification head (seeded)."""
    import torch
    from transformers import AutoModelForSequenceClassification

    torch.manual_seed(0)
    return AutoModelForSequenceClassification.from_pretrained(model_dir, num_labels=1)


def preference_trainer(
    kind: str,
    model: Any,
    tokenizer: Any,
    output_dir: Path,
    *,
    batch: int,
    accumulation: int,
    trainer_class: type | None = None,
    **settings: Any,
) -> Any:
    """``kind``'s trainer on its 4 rows (exactly one accumulated batch), plain SGD."""
    from datasets import Dataset
    from helpers.compat import (
        make_config,
        reward_rows_untokenized,
        tiny_run_values,
        tokenized_reward_rows,
        tokenizer_argument,
    )
    from helpers.update import sgd_step_values

    spec = TRAINERS[kind]
    found, config_class = spec.classes()
    trainer_class = trainer_class or found
    values = {
        **tiny_run_values(str(output_dir)),
        **sgd_step_values(batch=batch, accumulation=accumulation),
        "max_length": 48,
        "max_prompt_length": 24,
        "beta": 0.1,
        **dict(spec.settings),
        **settings,
    }
    rows = spec.rows()
    if kind == "reward" and not reward_rows_untokenized():
        rows = tokenized_reward_rows(rows, tokenizer)
    return trainer_class(
        model=model,
        args=make_config(config_class, values),
        train_dataset=Dataset.from_list(rows),
        **tokenizer_argument(trainer_class, tokenizer),
    )


def reward_sequences(row: dict[str, Any]) -> tuple[list[int], list[int]]:
    """(chosen ids, rejected ids) of a tokenized RewardTrainer row, by release: up to trl
    0.2x ``input_ids_chosen`` / ``input_ids_rejected``, trl 1.x ``chosen_ids`` /
    ``rejected_ids``."""
    for chosen, rejected in (
        ("chosen_ids", "rejected_ids"),
        ("input_ids_chosen", "input_ids_rejected"),
        ("chosen_input_ids", "rejected_input_ids"),
    ):
        if chosen in row and rejected in row:
            return list(row[chosen]), list(row[rejected])
    raise KeyError(f"no tokenized chosen/rejected sequences among {sorted(row)}")


def expected_after_reward_step(
    model: Any, rows: Any, center_rewards_coefficient: float | None
) -> dict[str, Any]:
    """The weights one SGD step (learning rate 1) of reward modelling must give: minus the
    gradient of the mean Bradley-Terry loss over ``rows`` (the trainer's tokenized pairs),
    each reward the head's output at the last token of the sequence, unpadded."""
    import torch
    from helpers.contracts import model_device
    from helpers.update import sgd_reference

    def loss_of(forward: Any) -> Any:
        def reward(ids: list[int]) -> Any:
            tokens = torch.tensor([ids], device=model_device(model))
            return forward(input_ids=tokens).logits.reshape(-1)[0].float()

        losses, centred = [], []
        for row in rows:
            chosen, rejected = (reward(ids) for ids in reward_sequences(row))
            losses.append(-torch.nn.functional.logsigmoid(chosen - rejected))
            centred.append((chosen + rejected) ** 2)
        loss = torch.stack(losses).mean()
        if center_rewards_coefficient is not None:
            loss = loss + center_rewards_coefficient * torch.stack(centred).mean()
        return loss

    return sgd_reference(model, loss_of)


@pytest.mark.operation("reward")
@pytest.mark.requires_packages(trl=">=0.7")
@pytest.mark.parametrize("setting", knob_params(REWARD_KNOBS))
def test_reward_update(
    setting: Any,
    tiny_model_dir: Path,
    tokenizer: Any,
    tmp_path: Path,
    record_property: Any,
) -> None:
    run_reward_update(None, setting, tiny_model_dir, tokenizer, tmp_path, record_property)


def run_reward_update(
    trainer_class: type | None,
    setting: Any,
    model_dir: Path,
    tokenizer: Any,
    tmp_path: Path,
    record_property: Any,
) -> None:
    """The reward model's step at accumulation 2 against minus the reference gradient, and
    against minus the gradient of the trainer's own loss over the whole batch at once."""
    from helpers.contracts import contracts
    from helpers.update import check_accumulation, check_update_against, expected_whole_batch_step

    setting.require()
    coefficient = setting["center_rewards_coefficient"]
    extra = {} if coefficient is None else {"center_rewards_coefficient": coefficient}
    trainer = preference_trainer(
        "reward",
        reward_model(model_dir),
        tokenizer,
        tmp_path,
        batch=2,
        accumulation=2,
        trainer_class=trainer_class,
        **extra,
    )

    def reference(trained: Any) -> dict[str, Any]:
        return expected_after_reward_step(trained.model, trained.train_dataset, coefficient)

    whole = expected_whole_batch_step(trainer)
    with contracts(record_property) as check:
        step = check_update_against(
            trainer,
            check,
            reference,
            label="batch 2 x 2",
            step_name="SGD step of reward modelling",
        )
        check.check("accumulation", check_accumulation, "accumulation 2 (reward)", step, whole)


@pytest.mark.parametrize(
    ("operation", "kind"),
    [
        pytest.param("orpo", "orpo", marks=pytest.mark.operation("orpo")),
        pytest.param("kto", "kto", marks=pytest.mark.operation("kto")),
        pytest.param("cpo", "cpo", marks=pytest.mark.operation("cpo")),
    ],
)
@pytest.mark.requires_packages(trl=">=0.8")
def test_preference_accumulation(
    operation: str,
    kind: str,
    tiny_model: Any,
    tokenizer: Any,
    tmp_path: Path,
    record_property: Any,
) -> None:
    run_preference_accumulation(None, kind, tiny_model, tokenizer, tmp_path, record_property)


def run_preference_accumulation(
    trainer_class: type | None,
    kind: str,
    model: Any,
    tokenizer: Any,
    tmp_path: Path,
    record_property: Any,
) -> None:
    """Accumulation 2 of 2 rows against minus the gradient of the trainer's own loss over
    the 4 rows at once (the step it takes at accumulation 1)."""
    from helpers.contracts import check_close, contracts
    from helpers.update import check_accumulation, expected_whole_batch_step, trained_weights

    trainer = preference_trainer(
        kind,
        model,
        tokenizer,
        tmp_path,
        batch=2,
        accumulation=2,
        trainer_class=trainer_class,
    )
    whole = expected_whole_batch_step(trainer)
    before = trained_weights(trainer.model)
    trainer.train()
    after = trained_weights(trainer.model)
    with contracts(record_property) as check:
        check.check(
            "optimizer_steps",
            check_close,
            f"{kind} optimizer steps (batch 2 x 2)",
            trainer.state.global_step,
            1,
            0,
        )
        step = {name: after[name] - before[name] for name in before}
        check.check("accumulation", check_accumulation, f"accumulation 2 ({kind})", step, whole)
