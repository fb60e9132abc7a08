"""Whether a version range can match any version at all (``>=2,<1`` cannot).

A range written backwards is a typo that would otherwise match nothing, silently: a known
issue that explains no failure, a proof with no boundary. Read from its bounds, as a
reader does: the highest lower bound against the lowest upper one, and an ``==`` that the
rest of the range excludes. Wildcards (``==1.*``) and ``!=`` narrow no bound here; a
range this cannot prove empty is taken as it is.
"""

from __future__ import annotations

from packaging.specifiers import Specifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from ftmatrix.versions import parse_version

Bound = tuple[Version, bool]  # (version, whether the bound itself is excluded)


def matches_no_version(spec: SpecifierSet) -> bool:
    """True where no version (pre-releases included) can satisfy every part of ``spec``."""
    lower: list[Bound] = []
    upper: list[Bound] = []
    for part in spec:
        if part.version.endswith(".*") or part.operator in ("!=", "==="):
            continue
        try:
            version = parse_version(part.version)
        except InvalidVersion:
            continue
        if part.operator == "==":
            return not spec.contains(version, prereleases=True)
        _add_bounds(part, version, lower, upper)
    if not lower or not upper:
        return False
    low, low_open = max(lower, key=lambda bound: (bound[0], bound[1]))
    high, high_open = min(upper, key=lambda bound: (bound[0], not bound[1]))
    return low > high or (low == high and (low_open or high_open))


def _add_bounds(part: Specifier, version: Version, lower: list[Bound], upper: list[Bound]) -> None:
    operator = part.operator
    if operator in (">=", ">", "~="):
        lower.append((version, operator == ">"))
    if operator in ("<=", "<"):
        upper.append((version, operator == "<"))
    if operator == "~=":  # ~=1.4.5 is >=1.4.5,<1.5 (its last part dropped, the next raised)
        release = parse_version(part.version).release[:-1]
        ceiling = (*release[:-1], release[-1] + 1)
        upper.append((parse_version(".".join(map(str, ceiling))), True))
