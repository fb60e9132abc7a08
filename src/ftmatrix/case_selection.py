"""Which cases a run asks for: checked against the cases folder before anything installs.

A selection (matrix.yaml's ``cases:`` or node ids after ``--``) names files, folders or
node ids relative to the cases folder. One that names nothing there, or points outside
it, is refused with the folder's test files listed: a typo must not install every cell
and then test nothing, and a path must not run a file from elsewhere on the machine.
Pure but for reading the folder.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from pathlib import Path

from ftmatrix.errors import ConfigError, SettingsError, UsageError

# pytest options whose value is the next argument: `-- -k "sft or dpo"` passes both on,
# where the value alone would read as a case to select.
VALUE_OPTIONS = frozenset(
    {
        "-k",
        "-m",
        "-p",
        "-W",
        "-o",
        "-c",
        "--deselect",
        "--ignore",
        "--ignore-glob",
        "--maxfail",
        "--tb",
        "--durations",
        "--basetemp",
        "--confcutdir",
        "--override-ini",
        "--pythonwarnings",
        "--log-level",
        "--junitxml",
        "--junit-xml",
        "--capture",
    }
)


def split_pytest_args(args: Sequence[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(cases selected, pytest options) from the arguments after ``--``.

    An option keeps its value: ``-k EXPR`` and ``-k=EXPR`` both stay options.
    """
    selection: list[str] = []
    options: list[str] = []
    waiting_value = False
    for arg in args:
        if waiting_value:
            options.append(arg)
            waiting_value = False
        elif arg.startswith("-"):
            options.append(arg)
            waiting_value = arg in VALUE_OPTIONS
        else:
            selection.append(arg)
    return tuple(selection), tuple(options)


def check_case_selection(
    cases_dir: Path, selection: Sequence[str], *, source: str, from_command_line: bool
) -> None:
    """Refuse a cases folder that is not one, and a selection that names nothing in it.

    ``source`` names where the selection came from (``matrix.yaml: cases[1]``-style
    prefixes are added per entry). A bad matrix entry is a ConfigError, a bad argument
    a UsageError, a missing folder a SettingsError (FTMATRIX_CASES).
    """
    if not cases_dir.is_dir():
        what = "does not exist" if not cases_dir.exists() else "is not a folder"
        raise SettingsError(
            f"FTMATRIX_CASES: the cases folder {cases_dir} {what}; it holds the test_*.py "
            "files every cell runs (default: cases/ beside matrix.yaml's folder)"
        )
    root = cases_dir.resolve()
    available = sorted(p.relative_to(root).as_posix() for p in root.rglob("test_*.py"))
    problems = []
    for index, entry in enumerate(selection):
        where = source if from_command_line else f"{source}: cases[{index}]"
        target = (root / entry.split("::", 1)[0]).resolve()
        if not target.is_relative_to(root):
            problems.append(
                f"{where}: {entry!r} lies outside the cases folder {cases_dir}; "
                "a selection is a file, folder or node id inside it"
            )
        elif not target.exists():
            close = difflib.get_close_matches(entry.split("::", 1)[0], available, n=1)
            hint = f". Perhaps you meant {close[0]!r}?" if close else ""
            problems.append(
                f"{where}: {entry!r}: no such file or folder in {cases_dir}; its test files: "
                f"{', '.join(available) or 'none'}{hint}"
            )
    if not problems:
        return
    if from_command_line:
        raise UsageError("\n".join(problems))
    raise ConfigError(problems)
