"""Run one cell: check the hardware, resolve, install, run the cases, keep the records.

This is the edge where ftmatrix touches the world for a cell: uv for resolving
and installing, pytest (with the results plugin) in the cell's own interpreter.
The venv itself comes from the caller (nox's uv backend, or ``uv venv`` from the
CLI), so both paths share every step here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ftmatrix.config import HardwareClass, InstallOptions
from ftmatrix.hardware import probe_hardware
from ftmatrix.plan import Cell
from ftmatrix.records import WHOLE_CELL, CellRecordFile, Record, read_records, record_path
from ftmatrix.resolve import last_lines, resolve_cell, run_uv, uv_index_args
from ftmatrix.status import Status

# Frameworks must never reach the model hub from a cell: everything is built offline.
OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "WANDB_MODE": "disabled",
    "TOKENIZERS_PARALLELISM": "false",
    "PYTHONDONTWRITEBYTECODE": "1",
}
PYTEST_INI_NAMES = ("pytest.ini", ".pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg")

Log = Callable[[str], None]


@dataclass(frozen=True, kw_only=True)
class CellContext:
    """Everything a cell run needs besides the cell: where things are, how to install."""

    run_id: str
    out_dir: Path
    cases_dir: Path
    case_selection: tuple[str, ...]
    install: InstallOptions
    hardware_class: HardwareClass
    env: Mapping[str, str]
    runner_labels: tuple[str, ...] = ()
    pytest_args: tuple[str, ...] = ()


def run_cell(cell: Cell, venv_python: Path, ctx: CellContext, *, log: Log = print) -> list[Record]:
    """Run every case of ``cell`` in the venv of ``venv_python``; return its records."""
    path = record_path(ctx.out_dir, ctx.run_id, cell.id)
    started = _now()
    log(f"[ftmatrix] {cell.label}: cell {cell.id}, run {ctx.run_id}")

    gap = hardware_class_gap(ctx.hardware_class, probe_hardware(ctx.env))
    if gap:
        log(f"[ftmatrix] {cell.label}: skip: {gap}")
        return _write_whole_cell(path, cell, ctx, Status.SKIP, started, reason=gap)

    log(f"[ftmatrix] {cell.label}: resolving {' '.join(cell.requirements())}")
    resolution = resolve_cell(cell, ctx.install, ctx.env)
    if resolution.lock is None:
        assert resolution.status is not None
        log(f"[ftmatrix] {cell.label}: {resolution.status.value}: {resolution.reason}")
        return _write_whole_cell(
            path, cell, ctx, resolution.status, started, reason=resolution.reason
        )

    lock_file = path.parent / f"{cell.id}.lock.txt"
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    lock_file.write_text(resolution.lock, encoding="utf-8")
    log(f"[ftmatrix] {cell.label}: installing {len(_lock_lines(resolution.lock))} packages")
    install = run_uv(
        ["pip", "install", "--python", str(venv_python), "-r", str(lock_file)]
        + uv_index_args(ctx.install, ctx.env),
        ctx.env,
    )
    if install.returncode != 0:
        reason = last_lines(install.stderr)
        log(f"[ftmatrix] {cell.label}: install-error: {reason}")
        return _write_whole_cell(path, cell, ctx, Status.INSTALL_ERROR, started, reason=reason)

    cell_file = path.parent / f"{cell.id}.cell.json"
    cell_file.write_text(
        json.dumps(
            {**cell.to_dict(), "run_id": ctx.run_id, "runner_labels": list(ctx.runner_labels)}
        ),
        encoding="utf-8",
    )
    command = pytest_command(venv_python, cell_file, path, ctx)
    log(f"[ftmatrix] {cell.label}: running cases in {ctx.cases_dir}")
    begin = time.monotonic()
    completed = subprocess.run(command, env=cell_env(ctx.env), check=False)
    log(f"[ftmatrix] {cell.label}: cases finished in {time.monotonic() - begin:.1f}s")

    records = list(read_records(path.parent).records)
    records = [r for r in records if r.cell_id == cell.id]
    if completed.returncode not in (0, 1, 5):
        # pytest exits 0-5 on its own; anything else means the process died.
        records += _write_whole_cell(
            path,
            cell,
            ctx,
            Status.CRASH if completed.returncode < 0 else Status.ERROR,
            started,
            reason=f"pytest exited with code {completed.returncode}",
            keep=records,
        )
    return records


def hardware_class_gap(hardware: HardwareClass, fingerprint: Mapping[str, Any]) -> str | None:
    """Why this machine cannot stand for ``hardware``, or None if it can."""
    have = int(fingerprint.get("gpu_count", 0))
    if have < hardware.gpus:
        return (
            f"hardware class {hardware.name!r} needs {hardware.gpus} GPU(s); "
            f"this machine has {have}"
        )
    return None


def pytest_command(
    venv_python: Path, cell_file: Path, record_file: Path, ctx: CellContext
) -> list[str]:
    """The pytest command line that runs a cell's cases with the results plugin."""
    cases_dir = ctx.cases_dir.resolve()
    ini = next((cases_dir / n for n in PYTEST_INI_NAMES if (cases_dir / n).is_file()), None)
    targets = [str(cases_dir / s) for s in ctx.case_selection] or [str(cases_dir)]
    return [
        str(venv_python),
        "-m",
        "pytest",
        *targets,
        "-p",
        "ftmatrix.pytest_plugin",
        "--ftmatrix-cell",
        str(cell_file),
        "--ftmatrix-record",
        str(record_file),
        "--rootdir",
        str(cases_dir),
        # Our own repository's pytest settings must not leak into a user's cases.
        "-c",
        str(ini) if ini else os.devnull,
        "-p",
        "no:cacheprovider",
        "-rA",
        *ctx.pytest_args,
    ]


def cell_env(env: Mapping[str, str]) -> dict[str, str]:
    """The cell's environment: offline, and ftmatrix's plugin importable without installing it."""
    # The plugin needs only the standard library, pytest and packaging; putting our
    # source on the path keeps the cell's environment to its pins plus pytest.
    source_root = str(Path(__file__).resolve().parent.parent)
    path = os.pathsep.join(p for p in (source_root, env.get("PYTHONPATH", "")) if p)
    return {**env, **OFFLINE_ENV, "PYTHONPATH": path}


def _write_whole_cell(
    path: Path,
    cell: Cell,
    ctx: CellContext,
    status: Status,
    started: str,
    *,
    reason: str | None,
    keep: Sequence[Record] = (),
) -> list[Record]:
    record = Record(
        run_id=ctx.run_id,
        cell_id=cell.id,
        cell_label=cell.label,
        python=cell.python,
        pins=dict(cell.pins),
        hardware_class=cell.hardware,
        runner_labels=ctx.runner_labels,
        hardware=probe_hardware(ctx.env),
        case=WHOLE_CELL,
        operation="install" if status in (Status.UNINSTALLABLE, Status.INSTALL_ERROR) else "cell",
        status=status,
        reason=reason,
        started_at=started,
        finished_at=_now(),
    )
    file = CellRecordFile(path)
    for kept in keep:
        file.records.append(kept)
    file.add(record)
    return [record]


def _lock_lines(lock: str) -> list[str]:
    return [
        line for line in lock.splitlines() if line.strip() and not line.lstrip().startswith("#")
    ]


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def current_python() -> str:
    """``3.11`` for the interpreter running ftmatrix: the default cell Python."""
    return f"{sys.version_info.major}.{sys.version_info.minor}"
