"""The report's badges: one shields.io endpoint JSON per operation, passing cases out of
judged ones."""

from __future__ import annotations

import json

from ftmatrix.cell.status import Status
from ftmatrix.report.grid import Grid


def badge_files(grid: Grid) -> dict[str, str]:
    """File name -> its JSON, one per operation of the grid."""
    per_operation: dict[str, list[int]] = {}
    for record in grid.records:
        if record.status in (Status.SKIP, Status.NOT_APPLICABLE):
            continue
        tally = per_operation.setdefault(record.operation, [0, 0])
        tally[0] += record.status is Status.PASS
        tally[1] += 1
    files = {}
    for operation, (passed, total) in per_operation.items():
        colour = "brightgreen" if passed == total else ("red" if passed == 0 else "orange")
        badge = {
            "schemaVersion": 1,
            "label": operation,
            "message": f"{passed}/{total} pass",
            "color": colour,
        }
        files[f"{_file_name(operation)}.json"] = json.dumps(badge)
    return files


def _file_name(text: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_" else "-" for ch in text)
