"""One cell built and run outside nox, as bisect and known-issues prove build theirs: its
venv made once (from the host's interpreter where the cell takes the host's packages),
then the runner's own path, case selection and all."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from ftmatrix.cell.record import Record
from ftmatrix.config import HardwareClass, Matrix
from ftmatrix.plan import Cell
from ftmatrix.resolve import uv_binary
from ftmatrix.runner import CellContext, Log, run_cell
from ftmatrix.system_packages import venv_interpreter


def hardware_named(matrix: Matrix, name: str | None) -> HardwareClass | None:
    """The matrix's hardware class ``name`` (its first class for None), or None."""
    wanted = name or matrix.hardware[0].name
    return next((h for h in matrix.hardware if h.name == wanted), None)


def run_lone_cell(
    cell: Cell,
    matrix: Matrix,
    *,
    hardware: HardwareClass,
    home: Path,
    venvs: Path,
    cases_dir: Path,
    case_selection: Sequence[str],
    env: Mapping[str, str],
    log: Log,
) -> list[Record]:
    """Build ``cell``'s venv in ``venvs`` if it is not there, run the selected cases and
    return the records (written under ``home``)."""
    venv = venvs / cell.id
    if not (venv / "bin" / "python").exists():
        interpreter = venv_interpreter(matrix.install, env, cell.python)
        subprocess.run(
            [uv_binary(), "venv", "--quiet", "--python", interpreter, str(venv)],
            env=dict(env),
            check=True,
        )
    context = CellContext(
        run_id="cells",
        out_dir=home,
        cases_dir=cases_dir,
        case_selection=tuple(case_selection),
        install=matrix.install,
        hardware_class=hardware,
        env=env,
        timeouts=matrix.timeouts,
        limits=matrix.limits,
    )
    return run_cell(cell, venv / "bin" / "python", context, log=log)
