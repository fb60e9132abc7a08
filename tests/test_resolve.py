"""Installability with uv, and the cache that keeps a pin set from being resolved twice."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ftmatrix.config import InstallOptions
from ftmatrix.plan import Cell
from ftmatrix.resolve import resolve_cell
from ftmatrix.status import Status

pytestmark = pytest.mark.slow

CELL = Cell(python="3.11", pins=(("six", "1.17.0"),), hardware="cpu")


def test_a_resolution_is_reused_while_fresh_and_redone_when_stale(tmp_path: Path):
    env = {**os.environ, "FTMATRIX_CACHE_DIR": str(tmp_path)}
    first = resolve_cell(CELL, InstallOptions(), env, now=lambda: 1000.0)
    assert first.lock is not None and "six==1.17.0" in first.lock
    (entry,) = tmp_path.glob("*.json")
    # Mark the cached answer: if it comes back, uv was not asked again.
    data = json.loads(entry.read_text())
    entry.write_text(json.dumps({**data, "lock": data["lock"] + "# from the cache\n"}))
    again = resolve_cell(CELL, InstallOptions(), env, now=lambda: 1000.0 + 3600)
    assert again.lock is not None and again.lock.endswith("# from the cache\n")
    stale = resolve_cell(CELL, InstallOptions(), env, now=lambda: 1000.0 + 7 * 3600)
    assert stale.lock == first.lock


def test_a_proof_of_uninstallability_is_cached_too(tmp_path: Path):
    env = {**os.environ, "FTMATRIX_CACHE_DIR": str(tmp_path)}
    cell = Cell(python="3.11", pins=(("six", "9.9.9"),), hardware="cpu")
    answer = resolve_cell(cell, InstallOptions(), env)
    assert answer.status is Status.UNINSTALLABLE
    assert "there is no version of six==9.9.9" in (answer.reason or "")
    assert len(list(tmp_path.glob("*.json"))) == 1


def test_the_cache_can_be_turned_off(tmp_path: Path):
    env = {**os.environ, "FTMATRIX_CACHE_DIR": str(tmp_path), "FTMATRIX_RESOLVE_TTL": "0"}
    assert resolve_cell(CELL, InstallOptions(), env).lock is not None
    assert list(tmp_path.iterdir()) == []
