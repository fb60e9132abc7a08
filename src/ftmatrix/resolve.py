"""Installability before installation: uv decides whether a cell's pins co-install.

A cell whose pins cannot be installed together is ``uninstallable``, with the
resolver's own explanation (which requirement of which package conflicts),
and never gets a venv. One that can gets its full lock.
"""

from __future__ import annotations

import functools
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass

from ftmatrix.config import InstallOptions
from ftmatrix.plan import Cell
from ftmatrix.status import Status

# The test runner every cell gets besides its pins.
RUNNER_REQUIREMENTS = ("pytest",)
UNSATISFIABLE = re.compile(r"No solution found|unsatisfiable", re.IGNORECASE)


@dataclass(frozen=True, kw_only=True)
class Resolution:
    """The resolver's answer for one cell: a lock, or the reason there is none."""

    lock: str | None
    status: Status | None
    reason: str | None


def resolve_cell(cell: Cell, install: InstallOptions, env: Mapping[str, str]) -> Resolution:
    """Ask uv whether the cell's pins co-install on its Python, without making a venv."""
    requirements = "\n".join([*cell.requirements(), *RUNNER_REQUIREMENTS]) + "\n"
    result = run_uv(
        ["pip", "compile", "-", "--python-version", cell.python, "--no-header", "--quiet"]
        + uv_index_args(install, env),
        env,
        stdin=requirements,
    )
    if result.returncode == 0:
        return Resolution(lock=result.stdout, status=None, reason=None)
    explanation = result.stderr.strip()
    if UNSATISFIABLE.search(explanation):
        return Resolution(
            lock=None, status=Status.UNINSTALLABLE, reason=_resolver_reason(explanation)
        )
    return Resolution(lock=None, status=Status.INSTALL_ERROR, reason=last_lines(explanation))


def uv_index_args(install: InstallOptions, env: Mapping[str, str]) -> list[str]:
    """uv arguments for where packages come from: matrix.yaml first, then ``PIP_*``.

    uv reads its own ``UV_*`` variables itself; the ``PIP_*`` ones are honoured
    here so that a runner configured for pip (a wheelhouse in PIP_FIND_LINKS)
    works unchanged.
    """
    args: list[str] = []
    links = [*install.find_links, *env.get("PIP_FIND_LINKS", "").split()]
    for link in dict.fromkeys(links):
        args += ["--find-links", link]
    index_url = install.index_url or env.get("PIP_INDEX_URL")
    if index_url:
        args += ["--index-url", index_url]
    extras = [*install.extra_index_urls, *env.get("PIP_EXTRA_INDEX_URL", "").split()]
    for url in dict.fromkeys(extras):
        args += ["--extra-index-url", url]
    return args


def _resolver_reason(stderr: str) -> str:
    # uv prints 'error: No solution found ...' then the explanation after 'cause:'
    # or '╰─▶'; keep the explanation, which names the conflicting requirements.
    text = re.sub(r"^\s*(error:|\u00d7)\s*", "", stderr.strip(), flags=re.MULTILINE)
    text = re.sub(r"\s*(cause:|╰─▶)\s*", "\n", text)
    return "\n".join(line.strip() for line in text.splitlines() if line.strip())


def run_uv(
    args: list[str], env: Mapping[str, str], stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run uv with ``args``, output captured; the caller reads the return code."""
    return subprocess.run(
        [uv_binary(), *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=dict(env),
        check=False,
    )


@functools.cache
def uv_binary() -> str:
    """The uv executable shipped with the ``uv`` package ftmatrix depends on."""
    try:
        from uv import find_uv_bin  # noqa: PLC0415 -- optional at import time for cells

        return str(find_uv_bin())
    except (ImportError, FileNotFoundError):
        return "uv"


def last_lines(text: str, count: int = 12) -> str:
    """The end of a tool's output, where the error that stopped it is."""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return "\n".join(lines[-count:]) or "no output"
