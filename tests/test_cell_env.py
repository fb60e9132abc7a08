"""What a cell's processes run with: their bytecode kept beside the venv, one folder per lock."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ftmatrix.cell_launch import BYTECODE_PREFIX, bytecode_cache, cell_env


def test_a_cell_writes_bytecode_under_its_prefix_even_where_the_caller_forbids_it(tmp_path: Path):
    folder = tmp_path / "venv" / f"{BYTECODE_PREFIX}abc"
    env = cell_env({"PYTHONDONTWRITEBYTECODE": "1", "PATH": "/bin"}, bytecode=folder)
    assert "PYTHONDONTWRITEBYTECODE" not in env
    assert env["PYTHONPYCACHEPREFIX"] == str(folder)
    # Without a folder the caller's choice stands (as for a process outside a cell).
    assert cell_env({"PYTHONDONTWRITEBYTECODE": "1"})["PYTHONDONTWRITEBYTECODE"] == "1"


def test_bytecode_goes_to_the_prefix_never_beside_the_source(tmp_path: Path):
    source = tmp_path / "cases"
    source.mkdir()
    (source / "helper.py").write_text("VALUE = 1\n")
    folder = tmp_path / "venv" / f"{BYTECODE_PREFIX}abc"
    env = {**cell_env({}, bytecode=folder), "PYTHONPATH": str(source)}
    subprocess.run([sys.executable, "-c", "import helper"], env=env, check=True)
    assert not (source / "__pycache__").exists()
    assert list(folder.rglob("helper.cpython-*.pyc"))


def test_each_lock_has_its_folder_and_a_new_lock_clears_the_old_ones(tmp_path: Path):
    python = tmp_path / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    first = bytecode_cache(python, "lock1")
    (first / "kept.pyc").write_bytes(b"")
    assert bytecode_cache(python, "lock1") == first
    assert (first / "kept.pyc").exists()  # the same lock: its bytecode serves again
    second = bytecode_cache(python, "lock2")
    assert second == (tmp_path / "venv" / f"{BYTECODE_PREFIX}lock2").resolve()
    assert not first.exists()  # another release's bytecode never meets this lock's sources


def test_the_callers_interpreter_home_and_interactive_settings_are_not_a_cells(
    tmp_path: Path,
):
    """A cell's pytest under the caller's PYTHONINSPECT ended in an interactive prompt (a
    traceback of its SystemExit in the cell's log; on a terminal, a wait); the caller's
    PYTHONHOME is its own interpreter's, never the cell's venv's."""
    startup = tmp_path / "startup.py"
    startup.write_text("print('startup ran')\n")
    caller = {
        **os.environ,
        "PYTHONINSPECT": "1",
        "PYTHONSTARTUP": str(startup),
        "PYTHONHOME": sys.base_prefix,
    }
    env = cell_env(caller)
    assert not {"PYTHONINSPECT", "PYTHONSTARTUP", "PYTHONHOME"} & env.keys()
    ran = subprocess.run(
        [sys.executable, "-c", "raise SystemExit(0)"],
        env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert (ran.returncode, ran.stdout, ran.stderr) == (0, "", "")
