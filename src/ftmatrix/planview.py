"""A plan shown: one line per cell for people, the JSON form for machines, the findings.

``ftmatrix plan`` (and ``nox -s plan``) print :func:`print_plan` or :func:`plan_json`;
the installability findings of a pairwise plan are kept beside a run's records
(:func:`write_installability`) for the report.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from ftmatrix.cell.file_writes import write_atomically
from ftmatrix.cell.redact import Redactor
from ftmatrix.cell.status import Status
from ftmatrix.interpreters import SOURCE, Interpreter, find_interpreters
from ftmatrix.messages import conflict_summary
from ftmatrix.pipeline import Loaded, plan_reuse, resolve_cells
from ftmatrix.plan import CANNOT_INSTALL, IMPOSSIBLE, NO_CELL, UNRESOLVED, Plan
from ftmatrix.report.installability import INSTALLABILITY_FILE
from ftmatrix.resolve import Resolution
from ftmatrix.reuse import Decision


def plan_json(
    loaded: Loaded, env: Mapping[str, str], *, now: datetime | None = None
) -> dict[str, Any]:
    """The machine form of the plan (documented in README.md), each cell resolved."""
    matrix = loaded.matrix
    resolutions = resolve_cells(loaded.selected, matrix.install, env, matrix.limits)
    decisions = plan_reuse(loaded, resolutions, now=now or datetime.now(UTC))
    runs_on = {h.name: list(h.runs_on) for h in matrix.hardware}
    found = interpreters_of(loaded, env)
    return {
        "matrix": matrix.source,
        "profile": matrix.profile,
        "strategy": matrix.strategy,
        "full_size": loaded.plan.full_size,
        "pairwise_lower_bound": loaded.plan.pairwise_lower_bound,
        "selectors": {
            axis.package: {
                "selector": axis.selector.describe(),
                "versions": [v or "none" for v in axis.versions],
            }
            for axis in matrix.packages
            if axis.selector is not None
        },
        "cells": [
            {
                **cell.to_dict(),
                "session": f"matrix({cell.label})",
                "runs_on": runs_on[cell.hardware],
                "installable": resolution.lock is not None,
                "lock_id": resolution.lock_id,
                "reason": resolution.reason,
                "reuse": decision.to_dict(),
                # The interpreter its venv is made from here; null: this machine has none.
                "interpreter": found[cell.python].path if cell.python in found else None,
            }
            for cell, resolution, decision in zip(
                loaded.selected, resolutions, decisions, strict=True
            )
        ],
        **installability_json(loaded.plan),
        "interpreters": {
            "source": SOURCE,
            "found": {version: i.path for version, i in found.items()},
        },
    }


def interpreters_of(loaded: Loaded, env: Mapping[str, str]) -> dict[str, Interpreter]:
    """The interpreter of each Python the selected cells run, as the cells find them
    ({} where they take the host's: install.system-packages)."""
    if loaded.matrix.install.system_packages:
        return {}
    return find_interpreters({c.python for c in loaded.selected}, env)


def show_plan(
    loaded: Loaded, env: Mapping[str, str], *, now: datetime, resolve: bool, out: TextIO
) -> None:
    """The human form, each cell resolved (with ``resolve``) and, with reuse on, whether it
    runs or reuses its newest results."""
    matrix = loaded.matrix
    resolutions = (
        resolve_cells(loaded.selected, matrix.install, env, matrix.limits) if resolve else None
    )
    decisions = (
        plan_reuse(loaded, resolutions, now=now)
        if resolutions is not None and loaded.reuse_days
        else None
    )
    # Which interpreters the cells have here, with the resolved plan (the quick one,
    # --no-resolve, asks nothing of the machine).
    interpreters = interpreters_of(loaded, env) if resolve else None
    print_plan(loaded, out, resolutions, decisions, interpreters)


def installability_json(plan: Plan) -> dict[str, Any]:
    """What the installability-aware covering found: pairs that cannot co-install (with
    uv's reason), values that install with nothing, and how much of the pairs is covered."""
    covering = plan.covering
    if covering is None:
        return {"impossible_pairs": []}

    def of(kind: str) -> list[dict[str, Any]]:
        return [f.to_dict() for f in covering.of_kind(kind)]

    return {
        "impossible_pairs": of(IMPOSSIBLE),
        "uninstallable_values": of(CANNOT_INSTALL),
        "uncovered_pairs": of(NO_CELL),
        "unresolved": of(UNRESOLVED),
        "pairs": [[*pair, ok] for pair, ok in covering.pair_table],
        "covering": {
            "pairs_needed": covering.pairs_needed,
            "pairs_possible": covering.pairs_possible,
            "pairs_covered": covering.pairs_covered,
            "resolutions": covering.resolutions,
            "lower_bound": covering.lower_bound,
            "failed_cells": [
                {"pins": dict(combo), "reason": reason} for combo, reason in covering.failed
            ],
        },
    }


def write_installability(
    out: Path, run_id: str, plan: Plan, env: Mapping[str, str] | None = None
) -> None:
    """Keep the plan's installability findings beside the run's records, for the report:
    redacted for ``env`` as a record is (uv's reasons may name an index URL or a path that
    holds a token), since the report publishes them."""
    if plan.covering is not None:
        document = {"matrix": plan.matrix.source, **installability_json(plan)}
        document = Redactor(env or {}).data(document)
        write_atomically(
            out / "records" / run_id / INSTALLABILITY_FILE, json.dumps(document, indent=1)
        )


def print_plan(
    loaded: Loaded,
    out: TextIO,
    resolutions: Sequence[Resolution] | None = None,
    decisions: Sequence[Decision] | None = None,
    interpreters: Mapping[str, Interpreter] | None = None,
) -> None:
    """The human form: one line per cell (with its installability when resolved, and
    whether it runs or is reused when reuse is on), then counts, then the interpreters
    the cells' venvs are made from (a cell whose Python this machine lacks cannot start)."""
    matrix = loaded.matrix
    profile = f", profile {matrix.profile}" if matrix.profile else ""
    out.write(f"{matrix.source}: strategy {matrix.strategy}{profile}\n")
    width = max((len(c.label) for c in loaded.selected), default=10)
    verdicts: Counter[str] = Counter()
    for index, cell in enumerate(loaded.selected):
        pins = " ".join(f"{k}=={v}" if v else f"{k}:none" for k, v in cell.pins)
        if cell.beyond_cap:
            pins += f" (probe past {cell.beyond_cap})"
        line = f"  {cell.label:<{width}}  {cell.id}  {pins}"
        if resolutions is not None:
            resolution = resolutions[index]
            verdict = "installable" if resolution.lock else resolution.status.value  # type: ignore[union-attr]
            verdicts[verdict] += 1
            why = ""
            if resolution.status is Status.UNINSTALLABLE:
                why = conflict_summary(resolution.reason or "")
            elif resolution.reason:
                why = resolution.reason.strip().splitlines()[-1]
            line += f"  {verdict}" + (f": {why}" if why else "")
        if decisions is not None:
            decision = decisions[index]
            verdicts["reused" if decision.reuse else "to run"] += 1
            line += f"  [{decision.describe()}]"
        out.write(line + "\n")
    total = len(loaded.plan.cells)
    counts = "; " + ", ".join(f"{n} {v}" for v, n in sorted(verdicts.items())) if verdicts else ""
    out.write(
        f"{len(loaded.selected)} cells selected (of {total} planned with strategy "
        f"{matrix.strategy}; the full product has {loaded.plan.full_size}){counts}\n"
    )
    print_interpreters(loaded, interpreters or {}, out)
    print_findings(loaded.plan, out)


def print_interpreters(
    loaded: Loaded, interpreters: Mapping[str, Interpreter], out: TextIO
) -> None:
    """The Pythons this machine lacks and the cells that cannot start for it (where each
    Python comes from is in ``--json``: ``interpreters``)."""
    for found in interpreters.values():
        if found.missing:
            cells = sum(1 for c in loaded.selected if c.python == found.version)
            out.write(f"{cells} cell(s) cannot start here: {found.missing}\n")


# How the plan table heads each kind of finding.
FINDING_HEADINGS = (
    (CANNOT_INSTALL, "installs with nothing (a finding, not a cell)"),
    (IMPOSSIBLE, "cannot co-install, whatever else is chosen (findings, not cells)"),
    (NO_CELL, "co-install alone, but in no combination that installs"),
    (UNRESOLVED, "the resolver gave no answer, after retries"),
)


def print_findings(plan: Plan, out: TextIO) -> None:
    """The installability-aware covering's findings, after the cells: one line each."""
    covering = plan.covering
    if covering is None:
        return
    out.write(
        f"pairs covered: {covering.pairs_covered} of {covering.pairs_possible} that co-install "
        f"({covering.pairs_needed} pairs in all); {covering.resolutions} resolutions\n"
    )
    for kind, heading in FINDING_HEADINGS:
        found = covering.of_kind(kind)
        if not found:
            continue
        out.write(
            f"{len(found)} {'value' if kind == CANNOT_INSTALL else 'pair'}"
            f"{'s' if len(found) != 1 else ''} {heading}:\n"
        )
        for finding in found:
            why = conflict_summary(finding.reason) if finding.reason else ""
            out.write(f"  {finding.describe()}" + (f": {why}" if why else "") + "\n")
