"""The secrets a case set while it ran, heard as it set them.

A case that sets a secret-named variable and takes it back before its record is made
(pytest's ``monkeypatch``, ``mock.patch.dict(os.environ, ...)``) leaves no trace of it in
the environment the record is masked for: its value, in an assertion's message, reached
the published page. Every write to ``os.environ`` calls the ``os`` module's ``putenv``
(``os.environ[name] = value``, ``update``, ``setdefault``, and so ``monkeypatch`` and
``mock.patch.dict``), so a ``putenv`` that also keeps the secret ones hears each value as
it is set. (An audit hook on ``os.putenv`` hears them too, but Python calls it for every
audited event: 4% of a trivial case's instructions, measured; each name's answer is
remembered, as pytest sets PYTEST_CURRENT_TEST six times a case.) Standard library
only (runs inside cells); the values are kept in this process's memory alone, never
written.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Any

# The newest this many distinct values are kept (the oldest let go): a case setting a new
# secret each time must not make every record's masking slower without end, and a value
# set since is always kept (a record is made at its case's end).
KEPT = 64
_heard: dict[tuple[str, str], None] = {}  # (name, value), in the order they were set
_changes = [0]  # how many times a value was added: a redactor of fewer is out of date
_listening: list[bool] = []


def listen(is_secret: Callable[[str, str], bool], name_pattern: re.Pattern[str]) -> None:
    """From now on, keep every (name, value) set in the environment that ``is_secret``
    calls one (once per process). ``name_pattern``: what a secret's name holds, looked
    for first."""
    if _listening:
        return
    _listening.append(True)
    named: dict[Any, bool] = {}  # each name's answer (pytest sets the same ones each case)

    def putenv_heard(name: Any, value: Any, putenv: Any = os.putenv) -> None:
        putenv(name, value)
        secret_name = named.get(name)
        if secret_name is None:
            if len(named) > KEPT:
                named.clear()
            text = _text(name)
            secret_name = named[name] = name_pattern.search(text) is not None
        if secret_name:
            text, shown = _text(name), _text(value)
            if is_secret(text, shown):
                if (text, shown) not in _heard:
                    _changes[0] += 1
                _heard.pop((text, shown), None)  # the newest last
                _heard[(text, shown)] = None
                while len(_heard) > KEPT:
                    del _heard[next(iter(_heard))]

    os.putenv = putenv_heard


def _text(value: Any) -> str:
    return os.fsdecode(value) if isinstance(value, bytes) else str(value)


def changes() -> int:
    """How many times a value was added to :func:`heard`: it changed when this did."""
    return _changes[0]


def heard() -> tuple[tuple[str, str], ...]:
    """The secret (name, value) pairs set since :func:`listen`, oldest first."""
    return tuple(_heard)
