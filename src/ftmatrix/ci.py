"""The nightly's fan-out: which jobs start, on which runners, with which cells.

``ftmatrix ci-matrix`` runs on a hosted runner before the cells: it carries the records
of the cells whose results still stand into tonight's run (:func:`carry_reused`), then
splits the cells left to run into one job per hardware class and shard
(:func:`ci_matrix`), and names the autobisect jobs (:func:`bisect_jobs`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, TextIO

from ftmatrix.pipeline import Loaded, earlier_runs_of, plan_reuse, resolve_cells
from ftmatrix.plan import Cell
from ftmatrix.reuse import reuse_records_of_cell
from ftmatrix.versions import version_order


def ci_matrix(
    loaded: Loaded, cells_per_shard: int, reused: frozenset[str] = frozenset()
) -> dict[str, Any]:
    """The nightly workflow's job matrix: each hardware class's cells split into shards.

    Each job gets the exact labels of the cells it runs (cells in ``reused``, ids, start
    none; a class with none left starts no job), the Python the plan gave cells that name
    none (``python``: FTMATRIX_PYTHON there, so the job's labels are the plan's whatever
    the runner's own ``python3``) and every Python its cells need (``pythons``, one per
    line, as actions/setup-python takes them).
    """
    include = []
    for hardware in loaded.matrix.hardware:
        running = [c for c in loaded.selected if c.hardware == hardware.name and c.id not in reused]
        count = len(running)
        if not count:
            continue
        shards = -(-count // max(cells_per_shard, 1))
        for index in range(1, shards + 1):
            include.append(
                {
                    "hardware": hardware.name,
                    "runs_on": list(hardware.runs_on),
                    "select": ",".join(c.label for c in running),
                    "shard": f"{index}/{shards}",
                    "cells": count,
                    **job_pythons(loaded, running),
                }
            )
    return {"include": include}


def job_pythons(loaded: Loaded, cells: Sequence[Cell]) -> dict[str, str]:
    """``python`` (the default cell Python of the plan) and ``pythons`` (each one a job's
    cells need, the default last: actions/setup-python makes its last the default)."""
    default = loaded.settings.python
    others = sorted({c.python for c in cells} - {default}, key=version_order)
    return {"python": default, "pythons": "\n".join([*others, default])}


def carry_reused(
    loaded: Loaded, env: Mapping[str, str], *, now: datetime, log: TextIO
) -> frozenset[str]:
    """Before the fan-out: write the records of the cells whose results still stand into
    tonight's run (so the report has them) and return their ids: they start no job."""
    if not loaded.reuse_days:
        return frozenset()
    matrix, settings = loaded.matrix, loaded.settings
    resolutions = resolve_cells(loaded.selected, matrix.install, env, matrix.limits)
    earlier = earlier_runs_of(loaded)  # read once: for the decisions and the records
    decisions = plan_reuse(loaded, resolutions, now=now, earlier=earlier)
    reused = set()
    for cell, resolution, decision in zip(loaded.selected, resolutions, decisions, strict=True):
        log.write(f"{cell.label}: {decision.describe()}\n")
        run = earlier.get(cell.id)
        if decision.reuse and run is not None and run.key is not None and resolution.lock:
            reuse_records_of_cell(settings.out, settings.run_id, cell.id, run, run.key)
            reused.add(cell.id)
    running = len(loaded.selected) - len(reused)
    log.write(f"{len(reused)} of {len(loaded.selected)} cells reused; {running} to run\n")
    return frozenset(reused)


def bisect_jobs(loaded: Loaded, jobs: Mapping[str, Any]) -> dict[str, Any]:
    """The nightly's autobisect jobs: one per hardware class that runs cells, on its own
    runners (a GPU failure is bisected on a GPU); none while bisect.budget is 0."""
    if loaded.matrix.bisect.budget <= 0:
        return {"include": []}
    classes: dict[str, Any] = {}
    for job in jobs["include"]:
        classes.setdefault(
            job["hardware"],
            {
                "hardware": job["hardware"],
                "runs_on": job["runs_on"],
                # A bisect cell holds all but one of a failing cell's pins: its Pythons.
                **job_pythons(
                    loaded, [c for c in loaded.selected if c.hardware == job["hardware"]]
                ),
            },
        )
    return {"include": list(classes.values())}
