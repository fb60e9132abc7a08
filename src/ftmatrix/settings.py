"""Where a run reads and writes, from the ``FTMATRIX_*`` environment variables.

nox builds its session list before any argument reaches a session, so what the
noxfile plans is chosen by environment variables; the CLI reads the same ones.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

ENV_VARS = {
    "FTMATRIX_MATRIX": "The matrix file (default: matrix.yaml).",
    "FTMATRIX_PROFILE": "The profile to apply (default: the file's default-profile).",
    "FTMATRIX_CASES": "The cases folder (default: cases/).",
    "FTMATRIX_OUT": "Where records and reports go (default: reports/).",
    "FTMATRIX_RUN_ID": "The run id shared by every cell of one run (default: the start time).",
    "FTMATRIX_RUNNER_LABELS": "Comma-separated labels of the CI runner, recorded per cell.",
}


@dataclass(frozen=True, kw_only=True)
class Settings:
    """Paths and names of one run."""

    matrix: Path
    profile: str | None
    cases: Path
    out: Path
    run_id: str
    runner_labels: tuple[str, ...] = ()

    @classmethod
    def from_env(cls, env: Mapping[str, str], *, root: Path, now: datetime) -> Settings:
        """Settings from ``env``; relative paths are taken from ``root``."""
        labels = env.get("FTMATRIX_RUNNER_LABELS", "")
        return cls(
            matrix=root / env.get("FTMATRIX_MATRIX", "matrix.yaml"),
            profile=env.get("FTMATRIX_PROFILE") or None,
            cases=root / env.get("FTMATRIX_CASES", "cases"),
            out=root / env.get("FTMATRIX_OUT", "reports"),
            run_id=env.get("FTMATRIX_RUN_ID") or new_run_id(now),
            runner_labels=tuple(x.strip() for x in labels.split(",") if x.strip()),
        )


def new_run_id(now: datetime) -> str:
    """Sortable and readable: ``20261122T143512Z``."""
    return now.strftime("%Y%m%dT%H%M%SZ")
