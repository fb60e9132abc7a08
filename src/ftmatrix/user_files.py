"""A file a user names (``--results``, ``--freeze``, a history to restore), read whole and
safely: never a read that blocks for ever or fills the memory.

A named pipe (FIFO) is refused, since its open waits for a writer that may never come; so
is a device (``/dev/zero`` never ends), a socket or a folder. A pipe this process already
holds (``/dev/fd/N``, ``/dev/stdin``: a shell's process substitution, ``<(pip freeze)``)
is read: its writer exists, and what it sends is capped like a file (it is read until
its writer closes it, as stdin, ``-``, is: :func:`read_stdin_text`).
Everything read is capped at a size far above the file's kind; past it, one line.
An open or read that fails for another reason is the caller's :class:`OSError` to word.
"""

from __future__ import annotations

import os
import re
import stat
import sys
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from ftmatrix.errors import FatalError, UsageError

MB = 1_000_000

# The paths that name a descriptor this process already has open: a pipe there has its
# writer (the shell started it), so its read ends when the writer is done.
_OWN_DESCRIPTOR = re.compile(r"/dev/(fd/\d+|stdin)|/proc/(self|thread-self)/fd/\d+")


def read_user_bytes(
    where: str,
    what: str,
    *,
    limit: int,
    kind: str,
    error: Callable[[str], FatalError] = UsageError,
) -> bytes:
    """The bytes of the file ``where``, at most ``limit`` of them (``-`` is a path here:
    a command that takes stdin reads it with :func:`read_stdin_text`).

    ``what`` starts every message (``--freeze frz.txt``), ``kind`` names the file expected
    (``a pip freeze``); a path of the wrong kind or over the limit is ``error(line)``.
    """
    problem = _kind_problem(Path(where).stat().st_mode, where)
    if problem:
        raise error(f"{what}: {problem}")
    # O_NONBLOCK: the open never waits, even where a FIFO took the place of what was
    # checked; the descriptor is made blocking again for the read.
    fd = os.open(where, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as file:
        mode = os.fstat(fd).st_mode
        problem = _kind_problem(mode, where)
        if problem:
            raise error(f"{what}: {problem}")
        os.set_blocking(fd, True)
        if stat.S_ISREG(mode) and os.fstat(fd).st_size > limit:
            raise error(_too_large(what, limit, kind))
        return _capped(file, what, limit=limit, kind=kind, error=error)


def read_user_text(
    where: str,
    what: str,
    *,
    limit: int,
    kind: str,
    error: Callable[[str], FatalError] = UsageError,
) -> str:
    """:func:`read_user_bytes` as UTF-8 text; text that is not UTF-8 is ``error(line)``."""
    data = read_user_bytes(where, what, limit=limit, kind=kind, error=error)
    return _decoded(data, what, kind=kind, error=error)


def read_stdin_text(
    what: str, *, limit: int, kind: str, error: Callable[[str], FatalError] = UsageError
) -> str:
    """Standard input as UTF-8 text, at most ``limit`` bytes (``< /dev/zero`` ends)."""
    data = _capped(sys.stdin.buffer, what, limit=limit, kind=kind, error=error)
    return _decoded(data, what, kind=kind, error=error)


def _decoded(data: bytes, what: str, *, kind: str, error: Callable[[str], FatalError]) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise error(f"{what}: not UTF-8 text, so not {kind}") from None


def _kind_problem(mode: int, where: str) -> str | None:
    """Why a path of ``mode`` is not read, or None where it is (a file, a pipe of ours)."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISFIFO(mode):
        if _OWN_DESCRIPTOR.fullmatch(os.path.normpath(where)):
            return None
        return (
            "is a named pipe (FIFO), not a file: its read would wait for a writer; give a "
            "file (a pipe the shell opened, as <(command) does, is read)"
        )
    if stat.S_ISDIR(mode):
        return "is a folder, not a file; give the file inside it"
    what = "a socket" if stat.S_ISSOCK(mode) else "a device"
    return f"is {what}, not a file; give a file"


def _capped(
    file: BinaryIO, what: str, *, limit: int, kind: str, error: Callable[[str], FatalError]
) -> bytes:
    data = file.read(limit + 1)
    if len(data) > limit:
        raise error(_too_large(what, limit, kind))
    return data


def _too_large(what: str, limit: int, kind: str) -> str:
    return f"{what}: more than {limit // MB} MB; {kind} is far smaller, so this is not one"
