"""The update contracts: what one optimizer step does to the weights, not only the loss it logs.

A release can log the right loss and still move the weights by the wrong amount
(the loss normalised twice under gradient accumulation, averaged per micro-batch
instead of per token, a micro-batch dropped, a scheduler restarted on resume).
With plain SGD (learning rate 1, no momentum, clipping, weight decay or warm-up)
one step from a known start must move every weight by exactly minus the gradient
of the reference loss, which we compute ourselves from the model's raw logits:
the mean token cross-entropy over every label token of the whole accumulated batch.

- :func:`check_update`: the trained weights equal the independently updated ones
  (``exact_update``), and, scale-free, the step points along minus the reference
  gradient (``update_direction``) with the reference's length (``update_scale``): a
  break that changes what the loss means shows apart from one that scales the step.
- :func:`check_accumulation`: batch b/k with accumulation k is the same step as the
  same trainer's over batch b with accumulation 1 (``accumulation``).
- :func:`check_resume_equivalence`: two steps in one run equal one step, a saved
  checkpoint, and one more step resumed from it.

Each check raises ``ContractError`` (``fail``) naming the quantity, both values and the
tolerance, and returns the largest gap it saw (a metric of the record).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from typing import Any

from helpers.contracts import (
    IGNORE,
    ContractError,
    Contracts,
    check_close,
    check_tensors_close,
    contract_message,
    contracts,
)

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


def token_loss_terms(forward: Any, batch: Any, label_smoothing: float = 0.0) -> tuple[Any, int]:
    """(sum of next-token cross-entropies, number of label tokens) of one batch.

    Labels are the batch's ``labels`` (else its ``input_ids``), -100 ignored, shifted by
    one as every causal LM in transformers does. ``forward`` calls the model (the model
    itself, or its weights swapped in); ``label_smoothing`` is torch's (``(1 - e) *
    -log p(label) + e * the mean of -log p over the vocabulary``, what
    ``label_smoothing_factor`` means).
    """
    import torch

    labels = batch["labels"] if "labels" in batch else batch["input_ids"]
    logits = forward(**model_inputs(batch)).logits
    predicting = logits[:, :-1, :].reshape(-1, logits.size(-1)).float()
    targets = labels[:, 1:].reshape(-1)
    total = torch.nn.functional.cross_entropy(
        predicting, targets, ignore_index=IGNORE, reduction="sum", label_smoothing=label_smoothing
    )
    return total, int((targets != IGNORE).sum())


def sgd_reference(model: Any, loss_of: Any) -> dict[str, Any]:
    """The weights one SGD step (learning rate 1) from ``model``'s must give: each minus the
    gradient of ``loss_of(forward)``, where ``forward`` calls the model at copies of its
    trainable weights.

    The gradient is taken with respect to the copies, swapped into the model for the
    reference's forward passes only (``torch.func.functional_call``): a copy of the whole
    model could still call the original through a forward a trainer wrapped, and the
    original's own gradients stay untouched. Frozen weights are left out.
    """
    import torch

    weights = {
        name: p.detach().clone().requires_grad_(True)
        for name, p in model.named_parameters()
        if p.requires_grad
    }

    def forward(**inputs: Any) -> Any:
        return torch.func.functional_call(model, weights, args=(), kwargs=inputs, strict=False)

    loss_of(forward).backward()
    return stepped(weights)


def stepped(weights: dict[str, Any]) -> dict[str, Any]:
    """Each weight minus its gradient (learning rate 1), detached."""
    return {name: (w - w.grad if w.grad is not None else w).detach() for name, w in weights.items()}


def expected_after_sgd_step(model: Any, batches: Iterable[Any]) -> dict[str, Any]:
    """The weights one SGD step (learning rate 1) from ``model``'s must give: each minus
    the gradient of the mean token cross-entropy over every label token of ``batches``."""
    return expected_after_loss_step(mean_token_loss())(model, list(batches))


def expected_after_dpo_step(model: Any, rows: Iterable[Any], beta: float) -> dict[str, Any]:
    """The weights one SGD step (learning rate 1) of DPO from ``model``'s must give: each
    minus the gradient of the mean sigmoid DPO loss over ``rows`` (the trainer's own
    tokenized rows), the reference being the model as it is now.

    Per pair: ``-log sigmoid(beta * ((policy chosen - policy rejected) - (reference chosen
    - reference rejected)))``, each a summed log-prob of the completion's tokens, computed
    from the raw logits (:func:`helpers.contracts.token_log_probs`).
    """
    import torch

    from helpers.compat import preference_sequences
    from helpers.contracts import model_device, token_log_probs

    def summed(forward: Any, ids: list[int], start: int) -> Any:
        tokens = torch.tensor([ids], device=model_device(model))
        logits = forward(input_ids=tokens).logits
        return token_log_probs(logits[:, :-1, :].float(), tokens[:, 1:])[0][start - 1 :].sum()

    def reference(**inputs: Any) -> Any:
        with torch.no_grad():
            return model(**inputs)

    def loss_of(policy: Any) -> Any:
        losses = []
        for row in rows:
            margin = {}
            for side in ("chosen", "rejected"):
                ids, start = preference_sequences(row, side)
                margin[side] = summed(policy, ids, start) - summed(reference, ids, start)
            logit = beta * (margin["chosen"] - margin["rejected"])
            losses.append(-torch.nn.functional.logsigmoid(logit))
        if not losses:
            raise ContractError(contract_message("preference pairs in the step", 0, ">0", 0))
        return torch.stack(losses).mean()

    return sgd_reference(model, loss_of)


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


def check_exact_update(trainer: Any, record_property: Any, *, label: str) -> dict[str, Any]:
    """One optimizer step of ``trainer`` moves the weights by minus the reference gradient.

    The step's contracts (:func:`check_update`), concluded: the case fails naming each
    that broke. Returns the trainer's step (each trained weight's change).
    """
    with contracts(record_property) as check:
        step = check_update(trainer, check, label=label)
    return step


def check_update(
    trainer: Any, check: Contracts, *, label: str, expected_after: Any = None
) -> dict[str, Any]:
    """Train ``trainer`` one step and check what the step did, each contract on its own:

    - ``optimizer_steps``: exactly one optimizer step was taken;
    - ``exact_update``: every weight moved by exactly minus the reference gradient;
    - ``update_direction``: the step points along minus the reference gradient, whatever
      its length (scale-free: a second break that changes what the loss means, such as
      a knob's, shows even where the step's length is off for another cause);
    - ``update_scale``: the step is as long as the reference's.

    ``trainer`` is configured with :func:`sgd_step_values` (one step) over a dataset of
    exactly one accumulated batch. ``expected_after(model, batches)`` is the reference step
    (default :func:`expected_after_sgd_step`; a knob's own: :func:`expected_after_loss_step`).
    Returns the trainer's step (each trained weight's change).
    """
    batches = step_batches(trainer)
    before = trained_weights(trainer.model)
    expected = (expected_after or expected_after_sgd_step)(trainer.model, batches)
    trainer.train()
    return check_step(trainer, check, before, expected, label=label)


def trained_weights(model: Any) -> dict[str, Any]:
    """A detached copy of every weight the optimizer trains."""
    return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


# The step against the reference as two numbers: its length along the reference (the
# scale) and what is left across it (the direction's error), both relative. fp32 on a
# tiny model leaves about 1e-6 of either; a knob ignored or a mask moved leaves 1e-2 or more.
DIRECTION_TOLERANCE = 1e-4
SCALE_TOLERANCE = 1e-4


def step_projection(step: dict[str, Any], reference: dict[str, Any]) -> tuple[float, float]:
    """(scale, off-direction): ``step = scale * reference + rest``, ``|rest| / |step|``."""
    import torch

    names = sorted(set(step) & set(reference))
    flat_step = torch.cat([step[n].detach().float().reshape(-1) for n in names])
    flat_reference = torch.cat([reference[n].detach().float().reshape(-1) for n in names])
    along = float(flat_reference.dot(flat_reference))
    scale = float(flat_step.dot(flat_reference)) / along if along else float("nan")
    length = float(flat_step.norm())
    rest = float((flat_step - scale * flat_reference).norm())
    return scale, (rest / length if length else float("nan"))


def check_step_direction(label: str, step: dict[str, Any], reference: dict[str, Any]) -> float:
    """The trainer's step points along minus the reference gradient; returns the error."""
    _, off = step_projection(step, reference)
    if not off <= DIRECTION_TOLERANCE:  # NaN (no step at all) fails too
        raise ContractError(
            contract_message(
                f"direction of the SGD step ({label}): share of the step across "
                "minus the reference gradient",
                f"{off:.3g}",
                0,
                DIRECTION_TOLERANCE,
            )
        )
    return off


def check_step_scale(label: str, step: dict[str, Any], reference: dict[str, Any]) -> float:
    """The trainer's step is as long as the reference's, along it; returns the gap."""
    scale, _ = step_projection(step, reference)
    if not abs(scale - 1.0) <= SCALE_TOLERANCE:
        raise ContractError(
            contract_message(
                f"length of the SGD step ({label}) along minus the reference gradient",
                f"{scale:.6g}",
                1,
                SCALE_TOLERANCE,
            )
        )
    return abs(scale - 1.0)


def check_accumulation(label: str, accumulated: dict[str, Any], whole: dict[str, Any]) -> float:
    """The step with accumulation k equals the trainer's own step over the whole batch at
    accumulation 1 (scale-free: a break that scales both alike does not show here, one
    that treats micro-batches differently does); returns the largest gap."""
    worst = 0.0
    for name in sorted(whole):
        worst = max(
            worst,
            check_tensors_close(
                f"SGD step with {label} against the same trainer's step over the whole "
                f"batch at accumulation 1, {name}",
                accumulated[name],
                whole[name],
                UPDATE_TOLERANCE,
            ),
        )
    return worst


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


# GRPO's loss types whose step is defined over the whole accumulated batch, and how each
# normalises (trl's own docs): "grpo" the mean over sequences of each sequence's token
# mean; "dapo" the mean over every completion token of the accumulated batch; "dr_grpo"
# the token sum over sequences x max_completion_length. ("bnpo" normalises per local
# micro-batch by definition, so it has no single accumulated answer to check.)
GRPO_LOSS_TYPES = ("grpo", "dapo", "dr_grpo")


def expected_after_grpo_step(
    model: Any,
    initial: dict[str, Any],
    micro_batches: list[dict[str, Any]],
    *,
    loss_type: str,
    max_completion_length: int,
) -> dict[str, Any]:
    """The weights one SGD step (learning rate 1) of GRPO from ``initial`` must give.

    ``micro_batches`` are the trainer's own scored rollouts, as its loss received them:
    prompt and completion tokens, their masks and the advantages (taken as given; the
    rewards behind them are the toy reward's). One optimisation pass per generation
    (``num_iterations=1``) makes the importance ratio ``exp(logp - logp.detach())`` one
    in value with gradient ``grad logp``; with ``beta=0`` there is no KL term, so the
    per-token loss is ``-advantage * ratio``, normalised by ``loss_type`` (see
    GRPO_LOSS_TYPES) over every micro-batch of the step. The log-probs come from the
    model's raw logits at the ``initial`` weights (swapped in with
    ``torch.func.functional_call``), prompt + completion in one forward as every release
    scores them.
    """
    weights = {name: w.detach().clone().requires_grad_(True) for name, w in initial.items()}
    with forward_not_recomputed(model):
        loss = _grpo_reference_loss(model, weights, micro_batches, loss_type, max_completion_length)
        loss.backward()
    return stepped(weights)


@contextlib.contextmanager
def forward_not_recomputed(model: Any) -> Any:
    """Gradient checkpointing off for the reference's forward and backward, as it was after.

    A checkpointed layer recomputes its forward during backward, after
    ``functional_call`` has put the model's own weights back: the reference's
    gradient would mix the swapped-in weights with the trained ones.
    """
    checkpointing = bool(getattr(model, "is_gradient_checkpointing", False))
    if checkpointing:
        model.gradient_checkpointing_disable()
    try:
        yield
    finally:
        if checkpointing:
            model.gradient_checkpointing_enable()


def _grpo_reference_loss(
    model: Any,
    weights: dict[str, Any],
    micro_batches: list[dict[str, Any]],
    loss_type: str,
    max_completion_length: int,
) -> Any:
    import torch

    from helpers.contracts import token_log_probs

    sequence_means, token_sums, tokens, sequences = [], [], 0, 0
    for batch in micro_batches:
        completion_ids, mask = batch["completion_ids"], batch["completion_mask"].float()
        input_ids = torch.cat([batch["prompt_ids"], completion_ids], dim=1)
        attention_mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
        logits = torch.func.functional_call(
            model,
            weights,
            args=(),
            kwargs={"input_ids": input_ids, "attention_mask": attention_mask},
            strict=False,
        ).logits
        keep = completion_ids.size(1)
        logps = token_log_probs(logits[:, -keep - 1 : -1, :], completion_ids)
        advantages = batch["advantages"].float()
        if advantages.dim() == 1:
            advantages = advantages.unsqueeze(1)
        per_token = -advantages * torch.exp(logps - logps.detach())
        sequence_means.append((per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1.0))
        token_sums.append((per_token * mask).sum())
        tokens += int(mask.sum())
        sequences += completion_ids.size(0)
    if not micro_batches or tokens == 0:
        raise ContractError(contract_message("completion tokens in the GRPO step", 0, ">0", 0))
    if loss_type == "grpo":
        loss = torch.cat(sequence_means).mean()
    elif loss_type == "dapo":
        loss = torch.stack(token_sums).sum() / tokens
    elif loss_type == "dr_grpo":
        loss = torch.stack(token_sums).sum() / (sequences * max_completion_length)
    else:
        raise ValueError(f"no reference for GRPO loss_type {loss_type!r}: {GRPO_LOSS_TYPES}")
    return loss


def expected_after_loss_step(loss_of: Any) -> Any:
    """``expected_after(model, batches)`` for :func:`check_update` under any loss: the weights
    one SGD step (learning rate 1) from ``model``'s must give, each minus the gradient of
    ``loss_of(forward, batches)`` (``forward`` calls the model at copies of its weights, as
    :func:`expected_after_sgd_step` does; frozen weights are left out)."""

    def expected_after(model: Any, batches: list[Any]) -> dict[str, Any]:
        return sgd_reference(model, lambda forward: loss_of(forward, batches))

    return expected_after


def model_inputs(batch: Any) -> dict[str, Any]:
    """What a reference passes the model from a trainer's batch: the tokens and their mask."""
    return {k: batch[k] for k in ("input_ids", "attention_mask") if k in batch}


def mean_token_loss(label_smoothing: float = 0.0) -> Any:
    """``loss_of(forward, batches)``: the mean next-token cross-entropy over every label token
    of the accumulated batch, with torch's label smoothing (:func:`token_loss_terms`)."""

    def loss_of(forward: Any, batches: list[Any]) -> Any:
        total, count = None, 0
        for batch in batches:
            terms, tokens = token_loss_terms(forward, batch, label_smoothing)
            total = terms if total is None else total + terms
            count += tokens
        if total is None or count == 0:
            raise ContractError(contract_message("label tokens in the step's batches", 0, ">0", 0))
        return total / count

    return loss_of


def mean_row_loss(problem_type: str) -> Any:
    """``loss_of(forward, batches)`` of a sequence-classification head: the mean over every
    row of the accumulated batch of its cross-entropy (``single_label_classification``) or
    of the mean binary cross-entropy over its labels (``multi_label_classification``),
    from the head's raw logits."""

    def loss_of(forward: Any, batches: list[Any]) -> Any:
        import torch

        rows = []
        for batch in batches:
            logits = forward(**model_inputs(batch)).logits.float()
            labels = batch["labels"]
            if problem_type == "single_label_classification":
                rows.append(torch.nn.functional.cross_entropy(logits, labels, reduction="none"))
            else:
                rows.append(
                    torch.nn.functional.binary_cross_entropy_with_logits(
                        logits, labels.float(), reduction="none"
                    ).mean(-1)
                )
        if not rows:
            raise ContractError(contract_message("rows in the step's batches", 0, ">0", 0))
        return torch.cat(rows).mean()

    return loss_of


def check_update_against(
    trainer: Any, check: Contracts, reference: Any, *, label: str, step_name: str = "SGD step"
) -> dict[str, Any]:
    """:func:`check_update` for a trainer whose loss is not the token cross-entropy: the
    expected weights come from ``reference(trainer)`` (called before the step, on the
    trainer's own model and data), and the same contracts are checked on its one step
    (``optimizer_steps``, ``exact_update``, ``update_direction``, ``update_scale``)."""
    before = trained_weights(trainer.model)
    expected = reference(trainer)
    trainer.train()
    return check_step(trainer, check, before, expected, label=label, step_name=step_name)


def check_step(
    trainer: Any,
    check: Contracts,
    before: dict[str, Any],
    expected: dict[str, Any],
    *,
    label: str,
    step_name: str = "SGD step",
) -> dict[str, Any]:
    """The step's contracts once ``trainer`` trained one step from ``before``, against the
    ``expected`` weights; returns the trainer's step (each trained weight's change).
    ``step_name`` names it in the messages (``SGD step of DPO``)."""
    check.check(
        "optimizer_steps",
        check_close,
        f"optimizer steps ({label})",
        trainer.state.global_step,
        1,
        0,
    )
    check.check(
        "exact_update",
        check_weights_equal,
        f"weights after one {step_name} ({label}) against minus the reference gradient",
        trainer.model,
        expected,
    )
    after = trained_weights(trainer.model)
    step = {name: after[name] - before[name] for name in before}
    reference = {name: expected[name] - before[name] for name in before if name in expected}
    check.check("update_direction", check_step_direction, label, step, reference)
    check.check("update_scale", check_step_scale, label, step, reference)
    return step


def expected_whole_batch_step(trainer: Any) -> dict[str, Any]:
    """Minus the gradient of ``trainer``'s own loss over its whole accumulated batch at once:
    the step (learning rate 1) its accumulation-1 run over the same rows takes.

    For :func:`check_accumulation` without a second trainer: the trainer's own dataloader
    collates the whole batch (its batch size times the accumulation steps), its own
    ``compute_loss`` scores it, and the gradient is taken apart from ``.grad``. Called
    before the step.
    """
    import torch

    size = trainer._train_batch_size
    trainer._train_batch_size = size * trainer.args.gradient_accumulation_steps
    try:
        batches = list(trainer.get_train_dataloader())
    finally:
        trainer._train_batch_size = size
    if len(batches) != 1:
        raise ContractError(contract_message("batches of the whole step", len(batches), 1, 0))
    trainer.model.train()
    named = [(n, p) for n, p in trainer.model.named_parameters() if p.requires_grad]
    loss = trainer.compute_loss(trainer.model, trainer._prepare_inputs(batches[0]))
    if isinstance(loss, tuple):
        loss = loss[0]
    grads = torch.autograd.grad(loss, [p for _, p in named], allow_unused=True)
    return {
        name: (-grad if grad is not None else torch.zeros_like(p)).detach()
        for (name, p), grad in zip(named, grads, strict=True)
    }
