"""The matrix as data: what matrix.yaml means once read and checked (``ftmatrix.config``
reads and checks it). Frozen, keyword-only dataclasses and the keys each section allows;
no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

NOT_INSTALLED = "none"
"""The axis value meaning: this package is not installed in the cell."""

STRATEGIES = ("full", "pairwise")
TOP_LEVEL_KEYS = (
    "packages",
    "python",
    "support",
    "strategy",
    "exclude",
    "include",
    "cases",
    "timeouts",
    "limits",
    "install",
    "hardware",
    "bisect",
    "reuse",
    "probe-caps",
    "profiles",
    "default-profile",
)
PROFILE_KEYS = tuple(k for k in TOP_LEVEL_KEYS if k not in ("profiles", "default-profile"))
INSTALL_KEYS = ("find-links", "index-url", "extra-index-urls", "system-packages")
TIMEOUT_KEYS = ("case", "cell")
LIMIT_KEYS = ("memory-gib", "workers", "cells")
# pytest-xdist processes in one cell, or cells at once: more than any runner has CPUs
MAX_WORKERS = 256
HARDWARE_KEYS = ("runs-on", "gpus", "gpu-name")
BISECT_KEYS = ("budget",)
REUSE_KEYS = ("max-age-days",)
# Keys every rule of `exclude` / `include` may name besides packages.
RULE_EXTRA_KEYS = ("python", "hardware")
DEFAULT_HARDWARE = {"cpu": {"runs-on": ["ubuntu-latest"], "gpus": 0}}
# What a hardware class or profile may be called: its name reaches cell labels, nox
# session names, CI job names and the comma-separated globs that select cells, where a
# comma, a glob character, a slash or a space would make a label that cannot select itself.
PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
PLAIN_NAME_RULE = (
    "text of letters, digits, '.', '_' and '-' (at most 64, starting with a letter or "
    "digit), such as 'gpu-h100' or 'nightly'; quote a name YAML reads as a number or a date"
)


def is_plain_name(value: object) -> bool:
    """Is ``value`` text that :data:`PLAIN_NAME` allows?"""
    return isinstance(value, str) and PLAIN_NAME.fullmatch(value) is not None


@dataclass(frozen=True, kw_only=True)
class Selector:
    """Versions chosen from the package index at plan time.

    ``latest``: the newest N releases; ``latest_minor``: the newest patch of each of
    the newest N minor series; ``range``: only releases inside a specifier; with
    ``prereleases`` pre-releases count too.
    """

    latest: int | None = None
    latest_minor: int | None = None
    range: str | None = None
    prereleases: bool = False
    include_none: bool = False

    def describe(self) -> str:
        parts = []
        if self.latest is not None:
            parts.append(f"latest: {self.latest}")
        if self.latest_minor is not None:
            parts.append(f"latest-minor: {self.latest_minor}")
        if self.range:
            parts.append(f"range: {self.range!r}")
        if self.prereleases:
            parts.append("prereleases: true")
        if self.include_none:
            parts.append("none: true")
        return "{" + ", ".join(parts) + "}"


SELECTOR_KEYS = ("latest", "latest-minor", "range", "prereleases", "none")


@dataclass(frozen=True, kw_only=True)
class Axis:
    """One package and the versions the matrix tries; ``None`` means not installed.

    An axis written as a selector has no versions until the plan resolves it
    against the index (:func:`ftmatrix.version_selectors.resolve_selectors`).
    """

    package: str
    versions: tuple[str | None, ...]
    selector: Selector | None = None


@dataclass(frozen=True, kw_only=True)
class HardwareClass:
    """A kind of machine: the runner labels that reach it and what it has."""

    name: str
    runs_on: tuple[str, ...]
    gpus: int = 0
    # A pattern the GPUs' names must match (``H100``): without it, any GPU stands for the
    # class, and an H200 would be recorded under a class named h100.
    gpu_name: str | None = None


@dataclass(frozen=True, kw_only=True)
class InstallOptions:
    """Where packages come from, beyond uv's own configuration and ``UV_*`` variables."""

    find_links: tuple[str, ...] = ()
    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()
    # The host's own distributions the cell takes as installed (system_packages.py):
    # ("*",) for `true`, names or globs for a list, () for none.
    system_packages: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "find-links": list(self.find_links),
            "index-url": self.index_url,
            "extra-index-urls": list(self.extra_index_urls),
        }
        if self.system_packages:
            data["system-packages"] = list(self.system_packages)
        return data


@dataclass(frozen=True, kw_only=True)
class Timeouts:
    """Seconds a single case, and a whole cell, may run."""

    case: float = 600.0
    cell: float = 3600.0


@dataclass(frozen=True, kw_only=True)
class Limits:
    """Resources a cell's cases may use; past them a case is recorded as ``oom``.

    ``memory_gib`` None means 90% of the machine's memory (shared among the cells that
    run at once), checked at run time. ``workers`` is how many pytest-xdist workers
    share the cell's cases: 1 runs them one after another, ``"auto"`` one worker per
    CPU. ``cells`` is how many cells run side by side (nox's parallel sessions):
    ``"auto"`` one per CPU, at most the cells selected.
    """

    memory_gib: float | None = None
    workers: int | Literal["auto"] = 1
    cells: int | Literal["auto"] = "auto"


@dataclass(frozen=True, kw_only=True)
class BisectOptions:
    """Automatic bisection after a run (``python -m ftmatrix autobisect``).

    ``budget``: the most cells all of one night's searches may build; 0 turns it off.
    """

    budget: int = 0


@dataclass(frozen=True, kw_only=True)
class ReuseOptions:
    """Result reuse (ftmatrix.reuse): a cell whose lock, cases and hardware are unchanged
    since its newest run is not run again, for at most ``max_age_days``; 0 turns it off."""

    max_age_days: int = 0


@dataclass(frozen=True, kw_only=True)
class Rule:
    """An exclude or include rule: key -> pattern (version, wildcard, specifier or name)."""

    index: int
    match: Mapping[str, str]


@dataclass(frozen=True, kw_only=True)
class Matrix:
    """A validated matrix file with its profile applied."""

    source: str
    profile: str | None
    packages: tuple[Axis, ...]
    python: tuple[str, ...]
    support: tuple[str, ...] = ()
    strategy: str = "full"
    exclude: tuple[Rule, ...] = ()
    include: tuple[Rule, ...] = ()
    cases: tuple[str, ...] = ()
    timeouts: Timeouts = field(default_factory=Timeouts)
    limits: Limits = field(default_factory=Limits)
    install: InstallOptions = field(default_factory=InstallOptions)
    hardware: tuple[HardwareClass, ...] = ()
    bisect: BisectOptions = field(default_factory=BisectOptions)
    reuse: ReuseOptions = field(default_factory=ReuseOptions)
    # Cells that cannot install only because of a declared cap also run past it, as
    # probes installed with uv's overrides (ftmatrix.caps).
    probe_caps: bool = False
