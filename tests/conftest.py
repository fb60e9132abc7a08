"""Shared helpers for the tool's own tests."""

from __future__ import annotations

from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"
ROOT = Path(__file__).parent.parent


@pytest.fixture
def data_dir() -> Path:
    return DATA
