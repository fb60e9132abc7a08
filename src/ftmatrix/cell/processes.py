"""Process helpers for a cell's own processes: the supervisor's child and its workers.

Stdlib only: the results plugin runs them inside each cell's venv.
"""

from __future__ import annotations

import ctypes
import signal
import sys

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
