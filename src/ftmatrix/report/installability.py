"""The plan's installability findings of a run, kept beside its records for the report.

The plan step writes them (``ftmatrix.planview``), the report reads them: the file's name
and reading live here, below both, so the plan step does not load the renderer.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

INSTALLABILITY_FILE = "installability.json"
# How the report words each kind of the plan's findings (ftmatrix.plan).
FINDING_WORDS = {
    "cannot-install": "installs with nothing",
    "impossible": "cannot co-install",
    "no-cell": "co-install alone, in no combination that installs",
    "unresolved": "the resolver gave no answer",
}


def read_installability(out_dir: Path) -> dict[str, Any] | None:
    """The newest run's installability findings (what its plan could not make a cell of)."""
    files = sorted((out_dir / "records").glob(f"*/{INSTALLABILITY_FILE}"))
    if not files:
        return None
    try:
        data = json.loads(files[-1].read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
