"""Which Python interpreters this machine has for the matrix's cells, and where each is.

A cell's venv is made from an interpreter already on the machine, found as uv finds
one (``uv python find``: uv-managed installs, then the search path), never downloaded:
a runner may be offline, and a download is a fetch from the network nobody asked the
run for. A Python the machine lacks is said by the plan and recorded by the cell as an
``install-error`` (its environment could not be built), counted in the report and failing
the run; ``uv python install 3.X`` (or any Python on PATH) gives it to the next run.

A ``UV_*`` setting that stops uv itself (``UV_PYTHON_PREFERENCE=bogus``, a cache folder
it cannot make) is said before any cell, once (:func:`check_uv_settings`): every venv and
install would fail, and uv's discovery would call every Python missing.
"""

from __future__ import annotations

import functools
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ftmatrix.errors import SettingsError
from ftmatrix.resolve import uv_binary

# Where an interpreter is looked for: uv's discovery, with downloads off.
SOURCE = "uv python find --no-python-downloads"
# The environment variables that steer uv's discovery and nothing else of the caller's.
_DISCOVERY_VARIABLES = (
    "PATH",
    "HOME",
    "UV_PYTHON_INSTALL_DIR",
    "UV_PYTHON_PREFERENCE",
    "XDG_DATA_HOME",
)


@dataclass(frozen=True, kw_only=True)
class Interpreter:
    """The interpreter a cell of Python ``version`` is made from, or why there is none."""

    version: str
    path: str | None
    # uv's own words where its search stopped at an interpreter it could not run (a
    # broken python3.X first on PATH, which hides a working one after it), else None.
    refused: str | None = None

    @property
    def missing(self) -> str | None:
        """Why a cell of this Python cannot start here (None: it can)."""
        if self.path is not None:
            return None
        if self.refused:
            return (
                f"no usable Python {self.version} on this machine ({SOURCE}: {self.refused}; "
                "ftmatrix never downloads one): mend or remove that interpreter, or put a "
                "working one before it on PATH"
            )
        return (
            f"no Python {self.version} on this machine ({SOURCE} found none; ftmatrix never "
            f"downloads one): install it (`uv python install {self.version}`) or put it on PATH"
        )

    def describe(self) -> str:
        return f"Python {self.version}: {self.path}" if self.path else self.missing or ""


def find_interpreters(versions: Iterable[str], env: Mapping[str, str]) -> dict[str, Interpreter]:
    """Each of ``versions`` (``3.11``) with the interpreter uv finds for it, if any."""
    discovery = tuple(sorted((k, env[k]) for k in _DISCOVERY_VARIABLES if k in env))
    return {v: _find(v, discovery) for v in sorted(set(versions))}


@functools.cache
def _find(version: str, discovery: tuple[tuple[str, str], ...]) -> Interpreter:
    # Outside any project and venv: a .python-version, a .venv or VIRTUAL_ENV of the
    # caller's must not decide which interpreter a cell gets.
    with tempfile.TemporaryDirectory(prefix="ftmatrix-python-") as nowhere:
        try:
            found = subprocess.run(
                [uv_binary(), "python", "find", "--no-python-downloads", "--no-project", version],
                capture_output=True,
                text=True,
                cwd=nowhere,
                env={**dict(discovery), "UV_PYTHON_DOWNLOADS": "never"},
                check=False,
                timeout=60,
            )
        except (OSError, subprocess.TimeoutExpired):
            return Interpreter(version=version, path=None)
    path = found.stdout.strip().splitlines()[-1:] if found.returncode == 0 else []
    said = " ".join(line.strip() for line in found.stderr.splitlines() if line.strip())
    refused = said if found.returncode != 0 and "Failed to inspect" in said else None
    return Interpreter(version=version, path=path[0] if path else None, refused=refused)


def check_uv_settings(env: Mapping[str, str], folder: Path | None = None) -> None:
    """A SettingsError with uv's own words where the environment's settings stop uv (an
    invalid ``UV_*`` value, an unusable ``UV_CACHE_DIR``, a ``uv.toml`` or a
    ``pyproject.toml``'s ``[tool.uv]`` it cannot read in ``folder``, where nox makes the
    cells' venvs): asked as a cell's venv is made, with the whole environment, of an
    interpreter that is there (this one)."""
    with tempfile.TemporaryDirectory(prefix="ftmatrix-uv-") as nowhere:
        try:
            asked = subprocess.run(
                [uv_binary(), "python", "find", "--no-python-downloads", "--no-project"]
                + [sys.executable],
                capture_output=True,
                text=True,
                cwd=folder or nowhere,
                env=dict(env),
                check=False,
                timeout=60,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise SettingsError(f"uv cannot be run here: {exc}") from None
    if asked.returncode == 0:
        return
    said = " ".join(line.strip() for line in asked.stderr.splitlines() if line.strip())
    named = ", ".join(sorted(k for k in env if k.startswith("UV_"))) or "none"
    where = f" (and the uv.toml in {folder}, if any)" if folder else ""
    raise SettingsError(
        f"uv refuses this environment's settings: {said or f'exit code {asked.returncode}'} "
        f"(UV_* variables set: {named}){where}; correct or unset them: every cell's venv "
        "needs uv"
    )
