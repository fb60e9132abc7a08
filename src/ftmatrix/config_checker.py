"""The problems of one matrix file, gathered so that all of them are reported in one pass."""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from typing import Any

from ftmatrix.errors import ConfigError


class Checker:
    """Collects problems so that all of them are reported in one pass."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.problems: list[str] = []

    def add(self, key_path: str, message: str) -> None:
        problem = f"{self.source}: {key_path}: {message}"
        # A value checked on two paths (a profile's overrides, then the merged file) is
        # still one problem for the user.
        if problem not in self.problems:
            self.problems.append(problem)

    def unknown_keys(self, mapping: Mapping[str, Any], allowed: Sequence[str], at: str) -> None:
        for key in mapping:
            if key in allowed:
                continue
            hint = difflib.get_close_matches(str(key), allowed, n=1)
            perhaps = f" Perhaps you meant {hint[0]!r}?" if hint else ""
            where = f"{at}.{key}" if at else str(key)
            self.add(where, f"unknown key; allowed: {', '.join(allowed)}.{perhaps}")

    def raise_if_any(self) -> None:
        if self.problems:
            raise ConfigError(self.problems)


def whole_number(
    checker: Checker, raw: Any, at: str, keys: tuple[str, ...], *, example: int, unit: str
) -> int | None:
    """A section holding one count ``keys[0]`` (>= 0, 0 meaning off); None when invalid."""
    key = keys[0]
    if not isinstance(raw, dict):
        checker.add(at, f"must be a mapping such as {{{key}: {example}}}, got {raw!r}")
        return None
    checker.unknown_keys(raw, keys, at)
    value = raw.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        checker.add(f"{at}.{key}", f"must be a whole number of {unit} >= 0 (0: off), got {value!r}")
        return None
    return value


def kind(value: Any) -> str:
    return "nothing" if value is None else f"a {type(value).__name__} ({value!r:.40})"
