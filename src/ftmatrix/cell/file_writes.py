"""How a cell's files are written: a line appended whole, a file replaced whole, synced.

A run can be killed at any moment (a case that kills its parent, a full disk, a machine
that goes down): each write leaves a file as it was before it or as it is after it, never
half, and a folder lock keeps the writers of one folder (xdist workers, the supervisor,
cells of a run) out of each other's way.

This module runs inside each cell's environment too, so it imports the standard library only.
"""

from __future__ import annotations

import contextlib
import functools
import os
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]

# A record is on disk (fsync) at most this long after it was written: every record's own
# fsync cost a trivial case several times its run. A process killed (kill -9) loses nothing
# either way; a machine that goes down may lose the last moments' records, and a resumed
# run runs those cases again (the runner syncs the file before it marks the cell done).
SYNC_SECONDS = 0.5
_last_sync = 0.0


def append_line(path: Path, line: bytes) -> None:
    """Append ``line`` to ``path``: whole, on a line of its own, synced now and then.

    A line torn by an earlier write that never finished stays alone on its line (unread,
    reported), never glued to this one. A write that fails (a full disk) leaves the file
    as it was before it.
    """
    global _last_sync  # noqa: PLW0603 -- one process's clock of its last fsync
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            line = b"\n" + line
        try:
            view = memoryview(line)
            while view:
                view = view[os.write(fd, view) :]
        except OSError:
            os.ftruncate(fd, size)  # no half line left behind
            raise
        if time.monotonic() - _last_sync >= SYNC_SECONDS:
            os.fsync(fd)
            _last_sync = time.monotonic()
    finally:
        os.close(fd)


def sync_file(path: Path) -> None:
    """Put ``path``'s written data on disk (before a marker that says it is whole)."""
    with contextlib.suppress(FileNotFoundError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def locked_folder(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path``'s folder; the holder's death releases it.

    The folder, not a file beside ``path``: a lock file would be left among the
    records, and ``path`` itself is replaced when it is compacted. Cells of a run share
    the folder, but each holds the lock only for one small write.
    """
    if fcntl is None:  # Windows, where nothing else of the supervisor works either
        path.parent.mkdir(parents=True, exist_ok=True)
        yield
        return
    try:
        folder = os.open(path.parent, os.O_RDONLY)
    except FileNotFoundError:  # made once; asked before every record, it cost as much
        path.parent.mkdir(parents=True, exist_ok=True)
        folder = os.open(path.parent, os.O_RDONLY)
    try:
        fcntl.flock(folder, fcntl.LOCK_EX)
        yield
    finally:
        os.close(folder)


def write_atomically(path: Path, text: str, *, durable: bool = True) -> None:
    """Replace ``path`` with ``text`` so readers see the old or the new file, never half.

    ``durable``: on disk before the rename (fsync), so a machine that goes down keeps it
    too; a note that lives only while its case runs (the running case) need not wait.
    """
    if not durable:
        _replace_quickly(path, text.encode("utf-8"))
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        # mkstemp's 0600 would outlive the rename: the report's files were 0600 among 0644s.
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        Path(tmp).replace(path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _replace_quickly(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` as :func:`write_atomically` does, without its fsync,
    in a few system calls: the plugin notes the running case this way before every case,
    and the temporary file's random name, mode change and file object were most of the
    note's cost. The temporary name is this thread's own; its mode is the umask's."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_native_id()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@functools.cache
def _umask() -> int:
    """The process's umask, read where setting it to learn it would race other threads."""
    try:
        for line in Path("/proc/self/status").read_text(encoding="utf-8").splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return 0o022
