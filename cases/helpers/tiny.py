"""Tiny models and tokenizers, built offline with random weights: no hub, no download.

Each family's tokenizer returns only what the real one returns (input_ids and
attention_mask: no token_type_ids for these decoder-only families, a stray one
breaks generation in some trl releases and would be our bug, not theirs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# A few sentences: enough words for a vocabulary and for a handful of SFT rows.
CORPUS = (
    "the quick brown fox jumps over the lazy dog",
    "a model learns to answer questions about numbers",
    "what is two plus two ? the answer is four",
    "hello world good morning and good night",
    "one two three four five six seven eight nine ten",
)
SPECIAL_TOKENS = {
    "bos_token": "<s>",
    "eos_token": "</s>",
    "pad_token": "<pad>",
    "unk_token": "<unk>",
}
ROLE_WORDS = ("system:", "user:", "assistant:")
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{{ message['role'] }}: "
    "{{ message['content'] }} {{ eos_token }} {% endfor %}"
    "{% if add_generation_prompt %}assistant: {% endif %}"
)


@dataclass(frozen=True)
class Family:
    """A model family: its transformers config class and the shape of a tiny member."""

    name: str
    config_class: str
    extra: tuple[tuple[str, Any], ...] = ()


FAMILIES = {
    "llama": Family("llama", "LlamaConfig"),
    "mistral": Family("mistral", "MistralConfig", (("sliding_window", None),)),
    "qwen2": Family("qwen2", "Qwen2Config"),
    "phi3": Family("phi3", "Phi3Config"),
    "gemma": Family("gemma", "GemmaConfig", (("head_dim", 8),)),
}


def build_tokenizer() -> Any:
    """A word-level fast tokenizer over CORPUS with bos/eos/pad/unk and a chat template."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = sorted({w for line in CORPUS for w in line.split()} | set(ROLE_WORDS))
    vocab = {token: i for i, token in enumerate([*SPECIAL_TOKENS.values(), *words])}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=SPECIAL_TOKENS["unk_token"]))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        model_input_names=["input_ids", "attention_mask"],
        **SPECIAL_TOKENS,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_model(
    family: str, tokenizer: Any, *, seed: int = 0, hidden_size: int = 32, **overrides: Any
) -> Any:
    """A 2-layer causal LM of ``family`` with random weights sized to ``tokenizer``.

    ``overrides`` replace the family's configuration (``tie_word_embeddings=True``, ...).
    """
    import torch
    import transformers

    spec = FAMILIES[family]
    config = getattr(transformers, spec.config_class)(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        **{**dict(spec.extra), **overrides},
    )
    torch.manual_seed(seed)
    return transformers.AutoModelForCausalLM.from_config(config)


# What vLLM's production attention backends (FlashAttention, FlashInfer) accept: a
# head size they have kernels for. Smaller heads only run on FlexAttention, a path
# nobody serves with; 64 is in every backend's list.
VLLM_HEAD_DIM = 64


def build_vllm_model(tokenizer: Any, *, family: str = "llama", seed: int = 0) -> Any:
    """A 2-layer causal LM vLLM serves as it serves real ones: head_dim 64, bfloat16 weights.

    Saved with ``save_pretrained`` it records bfloat16 as its dtype, so ``dtype="auto"``
    loads it in bfloat16 (fp32 would push vLLM off its production kernels).
    """
    import torch
    import transformers

    spec = FAMILIES[family]
    heads = 2
    config = getattr(transformers, spec.config_class)(
        vocab_size=len(tokenizer),
        hidden_size=heads * VLLM_HEAD_DIM,
        intermediate_size=4 * heads * VLLM_HEAD_DIM,
        num_hidden_layers=2,
        num_attention_heads=heads,
        num_key_value_heads=1,
        head_dim=VLLM_HEAD_DIM,
        max_position_embeddings=128,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        **{k: v for k, v in spec.extra if k != "head_dim"},
    )
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config)
    return model.to(torch.bfloat16)


# Families whose causal LM's forward took no loss keyword arguments (no ``**kwargs``, so no
# ``num_items_in_batch``) until transformers 4.5x: the Trainer normalises their loss under
# gradient accumulation on another path than Llama's. Their configurations spell the sizes
# their own way (``sizes``: our name -> theirs) and default to dropout, which a step checked
# against a reference cannot have. Kept out of FAMILIES, which every family-parametrized
# case runs on: the Trainer's knob cases take them (``build_head_model``).
@dataclass(frozen=True)
class SizedFamily:
    """A family whose configuration names its sizes its own way."""

    name: str
    config_class: str
    sizes: tuple[tuple[str, str], ...] = ()
    extra: tuple[tuple[str, Any], ...] = ()


LOSS_KWARGS_FREE_FAMILIES = {
    "gpt2": SizedFamily(
        "gpt2",
        "GPT2Config",
        (
            ("hidden_size", "n_embd"),
            ("intermediate_size", "n_inner"),
            ("num_hidden_layers", "n_layer"),
            ("num_attention_heads", "n_head"),
            ("max_position_embeddings", "n_positions"),
        ),
        (("resid_pdrop", 0.0), ("embd_pdrop", 0.0), ("attn_pdrop", 0.0)),
    ),
    "opt": SizedFamily(
        "opt",
        "OPTConfig",
        (("intermediate_size", "ffn_dim"),),
        (("dropout", 0.0), ("attention_dropout", 0.0), ("layerdrop", 0.0)),
    ),
}


def build_head_model(
    family: str,
    tokenizer: Any,
    *,
    head: str = "AutoModelForCausalLM",
    seed: int = 0,
    hidden_size: int = 32,
    **overrides: Any,
) -> Any:
    """A 2-layer model of ``family`` (of FAMILIES or LOSS_KWARGS_FREE_FAMILIES) with the
    ``head`` transformers' auto class names (``AutoModelForSequenceClassification``, ...),
    random weights; ``overrides`` replace its configuration (``num_labels=3``, ...)."""
    import torch
    import transformers

    if family in FAMILIES:
        built = build_model(family, tokenizer, seed=seed, hidden_size=hidden_size, **overrides)
        config = built.config
    else:
        spec = LOSS_KWARGS_FREE_FAMILIES[family]
        ours = {
            "hidden_size": hidden_size,
            "intermediate_size": 2 * hidden_size,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "max_position_embeddings": 128,
        }
        renamed = dict(spec.sizes)
        config = getattr(transformers, spec.config_class)(
            vocab_size=len(tokenizer),
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
            **{renamed.get(name, name): value for name, value in ours.items()},
            **{**dict(spec.extra), **overrides},
        )
    torch.manual_seed(seed)
    return getattr(transformers, head).from_config(config)
