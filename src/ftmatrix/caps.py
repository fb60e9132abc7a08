"""Declared caps: which upper bound of a package's requirements blocks a pin, and probes past it.

unsloth 2026.10.x declares ``trl<=1.15.0``: a cell with trl 1.16.0 cannot install,
although the code may well run (the pip cap may lag the runtime). A *cap probe*
installs such a cell anyway, with uv's override mechanism (``--override``: the
matrix's own pin replaces every declared requirement on that package), so the cases
can say whether the cap is justified.

Only a cap is ever overridden: an upper bound (``<``, ``<=``, a ``.*`` or ``~=``
series the pin is past) or an exclusion (``!=``). A lower bound (unsloth 2026.10.9
needs a certifi newer than the index has) or an exact pin (vllm 0.32.0 requires
``torch==2.13.0``: built against it) is not a cap, and a conflict between the
matrix's own pins is never probed. :func:`blocking_caps` is pure; where the
requirements come from (the index's metadata, PEP 658, or a wheel in a find-links
folder) is :func:`requires_dist`.
"""

from __future__ import annotations

import contextlib
import functools
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from packaging.markers import default_environment
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import Specifier
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from ftmatrix.cell.file_writes import write_atomically
from ftmatrix.cell.status import Status
from ftmatrix.config import InstallOptions
from ftmatrix.index import requires_dist
from ftmatrix.plan import IMPOSSIBLE, Cell, Plan
from ftmatrix.resolve import Resolution, cache_dir

# Operators whose violation by a newer version is a cap.
CAP_OPERATORS = ("<", "<=", "!=")


@dataclass(frozen=True, kw_only=True)
class Cap:
    """``declarer`` at ``declarer_version`` requires ``package`` ``specifier``, which the
    matrix's ``version`` of it is past."""

    declarer: str
    declarer_version: str
    package: str
    specifier: str
    version: str

    def describe(self) -> str:
        """``unsloth 2026.10.7: trl<=1.15.0``: the requirement a probe overrides."""
        return f"{self.declarer} {self.declarer_version}: {self.package}{self.specifier}"

    @property
    def override(self) -> str:
        """The override that lifts it: the matrix's own pin."""
        return f"{self.package}=={self.version}"


def blocking_caps(
    declarer: str,
    declarer_version: str,
    requirements: Sequence[str],
    pins: Mapping[str, str],
    *,
    python: str,
) -> list[Cap]:
    """The caps among ``declarer``'s ``requirements`` that the other ``pins`` are past.

    A requirement the pin violates only through upper bounds and exclusions is a cap;
    one it violates through a lower bound or an exact pin is not (nothing to probe:
    the pin is too old, or the package was built against one release).
    """
    environment = {k: str(v) for k, v in default_environment().items()}
    environment.update(python_version=python, extra="")
    wanted = {canonicalize_name(k): (k, v) for k, v in pins.items()}
    caps = []
    for text in requirements:
        requirement = _requirement(text)
        if requirement is None:
            continue
        name = canonicalize_name(requirement.name)
        if name == canonicalize_name(declarer) or name not in wanted:
            continue
        if requirement.marker is not None and not requirement.marker.evaluate(environment):
            continue
        package, pinned = wanted[name]
        try:
            version = Version(pinned)
        except InvalidVersion:
            continue
        violated = [s for s in requirement.specifier if not s.contains(version, prereleases=True)]
        if violated and all(_is_cap(s, version) for s in violated):
            caps.append(
                Cap(
                    declarer=declarer,
                    declarer_version=declarer_version,
                    package=package,
                    specifier=",".join(str(s) for s in violated),
                    version=pinned,
                )
            )
    return caps


@functools.cache
def _requirement(text: str) -> Requirement | None:
    """Parsed once: a package like vllm declares hundreds, asked of for every probe."""
    try:
        return Requirement(text)
    except InvalidRequirement:
        return None


def _is_cap(specifier: Specifier, version: Version) -> bool:
    """Is ``version`` outside ``specifier`` because it is too new (or excluded)?"""
    operator, bound = specifier.operator, specifier.version
    if operator in CAP_OPERATORS:
        return True
    if operator == "~=" or (operator == "==" and bound.endswith(".*")):
        # A series: capped when the version is past it, not when it is older.
        floor = Version(bound.removesuffix(".*"))
        return version > floor
    return False


def caps_of(
    pins: Mapping[str, str | None],
    lookup: Callable[[str, str], Sequence[str] | None],
    *,
    python: str,
) -> list[Cap]:
    """Every cap that one pinned package declares against another of ``pins``."""
    installed = {k: v for k, v in pins.items() if v is not None}
    caps: list[Cap] = []
    for package, version in installed.items():
        requirements = lookup(package, version)
        if requirements:
            others = {k: v for k, v in installed.items() if k != package}
            caps += blocking_caps(package, version, requirements, others, python=python)
    return caps


class RequiresLookup:
    """``lookup(package, version)``: its Requires-Dist, or None where no index has it."""

    def __init__(self, install: InstallOptions, env: Mapping[str, str]) -> None:
        self.install = install
        self.env = dict(env)

    @functools.cache  # noqa: B019 -- one lookup object per plan; it lives as long
    def __call__(self, package: str, version: str) -> tuple[str, ...] | None:
        # A release's metadata never changes: kept on disk beside the resolutions.
        path = cache_dir(self.env) / "requires" / f"{canonicalize_name(package)}-{version}.json"
        with contextlib.suppress(OSError, ValueError):
            return tuple(json.loads(path.read_text(encoding="utf-8")))
        found = requires_dist(package, version, self.install, self.env)
        if found is not None:
            with contextlib.suppress(OSError):
                write_atomically(path, json.dumps(list(found)))
        return found


# How many installable cells a blocked pair's probe may be built from, tried in order.
PROBE_BASES = 3


def plan_probes(
    plan: Plan,
    lookup: Callable[[str, str], Sequence[str] | None],
    resolve: Callable[[Sequence[Cell]], Sequence[Resolution]],
) -> list[Cell]:
    """Cap probes for a plan: a cell for each blocked pin set that installs past its caps.

    Pairwise plans probe each impossible pair that a cap alone blocks, in the first of a
    few planned cells holding the declaring package's version (the other axis moved to
    the capped version); full plans probe each uninstallable cell. A probe is kept only
    where uv resolves it with the caps overridden: a conflict that is not a cap (a lower
    bound, an exact pin, two of the matrix's own pins) still fails, and is never probed.
    """
    python = plan.matrix.python[0]
    tries: list[list[tuple[Cell, ...]]] = []  # per blocked item: candidate probes, in order
    if plan.covering is not None:
        for finding in plan.covering.of_kind(IMPOSSIBLE):
            pair = {k: v for k, v in finding.pins if k != "python"}
            declared = caps_of(pair, lookup, python=python)
            if declared:
                tries.append(_probes_from_bases(plan.cells, declared, lookup))
    else:
        answers = resolve(plan.cells)
        for cell, answer in zip(plan.cells, answers, strict=True):
            if answer.status is Status.UNINSTALLABLE:
                probe = _probe(cell, dict(cell.pins), lookup)
                if probe is not None:
                    tries.append([(probe,)])
    probes: list[Cell] = []
    for candidates in tries:
        for group in candidates:
            (answer,) = resolve(group[:1])
            if answer.lock is not None:
                probes += [p for p in group if p not in probes]
                break
    return probes


def _probes_from_bases(
    cells: Sequence[Cell], declared: Sequence[Cap], lookup: Callable[[str, str], Any]
) -> list[tuple[Cell, ...]]:
    """Probe cells built from the planned cells holding a cap's declarer, per pin set
    (with one probe per hardware class that pin set runs on)."""
    cap = declared[0]
    by_pins: dict[tuple[Any, ...], list[Cell]] = {}
    for cell in cells:
        pins = dict(cell.pins)
        if pins.get(cap.declarer) == cap.declarer_version and not cell.overrides:
            by_pins.setdefault((cell.python, cell.pins), []).append(cell)
    candidates = []
    for group in by_pins.values():
        probes = []
        for base in group:
            pins = {**dict(base.pins), **{c.package: c.version for c in declared}}
            probe = _probe(base, pins, lookup)
            if probe is not None:
                probes.append(probe)
        if probes:
            candidates.append(tuple(probes))
    # Bases that bring no cap of their own first: a probe should lift only the one it is for.
    candidates.sort(
        key=lambda probes: len(probes[0].overrides) + (probes[0].beyond_cap or "").count(";")
    )
    return candidates[:PROBE_BASES]


def _probe(
    base: Cell, pins: Mapping[str, str | None], lookup: Callable[[str, str], Any]
) -> Cell | None:
    declared = caps_of(pins, lookup, python=base.python)
    if not declared:
        return None
    return replace(
        base,
        pins=tuple((name, pins[name]) for name, _ in base.pins),
        overrides=tuple(sorted({c.override for c in declared})),
        beyond_cap="; ".join(sorted({c.describe() for c in declared})),
    )
