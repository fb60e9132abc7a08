"""Ordering version text as people read it, for every module that sorts versions.

Below both the report and the constraints files (each once imported the other's).
"""

from __future__ import annotations

import re

from packaging.version import InvalidVersion, Version

# Longer than any release's version (the longest on PyPI are local builds of ~40): a
# number of thousands of digits is no release, and Python will not even convert it.
LONGEST_VERSION = 200


def parse_version(text: str) -> Version:
    """``text`` as a Version, or InvalidVersion (a ValueError) for anything PEP 440 refuses
    and for text longer than LONGEST_VERSION: every version read from a user's input (a
    matrix, a freeze, a results.json) goes through here before anything compares it."""
    if len(text) > LONGEST_VERSION:
        raise InvalidVersion(
            f"{text[:20]!r}... ({len(text):,} characters) is longer than any version "
            f"(at most {LONGEST_VERSION})"
        )
    try:
        return Version(text)
    except InvalidVersion:
        raise
    except ValueError as exc:  # packaging lets int()'s own limits through
        raise InvalidVersion(f"{text[:20]!r}...: {exc}") from None


def too_long(text: str) -> str:
    """'' or, for text longer than any version, what to add to the error that refused it."""
    if len(text) <= LONGEST_VERSION:
        return ""
    return f" ({len(text):,} characters; a version has at most {LONGEST_VERSION})"


OLDEST_PYTHON = (3, 9)  # what the cell's plugin and a supported pytest run on
# A cell's Python as its label names it and uv finds it: 3.MINOR, or 3.MINOR.PATCH.
PYTHON_VERSION = re.compile(r"(\d)\.(\d{1,2})(?:\.\d{1,2})?")
PYTHON_RULE = (
    "a Python version as a cell label names it: 3, a dot and the minor (at most two "
    "digits), optionally a dot and the patch, such as 3.11"
)


def python_version_problem(text: str) -> str | None:
    """Why ``text`` is no Python a cell can run on (:data:`PYTHON_RULE`, 3.9 or newer), or
    None: one rule for matrix.yaml's python and FTMATRIX_PYTHON, so a label the one makes
    the other takes."""
    found = PYTHON_VERSION.fullmatch(text)
    if found is None or found.group(1) > "3":
        return f"{PYTHON_RULE}{too_long(text)}"
    if (int(found.group(1)), int(found.group(2))) < OLDEST_PYTHON:
        oldest = ".".join(map(str, OLDEST_PYTHON))
        return f"a cell's pytest and plugin need Python {oldest} or newer"
    return None


def shown(value: object, limit: int = 60) -> str:
    """``repr(value)``, cut to ``limit`` characters: an error line quotes a bad value."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def version_order(value: str) -> tuple[int, Version | str]:
    """A sort key: versions in version order (5.23.0 before 10.0.0), then other text."""
    try:
        return (0, parse_version(value))
    except InvalidVersion:
        return (1, value)
