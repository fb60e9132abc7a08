"""Installability before installation: uv decides whether a cell's pins co-install.

A cell whose pins cannot be installed together is ``uninstallable``, with the
resolver's own explanation (which requirement of which package conflicts),
and never gets a venv. One that can gets its full lock.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import re
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ftmatrix.cell.file_writes import write_atomically
from ftmatrix.cell.status import Status
from ftmatrix.config import InstallOptions, Limits
from ftmatrix.index import switched_on
from ftmatrix.plan import Cell
from ftmatrix.settings import resolve_ttl
from ftmatrix.system_packages import HostError, host_note, host_stack

# The test runner every cell gets besides its pins.
RUNNER_REQUIREMENTS = ("pytest",)
# The test runner a cell gets besides pytest when its cases share the machine.
XDIST_REQUIREMENT = "pytest-xdist"
UNSATISFIABLE = re.compile(r"No solution found|unsatisfiable", re.IGNORECASE)
# Network trouble is worth retrying; a resolver's proof or a build failure is not.
TRANSIENT = re.compile(
    r"Failed to fetch|error sending request|timed out|timeout|Connection (reset|refused)|"
    r"dns error|tcp connect|HTTP status server error|\b50[234]\b|temporarily unavailable",
    re.IGNORECASE,
)


@dataclass(frozen=True, kw_only=True)
class Lock:
    """A cell's resolved lock, parsed once: the runner, reuse and the records share it.

    ``text`` is what uv wrote (kept beside the records, installed from); ``requirements``
    its ``name==version`` lines; ``id`` the hash that names the environment in every
    record and in the reuse key; ``packages`` tells which packages moved between two locks.
    """

    text: str
    requirements: tuple[str, ...]
    id: str
    packages: Mapping[str, str]

    @classmethod
    def parse(cls, text: str) -> Lock:
        """The lock ``text`` as a value (uv's comments, headers and option lines dropped)."""
        requirements = tuple(locked_requirements(text))
        pairs = (line.partition("==") for line in requirements)
        return cls(
            text=text,
            requirements=requirements,
            id=hashlib.sha256("\n".join(sorted(requirements)).encode()).hexdigest()[:12],
            packages={name.strip(): version.strip() for name, sep, version in pairs if sep},
        )


@dataclass(frozen=True, kw_only=True)
class Resolution:
    """The resolver's answer for one cell: a lock, or the reason there is none."""

    lock: str | None
    status: Status | None
    reason: str | None
    # ``lock`` parsed, once, when the answer is made (None: no lock).
    locked: Lock | None = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        locked = Lock.parse(self.lock) if self.lock is not None else None
        object.__setattr__(self, "locked", locked)  # frozen: set once, here

    @property
    def lock_id(self) -> str | None:
        """The hash of the lock (None when there is none): what identifies the environment."""
        return self.locked.id if self.locked is not None else None


def with_test_runners(cell: Cell, limits: Limits) -> Cell:
    """The cell as resolved and installed: pytest-xdist joins it when workers share it.

    Added as a support package (unpinned, like pytest itself), so it is in the lock
    and in every record's package list; the cell's own id and label stay as they are.
    """
    if limits.workers == 1:
        return cell
    return replace(cell, support=(*cell.support, XDIST_REQUIREMENT))


def resolve_cell(
    cell: Cell,
    install: InstallOptions,
    env: Mapping[str, str],
    *,
    now: Callable[[], float] = time.time,
) -> Resolution:
    """Ask uv whether the cell's pins co-install on its Python, without making a venv.

    Answers (a lock, or the resolver's proof that there is none) are cached for
    ``FTMATRIX_RESOLVE_TTL`` seconds (default 6 hours; 0 disables), keyed by
    everything that decides them, so the same pin set is not resolved twice: support
    packages float, so a lock is only trusted while it is fresh.
    """
    requirements = "\n".join([*cell.requirements(), *RUNNER_REQUIREMENTS]) + "\n"
    args = [
        "pip",
        "compile",
        "-",
        "--python-version",
        cell.python,
        "--no-header",
        "--quiet",
        *uv_index_args(install, env),
    ]
    stack = None
    if install.system_packages:
        try:
            stack = host_stack(install, env)
        except HostError as exc:
            return Resolution(lock=None, status=Status.INSTALL_ERROR, reason=str(exc))
        assert stack is not None
        refused = stack.refusal(cell)
        if refused is not None:
            return Resolution(lock=None, status=refused[0], reason=refused[1])
        # Content-addressed paths: the host's versions are part of the cache key.
        args += stack.resolver_args(cache_dir(env) / "host")
    ttl = resolve_ttl(env)
    overrides = "".join(f"{line}\n" for line in cell.overrides)
    key = _cache_key(requirements + overrides, args, env)
    cached = _cached(key, env, ttl, now()) if ttl > 0 else None
    if cached is not None:
        return cached
    if overrides:
        # A cap probe: uv's overrides replace every declared requirement on the package.
        args += ["--override", str(overrides_file(overrides, env))]
    if stack is not None:
        result = _compile_preferring(args, env, requirements, stack.preferences())
    else:
        result = run_uv(args, env, stdin=requirements)
    if result.returncode == 0:
        answer = Resolution(lock=result.stdout, status=None, reason=None)
    else:
        explanation = result.stderr.strip()
        if not UNSATISFIABLE.search(explanation):
            # Not a proof about the pins (network, index): never cached.
            return Resolution(
                lock=None, status=Status.INSTALL_ERROR, reason=last_lines(explanation)
            )
        reason = _resolver_reason(explanation)
        if stack is not None:
            reason += host_note(stack, reason)
        answer = Resolution(lock=None, status=Status.UNINSTALLABLE, reason=reason)
    if ttl > 0:
        _store(key, env, answer, now())
    return answer


def _compile_preferring(
    args: list[str], env: Mapping[str, str], requirements: str, preferred: str
) -> subprocess.CompletedProcess[str]:
    """``uv pip compile`` preferring ``preferred`` versions: uv keeps the versions of an
    existing output file where they fit, so the output file starts as them."""
    with tempfile.TemporaryDirectory(prefix="ftmatrix-resolve-") as scratch:
        output = Path(scratch) / "lock.txt"
        output.write_text(preferred, encoding="utf-8")
        result = run_uv([*args, "--output-file", str(output)], env, stdin=requirements)
        if result.returncode == 0:
            result.stdout = output.read_text(encoding="utf-8")
        return result


# Variables that change what uv answers: part of the cache key.
RESOLVER_ENV = (
    "UV_EXCLUDE_NEWER",
    "UV_INDEX_URL",
    "UV_DEFAULT_INDEX",
    "UV_EXTRA_INDEX_URL",
    "UV_FIND_LINKS",
    "UV_INDEX_STRATEGY",
    "UV_PRERELEASE",
    "UV_TORCH_BACKEND",
    "UV_CONSTRAINT",
    "UV_OVERRIDE",
    "UV_EXCLUDE",
)


def cache_dir(env: Mapping[str, str]) -> Path:
    """Where resolutions are kept: FTMATRIX_CACHE_DIR, else the user's cache folder."""
    if env.get("FTMATRIX_CACHE_DIR"):
        return Path(env["FTMATRIX_CACHE_DIR"])
    base = env.get("XDG_CACHE_HOME") or str(Path(env.get("HOME", "/tmp")) / ".cache")
    return Path(base) / "ftmatrix" / "resolve"


# Variables that name files uv reads: what the files hold decides the answer, not their path.
_RESOLVER_FILES = ("UV_CONSTRAINT", "UV_OVERRIDE", "UV_EXCLUDE")


def _file_contents(value: str | None) -> list[str]:
    """What each file of a space-separated list holds ('' for one that cannot be read)."""
    contents = []
    for name in (value or "").split():
        try:
            contents.append(Path(name).read_text(encoding="utf-8", errors="replace"))
        except OSError:
            contents.append("")
    return contents


def resolver_inputs(env: Mapping[str, str], names: Sequence[str] = RESOLVER_ENV) -> list[Any]:
    """What of ``env`` decides uv's answers: the variables ``names`` and what the files the
    constraint, override and exclude variables name hold (an edited file, same path)."""
    return [
        {name: env.get(name) for name in names},
        {name: _file_contents(env.get(name)) for name in _RESOLVER_FILES},
    ]


def _cache_key(requirements: str, args: list[str], env: Mapping[str, str]) -> str:
    material = json.dumps([requirements, args, *resolver_inputs(env)], sort_keys=True)
    return hashlib.sha256(material.encode()).hexdigest()


def _cached(key: str, env: Mapping[str, str], ttl: float, now: float) -> Resolution | None:
    path = cache_dir(env) / f"{key}.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if now - float(data.get("at", 0)) > ttl:
        return None
    status = data.get("status")
    return Resolution(
        lock=data.get("lock"),
        status=Status(status) if status else None,
        reason=data.get("reason"),
    )


def _store(key: str, env: Mapping[str, str], answer: Resolution, now: float) -> None:
    data = {
        "at": now,
        "lock": answer.lock,
        "status": answer.status.value if answer.status else None,
        "reason": answer.reason,
    }
    with contextlib.suppress(OSError):  # a cache that cannot be written is only slower
        write_atomically(cache_dir(env) / f"{key}.json", json.dumps(data))


def overrides_file(overrides: str, env: Mapping[str, str]) -> Path:
    """A file of uv overrides, named by its content (so it never changes under a reader)."""
    digest = hashlib.sha256(overrides.encode()).hexdigest()[:16]
    path = cache_dir(env) / f"overrides-{digest}.txt"
    if not path.exists():
        write_atomically(path, overrides)
    return path


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
    if switched_on(env, "PIP_NO_INDEX"):
        args.append("--no-index")  # uv reads no variable of its own for this
    index_url = install.index_url or env.get("PIP_INDEX_URL")
    if index_url:
        args += ["--index-url", index_url]
    extras = [*install.extra_index_urls, *env.get("PIP_EXTRA_INDEX_URL", "").split()]
    for url in dict.fromkeys(extras):
        args += ["--extra-index-url", url]
    return args


def explanation_text(stderr: str) -> str:
    """uv's 'No solution found' output as plain lines: the resolver's own explanation."""
    return _resolver_reason(stderr)


def _resolver_reason(stderr: str) -> str:
    # uv prints 'error: No solution found ...' then the explanation after 'cause:'
    # or '╰─▶'; keep the explanation, which names the conflicting requirements.
    text = re.sub(r"^\s*(error:|\u00d7)\s*", "", stderr.strip(), flags=re.MULTILINE)
    text = re.sub(r"\s*(cause:|╰─▶)\s*", "\n", text)
    return "\n".join(line.strip() for line in text.splitlines() if line.strip())


def locked_requirements(lock: str) -> list[str]:
    """What a lock installs: its ``name==version`` lines, lower-cased, in its order.

    uv's header, its "via" comments and option lines (``--find-links PATH``) name the
    command, the requirers and this machine's paths, which change nothing installed.
    """
    requirements = (line.split("#", 1)[0].strip().lower() for line in lock.splitlines())
    return [line for line in requirements if line and not line.startswith("-")]


def lock_id(lock: str) -> str:
    """A short hash of what a lock installs, in any order: equal ids, equal environments."""
    return Lock.parse(lock).id


def locked_packages(lock: str) -> dict[str, str]:
    """A lock's ``name -> version``: what tells which packages moved between two locks."""
    return dict(Lock.parse(lock).packages)


def run_uv(
    args: list[str], env: Mapping[str, str], stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run uv with ``args``, output captured; the caller reads the return code."""
    return subprocess.run(
        [uv_binary(), *keep_environment_lists(args, env)],
        input=stdin,
        capture_output=True,
        text=True,
        env=dict(env),
        check=False,
    )


# uv options that also read a variable, and how the variable separates its entries. An
# option given on the command line replaces its variable, so a user's UV_CONSTRAINT would
# vanish wherever ftmatrix passes a constraint of its own (the host's stubs, say).
_ENVIRONMENT_LISTS = {
    "--constraint": ("UV_CONSTRAINT", None),
    "--override": ("UV_OVERRIDE", None),
    "--excludes": ("UV_EXCLUDE", None),
    "--find-links": ("UV_FIND_LINKS", ","),
    "--extra-index-url": ("UV_EXTRA_INDEX_URL", None),
}


def keep_environment_lists(args: list[str], env: Mapping[str, str]) -> list[str]:
    """``args`` plus, for each list option they give, the entries of its ``UV_*`` variable."""
    extra: list[str] = []
    for option, (variable, separator) in _ENVIRONMENT_LISTS.items():
        if option in args and env.get(variable, "").strip():
            entries = [entry.strip() for entry in env[variable].split(separator)]
            extra += [part for entry in entries if entry for part in (option, entry)]
    return [*args, *extra]


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
