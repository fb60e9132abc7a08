"""The supervisor learns that a cell's pytest ended the moment it ends (a pidfd), and where
a kernel has no pidfds, by Popen's polling: either way an ended process is told from a
running one, its descriptor closed, its output's reader told to stop pausing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ftmatrix.supervise import _Ending

SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]


def open_descriptors() -> set[str]:
    return {entry.name for entry in Path("/proc/self/fd").iterdir()}


@pytest.mark.parametrize("pidfd", [True, False], ids=["pidfd", "no-pidfd"])
def test_an_ended_process_is_told_from_a_running_one(
    pidfd: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not pidfd:  # a kernel before 5.3, or a sandbox that refuses the call
        monkeypatch.delattr(os, "pidfd_open", raising=False)
    before = open_descriptors()
    process = subprocess.Popen(SLEEPER)
    ending = _Ending(process)
    try:
        assert (ending.fd >= 0) is (pidfd and sys.platform.startswith("linux"))
        assert not ending.within(0.05)
        assert process.returncode is None
        os.kill(process.pid, signal.SIGKILL)
        assert ending.within(30)
        assert process.returncode == -signal.SIGKILL
        assert not ending.ended.is_set()  # the pump is told by close(), once it is over
    finally:
        process.kill()
        process.wait()
        ending.close()
    assert ending.ended.is_set()
    assert open_descriptors() == before  # the pidfd closed, none left behind
    ending.close()  # twice: nothing to close, no error


def test_a_process_that_ends_of_itself_is_seen_ended() -> None:
    process = subprocess.Popen([sys.executable, "-c", "raise SystemExit(4)"])
    ending = _Ending(process)
    try:
        while not ending.within(0.25):
            pass
    finally:
        ending.close()
    assert process.returncode == 4
