"""Each numeric contract against a deliberately wrong trainer (it must fail) and the real one.

Written against the default matrix's releases (trl 1.16, transformers 5, peft 0.18):
the wrong trainers override what those releases compute.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest


def grpo_shifted_logps() -> type:
    """GRPOTrainer whose per-token log-probs are one position late."""
    import torch
    from trl import GRPOTrainer

    class ShiftedLogps(GRPOTrainer):  # type: ignore[misc]
        def _get_per_token_logps_and_entropies(self, *args: Any, **kwargs: Any) -> Any:
            logps, *rest = super()._get_per_token_logps_and_entropies(*args, **kwargs)
            return (torch.roll(logps, shifts=1, dims=1), *rest)

    return ShiftedLogps


def grpo_mask_without_first_token() -> type:
    """GRPOTrainer whose completion mask leaves out the first generated token."""
    from trl import GRPOTrainer

    class MaskDropsFirstToken(GRPOTrainer):  # type: ignore[misc]
        def _generate_and_score_completions(self, *args: Any, **kwargs: Any) -> Any:
            output = super()._generate_and_score_completions(*args, **kwargs)
            mask = output["completion_mask"].clone()
            mask[:, 0] = 0
            output["completion_mask"] = mask
            return output

    return MaskDropsFirstToken


def dpo_shifted_mask() -> type:
    """DPOTrainer that scores each completion one token late (its mask moved right by one)."""
    import torch
    from trl import DPOTrainer

    class ShiftedMask(DPOTrainer):  # type: ignore[misc]
        def _compute_loss(self, model: Any, inputs: Any, return_outputs: Any) -> Any:
            moved = torch.roll(inputs["completion_mask"], shifts=1, dims=1)
            return super()._compute_loss(
                model, {**inputs, "completion_mask": moved}, return_outputs
            )

    return ShiftedMask


def sft_prompt_trained_on() -> type:
    """SFTTrainer whose batches keep the prompt in the labels (completion-only lost)."""
    from trl import SFTTrainer

    class PromptInLabels(SFTTrainer):  # type: ignore[misc]
        def get_train_dataloader(self) -> Any:
            for batch in super().get_train_dataloader():
                batch["labels"] = batch["input_ids"].clone()
                yield batch

    return PromptInLabels


def lora_nonzero_b(model: Any, *, fresh: bool = False) -> Any:
    """A 'fresh' adapter whose B is not zero: it changes the logits before any training."""
    import torch
    from test_lora import lora_model

    adapted = lora_model(model, fresh=fresh)
    with torch.no_grad():
        for name, parameter in adapted.named_parameters():
            if "lora_B" in name:
                parameter.fill_(0.05)
    return adapted


def ignoring_logits_to_keep(model: Any) -> Any:
    """The model, its forward ignoring what the caller asks of ``logits_to_keep``."""
    forward = model.forward

    def every_position(*args: Any, **kwargs: Any) -> Any:
        kwargs.pop("logits_to_keep", None)
        kwargs.pop("num_logits_to_keep", None)
        return forward(*args, **kwargs)

    model.forward = every_position
    return model


@pytest.mark.operation("grpo")
@pytest.mark.parametrize(
    "broken",
    ["real", "shifted-logps", "mask-drops-first-token", "ignores-logits-to-keep", "unnamed"],
)
def test_grpo_contract(
    broken: str,
    tiny_model: Any,
    tokenizer: Any,
    tmp_path: Path,
    record_property: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from helpers import compat
    from test_grpo import run_grpo_two_steps
    from trl import GRPOTrainer

    if broken == "unnamed":
        # A release none of whose signatures names the log-prob arguments (as trl 1.14's
        # `(self, model, *args, ...)` once did): the case reads them at the model's boundary.
        monkeypatch.setattr(compat, "LOGPS_ARGUMENTS", (*compat.LOGPS_ARGUMENTS, "unnamed"))
    trainer_class = {
        "real": lambda: GRPOTrainer,
        "ignores-logits-to-keep": lambda: GRPOTrainer,
        "shifted-logps": grpo_shifted_logps,
        "mask-drops-first-token": grpo_mask_without_first_token,
        "unnamed": lambda: GRPOTrainer,
    }[broken]()
    model = (
        ignoring_logits_to_keep(tiny_model) if broken == "ignores-logits-to-keep" else tiny_model
    )
    run_grpo_two_steps(trainer_class, model, tokenizer, tmp_path, record_property)


@pytest.mark.operation("dpo")
@pytest.mark.parametrize("broken", ["real", "shifted-mask"])
def test_dpo_contract(
    broken: str, tiny_model: Any, tokenizer: Any, tmp_path: Path, record_property: Any
) -> None:
    from test_dpo import run_dpo_two_steps
    from trl import DPOTrainer

    trainer_class = DPOTrainer if broken == "real" else dpo_shifted_mask()
    run_dpo_two_steps(trainer_class, tiny_model, tokenizer, tmp_path, record_property)


@pytest.mark.operation("sft")
@pytest.mark.parametrize("broken", ["real", "prompt-in-labels"])
def test_sft_completion_only_contract(
    broken: str, tiny_model: Any, tokenizer: Any, tmp_path: Path, record_property: Any
) -> None:
    from test_sft import run_sft_two_steps
    from trl import SFTTrainer

    trainer_class = SFTTrainer if broken == "real" else sft_prompt_trained_on()
    run_sft_two_steps(
        trainer_class, "completion-only", tiny_model, tokenizer, tmp_path, record_property
    )


@pytest.mark.operation("lora")
@pytest.mark.parametrize("broken", ["real", "nonzero-b"])
def test_lora_fresh_adapter_contract(
    broken: str, tiny_model: Any, tokenizer: Any, record_property: Any
) -> None:
    from test_lora import lora_model, run_fresh_adapter

    make = lora_model if broken == "real" else lora_nonzero_b
    run_fresh_adapter(make, tiny_model, tokenizer, record_property)


def trainer_loss_over_accumulation() -> type:
    """Trainer that divides its loss by the accumulation steps once more (normalised twice)."""
    from transformers import Trainer

    class LossOverAccumulation(Trainer):  # type: ignore[misc]
        def compute_loss(self, model: Any, inputs: Any, *args: Any, **kwargs: Any) -> Any:
            loss = super().compute_loss(model, inputs, *args, **kwargs)
            return loss / self.args.gradient_accumulation_steps

    return LossOverAccumulation


def trainer_drops_a_micro_batch() -> type:
    """Trainer that skips the backward pass of every second micro-batch."""
    import torch
    from transformers import Trainer

    class DropsMicroBatch(Trainer):  # type: ignore[misc]
        calls = 0

        def training_step(self, model: Any, inputs: Any, *args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            if self.calls % 2 == 0:
                return torch.tensor(0.0)
            return super().training_step(model, inputs, *args, **kwargs)

    return DropsMicroBatch


def trainer_resume_restarts_scheduler() -> type:
    """Trainer whose resume loads the optimizer but starts its learning-rate schedule anew."""
    from transformers import Trainer

    class SchedulerRestarts(Trainer):  # type: ignore[misc]
        def _load_optimizer_and_scheduler(self, checkpoint: Any) -> None:
            super()._load_optimizer_and_scheduler(checkpoint)
            if checkpoint is not None:
                self.lr_scheduler = None
                self.create_scheduler(self.args.max_steps, optimizer=self.optimizer)

    return SchedulerRestarts


@pytest.mark.operation("train")
@pytest.mark.parametrize("broken", ["real", "loss-over-accumulation", "drops-a-micro-batch"])
def test_update_contract(
    broken: str, tiny_model: Any, tokenizer: Any, tmp_path: Path, record_property: Any
) -> None:
    from test_train import run_train_exact_update

    trainer_class = {
        "real": lambda: None,
        "loss-over-accumulation": trainer_loss_over_accumulation,
        "drops-a-micro-batch": trainer_drops_a_micro_batch,
    }[broken]()
    run_train_exact_update(trainer_class, 2, 2, tiny_model, tokenizer, tmp_path, record_property)


@pytest.mark.operation("train")
@pytest.mark.parametrize("broken", ["real", "scheduler-restarts"])
def test_resume_contract(
    broken: str, tiny_model_dir: Path, tokenizer: Any, tmp_path: Path, record_property: Any
) -> None:
    from test_train import run_train_resume

    trainer_class = None if broken == "real" else trainer_resume_restarts_scheduler()
    run_train_resume(trainer_class, tiny_model_dir, tokenizer, tmp_path, record_property)


def load_returning_the_base(adapter_dir: Path, base_dir: Path) -> Any:
    """A loading path that silently drops the adapter: the base model comes back."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(base_dir)


@pytest.mark.operation("lora")
@pytest.mark.parametrize("broken", ["real", "returns-base"])
def test_adapter_path_contract(
    broken: str,
    tiny_model: Any,
    tokenizer: Any,
    tmp_path: Path,
    tiny_model_dir: Path,
    record_property: Any,
) -> None:
    from test_lora import load_with_peft, run_adapter_path

    load = load_with_peft if broken == "real" else load_returning_the_base
    run_adapter_path(load, tiny_model, tokenizer, tmp_path, tiny_model_dir, record_property)


@pytest.mark.operation("qlora")
@pytest.mark.parametrize("broken", ["real", "loads-float"])
def test_qlora_contract(broken: str, tmp_path: Path, tokenizer: Any, record_property: Any) -> None:
    """A release that ignores the quantization config: the float model trains as if QLoRA."""
    from test_qlora import quantization, run_qlora, save_quantizable_model

    asked = quantization if broken == "real" else (lambda kind: None)
    model_dir = save_quantizable_model(tmp_path, tokenizer)
    run_qlora("nf4", model_dir, tokenizer, record_property, asked)


def dpo_accumulation_unscaled() -> type:
    """DPOTrainer whose loss under accumulation is not divided by the steps (transformers
    4.46+ with trl < 0.14 did this): each step moves the weights k times too far."""
    from trl import DPOTrainer

    class Unscaled(DPOTrainer):  # type: ignore[misc]
        def compute_loss(self, *args: Any, **kwargs: Any) -> Any:
            loss = super().compute_loss(*args, **kwargs)
            steps = self.args.gradient_accumulation_steps
            if isinstance(loss, tuple):
                return (loss[0] * steps, *loss[1:])
            return loss * steps

    return Unscaled


@pytest.mark.operation("dpo")
@pytest.mark.parametrize("broken", ["real", "accumulation-unscaled"])
def test_dpo_update_contract(
    broken: str, tiny_model: Any, tokenizer: Any, tmp_path: Path, record_property: Any
) -> None:
    from test_dpo import run_dpo_exact_update
    from trl import DPOTrainer

    trainer_class = DPOTrainer if broken == "real" else dpo_accumulation_unscaled()
    run_dpo_exact_update(trainer_class, tiny_model, tokenizer, tmp_path, record_property, 2, 2)


def grpo_wrong_step(broken: str) -> type:
    """GRPOTrainer whose step is wrong while its per-micro-batch loss looks right:
    ``normalised-twice`` divides by the accumulation steps once more; ``drops-a-micro-batch``
    gives every micro-batch after the first no gradient."""
    from trl import GRPOTrainer

    class WrongStep(GRPOTrainer):  # type: ignore[misc]
        seen = 0

        def compute_loss(self, model: Any, inputs: Any, *args: Any, **kwargs: Any) -> Any:
            loss = super().compute_loss(model, inputs, *args, **kwargs)
            self.seen += 1
            if broken == "normalised-twice":
                return loss / self.args.gradient_accumulation_steps
            return loss if self.seen == 1 else loss * 0

    return WrongStep


@pytest.mark.operation("grpo")
@pytest.mark.parametrize("broken", ["real", "normalised-twice", "drops-a-micro-batch"])
def test_grpo_update_contract(
    broken: str, tiny_model: Any, tokenizer: Any, tmp_path: Path, record_property: Any
) -> None:
    from test_grpo import run_grpo_exact_update
    from trl import GRPOTrainer

    trainer_class = GRPOTrainer if broken == "real" else grpo_wrong_step(broken)
    run_grpo_exact_update(
        trainer_class,
        tiny_model,
        tokenizer,
        tmp_path,
        record_property,
        loss_type="grpo" if broken != "drops-a-micro-batch" else "dapo",
        batch=2,
        accumulation=2,
    )


def adapter_setting(saved: str | None, path: str, tied: bool, lora_on_embeddings: bool) -> Any:
    """One setting of the adapter knob table (cases/helpers/adapters.py)."""
    from helpers.adapters import ADAPTER_KNOBS
    from helpers.knobs import Setting

    names = [knob.name for knob in ADAPTER_KNOBS]
    values = (saved, path, tied, lora_on_embeddings)
    return Setting(ADAPTER_KNOBS, tuple(zip(names, values, strict=True)))


def load_dropping_modules_to_save(adapter_dir: Path, base_dir: Path, auto_class: Any) -> Any:
    """peft's loader, then the saved copies (``modules_to_save``) put back to the base's
    weights: LoRA comes back, the trained head does not."""
    import torch
    from helpers.adapters import load_with_peft

    model = load_with_peft(adapter_dir, base_dir, auto_class)
    with torch.no_grad():
        for module in model.modules():
            if hasattr(module, "original_module") and hasattr(module, "modules_to_save"):
                for copy in module.modules_to_save.values():
                    copy.load_state_dict(module.original_module.state_dict())
    return model


def merge_untying_the_head(model: Any) -> Any:
    """peft's merge, then the head given a tensor of its own (same values) while the
    configuration still ties it to the embeddings."""
    import torch

    merged = model.merge_and_unload()
    head = merged.get_output_embeddings()
    head.weight = torch.nn.Parameter(head.weight.detach().clone())
    return merged


@pytest.mark.operation("lora")
@pytest.mark.parametrize(
    "broken", ["real", "real-merge", "drops-modules-to-save", "merge-unties", "merge-drops-lora"]
)
def test_adapter_roundtrip_contract(
    broken: str, tokenizer: Any, tmp_path: Path, record_property: Any
) -> None:
    from helpers.adapters import LOADERS, adapter_shape, run_adapter_roundtrip, save_base

    setting = {
        "real": adapter_setting("lm_head", "peft", False, False),
        "drops-modules-to-save": adapter_setting("lm_head", "peft", False, False),
        "real-merge": adapter_setting(None, "merge_save_reload", True, False),
        "merge-unties": adapter_setting(None, "merge_save_reload", True, False),
        "merge-drops-lora": adapter_setting(None, "merge_save_reload", True, False),
    }[broken]
    merge = {"merge-unties": merge_untying_the_head, "merge-drops-lora": lambda m: m.unload()}
    base_dir = save_base(tmp_path / "base", tokenizer, adapter_shape(setting))
    run_adapter_roundtrip(
        setting,
        tokenizer,
        tmp_path,
        base_dir,
        record_property,
        loaders={**LOADERS, "peft": load_dropping_modules_to_save}
        if broken == "drops-modules-to-save"
        else None,
        merge=merge.get(broken),
    )


def checkpointing_without_input_grads(model: Any, kwargs: dict[str, Any]) -> None:
    """Gradient checkpointing enabled as transformers before 5.0 did on an adapted model:
    no hook makes the embeddings' output require a gradient."""
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    model.get_base_model().disable_input_require_grads()


@pytest.mark.operation("lora")
@pytest.mark.parametrize("broken", ["real", "no-input-grads"])
def test_checkpointing_gradient_contract(
    broken: str, tokenizer: Any, tmp_path: Path, record_property: Any
) -> None:
    from helpers.adapters import (
        CHECKPOINTING_KNOBS,
        AdapterShape,
        run_checkpointing_gradient,
        save_base,
    )
    from helpers.knobs import Setting

    names = [knob.name for knob in CHECKPOINTING_KNOBS]
    setting = Setting(
        CHECKPOINTING_KNOBS,
        tuple(zip(names, (True, "after_adapter", "lm_head"), strict=True)),
    )
    base_dir = save_base(tmp_path / "base", tokenizer, AdapterShape("causal", False, (), ()))
    run_checkpointing_gradient(
        setting,
        tokenizer,
        base_dir,
        record_property,
        enable=checkpointing_without_input_grads if broken == "no-input-grads" else None,
    )


def knob_setting(knobs: Any, **values: Any) -> Any:
    """The setting of ``knobs`` (a case's knob table) at ``values``, every other knob off."""
    from helpers.knobs import Setting

    return Setting(tuple(knobs), tuple((k.name, values.get(k.name, k.off)) for k in knobs))


def trainer_ignoring_label_smoothing() -> type:
    """Trainer that drops ``label_smoothing_factor``: the plain cross-entropy trains."""
    from transformers import Trainer

    class IgnoresSmoothing(Trainer):  # type: ignore[misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.label_smoother = None

    return IgnoresSmoothing


def trainer_smoothing_per_micro_batch() -> type:
    """Trainer whose label smoother averages over each micro-batch and is not divided by the
    accumulation steps (transformers#46731's shape, 4.46 to 5.14): k micro-batch means add up."""
    from transformers import Trainer

    class SmoothingPerMicroBatch(Trainer):  # type: ignore[misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            smoother = self.label_smoother

            def per_micro_batch(
                outputs: Any, labels: Any, shift_labels: bool = False, **_: Any
            ) -> Any:
                return smoother(outputs, labels, shift_labels=shift_labels)

            self.label_smoother = per_micro_batch

    return SmoothingPerMicroBatch


@pytest.mark.operation("train")
@pytest.mark.parametrize("broken", ["real", "smoothing-ignored", "smoothing-per-micro-batch"])
def test_loss_options_contract(
    broken: str, tokenizer: Any, tmp_path: Path, record_property: Any
) -> None:
    from test_train import TRAINER_KNOBS, run_train_loss_options

    trainer_class = {
        "real": lambda: None,
        "smoothing-ignored": trainer_ignoring_label_smoothing,
        "smoothing-per-micro-batch": trainer_smoothing_per_micro_batch,
    }[broken]()
    setting = knob_setting(TRAINER_KNOBS, accumulation=2, label_smoothing_factor=0.1)
    run_train_loss_options(trainer_class, setting, tokenizer, tmp_path, record_property)


def trainer_summing_rows() -> type:
    """Trainer whose classification loss sums over the batch's rows instead of averaging."""
    from transformers import Trainer

    class SumsRows(Trainer):  # type: ignore[misc]
        def compute_loss(self, model: Any, inputs: Any, *args: Any, **kwargs: Any) -> Any:
            rows = inputs["input_ids"].size(0)
            loss = super().compute_loss(model, inputs, *args, **kwargs)
            if isinstance(loss, tuple):
                return (loss[0] * rows, *loss[1:])
            return loss * rows

    return SumsRows


@pytest.mark.operation("train")
@pytest.mark.parametrize("broken", ["real", "sums-rows"])
def test_classification_contract(
    broken: str, tokenizer: Any, tmp_path: Path, record_property: Any
) -> None:
    from test_train import CLASSIFICATION_KNOBS, run_train_classification

    trainer_class = None if broken == "real" else trainer_summing_rows()
    setting = knob_setting(CLASSIFICATION_KNOBS, problem_type="multi_label_classification")
    run_train_classification(trainer_class, setting, tokenizer, tmp_path, record_property)


def unscaled_under_accumulation(trainer_class: type) -> type:
    """``trainer_class`` whose loss reaches backward undivided by the accumulation steps (as
    transformers 4.46's Trainer and trl#2615's did): at accumulation k each step moves the
    weights k times too far, while its loss on a batch stays right."""

    class Unscaled(trainer_class):  # type: ignore[misc, valid-type]
        def training_step(self, *args: Any, **kwargs: Any) -> Any:
            backward = self.accelerator.backward
            steps = self.args.gradient_accumulation_steps

            def undivided(loss: Any, **options: Any) -> Any:
                return backward(loss * steps, **options)

            self.accelerator.backward = undivided
            try:
                return super().training_step(*args, **kwargs)
            finally:
                del self.accelerator.backward

    return Unscaled


@pytest.mark.operation("reward")
@pytest.mark.parametrize("broken", ["real", "unscaled"])
def test_reward_update_contract(
    broken: str, tiny_model_dir: Path, tokenizer: Any, tmp_path: Path, record_property: Any
) -> None:
    from helpers.knobs import knob_params
    from test_preference import REWARD_KNOBS, run_reward_update
    from trl import RewardTrainer

    setting = knob_params(REWARD_KNOBS)[0].values[0]
    trainer_class = (
        RewardTrainer if broken == "real" else unscaled_under_accumulation(RewardTrainer)
    )
    run_reward_update(trainer_class, setting, tiny_model_dir, tokenizer, tmp_path, record_property)


@pytest.mark.operation("kto")
@pytest.mark.parametrize("broken", ["real", "unscaled"])
def test_preference_accumulation_contract(
    broken: str, tiny_model: Any, tokenizer: Any, tmp_path: Path, record_property: Any
) -> None:
    from test_preference import run_preference_accumulation
    from trl import KTOTrainer

    trainer_class = KTOTrainer if broken == "real" else unscaled_under_accumulation(KTOTrainer)
    run_preference_accumulation(
        trainer_class, "kto", tiny_model, tokenizer, tmp_path, record_property
    )


@pytest.mark.operation("sft")
@pytest.mark.parametrize("broken", ["real", "prompt-in-labels"])
def test_sft_mask_contract(
    broken: str, tiny_model: Any, tokenizer: Any, tmp_path: Path, record_property: Any
) -> None:
    from helpers.knobs import knob_params
    from test_sft import SFT_MASK_KNOBS, run_sft_mask
    from trl import SFTTrainer

    # Prompt-completion data, every other knob off: the prompt must be masked.
    setting = knob_params(SFT_MASK_KNOBS)[0].values[0]
    trainer_class = SFTTrainer if broken == "real" else sft_prompt_trained_on()
    run_sft_mask(trainer_class, setting, tiny_model, tokenizer, tmp_path, record_property)


def test_reference_forward_on_the_models_device() -> None:
    """The contracts' own forward passes feed the model where the trainer put it (on a GPU
    host, DPO's reference was fed from the CPU and failed). No GPU here: the 'meta' device
    stands in for it, and the model records where its input arrived."""
    import torch
    from helpers.contracts import expected_completion_mask, sequence_log_prob

    class Stop(Exception):
        pass

    class Placed(torch.nn.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.weight = torch.nn.Parameter(torch.empty(1, device="meta"))
            self.seen: list[str] = []

        def forward(self, input_ids: Any) -> None:
            self.seen.append(input_ids.device.type)
            raise Stop

    model = Placed()
    with pytest.raises(Stop):
        sequence_log_prob(model, [1, 2, 3], 1)
    assert model.seen == ["meta"]
    completions = torch.tensor([[4, 2, 5]], device="meta")
    assert expected_completion_mask(completions, 2).device.type == "meta"
