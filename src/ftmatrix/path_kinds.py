"""What kind of thing each file and folder ftmatrix reads or writes is, checked before use.

A folder where a file belongs (a records file, the history), a file where a folder belongs
(the output folder, a run's folder, the cases), a symbolic link to nothing, a FIFO (whose
open would block for ever), a socket or a device: each is one line naming the path, what it
is and what was expected (:class:`~ftmatrix.errors.PathKindError`), said before anything
is written, so nothing already recorded is touched. Reads ``lstat``/``stat`` only.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Literal

from ftmatrix.cell.files import RECORDS_SUFFIX
from ftmatrix.errors import PATH_ADVICE, PathKindError, path_problem

Kind = Literal["file", "folder"]


# A path's kind in words, by what ``stat`` says of it; anything else is a device.
_KINDS = (
    (stat.S_ISREG, "a file"),
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
)


def kind_of(path: Path) -> str | None:
    """What ``path`` is, in words (``a file``, ``a folder``, ``a FIFO``, ...), or None
    where nothing is there. A symbolic link is what it points to."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return "a symbolic link to nothing" if path.is_symlink() else None
    except OSError as exc:
        if exc.errno == errno.ENOTDIR:  # under a file: nothing is there (the file is wrong)
            return None
        if exc.errno == errno.ELOOP:
            return "a loop of symbolic links"
        return f"unreadable ({exc.strerror or exc})"
    return next((words for test, words in _KINDS if test(mode)), "a device")


def kind_problem(path: Path, expected: Kind, what: str) -> PathKindError | None:
    """The error for ``path`` (``what`` it is to ftmatrix) where something else than a
    ``expected`` stands there; None where that does, or nothing does."""
    found = kind_of(path)
    if found is None or found == f"a {expected}":
        return None
    return PathKindError(f"{path}: is {found}, where {what} belongs (a {expected}); " + PATH_ADVICE)


def check_kinds(expected: Iterable[tuple[Path, Kind, str]]) -> None:
    """Raise the first :func:`kind_problem` of ``(path, kind, what)`` triples."""
    for path, kind, what in expected:
        problem = kind_problem(path, kind, what)
        if problem is not None:
            raise problem


# The lock a report is built under (sharing.one_report_at_a_time), in the reports folder.
REPORTING = ".reporting"
# The reports folder's own files and folders (what the report, the site and the run write).
_OUTPUT_FILES = {
    "history.sqlite": "the history",
    "index.html": "the report's page",
    "summary.md": "the report's job summary",
    "results.json": "the report's results",
    REPORTING: "the lock of the report being built",
}
_OUTPUT_FOLDERS = ("records", "work", "site", "badges", "constraints", "bisect", "proofs")


def check_output_folder(out: Path, run_id: str) -> None:
    """Every file and folder of the reports folder ``out`` is of its kind: its own files,
    its folders, each run's folder under ``records/`` and every file in one (a cell's done
    marker, notes, quarantine), each bisect finding and proof; in the folder of run
    ``run_id`` (the one a run writes or resumes) the records files too. Another run's
    records file of the wrong kind is the report's to skip and say (``read_records``),
    so the rest of the history is still published.

    Checked before a run or a report writes anything there; a scan of names, no file read.
    """
    check_kinds([(out, "folder", "the reports folder (FTMATRIX_OUT)")])
    check_kinds((out / name, "file", what) for name, what in _OUTPUT_FILES.items())
    check_kinds((out / name, "folder", f"the reports folder's {name}/") for name in _OUTPUT_FOLDERS)
    check_kinds(_records_tree(out / "records", run_id))
    for folder in ("badges", "constraints"):  # the report's files, rewritten each time
        check_kinds(_unplain(_entries(out / folder), "file", f"a file of {folder}/"))
    check_kinds([(out / "work" / run_id, "folder", "a run's working folder")])
    for run in _entries(out / "work", runs=True):  # a folder per run, one per cell in it
        check_kinds(_unplain([run], "folder", "a run's working folder"))
        check_kinds(_unplain(_entries(Path(run.path)), "folder", "a cell's working folder"))
    for folder, file in (("bisect", "finding.json"), ("proofs", "proof.json")):
        for kept in _entries(out / folder):
            check_kinds(_unplain([kept], "folder", f"a folder of {folder}/"))
            check_kinds([(Path(kept.path) / file, "file", f"a {file}")])


def _entries(folder: Path, *, runs: bool = False) -> list[os.DirEntry[str]]:
    """What of ``folder`` is ftmatrix's (nothing where it is no folder), by name: not a
    hidden entry (a .gitkeep, a .DS_Store), and with ``runs`` no plain file (a README
    beside the runs is the user's: the readers of runs take folders alone; this run's own
    folder is checked by its name). A folder that cannot be read is one line."""
    if kind_of(folder) != "a folder":
        return []
    try:
        with os.scandir(folder) as entries:
            found = sorted(entries, key=lambda entry: entry.name)
    except OSError as exc:
        raise path_problem(exc) or exc from None
    return [
        entry
        for entry in found
        if not entry.name.startswith(".") and not (runs and entry.is_file(follow_symlinks=False))
    ]


def _unplain(
    entries: Iterable[os.DirEntry[str]], kind: Kind, what: str
) -> Iterator[tuple[Path, Kind, str]]:
    """The entries to check as ``kind``: all but those their directory entry already shows
    to be a plain ``kind`` (no link), so a history of 100,000 files costs no stat each."""
    for entry in entries:
        plain = entry.is_file if kind == "file" else entry.is_dir
        if not plain(follow_symlinks=False):
            yield Path(entry.path), kind, what


def _records_tree(records: Path, run_id: str) -> Iterator[tuple[Path, Kind, str]]:
    yield (records / run_id, "folder", "this run's folder of records")
    for run in _entries(records, runs=True):
        yield from _unplain([run], "folder", "a run's folder of records")
        checked = (
            entry
            for entry in _entries(Path(run.path))
            if run.name == run_id or not entry.name.endswith(RECORDS_SUFFIX)
        )
        yield from _unplain(checked, "file", "a cell's records, notes or markers")


# What the cell's pytest opens in the cases folder: the cases, conftest.py, its settings.
_CASE_SUFFIXES = (".py", ".ini", ".cfg", ".toml")


def check_cases_folder(cases: Path) -> None:
    """The cases folder is a folder, and every file pytest would open in it (``*.py``,
    its settings files) is a file: pytest's import of a FIFO blocks for ever."""
    check_kinds([(cases, "folder", "the cases folder (FTMATRIX_CASES)")])
    if kind_of(cases) != "a folder":
        return
    for folder, folders, names in os.walk(cases):
        # Where pytest collects: not a hidden folder (a venv's .venv), nor bytecode.
        folders[:] = [f for f in folders if not f.startswith(".") and f != "__pycache__"]
        opened = (Path(folder) / name for name in names if name.endswith(_CASE_SUFFIXES))
        check_kinds((path, "file", "a case file pytest opens") for path in opened)


# The cache's folders (kept plans, releases' declared requirements, the host's stack);
# every other entry is a kept resolution.
_CACHE_FOLDERS = ("plans", "requires", "host")


def check_cache_folder(cache: Path) -> None:
    """The resolution cache (FTMATRIX_CACHE_DIR) and what it keeps are of their kinds: a
    FIFO there would block the read of a kept plan or resolution for ever."""
    check_kinds([(cache, "folder", "the resolution cache (FTMATRIX_CACHE_DIR)")])
    entries = _entries(cache)
    folders = [entry for entry in entries if entry.name in _CACHE_FOLDERS]
    check_kinds(_unplain(folders, "folder", "a folder of the resolution cache"))
    kept = [entry for entry in entries if entry.name not in _CACHE_FOLDERS]
    check_kinds(_unplain(kept, "file", "a resolution the cache keeps"))
    for folder in ("plans", "requires"):  # read by name, one file each
        check_kinds(_unplain(_entries(cache / folder), "file", "a file the cache keeps"))
