"""A case's whole process tree is the case's: counted against its memory limit and ended with it.

Slow tier: real cells through nox. Processes a case starts in a new session or through a
double fork once outlived the case, the cell and the run (on a GPU runner: holding GPU
memory and the lease), and a new-session child escaped the memory limit.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
DATA = Path(__file__).parent / "data"

pytestmark = pytest.mark.slow

LEAVES_CHILDREN = """
import os, subprocess, sys
from pathlib import Path

STATE = Path(os.environ["FTMATRIX_TEST_STATE"])


# The double fork daemonizes (a session of its own), as daemons do: left in pytest's process
# group, a later case's OOM kills it with the group before the sweep can name it (CI saw it).
def test_leaves_a_new_session_child_and_a_double_fork():
    alone = subprocess.Popen(["sleep", "300"], start_new_session=True)
    (STATE / "new-session.pid").write_text(str(alone.pid))
    middle = subprocess.run(
        [sys.executable, "-c",
         "import subprocess; "
         "print(subprocess.Popen(['sleep', '300'], stdout=subprocess.DEVNULL, "
         "stderr=subprocess.DEVNULL, start_new_session=True).pid)"],
        capture_output=True, text=True, check=True,
    )
    (STATE / "double-fork.pid").write_text(middle.stdout.strip())


def test_a_child_in_its_own_session_eats_memory():
    eater = subprocess.Popen(
        [sys.executable, "-c", "import time; x = bytearray(1536 * 2**20); time.sleep(60)"],
        start_new_session=True,
    )
    eater.wait(timeout=90)
"""


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"


def test_what_a_case_leaves_running_ends_with_it_and_counts_against_its_memory(
    tmp_path: Path,
) -> None:
    cases = tmp_path / "cases"
    cases.mkdir()
    (cases / "test_children.py").write_text(LEAVES_CHILDREN)
    state = tmp_path / "state"
    state.mkdir()
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text((DATA / "small_matrix.yaml").read_text() + "limits: {memory-gib: 0.5}\n")
    env = {
        **os.environ,
        "FTMATRIX_MATRIX": str(matrix),
        "FTMATRIX_CASES": str(cases),
        "FTMATRIX_OUT": str(tmp_path / "out"),
        "FTMATRIX_SELECT": "cpu-*-six1.17.0-attrs25.3.0",
        "FTMATRIX_TEST_STATE": str(state),
    }
    ran = subprocess.run(
        [sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py"), "--envdir", str(tmp_path / "envs"),
         "-s", "matrix"],
        env=env, cwd=tmp_path, capture_output=True, text=True, check=False, timeout=600,
    )  # fmt: skip
    output = ran.stdout + ran.stderr
    pids = [int((state / name).read_text()) for name in ("new-session.pid", "double-fork.pid")]
    try:
        time.sleep(0.5)
        assert not [pid for pid in pids if alive(pid)], output[-3000:]
        assert "process(es) the cases left running" in output
        records = {
            json.loads(line)["case"].split("::")[-1]: json.loads(line)
            for path in (tmp_path / "out" / "records").rglob("*.jsonl")
            for line in path.read_text().splitlines()
        }
        leaver = records["test_leaves_a_new_session_child_and_a_double_fork"]
        assert leaver["status"] == "pass"
        # What had to be ended is on the record of the case that started it.
        ended = leaver["metrics"]["leftover_processes"]
        assert all(f"{pid} (sleep)" in ended for pid in pids), ended
        assert "test_children.py::test_leaves_a_new_session_child_and_a_double_fork left " in output
        # The pytest the OOM's kill of its group ended is no leftover (it was named one).
        assert "before any case left running" not in output, output[-3000:]
        assert not list((tmp_path / "out" / "records").rglob("*.starts")), "case ids stay behind"
        eater = records["test_a_child_in_its_own_session_eats_memory"]
        assert eater["status"] == "oom", (eater["status"], eater.get("reason"))
    finally:
        for pid in pids:
            if alive(pid):
                os.kill(pid, 9)
