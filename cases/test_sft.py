"""SFT: trl's SFTTrainer, two optimizer steps on a tiny random Llama."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from _tiny import FAMILIES


def next_token_loss(model: Any, batch: Any) -> float:
    """Mean cross-entropy of each next token, over the positions the labels keep."""
    import torch

    labels = batch["labels"] if "labels" in batch else batch["input_ids"]
    kwargs = {"attention_mask": batch["attention_mask"]} if "attention_mask" in batch else {}
    logits = model(input_ids=batch["input_ids"], **kwargs).logits
    shifted_logits = logits[:, :-1, :].reshape(-1, logits.size(-1))
    shifted_labels = labels[:, 1:].reshape(-1)
    return float(
        torch.nn.functional.cross_entropy(shifted_logits, shifted_labels, ignore_index=-100)
    )


VARIANTS = {
    "plain": {},
    "packing": {"packing": True},
    "grad-checkpointing": {"gradient_checkpointing": True},
}


@pytest.mark.operation("sft")
@pytest.mark.requires_packages(trl=">=0.9")
@pytest.mark.parametrize(
    ("variant", "family"),
    [("plain", f) for f in FAMILIES] + [(v, "llama") for v in sorted(VARIANTS) if v != "plain"],
)
def test_sft_two_steps(
    variant: str, family: str, tiny_model: Any, tokenizer: Any, tmp_path: Path, record_property: Any
):
    import torch
    from _compat import sft_config, tokenizer_argument
    from _tiny import CORPUS
    from datasets import Dataset
    from trl import SFTTrainer

    dataset = Dataset.from_list([{"text": line} for line in CORPUS * 4])
    before = {n: p.detach().clone() for n, p in tiny_model.named_parameters()}
    trainer = SFTTrainer(
        model=tiny_model,
        args=sft_config(str(tmp_path), max_length=32, max_steps=2, **VARIANTS[variant]),
        train_dataset=dataset,
        **tokenizer_argument(SFTTrainer, tokenizer),
    )
    if variant == "plain":
        # Silent breakage: the loss the trainer computes on a batch must be the plain
        # next-token cross-entropy we compute ourselves from the same model's logits.
        # (Packed batches attend within each packed sequence only: no simple reference.)
        batch = next(iter(trainer.get_train_dataloader()))
        trainer.model.eval()
        with torch.no_grad():
            trainer_loss = float(trainer.compute_loss(trainer.model, dict(batch)))
            reference_loss = next_token_loss(trainer.model, batch)
        trainer.model.train()
        record_property("reference_loss", reference_loss)
        assert abs(trainer_loss - reference_loss) < 1e-4, (trainer_loss, reference_loss)

    result = trainer.train()

    losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
    record_property("loss", float(result.training_loss))
    record_property("steps", trainer.state.global_step)
    assert trainer.state.global_step == 2
    assert len(losses) == 2 and all(math.isfinite(float(x)) for x in losses), losses
    changed = [
        n for n, p in trainer.model.named_parameters() if not torch.equal(before[n], p.detach())
    ]
    assert changed, "no weight changed after two optimizer steps"
