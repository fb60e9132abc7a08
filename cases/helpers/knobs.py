"""The knobs users turn, as axes of the contracts: one table per family, covered pairwise.

A contract that holds at one setting of each knob says nothing about the settings users
train with (label smoothing, ``modules_to_save``, tied embeddings, completion masks).
Each family declares its knobs once (:class:`Knob`: the values tried, the first being
the setting that changes nothing, and the releases that have the knob), and
:func:`knob_params` turns the table into pytest parameters: every pair of values of two
knobs occurs in some case (``ftmatrix.cell.covering``, the plan's own covering code), so
the cost grows with the pairs, not the product. A case takes the parameter as its
``setting`` (:class:`Setting`) and calls :meth:`Setting.require` first: where the
installed release lacks a knob the setting turns, the case is ``n/a`` with the reason.
The reference then computes what the setting means, independently of the trainer.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from typing import Any

import pytest

from ftmatrix.cell.api import not_applicable
from ftmatrix.cell.covering import cover_pairs


@dataclass(frozen=True)
class Knob:
    """A setting users turn: the values tried, and the releases that have it.

    ``values[0]`` is the setting that changes nothing (``0.0`` for label smoothing,
    ``False`` for a switch): a case may run at it on a release without the knob.
    ``exists`` is a PEP 440 specifier of ``package``'s releases that have the knob
    (empty: every release the case runs on).
    """

    name: str
    values: tuple[Any, ...]
    package: str = "transformers"
    exists: str = ""

    @property
    def off(self) -> Any:
        return self.values[0]


@dataclass(frozen=True)
class Setting:
    """One combination of knob values a case runs at (a pytest parameter's value)."""

    knobs: tuple[Knob, ...]
    values: tuple[tuple[str, Any], ...]

    def __getitem__(self, name: str) -> Any:
        return dict(self.values)[name]

    def __iter__(self) -> Iterator[tuple[str, Any]]:
        return iter(self.values)

    def turned(self) -> dict[str, Any]:
        """The knobs this setting turns away from their ``off`` value."""
        offs = {knob.name: knob.off for knob in self.knobs}
        return {name: value for name, value in self.values if value != offs[name]}

    def require(self) -> None:
        """``n/a`` unless the installed releases have every knob this setting turns."""
        from packaging.specifiers import SpecifierSet
        from packaging.version import Version

        turned = self.turned()
        for knob in self.knobs:
            if knob.name not in turned or not knob.exists:
                continue
            try:
                installed = metadata.version(knob.package)
            except metadata.PackageNotFoundError:
                installed = None
            if installed is None:
                not_applicable(f"{knob.name} needs {knob.package}, which is not installed")
            elif Version(installed) not in SpecifierSet(knob.exists):
                not_applicable(
                    f"{knob.package} {installed} has no {knob.name} "
                    f"(it exists in {knob.package}{knob.exists})"
                )

    @property
    def id(self) -> str:
        return "-".join(f"{name}={_shown(value)}" for name, value in self.values)


def knob_params(knobs: Sequence[Knob], *, marks: Mapping[str, Any] | None = None) -> list[Any]:
    """pytest parameters covering every pair of values of two knobs (all values of one).

    Each parameter's value is a :class:`Setting` and its id names every knob's value
    (``label_smoothing_factor=0.1-accumulation=2``), stable from run to run. ``marks``
    maps an id to marks for that parameter.
    """
    names = [knob.name for knob in knobs]
    if len(set(names)) != len(names):
        raise ValueError(f"a knob is named twice in {names}")
    product = [dict(zip(names, combo, strict=True)) for combo in _product(knobs)]
    chosen = cover_pairs(product, names)
    params = []
    for combo in chosen:
        setting = Setting(tuple(knobs), tuple((name, combo[name]) for name in names))
        params.append(pytest.param(setting, id=setting.id, marks=(marks or {}).get(setting.id, ())))
    return params


def _product(knobs: Sequence[Knob]) -> list[tuple[Any, ...]]:
    return list(itertools.product(*(knob.values for knob in knobs)))


def _shown(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return "+".join(_shown(v) for v in value) or "none"
    if value is None:
        return "none"
    return str(value).lower() if isinstance(value, bool) else str(value)
