"""SFT: trl's SFTTrainer, two optimizer steps on a tiny random Llama.

Contracts: the trainer's loss on a batch equals our own next-token cross-entropy
(plain); one plain SGD step moves the weights by exactly minus the gradient of the mean
token cross-entropy over the whole accumulated batch (accumulation 1 and 2); and the
labels of a batch are -100 exactly where padding or a prompt is (every variant; with
packing, the first token of a packed sequence may be either).

The mask over the knobs users turn (``test_sft_mask``, ``SFT_MASK_KNOBS`` pairwise: the
data's format, ``completion_only_loss``, ``packing``, ``padding_free``): every batch row's
labels learn exactly each completion or assistant turn, found in the data's own text, and
every completion of the step is learned (``mask``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers.compat import family_param
from helpers.knobs import Knob, knob_params
from helpers.tiny import FAMILIES

# (prompt, completion) rows for the completion-only variant. Each prompt ends with the
# response template older trl's collator looks for ("assistant:"), and no prompt is
# part of another, so each batch row shows which prompt it holds.
PROMPT_COMPLETIONS = [
    ("user: what is two plus two ? assistant:", " the answer is four"),
    ("user: hello world assistant:", " good morning and good night"),
    ("user: one two three assistant:", " four five six seven"),
    ("user: the quick brown fox assistant:", " jumps over the lazy dog"),
]


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


def check_batch_labels(batch: Any, tokenizer: Any, prompts: list[str]) -> dict[str, int]:
    """Each row's labels are its tokens, with -100 exactly on padding and on its prompt.

    Returns the metrics: positions checked and positions ignored.
    """
    from helpers.contracts import check_labels, expected_labels, find_prefix

    prompt_ids = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
    input_ids = batch["input_ids"].tolist()
    labels = (batch["labels"] if "labels" in batch else batch["input_ids"]).tolist()
    positions = batch["position_ids"].tolist() if "position_ids" in batch else None
    checked = ignored = 0
    for row, (ids, row_labels) in enumerate(zip(input_ids, labels, strict=True)):
        held = [p for p in prompt_ids if any(find_prefix(ids, p, i) for i in range(len(ids)))]
        # A row that holds none of the prompts fails, naming the row and the first prompt.
        expected = expected_labels(
            ids, pad_token_id=tokenizer.pad_token_id, prompts=held[:1] or prompt_ids[:1]
        )
        starts = [i for i, p in enumerate(positions[row]) if p == 0] if positions else []
        ignored += check_labels(
            f"labels of batch row {row}", row_labels, expected, may_ignore=starts
        )
        checked += len(ids)
    return {"label_positions": checked, "label_positions_ignored": ignored}


VARIANTS = {
    "plain": {},
    "packing": {"packing": True},
    "grad-checkpointing": {"gradient_checkpointing": True},
    "completion-only": {},
}


@pytest.mark.operation("sft")
@pytest.mark.requires_packages(trl=">=0.7")  # before SFTConfig (0.9): TrainingArguments + keywords
@pytest.mark.parametrize(
    ("variant", "family"),
    [family_param(f, "plain", f) for f in FAMILIES]
    + [(v, "llama") for v in sorted(VARIANTS) if v != "plain"],
)
def test_sft_two_steps(
    variant: str, family: str, tiny_model: Any, tokenizer: Any, tmp_path: Path, record_property: Any
):
    from trl import SFTTrainer

    run_sft_two_steps(SFTTrainer, variant, tiny_model, tokenizer, tmp_path, record_property)


@pytest.mark.operation("sft")
@pytest.mark.requires_packages(trl=">=0.7")
@pytest.mark.parametrize(
    ("batch", "accumulation"), [(4, 1), (2, 2)], ids=["accumulation-1", "accumulation-2"]
)
def test_sft_exact_update(
    batch: int,
    accumulation: int,
    tiny_model: Any,
    tokenizer: Any,
    tmp_path: Path,
    record_property: Any,
) -> None:
    from trl import SFTTrainer

    run_sft_exact_update(
        SFTTrainer, batch, accumulation, tiny_model, tokenizer, tmp_path, record_property
    )


def run_sft_exact_update(
    trainer_class: type,
    batch: int,
    accumulation: int,
    model: Any,
    tokenizer: Any,
    tmp_path: Path,
    record_property: Any,
) -> None:
    """The update contract: one plain SGD step over rows of different lengths, as one
    batch or as micro-batches, moves the weights by minus the reference gradient."""
    from datasets import Dataset
    from helpers.compat import sft_arguments, tokenizer_argument
    from helpers.update import UPDATE_ROWS, check_exact_update, sgd_step_values

    trainer = trainer_class(
        model=model,
        train_dataset=Dataset.from_list([{"text": row} for row in UPDATE_ROWS]),
        **sft_arguments(
            str(tmp_path), max_length=32, **sgd_step_values(batch=batch, accumulation=accumulation)
        ),
        **tokenizer_argument(trainer_class, tokenizer),
    )
    check_exact_update(trainer, record_property, label=f"batch {batch} x {accumulation}")


def run_sft_two_steps(
    trainer_class: type,
    variant: str,
    model: Any,
    tokenizer: Any,
    tmp_path: Path,
    record_property: Any,
) -> None:
    """The case: the label contract, the loss contract (plain), two steps that move weights."""
    import torch
    from datasets import Dataset
    from helpers.compat import completion_only_sft, sft_arguments, tokenizer_argument
    from helpers.tiny import CORPUS
    from helpers.train import train_and_check

    rows: list[dict[str, str]] = [{"text": line} for line in CORPUS * 4]
    settings: dict[str, Any] = dict(VARIANTS[variant])
    extra: dict[str, Any] = {}
    prompts: list[str] = []
    if variant == "completion-only":
        rows, settings, extra = completion_only_sft(tokenizer, PROMPT_COMPLETIONS * 2)
        prompts = [p for p, _ in PROMPT_COMPLETIONS]
    trainer = trainer_class(
        model=model,
        train_dataset=Dataset.from_list(rows),
        **sft_arguments(str(tmp_path), max_length=32, max_steps=2, **settings),
        **extra,
        **tokenizer_argument(trainer_class, tokenizer),
    )
    batch = next(iter(trainer.get_train_dataloader()))
    # Silent breakage: a prompt trained on, padding learned, a label shift.
    for name, value in check_batch_labels(batch, tokenizer, prompts).items():
        record_property(name, value)
    if variant == "plain":
        # Silent breakage: the loss the trainer computes on a batch must be the plain
        # next-token cross-entropy we compute ourselves from the same model's logits.
        # (Packed batches attend within each packed sequence only: no simple reference.)
        trainer.model.eval()
        with torch.no_grad():
            trainer_loss = float(trainer.compute_loss(trainer.model, dict(batch)))
            reference_loss = next_token_loss(trainer.model, batch)
        trainer.model.train()
        record_property("trainer_loss", trainer_loss)
        record_property("reference_loss", reference_loss)
        from helpers.contracts import check_close

        check_close("SFT loss on the first batch", trainer_loss, reference_loss, 1e-4)

    train_and_check(trainer, record_property, steps=2, loss="mean")


# The mask contract over the knobs users turn. Each row: a question and its answer, given
# to the trainer as prompt-completion text, as a conversational prompt-completion, or as
# messages trained on the assistant turns only (assistant_only_loss, trl 0.19+), with a
# chat template that marks them ({% generation %}).
QUESTION_ANSWERS = [
    ("what is two plus two ?", "the answer is four"),
    ("hello world", "good morning and good night"),
    ("one two three", "four five six seven"),
    ("the quick brown fox", "jumps over the lazy dog"),
]
GENERATION_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{{ message['role'] }}: "
    "{% if message['role'] == 'assistant' %}{% generation %}{{ message['content'] }} "
    "{{ eos_token }}{% endgeneration %}{% else %}{{ message['content'] }} {{ eos_token }}"
    "{% endif %} {% endfor %}{% if add_generation_prompt %}assistant: {% endif %}"
)
SFT_MASK_KNOBS = (
    Knob("data", ("prompt-completion", "conversational", "assistant-turns")),
    Knob("completion_only_loss", (None, False), package="trl", exists=">=0.17.0"),
    Knob("packing", (False, True)),
    Knob("padding_free", (False, True), package="trl", exists=">=0.16.0"),
)


def mask_rows(data: str) -> list[dict[str, Any]]:
    """The dataset rows of ``data``'s format."""
    if data == "prompt-completion":
        return [
            {"prompt": f"user: {q} assistant:", "completion": f" {a}"} for q, a in QUESTION_ANSWERS
        ]
    if data == "conversational":
        return [
            {
                "prompt": [{"role": "user", "content": q}],
                "completion": [{"role": "assistant", "content": a}],
            }
            for q, a in QUESTION_ANSWERS
        ]
    return [
        {"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}]}
        for q, a in QUESTION_ANSWERS
    ]


def trained_parts(data: str, completion_only: bool, tokenizer: Any) -> list[list[int]]:
    """The token runs the loss must learn, from the data's own boundary: each completion
    (or assistant turn) with the end-of-sequence that closes it; none where the whole
    sequence is learned (prompt-completion data with completion_only_loss=False)."""
    if data != "assistant-turns" and not completion_only:
        return []
    return [
        tokenizer(f" {a}", add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        for _, a in QUESTION_ANSWERS
    ]


def expected_mask_labels(
    ids: list[int], parts: list[list[int]], pad_token_id: int
) -> tuple[list[int], int]:
    """(the labels of one batch row, how many of ``parts`` it holds).

    Without parts every token but padding is learned. With parts (each ends with the
    end-of-sequence, so none is found inside a prompt) only their tokens are, wherever
    they occur: a row may hold several packed or flattened sequences.
    """
    from helpers.contracts import IGNORE, find_prefix

    if not parts:
        return [IGNORE if token == pad_token_id else token for token in ids], 0
    labels, found, position = [IGNORE] * len(ids), 0, 0
    while position < len(ids):
        part = next((p for p in parts if find_prefix(ids, p, position)), None)
        if part is None:
            position += 1
            continue
        labels[position : position + len(part)] = part
        found += 1
        position += len(part)
    return labels, found


def sequence_starts(batch: Any, row: int, eos_token_id: int) -> list[int]:
    """Where each sequence packed or flattened into ``row`` starts: position 0 of its
    position ids where the batch has them, else after each end-of-sequence."""
    ids = batch["input_ids"][row].tolist()
    if "position_ids" in batch:
        return [i for i, p in enumerate(batch["position_ids"][row].tolist()) if p == 0]
    return [0] + [i + 1 for i, token in enumerate(ids[:-1]) if token == eos_token_id]


def check_sft_mask(batch: Any, parts: list[list[int]], tokenizer: Any, setting_id: str) -> int:
    """Every row of the batch is labelled as the data's boundaries say (the first token
    of a packed sequence may be either); returns how many completions the rows hold.
    ``setting_id`` (the knobs' values) is in the message: which knob broke the mask is
    what tells one upstream break from another."""
    from helpers.contracts import check_labels

    input_ids = batch["input_ids"].tolist()
    labels = (batch["labels"] if "labels" in batch else batch["input_ids"]).tolist()
    held = 0
    for row, (ids, row_labels) in enumerate(zip(input_ids, labels, strict=True)):
        expected, found = expected_mask_labels(ids, parts, tokenizer.pad_token_id)
        held += found
        check_labels(
            f"labels of batch row {row} ({setting_id})",
            row_labels,
            expected,
            may_ignore=sequence_starts(batch, row, tokenizer.eos_token_id),
        )
    return held


@pytest.mark.operation("sft")
@pytest.mark.requires_packages(trl=">=0.17")  # prompt-completion data and completion_only_loss
@pytest.mark.parametrize("setting", knob_params(SFT_MASK_KNOBS))
def test_sft_mask(
    setting: Any, tiny_model: Any, tokenizer: Any, tmp_path: Path, record_property: Any
) -> None:
    from trl import SFTTrainer

    run_sft_mask(SFTTrainer, setting, tiny_model, tokenizer, tmp_path, record_property)


def run_sft_mask(
    trainer_class: type,
    setting: Any,
    model: Any,
    tokenizer: Any,
    tmp_path: Path,
    record_property: Any,
) -> None:
    """The mask contract: the labels of every batch are -100 exactly where the data's own
    boundary says (the prompt, the turns not the assistant's, padding), however the
    batch was packed or flattened."""
    from datasets import Dataset
    from helpers.compat import sft_arguments, tokenizer_argument
    from helpers.contracts import check_close, contracts
    from helpers.tiny import build_tokenizer

    setting.require()
    data = setting["data"]
    settings: dict[str, Any] = {
        "packing": setting["packing"],
        "per_device_train_batch_size": len(QUESTION_ANSWERS),
        "max_steps": 1,
    }
    if setting["padding_free"]:
        settings["padding_free"] = True
    if setting["completion_only_loss"] is not None:
        settings["completion_only_loss"] = setting["completion_only_loss"]
    if data == "assistant-turns":
        from helpers.compat import sft_config_fields

        if "assistant_only_loss" not in sft_config_fields():
            from ftmatrix.cell.api import not_applicable

            not_applicable("this trl has no assistant_only_loss (trl 0.19+)")
        settings["assistant_only_loss"] = True
        tokenizer = build_tokenizer()
        tokenizer.chat_template = GENERATION_TEMPLATE
    # completion_only_loss=None: completion-only wherever the data has a prompt (trl's docs).
    completion_only = setting["completion_only_loss"] is not False
    # Padding-free without packing truncates nothing: trl 1.x asks for no max_length then
    # (the rows are far shorter than any limit).
    unpacked_padding_free = setting["padding_free"] and not setting["packing"]
    trainer = trainer_class(
        model=model,
        train_dataset=Dataset.from_list(mask_rows(data)),
        **sft_arguments(
            str(tmp_path), max_length=None if unpacked_padding_free else 64, **settings
        ),
        **tokenizer_argument(trainer_class, tokenizer),
    )
    parts = trained_parts(data, completion_only, tokenizer)
    with contracts(record_property) as check:
        held = sum(
            check.check("mask", check_sft_mask, batch, parts, tokenizer, setting.id) or 0
            for batch in trainer.get_train_dataloader()
        )
        if parts:
            # Every completion of the step's rows is learned, none dropped or cut.
            check.check(
                "mask",
                check_close,
                f"completions learned in the step ({setting.id})",
                held,
                len(parts),
                0,
            )
