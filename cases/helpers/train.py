"""Train and check: what every training case asks of a trainer, whatever the operation.

A case builds its trainer and checks its own contract (a loss, log-probs, labels);
:func:`train_and_check` then runs the steps and checks what any training must
show: exactly the optimizer steps asked for, a finite loss logged for each, and
weights that moved. Its assertions are ``fail`` when they do not hold, like any
check of a case on the frameworks' result.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

# Spelt out where a message reads better that way ("after two optimizer steps").
NUMBERS = {1: "one", 2: "two", 3: "three"}


@dataclass(frozen=True)
class Trained:
    """What a training run left: the trainer's result, its loss logs, whether weights moved."""

    result: Any  # what ``trainer.train()`` returned (transformers' TrainOutput)
    logs: list[dict[str, Any]]  # the trainer's log entries that carry a ``loss``, in order
    moved: bool  # some weight differs from before the steps

    @property
    def losses(self) -> list[float]:
        return [float(entry["loss"]) for entry in self.logs]


def weights_of(model: Any) -> dict[str, Any]:
    """A copy of every parameter, by name, to compare after training."""
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def weights_moved(model: Any, before: dict[str, Any]) -> bool:
    """Does any parameter of ``model`` differ from ``before`` (:func:`weights_of`)?"""
    import torch

    return any(not torch.equal(before[name], p.detach()) for name, p in model.named_parameters())


def train_and_check(
    trainer: Any,
    record_property: Any,
    *,
    steps: int = 2,
    weights_move: bool = True,
    loss: Literal["last", "mean"] = "last",
) -> Trained:
    """Run ``trainer.train()`` and check: ``steps`` optimizer steps (the case configures
    them), a finite loss logged for each, and (``weights_move``) a changed weight.

    Records, before checking, ``steps`` (the optimizer steps that ran) and ``loss``: the
    last logged step's (``loss="last"``) or the trainer's own training loss, the mean
    over the steps (``loss="mean"``). ``weights_move=False`` leaves that check to the
    case (GRPO: weights move only where rewards differed within a group).
    """
    before = weights_of(trainer.model)
    result = trainer.train()
    logs = [entry for entry in trainer.state.log_history if "loss" in entry]
    trained = Trained(result=result, logs=logs, moved=weights_moved(trainer.model, before))
    if loss == "mean":
        record_property("loss", float(result.training_loss))
    elif logs:
        record_property("loss", trained.losses[-1])
    ran = trainer.state.global_step
    record_property("steps", ran)
    if ran != steps:
        raise AssertionError(f"the trainer ran {ran} optimizer steps, not {steps}")
    if len(logs) != steps or not all(math.isfinite(x) for x in trained.losses):
        raise AssertionError(f"not a finite loss for each of {steps} steps: {trained.losses}")
    if weights_move and not trained.moved:
        number = NUMBERS.get(steps, str(steps))
        raise AssertionError(f"no weight changed after {number} optimizer steps")
    return trained
