"""Adapters at the settings users train them with, and every path a saved one travels back.

An adapter is more than LoRA on the attention: ``modules_to_save`` trains whole copies of
the head (``lm_head``, a classifier's ``score``) or of ``embed_tokens``, LoRA may sit on
the embeddings or the head, and many small models tie the head to the embeddings
(``tie_word_embeddings=True``). Each is a knob of one table (:data:`ADAPTER_KNOBS`),
together with the path the saved adapter takes back (peft's ``PeftModel.from_pretrained``,
transformers' ``load_adapter``, ``from_pretrained`` of the adapter folder, and merge ->
save -> reload), combined pairwise.

The reference is the adapted model itself, in memory, as it was trained: whatever path
brings it back must compute the same logits (``roundtrip_logits``); merging must not
change them (``merged_logits``); a model whose configuration ties the head to the
embeddings holds one weight for both, written once (``tied_weights``). Every trained
piece (LoRA, each saved copy) is moved off its initial value first, so a path that
drops one of them changes the logits.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from helpers.knobs import Knob

ATTENTION = ["q_proj", "k_proj", "v_proj", "o_proj"]

# ``modules_to_save``: None, the head, the embeddings, or a classifier's ``score`` head (on a
# sequence-classification model, what reward models are). ``lora_on_embeddings``: LoRA also
# on the embedding pair's side that is not saved whole (the head, or the embeddings where
# the head is saved whole or the model has none). ``path``: how the saved adapter comes back.
ADAPTER_KNOBS = (
    Knob("modules_to_save", (None, "lm_head", "embed_tokens", "score"), package="peft"),
    Knob("path", ("peft", "load_adapter", "adapter_folder", "merge_save_reload")),
    Knob("tie_word_embeddings", (False, True)),
    Knob("lora_on_embeddings", (False, True), package="peft"),
)


def tied_merges() -> list[Any]:
    """Where the tie meets the merge, each side adapted: pairs do not reach these triples.
    LoRA on the head where nothing is saved whole (its update merged into the weight the
    embeddings share), and each side saved whole (merged while the configuration still
    ties them)."""
    from helpers.knobs import Setting

    names = [knob.name for knob in ADAPTER_KNOBS]
    return [
        Setting(
            ADAPTER_KNOBS,
            tuple(zip(names, (saved, "merge_save_reload", True, saved is None), strict=True)),
        )
        for saved in (None, "lm_head", "embed_tokens")
    ]


# transformers' PEFT integration (``load_adapter``, an adapter folder in ``from_pretrained``)
# arrived in 4.34.
PATH_NEEDS = {"load_adapter": ">=4.34", "adapter_folder": ">=4.34"}


@dataclass(frozen=True)
class AdapterShape:
    """What one setting trains: the model's head, its tie, LoRA's targets, the saved copies."""

    head: str  # "causal" (a language-model head) or "score" (sequence classification)
    tied: bool
    targets: tuple[str, ...]
    saved: tuple[str, ...]

    @property
    def auto_class(self) -> Any:
        import transformers

        if self.head == "score":
            return transformers.AutoModelForSequenceClassification
        return transformers.AutoModelForCausalLM

    @property
    def label(self) -> str:
        """``LoRA on q_proj+...+lm_head; modules_to_save lm_head; tied``: in the messages, so a
        known issue can name the setting it explains."""
        saved = "+".join(self.saved) or "none"
        tie = "tied" if self.tied else "untied"
        return f"LoRA on {'+'.join(self.targets)}; modules_to_save {saved}; {tie}"

    @property
    def task_type(self) -> str:
        return "SEQ_CLS" if self.head == "score" else "CAUSAL_LM"


def adapter_shape(setting: Any) -> AdapterShape:
    """The adapter a knob setting describes."""
    saved = setting["modules_to_save"]
    head = "score" if saved == "score" else "causal"
    extra: tuple[str, ...] = ()
    if setting["lora_on_embeddings"]:
        # The side of the embedding pair not saved whole (a score model has no lm_head).
        extra = ("embed_tokens",) if saved in ("lm_head", "score") else ("lm_head",)
    return AdapterShape(
        head=head,
        tied=bool(setting["tie_word_embeddings"]),
        targets=(*ATTENTION, *extra),
        saved=(saved,) if saved else (),
    )


def save_base(folder: Path, tokenizer: Any, shape: AdapterShape) -> Path:
    """The tiny Llama base of ``shape`` (its head, its tie), saved with its tokenizer."""
    import torch

    from helpers.tiny import build_model

    model = build_model("llama", tokenizer, tie_word_embeddings=shape.tied)
    if shape.head == "score":
        config = model.config
        config.num_labels = 2
        torch.manual_seed(1)
        model = shape.auto_class.from_config(config)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def adapted_model(
    base_dir: Path, shape: AdapterShape, prepare: Callable[[Any], Any] | None = None
) -> Any:
    """The base with the adapter, every trained piece moved off its initial value (as if trained).

    ``modules_to_save`` copies start equal to the base's modules: left so, a path that
    dropped them would still give the right logits. ``prepare`` acts on the base before
    the adapter wraps it (gradient checkpointing enabled first, as peft's docs do).
    """
    import torch
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
        r=4,
        lora_alpha=8,
        lora_dropout=0.0,
        target_modules=list(shape.targets),
        modules_to_save=list(shape.saved) or None,
        task_type=shape.task_type,
        init_lora_weights=False,
    )
    base = shape.auto_class.from_pretrained(base_dir)
    if prepare is not None:
        prepare(base)
    torch.manual_seed(3)  # LoRA's random init: the same adapter each time
    adapted = get_peft_model(base, config)
    generator = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for parameter in adapted.parameters():
            if parameter.requires_grad:
                noise = torch.randn(parameter.shape, generator=generator)
                parameter.add_(0.1 * noise.to(parameter.dtype))
    return adapted.eval()


def model_inputs(tokenizer: Any) -> dict[str, Any]:
    from helpers.tiny import CORPUS

    return dict(tokenizer(list(CORPUS[:2]), return_tensors="pt", padding=True))


def logits_of(model: Any, inputs: dict[str, Any]) -> Any:
    import torch

    with torch.no_grad():
        return model(**inputs).logits.detach().clone()


def load_with_peft(adapter_dir: Path, base_dir: Path, auto_class: Any) -> Any:
    from peft import PeftModel

    return PeftModel.from_pretrained(auto_class.from_pretrained(base_dir), adapter_dir)


def load_with_load_adapter(adapter_dir: Path, base_dir: Path, auto_class: Any) -> Any:
    model = auto_class.from_pretrained(base_dir)
    model.load_adapter(str(adapter_dir))
    return model


def load_adapter_folder(adapter_dir: Path, base_dir: Path, auto_class: Any) -> Any:
    """transformers reads adapter_config.json, loads the base it names, then the adapter."""
    return auto_class.from_pretrained(adapter_dir)


LOADERS: dict[str, Callable[[Path, Path, Any], Any]] = {
    "peft": load_with_peft,
    "load_adapter": load_with_load_adapter,
    "adapter_folder": load_adapter_folder,
}


def check_tied_weights(where: str, model: Any) -> int:
    """A model whose configuration ties its head to its embeddings holds one weight for both
    (one tensor: what a consumer of the configuration, a reload, a converter, assumes); one
    that does not tie them may hold two. Returns 1 if tied."""
    from helpers.contracts import ContractError, contract_message

    head = model.get_output_embeddings()
    if head is None or not getattr(model.config, "tie_word_embeddings", False):
        return 0  # a classifier has no head to tie; an untied model may hold two weights
    embeddings, output = model.get_input_embeddings().weight, head.weight
    if embeddings.shape != output.shape or embeddings.data_ptr() != output.data_ptr():
        gap = (
            f"{float((embeddings - output).abs().max()):.3g}"
            if embeddings.shape == output.shape
            else "shapes differ"
        )
        raise ContractError(
            contract_message(
                f"{where}: tie_word_embeddings=True, lm_head against embed_tokens "
                f"(largest gap {gap})",
                "two tensors",
                "one tensor",
                0,
            )
        )
    return 1


def check_written_once(folder: Path, model: Any) -> int:
    """A saved model with tied embeddings writes the tied weight once (no ``lm_head.weight``
    beside ``embed_tokens.weight``); returns how many tensors the checkpoint holds."""
    from safetensors import safe_open

    from helpers.contracts import ContractError, contract_message

    names: set[str] = set()
    for file in folder.glob("*.safetensors"):
        with safe_open(str(file), framework="pt") as opened:
            names |= set(opened.keys())
    if getattr(model.config, "tie_word_embeddings", False) and any(
        name.endswith("lm_head.weight") for name in names
    ):
        raise ContractError(
            contract_message(
                f"weights saved in {folder.name} with tie_word_embeddings=True",
                "lm_head.weight written beside embed_tokens.weight",
                "the tied weight written once",
                0,
            )
        )
    return len(names)


def run_adapter_roundtrip(
    setting: Any,
    tokenizer: Any,
    tmp_path: Path,
    base_dir: Path,
    record_property: Any,
    *,
    loaders: dict[str, Callable[[Path, Path, Any], Any]] | None = None,
    merge: Callable[[Any], Any] | None = None,
) -> None:
    """The case: the adapted model, saved by peft and brought back by ``setting``'s path,
    computes the adapted model's logits; merged, it computes them too and keeps its tie.

    ``loaders`` and ``merge`` replace peft's and transformers' own (tests/test_contracts.py
    passes deliberately wrong ones).
    """
    from helpers.contracts import check_tensors_close, contracts

    shape = adapter_shape(setting)
    inputs = model_inputs(tokenizer)
    adapted = adapted_model(base_dir, shape)
    reference = logits_of(adapted, inputs)
    with adapted.disable_adapter():
        base_logits = logits_of(adapted, inputs)
    record_property("adapter_effect", float((reference - base_logits).abs().max()))
    adapted.save_pretrained(tmp_path / "adapter")
    path = setting["path"]
    with contracts(record_property) as check:
        if path == "merge_save_reload":
            loaded = load_with_peft(tmp_path / "adapter", base_dir, shape.auto_class).eval()
            merged = (merge or (lambda model: model.merge_and_unload()))(loaded).eval()
            check.check(
                "merged_logits",
                check_tensors_close,
                f"logits of the merged adapter ({shape.label})",
                logits_of(merged, inputs),
                reference,
                1e-4,
            )
            check.check("tied_weights", check_tied_weights, "the merged model", merged)
            merged.save_pretrained(tmp_path / "merged")
            check.check("tied_weights", check_written_once, tmp_path / "merged", merged)
            loaded = shape.auto_class.from_pretrained(tmp_path / "merged").eval()
            check.check("tied_weights", check_tied_weights, "the reloaded merged model", loaded)
        else:
            loaded = (loaders or LOADERS)[path](tmp_path / "adapter", base_dir, shape.auto_class)
            loaded = loaded.eval()
        check.check(
            "roundtrip_logits",
            check_tensors_close,
            f"logits after the saved adapter came back through {path} ({shape.label})",
            logits_of(loaded, inputs),
            reference,
            1e-4,
        )


# Gradient checkpointing recomputes the forward in the backward pass: the gradient must not
# change. ``use_reentrant=True`` (transformers' default) gives no gradient to a checkpointed
# block whose input does not require one, which frozen embeddings ensure unless the inputs
# are made to (``enable_input_require_grads``); ``enabled``: on the base before the adapter
# wraps it (peft's docs) or on the adapted model after (what the Trainer does);
# ``modules_to_save=lm_head`` keeps the loss differentiable when the LoRA blocks get nothing.
CHECKPOINTING_KNOBS = (
    Knob("use_reentrant", (False, True), exists=">=4.35"),
    Knob("enabled", ("after_adapter", "before_adapter")),
    Knob("modules_to_save", (None, "lm_head"), package="peft"),
)


def trainable_gradients(model: Any, inputs: dict[str, Any]) -> dict[str, Any]:
    """One backward pass of the causal-LM loss; each trainable weight's gradient (None if none)."""
    model.train()
    model.zero_grad(set_to_none=True)
    model(**inputs, labels=inputs["input_ids"]).loss.backward()
    return {
        name: None if parameter.grad is None else parameter.grad.detach().clone()
        for name, parameter in model.named_parameters()
        if parameter.requires_grad
    }


def check_gradients(quantity: str, got: dict[str, Any], reference: dict[str, Any]) -> float:
    """Every trainable weight has a gradient, equal to the reference's; returns the largest gap."""
    from helpers.contracts import ContractError, check_tensors_close, contract_message

    missing = sorted(name for name, grad in got.items() if grad is None)
    if missing or set(got) != set(reference):
        raise ContractError(
            contract_message(
                f"{quantity}: weights with a gradient ({len(missing)} of {len(got)} have none, "
                f"first {missing[:1]})",
                len(got) - len(missing),
                len(reference),
                0,
            )
        )
    return max(
        check_tensors_close(f"{quantity}, {name}", got[name], reference[name], 1e-5)
        for name in reference
    )


def run_checkpointing_gradient(
    setting: Any,
    tokenizer: Any,
    base_dir: Path,
    record_property: Any,
    *,
    enable: Callable[[Any, dict[str, Any]], None] | None = None,
) -> None:
    """The case: with gradient checkpointing enabled as ``setting`` says, one backward pass
    gives every trainable weight the gradient it has without checkpointing.

    ``enable`` replaces transformers' ``gradient_checkpointing_enable`` (tests/test_contracts.py
    passes a deliberately wrong one).
    """
    from helpers.contracts import contracts

    saved = setting["modules_to_save"]
    shape = AdapterShape("causal", False, tuple(ATTENTION), (saved,) if saved else ())
    inputs = model_inputs(tokenizer)
    plain = adapted_model(base_dir, shape)
    reference = trainable_gradients(plain, inputs)
    kwargs = {"use_reentrant": setting["use_reentrant"]}

    def turn_on(model: Any) -> None:
        if enable is not None:
            enable(model, kwargs)
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)

    if setting["enabled"] == "before_adapter":
        model = adapted_model(base_dir, shape, prepare=turn_on)
    else:  # the same adapted model, checkpointing turned on afterwards
        model = plain
        turn_on(model)
    got = trainable_gradients(model, inputs)
    with contracts(record_property) as check:
        check.check(
            "checkpointing_gradient",
            check_gradients,
            f"gradient with checkpointing (use_reentrant={kwargs['use_reentrant']}, "
            f"enabled {setting['enabled']}) against without",
            got,
            reference,
        )
