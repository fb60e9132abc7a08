"""The keeper, the cases' pytest's parent, ends as its child ended: its exit code, or the
signal that killed it (the supervisor's crash verdicts read it), whatever the signal."""

from __future__ import annotations

import subprocess

import pytest

from ftmatrix.keeper import kept


@pytest.mark.parametrize(
    ("script", "returncode"),
    [
        ("exit 0", 0),
        ("exit 3", 3),
        ("exit 255", 255),
        ("kill -SEGV $$", -11),
        ("kill -ABRT $$", -6),
        # The kernel's OOM killer, a kill -9, a case that kills its own process: no handler
        # can be set for SIGKILL, and the keeper ended in a traceback with exit code 1.
        ("kill -KILL $$", -9),
    ],
)
def test_the_keeper_ends_as_its_child_ended(script: str, returncode: int) -> None:
    ran = subprocess.run(kept(["sh", "-c", script]), capture_output=True, text=True, check=False)
    assert (ran.returncode, ran.stderr) == (returncode, "")


def test_a_command_the_keeper_cannot_start_is_named() -> None:
    ran = subprocess.run(kept(["/nonexistent/python"]), capture_output=True, text=True, check=False)
    assert ran.returncode == 127
    assert ran.stderr.startswith("ftmatrix's keeper cannot start /nonexistent/python: ")
