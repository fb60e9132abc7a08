"""The knob tables of the cases: pairwise parameters, stable ids, n/a where a knob is absent.

Fast tier: cases/helpers/knobs.py needs pytest and ftmatrix.cell only (no torch).
"""

from __future__ import annotations

import importlib.util
import itertools
import sys
from pathlib import Path
from types import ModuleType

import pytest

from ftmatrix.cell.api import NotApplicable

ROOT = Path(__file__).parent.parent


def load_knobs() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "helpers.knobs", ROOT / "cases" / "helpers" / "knobs.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["helpers.knobs"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


knobs = load_knobs()
TABLE = (
    knobs.Knob("label_smoothing_factor", (0.0, 0.1)),
    knobs.Knob("accumulation", (1, 2, 4)),
    knobs.Knob("family", ("llama", "gpt2")),
    knobs.Knob("loss_func", (False, True), exists=">=4.46"),
)


def test_every_pair_of_values_of_two_knobs_occurs_in_fewer_cases_than_the_product() -> None:
    params = knobs.knob_params(TABLE)
    settings = [p.values[0] for p in params]
    for a, b in itertools.combinations(TABLE, 2):
        seen = {(s[a.name], s[b.name]) for s in settings}
        assert seen == set(itertools.product(a.values, b.values)), (a.name, b.name)
    assert len(params) < 2 * 3 * 2 * 2


def test_ids_name_every_knob_and_are_stable() -> None:
    first = [p.id for p in knobs.knob_params(TABLE)]
    assert first == [p.id for p in knobs.knob_params(TABLE)]
    assert len(set(first)) == len(first)
    assert all(i.count("=") == len(TABLE) for i in first)
    assert "label_smoothing_factor=0.1" in " ".join(first)


def test_a_single_knob_gives_each_of_its_values() -> None:
    ids = [p.id for p in knobs.knob_params(TABLE[:1])]
    assert ids == ["label_smoothing_factor=0.0", "label_smoothing_factor=0.1"]


def test_a_setting_turning_a_knob_the_release_lacks_is_not_applicable_with_the_reason() -> None:
    setting = knobs.Setting(
        (knobs.Knob("speed", (False, True), package="pytest", exists=">=999"),),
        (("speed", True),),
    )
    with pytest.raises(
        NotApplicable, match=r"pytest \S+ has no speed \(it exists in pytest>=999\)"
    ):
        setting.require()


def test_a_setting_at_the_knobs_off_value_runs_on_a_release_without_it() -> None:
    setting = knobs.Setting(
        (knobs.Knob("speed", (False, True), package="pytest", exists=">=999"),),
        (("speed", False),),
    )
    setting.require()
    assert setting.turned() == {}


def test_a_knob_of_a_package_not_installed_is_not_applicable() -> None:
    setting = knobs.Setting(
        (knobs.Knob("kto", (False, True), package="no-such-distribution", exists=">=1"),),
        (("kto", True),),
    )
    with pytest.raises(NotApplicable, match="needs no-such-distribution, which is not installed"):
        setting.require()
