"""Ordering version text as people read it, for every module that sorts versions.

Below both the report and the constraints files (each once imported the other's).
"""

from __future__ import annotations

from packaging.version import InvalidVersion, Version


def version_order(value: str) -> tuple[int, Version | str]:
    """A sort key: versions in version order (5.23.0 before 10.0.0), then other text."""
    try:
        return (0, Version(value))
    except InvalidVersion:
        return (1, value)
