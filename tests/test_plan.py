"""Expanding a matrix into cells: labels, ids, strategies, rules, selection."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ftmatrix.config import parse_matrix
from ftmatrix.plan import Cell, PlanError, cover_pairs, plan_cells, select_cells


def plan(text: str):
    return plan_cells(parse_matrix(text, source="m.yaml", default_python="3.11"))


TWO_BY_TWO = """
packages:
  torch: ['2.13.0']
  transformers: ['4.57.6', '5.23.0']
  trl: ['0.19.1', '1.16.0']
  vllm: [none]
"""


def test_full_product_labels_are_readable_and_stable():
    labels = [c.label for c in plan(TWO_BY_TWO).cells]
    assert labels == [
        "cpu-py3.11-torch2.13.0-tf4.57.6-trl0.19.1-novllm",
        "cpu-py3.11-torch2.13.0-tf4.57.6-trl1.16.0-novllm",
        "cpu-py3.11-torch2.13.0-tf5.23.0-trl0.19.1-novllm",
        "cpu-py3.11-torch2.13.0-tf5.23.0-trl1.16.0-novllm",
    ]


def test_cell_id_is_a_hash_of_the_canonical_form():
    first, again = plan(TWO_BY_TWO).cells[0], plan(TWO_BY_TWO).cells[0]
    assert first.id == again.id
    assert len(first.id) == 12
    assert len({c.id for c in plan(TWO_BY_TWO).cells}) == 4
    assert Cell.from_mapping(first.to_dict()) == first


def test_requirements_pin_exactly_and_leave_out_not_installed():
    cell = plan(TWO_BY_TWO + "support: [accelerate]\n").cells[0]
    assert cell.requirements() == [
        "torch==2.13.0",
        "transformers==4.57.6",
        "trl==0.19.1",
        "accelerate",
    ]


def test_exclude_with_wildcards_and_hardware_classes():
    text = (
        TWO_BY_TWO
        + """
exclude:
  - {trl: '0.19.*', transformers: '5.*'}
  - {trl: '>=1', hardware: l4}
hardware:
  cpu: {runs-on: [ubuntu-latest]}
  l4: {runs-on: [self-hosted, l4], gpus: 1}
"""
    )
    labels = [c.label for c in plan(text).cells]
    assert labels == [
        "cpu-py3.11-torch2.13.0-tf4.57.6-trl0.19.1-novllm",
        "l4-py3.11-torch2.13.0-tf4.57.6-trl0.19.1-novllm",
        "cpu-py3.11-torch2.13.0-tf4.57.6-trl1.16.0-novllm",
        "cpu-py3.11-torch2.13.0-tf5.23.0-trl1.16.0-novllm",
    ]


def test_a_rule_that_matches_nothing_is_an_error():
    with pytest.raises(PlanError) as caught:
        plan(TWO_BY_TWO + "exclude: [{trl: '0.20.*'}]\n")
    assert str(caught.value) == (
        "m.yaml: exclude[0]: {'trl': '0.20.*'} matches no cell: "
        "it matches no combination of the axes"
    )


def test_a_rule_naming_an_unknown_hardware_class_is_an_error():
    with pytest.raises(PlanError, match=r"no hardware class matches 'a100' \(classes: cpu\)"):
        plan(TWO_BY_TWO + "exclude: [{hardware: a100}]\n")


def test_excluding_everything_is_an_error():
    with pytest.raises(PlanError, match="leave no cell"):
        plan("packages: {trl: ['1.0.0']}\nexclude: [{trl: '1.0.0'}]\n")


def test_include_adds_cells_that_pairwise_left_out():
    text = """
packages:
  a: ['1', '2', '3']
  b: ['1', '2', '3']
  c: ['1', '2', '3']
strategy: pairwise
"""
    pairwise = plan(text).cells
    assert len(pairwise) < 27
    missing = next(
        combo
        for combo in itertools.product("123", repeat=3)
        if all((c.pin("a"), c.pin("b"), c.pin("c")) != combo for c in pairwise)
    )
    rule = f"include: [{{a: '{missing[0]}', b: '{missing[1]}', c: '{missing[2]}'}}]\n"
    assert len(plan(text + rule).cells) == len(pairwise) + 1


def test_python_is_an_axis():
    cells = plan("python: ['3.11', '3.12']\npackages: {trl: ['1.16.0']}\n").cells
    assert [c.label for c in cells] == ["cpu-py3.11-trl1.16.0", "cpu-py3.12-trl1.16.0"]


def test_select_by_glob_and_unmatched_glob_shows_a_valid_label():
    cells = plan(TWO_BY_TWO).cells
    assert len(select_cells(cells, ["*-trl0.19*"])) == 2
    assert select_cells(cells, []) == list(cells)
    with pytest.raises(PlanError) as caught:
        select_cells(cells, ["trl0.19*"])
    assert str(caught.value) == (
        "no cell label matches 'trl0.19*'; labels look like "
        "'cpu-py3.11-torch2.13.0-tf4.57.6-trl0.19.1-novllm' (globs such as 'cpu-*-trl0.19*' work)"
    )


axes_strategy = st.lists(st.integers(min_value=1, max_value=4), min_size=2, max_size=5)


@settings(max_examples=60, deadline=None)
@given(sizes=axes_strategy)
def test_pairwise_covers_every_pair_and_stays_near_the_lower_bound(sizes):
    names = [f"p{i}" for i in range(len(sizes))]
    combos = [
        dict(zip(names, values, strict=True))
        for values in itertools.product(*(range(n) for n in sizes))
    ]
    chosen = cover_pairs(combos, names)
    for a, b in itertools.combinations(names, 2):
        needed = {(x[a], x[b]) for x in combos}
        assert needed == {(x[a], x[b]) for x in chosen}
    lower = sorted(sizes)[-1] * sorted(sizes)[-2]
    assert lower <= len(chosen) <= max(lower, int(lower * 1.3) + 1)


@settings(max_examples=40, deadline=None)
@given(sizes=axes_strategy, data=st.data())
def test_excluded_combinations_never_appear_and_full_has_all_others(sizes, data):
    axes = {f"p{i}": [f"{v}.0" for v in range(n)] for i, n in enumerate(sizes)}
    excluded_axis = data.draw(st.sampled_from(sorted(axes)))
    excluded_value = data.draw(st.sampled_from(axes[excluded_axis]))
    if len(axes[excluded_axis]) == 1:
        return  # excluding the only value leaves nothing: covered by its own test
    lines = ["packages:"] + [f"  {k}: {v!r}" for k, v in axes.items()]
    lines.append(f"exclude: [{{{excluded_axis}: '{excluded_value}'}}]")
    for strategy in ("full", "pairwise"):
        cells = plan("\n".join([*lines, f"strategy: {strategy}"])).cells
        assert all(c.pin(excluded_axis) != excluded_value for c in cells)
        if strategy == "full":
            total = 1
            for k, v in axes.items():
                total *= len(v) - (1 if k == excluded_axis else 0)
            assert len(cells) == total == len({c.id for c in cells})
