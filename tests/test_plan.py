"""Expanding a matrix into cells: labels, ids, strategies, rules, selection."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ftmatrix.config import parse_matrix
from ftmatrix.plan import (
    Cell,
    Installability,
    PlanError,
    cover_installable,
    cover_pairs,
    plan_cells,
    select_cells,
)


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


# -- Covering what installs, with an oracle in place of uv -------------------------------


class TableOracle:
    """Installability from a table: values that install with nothing, impossible pairs and
    triples (a conflict only three pins make); counts what it is asked."""

    def __init__(self, bad_values=(), bad_pairs=(), bad_triples=()):
        self.bad_values = set(bad_values)
        self.bad_sets = [frozenset(p) for p in bad_pairs] + [frozenset(t) for t in bad_triples]
        self.asked = 0

    def installs(self, pins) -> bool:
        items = {(k, v) for k, v in pins.items() if v is not None}
        return not (items & self.bad_values) and not any(s <= items for s in self.bad_sets)

    def __call__(self, queries):
        self.asked += len(queries)
        return [
            Installability(
                installable=ok, reason=None if ok else f"conflict in {sorted(q.items())}"
            )
            for q in queries
            for ok in [self.installs(q)]
        ]


@st.composite
def installability_problems(draw):
    sizes = draw(st.lists(st.integers(min_value=1, max_value=4), min_size=2, max_size=5))
    names = [f"p{i}" for i in range(len(sizes))]
    values = {
        n: ([None] if draw(st.booleans()) else []) + [f"{k}.0" for k in range(size)]
        for n, size in zip(names, sizes, strict=True)
    }
    items = [(n, v) for n in names for v in values[n] if v is not None]
    pairs = [(x, y) for x, y in itertools.combinations(items, 2) if x[0] != y[0]]
    share = draw(st.sampled_from([0.0, 0.1, 0.3, 0.5]))
    rng = draw(st.randoms(use_true_random=False))
    bad_pairs = [p for p in pairs if rng.random() < share]
    bad_values = [i for i in items if rng.random() < share / 4]
    triples = [t for t in itertools.combinations(items, 3) if len({x[0] for x in t}) == 3]
    bad_triples = [t for t in triples if rng.random() < share / 10]
    return names, values, TableOracle(bad_values, bad_pairs, bad_triples)


@settings(max_examples=150, deadline=None)
@given(problem=installability_problems())
def test_every_pair_that_can_install_is_covered_by_an_installable_cell(problem):
    names, values, oracle = problem
    combos = [dict(zip(names, combo, strict=True)) for combo in itertools.product(*values.values())]
    covering = cover_installable(combos, names, oracle)
    cells = [dict(c) for c in covering.cells]
    varying = [n for n in names if len(values[n]) > 1]
    # Every cell installs, and holds no pair the oracle refuses.
    for cell in cells:
        assert oracle.installs(cell)
        for a, b in itertools.combinations(names, 2):
            assert oracle.installs({a: cell[a], b: cell[b]})
    if not varying:
        return
    # The pairs that occur in some installable combination: exactly those covered.
    reachable = {
        (a, c[a], b, c[b])
        for c in combos
        if oracle.installs(c)
        for a, b in itertools.combinations(varying, 2)
    }
    covered = {(a, c[a], b, c[b]) for c in cells for a, b in itertools.combinations(varying, 2)}
    assert covered == reachable
    # Every pair left out is a finding: impossible alone, a value that installs with
    # nothing, or one that co-installs in no combination that installs.
    found = {f.pins for f in covering.findings}
    for a, b in itertools.combinations(varying, 2):
        for va in values[a]:
            for vb in values[b]:
                pair = (a, va, b, vb)
                if pair in covered:
                    continue
                assert ((a, va), (b, vb)) in found or ((a, va),) in found or ((b, vb),) in found, (
                    pair
                )
    assert covering.pairs_covered == len(covered)
    assert covering.resolutions <= oracle.asked


def test_an_impossible_pair_is_a_finding_and_none_pairs_with_what_installs():
    combos = [
        {"torch": t, "vllm": v, "trl": r}
        for t in ("2.13.0", "2.14.1")
        for v in (None, "0.32.0")
        for r in ("1.0", "2.0")
    ]
    oracle = TableOracle(bad_pairs=[(("vllm", "0.32.0"), ("torch", "2.14.1"))])
    covering = cover_installable(combos, ["torch", "vllm", "trl"], oracle)
    assert [(f.kind, f.describe()) for f in covering.findings] == [
        ("impossible", "torch 2.14.1 x vllm 0.32.0")
    ]
    assert {c["vllm"] for c in covering.cells} == {None, "0.32.0"}
    assert all(oracle.installs(c) for c in covering.cells)
    # 5 values alone (none is never asked), 8 pairs of installed values, then the
    # cells: 5, the fewest (vllm 0.32.0 only with torch 2.13.0, and torch 2.13.0 without
    # it); the 3 cells without vllm ask what a pair asked (none pins nothing).
    assert len(covering.cells) == 5
    assert covering.resolutions == 5 + 8 + 2
    assert (covering.pairs_possible, covering.pairs_covered) == (11, 11)


def test_a_conflict_of_three_pins_is_covered_around():
    combos = [{"a": a, "b": b, "c": c} for a in ("1", "2") for b in ("1", "2") for c in ("1", "2")]
    oracle = TableOracle(bad_triples=[(("a", "1"), ("b", "1"), ("c", "1"))])
    covering = cover_installable(combos, ["a", "b", "c"], oracle)
    assert not covering.findings
    assert covering.pairs_covered == covering.pairs_possible == 12
    assert all(oracle.installs(c) for c in covering.cells)
