"""Axes written as selectors become concrete versions, chosen from the package index.

A pure step between the config and the plan: ``releases(package)`` is passed in
(the index in production, a fixed list in tests), and the matrix that comes out
has only explicit versions, so plans, labels and ids depend on what the selector
resolved to. ``UV_EXCLUDE_NEWER`` (uv's own setting, also honoured by the index
reader) freezes what "newest" means, so a plan is reproducible.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from ftmatrix.config import Axis, ConfigError, Matrix, Selector


def select_versions(selector: Selector, released: Sequence[Version]) -> list[str]:
    """The versions ``selector`` picks from ``released``, oldest first."""
    candidates = sorted(v for v in set(released) if selector.prereleases or not v.is_prerelease)
    if selector.range:
        spec = SpecifierSet(selector.range)
        candidates = [v for v in candidates if spec.contains(v, prereleases=True)]
    # Local versions (2.13.0+cpu) are builds of a release, not releases of their own.
    public: dict[Version, Version] = {}
    for version in candidates:
        public.setdefault(Version(version.public), version)
    candidates = sorted(public)
    if selector.latest_minor is not None:
        newest_of_series: dict[tuple[int, int], Version] = {}
        for version in candidates:
            newest_of_series[(version.major, version.minor)] = version
        candidates = sorted(newest_of_series.values())[-selector.latest_minor :]
    if selector.latest is not None:
        candidates = candidates[-selector.latest :]
    return [str(v) for v in candidates]


def resolve_selectors(matrix: Matrix, releases: Callable[[str], Sequence[Version]]) -> Matrix:
    """``matrix`` with every selector axis replaced by the versions it picks."""
    axes: list[Axis] = []
    problems = []
    for axis in matrix.packages:
        if axis.selector is None:
            axes.append(axis)
            continue
        picked: list[str | None] = list(select_versions(axis.selector, releases(axis.package)))
        if not picked:
            problems.append(
                f"{matrix.source}: packages.{axis.package}: {axis.selector.describe()} "
                "matched no release on the index"
            )
            continue
        if axis.selector.include_none:
            picked.insert(0, None)
        axes.append(Axis(package=axis.package, versions=tuple(picked), selector=axis.selector))
    if problems:
        raise ConfigError(problems)
    return replace(matrix, packages=tuple(axes))


def check_released(matrix: Matrix, releases: Callable[[str], Sequence[Version]]) -> None:
    """A ConfigError naming every explicit version the index never had, with the closest."""
    problems = []
    for axis in matrix.packages:
        if axis.selector is not None:
            continue
        released = sorted(set(releases(axis.package)))
        public = {Version(v.public) for v in released}
        for index, version in enumerate(axis.versions):
            if version is None or Version(version) in public or Version(version) in released:
                continue
            closest = _neighbours(released, Version(version))
            hint = (
                f"closest released: {', '.join(str(v) for v in sorted(closest))}"
                if closest
                else "the index has no release of it"
            )
            problems.append(
                f"{matrix.source}: packages.{axis.package}[{index}]: {version!r} was never "
                f"released; {hint}"
            )
    if problems:
        raise ConfigError(problems)


def _neighbours(released: Sequence[Version], wanted: Version) -> list[Version]:
    """The releases just below and just above ``wanted`` (finals, unless it is a pre)."""
    pool = [v for v in released if wanted.is_prerelease or not v.is_prerelease] or list(released)
    below = [v for v in pool if v < wanted][-2:]
    above = [v for v in pool if v > wanted][:1]
    return below + above
