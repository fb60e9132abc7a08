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
from _compat import family_param
from _tiny import CORPUS, FAMILIES
from _update import UPDATE_ROWS


def training_arguments(output_dir: Path, **values: Any) -> Any:
    """TrainingArguments for tiny fp32 CPU steps, in the installed release's spelling."""
    from _compat import make_config, tiny_run_values
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
    **values: Any,
) -> Any:
    """A Trainer on ``rows`` (texts), each tokenized alone and padded per batch by
    transformers' language-modelling collator (labels: the tokens, -100 on padding)."""
    from transformers import DataCollatorForLanguageModeling, Trainer

    dataset = [{"input_ids": tokenizer(text)["input_ids"]} for text in rows]
    return (trainer_class or Trainer)(
        model=model,
        args=training_arguments(output_dir, **values),
        train_dataset=dataset,
        data_collator=DataCollatorForLanguageModeling(tokenizer, mlm=False),
        callbacks=callbacks,
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
    from _contracts import check_close
    from _train import train_and_check
    from _update import token_loss_terms

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

    from _contracts import contracts
    from _update import check_accumulation, check_update, sgd_step_values

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
    from _update import check_resume_equivalence, sgd_step_values, stop_after_first_step
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
