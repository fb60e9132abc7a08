"""Ordering version text as people read it, for every module that sorts versions.

Below both the report and the constraints files (each once imported the other's).
"""

from __future__ import annotations

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
