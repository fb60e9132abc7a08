"""How a cell's pytest starts: its command line, its environment and its workers.

The environment keeps the cell offline, puts a copy of ``ftmatrix.cell`` (the results
plugin and what it imports) on its path without installing ftmatrix, keeps the bytecode
of what its processes import per lock, and shares the CPUs among the processes of cells
side by side. The runner (ftmatrix.runner) starts pytest with these under the supervisor.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

from ftmatrix.config import Limits
from ftmatrix.path_kinds import check_kinds
from ftmatrix.sharing import usable_cpus

# Frameworks must never reach the model hub from a cell: everything is built offline.
OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "WANDB_MODE": "disabled",
    "TOKENIZERS_PARALLELISM": "false",
}
# Where a cell's venv keeps the bytecode of what its processes imported (one folder per
# lock): see bytecode_cache.
BYTECODE_PREFIX = "ftmatrix-bytecode-"
# The caller's variables a cell never sees (see cell_env): its own interpreter's home, and
# its interactive sessions' settings (a cell is never one: PYTHONINSPECT left each pytest
# a "SystemExit" traceback in the cell's log, and on a terminal, a prompt that waits).
CALLERS_ONLY = frozenset(
    {"PYTHONPATH", "PYTEST_PLUGINS", "PYTHONHOME", "PYTHONINSPECT", "PYTHONSTARTUP"}
)
# How many names plugin_root tries in the shared temporary folder before a private copy.
PLUGIN_FOLDER_TRIES = 8
PYTEST_INI_NAMES = ("pytest.ini", ".pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg")


class CasesToRun(Protocol):
    """Which cases a cell runs, and how (ftmatrix.runner.CellContext is one)."""

    @property
    def cases_dir(self) -> Path: ...
    @property
    def case_selection(self) -> Sequence[str]: ...
    @property
    def pytest_args(self) -> Sequence[str]: ...


def pytest_command(
    venv_python: Path, cell_file: Path, record_file: Path, ctx: CasesToRun
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
        # The short summary of every case but the passes, which the results plugin lists
        # (the log's list of verdicts): pytest's -rp made each pass's line through its
        # summary machinery, 0.04 ms a case, 0.08 s of CPU at 2,000 trivial cases. Not the
        # passes' captured output (-rP): pytest finds each pass's teardown by scanning every
        # report, a cost that grew with the square of the cell's cases (CPU seconds added:
        # 0.3 at 1,000 trivial cases, 1.3 at 2,000, 5.9 at 4,000). A failure's output is in
        # its section as before.
        "-ra",  # (before the user's options: their own -r wins)
        # The user's options (after `--`) first: where they name one of ours again (a
        # `-p no:` of the plugin, a --confcutdir, a -c), the last given wins, and ours must.
        *ctx.pytest_args,
        "-p",
        "ftmatrix.cell.plugin",
        "--ftmatrix-cell",
        str(cell_file),
        "--ftmatrix-record",
        str(record_file),
        "--rootdir",
        str(cases_dir),
        # Only the cases folder's own conftest.py files: one in a folder above it (a shared
        # /tmp, a parent checkout) is code nobody asked to run in the cell. pytest loads
        # conftests up to the ini file's folder, and with no ini (os.devnull) from the root.
        "--confcutdir",
        str(cases_dir),
        # Our own repository's pytest settings must not leak into a user's cases.
        "-c",
        str(ini) if ini else os.devnull,
        "-p",
        "no:cacheprovider",
        # A case file that does not import is recorded; the others still run.
        "--continue-on-collection-errors",
    ]
    return command, targets


def worker_count(limits: Limits) -> int:
    """How many pytest-xdist workers share the cell's cases: ``auto`` is one per usable CPU."""
    if limits.workers != "auto":
        return limits.workers
    # Cells run under CI runners and containers pinned to a few CPUs: count those.
    return usable_cpus()


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


def cell_env(
    env: Mapping[str, str], *, bytecode: Path | None = None, threads: int | None = None
) -> dict[str, str]:
    """The cell's environment: offline, and ftmatrix's plugin importable without installing it.

    ``bytecode``: the folder where the cell's processes keep the bytecode of what they
    import (``PYTHONPYCACHEPREFIX``); None leaves the caller's settings as they are.
    ``threads``: torch's threads per process (``OMP_NUM_THREADS``) where processes share
    the CPUs, unless the caller's environment sets them; None: torch's own default.
    """
    # The plugin needs only the standard library, pytest and packaging. Only a copy of
    # ftmatrix.cell goes on the path: the folder this package is installed in may be a
    # site-packages holding nox, uv, pyyaml or torch, which must not leak into a cell.
    # Nor does the caller's PYTHONPATH (as tox drops it): its folders' modules would shadow
    # the cell's pinned packages and its sitecustomize.py run in every process. Nor
    # PYTEST_PLUGINS, set for some other project's tests: code nobody asked the cell to run.
    cell = {k: v for k, v in env.items() if k not in CALLERS_ONLY}
    cell.update(OFFLINE_ENV, PYTHONPATH=str(plugin_root()))
    if bytecode is not None:
        # uv installs no bytecode, so without a place to write it every process (pytest,
        # each rank of a launch) compiled torch, transformers and trl from source again:
        # about half of a CPU cell's time. The prefix keeps it out of the source folders
        # (the cases, site-packages), which PYTHONDONTWRITEBYTECODE is usually set to spare.
        cell.pop("PYTHONDONTWRITEBYTECODE", None)
        cell["PYTHONPYCACHEPREFIX"] = str(bytecode)
    if threads is not None:
        cell.setdefault("OMP_NUM_THREADS", str(threads))
    return cell


def bytecode_cache(venv_python: Path, lock_id: str) -> Path:
    """The folder of the venv's bytecode for the lock ``lock_id``, made empty of any other's.

    Beside the venv it serves, so it lives and goes with it. Bytecode is checked against
    its source's modification time and size only; a folder per lock keeps a module of
    one release from ever taking the bytecode of another's.
    """
    venv = venv_python.parent.parent
    folder = venv / f"{BYTECODE_PREFIX}{lock_id}"
    for earlier in venv.glob(f"{BYTECODE_PREFIX}*"):
        if earlier != folder:
            shutil.rmtree(earlier, ignore_errors=True)
    check_kinds([(folder, "folder", "the cell's bytecode folder")])
    folder.mkdir(parents=True, exist_ok=True)
    return folder.resolve()


def plugin_root() -> Path:
    """A folder holding only ``ftmatrix/__init__.py`` and ``ftmatrix/cell/``, copied once.

    Named by a hash of the files, so every cell and process of one ftmatrix shares it
    and another version of ftmatrix gets its own. Checked before each use, as it lies in
    the machine's shared temporary folder: one a temp cleaner emptied in part (a CI
    runner's, after days) would fail every cell, and one another user made first (its
    name can be known in advance), or that others may write into, would have every cell
    run their code. Such a folder is never used: the next name is, made anew.
    """
    package = Path(__file__).resolve().parent
    files = [package / "__init__.py", *sorted((package / "cell").glob("*.py"))]
    sources = {file.relative_to(package).as_posix(): file.read_bytes() for file in files}
    digest = hashlib.sha256()
    for name, data in sources.items():
        digest.update(name.encode() + b"\0" + data)
    name = f"ftmatrix-plugin-{digest.hexdigest()[:16]}"
    # A folder found damaged or not ours is left as it is and the next name tried: removing
    # it could take one away from under a cell beside this that made it whole meanwhile.
    for candidate in [name, *(f"{name}-{n}" for n in range(1, PLUGIN_FOLDER_TRIES))]:
        root = Path(tempfile.gettempdir()) / candidate
        if _intact(root, sources):
            return root
        if os.path.lexists(root):
            continue
        made = _copy(sources, root)
        if made == root or _intact(root, sources):  # (another process made it first)
            return root
        shutil.rmtree(made, ignore_errors=True)
    return _copy(sources, None)


def _copy(sources: Mapping[str, bytes], root: Path | None) -> Path:
    """``sources`` copied into a new folder, renamed to ``root`` where it can be (where
    another process made it first it cannot); where it was made (None: a private one)."""
    folder = Path(tempfile.gettempdir()) if root is None else root.parent
    building = Path(tempfile.mkdtemp(prefix="ftmatrix-plugin.", dir=folder))
    for name, data in sources.items():
        target = building / "ftmatrix" / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        target.chmod(0o644)  # whatever the umask: no one else may change what cells run
    for made in (building / "ftmatrix" / "cell", building / "ftmatrix", building):
        made.chmod(0o755)  # mkdtemp's is private; every cell of this user reads it
    if root is None:
        return building
    try:
        building.rename(root)
    except OSError:
        return building
    return root


def _ours(path: Path, *, folder: bool = True) -> bool:
    """Is ``path`` a folder (or a plain file) of this user's that no one else may write?"""
    try:
        status = path.lstat()
    except OSError:
        return False
    kind = stat.S_ISDIR if folder else stat.S_ISREG
    return kind(status.st_mode) and status.st_uid == os.getuid() and not status.st_mode & 0o022


def _intact(root: Path, sources: Mapping[str, bytes]) -> bool:
    """Does ``root`` hold exactly ``sources``' bytes, in folders and files of this user's?"""
    folders = (root, root / "ftmatrix", root / "ftmatrix" / "cell")
    if not all(_ours(folder) for folder in folders):
        return False
    for name, data in sources.items():
        path = root / "ftmatrix" / name
        try:
            if not _ours(path, folder=False) or path.read_bytes() != data:
                return False
        except OSError:
            return False
    return True
