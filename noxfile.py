"""ftmatrix's sessions: the matrix and its chores come from the package, as in any repository.

`from ftmatrix.sessions import *` is the whole noxfile `ftmatrix init` writes
elsewhere: one `matrix(LABEL)` session per cell, plan, report, bisect, autobisect
and wheelhouse (see `ftmatrix.sessions`). Below it, this repository's own chores:
its tests, lint, benchmarks and docs.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nox

from ftmatrix.sessions import *  # noqa: F403 -- importing them is what registers the sessions

nox.needs_version = ">=2026.10.20"
# This repository's own sessions make their venvs with uv too (the cells' is set on them).
nox.options.default_venv_backend = "uv"

HERE = Path(__file__).resolve().parent


@nox.session
def tests(session: nox.Session) -> None:
    """The tool's own tests; `-- -m 'not slow'` skips the real-install tier."""
    session.install("-e", ".[test]")
    session.run("pytest", *session.posargs)


@nox.session(python=False)
def bench(session: nox.Session) -> None:
    """The benchmarks (figures side by side, never asserted): `-- NAME` runs one of them."""
    wanted = set(session.posargs)
    for script in sorted((HERE / "benchmarks").glob("bench_*.py")):
        if not wanted or script.stem.removeprefix("bench_") in wanted:
            session.log(f"benchmark {script.stem}")
            session.run(sys.executable, str(script), external=True)


@nox.session
def docs(session: nox.Session) -> None:
    """The docs site: its generated blocks checked, then `mkdocs build --strict` into site/."""
    session.install("-e", ".[docs]")
    session.run("python", "-m", "ftmatrix.docs_gen", "--check")
    session.run("mkdocs", "build", "--strict", env={"NO_MKDOCS_2_WARNING": "1"})


@nox.session
def lint(session: nox.Session) -> None:
    """ruff, mypy (strict) and the size limits (600 lines a module, complexity 20 by radon)."""
    session.install("-e", ".[lint]")
    session.run("ruff", "check", "src", "tests", "noxfile.py", "cases", "benchmarks")
    session.run("ruff", "format", "--check", "src", "tests", "noxfile.py", "cases", "benchmarks")
    session.run("mypy")
    session.run("radon", "cc", "--min", "D", "--show-complexity", "src/ftmatrix")  # the offenders
    # The limits and their allow-list are the test's, the one the tests session runs too.
    session.run("pytest", "-q", "tests/test_architecture.py", "-k", "over_the_limits")
