"""Which cases run here: a case's markers against the cell's packages and the machine.

A case that needs a package version the cell lacks is ``n/a``; one that needs hardware the
machine lacks is ``skip``; an ``isolated`` case runs in a pytest of its own, an exclusive
one (marked so, or wanting GPUs) with the machine to itself. Decided from the installed
versions and the machine probe alone, without running anything of the case.

Runs inside each cell's environment (the results plugin): the standard library, pytest and
packaging only.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Mapping, Sequence
from importlib import metadata
from typing import Any

import pytest

from ftmatrix.cell.api import not_applicable
from ftmatrix.cell.gpu_lease import LEASE_VARIABLE, leased_devices
from ftmatrix.cell.hardware import probe_hardware, usable_gpu_count


def gate(item: pytest.Item) -> tuple[str, str] | None:
    """``("n/a", why)`` where the cell's packages lack the case's feature, ``("skip", why)``
    where the machine lacks its hardware, None where it runs: decided from the installed
    versions and the machine probe alone, without running anything of the case."""
    installed = cell_versions()
    for marker in item.iter_markers("requires_packages"):
        for package, spec in marker.kwargs.items():
            reason = package_gap(package, str(spec), installed)
            if reason:
                return ("n/a", reason)
    for marker in item.iter_markers("requires_hardware"):
        reason = hardware_gap(
            marker.kwargs, _fingerprint(item.config), lease=leased_devices(os.environ)
        )
        if reason:
            return ("skip", reason)
    return None


def marker_names(item: pytest.Item) -> frozenset[str]:
    """The names of ``item``'s markers, its own and those above it: one walk up the
    collection tree per case, not one per question asked of it."""
    names = _MARKER_NAMES.get(item)
    if names is None:
        names = _MARKER_NAMES[item] = frozenset(mark.name for mark in item.iter_markers())
    return names


_MARKER_NAMES: dict[pytest.Item, frozenset[str]] = {}  # this pytest's cases'


def forget_marker_names() -> None:
    """Look the markers up again: once every collection hook has run (a conftest's may add
    markers after the recorder's looked)."""
    _MARKER_NAMES.clear()


def asks(item: pytest.Item) -> bool:
    """Does ``item`` ask for package versions or hardware (:func:`gate` has a question)?"""
    return not _GATE_MARKERS.isdisjoint(marker_names(item))


_GATE_MARKERS = frozenset({"requires_packages", "requires_hardware"})


def is_exclusive(item: pytest.Item) -> bool:
    """Must the case have the machine to itself? Marked so, or it wants GPUs.

    A GPU is never shared between cases: two cases on one device would take each
    other's memory and time, and their ``oom`` and ``timeout`` would mean nothing.
    """
    names = marker_names(item)
    if "exclusive" in names:
        return True
    if "requires_hardware" not in names:
        return False
    for marker in item.iter_markers("requires_hardware"):
        if marker.kwargs.get("cuda") or int(marker.kwargs.get("gpus", 0)) > 0:
            return True
    return False


def package_gap(package: str, spec: str, installed: Mapping[str, str]) -> str | None:
    """Why ``package`` at its installed version lacks the feature, or None if it has it."""
    # Imported where a case asks for versions: packaging's modules cost every pytest of a
    # cell 8 ms to import, and most cases ask nothing of it.
    from packaging.specifiers import SpecifierSet  # noqa: PLC0415 -- see above
    from packaging.version import Version  # noqa: PLC0415 -- see above

    version = installed.get(canonicalize_name(package))
    if version is None:
        return f"{package} is not installed in this cell (needs {package}{spec})"
    if not SpecifierSet(spec).contains(Version(version), prereleases=True):
        return f"{package} {version} is outside {spec}"
    return None


def is_isolated(item: pytest.Item) -> bool:
    """Does the case run in a pytest process of its own?"""
    return "isolated" in marker_names(item)


def hardware_gap(
    needs: Mapping[str, Any],
    fingerprint: Mapping[str, Any],
    *,
    lease: Sequence[str] | None = None,
) -> str | None:
    """Why this machine cannot run a case needing ``needs``, or None if it can.

    ``lease``: the GPUs the runner leased the cell. The case's own process sees one
    of them; a case wanting ``gpus=N`` starts processes that see the whole lease,
    so N is checked against the lease, not against what this process sees.
    """
    visible = usable_gpu_count(fingerprint)
    wanted = int(needs.get("gpus", 1 if needs.get("cuda") else 0))
    if wanted and visible == 0:
        return f"needs {_gpus(wanted)}; this machine has no CUDA GPU"
    if wanted and lease is None and visible < wanted:
        return f"needs {_gpus(wanted)}; this machine has {_gpus(visible)}"
    if wanted and lease is not None and len(lease) < wanted:
        return f"needs {_gpus(wanted)}; the cell leased {_gpus(len(lease))} ({LEASE_VARIABLE})"
    minimum = needs.get("min_compute_capability")
    if minimum is not None:
        from packaging.version import Version  # noqa: PLC0415 -- as in package_gap

        devices = (fingerprint.get("torch") or {}).get("devices") or fingerprint.get("gpus", [])
        caps = [Version(str(d.get("compute_capability", "0"))) for d in devices]
        if not caps or min(caps) < Version(str(minimum)):
            have = ", ".join(str(c) for c in caps) or "none"
            return f"needs compute capability >= {minimum}; this machine has {have}"
    return None


def _gpus(count: int) -> str:
    return f"{count} CUDA GPU{'s' if count != 1 else ''}"


@functools.cache
def cell_versions() -> dict[str, str]:
    """:func:`_installed_versions` by canonical name, read once per pytest process: a
    cell's environment is fixed, and every case's gate (and the collection's) asks it."""
    canonical = {canonicalize_name(name): v for name, v in display_versions().items()}
    return dict(sorted(canonical.items(), key=lambda kv: kv[0].lower()))


@functools.cache
def display_versions() -> dict[str, str]:
    """:func:`_installed_versions` by display name, read once for the records and the
    gates alike (never changed: each reader copies it)."""
    return _installed_versions()


def _installed_versions() -> dict[str, str]:
    """Each distribution's version by its display name, as import finds it: the first copy
    along sys.path."""
    versions: dict[str, str] = {}
    seen = set()
    for dist in metadata.distributions():  # in sys.path order
        name, version = _name_and_version(dist)
        if not name or canonicalize_name(name) in seen:
            continue  # a later copy, shadowed by the first
        seen.add(canonicalize_name(name))
        versions[name] = version
    return dict(sorted(versions.items(), key=lambda kv: kv[0].lower()))


def _name_and_version(dist: metadata.Distribution) -> tuple[str | None, str]:
    """A distribution's ``Name`` and ``Version`` (``dist.metadata`` and ``dist.version``),
    read from its metadata's headers alone: each of those parses the whole file as an
    e-mail, long description and all (a cell of torch and transformers paid 0.1 s in
    every pytest process). The first of each header, as ``dist.metadata[...]`` gives."""
    # As importlib.metadata finds the file: a single-file .egg-info (distutils) is read("").
    text = dist.read_text("METADATA") or dist.read_text("PKG-INFO") or dist.read_text("") or ""
    found: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            break  # the headers end at the first empty line
        name, colon, value = line.partition(":")
        header = name.strip().lower()  # header names in any letter case, as e-mail's
        if colon and header in ("name", "version") and header not in found:
            found[header] = value.strip()
    return found.get("name") or None, found.get("version", "")


def canonicalize_name(name: str) -> str:
    """``name`` as PEP 503 normalizes it (packaging's ``canonicalize_name``, which imports
    packaging's platform tags with it)."""
    return _SEPARATORS.sub("-", name).lower()


_SEPARATORS = re.compile(r"[-_.]+")


def _fingerprint(config: pytest.Config) -> dict[str, Any]:
    cached: dict[str, Any] | None = getattr(config, "_ftmatrix_fingerprint", None)
    if cached is None:
        cached = probe_hardware(os.environ, with_torch=True)
        config._ftmatrix_fingerprint = cached  # type: ignore[attr-defined]
    return cached


class Gatekeeper:
    """Gates each case that asks, before it runs: n/a where the cell's packages lack its
    feature, skip where the machine lacks its hardware."""

    def __init__(self, asking: Sequence[pytest.Item]) -> None:
        self.asking = set(asking)

    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        if item not in self.asking:
            return
        gated = gate(item)
        if gated is not None and gated[0] == "n/a":
            not_applicable(gated[1])
        if gated is not None:
            pytest.skip(gated[1])
