"""A file or folder ftmatrix reads or writes that is the wrong kind of thing.

Every path of a run's output, its inputs and its caches as a folder where a file belongs, a
file where a folder belongs, a symbolic link to nothing, a loop of links, a FIFO (whose open
would block for ever): one line naming the path, what it is and what belongs there, the
documented exit code, nothing already recorded touched, never a traceback, never a hang.
In-process through ``ftmatrix.cli.main`` (each call costs milliseconds: the check comes
before anything is installed); the nox entry point in the slow test at the end.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ROOT, make_record
from conftest import run as run_entry
from uv import find_uv_bin

from ftmatrix.cell.records import CellRecordFile
from ftmatrix.cell_launch import bytecode_cache
from ftmatrix.cli import main
from ftmatrix.errors import ExitCode, PathKindError, os_error_line
from ftmatrix.gpu_pool import lease_devices

RUN = "r1"
CELL = "cell1"
CELL_FILES = [
    f"{CELL}.jsonl",
    f"{CELL}.done.json",
    f"{CELL}.cell.json",
    f"{CELL}.state.json",
    f"{CELL}.jsonl.cases",
    f"{CELL}.jsonl.isolated",
    f"{CELL}.jsonl.current",
    f"{CELL}.jsonl.quarantine",
]
# (path under the project, what belongs there, the command that meets it)
TARGETS = [
    *((f"out/records/{RUN}/{name}", "file", "run") for name in CELL_FILES),
    (f"out/records/{RUN}/{CELL}.jsonl", "file", "report"),  # the run FTMATRIX_RUN_ID names
    (f"out/records/{RUN}/{CELL}.done.json", "file", "report"),
    (f"out/records/{RUN}/{CELL}.jsonl.quarantine", "file", "report"),
    ("out/history.sqlite", "file", "report"),
    ("out/index.html", "file", "report"),
    ("out/results.json", "file", "report"),
    ("out/summary.md", "file", "report"),
    ("out/records", "folder", "report"),
    (f"out/records/{RUN}", "folder", "run"),
    ("out/site", "folder", "report"),
    ("out/work", "folder", "run"),
    ("out/bisect/x/finding.json", "file", "report"),
    ("out/.reporting", "file", "report"),
    ("out/badges/sft.json", "file", "report"),
    ("out/constraints/sft-cpu.txt", "file", "report"),
    (f"out/work/{RUN}", "folder", "run"),
    (f"out/work/{RUN}/{CELL}", "folder", "run"),
    ("matrix.yaml", "file", "plan"),
    ("matrix.yaml", "file", "run"),
    ("known_issues.yaml", "file", "report"),
    ("cases", "folder", "run"),
    ("cases/test_a.py", "file", "run"),
    ("cases/conftest.py", "file", "run"),
    ("cache", "folder", "plan"),
    ("cache/plans", "folder", "plan"),
    ("cache/plans/kept.json", "file", "plan"),
]
WRONG = ["other kind", "dangling link", "link loop", "fifo"]
# What the one line says each is.
SAID = {
    ("other kind", "file"): "a folder",
    ("other kind", "folder"): "a file",
    ("dangling link", "file"): "a symbolic link to nothing",
    ("dangling link", "folder"): "a symbolic link to nothing",
    ("link loop", "file"): "a loop of symbolic links",
    ("link loop", "folder"): "a loop of symbolic links",
    ("fifo", "file"): "a FIFO (named pipe)",
    ("fifo", "folder"): "a FIFO (named pipe)",
}
COMMANDS = {"run": ["run"], "report": ["report"], "plan": ["plan", "--no-resolve"]}


@pytest.fixture(autouse=True)
def never_hangs(request: pytest.FixtureRequest) -> Iterator[None]:
    """A FIFO opened for reading blocks until a writer comes: a test that would hang
    fails instead (a guard, not a timing: every call here takes milliseconds). Not the
    slow tests, whose real installs have limits of their own."""
    if request.node.get_closest_marker("slow") is not None:
        yield
        return

    def hung(signum: int, frame: object) -> None:
        raise TimeoutError("blocked for 60 s: a FIFO was opened")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def project(folder: Path) -> Path:
    """A project with a finished run: matrix, cases, known issues, a cell's records and
    done marker, the report built from them."""
    (folder / "cases").mkdir(parents=True)
    (folder / "matrix.yaml").write_text("packages: {six: ['1.17.0']}\n")
    (folder / "known_issues.yaml").write_text("issues: []\n")
    (folder / "cases" / "test_a.py").write_text("def test_a():\n    pass\n")
    run_folder = folder / "out" / "records" / RUN
    run_folder.mkdir(parents=True)
    CellRecordFile(run_folder / f"{CELL}.jsonl").add(
        make_record(run_id=RUN, cell_id=CELL, case="test_a.py::test_a")
    )
    (run_folder / f"{CELL}.done.json").write_text('{"ran": "r1"}\n')
    (folder / "cache" / "plans").mkdir(parents=True)
    code, _, err = call(["report"], folder)
    assert code == 0, err
    return folder


def env_of(folder: Path) -> dict[str, str]:
    return {
        "FTMATRIX_MATRIX": str(folder / "matrix.yaml"),
        "FTMATRIX_CASES": str(folder / "cases"),
        "FTMATRIX_OUT": str(folder / "out"),
        "FTMATRIX_CACHE_DIR": str(folder / "cache"),
        "FTMATRIX_RUN_ID": RUN,
        "FTMATRIX_RESUME": "1",
        "PATH": os.environ["PATH"],
        "HOME": str(folder),
    }


def call(argv: list[str], folder: Path) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv, env_of(folder), root=folder)
    return code, out.getvalue(), err.getvalue()


def make_wrong(path: Path, wrong: str, belongs: str) -> None:
    """Put ``wrong`` at ``path`` in place of whatever is there."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.is_symlink() or path.exists():
        path.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    if wrong == "other kind" and belongs == "file":
        path.mkdir()
        (path / "kept.txt").write_text("a user's file\n")
    elif wrong == "other kind":
        path.write_text("a user's file\n")
    elif wrong == "dangling link":
        path.symlink_to(path.parent / "nothing-here")
    elif wrong == "link loop":
        path.symlink_to(path.name)
    else:
        os.mkfifo(path)


def contents(folder: Path) -> dict[str, bytes]:
    """Every regular file under ``folder`` and its bytes (a FIFO is never opened)."""
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return project(tmp_path_factory.mktemp("finished"))


@pytest.mark.parametrize(
    ("where", "belongs", "command", "wrong"),
    [
        (*target, wrong)
        for target in TARGETS
        for wrong in WRONG
        # a folder named test_a.py is a folder of cases to pytest, not a case it opens
        if not (target[0].startswith("cases/") and wrong == "other kind")
    ],
)
def test_a_path_of_the_wrong_kind_is_one_line_and_nothing_recorded_is_touched(
    finished: Path, tmp_path: Path, where: str, belongs: str, command: str, wrong: str
) -> None:
    folder = tmp_path / "p"
    shutil.copytree(finished, folder, symlinks=True)
    target = folder / where
    make_wrong(target, wrong, belongs)
    before = contents(folder)

    code, _, err = call(COMMANDS[command], folder)

    assert "Traceback" not in err
    assert code == ExitCode.PATH_KIND, (code, err)
    assert err.count("\n") == 1, err
    assert err.startswith(f"ftmatrix: {target}: is {SAID[wrong, belongs]}, where "), err
    assert f"belongs (a {belongs})" in err, err
    assert contents(folder) == before  # nothing written over, nothing recorded lost


def test_what_is_never_read_blocks_nothing(tmp_path: Path) -> None:
    # A known_issues.yaml beside the matrix that FTMATRIX_KNOWN_ISSUES puts aside, and a
    # FIFO in a hidden folder of the cases (a .venv), which pytest never collects.
    folder = project(tmp_path)
    shared = tmp_path / "shared_known_issues.yaml"
    (folder / "known_issues.yaml").rename(shared)
    (folder / "known_issues.yaml").mkdir()
    (folder / "cases" / ".venv").mkdir()
    os.mkfifo(folder / "cases" / ".venv" / "hook.py")
    env = {**env_of(folder), "FTMATRIX_KNOWN_ISSUES": str(shared)}
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["plan", "--no-resolve"], env, root=folder)
    assert code == ExitCode.OK, err.getvalue()


@pytest.mark.parametrize(
    "stray",
    [
        "records/.gitkeep",
        "records/README.md",
        "work/.gitkeep",
        "work/notes",
        "bisect/.DS_Store",
        "proofs/.gitkeep",
        f"records/{RUN}/.DS_Store",
        "badges/.gitkeep",
    ],
)
def test_a_users_stray_file_among_the_reports_is_no_wrong_kind(tmp_path: Path, stray: str) -> None:
    # A .gitkeep or a README among the runs is the user's: only what ftmatrix would write
    # there (a run's folder, by its name) must be of its kind.
    folder = project(tmp_path)
    (folder / "out" / stray).parent.mkdir(parents=True, exist_ok=True)
    (folder / "out" / stray).write_text("the user's\n")
    code, _, err = call(["report"], folder)
    assert code == ExitCode.OK, err


@pytest.mark.parametrize("wrong", WRONG)
def test_an_output_folder_of_the_wrong_kind_is_the_settings_error(
    tmp_path: Path, wrong: str
) -> None:
    folder = project(tmp_path / "p")
    shutil.rmtree(folder / "out")
    make_wrong(folder / "out", wrong, "folder")
    for argv in (["run"], ["report"]):
        code, _, err = call(argv, folder)
        assert code == ExitCode.SETTINGS, err
        assert err == (
            f"ftmatrix: FTMATRIX_OUT={folder / 'out'}: is {SAID[wrong, 'folder']}; records and "
            "reports go into a folder (default: reports/), which is made where it does not exist\n"
        )


def test_a_nox_folder_that_is_a_file_is_said_before_nox_starts(tmp_path: Path) -> None:
    folder = project(tmp_path / "p")
    (folder / ".nox").write_text("a user's notes\n")
    code, _, err = call(["run"], folder)
    assert code == ExitCode.PATH_KIND, err
    assert err.splitlines()[-1] == (
        f"ftmatrix: {folder / '.nox'}: is a file, where nox's folder of venvs (.nox) belongs "
        "(a folder); move it away (nothing was written over it), then run the command again"
    )
    assert (folder / ".nox").read_text() == "a user's notes\n"


def test_a_bytecode_folder_that_is_a_file_is_one_error(tmp_path: Path) -> None:
    venv_python = tmp_path / "venv" / "bin" / "python"
    venv_python.parent.mkdir(parents=True)
    (tmp_path / "venv" / "ftmatrix-bytecode-abc").write_text("not a folder\n")
    with pytest.raises(PathKindError, match="is a file, where the cell's bytecode folder"):
        bytecode_cache(venv_python, "abc")


@pytest.mark.parametrize(
    ("where", "wrong", "belongs", "said"),
    [
        ("matrix.yaml", "fifo", "file", "a FIFO (named pipe), where a file init writes"),
        ("noxfile.py", "other kind", "file", "a folder, where a file init writes"),
        ("cases", "other kind", "folder", "a file, where a folder init writes into"),
        ("cases/conftest.py", "dangling link", "file", "a symbolic link to nothing, where"),
    ],
)
def test_init_even_forced_writes_over_no_path_of_the_wrong_kind(
    tmp_path: Path, where: str, wrong: str, belongs: str, said: str
) -> None:
    make_wrong(tmp_path / where, wrong, belongs)
    before = contents(tmp_path)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["init", "six=1.16.0,1.17.0", "--force", "--dir", str(tmp_path)])
    assert code == ExitCode.PATH_KIND, err.getvalue()
    assert err.getvalue().startswith(f"ftmatrix: {tmp_path / where}: is {said}"), err.getvalue()
    assert contents(tmp_path) == before  # nothing written: all the files or none


@pytest.mark.parametrize(
    ("where", "wrong", "belongs"),
    [("leases", "other kind", "folder"), ("leases/gpu-1.lock", "fifo", "file")],
)
def test_a_gpu_lease_path_of_the_wrong_kind_is_one_error(
    tmp_path: Path, where: str, wrong: str, belongs: str
) -> None:
    """FTMATRIX_LEASE_DIR (shared by every cell of the machine): a file there, or a FIFO
    lock whose append-open would block the cell for ever. No GPU needed: the lease is
    files only."""
    make_wrong(tmp_path / where, wrong, belongs)
    leasing = lease_devices(1, ["0", "1"], tmp_path / "leases")
    with pytest.raises(PathKindError, match=f"^{re.escape(str(tmp_path / where))}: is "), leasing:
        pass


def real_errors(folder: Path) -> Iterator[tuple[OSError, str]]:
    """OSErrors the system raises for paths of the wrong kind, and what each line says."""
    (folder / "a-folder").mkdir()
    (folder / "a-file").write_text("x")
    (folder / "dangling").symlink_to(folder / "nothing-here")
    os.mkfifo(folder / "fifo")
    opens = [
        ((folder / "a-folder").read_text, "is a folder where a file is expected"),
        ((folder / "a-file" / "x").read_text, "is (or lies under) a file"),
        ((folder / "dangling").read_text, "is a symbolic link to nothing"),
        # a writer's non-blocking open of a FIFO no one reads: ENXIO, never a wait
        (lambda: os.open(folder / "fifo", os.O_WRONLY | os.O_NONBLOCK), "is a FIFO"),
    ]
    for action, said in opens:
        try:
            action()
        except OSError as exc:
            yield exc, said


def test_an_oserror_met_mid_run_on_a_wrong_path_is_one_line(tmp_path: Path) -> None:
    """Where a path changes after the checks (under a running cell), the CLI and the
    matrix session turn the system's error into the same one line."""
    met = list(real_errors(tmp_path))
    assert len(met) == 4
    for exc, said in met:
        line = os_error_line(exc)
        assert isinstance(line, PathKindError), exc
        assert said in line.describe(), line.describe()
    other = OSError(errno.EIO, "Input/output error", str(tmp_path / "a-file"))
    assert os_error_line(other) is None  # any other error keeps its traceback


def immutable(path: Path, on: bool) -> None:
    """``chattr +i``: a file even root cannot delete, or a folder it cannot rename."""
    subprocess.run(["chattr", "+i" if on else "-i", str(path)], check=True, capture_output=True)


@pytest.mark.parametrize("kept", ["a file in it", "the site itself"])
def test_a_site_that_cannot_be_removed_is_replaced_or_left_whole(tmp_path: Path, kept: str) -> None:
    # A file of the old site that cannot be deleted: the site is moved aside whole and the
    # new one published (it deleted what it could, then said "left as it was"). A site
    # that cannot be moved: one line, and the old site whole.
    folder = project(tmp_path)
    assert call(["report"], folder)[0] == ExitCode.OK
    site = folder / "out" / "site"
    (site / "assets").mkdir(exist_ok=True)
    (site / "assets" / "kept.txt").write_text("cannot be deleted\n")
    (site / "index.html").write_text("the old site\n")
    target = site / "assets" / "kept.txt" if kept == "a file in it" else site
    try:
        immutable(target, on=True)
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("chattr +i is not available on this filesystem")
    try:
        code, _, err = call(["report"], folder)
    finally:  # wherever the kept file is now (moved aside with its site, or not)
        for held in [target, *(folder / "out").glob(".site.old.*/assets/kept.txt")]:
            if held.exists():
                immutable(held, on=False)
    if kept == "a file in it":
        assert code == ExitCode.OK, err
        assert (site / "index.html").read_text() != "the old site\n"  # the new site
    else:
        assert code == ExitCode.PATH_KIND, err
        assert f"{site}: the previous site cannot be moved aside" in err
        assert (site / "index.html").read_text() == "the old site\n"  # whole, as it was
        assert (site / "assets" / "kept.txt").exists()


NOBODY = 65534


@pytest.fixture(scope="module")
def python_for_anyone() -> Iterator[str]:
    """An interpreter with ftmatrix that another user can run. Under root this one may be
    in root's own folder (pyenv's), which nobody else may enter: then a venv of the
    system's Python is made in a folder every user reaches, ftmatrix installed in it."""
    if os.geteuid() != 0 or _runs_as_nobody(sys.executable):
        yield sys.executable
        return
    base = shutil.which("python3", path="/usr/bin:/usr/local/bin")
    if base is None:
        pytest.skip("no system Python another user can run (this one is in root's folder)")
    folder = Path(tempfile.mkdtemp(prefix="ftmatrix-anyone-"))
    folder.chmod(0o755)
    try:
        venv = folder / "venv"
        subprocess.run([find_uv_bin(), "venv", "--python", base, str(venv)], check=True,
                       capture_output=True, timeout=120)  # fmt: skip
        subprocess.run([find_uv_bin(), "pip", "install", "--python", str(venv / "bin" / "python"),
                        str(ROOT)], check=True, capture_output=True, timeout=600)  # fmt: skip
        yield str(venv / "bin" / "python")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _runs_as_nobody(python: str) -> bool:
    drop = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    probe = [*drop, python, "-c", "import ftmatrix.cli"]
    ran = subprocess.run(probe, env=_without_pythonpath(), capture_output=True, check=False)
    return ran.returncode == 0


def _without_pythonpath() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def as_a_user_without_access(
    argv: list[str], folder: Path, python: str = sys.executable
) -> subprocess.CompletedProcess[str]:
    """``python -m ftmatrix`` as a user chmod 000 stops: root reads any file, so under root
    the command runs as nobody through util-linux's setpriv (a real EACCES, as a CI
    runner's user meets it)."""
    drop = []
    if os.geteuid() == 0:
        drop = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    return subprocess.run(
        [*drop, python, "-m", "ftmatrix", *argv],
        # (the interpreter's own ftmatrix: a caller's PYTHONPATH would shadow it)
        env={**_without_pythonpath(), **env_of(folder), "HOME": str(folder)},
        cwd=folder,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


@pytest.fixture
def open_folder() -> Iterator[Path]:
    """A project every user can reach (pytest's own folders are its user's alone)."""
    folder = Path(tempfile.mkdtemp(prefix="ftmatrix-access-"))
    folder.chmod(0o755)
    yield folder
    for path in [folder, *folder.rglob("*")]:  # (a folder made unreadable, made readable)
        if path.is_dir() and not path.is_symlink():
            path.chmod(0o700)
    shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.parametrize(
    ("where", "argv", "code"),
    [
        ("matrix.yaml", ["plan", "--no-resolve"], ExitCode.CONFIG),
        ("known_issues.yaml", ["report"], ExitCode.CONFIG),
        ("cache", ["plan", "--no-resolve"], ExitCode.PATH_KIND),
        (f"out/records/{RUN}", ["report"], ExitCode.PATH_KIND),
        ("out/history.sqlite", ["report"], ExitCode.HISTORY),
    ],
)
@pytest.mark.slow  # (a venv with ftmatrix that nobody can run, made once)
def test_a_path_the_user_cannot_read_is_one_line(
    open_folder: Path, python_for_anyone: str, where: str, argv: list[str], code: ExitCode
) -> None:
    folder = project(open_folder / "p")
    for path in [folder, *folder.rglob("*")]:
        path.chmod(0o777 if path.is_dir() else 0o666)
    if os.geteuid() == 0 and shutil.which("setpriv") is None:
        pytest.skip("root reads a chmod 000 file, and setpriv (to run as nobody) is missing")
    probe = as_a_user_without_access(["--version"], folder, python_for_anyone)
    if probe.returncode != 0:
        pytest.skip(f"ftmatrix cannot run as another user here: {probe.stderr[-200:]}")
    (folder / where).chmod(0)
    ended = as_a_user_without_access(argv, folder, python_for_anyone)
    assert "Traceback" not in ended.stderr, ended.stderr
    assert ended.returncode == code, ended.stderr
    assert str(folder / where) in ended.stderr, ended.stderr
    assert all(line.startswith(("ftmatrix: ", "  - ")) for line in ended.stderr.splitlines())


@pytest.mark.slow
@pytest.mark.parametrize("entry", ["cli", "nox"])
def test_through_nox_a_wrong_path_is_the_same_line(tmp_path: Path, entry: str) -> None:
    """`ftmatrix run` and `nox -s matrix` (real nox, the cell never installed): a done
    marker that is a folder on resume (a traceback before), a .nox that is a file (nox's
    own traceback before); `nox -s report` too."""
    folder = project(tmp_path / "p")
    done = folder / "out" / "records" / RUN / f"{CELL}.done.json"
    make_wrong(done, "other kind", "file")
    settings = {k: v for k, v in env_of(folder).items() if k.startswith("FTMATRIX_")}
    line = f"ftmatrix: {done}: is a folder, where a cell's records, notes or markers belongs"
    # `ftmatrix run` is nox's matrix sessions and the report; nox runs each alone.
    for args in [["-s", "matrix"], ["-s", "report"]] if entry == "nox" else [[]]:
        ended = run_entry(entry, folder, *args, **settings)
        assert ended.returncode == ExitCode.PATH_KIND, ended.stderr
        assert "Traceback" not in ended.stderr
        assert line in ended.stderr, ended.stderr
    shutil.rmtree(done)
    (folder / ".nox").write_text("a user's notes\n")
    ended = run_entry(entry, folder, **settings)
    assert ended.returncode == ExitCode.PATH_KIND, ended.stderr
    assert "Traceback" not in ended.stderr
    assert f"ftmatrix: {folder / '.nox'}: is a file, where nox's folder" in ended.stderr
    assert (folder / ".nox").read_text() == "a user's notes\n"


BREAKS_ITS_RECORDS = """
import glob, os

def test_first():
    pass

def test_makes_the_records_file_a_folder():
    for records in glob.glob(os.environ["PROBE_OUT"] + "/records/*/*.jsonl"):
        os.unlink(records)
        os.mkdir(records)

def test_last():
    pass
"""


@pytest.mark.slow
def test_a_records_file_made_a_folder_under_a_running_cell_is_never_a_full_disk(
    tmp_path: Path,
) -> None:
    """A case that makes its cell's records file a folder (after every check before the
    run): the cell ends with the one line of a path of the wrong kind naming the records
    not written, never 'the output folder is full'. Real nox, uv and pytest."""
    folder = tmp_path / "p"
    (folder / "cases").mkdir(parents=True)
    (folder / "matrix.yaml").write_text("packages: {six: ['1.17.0']}\n")
    (folder / "cases" / "test_breaks.py").write_text(BREAKS_ITS_RECORDS)
    ended = run_entry("cli", folder, PROBE_OUT=str(folder / "out"))
    assert ended.returncode == ExitCode.FAILED, ended.stderr  # nox's: a cell session failed
    output = ended.stdout + ended.stderr
    assert "Traceback" not in output
    assert "is full" not in output and "No space left" not in output, output
    assert (
        "ftmatrix: the records of test_breaks.py::test_makes_the_records_file_a_folder, "
        "test_breaks.py::test_last (cases that ran) are not written: "
    ) in output, output
    assert ".jsonl: is a folder where a file is expected" in output, output
    (log,) = (folder / "out" / "records").glob("*/*.log")  # the plugin's words too
    assert "once the disk takes it" not in log.read_text(), log.read_text()
