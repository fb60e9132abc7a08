"""Run one cell: check the hardware, resolve, install, run the cases, keep the records.

This is the edge where ftmatrix touches the world for a cell: uv for resolving
and installing, pytest (with the results plugin, under the supervisor) in the
cell's own interpreter. The venv itself comes from the caller (nox's uv
backend), so nox and the CLI share every step here.

Files of a cell in a run, beside its records (``<cell-id>.jsonl``): the lock
(``.lock.txt``), who writes the cell now (``.owner``, locked while a run does), what
the plugin needs to know (``.cell.json``), what the cell was run with
(``.state.json``: its reuse key, ftmatrix.reuse) and, once every case has a record,
``.done.json`` (the key again, and the run that really ran the cases).
``--resume`` trusts a cell's records only while its key is unchanged; with reuse on
(matrix.yaml's ``reuse``), a cell whose key equals that of its newest run in the
history is not installed nor run: that run's records are carried into this one.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any, TypeVar

from ftmatrix.cell.hardware import probe_hardware
from ftmatrix.cell.lease import lease_env
from ftmatrix.cell.records import (
    WHOLE_CELL,
    CellRecordFile,
    Record,
    collected_cases_path,
    current_case_path,
    isolated_cases_path,
    operation_from_path,
    record_path,
    redact,
    write_atomically,
)
from ftmatrix.cell.status import Status
from ftmatrix.config import HardwareClass, InstallOptions, Limits, Timeouts
from ftmatrix.errors import RunBusyError
from ftmatrix.lease import default_lock_dir, lease_devices
from ftmatrix.plan import Cell
from ftmatrix.progress import Progress
from ftmatrix.resolve import (
    last_lines,
    lock_id,
    locked_requirements,
    resolve_cell,
    run_uv,
    uv_index_args,
)
from ftmatrix.reuse import CellKey, EarlierRun, carried_forward, decide, hardware_id
from ftmatrix.store import DONE_SUFFIX, earlier_runs
from ftmatrix.supervise import CaseLimits, run_cases
from ftmatrix.system_packages import KEY, HostStack, host_stack, link_host_site

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
# Network trouble is worth retrying; a resolver's proof or a build failure is not.
TRANSIENT = re.compile(
    r"Failed to fetch|error sending request|timed out|timeout|Connection (reset|refused)|"
    r"dns error|tcp connect|HTTP status server error|\b50[234]\b|temporarily unavailable",
    re.IGNORECASE,
)
RETRY_DELAYS = (2.0, 8.0)
# The test runner a cell gets besides pytest when its cases share the machine.
XDIST_REQUIREMENT = "pytest-xdist"
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
    sleep: Callable[[float], None] = time.sleep
    today: Callable[[], date] = lambda: datetime.now(UTC).date()


def run_cell(
    cell: Cell,
    venv_python: Path,
    ctx: CellContext,
    *,
    log: Log = print,
    progress: Progress | None = None,
) -> list[Record]:
    """Run every case of ``cell`` in the venv of ``venv_python``; return its records."""
    if progress:
        progress.cell_started(cell.label)
    try:
        with owning_cell(record_path(ctx.out_dir, ctx.run_id, cell.id), cell.label, ctx.run_id):
            return _run_cell(cell, venv_python, ctx, log=log, progress=progress)
    finally:
        if progress:
            progress.cell_finished()


@contextlib.contextmanager
def owning_cell(records: Path, label: str, run_id: str) -> Iterator[None]:
    """Hold the cell's files in run ``run_id`` for this process, or refuse: RunBusyError.

    Two runs given one output folder and one run id (``FTMATRIX_RUN_ID``, or a resume
    while the run still goes on) would clear each other's records and work folder. An
    advisory lock beside the records (released by the kernel when its holder dies, so a
    killed run never blocks a resume) lets one writer at a time touch a cell.
    """
    owner = records.with_name(f"{records.name.removesuffix('.jsonl')}.owner")
    owner.parent.mkdir(parents=True, exist_ok=True)
    with owner.open("a+", encoding="utf-8") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            raise RunBusyError(
                f"{label}: run {run_id} is writing this cell already ({holder}) in "
                f"{records.parent}: wait for that run to end, or start this one with another "
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
    path = record_path(ctx.out_dir, ctx.run_id, cell.id)
    files = _CellFiles(path, cell.id)
    started = _now()
    log(f"[ftmatrix] {cell.label}: cell {cell.id}, run {ctx.run_id}")
    if not ctx.resume:
        files.clear()

    fingerprint = probe_hardware(ctx.env)  # once: the gate, the reuse key and the lease
    gap = hardware_class_gap(ctx.hardware_class, fingerprint)
    if gap:
        log(f"[ftmatrix] {cell.label}: skip: {gap}")
        return _finish_whole_cell(files, cell, ctx, Status.SKIP, started, reason=gap)

    if ctx.resume and _complete_with_its_lock(files, ctx, fingerprint):
        log(f"[ftmatrix] {cell.label}: complete in run {ctx.run_id}; nothing to resume")
        return CellRecordFile(path).records

    log(f"[ftmatrix] {cell.label}: resolving {' '.join(cell.requirements())}")
    resolution = _with_retries(
        lambda: resolve_cell(with_test_runners(cell, ctx.limits), ctx.install, ctx.env),
        lambda r: r.status is Status.INSTALL_ERROR and bool(TRANSIENT.search(r.reason or "")),
        ctx,
        log,
    )
    if resolution.lock is None:
        assert resolution.status is not None
        log(f"[ftmatrix] {cell.label}: {resolution.status.value}: {resolution.reason}")
        return _finish_whole_cell(
            files, cell, ctx, resolution.status, started, reason=resolution.reason
        )

    key = cell_key(resolution.lock, ctx, fingerprint)
    state = key.to_dict()
    files.lock.parent.mkdir(parents=True, exist_ok=True)
    files.lock.write_text(resolution.lock, encoding="utf-8")
    finished = _finished_or_reused(files, cell, key, ctx, log)
    if finished is not None:
        return finished
    write_atomically(files.state, json.dumps(state))

    stack, installing, failure = _install(files, resolution.lock, venv_python, cell, ctx, log=log)
    if failure is not None:
        return _finish_whole_cell(
            files, cell, ctx, Status.INSTALL_ERROR, started, reason=failure, done=False
        )

    cell_info = {
        **cell.to_dict(),
        "lock_id": resolution.lock_id,
        "run_id": ctx.run_id,
        "runner_labels": list(ctx.runner_labels),
    }
    if stack is not None:
        cell_info["host_packages"] = stack.visible(installing)
    write_atomically(files.cell_info, json.dumps(cell_info))
    command, targets = pytest_command(venv_python, files.cell_info, path, ctx)
    with lease_devices(
        ctx.hardware_class.gpus,
        machine_devices(fingerprint, ctx.env),
        default_lock_dir(ctx.env),
        on_wait=lambda: log(f"[ftmatrix] {cell.label}: waiting for a free GPU"),
    ) as devices:
        if devices:
            log(f"[ftmatrix] {cell.label}: leased GPU(s) {','.join(devices)}")
        log(f"[ftmatrix] {cell.label}: running cases in {ctx.cases_dir}")
        begin = time.monotonic()
        workdir = cell_workdir(ctx.out_dir, ctx.run_id, cell.id)
        shutil.rmtree(workdir, ignore_errors=True)  # what a killed run left there
        workdir.mkdir(parents=True)
        records = run_cases(
            command,
            targets,
            record_file=path,
            cases_dir=ctx.cases_dir.resolve(),
            env={**cell_env(ctx.env), **lease_env(devices)},
            cwd=workdir,
            limits=CaseLimits(
                case_seconds=ctx.timeouts.case,
                cell_seconds=ctx.timeouts.cell,
                memory_bytes=memory_limit_bytes(ctx.limits, fingerprint),
            ),
            make_record=_record_factory(cell, ctx, lock_id=resolution.lock_id),
            log=log,
            progress=progress,
            parallel=parallel_args(worker_count(ctx.limits)),
        )
    log(f"[ftmatrix] {cell.label}: cases finished in {time.monotonic() - begin:.1f}s")
    write_atomically(files.done, json.dumps({"key": state, "since": ctx.run_id, "ran_at": started}))
    shutil.rmtree(workdir, ignore_errors=True)
    # The lists of collected case ids served a resume of this cell; its records are whole
    # now, and ids are raw (unredacted) text: nothing of them stays beside the records.
    for listing in (collected_cases_path(path), isolated_cases_path(path)):
        listing.unlink(missing_ok=True)
    return records


def _finished_or_reused(
    files: _CellFiles, cell: Cell, key: CellKey, ctx: CellContext, log: Log
) -> list[Record] | None:
    """The cell's records without running it: this run finished it already (resume), or
    its newest run in the history had this key (reuse); None when its cases must run."""
    state = key.to_dict()
    if ctx.resume:
        if files.done_key() == state:
            log(f"[ftmatrix] {cell.label}: complete in run {ctx.run_id}; nothing to resume")
            return CellRecordFile(files.records).records
        if files.read_json(files.state) != state:
            files.clear()  # the lock or the cases changed: earlier records no longer apply
    if ctx.reuse_days:
        history = ctx.out_dir / "history.sqlite"
        earlier = earlier_runs(history, cell_ids=[cell.id], excluding=ctx.run_id).get(cell.id)
        decision = decide(cell.id, key, earlier, max_age_days=ctx.reuse_days, today=ctx.today())
        if decision.reuse and earlier is not None:
            log(f"[ftmatrix] {cell.label}: {decision.describe()}: no install, no case runs")
            return reuse_records_of_cell(ctx.out_dir, ctx.run_id, cell.id, earlier, key)
        log(f"[ftmatrix] {cell.label}: {decision.describe()}")
    return None


def _install(
    files: _CellFiles, lock: str, venv_python: Path, cell: Cell, ctx: CellContext, *, log: Log
) -> tuple[HostStack | None, list[str], str | None]:
    """Sync the venv to ``lock``: the host's stack, what was installed, why it failed (or None)."""
    to_install, stack = _take_from_host(files, lock, venv_python, ctx)
    installing = locked_requirements(to_install.read_text(encoding="utf-8"))
    if stack is not None:
        from_host = len(locked_requirements(lock)) - len(installing)
        log(f"[ftmatrix] {cell.label}: {from_host} locked packages are the host's ({KEY})")
    log(f"[ftmatrix] {cell.label}: installing {len(installing)} packages")
    install = _with_retries(
        lambda: run_uv(
            ["pip", "sync", "--python", str(venv_python), str(to_install)]
            + uv_index_args(ctx.install, ctx.env),
            ctx.env,
        ),
        lambda p: p.returncode != 0 and bool(TRANSIENT.search(p.stderr)),
        ctx,
        log,
    )
    if install.returncode != 0:
        reason = redact(last_lines(install.stderr), ctx.env)
        log(f"[ftmatrix] {cell.label}: install-error: {reason}")
        return stack, installing, reason
    return stack, installing, None


def cell_workdir(out_dir: Path, run_id: str, cell_id: str) -> Path:
    """The working directory of a cell's pytest, its own: what cases write there stays apart.

    unsloth, for one, writes ``unsloth_compiled_cache/`` into the working directory;
    two cells sharing one would share (and race on) it. Outside ``records/``, whose
    ``*.jsonl`` files are all read as records. Removed once the cell is done.
    """
    return (out_dir / "work" / run_id / cell_id).resolve()


def _take_from_host(
    files: _CellFiles, lock: str, venv_python: Path, ctx: CellContext
) -> tuple[Path, HostStack | None]:
    """What the venv installs, and the host's packages it takes (install.system-packages).

    What resolved to the host's version stays out of the venv; a .pth makes it importable.
    """
    stack = host_stack(ctx.install, ctx.env)
    link_host_site(venv_python, stack)
    if stack is None:
        return files.lock, None
    to_install = files.sibling(".install.txt")
    to_install.write_text(stack.strip(lock), encoding="utf-8")
    return to_install, stack


def _complete_with_its_lock(
    files: _CellFiles, ctx: CellContext, fingerprint: Mapping[str, Any]
) -> bool:
    """Did this run already finish the cell, with the lock it resolved and these cases?

    Within one run the cell's lock stands: resuming does not resolve again, so a
    finished cell costs a file read, not a resolver round trip.
    """
    if not files.lock.exists():
        return False
    lock = files.lock.read_text(encoding="utf-8")
    return bool(files.done_key() == cell_key(lock, ctx, fingerprint).to_dict())


def cell_key(lock: str, ctx: CellContext, fingerprint: Mapping[str, Any]) -> CellKey:
    """What the cell's results depend on tonight: its lock, its cases, this machine."""
    return CellKey(
        lock_id=lock_id(lock),
        cases_id=cases_id(
            ctx.cases_dir, ctx.case_selection, judging(ctx.pytest_args, ctx.timeouts, ctx.limits)
        ),
        hardware_id=hardware_id(fingerprint),
        packages=locked_packages(lock),
    )


def locked_packages(lock: str) -> dict[str, str]:
    """A lock's ``name -> version``: what tells which packages moved between two locks."""
    pairs = (line.partition("==") for line in locked_requirements(lock))
    return {name.strip(): version.strip() for name, sep, version in pairs if sep}


def reuse_records_of_cell(
    out_dir: Path, run_id: str, cell_id: str, earlier: EarlierRun, key: CellKey
) -> list[Record]:
    """Carry ``earlier``'s records into run ``run_id``, marked done with the same key.

    The marker keeps the run that really ran the cases (``since``) and its day, so the
    results' age counts from there, however many nights reused them.
    """
    files = _CellFiles(record_path(out_dir, run_id, cell_id), cell_id)
    records = carried_forward(earlier.records, run_id=run_id, since=earlier.since)
    file = CellRecordFile(files.records)
    file.records = records
    file.save()
    ran_at = earlier.ran_on.isoformat() if earlier.ran_on else None
    marker = {"key": key.to_dict(), "since": earlier.since, "ran_at": ran_at}
    write_atomically(files.done, json.dumps(marker))
    return records


def cases_id(cases_dir: Path, selection: Sequence[str] = (), options: Sequence[str] = ()) -> str:
    """A hash of what the selected cases run: the selected test files, and every other file
    of the cases folder (conftest files, helper modules, data, pytest's ini).

    ``selection`` holds the matrix's ``cases`` (paths or node ids relative to the folder);
    empty selects the whole folder. A test file outside the selection changes nothing
    this cell runs, so it is left out: touching it re-runs no cell that does not select it.
    The selection itself and pytest ``options`` (``-k``, ``-m``) count too: results of some
    cases never stand for a run of others.
    """
    chosen = [cases_dir / entry.split("::", 1)[0] for entry in selection]
    digest = hashlib.sha256(json.dumps([sorted(selection), list(options)]).encode())
    for path in sorted(cases_dir.rglob("*")):
        if not path.is_file() or "__pycache__" in path.parts:
            continue
        if chosen and _is_test_file(path) and not any(_within(path, c) for c in chosen):
            continue
        digest.update(str(path.relative_to(cases_dir)).encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def judging(options: Sequence[str], timeouts: Timeouts, limits: Limits) -> tuple[str, ...]:
    """What decides a case's status besides its files: pytest options, and the time and
    memory a case may use (a lower limit can turn last night's pass into a timeout or oom).

    Named field by field, never a dataclass's repr: a field added to Timeouts or Limits
    must not silently change every stored key (so no result would ever be reused again).
    """
    return (
        *options,
        f"timeouts.case={timeouts.case:g}",
        f"timeouts.cell={timeouts.cell:g}",
        f"limits.memory-gib={'default' if limits.memory_gib is None else f'{limits.memory_gib:g}'}",
        f"limits.workers={limits.workers}",
    )


def _is_test_file(path: Path) -> bool:
    """pytest's default test file names: what a selection chooses among."""
    return path.suffix == ".py" and (path.name.startswith("test_") or path.stem.endswith("_test"))


def _within(path: Path, chosen: Path) -> bool:
    return path == chosen or chosen in path.parents


def hardware_class_gap(hardware: HardwareClass, fingerprint: Mapping[str, Any]) -> str | None:
    """Why this machine cannot stand for ``hardware``, or None if it can."""
    have = int(fingerprint.get("gpu_count", 0))
    if have < hardware.gpus:
        return (
            f"hardware class {hardware.name!r} needs {hardware.gpus} GPU(s); "
            f"this machine has {have}"
        )
    return None


def machine_devices(fingerprint: Mapping[str, Any], env: Mapping[str, str]) -> list[str]:
    """The GPU indices cells may lease: CUDA_VISIBLE_DEVICES if set, else every GPU."""
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [d.strip() for d in visible.split(",") if d.strip()]
    return [str(i) for i in range(int(fingerprint.get("gpu_count", 0)))]


def memory_limit_bytes(limits: Limits, fingerprint: Mapping[str, Any]) -> int | None:
    """The memory a cell's cases may use: matrix.yaml's limit, else most of the machine's."""
    if limits.memory_gib is not None:
        return int(limits.memory_gib * 2**30)
    total = fingerprint.get("memory_gib")
    return int(float(total) * DEFAULT_MEMORY_SHARE * 2**30) if total else None


def pytest_command(
    venv_python: Path, cell_file: Path, record_file: Path, ctx: CellContext
) -> tuple[list[str], list[str]]:
    """The pytest command line (without targets) and the default case targets."""
    # Absolute paths: the cell's pytest runs in a working directory of its own.
    cases_dir = ctx.cases_dir.resolve()
    cell_file, record_file = cell_file.resolve(), record_file.resolve()
    ini = next((cases_dir / n for n in PYTEST_INI_NAMES if (cases_dir / n).is_file()), None)
    targets = [str(cases_dir / s) for s in ctx.case_selection] or [str(cases_dir)]
    command = [
        str(venv_python),
        "-m",
        "pytest",
        "-p",
        "ftmatrix.cell.plugin",
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
        # A case file that does not import is recorded; the others still run.
        "--continue-on-collection-errors",
        "-rA",
        *ctx.pytest_args,
    ]
    return command, targets


def worker_count(limits: Limits) -> int:
    """How many pytest-xdist workers share the cell's cases: ``auto`` is one per usable CPU."""
    if limits.workers != "auto":
        return limits.workers
    # Cells run under CI runners and containers pinned to a few CPUs: count those.
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1)


def with_test_runners(cell: Cell, limits: Limits) -> Cell:
    """The cell as resolved and installed: pytest-xdist joins it when workers share it.

    Added as a support package (unpinned, like pytest itself), so it is in the lock
    and in every record's package list; the cell's own id and label stay as they are.
    """
    if limits.workers == 1:
        return cell
    return replace(cell, support=(*cell.support, XDIST_REQUIREMENT))


def parallel_args(workers: int) -> list[str]:
    """pytest arguments for the pass where ``workers`` share the machine ([] for one).

    Cases that must not share the machine are not kept together by a ``--dist``
    mode but kept out: the plugin leaves the exclusive cases out of this pass and
    the supervisor runs them alone after it. ``load`` hands out single cases and
    drops the one a dead worker was running; pytest-xdist's scope-based modes
    (``loadfile``, ``loadgroup``) put it back in the queue, and a case that kills
    its worker would kill the next one too, or hang the run (seen with 3.8).
    """
    if workers <= 1:
        return []
    return ["-n", str(workers), "--dist", "load", "--ftmatrix-parallel"]


def cell_env(env: Mapping[str, str]) -> dict[str, str]:
    """The cell's environment: offline, and ftmatrix's plugin importable without installing it."""
    # The plugin needs only the standard library, pytest and packaging. Only a copy of
    # ftmatrix.cell goes on the path: the folder this package is installed in may be a
    # site-packages holding nox, uv, pyyaml or torch, which must not leak into a cell.
    path = os.pathsep.join(p for p in (str(plugin_root()), env.get("PYTHONPATH", "")) if p)
    return {**env, **OFFLINE_ENV, "PYTHONPATH": path}


def plugin_root() -> Path:
    """A folder holding only ``ftmatrix/__init__.py`` and ``ftmatrix/cell/``, copied once.

    Named by a hash of the files, so every cell and process of one ftmatrix shares it
    and another version of ftmatrix gets its own.
    """
    package = Path(__file__).resolve().parent
    files = [package / "__init__.py", *sorted((package / "cell").glob("*.py"))]
    digest = hashlib.sha256()
    for file in files:
        digest.update(file.relative_to(package).as_posix().encode() + b"\0" + file.read_bytes())
    root = Path(tempfile.gettempdir()) / f"ftmatrix-plugin-{digest.hexdigest()[:16]}"
    if not root.is_dir():
        building = Path(tempfile.mkdtemp(prefix=f"{root.name}.", dir=root.parent))
        building.chmod(0o755)  # mkdtemp's is private; every user's cells read this one
        for file in files:
            target = building / "ftmatrix" / file.relative_to(package)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(file, target)
        try:
            building.rename(root)
        except OSError:  # another process built it first: theirs is the same
            shutil.rmtree(building, ignore_errors=True)
    return root


@dataclass(frozen=True)
class _CellFiles:
    records: Path
    cell_id: str

    def sibling(self, suffix: str) -> Path:
        return self.records.with_name(f"{self.cell_id}{suffix}")

    @property
    def lock(self) -> Path:
        return self.sibling(".lock.txt")

    @property
    def cell_info(self) -> Path:
        return self.sibling(".cell.json")

    @property
    def state(self) -> Path:
        return self.sibling(".state.json")

    @property
    def done(self) -> Path:
        return self.sibling(DONE_SUFFIX)

    def done_key(self) -> Any:
        """The key the run finished the cell with (None: not finished, or a whole-cell end)."""
        marker = self.read_json(self.done)
        return marker.get("key") if isinstance(marker, dict) else None

    def clear(self) -> None:
        for path in (
            self.records,
            self.state,
            self.done,
            current_case_path(self.records),
            collected_cases_path(self.records),
            isolated_cases_path(self.records),
        ):
            path.unlink(missing_ok=True)

    @staticmethod
    def read_json(path: Path) -> Any:
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None


def _with_retries(
    action: Callable[[], _T], transient: Callable[[_T], bool], ctx: CellContext, log: Log
) -> _T:
    """``action()``, tried again after a pause while its failure looks transient."""
    result = action()
    for delay in RETRY_DELAYS:
        if not transient(result):
            break
        log(f"[ftmatrix] transient failure; retrying in {delay:g} s")
        ctx.sleep(delay)
        result = action()
    return result


def _record_factory(
    cell: Cell, ctx: CellContext, *, lock_id: str | None = None
) -> Callable[..., Record]:
    hardware = probe_hardware(ctx.env)

    def make(**fields: Any) -> Record:
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
            hardware=hardware,
            beyond_cap=cell.beyond_cap,
            case=case,
            operation=operation,
            started_at=fields.pop("started_at", now),
            finished_at=now,
            **fields,
        )

    return make


def _finish_whole_cell(
    files: _CellFiles,
    cell: Cell,
    ctx: CellContext,
    status: Status,
    started: str,
    *,
    reason: str | None,
    done: bool = True,
) -> list[Record]:
    """One record standing for every case of a cell that never got to run them."""
    operation = "install" if status in (Status.UNINSTALLABLE, Status.INSTALL_ERROR) else "cell"
    record = _record_factory(cell, ctx)(
        case=WHOLE_CELL, operation=operation, status=status, reason=reason, started_at=started
    )
    file = CellRecordFile(files.records)
    file.records = [record]
    file.save()
    if done:
        # Resume skips it; an install-error is not 'done': a later run may get through.
        write_atomically(files.done, json.dumps({"whole_cell": status.value}))
    return [record]


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def current_python() -> str:
    """``3.11`` for the interpreter running ftmatrix: the default cell Python."""
    return f"{sys.version_info.major}.{sys.version_info.minor}"
