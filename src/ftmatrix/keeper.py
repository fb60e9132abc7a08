"""The keeper: the cases' pytest's parent, between it and the supervisor.

A case that kills its parent (``os.getppid()``) kills the keeper, never the supervisor (the
nox session, and with it the whole run): the keeper's death takes its pytest with it (the
death signal it asked for), and the supervisor records the case as it records any process
death. The keeper ends as its pytest ended: its exit code, or the signal that killed it.
A case that stops the keeper is continued by the supervisor, and one that stops the
supervisor by the keeper.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

# What a bare interpreter has, and ctypes: with subprocess and signal it cost each pytest
# pass 22 ms of CPU, now 11 (a cell of 2,000 trivial cases runs in about 1 s).
KEEPER = """
import ctypes, os, sys, _signal
keeper, supervisor = os.getpid(), os.getppid()
os.environ["FTMATRIX_KEEPER"] = str(keeper)
_signal.pthread_sigmask(_signal.SIG_BLOCK, [_signal.SIGCHLD])  # pytest's end wakes the wait
child = os.fork()
if child == 0:
    try:
        _signal.pthread_sigmask(_signal.SIG_UNBLOCK, [_signal.SIGCHLD])
        ctypes.CDLL(None).prctl(1, 9)  # PR_SET_PDEATHSIG: SIGKILL when the keeper dies
        if os.getppid() == keeper:  # (not dead before the death signal was asked for)
            os.execvp(sys.argv[1], sys.argv[1:])
    except OSError as error:
        os.write(2, f"ftmatrix's keeper cannot start {sys.argv[1]}: {error}\\n".encode())
    finally:
        os._exit(127)
while True:
    done, status = os.waitpid(child, os.WNOHANG)
    if done:
        break
    _signal.sigtimedwait([_signal.SIGCHLD], 0.5)
    # A case that stopped the supervisor (SIGSTOP to its parent's parent) would leave the
    # run stopped for ever: continued, unless it was stopped as a terminal's job (Ctrl-Z:
    # then the shell, not its group, has the terminal).
    try:
        with open(f"/proc/{supervisor}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
        if fields[0] == b"T" and (fields[4] == b"0" or fields[5] == fields[2]):
            os.kill(supervisor, _signal.SIGCONT)
    except (OSError, IndexError):
        pass
code = os.waitstatus_to_exitcode(status)
if code < 0:
    try:
        _signal.signal(-code, _signal.SIG_DFL)
    except OSError:  # SIGKILL, SIGSTOP: no handler to reset
        pass
    os.kill(keeper, -code)
os._exit(code)  # nothing to flush or finalize: the run waits for this end (25 ms less)
"""


def kept(command: Sequence[str]) -> list[str]:
    """``command`` run under a keeper of its own (an interpreter with no site, no user
    settings)."""
    return [sys.executable, "-I", "-S", "-c", KEEPER, *command]
