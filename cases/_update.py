"""The update contracts: what one optimizer step does to the weights, not only the loss it logs.

A release can log the right loss and still move the weights by the wrong amount
(the loss normalised twice under gradient accumulation, averaged per micro-batch
instead of per token, a micro-batch dropped, a scheduler restarted on resume).
With plain SGD (learning rate 1, no momentum, clipping, weight decay or warm-up)
one step from a known start must move every weight by exactly minus the gradient
of the reference loss, which we compute ourselves from the model's raw logits:
the mean token cross-entropy over every label token of the whole accumulated batch.

- :func:`check_exact_update`: the trained weights equal the independently updated ones.
- Accumulation equivalence follows: batch b with accumulation 1 and batch b/k with
  accumulation k must both land on the same reference weights.
- :func:`check_resume_equivalence`: two steps in one run equal one step, a saved
  checkpoint, and one more step resumed from it.

Each check raises ``ContractError`` (``fail``) naming the quantity, both values and the
tolerance, and returns the largest gap it saw (a metric of the record).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from _contracts import IGNORE, ContractError, check_tensors_close, contract_message

# The update contracts' rows: 3, 4, 6 and 10 words (2, 3, 5 and 9 label tokens after
# the shift, plus what a trainer adds). However a sampler pairs them into two
# micro-batches of two, the pairs hold different numbers of label tokens, so averaging
# per micro-batch shows.
UPDATE_ROWS = (
    "the quick brown",
    "hello world good morning",
    "one two three four five six",
    "one two three four five six seven eight nine ten",
)

# fp32 on a tiny model: the trainer and the reference sum the same terms in another
# order, about 1e-7 apart; a wrongly scaled step is off by a tenth of a gradient or more.
UPDATE_TOLERANCE = 1e-5


def sgd_step_values(*, batch: int, accumulation: int, steps: int = 1) -> dict[str, Any]:
    """Training arguments for the update contracts: plain SGD, learning rate 1, nothing else.

    ``max_grad_norm=0`` turns clipping off in every transformers release (it clips only
    when the norm is above 0); the schedule is linear so that a resume that restarts
    its scheduler shows (at two steps the second step's rate is half the first's).
    """
    return {
        "optim": "sgd",
        "learning_rate": 1.0,
        "lr_scheduler_type": "linear" if steps > 1 else "constant",
        "warmup_steps": 0,
        "warmup_ratio": 0.0,
        "weight_decay": 0.0,
        "max_grad_norm": 0.0,
        "per_device_train_batch_size": batch,
        "gradient_accumulation_steps": accumulation,
        "max_steps": steps,
        "num_train_epochs": 1,
    }


def token_loss_terms(model: Any, batch: Any, forward: Any = None) -> tuple[Any, int]:
    """(sum of next-token cross-entropies, number of label tokens) of one batch.

    Labels are the batch's ``labels`` (else its ``input_ids``), -100 ignored, shifted by
    one as every causal LM in transformers does. ``forward`` calls the model (default:
    ``model`` itself).
    """
    import torch

    labels = batch["labels"] if "labels" in batch else batch["input_ids"]
    kwargs = {"attention_mask": batch["attention_mask"]} if "attention_mask" in batch else {}
    logits = (forward or model)(input_ids=batch["input_ids"], **kwargs).logits
    predicting = logits[:, :-1, :].reshape(-1, logits.size(-1)).float()
    targets = labels[:, 1:].reshape(-1)
    total = torch.nn.functional.cross_entropy(
        predicting, targets, ignore_index=IGNORE, reduction="sum"
    )
    return total, int((targets != IGNORE).sum())


def expected_after_sgd_step(model: Any, batches: Iterable[Any]) -> dict[str, Any]:
    """The weights one SGD step (learning rate 1) from ``model``'s must give: each minus
    the gradient of the mean token cross-entropy over every label token of ``batches``.

    The gradient is taken with respect to copies of the weights, swapped into the model
    for the reference's forward passes only (``torch.func.functional_call``): a copy of
    the whole model could still call the original through a forward a trainer wrapped,
    and the original's own gradients stay untouched. Frozen weights are left out.
    """
    import torch

    weights = {
        name: p.detach().clone().requires_grad_(True)
        for name, p in model.named_parameters()
        if p.requires_grad
    }

    def forward(**inputs: Any) -> Any:
        return torch.func.functional_call(model, weights, args=(), kwargs=inputs, strict=False)

    total, count = None, 0
    for batch in batches:
        batch_total, batch_count = token_loss_terms(model, batch, forward)
        total = batch_total if total is None else total + batch_total
        count += batch_count
    if total is None or count == 0:
        raise ContractError(contract_message("label tokens in the step's batches", 0, ">0", 0))
    (total / count).backward()
    return {name: (w - w.grad if w.grad is not None else w).detach() for name, w in weights.items()}


def expected_after_dpo_step(model: Any, rows: Iterable[Any], beta: float) -> dict[str, Any]:
    """The weights one SGD step (learning rate 1) of DPO from ``model``'s must give: each
    minus the gradient of the mean sigmoid DPO loss over ``rows`` (the trainer's own
    tokenized rows), the reference being the model as it is now.

    Per pair: ``-log sigmoid(beta * ((policy chosen - policy rejected) - (reference chosen
    - reference rejected)))``, each a summed log-prob of the completion's tokens, computed
    from the raw logits (:func:`_contracts.token_log_probs`).
    """
    import torch
    from _compat import preference_sequences
    from _contracts import token_log_probs

    weights = {
        name: p.detach().clone().requires_grad_(True)
        for name, p in model.named_parameters()
        if p.requires_grad
    }

    def summed(ids: list[int], start: int, *, policy: bool) -> Any:
        tokens = torch.tensor([ids])
        if policy:
            logits = torch.func.functional_call(
                model, weights, args=(), kwargs={"input_ids": tokens}, strict=False
            ).logits
        else:
            with torch.no_grad():
                logits = model(input_ids=tokens).logits
        return token_log_probs(logits[:, :-1, :].float(), tokens[:, 1:])[0][start - 1 :].sum()

    losses = []
    for row in rows:
        margin = {}
        for side in ("chosen", "rejected"):
            ids, start = preference_sequences(row, side)
            margin[side] = summed(ids, start, policy=True) - summed(ids, start, policy=False)
        logit = beta * (margin["chosen"] - margin["rejected"])
        losses.append(-torch.nn.functional.logsigmoid(logit))
    if not losses:
        raise ContractError(contract_message("preference pairs in the step", 0, ">0", 0))
    torch.stack(losses).mean().backward()
    return {name: (w - w.grad if w.grad is not None else w).detach() for name, w in weights.items()}


def check_weights_equal(quantity: str, model: Any, expected: dict[str, Any]) -> float:
    """Every weight of ``model`` named in ``expected`` equals it within UPDATE_TOLERANCE;
    returns the largest gap."""
    worst = 0.0
    weights = dict(model.named_parameters())
    for name, want in expected.items():
        got = weights.get(name)
        if got is None:
            raise ContractError(contract_message(f"{quantity}: weight {name}", "missing", name, 0))
        worst = max(worst, check_tensors_close(f"{quantity}, {name}", got, want, UPDATE_TOLERANCE))
    return worst


def step_batches(trainer: Any) -> list[Any]:
    """Every micro-batch the trainer's own dataloader gives for its one step (the dataset
    holds exactly one accumulated batch): the reference sees what the trainer saw."""
    return [dict(batch) for batch in trainer.get_train_dataloader()]


def check_exact_update(trainer: Any, record_property: Any, *, label: str) -> float:
    """One optimizer step of ``trainer`` moves the weights by minus the reference gradient.

    ``trainer`` is configured with :func:`sgd_step_values` (one step) over a dataset of
    exactly one accumulated batch. Records ``update_gap_<label>`` and returns it.
    """
    batches = step_batches(trainer)
    expected = expected_after_sgd_step(trainer.model, batches)
    trainer.train()
    if trainer.state.global_step != 1:
        raise ContractError(
            contract_message(f"optimizer steps ({label})", trainer.state.global_step, 1, 0)
        )
    gap = check_weights_equal(
        f"weights after one SGD step ({label}) against minus the reference gradient",
        trainer.model,
        expected,
    )
    record_property(f"update_gap_{label}", gap)
    return gap


def check_resume_equivalence(
    straight: Any, first_half: Any, resumed: Any, checkpoint_dir: str, record_property: Any
) -> float:
    """Two steps in one run (``straight``) equal one step, a checkpoint, one step resumed.

    ``first_half`` stops itself after the first step, once its checkpoint is saved
    (:func:`stop_after_first_step`); ``resumed`` is a fresh trainer with the same
    arguments, trained with ``resume_from_checkpoint``. Records ``resume_gap``.
    """
    straight.train()
    first_half.train()
    from pathlib import Path

    saved = sorted(Path(checkpoint_dir).glob("checkpoint-*"))
    if not saved:
        raise ContractError(
            contract_message("checkpoints saved after one step", 0, "checkpoint-1", 0)
        )
    resumed.train(resume_from_checkpoint=str(saved[0]))
    if resumed.state.global_step != straight.state.global_step:
        raise ContractError(
            contract_message(
                "optimizer steps after resuming",
                resumed.state.global_step,
                straight.state.global_step,
                0,
            )
        )
    expected = {n: p.detach().clone() for n, p in straight.model.named_parameters()}
    gap = check_weights_equal(
        "weights after one step, a checkpoint and one step resumed, against two steps in one run",
        resumed.model,
        expected,
    )
    record_property("resume_gap", gap)
    return gap


def stop_after_first_step() -> Any:
    """A TrainerCallback that ends training after the first optimizer step (saved first)."""
    from transformers import TrainerCallback

    class StopAfterFirstStep(TrainerCallback):  # type: ignore[misc]
        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            if state.global_step >= 1:
                control.should_save = True
                control.should_training_stop = True
            return control

    return StopAfterFirstStep()
