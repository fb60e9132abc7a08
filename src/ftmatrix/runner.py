"""Run one cell: check the hardware, resolve, install, run the cases, keep the records.

This is the edge where ftmatrix touches the world for a cell: uv for resolving
and installing, pytest (with the results plugin, under the supervisor) in the
cell's own interpreter. The venv itself comes from the caller (nox's uv
backend), so nox and the CLI share every step here. :func:`run_cell` reads as the
cell's stages in order: this machine, a run that finished the cell already, the lock,
reuse, the install, the cases.

A cell's files in a run (ftmatrix.cell.files names them): the lock, who writes the cell
now (locked while a run does), what the plugin needs to know, what the cell was run with
(its reuse key, ftmatrix.reuse) and, once every case has a record, the done marker (the
key again, and the run that really ran the cases).
``--resume`` trusts a cell's records only while its key is unchanged; with reuse on
(matrix.yaml's ``reuse``), a cell whose key equals that of its newest run in the
history is not installed nor run: that run's records are carried into this one.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import os
import re
import shutil
import socket
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any, TypeVar

from ftmatrix.case_ends import CaseLimits
from ftmatrix.cell.file_writes import DISK_FULL_ERRNOS, append_line, read_json, write_atomically
from ftmatrix.cell.files import CellFiles
from ftmatrix.cell.gpu_lease import lease_env
from ftmatrix.cell.hardware import probe_hardware
from ftmatrix.cell.record import WHOLE_CELL, Record
from ftmatrix.cell.records import CellRecordFile, compact_records, operation_from_path, redact
from ftmatrix.cell.status import Status
from ftmatrix.cell_launch import (
    bytecode_cache,
    cell_env,
    parallel_args,
    pytest_command,
    worker_count,
)
from ftmatrix.config import HardwareClass, InstallOptions, Limits, Timeouts
from ftmatrix.console import masked_log
from ftmatrix.errors import OutputFullError, RunBusyError
from ftmatrix.gpu_pool import default_lock_dir, lease_devices
from ftmatrix.plan import Cell
from ftmatrix.progress import Progress
from ftmatrix.resolve import (
    TRANSIENT,
    Lock,
    Resolution,
    last_lines,
    locked_requirements,
    resolve_cell,
    run_uv,
    uv_index_args,
    with_test_runners,
)
from ftmatrix.retry import retried
from ftmatrix.reuse import CellKey, cases_key, hardware_id, reuse_cell
from ftmatrix.sharing import one_install_at_a_time, torch_threads, usable_cpus
from ftmatrix.supervise import run_cases
from ftmatrix.system_packages import KEY, HostStack, host_stack, link_host_site

# Share of the machine's memory a cell's cases may take when matrix.yaml sets no limit.
DEFAULT_MEMORY_SHARE = 0.9

Log = Callable[[str], None]
_T = TypeVar("_T")


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
    timeouts: Timeouts = field(default_factory=Timeouts)
    limits: Limits = field(default_factory=Limits)
    resume: bool = False
    # matrix.yaml's reuse.max-age-days for this run (0: off, as with FTMATRIX_REUSE=0).
    reuse_days: int = 0
    # Cells running side by side with this one (nox's parallel sessions): they share
    # the CPUs (torch's threads) and the default memory limit.
    cells_at_once: int = 1
    sleep: Callable[[float], None] = time.sleep
    today: Callable[[], date] = lambda: datetime.now(UTC).date()

    def torch_threads_each(self) -> int | None:
        """torch's threads in each busy process of the cell: the CPUs shared among the
        cells at once and their workers (None: one process has the machine)."""
        return torch_threads(self.cells_at_once * worker_count(self.limits), usable_cpus())


def run_cell(
    cell: Cell,
    venv_python: Path,
    ctx: CellContext,
    *,
    log: Log = print,
    progress: Progress | None = None,
) -> list[Record]:
    """Run every case of ``cell`` in the venv of ``venv_python``; return its records."""
    log = masked_log(log, ctx.env)
    if progress:
        progress.cell_started(cell.label)
    try:
        with owning_cell(CellFiles.of(ctx.out_dir, ctx.run_id, cell.id), cell.label, ctx.run_id):
            return _run_cell(cell, venv_python, ctx, log=log, progress=progress)
    except OSError as exc:
        if exc.errno not in DISK_FULL_ERRNOS:
            raise
        raise OutputFullError(
            f"{cell.label}: the output folder {ctx.out_dir} is full ({exc.strerror}: "
            f"{exc.filename or 'a record'}). The records written are whole; free space, then "
            f"resume with FTMATRIX_RESUME=1 FTMATRIX_RUN_ID={ctx.run_id}: the cases without a "
            "record run again"
        ) from None
    finally:
        if progress:
            progress.cell_finished()


def record_cell_cannot_start(
    cell: Cell, ctx: CellContext, reason: str, *, log: Log = print
) -> list[Record]:
    """The one record of a cell whose environment cannot even be made (no interpreter for
    its Python here): an ``install-error``, not done, so a later run tries it again."""
    log = masked_log(log, ctx.env)
    with owning_cell(CellFiles.of(ctx.out_dir, ctx.run_id, cell.id), cell.label, ctx.run_id):
        run = _CellRun(
            cell=cell,
            ctx=ctx,
            files=CellFiles.of(ctx.out_dir, ctx.run_id, cell.id),
            log=log,
            started=_now(),
            fingerprint=probe_hardware(ctx.env),
        )
        _start_afresh(run, "the cell is started again")
        run.say(f"install-error: {reason}")
        return run.whole_cell(Status.INSTALL_ERROR, reason=reason, done=False)


@contextlib.contextmanager
def owning_cell(files: CellFiles, label: str, run_id: str) -> Iterator[None]:
    """Hold the cell's files in run ``run_id`` for this process, or refuse: RunBusyError.

    Two runs given one output folder and one run id (``FTMATRIX_RUN_ID``, or a resume
    while the run still goes on) would clear each other's records and work folder. An
    advisory lock beside the records (released by the kernel when its holder dies, so a
    killed run never blocks a resume) lets one writer at a time touch a cell.
    """
    files.run_folder.mkdir(parents=True, exist_ok=True)
    with files.owner.open("a+", encoding="utf-8") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            raise RunBusyError(
                f"{label}: run {run_id} is writing this cell already ({holder}) in "
                f"{files.run_folder}: wait for that run to end, or start this one with another "
                "FTMATRIX_RUN_ID (unset, each run gets its own)"
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()} on {socket.gethostname()}")
        handle.flush()
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _run_cell(
    cell: Cell, venv_python: Path, ctx: CellContext, *, log: Log, progress: Progress | None
) -> list[Record]:
    """The cell's stages, in order; each of the first five may end the cell with its records."""
    run = _CellRun(
        cell=cell,
        ctx=ctx,
        files=CellFiles.of(ctx.out_dir, ctx.run_id, cell.id),
        log=log,
        started=_now(),
        fingerprint=probe_hardware(ctx.env),  # once: the gate, the key, the lease, the records
    )
    run.say(f"cell {cell.id}, run {ctx.run_id}")
    if not ctx.resume:  # a run id named again without FTMATRIX_RESUME: its cell anew
        _start_afresh(run, "run started again without FTMATRIX_RESUME")
    elif (scan := compact_records(run.files.records)).damaged:
        # Lines that cannot be its records (torn, another run's): kept apart, cases run again.
        run.say(
            f"{scan.kept_apart()} moved to "
            f"{run.files.quarantine}; the cases without a record run again"
        )
        run.files.done.unlink(missing_ok=True)

    # 1. This machine: it can stand for the cell's hardware class, or the cell is a skip.
    gap = hardware_class_gap(ctx.hardware_class, run.fingerprint)
    if gap:
        run.say(f"skip: {gap}")
        return run.whole_cell(Status.SKIP, reason=gap)

    # 2. A resumed run that finished the cell with the lock it kept: no resolver round trip.
    if ctx.resume and run.finished_with(run.kept_lock()):
        run.say(f"complete in run {ctx.run_id}; nothing to resume")
        return run.records()

    # 3. The lock, parsed once: the key, the install and the records share it.
    run.say(f"resolving {' '.join(cell.requirements())}")
    with one_install_at_a_time(run.files.records.parent, run.waiting):
        resolution = _resolve(run)
    if resolution.locked is None:
        assert resolution.status is not None
        run.say(f"{resolution.status.value}: {resolution.reason}")
        return run.whole_cell(resolution.status, reason=resolution.reason)
    lock = resolution.locked
    run.keep_lock(lock)

    # 4. Results that still stand: finished in this run (resume), or reused from the history.
    key = run.key(lock)
    finished = _finished_or_reused(run, key)
    if finished is not None:
        return finished
    write_atomically(run.files.state, json.dumps(key.to_dict()))

    # 5. The install.
    with one_install_at_a_time(run.files.records.parent, run.waiting):
        stack, installing, failure = _install(run, lock, venv_python)
    if failure is not None:
        return run.whole_cell(Status.INSTALL_ERROR, reason=failure, done=False)

    # 6. The cases, on the cell's GPUs; then the cell is done with this key.
    records = _run_cases(
        run, lock, venv_python=venv_python, stack=stack, installing=installing, progress=progress
    )
    write_atomically(
        run.files.done,
        json.dumps({"key": key.to_dict(), "since": ctx.run_id, "ran_at": run.started}),
    )
    # The lists of collected case ids served a resume of this cell; its records are whole
    # now, and ids are raw (unredacted) text: nothing of them stays beside the records.
    for listing in (run.files.collected, run.files.isolated):
        listing.unlink(missing_ok=True)
    return records


def _start_afresh(run: _CellRun, why: str) -> None:
    """Remove what an earlier run of the cell left: this run starts it afresh. Its records
    are set aside (appended to ``files.set_aside``), never deleted unsaid."""
    files = run.files
    held = files.records.read_bytes() if files.records.is_file() else b""
    if held.strip():
        append_line(files.set_aside, held if held.endswith(b"\n") else held + b"\n")
        run.say(
            f"{why}: the {len(held.strip().splitlines())} record line(s) run {run.ctx.run_id} "
            f"had of it are set aside in {files.set_aside}; its cases run again"
        )
    for path in (files.records, files.state, files.done, files.running_case(),
                 files.collected, files.isolated):  # fmt: skip
        path.unlink(missing_ok=True)


def _done_key(files: CellFiles) -> Any:
    """The key the run finished the cell with (None: not finished, or a whole-cell end)."""
    marker = read_json(files.done)
    return marker.get("key") if isinstance(marker, dict) else None


@dataclass(frozen=True, kw_only=True)
class _CellRun:
    """One cell in one run: what its stages share."""

    cell: Cell
    ctx: CellContext
    files: CellFiles
    log: Log
    started: str
    fingerprint: Mapping[str, Any]

    def say(self, text: str) -> None:
        self.log(f"[ftmatrix] {self.cell.label}: {text}")

    def waiting(self) -> None:
        self.say("waiting while another cell installs")

    @functools.cached_property
    def cases(self) -> str:
        """The cases part of the reuse key (hashed once: the resume check and the key)."""
        ctx = self.ctx
        return cases_key(
            ctx.cases_dir, ctx.case_selection, ctx.pytest_args, ctx.timeouts, ctx.limits
        )

    def key(self, lock: Lock) -> CellKey:
        """What the cell's results depend on tonight: its lock, its cases, this machine."""
        return CellKey.of(lock, cases=self.cases, hardware=hardware_id(self.fingerprint))

    def kept_lock(self) -> Lock | None:
        """The lock this run resolved for the cell already (None: none yet)."""
        if not self.files.lock.exists():
            return None
        return Lock.parse(self.files.lock.read_text(encoding="utf-8"))

    def keep_lock(self, lock: Lock) -> None:
        self.files.lock.parent.mkdir(parents=True, exist_ok=True)
        self.files.lock.write_text(lock.text, encoding="utf-8")

    def finished_with(self, lock: Lock | None) -> bool:
        """Did this run finish the cell with ``lock`` and these cases on this machine?"""
        return lock is not None and bool(_done_key(self.files) == self.key(lock).to_dict())

    def records(self) -> list[Record]:
        return CellRecordFile(self.files.records).records

    def make_record(self, *, lock_id: str | None = None, **fields: Any) -> Record:
        """A record of this cell (``case`` and ``status`` at least; the rest as the
        supervisor gives them)."""
        cell, ctx = self.cell, self.ctx
        case = fields.pop("case")
        operation = fields.pop("operation", None) or (
            "cell" if case == WHOLE_CELL else operation_from_path(case)
        )
        now = _now()
        return Record(
            run_id=ctx.run_id,
            cell_id=cell.id,
            cell_label=cell.label,
            lock_id=lock_id,
            python=cell.python,
            pins=dict(cell.pins),
            hardware_class=cell.hardware,
            runner_labels=ctx.runner_labels,
            hardware=dict(self.fingerprint),
            beyond_cap=cell.beyond_cap,
            case=case,
            operation=operation,
            started_at=fields.pop("started_at", now),
            finished_at=now,
            **fields,
        )

    def whole_cell(self, status: Status, *, reason: str | None, done: bool = True) -> list[Record]:
        """One record standing for every case of a cell that never got to run them."""
        operation = "install" if status in (Status.UNINSTALLABLE, Status.INSTALL_ERROR) else "cell"
        record = self.make_record(
            case=WHOLE_CELL,
            operation=operation,
            status=status,
            reason=redact(reason, self.ctx.env),  # uv's stderr: the session prints it too
            started_at=self.started,
        )
        file = CellRecordFile(self.files.records)
        file.records = [record]
        if moved := file.save():
            self.say(f"{moved} record line(s) it had are set aside in {self.files.set_aside}")
        if done:
            # Resume skips it; an install-error is not 'done': a later run may get through.
            write_atomically(self.files.done, json.dumps({"whole_cell": status.value}))
        return [record]

    def with_retries(self, action: Callable[[], _T], transient: Callable[[_T], bool]) -> _T:
        """``action()``, tried again after a pause while its failure looks transient."""
        return retried(
            action,
            transient,
            sleep=self.ctx.sleep,
            before_retry=lambda delay: self.log(
                f"[ftmatrix] transient failure; retrying in {delay:g} s"
            ),
        )


def _resolve(run: _CellRun) -> Resolution:
    """The cell's lock (the test runners with it), asked again while uv's failure is transient."""
    ctx = run.ctx
    return run.with_retries(
        lambda: resolve_cell(with_test_runners(run.cell, ctx.limits), ctx.install, ctx.env),
        lambda r: r.status is Status.INSTALL_ERROR and bool(TRANSIENT.search(r.reason or "")),
    )


def _finished_or_reused(run: _CellRun, key: CellKey) -> list[Record] | None:
    """The cell's records without running it: this run finished it already (resume), or
    its newest run in the history had this key (reuse); None when its cases must run."""
    ctx, files, state = run.ctx, run.files, key.to_dict()
    if ctx.resume:
        if _done_key(files) == state:
            run.say(f"complete in run {ctx.run_id}; nothing to resume")
            return run.records()
        earlier = read_json(files.state)
        if earlier != state:
            _start_afresh(
                run,
                "its state cannot be read"
                if earlier is None and files.state.exists()
                else "the lock or the cases changed since",
            )
    if ctx.reuse_days:
        decision, reused = reuse_cell(
            ctx.out_dir,
            ctx.run_id,
            run.cell.id,
            key,
            max_age_days=ctx.reuse_days,
            today=ctx.today(),
        )
        if reused is not None:
            run.say(f"{decision.describe()}: no install, no case runs")
            return reused
        run.say(decision.describe())
    return None


def _install(
    run: _CellRun, lock: Lock, venv_python: Path
) -> tuple[HostStack | None, list[str], str | None]:
    """Sync the venv to ``lock``: the host's stack, what was installed, why it failed (or None)."""
    ctx = run.ctx
    to_install, stack = _take_from_host(run.files, lock, venv_python, ctx)
    installing = (
        list(lock.requirements)
        if stack is None
        else locked_requirements(to_install.read_text(encoding="utf-8"))
    )
    if stack is not None:
        from_host = len(lock.requirements) - len(installing)
        run.say(f"{from_host} locked packages are the host's ({KEY})")
    run.say(f"installing {len(installing)} packages")
    install = run.with_retries(
        lambda: run_uv(
            ["pip", "sync", "--python", str(venv_python), str(to_install)]
            + uv_index_args(ctx.install, ctx.env),
            ctx.env,
        ),
        lambda p: p.returncode != 0 and bool(TRANSIENT.search(p.stderr)),
    )
    if install.returncode != 0:
        reason = redact(last_lines(install.stderr), ctx.env)
        run.say(f"install-error: {reason}")
        return stack, installing, reason
    return stack, installing, None


def _take_from_host(
    files: CellFiles, lock: Lock, venv_python: Path, ctx: CellContext
) -> tuple[Path, HostStack | None]:
    """What the venv installs, and the host's packages it takes (install.system-packages).

    What resolved to the host's version stays out of the venv; a .pth makes it importable.
    """
    stack = host_stack(ctx.install, ctx.env)
    link_host_site(venv_python, stack)
    if stack is None:
        return files.lock, None
    to_install = files.install_list
    to_install.write_text(stack.strip(lock.text), encoding="utf-8")
    return to_install, stack


def _run_cases(
    run: _CellRun,
    lock: Lock,
    *,
    venv_python: Path,
    stack: HostStack | None,
    installing: list[str],
    progress: Progress | None,
) -> list[Record]:
    """Every selected case under the supervisor, in the cell's own working folder, on the
    GPUs leased to the cell; the records as the supervisor keeps them."""
    cell, ctx, files = run.cell, run.ctx, run.files
    cell_info = {
        **cell.to_dict(),
        "lock_id": lock.id,
        "run_id": ctx.run_id,
        "runner_labels": list(ctx.runner_labels),
    }
    if stack is not None:
        cell_info["host_packages"] = stack.visible(installing)
    write_atomically(files.cell_info, json.dumps(cell_info))
    command, targets = pytest_command(venv_python, files.cell_info, files.records, ctx)
    with lease_devices(
        ctx.hardware_class.gpus,
        machine_devices(run.fingerprint, ctx.env),
        default_lock_dir(ctx.env),
        on_wait=lambda: run.say("waiting for a free GPU"),
    ) as devices:
        if devices:
            run.say(f"leased GPU(s) {','.join(devices)}")
        run.say(f"running cases in {ctx.cases_dir}")
        begin = time.monotonic()
        workdir = cell_workdir(ctx.out_dir, ctx.run_id, cell.id)
        shutil.rmtree(workdir, ignore_errors=True)  # what a killed run left there
        workdir.mkdir(parents=True)
        records = run_cases(
            command,
            targets,
            record_file=files.records,
            cases_dir=ctx.cases_dir.resolve(),
            env={
                **cell_env(
                    ctx.env,
                    bytecode=bytecode_cache(venv_python, lock.id),
                    threads=ctx.torch_threads_each(),
                ),
                **lease_env(devices),
            },
            cwd=workdir,
            # What the cases wrote where they ran may be what filled the disk.
            free_space=functools.partial(shutil.rmtree, workdir, ignore_errors=True),
            limits=CaseLimits(
                case_seconds=ctx.timeouts.case,
                cell_seconds=ctx.timeouts.cell,
                memory_bytes=memory_limit_bytes(ctx.limits, run.fingerprint, ctx.cells_at_once),
            ),
            make_record=functools.partial(run.make_record, lock_id=lock.id),
            log=run.log,
            progress=progress,
            parallel=parallel_args(worker_count(ctx.limits)),
        )
    run.say(f"cases finished in {time.monotonic() - begin:.1f}s")
    shutil.rmtree(workdir, ignore_errors=True)
    return records


def cell_workdir(out_dir: Path, run_id: str, cell_id: str) -> Path:
    """The working directory of a cell's pytest, its own: what cases write there stays apart.

    unsloth, for one, writes ``unsloth_compiled_cache/`` into the working directory;
    two cells sharing one would share (and race on) it. Outside ``records/``, whose
    ``*.jsonl`` files are all read as records. Removed once the cell is done.
    """
    return (out_dir / "work" / run_id / cell_id).resolve()


def hardware_class_gap(hardware: HardwareClass, fingerprint: Mapping[str, Any]) -> str | None:
    """Why this machine cannot stand for ``hardware``, or None if it can."""
    have = int(fingerprint.get("gpu_count", 0))
    if have < hardware.gpus:
        return (
            f"hardware class {hardware.name!r} needs {hardware.gpus} GPU(s); "
            f"this machine has {have}"
        )
    if hardware.gpu_name is None:
        return None
    names = [str(gpu.get("name", "")) for gpu in fingerprint.get("gpus") or []]
    named = [name for name in names if re.search(hardware.gpu_name, name, re.IGNORECASE)]
    if len(named) < hardware.gpus:
        return (
            f"hardware class {hardware.name!r} needs {hardware.gpus} GPU(s) named like "
            f"{hardware.gpu_name!r}; this machine has {', '.join(names)}"
        )
    return None


def machine_devices(fingerprint: Mapping[str, Any], env: Mapping[str, str]) -> list[str]:
    """The GPU indices cells may lease: CUDA_VISIBLE_DEVICES if set, else every GPU."""
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [d.strip() for d in visible.split(",") if d.strip()]
    return [str(i) for i in range(int(fingerprint.get("gpu_count", 0)))]


def memory_limit_bytes(
    limits: Limits, fingerprint: Mapping[str, Any], cells_at_once: int = 1
) -> int | None:
    """The memory a cell's cases may use: matrix.yaml's limit, else its share of most of the
    machine's (cells that run at once split it)."""
    if limits.memory_gib is not None:
        return int(limits.memory_gib * 2**30)
    total = fingerprint.get("memory_gib")
    share = DEFAULT_MEMORY_SHARE / max(1, cells_at_once)
    return int(float(total) * share * 2**30) if total else None


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def current_python() -> str:
    """``3.11`` for the interpreter running ftmatrix: the default cell Python."""
    return f"{sys.version_info.major}.{sys.version_info.minor}"
