"""GRPO: trl's GRPOTrainer steps with a toy reward, generating with the model itself (no vLLM).

Contract: the per-token log-probs the trainer computes for the completions equal
those of a plain forward pass over prompt + completion (and, where the model returns
them, the logits it sliced are that forward's); the completion mask covers exactly
the generated tokens (up to and including the first end-of-sequence); at the model's
boundary, every forward that asked for its last k positions got exactly k back.

The update: one plain SGD step (learning rate 1) moves every weight by exactly minus
the gradient of the GRPO loss over the trainer's own rollouts, computed from the raw
logits (``helpers.update.expected_after_grpo_step``), as one batch of 4 completions and as 2
micro-batches of 2, for the per-sequence ("grpo") and per-token ("dapo") normalisations.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

PROMPTS = ["what is two plus two ?", "hello world", "one two three", "the quick brown fox"]
LOGPS_TOLERANCE = 1e-4


def reward_distinct_words(completions: list[Any], **_: Any) -> list[float]:
    """More distinct words, more reward: varied enough that advantages are rarely all zero."""
    texts = [c if isinstance(c, str) else " ".join(m["content"] for m in c) for c in completions]
    return [float(len(set(text.split()))) for text in texts]


class LogitsWatch:
    """What each forward of the model was asked and what it returned, at the model's boundary.

    A forward hook with keyword arguments sees every release's call, whatever its
    internals: the tokens, the attention mask, how many last positions it asked for
    (``logits_to_keep``, or ``num_logits_to_keep`` before transformers 4.50), and the
    logits that came back (where the release materialises them).
    """

    def __init__(self, model: Any) -> None:
        self.seen: list[Any] = []
        self.calls: list[dict[str, Any]] = []
        self.backbone_calls: list[dict[str, Any]] = []
        self.positions_checked = 0
        self.handles = [model.register_forward_hook(self.hook, with_kwargs=True)]
        # A release may score through the backbone and the LM head itself (trl's chunked
        # log-probs), never calling the causal LM's forward: its boundary is the backbone's.
        backbone = model.get_decoder() if hasattr(model, "get_decoder") else None
        if backbone is not None and backbone is not model:
            self.handles.append(
                backbone.register_forward_hook(self.backbone_hook, with_kwargs=True)
            )

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()

    def backbone_hook(self, module: Any, args: Any, kwargs: Any, output: Any) -> None:
        self.backbone_calls.append(
            {
                "input_ids": kwargs.get("input_ids", args[0] if args else None),
                "attention_mask": kwargs.get("attention_mask"),
            }
        )

    def hook(self, module: Any, args: Any, kwargs: Any, output: Any) -> None:
        logits = getattr(output, "logits", None)
        if logits is None:
            return
        self.seen.append(logits.detach())
        asked = kwargs.get("logits_to_keep", kwargs.get("num_logits_to_keep"))
        self.calls.append(
            {
                "input_ids": kwargs.get("input_ids", args[0] if args else None),
                "attention_mask": kwargs.get("attention_mask"),
                "asked": asked,
                "returned": logits.size(1),
            }
        )

    def check_positions(self) -> None:
        """Each forward asked for its last k positions got exactly k (k = 0 means all)."""
        from helpers.contracts import ContractError, contract_message

        for call in self.calls:
            asked = call["asked"]
            if isinstance(asked, int) and asked > 0:
                if call["returned"] != asked:
                    raise ContractError(
                        contract_message(
                            f"positions of logits returned for logits_to_keep={asked}",
                            call["returned"],
                            asked,
                            0,
                        )
                    )
                self.positions_checked += 1
        self.calls.clear()


class LogpsWatch:
    """Wraps a GRPOTrainer's per-token log-prob method on the instance and checks each call.

    On every call, before the optimizer moves the weights, it recomputes the
    log-probs from a plain forward pass of the same model over the same tokens,
    compares the logits the trainer's forward returned (a release may keep only the
    last positions: ``logits_to_keep``) with the same positions of ours, and checks
    the completion mask the call carried (the end of the attention mask). Where the
    release's signature does not name its arguments, they are read at the model's
    boundary instead (the forward hook), and the record says which signature it found.
    """

    def __init__(self, trainer: Any, eos_token_id: int) -> None:
        from helpers.compat import grpo_logps_method

        self.eos_token_id = eos_token_id
        self.calls = 0
        self.largest_gap = 0.0
        self.logits_gap: float | None = None
        self.generated_tokens = 0
        self.trainer = trainer
        self.name = grpo_logps_method(trainer)
        self.via = "the log-prob method's arguments"
        self.logits = LogitsWatch(trainer.model)
        if self.name is not None:
            self.original = getattr(trainer, self.name)
            setattr(trainer, self.name, self.wrapper)

    def wrapper(self, *args: Any, **kwargs: Any) -> Any:
        import torch
        from helpers.compat import grpo_logps_call, grpo_logps_result, grpo_signature_found

        self.logits.check_positions()
        self.logits.seen.clear()
        self.logits.backbone_calls.clear()
        result = self.original(*args, **kwargs)
        returned = list(self.logits.seen)
        forwards = [c for c in self.logits.calls if c["input_ids"] is not None] or [
            c for c in self.logits.backbone_calls if c["input_ids"] is not None
        ]
        self.logits.check_positions()
        if len(returned) > 1 and len({tuple(t.shape[1:]) for t in returned}) == 1:
            returned = [torch.cat(returned)]  # a release that scores the batch in chunks
        trainer_logps = grpo_logps_result(result)
        call = grpo_logps_call(self.trainer, self.name, args, kwargs)
        if call is None:
            # No signature names the arguments: take them where they met the model.
            self.via = f"the model's boundary ({grpo_signature_found(self.trainer, self.name)})"
            if not forwards:
                raise AssertionError(
                    f"{self.via}: the log-prob method never called the model's forward"
                )
            call = {
                "model": self.trainer.model,
                "input_ids": torch.cat([c["input_ids"] for c in forwards]),
                "attention_mask": torch.cat([c["attention_mask"] for c in forwards]),
                "logits_to_keep": int(trainer_logps.size(1)),
            }
        self.check(call, trainer_logps, returned)
        return result

    def check(self, call: dict[str, Any], trainer_logps: Any, returned_logits: list[Any]) -> None:
        import torch
        from helpers.contracts import check_completion_mask, check_tensors_close, token_log_probs

        keep = call["logits_to_keep"]
        input_ids, attention_mask = call["input_ids"], call["attention_mask"]
        completion_ids, completion_mask = input_ids[:, -keep:], attention_mask[:, -keep:]
        self.generated_tokens = check_completion_mask(
            completion_mask, completion_ids, self.eos_token_id
        )
        with torch.no_grad():
            full = call["model"](input_ids=input_ids, attention_mask=attention_mask).logits
        for logits in returned_logits:
            if logits.size(0) == full.size(0) and logits.size(1) <= full.size(1):
                gap = check_tensors_close(
                    "GRPO logits of prompt + completion",
                    logits,
                    full[:, -logits.size(1) :, :],
                    LOGPS_TOLERANCE,
                )
                self.logits_gap = max(self.logits_gap or 0.0, gap)
        reference = token_log_probs(full[:, -keep - 1 : -1, :], completion_ids)
        # Only generated tokens count: what a release leaves at padding is its own business.
        generated = completion_mask.bool().cpu()
        got = torch.where(generated, trainer_logps.detach().float().cpu(), 0.0)
        want = torch.where(generated, reference.cpu(), 0.0)
        gap = check_tensors_close(
            "GRPO per-token log-prob of the completion", got, want, LOGPS_TOLERANCE
        )
        self.largest_gap = max(self.largest_gap, gap)
        self.calls += 1


@pytest.mark.operation("grpo")
@pytest.mark.requires_packages(trl=">=0.14")  # GRPOTrainer first shipped in trl 0.14.0
@pytest.mark.parametrize("family", ["llama", "mistral"])
def test_grpo_two_steps(
    family: str, tiny_model: Any, tokenizer: Any, tmp_path: Path, record_property: Any
):
    from trl import GRPOTrainer

    run_grpo_two_steps(GRPOTrainer, tiny_model, tokenizer, tmp_path, record_property)


def run_grpo_two_steps(
    trainer_class: type, model: Any, tokenizer: Any, tmp_path: Path, record_property: Any
) -> None:
    """The case: two GRPO steps, the log-prob and mask contracts, weights that move."""
    import torch
    from datasets import Dataset
    from helpers.compat import grpo_config, tokenizer_argument
    from helpers.train import train_and_check

    torch.manual_seed(0)
    trainer = trainer_class(
        model=model,
        reward_funcs=reward_distinct_words,
        args=grpo_config(str(tmp_path)),
        train_dataset=Dataset.from_list([{"prompt": p} for p in PROMPTS * 2]),
        **tokenizer_argument(trainer_class, tokenizer),
    )
    logps = LogpsWatch(trainer, tokenizer.eos_token_id)
    try:
        # Weights move only where rewards differed within a group: checked below.
        trained = train_and_check(trainer, record_property, steps=2, weights_move=False)
        logps.logits.check_positions()
    finally:
        logps.logits.remove()
        # The contract's numbers so far, also when a check failed mid-training.
        record_property("logits_positions_checked", logps.logits.positions_checked)
        if logps.name is None:
            # trl 0.14 computed log-probs in a closure inside compute_loss: only the
            # boundary (positions asked = positions returned) can be checked there.
            record_property(
                "logps_contract", "unverified: computed inside compute_loss in this trl"
            )
        else:
            record_property("logps_contract", f"checked through {logps.via}")
            record_property("logps_calls", logps.calls)
            record_property("logps_max_gap", logps.largest_gap)
            record_property("completion_tokens", logps.generated_tokens)
            gap = logps.logits_gap
            record_property(
                "logits_max_gap", gap if gap is not None else "not returned by the model"
            )

    rewards = [float(e["reward"]) for e in trained.logs if "reward" in e]
    spread = [float(e.get("reward_std", 0.0)) for e in trained.logs]
    record_property("reward", rewards[-1] if rewards else float("nan"))
    if logps.name is not None:
        assert logps.calls, f"the trainer never called {logps.name}"
    assert rewards and all(math.isfinite(r) for r in rewards), trained.logs
    if any(s > 0 for s in spread):
        # Rewards that differ within a group give non-zero advantages: weights must move.
        assert trained.moved, "rewards differed but no weight changed"


# Inputs of the trainer's loss that the update reference needs (trl >= 0.15 scores the
# rollouts before compute_loss; trl 0.14 generated inside it).
ROLLOUT_KEYS = ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "advantages")


def reward_text_checksum(completions: list[Any], **_: Any) -> list[float]:
    """A reward that differs between any two different completions, so that advantages
    are non-zero and the update contract has a gradient to check."""
    texts = [c if isinstance(c, str) else " ".join(m["content"] for m in c) for c in completions]
    return [sum(map(ord, text)) % 101 / 10.0 for text in texts]


@pytest.mark.operation("grpo")
@pytest.mark.requires_packages(trl=">=0.14")
@pytest.mark.parametrize(
    ("loss_type", "batch", "accumulation"),
    [("grpo", 4, 1), ("grpo", 2, 2), ("dapo", 2, 2)],
    ids=["grpo-accumulation-1", "grpo-accumulation-2", "dapo-accumulation-2"],
)
def test_grpo_exact_update(
    loss_type: str,
    batch: int,
    accumulation: int,
    tiny_model: Any,
    tokenizer: Any,
    tmp_path: Path,
    record_property: Any,
) -> None:
    from trl import GRPOTrainer

    run_grpo_exact_update(
        GRPOTrainer,
        tiny_model,
        tokenizer,
        tmp_path,
        record_property,
        loss_type=loss_type,
        batch=batch,
        accumulation=accumulation,
    )


def run_grpo_exact_update(
    trainer_class: type,
    model: Any,
    tokenizer: Any,
    tmp_path: Path,
    record_property: Any,
    *,
    loss_type: str,
    batch: int,
    accumulation: int,
) -> None:
    """The case: one SGD step of GRPO (``batch`` completions x ``accumulation`` micro-batches,
    two generations per prompt) against minus the gradient of the reference loss."""
    import torch
    from datasets import Dataset
    from helpers.compat import grpo_config, grpo_loss_types, tokenizer_argument
    from helpers.contracts import check_close, contracts
    from helpers.update import check_step, expected_after_grpo_step, sgd_step_values

    from ftmatrix.cell.api import not_applicable

    offered = grpo_loss_types()
    if loss_type not in offered:
        not_applicable(f"this trl's GRPOConfig offers loss_type {', '.join(offered)}")
    completion_length = 8
    torch.manual_seed(0)
    trainer = trainer_class(
        model=model,
        reward_funcs=reward_text_checksum,
        args=grpo_config(
            str(tmp_path),
            **sgd_step_values(batch=batch, accumulation=accumulation),
            loss_type=loss_type,
            max_completion_length=completion_length,
            num_iterations=1,
        ),
        train_dataset=Dataset.from_list([{"prompt": p} for p in PROMPTS]),
        **tokenizer_argument(trainer_class, tokenizer),
    )
    trained = trainer.model.named_parameters()
    initial = {name: w.detach().clone() for name, w in trained if w.requires_grad}
    micro_batches: list[dict[str, Any]] = []
    compute_loss = trainer.compute_loss

    def watched(model: Any, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        if all(key in inputs for key in ROLLOUT_KEYS):
            micro_batches.append({key: inputs[key].detach().clone() for key in ROLLOUT_KEYS})
        return compute_loss(model, inputs, *args, **kwargs)

    trainer.compute_loss = watched
    trainer.train()
    label = f"{loss_type}, batch {batch} x {accumulation}"
    with contracts(record_property) as check:
        if not micro_batches:
            # trl 0.14 generated and scored inside compute_loss: its rollouts never reach
            # the loss as tokens, so there is no step to recompute.
            record_property("update_contract", "unverified: this trl generates inside compute_loss")
            check.unverified("exact_update", "this trl generates inside compute_loss")
            return
        check.check(
            "micro_batches",
            check_close,
            f"micro-batches in one step ({label})",
            len(micro_batches),
            accumulation,
            0,
        )
        if not any(bool(b["advantages"].abs().sum() > 0) for b in micro_batches):
            raise AssertionError(
                f"every advantage was zero ({label}): the step had nothing to check"
            )
        expected = expected_after_grpo_step(
            trainer.model,
            initial,
            micro_batches,
            loss_type=loss_type,
            max_completion_length=completion_length,
        )
        check_step(trainer, check, initial, expected, label=label, step_name="SGD step of GRPO")
        record_property("update_contract", f"checked over {len(micro_batches)} micro-batches")
