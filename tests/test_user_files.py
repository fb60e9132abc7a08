"""A file the user names is read safely by every command that takes one.

A named pipe (whose open waits for a writer for ever), a device (``/dev/zero`` never ends),
a folder or a file far larger than its kind is one line and the command's bad-input exit
code: check and restore-history 2, wheelhouse 6, a matrix or known_issues.yaml 3. Never a
hang, never a MemoryError. A pipe the shell opened (``<(pip freeze)``, ``/dev/fd/N``) and
stdin are read, up to the same limit. Each command runs as a real process with a deadline:
a read that blocks fails the test instead of holding it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ftmatrix.errors import ExitCode

ROOT = Path(__file__).parent.parent
RESULTS = ROOT / "tests" / "data" / "default_results.json"
FREEZE = "torch==2.13.0\n"


def ftmatrix(
    *args: str, cwd: Path, stdin: bytes | None = None, pass_fds: tuple[int, ...] = ()
) -> subprocess.CompletedProcess[str]:
    """``python -m ftmatrix ARGS``; 30 s at most, where a blocked read would take for ever."""
    done = subprocess.run(
        [sys.executable, "-m", "ftmatrix", *args],
        input=stdin,
        capture_output=True,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src"), "FTMATRIX_OUT": str(cwd / "out")},
        timeout=30,
        check=False,
        pass_fds=pass_fds,
    )
    return subprocess.CompletedProcess(
        done.args, done.returncode, done.stdout.decode(errors="replace"), done.stderr.decode()
    )


def one_line(done: subprocess.CompletedProcess[str], code: int) -> str:
    assert done.returncode == code, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    return done.stderr.rstrip("\n")


@pytest.fixture
def inputs(tmp_path: Path) -> Path:
    """A FIFO, a folder, a freeze and the results, in ``tmp_path``."""
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "folder").mkdir()
    (tmp_path / "frz.txt").write_text(FREEZE)
    (tmp_path / "res.json").write_bytes(RESULTS.read_bytes())
    return tmp_path


FIFO = "is a named pipe (FIFO), not a file: its read would wait for a writer; give a file "
FIFO += "(a pipe the shell opened, as <(command) does, is read)"
DEVICE = "is a device, not a file; give a file"
FOLDER = "is a folder, not a file; give the file inside it"


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["check", "--results", "fifo", "--freeze", "frz.txt"], f"--results fifo: {FIFO}"),
        (["check", "--results", "res.json", "--freeze", "fifo"], f"--freeze fifo: {FIFO}"),
        (["check", "--results", "res.json", "--trl-env", "fifo"], f"--trl-env fifo: {FIFO}"),
        (["restore-history", "fifo"], f"restore-history fifo: {FIFO}"),
        (["check", "--results", "/dev/zero", "--freeze", "frz.txt"], f"--results /dev/zero: {DEVICE}"),
        (["check", "--results", "res.json", "--freeze", "/dev/zero"], f"--freeze /dev/zero: {DEVICE}"),
        (["check", "--results", "res.json", "--trl-env", "/dev/urandom"], f"--trl-env /dev/urandom: {DEVICE}"),
        (["restore-history", "/dev/zero"], f"restore-history /dev/zero: {DEVICE}"),
        (["check", "--results", "folder", "--freeze", "frz.txt"], f"--results folder: {FOLDER}"),
        (["check", "--results", "res.json", "--freeze", "folder"], f"--freeze folder: {FOLDER}"),
    ],
)  # fmt: skip
def test_a_pipe_a_device_or_a_folder_is_one_line_and_exit_2(
    inputs: Path, args: list[str], says: str
) -> None:
    assert one_line(ftmatrix(*args, cwd=inputs), ExitCode.USAGE) == f"ftmatrix: {says}"


@pytest.mark.parametrize(
    ("args", "big", "says"),
    [
        (["check", "--results", "big", "--freeze", "frz.txt"], 200_000_001,
         "--results big: more than 200 MB; a results.json is far smaller, so this is not one"),
        (["restore-history", "big"], 200_000_001,
         "restore-history big: more than 200 MB; a history.jsonl is far smaller, so this is not one"),
        (["check", "--results", "res.json", "--freeze", "big"], 10_000_001,
         "--freeze big: more than 10 MB; `pip freeze` output is far smaller, so this is not one"),
        (["check", "--results", "res.json", "--trl-env", "big"], 10_000_001,
         "--trl-env big: more than 10 MB; `trl env` output is far smaller, so this is not one"),
    ],
)  # fmt: skip
def test_a_file_far_larger_than_its_kind_is_refused_unread(
    inputs: Path, args: list[str], big: int, says: str
) -> None:
    with (inputs / "big").open("wb") as sparse:  # no disk spent: its size alone refuses it
        sparse.truncate(big)
    assert one_line(ftmatrix(*args, cwd=inputs), ExitCode.USAGE) == f"ftmatrix: {says}"


def test_stdin_that_never_ends_is_cut_at_the_limit(inputs: Path) -> None:
    done = ftmatrix(
        "check", "--results", "res.json", "--freeze", "-", stdin=b"x" * 10_000_001, cwd=inputs
    )
    assert one_line(done, ExitCode.USAGE) == (
        "ftmatrix: --freeze -: more than 10 MB; `pip freeze` output is far smaller, so this "
        "is not one"
    )


def test_a_pipe_the_shell_opened_is_read(inputs: Path) -> None:
    """``--freeze <(pip freeze)`` and ``--results <(curl ...)``: a /dev/fd pipe is read."""
    freeze_read, freeze_write = os.pipe()
    results_read, results_write = os.pipe()
    # Written before the command starts: a pipe's buffer holds a freeze, not the results.
    os.write(freeze_write, FREEZE.encode())
    os.close(freeze_write)
    writer = subprocess.Popen(["cat", str(RESULTS)], stdout=results_write)
    os.close(results_write)
    try:
        done = ftmatrix(
            "check",
            "--results",
            f"/dev/fd/{results_read}",
            "--freeze",
            f"/dev/fd/{freeze_read}",
            cwd=inputs,
            pass_fds=(freeze_read, results_read),
        )
    finally:
        os.close(freeze_read)
        os.close(results_read)
        writer.wait(timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"stack: /dev/fd/{freeze_read} (pip freeze): peft not installed")
    assert f"results: /dev/fd/{results_read}: " in done.stdout


def test_the_hosts_packages_of_a_wheelhouse_are_read_safely(inputs: Path) -> None:
    code = (
        "import sys\n"
        "from ftmatrix.errors import WheelhouseError\n"
        "from ftmatrix.wheelhouse import Target, read_host_packages\n"
        "from pathlib import Path\n"
        "target = Target(python='3.12', platform='manylinux_2_28_x86_64')\n"
        "for path in sys.argv[1:]:\n"
        "    try:\n"
        "        read_host_packages(Path(path), target)\n"
        "    except WheelhouseError as exc:\n"
        "        print(exc.return_code, exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, "fifo", "/dev/zero"],
        capture_output=True,
        text=True,
        cwd=inputs,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        timeout=30,
        check=False,
    )
    assert done.stdout.splitlines() == [
        f"{ExitCode.WHEELHOUSE.value} --host-packages fifo: {FIFO}",
        f"{ExitCode.WHEELHOUSE.value} --host-packages /dev/zero: {DEVICE}",
    ], done.stderr


def test_a_matrix_far_larger_than_a_matrix_is_a_config_error(inputs: Path) -> None:
    with (inputs / "matrix.yaml").open("wb") as sparse:
        sparse.truncate(10_000_001)
    done = ftmatrix("plan", "--no-resolve", cwd=inputs)
    assert done.returncode == ExitCode.CONFIG, done.stderr
    assert "matrix.yaml: more than 10 MB; a YAML file of ours is far smaller" in done.stderr
    assert "Traceback" not in done.stderr
