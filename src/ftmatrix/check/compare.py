"""A stack's versions against a cell's: the same release, older, how many releases apart,
under a derived constraint (pure).

A local label (``+cpu``) makes two versions differ only where both carry one; distance
counts releases among the versions the results tested, yours included.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from ftmatrix.check.stack import Stack
from ftmatrix.constraints import Constraint


@dataclass(frozen=True, kw_only=True)
class VersionChange:
    """One axis where a cell differs from the stack: yours -> the cell's."""

    package: str
    yours: str | None
    cell: str | None
    steps: int

    def text(self) -> str:
        return f"{self.package} {version_text(self.yours)} -> {version_text(self.cell)}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "package": self.package,
            "yours": self.yours,
            "cell": self.cell,
            "versions": self.steps,
        }


def constraint_applies(constraint: Constraint, stack: Stack) -> bool:
    """Do the stack's versions fall under the line (and every pin of its ``when``)?"""
    package = canonicalize_name(constraint.package)
    yours = stack.version(package)
    if not stack.knows(package) or yours is None:
        return False
    if constraint.kind == "exclude":
        hit = same_version(yours, constraint.versions[0])
    elif constraint.kind == "below":
        hit = public_version(yours) >= public_version(constraint.versions[0])
    else:
        hit = public_version(yours) <= public_version(constraint.versions[-1])
    return hit and all(
        stack.knows(name) and same_version(stack.version(name), version)
        for name, version in constraint.when
    )


def same_version(a: str | None, b: str | None) -> bool:
    """Equal versions; a local label (``+cpu``) counts only where both sides have one."""
    if a is None or b is None:
        return a is b
    try:
        va, vb = Version(a), Version(b)
    except InvalidVersion:
        return a == b
    if va.local is None or vb.local is None:
        return va.public == vb.public
    return va == vb


def public_version(text: str) -> Version:
    return Version(Version(text).public)


def is_older(a: str | None, b: str | None) -> bool:
    try:
        return a is not None and b is not None and public_version(a) < public_version(b)
    except InvalidVersion:
        return False


def releases_apart(yours: str | None, theirs: str | None, tested: set[str]) -> int:
    """Releases apart, among the versions tested on this axis and yours."""
    if yours is None or theirs is None:
        return 1  # installed against not installed: one step, whatever the version
    try:
        values = sorted({public_version(v) for v in tested} | {public_version(yours)})
        return abs(values.index(public_version(yours)) - values.index(public_version(theirs)))
    except (InvalidVersion, ValueError):
        return 1


def version_text(version: str | None) -> str:
    return "(not installed)" if version is None else version
