"""The edge of a bisect: build a real cell per release, run the one case, judge it.

Each release gets its own cell (the other pins held), its own uv venv and its
own records under ``<out>/bisect/<id>/``, so the cells a search built stay
inspectable; the finding is written beside them as ``finding.json``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name
from packaging.version import Version

from ftmatrix.bisection.search import (
    BisectFinding,
    BisectOutcome,
    BudgetSpent,
    bisect,
    confirm,
    releases_between,
)
from ftmatrix.cell.file_writes import write_atomically
from ftmatrix.cell.record import WHOLE_CELL
from ftmatrix.cell.status import Status
from ftmatrix.config import Matrix
from ftmatrix.lone_cell import hardware_named, run_lone_cell
from ftmatrix.pipeline import index_releases
from ftmatrix.plan import Cell
from ftmatrix.runner import current_python

Log = Callable[[str], None]


@dataclass(frozen=True, kw_only=True)
class BisectRequest:
    """What to search: a case, the package to move, the ends, and what to hold fixed."""

    case: str
    axis: str
    good: str
    bad: str
    pins: tuple[tuple[str, str], ...] = ()
    hardware: str | None = None
    python: str | None = None

    @property
    def id(self) -> str:
        held = "-".join(f"{k}{v}" for k, v in self.pins)
        case = "".join(ch if ch.isalnum() else "_" for ch in self.case)[:60]
        # Each hardware class bisects its own failures: their folders (and artifacts) apart.
        where = f"{self.hardware}--" if self.hardware else ""
        return f"{where}{case}--{self.axis}-{self.good}-{self.bad}" + (f"--{held}" if held else "")


def judge_status(status: Status) -> BisectOutcome:
    """A case's status as a verdict: pass is good; a framework break is bad; else skip."""
    if status is Status.PASS:
        return BisectOutcome.GOOD
    if status.is_break:
        return BisectOutcome.BAD
    # uninstallable, install-error, n/a, skip and our own error say nothing either way.
    return BisectOutcome.SKIP


def run_bisect(
    request: BisectRequest,
    matrix: Matrix,
    *,
    cases_dir: Path,
    out_dir: Path,
    env: Mapping[str, str],
    log: Log = print,
    max_cells: int | None = None,
    releases: Callable[[str], Sequence[Version]] | None = None,
) -> BisectFinding:
    """Search the releases of ``request.axis`` for the first one where the case breaks.

    ``max_cells`` caps the cells built (one per release tried; a flaky one's second
    run reuses its cell): past it the search stops with the range narrowed so far.
    """
    # The listing the caller already has (autobisect chose its jobs on it), else the index's,
    # frozen at UV_EXCLUDE_NEWER as every listing is.
    lookup = releases or index_releases(matrix, env)
    released = [str(v) for v in lookup(request.axis)]
    versions = releases_between(released, request.good, request.bad)
    log(
        f"[ftmatrix] bisect {request.axis}: {len(versions)} releases from "
        f"{versions[0]} to {versions[-1]}"
    )
    hardware = hardware_named(matrix, request.hardware)
    if hardware is None:
        names = ", ".join(h.name for h in matrix.hardware)
        raise ValueError(f"no hardware class {request.hardware!r}; classes: {names}")
    home = out_dir / "bisect" / request.id
    python = request.python or current_python()
    held = [
        (k, v) for k, v in request.pins if canonicalize_name(k) != canonicalize_name(request.axis)
    ]

    built: set[str] = set()

    def once(version: str) -> tuple[BisectOutcome, str, str, bool]:
        if max_cells is not None and version not in built and len(built) >= max_cells:
            raise BudgetSpent(f"{len(built)} of {max_cells} cells built")
        built.add(version)
        cell = Cell(
            python=python,
            pins=(*((k, v) for k, v in held), (request.axis, version)),
            hardware=hardware.name,
            support=matrix.support,
        )
        records = run_lone_cell(
            cell,
            matrix,
            hardware=hardware,
            home=home,
            venvs=home / "envs",
            cases_dir=cases_dir,
            case_selection=(request.case,),
            env=env,
            log=log,
        )
        record = next(
            (r for r in records if r.case == request.case),
            next((r for r in records if r.case == WHOLE_CELL), None),
        )
        if record is None:
            return (
                BisectOutcome.SKIP,
                "no record",
                f"the case {request.case} was not collected",
                False,
            )
        verdict = judge_status(record.status)
        detail = (record.message or record.reason or "").strip().splitlines()
        log(
            f"[ftmatrix] bisect {request.axis}=={version}: {record.status.value} -> {verdict.value}"
        )
        return verdict, record.status.value, detail[0] if detail else "", record.flaky

    finding = bisect(request.axis, versions, confirm(once))
    write_atomically(
        home / "finding.json", json.dumps(finding_document(request, finding), indent=1)
    )
    return finding


def finding_document(request: BisectRequest, finding: BisectFinding) -> dict[str, Any]:
    """What the store and the report read back: the request and where it changed."""
    return {
        "case": request.case,
        "held": dict(request.pins),
        "hardware": request.hardware,
        **finding.to_dict(),
    }
