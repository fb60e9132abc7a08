"""Process helpers for a cell's own processes: the supervisor's child and its workers,
and the plugin's look at the keeper (its parent) after each case.

Stdlib only: the results plugin runs them inside each cell's venv.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
from typing import Any, Literal

from ftmatrix.cell.file_writes import kept_open
from ftmatrix.cell.records import KEEPER_VARIABLE

PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>
PR_SET_CHILD_SUBREAPER = 36
_LIBC = ctypes.CDLL(None) if sys.platform.startswith("linux") else None


def die_with_parent() -> bool:
    """Be killed when the parent dies (a lost runner, ``kill -9``); False where it cannot.

    The supervisor's child (pytest) and pytest-xdist's workers ask it: otherwise an
    orphaned training run would go on writing records that a resumed run is also
    writing. Linux only; elsewhere the child outlives its parent. Safe between fork
    and exec: it only calls prctl through a libc handle loaded at import.
    """
    if _LIBC is None:
        return False
    _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    return True


def become_subreaper() -> bool:
    """Adopt every orphan of this process's descendants (Linux); False where it cannot.

    A case's child started in a new session, or a double fork, leaves the case's process
    tree when its parent exits; as a subreaper, the supervisor stays its ancestor, so it
    still counts its memory and ends it with the case's process.
    """
    if _LIBC is None:
        return False
    return bool(_LIBC.prctl(PR_SET_CHILD_SUBREAPER, 1) == 0)


# Signals that end a process unless it handles them (the keeper handles none).
_FATAL_SIGNALS = (1, 2, 3, 6, 9, 11, 13, 14, 15)


def keeper_dying() -> bool:
    """Has the supervisor's keeper, this pytest's parent, been sent its death (or died)?

    A signal is pending on its target as soon as kill() returns, before the target runs
    again to die: reading it here is not a race with the case that sent it.
    """
    keeper = os.environ.get(KEEPER_VARIABLE)
    if not keeper or not keeper.isdigit() or os.environ.get("PYTEST_XDIST_WORKER"):
        return False  # a worker's parent is pytest-xdist's controller, not the keeper
    if os.getppid() != int(keeper):
        return True
    # Read after every case: the three fields found in the raw bytes, not every line parsed.
    status = _keeper_status(int(keeper))
    if status is None:
        return True
    if _status_field(status, b"State")[:1] in (b"Z", b"X"):
        return True
    if _NOTHING_PENDING[0] in status and _NOTHING_PENDING[1] in status:
        return False  # the usual answer, found without parsing the fields
    pending = int(_status_field(status, b"SigPnd") or b"0", 16)
    pending |= int(_status_field(status, b"ShdPnd") or b"0", 16)
    return any(pending & (1 << (number - 1)) for number in _FATAL_SIGNALS)


# The keeper's pid and a descriptor of its /proc/PID/status, kept open: read after every
# case, opening and closing it were two of its three system calls.
_keeper_file: tuple[int, int] | None = None


def _keeper_status(keeper: int) -> bytes | None:
    """The keeper's /proc status as it is now (pread makes it anew), None where the keeper
    is gone. The text names the keeper's pid, or the descriptor is not the keeper's file
    any more (a case closed it, maybe opened a file of its own on its number): opened
    again, the old one left alone."""
    global _keeper_file  # noqa: PLW0603 -- one process's parent
    for _ in range(2):
        if _keeper_file is None or _keeper_file[0] != keeper:
            try:
                _keeper_file = (keeper, kept_open(f"/proc/{keeper}/status", os.O_RDONLY))
            except OSError:
                return None
        try:
            status = os.pread(_keeper_file[1], 1 << 16, 0)
        except OSError:  # closed by a case, or the keeper is gone (ESRCH)
            status = b""
        if b"\nPid:\t%d\n" % keeper in status:
            return status
        _keeper_file = None
    return None


# The lines of a /proc/PID/status with no signal pending (64 signals, 16 hex digits).
_NOTHING_PENDING = (b"\nSigPnd:\t0000000000000000\n", b"\nShdPnd:\t0000000000000000\n")


def _status_field(status: bytes, name: bytes) -> bytes:
    """The value of ``name`` in a /proc/PID/status text, or b"" where it has none."""
    at = (b"\n" + status).find(b"\n" + name + b":")  # where the name starts in ``status``
    if at == -1:
        return b""
    start = at + len(name) + 1
    end = status.find(b"\n", start)
    return status[start : None if end == -1 else end].strip()


def worker_exit_status(node: Any) -> int | Literal["running"] | None:
    """The return code of a pytest-xdist worker that went down (negative: a signal), once
    it has ended; ``"running"`` where it still runs 5 s on (a case closed its channel)."""
    # execnet keeps the worker's Popen on its private IO object; without it, no status.
    popen = getattr(getattr(getattr(node, "gateway", None), "_io", None), "popen", None)
    if popen is None:
        return None
    try:
        return int(popen.wait(timeout=5))
    except subprocess.TimeoutExpired:
        return "running"
    except OSError:
        return None
