"""The cells a night planned, and those of them the night's records never reached.

A run job that fails before uploading (a runner that died, a job cancelled, a Python it
could not set up) leaves no records: the report would show the other cells and say
nothing of it. ``ftmatrix ci-matrix`` writes the plan (``reports/plan.json``); the report
names every planned cell without a record of that run, and ``ftmatrix report`` fails.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from ftmatrix.cell.file_writes import write_atomically
from ftmatrix.errors import UsageError
from ftmatrix.store import run_coverage

PLAN_FILE = "plan.json"


def write_plan(out_dir: Path, run_id: str, labels: Sequence[str]) -> Path:
    """Keep the night's plan beside its records: the run id and every planned cell."""
    path = out_dir / PLAN_FILE
    write_atomically(path, json.dumps({"run_id": run_id, "cells": list(labels)}, indent=1) + "\n")
    return path


def cells_without_records(out_dir: Path) -> list[str]:
    """The planned cells with no record of the planned run; none without a plan file, or
    when the history has a later run than the plan's (an old plan left in the folder)."""
    path = out_dir / PLAN_FILE
    if not path.is_file():
        return []
    try:
        plan = json.loads(path.read_text(encoding="utf-8"))
        run_id, labels = plan["run_id"], plan["cells"]
        if not isinstance(run_id, str) or not all(isinstance(x, str) for x in labels):
            raise TypeError
    except (OSError, ValueError, KeyError, TypeError):
        raise UsageError(
            f"{path}: not a plan written by `ftmatrix ci-matrix` "
            '({"run_id": "...", "cells": ["label", ...]})'
        ) from None
    other_ran_at, have = run_coverage(out_dir / "history.sqlite", run_id)
    written = datetime.fromtimestamp(path.stat().st_mtime, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    if other_ran_at is not None and other_ran_at > written:
        return []  # another run ran after the plan was written: a stale plan
    return [label for label in labels if label not in have]
