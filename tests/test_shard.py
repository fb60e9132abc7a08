"""Sharding: every cell in exactly one shard, stable, balanced by past durations."""

from __future__ import annotations

import pytest
from conftest import make_record
from hypothesis import given, settings
from hypothesis import strategies as st

from ftmatrix.config import parse_matrix
from ftmatrix.plan import plan_cells
from ftmatrix.settings import SettingsError, parse_shard
from ftmatrix.shard import cell_costs, shard_cells

MATRIX = "packages:\n  a: ['1', '2', '3', '4', '5']\n  b: ['1', '2']\n"
CELLS = plan_cells(parse_matrix(MATRIX, source="m", default_python="3.11")).cells


@settings(max_examples=50, deadline=None)
@given(count=st.integers(min_value=1, max_value=12), costs=st.lists(st.floats(0, 100), max_size=10))
def test_each_cell_lands_in_exactly_one_shard(count, costs):
    known = {c.label: cost for c, cost in zip(CELLS, costs, strict=False)}
    shards = [shard_cells(CELLS, i, count, known) for i in range(1, count + 1)]
    labels = [c.label for shard in shards for c in shard]
    assert sorted(labels) == sorted(c.label for c in CELLS)
    assert shards == [shard_cells(CELLS, i, count, known) for i in range(1, count + 1)]


def test_a_slow_cell_gets_a_shard_of_its_own():
    slow = CELLS[3].label
    costs = {c.label: (100.0 if c.label == slow else 1.0) for c in CELLS}
    first, second = shard_cells(CELLS, 1, 2, costs), shard_cells(CELLS, 2, 2, costs)
    assert [c.label for c in first] == [slow]
    assert len(second) == len(CELLS) - 1


def test_costs_come_from_the_newest_run_of_each_cell():
    records = [
        make_record(run_id="r1", cell_label="x", duration=50.0),
        make_record(run_id="r2", cell_label="x", duration=2.0, case="a"),
        make_record(run_id="r2", cell_label="x", duration=3.0, case="b"),
    ]
    assert cell_costs(records) == {"x": 5.0}


def test_shard_setting_is_validated():
    assert parse_shard("2/4") == (2, 4)
    assert parse_shard("") is None
    with pytest.raises(SettingsError) as caught:
        parse_shard("5/4")
    assert str(caught.value) == (
        "FTMATRIX_SHARD='5/4': expected I/N with 1 <= I <= N and N at most 10,000, such as '1/4'"
    )
