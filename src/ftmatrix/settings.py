"""Where a run reads and writes, from the ``FTMATRIX_*`` environment variables.

nox builds its session list before any argument reaches a session, so what the
noxfile plans is chosen by environment variables; the CLI reads the same ones.
"""

from __future__ import annotations

import os
import secrets
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from ftmatrix.cell.files import RUN_ID_RULE, is_run_id
from ftmatrix.errors import SettingsError
from ftmatrix.path_kinds import check_cases_folder, check_kinds, check_output_folder, kind_of
from ftmatrix.versions import python_version_problem, shown

ENV_VARS = {
    "FTMATRIX_MATRIX": "The matrix file (default: matrix.yaml).",
    "FTMATRIX_PROFILE": "The profile to apply (default: the file's default-profile).",
    "FTMATRIX_CASES": "The cases folder (default: cases/).",
    "FTMATRIX_KNOWN_ISSUES": "The known issues that explain failures (default: "
    "known_issues.yaml beside the matrix file).",
    "FTMATRIX_OUT": "Where records and reports go (default: reports/).",
    "FTMATRIX_RUN_ID": "The run id shared by every cell of one run (default: the start time "
    "and a random suffix).",
    "FTMATRIX_RUNNER_LABELS": "Comma-separated labels of the CI runner, recorded per cell.",
    "FTMATRIX_SELECT": "Comma-separated globs: only cells whose label matches one.",
    "FTMATRIX_PYTHON": "The Python of cells whose matrix names none, such as 3.11 (default: "
    "the one running ftmatrix; the same rule as matrix.yaml's python); the nightly's jobs "
    "get the plan's.",
    "FTMATRIX_SHARD": "Run only shard I of N (`I/N`, 1-based, N at most 10,000), balanced by "
    "past durations.",
    "FTMATRIX_RESOLVE_TTL": "Seconds a cached resolution, and a plan kept for `nox -l`, stays "
    "valid (default 21600; 0: off).",
    "FTMATRIX_CACHE_DIR": "Where resolutions, kept plans (and the declared requirements cap "
    "probes read) are cached (default ~/.cache/ftmatrix/resolve).",
    "FTMATRIX_HOST_PYTHON": "The host interpreter whose packages install.system-packages "
    "takes (default: the Python running ftmatrix).",
    "FTMATRIX_LEASE_DIR": "Where GPU lease locks live (default /tmp/ftmatrix-gpu-leases).",
    "FTMATRIX_RESUME": "`1`: continue the run FTMATRIX_RUN_ID names (default: the newest), "
    "skipping cells and cases it finished (default `0`).",
    "FTMATRIX_REUSE": "`0`: run every cell, reusing no earlier result (default `1`: "
    "matrix.yaml's reuse.max-age-days decides).",
}
# What a yes-or-no variable (FTMATRIX_RESUME, FTMATRIX_REUSE) reads, in any case; anything
# else is refused: "false" read as "not empty, so true" would resume an old run unasked.
TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off")
# More shards than any CI fans out to: past it, N is a typo (and one slot per shard).
MAX_SHARDS = 10_000
# The most of a refused value an error line echoes: the line stays one line to read.
ECHOED = 80


@dataclass(frozen=True, kw_only=True)
class Settings:
    """Paths and names of one run."""

    matrix: Path
    profile: str | None
    cases: Path
    out: Path
    run_id: str
    runner_labels: tuple[str, ...] = ()
    shard: tuple[int, int] | None = None
    resume: bool = False
    select: tuple[str, ...] = ()
    reuse: bool = True
    known_issues: Path | None = None  # FTMATRIX_KNOWN_ISSUES; None: beside the matrix
    # The Python of cells whose matrix names none: the interpreter running ftmatrix, or
    # FTMATRIX_PYTHON (the nightly's jobs get the one the plan used, so labels agree).
    python: str = f"{sys.version_info.major}.{sys.version_info.minor}"

    @classmethod
    def from_env(cls, env: Mapping[str, str], *, root: Path, now: datetime) -> Settings:
        """Settings from ``env``; relative paths are taken from ``root``."""
        out = root / env.get("FTMATRIX_OUT", "reports")
        found = kind_of(out)
        if found not in (None, "a folder"):
            raise SettingsError(
                f"FTMATRIX_OUT={out}: is {found}; records and reports go into a folder "
                "(default: reports/), which is made where it does not exist"
            )
        unwritable = _unwritable(out)
        if unwritable:
            raise SettingsError(
                f"FTMATRIX_OUT={out}: cannot be written ({unwritable}); records and reports "
                "go into a folder ftmatrix can write (default: reports/), made where it "
                "does not exist"
            )
        resume = env_flag(env, "FTMATRIX_RESUME", default=False)
        reuse = env_flag(env, "FTMATRIX_REUSE", default=True)
        run_id = env.get("FTMATRIX_RUN_ID") or (resume and newest_run_id(out)) or new_run_id(now)
        check_run_id(run_id)
        resolve_ttl(env)  # checked now: a plan without resolving must not hide a typo
        python = env.get("FTMATRIX_PYTHON", "").strip()
        problem = python_version_problem(python) if python else None
        if problem:
            raise SettingsError(
                f"{echoed('FTMATRIX_PYTHON', python)}: {problem} (unset: the interpreter "
                "running ftmatrix)"
            )
        known_issues = env.get("FTMATRIX_KNOWN_ISSUES", "").strip()
        found = kind_of(root / known_issues) if known_issues else "a file"
        if found != "a file":
            raise SettingsError(
                f"{echoed('FTMATRIX_KNOWN_ISSUES', known_issues)}: "
                f"{'no such file' if found is None else 'is ' + found}; it names a "
                "known_issues.yaml (unset: the one beside the matrix file)"
            )
        matrix = root / env.get("FTMATRIX_MATRIX", "matrix.yaml")
        cases = root / env.get("FTMATRIX_CASES", "cases")
        # Before anything reads or writes them: a FIFO read blocks, a folder written over
        # loses what it holds.
        check_kinds([(matrix, "file", "the matrix file (FTMATRIX_MATRIX)")])
        if not known_issues:  # the one beside the matrix is read (FTMATRIX_KNOWN_ISSUES's: above)
            check_kinds([(matrix.parent / "known_issues.yaml", "file", "the known issues file")])
        check_cases_folder(cases)
        check_output_folder(out, run_id)
        return cls(
            matrix=matrix,
            known_issues=root / known_issues if known_issues else None,
            profile=env.get("FTMATRIX_PROFILE") or None,
            cases=cases,
            out=out,
            run_id=run_id,
            runner_labels=runner_labels(env),
            shard=parse_shard(env.get("FTMATRIX_SHARD", "")),
            resume=resume,
            select=tuple(g.strip() for g in env.get("FTMATRIX_SELECT", "").split(",") if g.strip()),
            reuse=reuse,
            **({"python": python} if python else {}),
        )


def new_run_id(now: datetime) -> str:
    """Sortable, readable and unique: ``20261122T143512Z-3fa9c1``.

    The random suffix keeps two runs started in the same second apart: sharing an
    id, each would clear the other's cells.
    """
    return f"{now.strftime('%Y%m%dT%H%M%SZ')}-{secrets.token_hex(3)}"


DEFAULT_TTL_SECONDS = 6 * 3600


def resolve_ttl(env: Mapping[str, str]) -> float:
    """FTMATRIX_RESOLVE_TTL in seconds (0: off), or a SettingsError naming what is allowed."""
    text = env.get("FTMATRIX_RESOLVE_TTL", "").strip() or str(DEFAULT_TTL_SECONDS)
    try:
        ttl = float(text)
    except ValueError:
        ttl = -1.0
    if not ttl >= 0 or ttl == float("inf"):
        raise SettingsError(
            f"{echoed('FTMATRIX_RESOLVE_TTL', text)}: expected seconds, a number of 0 or more "
            f"(0 turns the resolution cache off; default {DEFAULT_TTL_SECONDS})"
        )
    return ttl


def env_flag(env: Mapping[str, str], name: str, *, default: bool) -> bool:
    """A yes-or-no variable: unset or empty is ``default``; :data:`TRUE_WORDS` and
    :data:`FALSE_WORDS` in any case; anything else is a SettingsError naming both."""
    text = env.get(name, "").strip().lower()
    if not text:
        return default
    if text in TRUE_WORDS or text in FALSE_WORDS:
        return text in TRUE_WORDS
    raise SettingsError(
        f"{echoed(name, env[name])}: expected yes or no: {', '.join(TRUE_WORDS)} "
        f"or {', '.join(FALSE_WORDS)} (any case; unset: {'1' if default else '0'})"
    )


def check_run_id(run_id: str) -> None:
    """A run id is a safe folder name (letters, digits, '.', '_', '-'), or a SettingsError."""
    if not is_run_id(run_id):
        raise SettingsError(
            f"{echoed('FTMATRIX_RUN_ID', run_id)}: a run id is "
            f"{RUN_ID_RULE}, "
            "such as '20261125T030000Z-nightly'"
        )


def parse_shard(text: str) -> tuple[int, int] | None:
    """``'2/4'`` -> ``(2, 4)``; empty -> None; anything else is a SettingsError."""
    if not text.strip():
        return None
    index, _, count = text.partition("/")
    try:  # int() of thousands of digits is a ValueError too
        shard = int(index), int(count)
    except ValueError:
        shard = (0, 0)
    if not 1 <= shard[0] <= shard[1] <= MAX_SHARDS:
        raise SettingsError(
            f"{echoed('FTMATRIX_SHARD', text)}: expected I/N with 1 <= I <= N and N at "
            f"most {MAX_SHARDS:,}, such as '1/4'"
        )
    return shard


def runner_labels(env: Mapping[str, str]) -> tuple[str, ...]:
    """FTMATRIX_RUNNER_LABELS's labels; recorded in every record, so each must be text."""
    labels = env.get("FTMATRIX_RUNNER_LABELS", "")
    found = tuple(x.strip() for x in labels.split(",") if x.strip())
    if not all(label.isprintable() for label in found):
        raise SettingsError(
            f"{echoed('FTMATRIX_RUNNER_LABELS', labels)}: a label holds a control character "
            "or bytes that are no text; labels are text, such as 'self-hosted,gpu,l4'"
        )
    return found


def echoed(name: str, value: str) -> str:
    """``NAME='value'`` as an error line starts it: a long value cut short, its length said."""
    more = "" if len(repr(value)) <= ECHOED else f" ({len(value):,} characters)"
    return f"{name}={shown(value, ECHOED)}{more}"


def _unwritable(out: Path) -> str | None:
    """Why nothing can be written into ``out`` (or the nearest folder above it that
    exists, where it would be made), or None. Checked before any work, so a run into
    a read-only folder stops with one message, not a traceback mid-cell."""
    existing = out
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if os.access(existing, os.W_OK | os.X_OK):
        return None
    try:  # the real reason: a read-only file system, permissions, ...
        handle, probe = tempfile.mkstemp(dir=existing, prefix=".ftmatrix-write-")
    except OSError as exc:
        return f"{existing}: {exc.strerror or exc}"
    os.close(handle)
    Path(probe).unlink()
    return None


def newest_run_id(out: Path) -> str | None:
    """The run under ``out`` that wrote records last (by the time its files were written,
    never by its id's text: an id is any name), or None."""
    runs = [
        (max((f.stat().st_mtime for f in p.iterdir()), default=p.stat().st_mtime), p.name)
        for p in (out / "records").glob("*")
        if p.is_dir() and is_run_id(p.name)
    ]
    return max(runs)[1] if runs else None


def known_issues_file(settings: Settings) -> Path:
    """FTMATRIX_KNOWN_ISSUES, else known_issues.yaml beside the matrix file: each matrix
    keeps its own explanations, and one kept elsewhere (ci/gpu-host/'s) can share them."""
    return settings.known_issues or settings.matrix.parent / "known_issues.yaml"
