"""Numeric contracts: a trainer's numbers against our own computation from the model's raw outputs.

A silent correctness break (log-probs taken at the wrong positions, a mask that
moved, a label shift) trains without raising; these checks turn it into ``fail``.
Each check is a function over tensors that returns the numbers it compared (for
the record's metrics) or raises ``ContractError`` naming the quantity, the two
values and the tolerance. ``ContractError`` is an ``AssertionError``: the results
plugin counts it against the frameworks (``fail``), never as a bug of the case.

A case checks several contracts (the loss, the exact step, the step's direction and
scale, accumulation k against 1, round-trip logits, a mask): each runs through
:class:`Contracts`, is recorded on its own (``<name>_contract``: ``pass``, ``fail`` or
``unverified: <why>``) and can fail alone, so a second break in a cell that is already
red still shows. The case fails once, at the end, naming every broken contract on the
message's first line (``contracts broken: update_direction, exact_update``), which is what
its error signature groups by; each contract's own message follows on a line of its own.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any

IGNORE = -100  # the label value every causal-LM loss in transformers skips


class ContractError(AssertionError):
    """A trainer's number differs from the independent computation beyond the tolerance."""


# A contract's name is a recorded key and part of the failure's signature: lower-case
# words and underscores, no digits (the signature folds numbers).
_CONTRACT_NAME = re.compile(r"^[a-z]+(?:_[a-z]+)*$")


class Contracts:
    """The contracts one case checks: each recorded on its own and able to fail alone.

    ``check(name, function, *args)`` runs one check (a function of this module or of
    ``helpers.update``: it returns the gap it saw or raises ``ContractError``); a failure is
    recorded and kept, and the next check still runs. :meth:`conclude` (the end of
    :func:`contracts`) raises one ``ContractError`` naming every broken contract.
    """

    def __init__(self, record_property: Callable[[str, Any], None]) -> None:
        self._record = record_property
        self.failures: dict[str, str] = {}
        self.verdicts: dict[str, str] = {}

    def check(self, name: str, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run one contract's check; its result (or None where it broke)."""
        if not _CONTRACT_NAME.match(name):
            raise ValueError(f"contract name {name!r}: lower-case words joined by '_', no digits")
        try:
            result = function(*args, **kwargs)
        except ContractError as broken:
            self._verdict(name, "fail")
            self.failures.setdefault(name, str(broken).splitlines()[0])
            return None
        self._verdict(name, "pass")
        if isinstance(result, (int, float)) and not isinstance(result, bool):
            self._record(f"{name}_gap", float(result))
        return result

    def unverified(self, name: str, why: str) -> None:
        """A contract this release does not let the case check: shown so, never as a pass."""
        self._verdict(name, f"unverified: {why}")

    def _verdict(self, name: str, verdict: str) -> None:
        # A contract checked at several places (each micro-batch, each weight) is one
        # verdict: it fails if any check of it failed.
        if self.verdicts.get(name) == "fail":
            return
        self.verdicts[name] = verdict
        self._record(f"{name}_contract", verdict)

    def conclude(self) -> None:
        """Raise one ``ContractError`` naming every broken contract, if any broke."""
        if self.failures:
            raise ContractError(broken_message(self.failures))


def broken_message(failures: dict[str, str]) -> str:
    """``contracts broken: a, b`` then each contract's own message on a line of its own."""
    lines = [f"contracts broken: {', '.join(failures)}"]
    lines += [f"{name}: {message}" for name, message in failures.items()]
    return "\n".join(lines)


@contextlib.contextmanager
def contracts(record_property: Callable[[str, Any], None]) -> Iterator[Contracts]:
    """``with contracts(record_property) as check: check("loss", check_close, ...)``; the
    case fails at the end of the block with every broken contract named.

    A framework's own exception inside the block ends the case as it would without this
    (the contracts checked so far stay recorded).
    """
    checks = Contracts(record_property)
    yield checks
    checks.conclude()


def contract_message(quantity: str, trainer: Any, reference: Any, tolerance: float) -> str:
    """``QUANTITY: trainer X != reference Y (tolerance T)``: the format every contract uses."""
    return f"{quantity}: trainer {trainer} != reference {reference} (tolerance {tolerance:g})"


def check_close(quantity: str, trainer: float, reference: float, tolerance: float) -> float:
    """Two scalars agree within ``tolerance`` (absolute); returns their difference."""
    difference = abs(float(trainer) - float(reference))
    if not difference <= tolerance:  # written so that NaN fails too
        raise ContractError(contract_message(quantity, trainer, reference, tolerance))
    return difference


def check_tensors_close(quantity: str, trainer: Any, reference: Any, tolerance: float) -> float:
    """Two tensors of one shape agree element-wise within ``tolerance``; returns the largest gap.

    The message shows the first position that differs and both values there.
    """
    import torch

    if tuple(trainer.shape) != tuple(reference.shape):
        raise ContractError(
            contract_message(f"{quantity} shape", tuple(trainer.shape), tuple(reference.shape), 0)
        )
    trainer = trainer.detach().float().cpu()
    reference = reference.detach().float().cpu()
    gap = (trainer - reference).abs()
    if gap.numel() == 0:
        return 0.0
    worst = float(gap.max())
    bad = ~(gap <= tolerance)  # NaN is bad
    if bool(bad.any()):
        position = tuple(int(i) for i in torch.nonzero(bad)[0])
        raise ContractError(
            contract_message(
                f"{quantity} at {list(position)} (largest gap {worst:.3g})",
                f"{float(trainer[position]):.6g}",
                f"{float(reference[position]):.6g}",
                tolerance,
            )
        )
    return worst


def token_log_probs(logits: Any, tokens: Any) -> Any:
    """``log p(tokens[t])`` under ``logits[t]``, position by position (float32)."""
    import torch

    log_probs = torch.log_softmax(logits.float(), dim=-1)
    return log_probs.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


def completion_log_probs(model: Any, input_ids: Any, attention_mask: Any, completion: int) -> Any:
    """Per-token log-probs of the last ``completion`` tokens from one plain forward pass.

    The token at position t is predicted by the logits at t - 1: the reference
    for every trainer that scores completions after a prompt.
    """
    import torch

    with torch.no_grad():
        logits = model(input_ids=input_ids, attention_mask=attention_mask).logits
    predicting = logits[:, -completion - 1 : -1, :]
    return token_log_probs(predicting, input_ids[:, -completion:])


def model_device(model: Any) -> Any:
    """Where ``model``'s weights are: a trainer moves them to its GPU, and the inputs of our
    own forward passes go there too."""
    return next(model.parameters()).device


def sequence_log_prob(model: Any, token_ids: Sequence[int], completion_start: int) -> float:
    """Sum of log p(token) over ``token_ids[completion_start:]``, given everything before."""
    import torch

    ids = torch.tensor([list(token_ids)], device=model_device(model))
    with torch.no_grad():
        logits = model(input_ids=ids).logits
    per_token = token_log_probs(logits[:, :-1, :], ids[:, 1:])[0]
    return float(per_token[completion_start - 1 :].sum())


def expected_completion_mask(completion_ids: Any, eos_token_id: int) -> Any:
    """1 on every generated token up to and including the first end-of-sequence, else 0.

    A completion without an end-of-sequence ran to the length limit: all of it was generated.
    """
    import torch

    is_eos = completion_ids == eos_token_id
    length = completion_ids.size(1)
    first_eos = torch.where(
        is_eos.any(dim=1),
        is_eos.int().argmax(dim=1),
        torch.full_like(is_eos[:, 0], length - 1, dtype=torch.long),
    )
    positions = torch.arange(length, device=completion_ids.device).unsqueeze(0)
    return (positions <= first_eos.unsqueeze(1)).int()


def check_completion_mask(trainer_mask: Any, completion_ids: Any, eos_token_id: int) -> int:
    """The trainer's completion mask covers exactly the generated tokens; returns how many."""
    expected = expected_completion_mask(completion_ids.cpu(), eos_token_id)
    got = (trainer_mask.detach().cpu() != 0).int()
    if tuple(got.shape) != tuple(expected.shape) or not bool((got == expected).all()):
        rows = [
            i
            for i in range(min(got.size(0), expected.size(0)))
            if not bool((got[i] == expected[i]).all())
        ] or [0]
        raise ContractError(
            contract_message(
                f"completion mask row {rows[0]}",
                got[rows[0]].tolist(),
                expected[rows[0]].tolist(),
                0,
            )
        )
    return int(expected.sum())


def find_prefix(row: Sequence[int], prefix: Sequence[int], start: int) -> bool:
    """Does ``row`` hold ``prefix`` from position ``start`` on?"""
    return list(row[start : start + len(prefix)]) == list(prefix)


def expected_labels(
    input_ids: Sequence[int],
    *,
    pad_token_id: int,
    prompts: Sequence[Sequence[int]] = (),
) -> list[int]:
    """The labels of one row: the token itself, -100 on padding and on each prompt.

    ``prompts`` are the token ids of the prompts the row holds (their completions are
    what training must learn); each is masked where it first appears in order.
    """
    labels = [IGNORE if token == pad_token_id else token for token in input_ids]
    cursor = 0
    for prompt in prompts:
        found = next(
            (i for i in range(cursor, len(input_ids)) if find_prefix(input_ids, prompt, i)), None
        )
        if found is None:
            raise ContractError(
                contract_message("prompt tokens in the batch row", list(input_ids), list(prompt), 0)
            )
        labels[found : found + len(prompt)] = [IGNORE] * len(prompt)
        cursor = found + len(prompt)
    return labels


def check_labels(
    quantity: str,
    trainer_labels: Sequence[int],
    expected: Sequence[int],
    *,
    may_ignore: Sequence[int] = (),
) -> int:
    """Labels are -100 exactly where ``expected`` has -100; returns how many positions are ignored.

    ``may_ignore`` are positions either value is right at (the first token of each
    packed sequence: learning it from the previous sequence's end is optional).
    """
    if len(trainer_labels) != len(expected):
        raise ContractError(
            contract_message(f"{quantity} length", len(trainer_labels), len(expected), 0)
        )
    for position, (got, want) in enumerate(zip(trainer_labels, expected, strict=True)):
        if position in may_ignore and got in (IGNORE, want):
            continue
        if got != want:
            raise ContractError(
                contract_message(f"{quantity} at position {position}", got, want, 0)
            )
    return sum(1 for label in trainer_labels if label == IGNORE)
