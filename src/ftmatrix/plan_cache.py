"""A plan kept for the noxfile, so that listing the sessions (``nox -l``) asks no network.

nox builds its session list, one ``matrix(LABEL)`` session per cell, each time it
imports the noxfile: for ``nox -l``, ``nox -s report`` and ``nox -s lint`` alike. A plan
that asked the network to be made (selectors resolved against the index, ``strategy:
pairwise`` covered with uv's answers, cap probes from the index's metadata) is kept
here by whatever made it (``ftmatrix plan``, ``run`` or ``ci-matrix``, ``nox -s plan``,
or the noxfile itself when it found none), and the noxfile lists the kept one while it
stands. A plan that asks nothing (explicit versions, ``strategy: full``) is not kept:
making it costs what reading it would.

What "the same index" can mean offline: an index cannot be asked cheaply whether it
changed, so the key holds everything the plan depends on this side of the network,
and the index's side is bounded by age:

- the matrix file's content (not its path), the profile, the Python of cells that name
  none, ftmatrix's version;
- every variable that chooses or freezes what the index and uv answer (``UV_INDEX_URL``,
  ``UV_DEFAULT_INDEX``, ``UV_EXTRA_INDEX_URL``, ``UV_FIND_LINKS``, ``UV_EXCLUDE_NEWER``, the
  other ``resolve.RESOLVER_ENV``, their ``PIP_*`` twins, ``UV_OFFLINE`` and
  ``FTMATRIX_HOST_PYTHON``), so another index or another date is another plan;
- its age: a kept plan stands for ``FTMATRIX_RESOLVE_TTL`` seconds (default 6 hours,
  the lifetime of the uv answers it is made of; 0: no plan is kept or read). Within
  that time a release published since is not listed; any plan step (``nox -s plan``)
  plans afresh and replaces the kept plan.

A plan holding an answer that is no proof (the resolver could not be reached) is never
kept, as the resolution cache keeps none. The cells are selected (``FTMATRIX_SELECT``,
``FTMATRIX_SHARD``) after reading, so the selection is no part of the key. A kept plan
that cannot be read, or whose cells no longer have the ids they were kept with, is
planned again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

from ftmatrix import __version__
from ftmatrix.cell.file_writes import write_atomically
from ftmatrix.config import Matrix
from ftmatrix.plan import UNRESOLVED, Cell, Covering, Plan, PlanFinding
from ftmatrix.resolve import RESOLVER_ENV, cache_dir, resolver_inputs
from ftmatrix.settings import Settings, resolve_ttl
from ftmatrix.system_packages import HOST_PYTHON_VARIABLE

# What chooses or freezes the index's and uv's answers, besides the matrix file.
PLAN_ENV = (
    *RESOLVER_ENV,
    "PIP_INDEX_URL",
    "PIP_EXTRA_INDEX_URL",
    "PIP_FIND_LINKS",
    "UV_OFFLINE",
    "PIP_NO_INDEX",
    HOST_PYTHON_VARIABLE,
)
FORMAT = 1  # of the kept file: another format is another key


def asked_the_network(plan: Plan) -> bool:
    """Did making ``plan`` (with the resolver) ask the index or uv anything?"""
    matrix = plan.matrix
    return (
        any(axis.selector for axis in matrix.packages)
        or matrix.strategy == "pairwise"
        or matrix.probe_caps
    )


def keep_plan(plan: Plan, settings: Settings, env: Mapping[str, str], *, now: datetime) -> None:
    """Keep ``plan`` (made with the resolver) for the noxfile's listing, where it is worth it."""
    unproven = plan.covering is not None and plan.covering.of_kind(UNRESOLVED)
    if resolve_ttl(env) <= 0 or not asked_the_network(plan) or unproven:
        return
    selected = {a.package: list(a.versions) for a in plan.matrix.packages if a.selector}
    document = {
        "at": now.timestamp(),
        "selected": selected,
        "cells": [cell.to_dict() for cell in plan.cells],
        "full_size": plan.full_size,
        "pairwise_lower_bound": plan.pairwise_lower_bound,
        "covering": None if plan.covering is None else _covering_dict(plan.covering),
    }
    with contextlib.suppress(OSError):  # a plan that cannot be kept is only made again
        write_atomically(_path(settings, env), json.dumps(document))


def kept_plan(
    settings: Settings, matrix: Matrix, env: Mapping[str, str], *, now: datetime
) -> Plan | None:
    """The plan kept for ``matrix`` (read from ``settings.matrix``), or None where none stands."""
    ttl = resolve_ttl(env)
    if ttl <= 0:
        return None
    try:
        document = json.loads(_path(settings, env).read_text(encoding="utf-8"))
        if now.timestamp() - float(document["at"]) > ttl:
            return None
        return _plan_of(document, matrix)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def plan_key(settings: Settings, env: Mapping[str, str]) -> str:
    """The kept plan's name: a hash of everything the plan depends on this side of the index."""
    material = {
        "format": FORMAT,
        "ftmatrix": __version__,
        "matrix": hashlib.sha256(settings.matrix.read_bytes()).hexdigest(),
        "profile": settings.profile,
        "python": settings.python,
        "env": resolver_inputs(env, PLAN_ENV),
    }
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:24]


def _path(settings: Settings, env: Mapping[str, str]) -> Path:
    return cache_dir(env) / "plans" / f"{plan_key(settings, env)}.json"


def _plan_of(document: Mapping[str, Any], matrix: Matrix) -> Plan | None:
    """The kept plan over ``matrix`` (selectors unresolved), or None where they disagree."""
    selected = document["selected"]
    if sorted(selected) != sorted(a.package for a in matrix.packages if a.selector):
        return None
    axes = tuple(
        replace(axis, versions=tuple(selected[axis.package])) if axis.selector else axis
        for axis in matrix.packages
    )
    cells = []
    for data in document["cells"]:
        cell = Cell.from_mapping(data)
        if cell.id != data["id"]:  # kept by another ftmatrix's notion of a cell
            return None
        cells.append(cell)
    covering = document["covering"]
    return Plan(
        matrix=replace(matrix, packages=axes),
        cells=tuple(cells),
        full_size=int(document["full_size"]),
        pairwise_lower_bound=int(document["pairwise_lower_bound"]),
        covering=None if covering is None else _covering_of(covering),
    )


def _covering_dict(covering: Covering) -> dict[str, Any]:
    return {
        "cells": [dict(combo) for combo in covering.cells],
        "findings": [
            {"kind": f.kind, "pins": [list(pin) for pin in f.pins], "reason": f.reason}
            for f in covering.findings
        ],
        "failed": [[dict(combo), reason] for combo, reason in covering.failed],
        "pairs_needed": covering.pairs_needed,
        "pairs_possible": covering.pairs_possible,
        "pairs_covered": covering.pairs_covered,
        "resolutions": covering.resolutions,
        "lower_bound": covering.lower_bound,
        "pair_table": [[list(pair), ok] for pair, ok in covering.pair_table],
    }


def _covering_of(data: Mapping[str, Any]) -> Covering:
    return Covering(
        cells=tuple(dict(combo) for combo in data["cells"]),
        findings=tuple(
            PlanFinding(
                kind=f["kind"], pins=tuple((k, v) for k, v in f["pins"]), reason=f["reason"]
            )
            for f in data["findings"]
        ),
        failed=tuple((dict(combo), reason) for combo, reason in data["failed"]),
        pairs_needed=data["pairs_needed"],
        pairs_possible=data["pairs_possible"],
        pairs_covered=data["pairs_covered"],
        resolutions=data["resolutions"],
        lower_bound=data["lower_bound"],
        pair_table=tuple(((a, x, b, y), bool(ok)) for (a, x, b, y), ok in data["pair_table"]),
    )
