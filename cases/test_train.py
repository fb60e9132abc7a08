"""Train: transformers' own Trainer on a tiny causal LM, without trl.

A stack of transformers + accelerate (+ peft) without trl is a stack people train
with. Runs in every cell that has transformers, trl or not.

Contracts: the trainer's loss on a batch equals our own next-token cross-entropy
(every family); one SGD step moves the weights by exactly minus the gradient of the
mean token cross-entropy over the whole accumulated batch (``exact_update``), along it
(``update_direction``) and as far (``update_scale``), with accumulation 1 and with
accumulation 2 on rows of different lengths; accumulation 2 takes the same step as the
trainer's own at accumulation 1 (``accumulation``); two steps in one run equal one step,
a checkpoint and one step resumed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers.compat import family_param
from helpers.knobs import Knob, Setting, knob_params
from helpers.tiny import CORPUS, FAMILIES
from helpers.update import UPDATE_ROWS


def training_arguments(output_dir: Path, **values: Any) -> Any:
    """TrainingArguments for tiny fp32 CPU steps, in the installed release's spelling."""
    from helpers.compat import make_config, tiny_run_values
    from transformers import TrainingArguments

    return make_config(TrainingArguments, {**tiny_run_values(str(output_dir)), **values})


def causal_lm_trainer(
    model: Any,
    tokenizer: Any,
    rows: Any,
    output_dir: Path,
    *,
    trainer_class: type | None = None,
    callbacks: list[Any] | None = None,
    compute_loss_func: Any = None,
    **values: Any,
) -> Any:
    """A Trainer on ``rows`` (texts), each tokenized alone and padded per batch by
    transformers' language-modelling collator (labels: the tokens, -100 on padding);
    ``compute_loss_func`` is passed only where given (transformers 4.46+ has it)."""
    from transformers import DataCollatorForLanguageModeling, Trainer

    dataset = [{"input_ids": tokenizer(text)["input_ids"]} for text in rows]
    own_loss = {"compute_loss_func": compute_loss_func} if compute_loss_func else {}
    return (trainer_class or Trainer)(
        model=model,
        args=training_arguments(output_dir, **values),
        train_dataset=dataset,
        data_collator=DataCollatorForLanguageModeling(tokenizer, mlm=False),
        callbacks=callbacks,
        **own_loss,
    )


@pytest.mark.operation("train")
@pytest.mark.requires_packages(transformers=">=4.30")
@pytest.mark.parametrize("family", [family_param(f, f) for f in FAMILIES])
def test_train_two_steps(
    family: str, tiny_model: Any, tokenizer: Any, tmp_path: Path, record_property: Any
) -> None:
    run_train_two_steps(None, tiny_model, tokenizer, tmp_path, record_property)


def run_train_two_steps(
    trainer_class: type | None, model: Any, tokenizer: Any, tmp_path: Path, record_property: Any
) -> None:
    """The loss contract on the first batch, then two steps: finite losses, weights moved."""
    import torch
    from helpers.contracts import check_close
    from helpers.train import train_and_check
    from helpers.update import token_loss_terms

    trainer = causal_lm_trainer(
        model, tokenizer, list(CORPUS) * 2, tmp_path, trainer_class=trainer_class, max_steps=2
    )
    batch = dict(next(iter(trainer.get_train_dataloader())))
    trainer.model.eval()
    with torch.no_grad():
        trainer_loss = float(trainer.compute_loss(trainer.model, dict(batch)))
        total, count = token_loss_terms(trainer.model, batch)
    trainer.model.train()
    reference_loss = float(total) / count
    record_property("trainer_loss", trainer_loss)
    record_property("reference_loss", reference_loss)
    check_close("Trainer loss on the first batch", trainer_loss, reference_loss, 1e-4)
    train_and_check(trainer, record_property, steps=2, loss="mean")


@pytest.mark.operation("train")
@pytest.mark.requires_packages(transformers=">=4.30")
@pytest.mark.parametrize(
    ("batch", "accumulation"), [(4, 1), (2, 2)], ids=["accumulation-1", "accumulation-2"]
)
def test_train_exact_update(
    batch: int,
    accumulation: int,
    tiny_model: Any,
    tokenizer: Any,
    tmp_path: Path,
    record_property: Any,
) -> None:
    run_train_exact_update(
        None, batch, accumulation, tiny_model, tokenizer, tmp_path, record_property
    )


def run_train_exact_update(
    trainer_class: type | None,
    batch: int,
    accumulation: int,
    model: Any,
    tokenizer: Any,
    tmp_path: Path,
    record_property: Any,
) -> None:
    """One SGD step over the four rows, as one batch or as micro-batches: minus the gradient.

    With accumulation k > 1 the same trainer also takes the step over the whole batch at
    accumulation 1 from the same weights, and the two steps must agree (``accumulation``):
    scale-free, so it shows a break of accumulation alone inside a release whose every
    step is off by one factor.
    """
    import copy

    from helpers.contracts import contracts
    from helpers.update import check_accumulation, check_update, sgd_step_values

    start = copy.deepcopy(model) if accumulation > 1 else None
    label = f"batch {batch} x {accumulation}"

    def trainer(start_model: Any, folder: str, micro_batch: int, steps: int) -> Any:
        return causal_lm_trainer(
            start_model,
            tokenizer,
            UPDATE_ROWS,
            tmp_path / folder,
            trainer_class=trainer_class,
            **sgd_step_values(batch=micro_batch, accumulation=steps),
        )

    with contracts(record_property) as check:
        step = check_update(trainer(model, "accumulated", batch, accumulation), check, label=label)
        if start is not None:
            whole = check_update(
                trainer(start, "whole", batch * accumulation, 1),
                check,
                label=f"batch {batch * accumulation} x 1",
            )
            check.check(
                "accumulation", check_accumulation, f"accumulation {accumulation}", step, whole
            )


@pytest.mark.operation("train")
@pytest.mark.requires_packages(transformers=">=4.30")
def test_train_resume_equivalence(
    tiny_model_dir: Path, tokenizer: Any, tmp_path: Path, record_property: Any
) -> None:
    run_train_resume(None, tiny_model_dir, tokenizer, tmp_path, record_property)


def run_train_resume(
    trainer_class: type | None,
    model_dir: Path,
    tokenizer: Any,
    tmp_path: Path,
    record_property: Any,
) -> None:
    """Two steps straight against one step, a checkpoint and one step resumed from it."""
    from helpers.update import check_resume_equivalence, sgd_step_values, stop_after_first_step
    from transformers import AutoModelForCausalLM

    values = sgd_step_values(batch=2, accumulation=1, steps=2)

    def trainer(folder: str, **extra: Any) -> Any:
        return causal_lm_trainer(
            AutoModelForCausalLM.from_pretrained(model_dir),
            tokenizer,
            UPDATE_ROWS,
            tmp_path / folder,
            trainer_class=trainer_class,
            **values,
            **extra,
        )

    saving = {"save_strategy": "steps", "save_steps": 1}
    check_resume_equivalence(
        trainer("straight"),
        trainer("halves", callbacks=[stop_after_first_step()], **saving),
        trainer("halves", **saving),
        str(tmp_path / "halves"),
        record_property,
    )


# The Trainer's own loss options, and the architectures whose forward took no loss keywords
# (GPT-2, OPT: the Trainer normalises them under accumulation on another path), as one knob
# table: every pair of values occurs in some case. ``compute_loss_func`` arrived in
# transformers 4.46.0, ``average_tokens_across_devices`` in 4.46.2.
TRAINER_KNOBS = (
    Knob("accumulation", (1, 2)),
    Knob("compute_loss_func", (False, True), exists=">=4.46.0"),
    Knob("family", ("llama", "gpt2", "opt")),
    Knob("label_smoothing_factor", (0.0, 0.1)),
    Knob("average_tokens_across_devices", (False, True), exists=">=4.46.2"),
)


@pytest.mark.operation("train")
@pytest.mark.requires_packages(transformers=">=4.30")
@pytest.mark.parametrize("setting", knob_params(TRAINER_KNOBS))
def test_train_loss_options(
    setting: Setting, tokenizer: Any, tmp_path: Path, record_property: Any
) -> None:
    run_train_loss_options(None, setting, tokenizer, tmp_path, record_property)


def token_mean_loss(outputs: Any, labels: Any, num_items_in_batch: Any = None) -> Any:
    """A ``compute_loss_func`` as transformers documents one: the next-token cross-entropy
    summed over the micro-batch, divided by the label tokens of the whole accumulated batch
    (``num_items_in_batch``; this batch's own where the Trainer gives none)."""
    import torch
    from helpers.contracts import IGNORE

    logits = outputs["logits"]
    predicting = logits[:, :-1, :].reshape(-1, logits.size(-1)).float()
    targets = labels[:, 1:].reshape(-1).to(predicting.device)
    total = torch.nn.functional.cross_entropy(
        predicting, targets, ignore_index=IGNORE, reduction="sum"
    )
    count = num_items_in_batch if num_items_in_batch is not None else (targets != IGNORE).sum()
    return total / count


def run_train_loss_options(
    trainer_class: type | None,
    setting: Setting,
    tokenizer: Any,
    tmp_path: Path,
    record_property: Any,
) -> None:
    """One SGD step at the setting's loss options and family, against the reference loss the
    options mean: the mean next-token cross-entropy over every label token of the whole
    accumulated batch, label-smoothed by ``label_smoothing_factor``, or the user's
    ``compute_loss_func`` (which replaces the Trainer's loss, label smoother included, in
    every release that has it). ``average_tokens_across_devices`` changes nothing on one
    process. Contracts: ``loss`` on a batch, the step's, and ``accumulation``."""
    setting.require()
    from helpers.tiny import build_head_model
    from helpers.update import mean_token_loss

    own_loss = bool(setting["compute_loss_func"])
    smoothing = 0.0 if own_loss else setting["label_smoothing_factor"]
    options = {
        "label_smoothing_factor": setting["label_smoothing_factor"],
        "average_tokens_across_devices": setting["average_tokens_across_devices"],
    }

    def trainer(model: Any, folder: str, micro_batch: int, steps: int) -> Any:
        from helpers.update import sgd_step_values

        return causal_lm_trainer(
            model,
            tokenizer,
            UPDATE_ROWS,
            tmp_path / folder,
            trainer_class=trainer_class,
            compute_loss_func=token_mean_loss if own_loss else None,
            **sgd_step_values(batch=micro_batch, accumulation=steps),
            **options,
        )

    check_accumulated_step(
        trainer,
        build_head_model(setting["family"], tokenizer),
        setting["accumulation"],
        mean_token_loss(smoothing),
        record_property,
        described=setting_described(setting),
    )


def setting_described(setting: Setting, *, head: str = "causal LM") -> str:
    """What a step's messages say of the setting: the head, the family, each knob turned
    (a known issue's pattern can then require the knob its break needs)."""
    turned = {"family": setting["family"], **setting.turned()}
    turned.pop("accumulation", None)
    return ", ".join([head, *(f"{name}={value}" for name, value in turned.items())])


def check_accumulated_step(
    trainer: Any,
    model: Any,
    accumulation: int,
    loss_of: Any,
    record_property: Any,
    *,
    described: str,
) -> None:
    """The contracts of one SGD step over UPDATE_ROWS against the reference ``loss_of``
    (:mod:`helpers.update`'s ``mean_token_loss``, ``mean_row_loss``), each on its own:

    - ``loss``: the trainer's loss on its first batch equals the reference's (1e-4);
    - the step's (:func:`helpers.update.check_update`), as micro-batches of ``4 / accumulation``;
    - ``accumulation`` (k > 1): the same trainer's step over the whole batch at
      accumulation 1, from the same weights, is the same step (scale-free).

    ``trainer(model, folder, micro_batch, steps)`` builds the trainer; ``described`` (the
    head and the setting) follows the batch in every message.
    """
    import copy

    from helpers.contracts import contracts
    from helpers.update import check_accumulation, check_update, expected_after_loss_step

    start = copy.deepcopy(model) if accumulation > 1 else None
    batch = len(UPDATE_ROWS) // accumulation
    expected_after = expected_after_loss_step(loss_of)
    with contracts(record_property) as check:
        accumulated = trainer(model, "accumulated", batch, accumulation)
        check.check("loss", check_trainer_loss, accumulated, loss_of)
        step = check_update(
            accumulated,
            check,
            label=f"batch {batch} x {accumulation}, {described}",
            expected_after=expected_after,
        )
        if start is not None:
            whole = check_update(
                trainer(start, "whole", batch * accumulation, 1),
                check,
                label=f"batch {batch * accumulation} x 1, {described}",
                expected_after=expected_after,
            )
            check.check(
                "accumulation", check_accumulation, f"accumulation {accumulation}", step, whole
            )


def check_trainer_loss(trainer: Any, loss_of: Any) -> float:
    """The trainer's own loss (``compute_loss``) on its first batch equals ``loss_of`` on it."""
    import torch
    from helpers.contracts import check_close

    batch = dict(next(iter(trainer.get_train_dataloader())))
    trainer.model.eval()
    try:
        with torch.no_grad():
            trainer_loss = float(trainer.compute_loss(trainer.model, dict(batch)))
            reference_loss = float(loss_of(trainer.model, [batch]))
    finally:
        trainer.model.train()
    return check_close("Trainer loss on the first batch", trainer_loss, reference_loss, 1e-4)


# Sequence-classification heads (what reward models are), single- and multi-label, on a
# family whose head took loss keywords from transformers 4.5x (Llama) and one whose head
# did not until 5.x (GPT-2).
CLASSIFICATION_KNOBS = (
    Knob("accumulation", (1, 2)),
    Knob("problem_type", ("single_label_classification", "multi_label_classification")),
    Knob("family", ("llama", "gpt2")),
)
# One label per row of UPDATE_ROWS: a class of three, or three yes/no labels.
CLASSIFICATION_LABELS = {
    "single_label_classification": [0, 2, 1, 2],
    "multi_label_classification": [
        [1.0, 0.0, 1.0],
        [0.0, 1.0, 1.0],
        [1.0, 1.0, 0.0],
        [0.0, 0.0, 1.0],
    ],
}


@pytest.mark.operation("train")
@pytest.mark.requires_packages(transformers=">=4.30")
@pytest.mark.parametrize("setting", knob_params(CLASSIFICATION_KNOBS))
def test_train_classification(
    setting: Setting, tokenizer: Any, tmp_path: Path, record_property: Any
) -> None:
    run_train_classification(None, setting, tokenizer, tmp_path, record_property)


def run_train_classification(
    trainer_class: type | None,
    setting: Setting,
    tokenizer: Any,
    tmp_path: Path,
    record_property: Any,
) -> None:
    """One SGD step of a sequence-classification head over UPDATE_ROWS (padded per batch),
    against the mean over every row of the accumulated batch of its loss, computed from the
    head's raw logits: the contracts of :func:`check_accumulated_step`."""
    setting.require()
    from helpers.tiny import build_head_model
    from helpers.update import mean_row_loss

    problem_type = setting["problem_type"]
    labels = CLASSIFICATION_LABELS[problem_type]

    def trainer(model: Any, folder: str, micro_batch: int, steps: int) -> Any:
        from helpers.update import sgd_step_values
        from transformers import DataCollatorWithPadding, Trainer

        dataset = [
            {"input_ids": tokenizer(text)["input_ids"], "labels": label}
            for text, label in zip(UPDATE_ROWS, labels, strict=True)
        ]
        return (trainer_class or Trainer)(
            model=model,
            args=training_arguments(
                tmp_path / folder, **sgd_step_values(batch=micro_batch, accumulation=steps)
            ),
            train_dataset=dataset,
            data_collator=DataCollatorWithPadding(tokenizer),
        )

    model = build_head_model(
        setting["family"],
        tokenizer,
        head="AutoModelForSequenceClassification",
        num_labels=len(CLASSIFICATION_LABELS["multi_label_classification"][0]),
        problem_type=problem_type,
    )
    check_accumulated_step(
        trainer,
        model,
        setting["accumulation"],
        mean_row_loss(problem_type),
        record_property,
        described=setting_described(setting, head="sequence classification"),
    )
