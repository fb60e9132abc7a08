"""How a cell's files are written: a line appended whole, a file replaced whole, synced.

A run can be killed at any moment (a case that kills its parent, a full disk, a machine
that goes down): each write leaves a file as it was before it or as it is after it, never
half, and a folder lock keeps the writers of one file (xdist workers, the supervisor)
out of each other's way; a file with one writer at a time (a pytest of one process and
its records) is written without it.

This module runs inside each cell's environment too, so it imports the standard library only.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import os
import sys
import tempfile
import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]

# What a full disk (or a spent quota, or a file size limit) raises, wherever it is met.
DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})

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
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        _append_whole(fd, os.fstat(fd).st_size, line)
    finally:
        os.close(fd)


def _append_whole(fd: int, size: int, line: bytes, *, ends_a_line: bool = False) -> int:
    """:func:`append_line` on ``fd``, a file of ``size`` bytes opened with O_APPEND (under
    the folder lock); ``ends_a_line``: its last byte is known to be a newline (this process
    wrote it). The file's size after it."""
    global _last_sync  # noqa: PLW0603 -- one process's clock of its last fsync
    if size and not ends_a_line and os.pread(fd, 1, size - 1) != b"\n":
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
    return size + len(line)


class LineAppender:
    """:func:`append_line` for a process that appends to one file after every case (the
    results plugin): the file (and its folder, for the lock) stays open between lines, so
    a line costs a look at the file and the write (and a read of its last byte where
    another process wrote since), under :func:`locked_folder` where others append too.

    Each use first checks (fstat) that a kept descriptor is still the file it opened and
    that the file is still in its folder: a file replaced whole (compaction) or removed is
    opened again by name (a removed one's lines written into the new one first), and so
    is a descriptor a case closed (or closed and reused for a file of its own), which is
    then left alone. :meth:`close` when done.
    """

    def __init__(self, path: Path, *, shared: bool = True, short: bool = False) -> None:
        """``shared``: other processes append to the file meanwhile (pytest-xdist's
        workers, the supervisor noting a dead worker's case): each line under the folder
        lock. A pytest of one process is the file's only writer while it runs (the
        supervisor writes and compacts it only between two pytest processes), and its
        lines need no lock. ``short``: short lines, each whole by one write among other
        writers' without the lock, never read torn nor synced (the case starts)."""
        self.path = path
        self._file: tuple[int, tuple[int, int]] | None = None  # descriptor, (device, inode)
        self._folder: tuple[int, tuple[int, int]] | None = None
        self._end: int | None = None  # the file's size after this appended last
        self._short = short
        self._locked = shared and not short and fcntl is not None

    def append(self, line: bytes) -> None:
        if self._short:
            os.write(self._file_fd()[0], line)  # one short write: whole among the others'
            return
        if not self._locked:
            self._append(line)
            return
        folder = self._folder_fd()
        fcntl.flock(folder, fcntl.LOCK_EX)
        try:
            self._append(line)
        finally:
            fcntl.flock(folder, fcntl.LOCK_UN)

    def _append(self, line: bytes) -> None:
        fd, size = self._file_fd()
        # Where the file ends where this wrote last, its last byte is that line's newline.
        ends_a_line, self._end = size == self._end, None
        self._end = _append_whole(fd, size, line, ends_a_line=ends_a_line)

    def close(self) -> None:
        for kept in (self._file, self._folder):
            _close_if_ours(kept)
        self._file = self._folder = None

    def _folder_fd(self) -> int:
        if self._folder is not None and _still(self._folder) is not None:
            return self._folder[0]
        self._forget(self._folder)
        try:
            fd = kept_open(self.path.parent, os.O_RDONLY)
        except FileNotFoundError:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = kept_open(self.path.parent, os.O_RDONLY)
        self._folder = (fd, _identity(os.fstat(fd)))
        return fd

    def _file_fd(self) -> tuple[int, int]:
        """The file's descriptor and its size now (under the lock)."""
        held = b""
        if self._file is not None:
            status = _still(self._file)
            if status is not None:
                return self._file[0], status.st_size
            # Removed (a case removed its folder), its lines are kept; replaced whole by
            # another file (a compaction), the new file is the one to go on with.
            held = b"" if self.path.exists() else _removed_lines(self._file)
        self._forget(self._file)
        self._end = None
        try:
            fd = kept_open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        except FileNotFoundError:  # its folder removed too
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = kept_open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        size = os.fstat(fd).st_size
        if held:  # a case removed the file (its folder) under this process: its lines stay
            size = _append_whole(fd, size, held)
            lines = held.count(b"\n")
            sys.stderr.write(
                f"ftmatrix: {self.path.name} was removed under this process (by a case): "
                f"its {lines} line(s) written again\n"
            )
        self._file = (fd, _identity(os.fstat(fd)))
        return fd, size

    def _forget(self, kept: tuple[int, tuple[int, int]] | None) -> None:
        """Close a kept descriptor that is ours still (its file replaced or removed); one
        that is not (a case closed it, maybe opened another file on its number) is left."""
        if kept is None:
            return
        _close_if_ours(kept)
        if kept is self._file:
            self._file = None
        if kept is self._folder:
            self._folder = None


# Where the descriptors kept open between cases are put: above the numbers pytest's output
# capture saves the terminal's on. A case that closes every descriptor it did not open
# closes those too; one of ours opened again on its lowest free number took the number
# pytest restores the terminal from, and pytest's output went into the records file.
_KEPT_FROM = 512


def kept_open(path: Path | str, flags: int, mode: int = 0o777) -> int:
    """``os.open``, on a number from :data:`_KEPT_FROM` up (where the limit of open files
    allows), for a descriptor kept open between cases."""
    fd = os.open(path, flags, mode)
    if fcntl is None or fd >= _KEPT_FROM:
        return fd
    try:
        high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, _KEPT_FROM)
    except OSError:  # a limit of open files at or under it
        return fd
    os.close(fd)
    return high


def _identity(status: os.stat_result) -> tuple[int, int]:
    return status.st_dev, status.st_ino


def _close_if_ours(kept: tuple[int, tuple[int, int]] | None) -> None:
    """Close a kept descriptor where it is still the file it opened (removed or replaced
    since, it is still ours to close); one a case closed or reused is left alone."""
    if kept is None:
        return
    with contextlib.suppress(OSError):
        if _identity(os.fstat(kept[0])) == kept[1]:
            os.close(kept[0])


def _still(kept: tuple[int, tuple[int, int]]) -> os.stat_result | None:
    """``kept``'s status, if its descriptor is still the file it opened and that file is
    still linked in its folder; else None."""
    try:
        status = os.fstat(kept[0])
    except OSError:
        return None
    return status if _identity(status) == kept[1] and status.st_nlink else None


def _removed_lines(kept: tuple[int, tuple[int, int]]) -> bytes:
    """The whole lines a file removed under this process held, read through its kept
    descriptor (a removed file lives on while it is open); b"" where the descriptor is not
    that file any more (a case closed it, maybe opened a file of its own on its number)."""
    try:
        status = os.fstat(kept[0])
        if _identity(status) != kept[1] or status.st_nlink:
            return b""
        data = os.pread(kept[0], status.st_size, 0)
    except OSError:
        return b""
    return data[: data.rfind(b"\n") + 1]


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
    in a few system calls (the plugin's note of a dead pytest-xdist worker's exit; the
    running-case note itself is a :class:`NoteFile`). The temporary name is this thread's
    own; its mode is the umask's."""
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


class NoteFile:
    """A small note rewritten in place before every case and spoiled after it (the
    results plugin's running-case note): two writes to a file kept open, where making a
    file, renaming it over the last and removing it cost a trivial case 55 microseconds
    of the filesystem's work.

    A reader may meet a note half rewritten (reading a file is not kept out while it is
    written in place), so each note carries a checksum of itself (:func:`note_text`), and
    :func:`read_note` reads a note that fails it, like an empty one, as no note: the
    supervisor, which reads the note four times a second, takes the next look. Before each
    use the kept descriptor is checked (fstat) to be the note still: one a case closed (or
    closed and reused for a file of its own) is left alone and the note opened again.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._kept: tuple[int, tuple[int, int]] | None = None  # descriptor, (device, inode)

    def write(self, body: str) -> None:
        """Make the note ``body`` (a JSON object's text)."""
        fd, size = self._fd()
        data = note_text(body).encode("utf-8")
        if size > len(data):
            # What is left of a longer note is covered by spaces after the JSON (inside the
            # checksum), not cut off by a second system call.
            data = note_text(body + " " * (size - len(data))).encode("utf-8")
        os.pwrite(fd, data, 0)

    def clear(self) -> bool:
        """Say that no case runs: the note's first byte spoiled, so that it fails its
        checksum and reads as no note (one byte written, where emptying the file cost
        the filesystem more). False where the note's descriptor is not the note any more:
        closed by the case that ran since it was written, or taken for a file of its own."""
        if self._kept is None:
            return True  # no note written: nothing to say
        status = _still(self._kept)
        if status is None:
            return False
        if status.st_size:  # (an empty one, which a full disk refused, says nothing)
            os.pwrite(self._kept[0], b"-", 0)
        return True

    def close(self) -> None:
        """Close the note and remove its file, if this wrote it."""
        if self._kept is None:
            return
        _close_if_ours(self._kept)
        self._kept = None
        self.path.unlink(missing_ok=True)

    def _fd(self) -> tuple[int, int]:
        """The note's descriptor and the note's size now."""
        if self._kept is not None and (status := _still(self._kept)) is not None:
            return self._kept[0], status.st_size
        _close_if_ours(self._kept)  # the note was removed or replaced: its old descriptor
        self._kept = None
        try:
            fd = kept_open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        except FileNotFoundError:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = kept_open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        status = os.fstat(fd)
        self._kept = (fd, _identity(status))
        return fd, status.st_size


def note_text(body: str) -> str:
    """A note of JSON text ``body`` as its file holds it: the JSON, then its CRC-32 on a
    line of its own."""
    return f"{body}\n{zlib.crc32(body.encode('utf-8')):08x}\n"


def read_note(path: Path) -> dict[str, Any] | None:
    """The note at ``path``; None where there is none, it is empty, or it fails its
    checksum (read while it was being rewritten). A note of JSON alone, as ftmatrix wrote
    them before the checksum (a run folder an older version left), reads as itself: no
    mix of two checksummed notes is a JSON object with nothing after it."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    body, newline, check = data[:-10], data[-10:-9], data[-9:-1]
    if newline != b"\n" or not data.endswith(b"\n"):
        return _plain_note(data)
    try:
        if int(check, 16) != zlib.crc32(body):
            return None
    except ValueError:
        return None
    return _plain_note(body)


def read_json(path: Path) -> Any:
    """The JSON in ``path``, or None where it cannot be read or parsed."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _plain_note(data: bytes) -> dict[str, Any] | None:
    try:
        note = json.loads(data)
    except ValueError:
        return None
    return note if isinstance(note, dict) else None


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
