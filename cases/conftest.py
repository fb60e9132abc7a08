"""Fixtures every case shares: tiny offline models and tokenizers, seeded.

Frameworks are imported inside fixtures and tests, never at module level, so an
import-time break of a framework becomes that case's record, not a collection error.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

# The hub is never reached: everything a case needs is built here.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")

MARKERS = (
    "operation(name): the operation family this case reproduces",
    "requires_packages(**specifiers): outside them the case is n/a",
    "requires_hardware(cuda=False, gpus=0, min_compute_capability=None): else skip",
)


def pytest_configure(config: pytest.Config) -> None:
    for marker in MARKERS:
        config.addinivalue_line("markers", marker)


@pytest.fixture(scope="session")
def tokenizer() -> Any:
    from _tiny import build_tokenizer

    return build_tokenizer()


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory, tokenizer: Any) -> Path:
    """A tiny Llama saved with its tokenizer, for frameworks that load from a path."""
    from _tiny import build_model

    path = tmp_path_factory.mktemp("tiny-llama")
    build_model("llama", tokenizer).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture
def tiny_llama(tiny_model_dir: Path) -> Any:
    """A fresh tiny Llama for each case, loaded from disk as users load theirs.

    Loading from a path (not building in memory) matters: trainers that make a
    reference model reload it from ``config._name_or_path``.
    """
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_model_dir)
