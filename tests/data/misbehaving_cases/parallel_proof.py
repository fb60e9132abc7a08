"""Cases that only pass when pytest-xdist workers share the cell, and one that must not.

Not named test_*.py: a run over the whole folder (one process) never collects
them; tests/test_runner_e2e.py names this file with two workers. pytest-xdist's
``load`` mode hands four cases to two workers in chunks of two, in file order:
p then t to one worker, q then u to the other (the exclusive s is left out).
"""

import os
import time
from pathlib import Path

import pytest

STATE = Path(os.environ["FTMATRIX_TEST_STATE"])
WAIT_SECONDS = 5.0  # under the matrix's 6 s case limit


def wait_for(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def meet(me: str, other: str) -> None:
    """Arrive, then wait for the other case: only cases that run at once both pass."""
    running = STATE / f"running-{me}"
    running.touch()
    try:
        (STATE / f"arrived-{me}").touch()
        wait_for((STATE / f"arrived-{other}").exists, f"{other} never ran beside {me}")
    finally:
        running.unlink()


def dead(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state == "Z"


@pytest.mark.operation("parallel")
def test_p_meets_q():
    meet("p", "q")


@pytest.mark.operation("hang")
def test_t_hangs():
    (STATE / "pid-t").write_text(str(os.getpid()))
    while True:
        pass


@pytest.mark.operation("parallel")
def test_q_meets_p_then_lingers():
    meet("q", "p")
    time.sleep(3)  # so that u, next on this worker, starts while t hangs on the other


@pytest.mark.operation("parallel")
def test_u_outlives_the_hang():
    """Runs while t's worker is killed for its time limit, and is not killed with it."""
    with (STATE / "starts-u").open("a") as starts:
        starts.write("started\n")
    running = STATE / "running-u"
    running.touch()
    try:
        pid = STATE / "pid-t"
        wait_for(pid.exists, "t never started")
        wait_for(lambda: dead(int(pid.read_text())), "t's worker was never killed")
    finally:
        running.unlink()


@pytest.mark.operation("exclusive")
@pytest.mark.exclusive("asserts that nothing else runs")
def test_s_runs_alone():
    assert "PYTEST_XDIST_WORKER" not in os.environ, "an exclusive case ran in a shared worker"
    assert not list(STATE.glob("running-*")), "an exclusive case ran beside another case"
    group = os.getpgid(0)
    # Its parent is the supervisor's keeper, which runs no case (ftmatrix.keeper).
    ours = (os.getpid(), os.getppid())
    others = [
        entry.name
        for entry in Path("/proc").iterdir()
        if entry.name.isdigit() and int(entry.name) not in ours and _group(entry) == group
    ]
    assert others == [], f"processes beside the exclusive case: {others}"


def _group(entry: Path) -> int | None:
    try:
        return int((entry / "stat").read_text().rsplit(")", 1)[1].split()[2])
    except (OSError, ValueError, IndexError):
        return None
