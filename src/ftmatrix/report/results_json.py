"""A report's results.json as the report writes it; :mod:`ftmatrix.check.results` reads it
back, and both hold to its one schema number (:data:`RESULTS_SCHEMA`)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from typing import Any

from ftmatrix.cell.signature import clean_paths
from ftmatrix.check.results import RESULTS_SCHEMA
from ftmatrix.known_issues import KnownIssue
from ftmatrix.report.changes import StatusChange
from ftmatrix.report.failures import FailureGroup
from ftmatrix.report.model import ReportData


def render_json(data: ReportData) -> str:
    """Machine-readable results (results.json): the latest record of every (cell, case),
    groups, changes, the cap probes, the plan's findings, the planned cells without
    records, the cells a run stopped in, the runs still in progress and the record lines
    that could not be read."""
    grid = data.grid
    counts = Counter(r.status.value for r in grid.records)
    payload = {
        "schema": RESULTS_SCHEMA,
        "runs": list(grid.runs),
        "counts": dict(sorted(counts.items())),
        "reused_cells": dict(data.reused),
        "records": [r.to_dict() for r in grid.records],
        "failure_groups": [_group(g) for g in data.groups],
        "changes": [_change(c) for c in data.changes],
        "probes": [
            {"cap": cap, "hardware": hw, "outcome": text}
            for (cap, hw), text in data.probe_outcomes.items()
        ],
        "probe_records": [r.to_dict() for r in data.probes],
        "installability": data.installability,
        "planned_without_records": list(data.missing),
        "unfinished_cells": [cell.to_dict() for cell in data.unfinished],
        "in_progress": [run.to_dict() for run in data.in_progress],
        "unreadable_records": [clean_paths(p) for p in data.unreadable],
    }
    return json.dumps(payload, indent=1, sort_keys=True, default=str) + "\n"


def _group(group: FailureGroup) -> dict[str, Any]:
    return {
        "key": group.key,
        "status": group.status.value,
        "exception_type": group.exception_type,
        "message": group.message,
        "blame": group.blame,
        "cells": [r.cell_label for r in group.records],
        "cases": sorted({r.case for r in group.records}),
        "versions": group.versions,
        "known_issue": _cause(group.known, group.claims) if group.known else None,
        "known_issues": [_cause(c, group.claims) for c in group.causes],
        "members": [[r.cell_id, r.case] for r in group.records],
        "fixed_release_still_fails": list(group.late_fixes),
        "first_bad": list(group.first_bad),
    }


def _change(change: StatusChange) -> dict[str, Any]:
    return {
        "kind": change.kind,
        "cell": change.after.cell_label,
        "case": change.after.case,
        "before": {"run_id": change.before.run_id, "status": change.before.status.value},
        "after": {"run_id": change.after.run_id, "status": change.after.status.value},
        "moved_packages": {k: list(v) for k, v in change.moved_packages.items()},
    }


def _cause(cause: KnownIssue, proven: Mapping[str, str]) -> dict[str, Any]:
    return {**cause.to_dict(), "claim": proven[cause.id]}
