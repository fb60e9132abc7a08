"""The secrets a case set while it ran, heard as it set them.

A case that sets a secret-named variable and takes it back before its record is made
(pytest's ``monkeypatch``, ``mock.patch.dict(os.environ, ...)``) leaves no trace of it in
the environment the record is masked for: its value, in an assertion's message, reached
the published page. Python's audit hook on ``os.putenv`` (which every write to
``os.environ`` makes) hears each value as it is set. Standard library only (runs inside
cells); the values are kept in this process's memory alone, never written.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

# At most this many distinct values are kept: a case setting secrets in a loop must not
# make every record's masking slower without end.
KEPT = 256
_heard: dict[tuple[str, str], None] = {}  # (name, value), in the order they were set
_listening: list[bool] = []


def listen(is_secret: Callable[[str, str], bool]) -> None:
    """From now on, keep every (name, value) set in the environment that ``is_secret``
    calls one (once per process: an audit hook cannot be taken back)."""
    if _listening:
        return
    _listening.append(True)

    def hear(event: str, args: tuple[Any, ...]) -> None:
        if event != "os.putenv" or len(_heard) >= KEPT:
            return
        try:
            name, value = (os.fsdecode(a) if isinstance(a, bytes) else str(a) for a in args)
            if is_secret(name, value):
                _heard[(name, value)] = None
        except Exception:  # a hook that raised would fail the case's own write
            return

    sys.addaudithook(hear)


def heard() -> tuple[tuple[str, str], ...]:
    """The secret (name, value) pairs set since :func:`listen`, oldest first."""
    return tuple(_heard)
