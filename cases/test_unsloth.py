"""unsloth's fast paths: load + LoRA + SFT, GRPO on Llama and Mistral, 4-bit QKV LoRA.

unsloth is imported first (it patches transformers and trl on import), and each
case runs in a process of its own, so the patches never reach another case.
unsloth only logs a warning when a patch fails, and stock trl then trains: every
case first proves that unsloth's path is the one running (:func:`unsloth_path_gaps`:
unsloth's trainer class, its fused LoRA on the attention, bitsandbytes 4-bit layers
where asked), else it is ``fail`` saying what was missing. The cases test the GPU
fast paths: on a machine without CUDA they are ``skip``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:  # imported where only the frameworks are installed, too (see below)
    from ftmatrix.cell.api import GpuLease

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
QKV = ("q_proj", "k_proj", "v_proj")
SCRIPTS = Path(__file__).parent / "scripts"

pytestmark = pytest.mark.isolated("unsloth patches trl and transformers for every later case")


def attention_layers(model: Any) -> list[Any]:
    """The modules of ``model`` that hold q, k and v projections (its attention layers)."""
    return [m for m in model.modules() if all(hasattr(m, name) for name in QKV)]


def unsloth_trainer_gap(trainer: Any, trl_name: str) -> str | None:
    """Why ``trainer`` is not unsloth's patched ``trl_name``; None when it is.

    unsloth replaces trl's trainers on import with generated subclasses named
    ``Unsloth<Name>`` (models/rl.py); a failed patch leaves trl's own class.
    """
    if any(c.__name__ == f"Unsloth{trl_name}" for c in type(trainer).__mro__):
        return None
    cls = type(trainer)
    return f"the trainer is {cls.__module__}.{cls.__qualname__}, not unsloth's Unsloth{trl_name}"


def unsloth_lora_gap(model: Any) -> str | None:
    """Why the attention of ``model`` does not run unsloth's fused LoRA; None when it does.

    After ``FastLanguageModel.get_peft_model`` unsloth's attention forward calls
    ``self.apply_qkv``, set to ``apply_lora_qkv`` (kernels/fast_lora.py) on every
    layer whose q, k and v carry LoRA.
    """
    layers = attention_layers(model)
    if not layers:
        return "the model has no attention layer with q_proj, k_proj and v_proj"
    forward = type(layers[0]).forward
    if not getattr(forward, "__module__", "").startswith("unsloth"):
        name = type(layers[0]).__name__
        return f"{name}.forward is {forward.__module__}.{forward.__qualname__}, not unsloth's"
    plain = [m for m in layers if _name(getattr(m, "apply_qkv", None)) != "apply_lora_qkv"]
    if plain:
        return f"{len(plain)} of {len(layers)} attention layers do not use apply_lora_qkv"
    return None


def _name(function: Any) -> str | None:
    return getattr(function, "__name__", None)


def quantized_gap(model: Any) -> str | None:
    """Why the q, k and v projections of ``model`` are not bitsandbytes 4-bit layers."""
    kinds = set()
    for layer in attention_layers(model):
        for name in QKV:
            base = getattr(getattr(layer, name), "base_layer", getattr(layer, name))
            kinds.add(f"{type(base).__module__}.{type(base).__qualname__}")
    if not kinds:
        return "the model has no q_proj, k_proj or v_proj layer"
    others = sorted(k for k in kinds if not _is_4bit(k))
    if others:
        return f"q/k/v are {', '.join(others)}, not bitsandbytes Linear4bit"
    return None


def _is_4bit(qualified_class: str) -> bool:
    return qualified_class.startswith("bitsandbytes") and qualified_class.endswith(".Linear4bit")


def unsloth_path_gaps(
    *, trainer: Any, trl_name: str, model: Any, four_bit: bool = False
) -> list[str]:
    """Everything missing for unsloth's path to be the one that runs (empty: it is)."""
    gaps = [unsloth_trainer_gap(trainer, trl_name), unsloth_lora_gap(model)]
    if four_bit:
        gaps.append(quantized_gap(model))
    return [gap for gap in gaps if gap]


def assert_unsloth_path(**objects: Any) -> None:
    """``fail`` the case, naming what was missing, unless unsloth's path is running."""
    gaps = unsloth_path_gaps(**objects)
    if gaps:
        raise AssertionError("unsloth's path did not run: " + "; ".join(gaps))


def import_unsloth() -> Any:
    """Import unsloth, or skip with its refusal when this machine has no accelerator."""
    import torch

    try:
        import unsloth
    except NotImplementedError as refusal:
        if not torch.cuda.is_available():
            pytest.skip(f"unsloth refuses this machine: {refusal}")
        raise
    return unsloth


def load(model_dir: Path, **options: Any) -> tuple[Any, Any]:
    import_unsloth()
    from unsloth import FastLanguageModel

    model, tokenizer = FastLanguageModel.from_pretrained(
        model_name=str(model_dir), max_seq_length=64, dtype=None, **options
    )
    return FastLanguageModel, (model, tokenizer)


def unsloth_lora(fast: Any, model: Any, targets: list[str]) -> Any:
    """``model`` with unsloth's LoRA on ``targets`` and its offloaded gradient checkpointing."""
    return fast.get_peft_model(
        model,
        r=4,
        lora_alpha=8,
        target_modules=targets,
        use_gradient_checkpointing="unsloth",
        random_state=0,
    )


def lora_sft_trainer(
    model_dir: Path, output_dir: str, *, targets: list[str], four_bit: bool
) -> Any:
    """An SFTTrainer for two steps on unsloth's model with its LoRA on ``targets``
    (4-bit with ``four_bit``), after checking that unsloth's path is the one running.

    Shared by the in-process cases and the child of the DataParallel case
    (cases/scripts/unsloth_qlora_dataparallel.py)."""
    fast, (model, tokenizer) = load(model_dir, load_in_4bit=four_bit)
    from datasets import Dataset
    from helpers.compat import sft_config, tokenizer_argument
    from helpers.tiny import CORPUS
    from trl import SFTTrainer

    trainer = SFTTrainer(
        model=unsloth_lora(fast, model, targets),
        args=sft_config(output_dir, max_length=32, max_steps=2),
        train_dataset=Dataset.from_list([{"text": line} for line in CORPUS * 4]),
        **tokenizer_argument(SFTTrainer, tokenizer),
    )
    assert_unsloth_path(
        trainer=trainer, trl_name="SFTTrainer", model=trainer.model, four_bit=four_bit
    )
    return trainer


@pytest.mark.operation("unsloth-sft")
@pytest.mark.requires_packages(unsloth=">=2024.8", trl=">=0.9")
@pytest.mark.requires_hardware(cuda=True)
def test_unsloth_lora_sft(tiny_model_dir: Path, tmp_path: Path, record_property: Any):
    trainer = lora_sft_trainer(tiny_model_dir, str(tmp_path), targets=TARGETS, four_bit=False)
    result = trainer.train()
    record_property("loss", float(result.training_loss))
    assert trainer.state.global_step == 2
    assert math.isfinite(result.training_loss)


@pytest.mark.operation("unsloth-grpo")
@pytest.mark.requires_packages(unsloth=">=2025.2", trl=">=0.14")
@pytest.mark.requires_hardware(cuda=True)
@pytest.mark.parametrize("family", ["llama", "mistral"])
def test_unsloth_grpo(family: str, tiny_model_dir: Path, tmp_path: Path, record_property: Any):
    """The path where a fast forward once returned logits instead of hidden states
    (`a and b must have same reduction dim` on Mistral, unslothai/unsloth#1790)."""
    fast, (model, tokenizer) = load(tiny_model_dir, load_in_4bit=False, fast_inference=False)
    # The broken path multiplies logits (vocab wide) by lm_head: with vocab == hidden
    # that wrong matmul would succeed and the case pass on a broken release.
    assert model.config.vocab_size != model.config.hidden_size, model.config
    from datasets import Dataset
    from helpers.compat import grpo_config, tokenizer_argument
    from test_grpo import PROMPTS, reward_distinct_words
    from trl import GRPOTrainer

    trainer = GRPOTrainer(
        model=unsloth_lora(fast, model, TARGETS),
        reward_funcs=reward_distinct_words,
        args=grpo_config(str(tmp_path)),
        train_dataset=Dataset.from_list([{"prompt": p} for p in PROMPTS * 2]),
        **tokenizer_argument(GRPOTrainer, tokenizer),
    )
    assert_unsloth_path(trainer=trainer, trl_name="GRPOTrainer", model=trainer.model)
    trainer.train()
    logs = [e for e in trainer.state.log_history if "loss" in e]
    assert trainer.state.global_step == 2
    assert logs and all(math.isfinite(float(e["loss"])) for e in logs), logs
    record_property("loss", float(logs[-1]["loss"]))


@pytest.mark.operation("unsloth-qlora-qkv")
@pytest.mark.requires_packages(unsloth=">=2024.8", bitsandbytes=">=0.43", trl=">=0.9")
@pytest.mark.requires_hardware(cuda=True)
def test_unsloth_4bit_qkv_lora_offloaded_checkpointing(
    tiny_model_dir: Path, tmp_path: Path, record_property: Any
):
    """4-bit LoRA on q/k/v with offloaded gradient checkpointing: the fused LoRA_QKV path
    (`mat1 and mat2 shapes cannot be multiplied ... LoRA_QKV` with 2+ visible GPUs under
    plain python, where DataParallel replicas lose the 4-bit quantisation state)."""
    trainer = lora_sft_trainer(tiny_model_dir, str(tmp_path), targets=list(QKV), four_bit=True)
    result = trainer.train()
    record_property("loss", float(result.training_loss))
    assert math.isfinite(result.training_loss)


@pytest.mark.operation("unsloth-qlora-qkv")
@pytest.mark.requires_packages(unsloth=">=2024.8", bitsandbytes=">=0.43", trl=">=0.9")
@pytest.mark.requires_hardware(cuda=True, gpus=2)
@pytest.mark.exclusive("trains on every GPU of the lease")
def test_unsloth_4bit_qkv_lora_dataparallel(
    tiny_model_dir: Path, tmp_path: Path, gpu_lease: GpuLease, record_property: Any
):
    """The same 4-bit QKV LoRA with offloaded checkpointing, started with plain `python`
    while the cell's two GPUs are visible: transformers' Trainer wraps the model in
    DataParallel, whose replicas lose the 4-bit quantisation state (unslothai/unsloth#1875:
    `mat1 and mat2 shapes cannot be multiplied ... LoRA_QKV`). The child sees the whole
    lease; its exception is this case's, type and message."""
    # Here, not at the top: the unsloth checks above are also imported where only the
    # frameworks are installed (the child script, tests/test_gpu_cases.py).
    from helpers.processes import launch_command, run_ranks

    out = tmp_path / "child"
    script = [str(SCRIPTS / "unsloth_qlora_dataparallel.py"), str(tiny_model_dir), str(out)]
    (report,) = run_ranks(launch_command("python", 1, script), out, env=gpu_lease.child_env())
    record_property("loss", report["loss"])
    # One visible GPU would train without DataParallel: a pass that proved nothing.
    assert report["n_gpu"] >= 2, report
    assert report["steps"] == 2, report
    assert math.isfinite(report["loss"]), report
