"""Every fatal error ftmatrix anticipates, each with the exit code it ends a command with.

One table (as cibuildwheel's ``errors.py``): each class carries its ``return_code``.
An inner function raises; ``main()`` and the noxfile catch :class:`FatalError`,
print :meth:`FatalError.describe` (one message, no traceback) and exit with the
code, so ``nox -s plan`` and ``python -m ftmatrix plan`` end the same way.

Standard library only: the modules that run inside a cell's venv import it.
"""

from __future__ import annotations

import enum
import errno
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

from ftmatrix.cell.file_writes import DISK_FULL_ERRNOS
from ftmatrix.cell.redact import redact_text


class ExitCode(enum.IntEnum):
    """What a command's exit status means; one code per kind of fatal error."""

    OK = 0
    FAILED = 1  # the command ran, but something it ran failed (a cell session, ...)
    USAGE = 2
    CONFIG = 3
    PLAN = 4
    BISECT = 5
    WHEELHOUSE = 6
    SETTINGS = 7
    INDEX = 8
    LEASE = 9
    HOST = 10
    BUSY = 11
    HISTORY = 12
    OUTPUT_FULL = 13
    PATH_KIND = 14


# Terminal control characters (an escape sequence can rewrite what a terminal shows)
# other than newline and tab: shown as \x.. wherever ftmatrix prints text it read.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


# An error line echoes what it refused (a variable's value, a path, a glob): past this
# many characters without a space the echo is cut, its length said, so a value of
# thousands of characters is one line to read, not a screenful.
LONGEST_ECHO = 200
_LONG_RUN = re.compile(rf"\S{{{LONGEST_ECHO + 1},}}")


def shortened(text: str) -> str:
    """``text`` with each run of more than LONGEST_ECHO non-space characters cut short
    (the punctuation that ends it kept: the line still reads ``VALUE: why``)."""

    def cut(found: re.Match[str]) -> str:
        run = found.group()
        body = run.rstrip(":;,.)'\"")
        return f"{body[:80]}... ({len(body):,} characters){run[len(body) :]}"

    return _LONG_RUN.sub(cut, text)


def printable(text: str) -> str:
    """``text`` safe for a terminal: control characters escaped as ``\\xNN``."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


class FatalError(Exception):
    """An anticipated failure that ends the command: a message for the user, no traceback."""

    return_code: ClassVar[ExitCode] = ExitCode.FAILED
    # What failed, between "ftmatrix:" and the message, where the message does not say it.
    context: ClassVar[str] = ""
    # Only an error that lists several problems has several lines; any other is one,
    # whatever a path or value it echoes holds (FTMATRIX_OUT with a newline in it).
    lists_problems: ClassVar[bool] = False

    def describe(self) -> str:
        """The line (or block, for several problems) the user reads: ``ftmatrix: ...``.

        Never with a secret: a URL's userinfo (an index URL's password) and the values
        of secret-named variables are masked.
        """
        text = ": ".join(part for part in ("ftmatrix", self.context, str(self)) if part)
        text = printable(redact_text(text, os.environ))
        return shortened(text if self.lists_problems else one_line(text))


class UsageError(FatalError):
    """Command-line arguments that cannot be used as given (argparse's own errors exit 2 too)."""

    return_code = ExitCode.USAGE
    lists_problems = True


class ConfigError(FatalError):
    """One or more problems in a matrix file, each a line naming file, key and value."""

    return_code = ExitCode.CONFIG
    lists_problems = True

    def __init__(self, problems: Sequence[str]) -> None:
        # Each problem once, so the count the header gives is the lines that follow; each
        # one line, whatever a key or value it names holds (a newline in a YAML key).
        self.problems = tuple(dict.fromkeys(one_line(p) for p in problems))
        count = len(self.problems)
        header = f"{count} problem{'s' if count != 1 else ''} in the matrix configuration:"
        super().__init__("\n".join([header, *(f"  - {p}" for p in self.problems)]))


def one_line(text: str) -> str:
    """``text`` with each control character as its escape (``\\n``): one line to read."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text)


class PlanError(FatalError):
    """A plan that cannot be made: a rule or selector that matches no cell, or no cell left."""

    return_code = ExitCode.PLAN
    lists_problems = True


class BisectError(FatalError):
    """The ends do not bracket a change: the 'good' end is not good, or the 'bad' end not bad."""

    return_code = ExitCode.BISECT
    context = "bisect"


class WheelhouseError(FatalError):
    """A wheelhouse that cannot be made as asked: a cell that does not resolve for the
    platform, a download that fails, a folder that cannot be written."""

    return_code = ExitCode.WHEELHOUSE


class SettingsError(FatalError, ValueError):
    """An FTMATRIX_* variable whose value cannot be used, or a UV_* setting that stops
    uv itself (every cell's venv needs uv)."""

    return_code = ExitCode.SETTINGS


class PackageIndexError(FatalError):
    """A package index that cannot be read (unreachable, an HTTP error, not an index)."""

    return_code = ExitCode.INDEX


class LeaseError(FatalError):
    """More devices asked for than the machine has."""

    return_code = ExitCode.LEASE


class HostError(FatalError):
    """The host interpreter (install.system-packages) cannot be asked what it has."""

    return_code = ExitCode.HOST


class RunBusyError(FatalError):
    """Another ftmatrix process is writing the same cell of the same run (one output
    folder, one FTMATRIX_RUN_ID); its files are left as they are."""

    return_code = ExitCode.BUSY


class HistoryError(FatalError):
    """The history (history.sqlite) cannot be read or written: a damaged or truncated file
    (delete it: the report rebuilds it from the records), a full disk, a lock held elsewhere."""

    return_code = ExitCode.HISTORY


class OutputFullError(FatalError):
    """The disk is full (or its quota spent, or a file size limit met) while a command
    writes: what was written before is whole; free space and run it again (a run resumes,
    and the cases without a record run again)."""

    return_code = ExitCode.OUTPUT_FULL


class PathKindError(FatalError):
    """A file or folder ftmatrix reads or writes is the wrong kind of thing (a folder where
    a file belongs, a file where a folder belongs, a symbolic link to nothing, a FIFO, a
    socket or a device) or cannot be read or written: the message names it, what it is and
    what was expected; nothing was written over it."""

    return_code = ExitCode.PATH_KIND


# What to do about a path of the wrong kind, said with every one.
PATH_ADVICE = "move it away (nothing was written over it), then run the command again"


def disk_full(exc: OSError) -> OutputFullError | None:
    """The one line a full disk met by any command is (a report's site half copied, a
    plan kept, a bisect's finding), or None where ``exc`` is another error."""
    if exc.errno not in DISK_FULL_ERRNOS:
        return None
    where = exc.filename2 or exc.filename or "a file"
    return OutputFullError(
        f"{where}: cannot be written: {exc.strerror}. What was written before is whole "
        "(records, the history); free space, then run the command again"
    )


# What an OSError's errno says about the path it names, where it is the path's kind
# (or its permissions) that stopped the command, not the disk or the system.
_KIND_ERRNOS = {
    errno.EISDIR: "is a folder where a file is expected",
    errno.ENOTDIR: "is (or lies under) a file where a folder is expected",
    errno.ELOOP: "is a loop of symbolic links",
    errno.ENXIO: "is a FIFO, socket or device where a file is expected",
    errno.EACCES: "cannot be read or written (permission denied)",
    errno.EPERM: "cannot be read or written (operation not permitted)",
}


def path_problem(exc: OSError) -> PathKindError | None:
    """The one line an OSError met on a path of the wrong kind (or permissions) is, where
    no check before met it (a path changed under a run); None for any other error."""
    reason = _KIND_ERRNOS.get(exc.errno or 0)
    path = exc.filename2 or exc.filename
    if path is None:
        return None
    where = os.fsdecode(path)
    if reason is None and exc.errno == errno.ENOENT and Path(where).is_symlink():
        reason = "is a symbolic link to nothing"
    if reason is None:
        return None
    if exc.errno in (errno.EACCES, errno.EPERM):
        return PathKindError(
            f"{where}: {reason}; give the user running ftmatrix access to it (or move it "
            "away), then run the command again"
        )
    return PathKindError(f"{where}: {reason}; " + PATH_ADVICE)


def os_error_line(exc: OSError) -> FatalError | None:
    """The one line an OSError is where the user can act on it (a full disk, a path of the
    wrong kind met after the checks before the work), or None for any other."""
    return disk_full(exc) or path_problem(exc)


# The table the docs show (Reference, Exit codes): each fatal error, the exit code it ends a
# command with.
FATAL_ERRORS: tuple[type[FatalError], ...] = (
    UsageError,
    ConfigError,
    PlanError,
    BisectError,
    WheelhouseError,
    SettingsError,
    PackageIndexError,
    LeaseError,
    HostError,
    RunBusyError,
    HistoryError,
    OutputFullError,
    PathKindError,
)


def exit_code_table_markdown() -> str:
    """The docs' exit-code table, derived from the classes above."""
    rows = [
        "| exit code | error | when |",
        "|---|---|---|",
        f"| {ExitCode.OK.value} | | success |",
        f"| {ExitCode.FAILED.value} | | the command ran, but something it ran failed "
        "(a cell session, nox itself) |",
    ]
    for kind in sorted(FATAL_ERRORS, key=lambda k: k.return_code):
        meaning = " ".join((kind.__doc__ or "").split()).rstrip(".")
        meaning = meaning[:1].lower() + meaning[1:]
        rows.append(f"| {kind.return_code.value} | `{kind.__name__}` | {meaning} |")
    return "\n".join(rows)
