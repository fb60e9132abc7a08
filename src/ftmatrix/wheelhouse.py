"""A wheelhouse: every wheel the selected cells need, for another machine's Python and platform.

``ftmatrix wheelhouse --python 3.12 --platform manylinux_2_28_x86_64 DIR`` runs on a
networked machine; an offline runner then runs the same cells with
``install: {find-links: [DIR]}`` and no index (``UV_OFFLINE=1``).

Each cell is resolved by uv for the target (``--python-version``, ``--python-platform``,
wheels only) as the runner resolves it, pytest included, into a PEP 751 ``pylock.toml``:
uv names the exact file of each package for that platform, with its URL, size and hash,
from whatever index or find-links the matrix configures. Downloading those URLs (hash
checked) needs no pip and cannot disagree with the resolver; ``pip download`` would
resolve a second time, with pip's own index settings, one process per wheel.
Distributions the target host provides (``install.system-packages``, versions from a
``pip list --format=freeze`` of that host) are pinned to its versions and not downloaded.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import tempfile
import time
import tomllib
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from packaging.tags import Tag, compatible_tags, cpython_tags
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from ftmatrix.cell.file_writes import write_atomically
from ftmatrix.config import InstallOptions, Limits
from ftmatrix.errors import UsageError, WheelhouseError
from ftmatrix.messages import conflict_summary
from ftmatrix.pipeline import plan_for_python
from ftmatrix.plan import Cell
from ftmatrix.resolve import (
    RUNNER_REQUIREMENTS,
    UNSATISFIABLE,
    explanation_text,
    last_lines,
    locked_requirements,
    resolve_cell,
    run_uv,
    uv_binary,
    uv_index_args,
    with_test_runners,
)
from ftmatrix.retry import retried
from ftmatrix.system_packages import (
    Host,
    HostDistribution,
    HostStack,
    choose,
    host_from_snapshot,
    same_version,
)
from ftmatrix.user_files import MB, read_user_text

MANIFEST = "ftmatrix-wheelhouse.json"
DOWNLOAD_THREADS = 4
RESOLVE_THREADS = 8
_MANYLINUX = re.compile(r"manylinux_(\d+)_(\d+)_(x86_64|aarch64)")
_LEGACY_MANYLINUX = {"manylinux2014": (2, 17), "manylinux2010": (2, 12), "manylinux1": (2, 5)}
_FIXED_PLATFORMS = {
    "win_amd64": "x86_64-pc-windows-msvc",
    "win_arm64": "aarch64-pc-windows-msvc",
    "win32": "i686-pc-windows-msvc",
}
# uv knows these manylinux levels by name (uv pip compile --help, uv 0.13).
_UV_MANYLINUX_LEVELS = (17, 28, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40)
PLATFORM_EXAMPLES = (
    "manylinux_2_28_x86_64, manylinux2014_aarch64, musllinux_1_2_x86_64, "
    "macosx_14_0_arm64, win_amd64"
)


@dataclass(frozen=True, kw_only=True)
class Target:
    """The machine the wheels are for: its Python and its platform tag."""

    python: str
    platform: str

    @property
    def uv_platform(self) -> str:
        """uv's ``--python-platform`` for the tag."""
        return uv_platform(self.platform)

    def tags(self) -> list[Tag]:
        """The wheel tags this target installs, best first."""
        major, minor = (int(x) for x in self.python.split(".")[:2])
        platforms = platform_tags(self.platform)
        return [
            *cpython_tags((major, minor), platforms=platforms),
            *compatible_tags((major, minor), interpreter=f"cp{major}{minor}", platforms=platforms),
        ]


@dataclass(frozen=True, kw_only=True)
class Wheel:
    """One wheel file a cell needs."""

    name: str
    version: str
    filename: str
    url: str
    sha256: str | None = None
    size: int | None = None


@dataclass(frozen=True, kw_only=True)
class CellWheels:
    """What one cell needs: its wheels, or why it needs none (uninstallable anywhere)."""

    cell: Cell
    wheels: tuple[Wheel, ...] = ()
    from_host: tuple[str, ...] = ()
    uninstallable: str | None = None


@dataclass(frozen=True, kw_only=True)
class Summary:
    """What a wheelhouse run did."""

    folder: Path
    wheels: int
    size: int
    downloaded: int
    cells: int
    skipped: tuple[str, ...] = field(default_factory=tuple)


def uv_platform(tag: str) -> str:
    """uv's ``--python-platform`` for a wheel platform tag; WheelhouseError if unknown."""
    if tag in _FIXED_PLATFORMS:
        return _FIXED_PLATFORMS[tag]
    if match := re.fullmatch(r"macosx_\d+_\d+_(arm64|x86_64|universal2)", tag):
        return "x86_64-apple-darwin" if match[1] == "x86_64" else "aarch64-apple-darwin"
    if match := re.fullmatch(r"musllinux_1_\d+_(x86_64|aarch64)", tag):
        return f"{match[1]}-unknown-linux-musl"
    if match := re.fullmatch(r"manylinux2014_(x86_64|aarch64)", tag):
        return f"{match[1]}-manylinux2014"
    match = _MANYLINUX.fullmatch(tag)
    if match and match[1] == "2" and int(match[2]) in _UV_MANYLINUX_LEVELS:
        return f"{match[3]}-manylinux_2_{match[2]}"
    raise WheelhouseError(
        f"--platform {tag!r}: not a platform this command knows; use a wheel platform tag "
        f"such as {PLATFORM_EXAMPLES}"
    )


def platform_tags(tag: str) -> list[str]:
    """The platform tags a machine of ``tag`` installs, best first (manylinux: older too)."""
    match = _MANYLINUX.fullmatch(tag)
    if match is None:
        for legacy, (major, minor) in _LEGACY_MANYLINUX.items():
            if tag.startswith(legacy + "_"):
                arch = tag.removeprefix(legacy + "_")
                match = _MANYLINUX.fullmatch(f"manylinux_{major}_{minor}_{arch}")
    if match is None:
        return [tag]
    minor, arch = int(match[2]), match[3]
    tags = []
    for level in range(minor, 4, -1):
        tags.append(f"manylinux_2_{level}_{arch}")
        tags += [f"{old}_{arch}" for old, (_, m) in _LEGACY_MANYLINUX.items() if m == level]
    return tags


def read_host_packages(path: Path, target: Target) -> Host:
    """The target host from ``path``: its snapshot (JSON, with each distribution's
    metadata: ``python -m ftmatrix.system_packages`` there), or its
    ``pip list --format=freeze`` (names and versions only)."""
    text = _read_host_file(path)
    if text.lstrip().startswith("{"):
        try:
            host = host_from_snapshot(json.loads(text))
        except (ValueError, KeyError, TypeError) as exc:
            raise WheelhouseError(f"--host-packages {path}: not a host snapshot: {exc}") from None
        if host.version != ".".join(target.python.split(".")[:2]):
            raise WheelhouseError(
                f"--host-packages {path}: the host runs Python {host.version}, not {target.python}"
            )
        return host
    return target_host(read_host_freeze(path), str(path), target)


# The most of a --host-packages read: a snapshot carries each distribution's metadata, a
# few MB for a large host; past this it is not one (a device, a wrong file).
HOST_LIMIT = 50 * MB


def _read_host_file(path: Path) -> str:
    what = f"--host-packages {path}"
    try:
        return read_user_text(
            str(path), what, limit=HOST_LIMIT, kind="a host's packages", error=WheelhouseError
        )
    except OSError as exc:
        raise WheelhouseError(f"{what}: {exc.strerror or exc}") from None


def read_host_freeze(path: Path) -> dict[str, str]:
    """``name==version`` lines (``pip list --format=freeze`` of the target host)."""
    text = _read_host_file(path)
    versions = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, version = line.partition("==")
        if not sep or not name.strip() or not version.strip():
            raise WheelhouseError(
                f"--host-packages {path}:{number}: {raw.strip()!r} is not name==version "
                "(write it with `python -m pip list --format=freeze` on the host)"
            )
        versions[name.strip()] = version.strip()
    return versions


def target_host(freeze: Mapping[str, str], source: str, target: Target) -> Host:
    """The target host as the freeze describes it (no metadata: the index supplies it)."""
    return Host(
        python=source,
        version=".".join(target.python.split(".")[:2]),
        site_dirs=(),
        distributions=tuple(
            HostDistribution(name=name, version=version, metadata="")
            for name, version in freeze.items()
        ),
    )


def resolve_for_target(
    cell: Cell,
    install: InstallOptions,
    env: Mapping[str, str],
    target: Target,
    *,
    stack: HostStack | None,
    scratch: Path,
    limits: Limits | None = None,
) -> CellWheels:
    """The wheels ``cell`` needs on ``target``; WheelhouseError if it resolves here only.

    First the lock as the runner will resolve it on the host, then the files of what is
    not the host's, each package as locked. A cell the resolver proves uninstallable on
    this machine too needs no wheels: the offline runner records it ``uninstallable`` as
    any runner would.
    """
    cell = replace(cell, python=target.python)
    if stack is not None:
        refused = stack.refusal(cell)
        if refused is not None:
            return CellWheels(cell=cell, uninstallable=refused[1])
    common = [
        "--python-version",
        target.python,
        "--python-platform",
        target.uv_platform,
        "--only-binary",
        ":all:",
        "--no-header",
        "--quiet",
        *uv_index_args(install, env),
    ]
    pinned = scratch / f"lock.{cell.id}.txt"
    # Resolved as the runner installs it: pytest, and pytest-xdist when workers share it.
    runners = with_test_runners(cell, limits) if limits is not None else cell
    requirements = "\n".join([*runners.requirements(), *RUNNER_REQUIREMENTS]) + "\n"
    done = run_uv(
        ["pip", "compile", "-", "--output-file", str(pinned), *common]
        + _host_args(stack, pinned, scratch / cell.id),
        env,
        stdin=requirements,
    )
    if done.returncode != 0:
        explanation = done.stderr.strip()
        here = resolve_cell(cell, replace(install, system_packages=()), env)
        unsatisfiable = UNSATISFIABLE.search(explanation)
        if unsatisfiable and here.lock is None:
            return CellWheels(cell=cell, uninstallable=conflict_summary(here.reason or ""))
        why = conflict_summary(explanation_text(explanation)) if unsatisfiable else None
        raise WheelhouseError(
            f"cell {cell.label} does not resolve for Python {target.python} on "
            f"{target.platform}: {why or last_lines(explanation, 1)}"
        )
    fetch, from_host = _split_host(cell, stack, locked_requirements(pinned.read_text("utf-8")))
    if not fetch:
        return CellWheels(cell=cell, from_host=from_host)
    pinned.write_text("".join(f"{line}\n" for line in fetch), encoding="utf-8")
    lock = scratch / f"pylock.{cell.id}.toml"  # the only names uv writes a pylock to
    files = ["pip", "compile", str(pinned), "--no-deps", "--format", "pylock.toml"]
    done = run_uv([*files, "--output-file", str(lock), *common], env)
    if done.returncode != 0:
        raise WheelhouseError(f"cell {cell.label}: {last_lines(done.stderr, 1)}")
    tags = target.tags()
    packages = tomllib.loads(lock.read_text(encoding="utf-8")).get("packages", [])
    wheels = tuple(_best_wheel(package, tags, target) for package in packages)
    return CellWheels(cell=cell, wheels=wheels, from_host=from_host)


def _host_args(stack: HostStack | None, output: Path, place: Path) -> list[str]:
    """uv arguments (and the output file's preferences) for resolving on the host.

    The host's versions are preferred (uv keeps those of an existing output file where
    they fit) and the fixed ones constrained, from the host's own metadata where its
    snapshot has it. A freeze has names and versions only: then the fixed ones, and so
    their requirements, stay out of the resolution, and the host checks them.
    """
    if stack is None:
        output.write_text("", encoding="utf-8")
        return []
    if _has_metadata(stack):
        output.write_text(stack.preferences(), encoding="utf-8")
        return stack.resolver_args(place.parent / "host")
    output.write_text(_public_lines(stack.preferences()), encoding="utf-8")
    excluded = place.with_name(f"host-fixed.{place.name}.txt")
    excluded.write_text("".join(f"{d.name}\n" for d in stack.provided), encoding="utf-8")
    return ["--excludes", str(excluded)]


def _split_host(
    cell: Cell, stack: HostStack | None, locked: Sequence[str]
) -> tuple[list[str], tuple[str, ...]]:
    """The locked lines to download, and those the host provides (at its version)."""
    if stack is None:
        return list(locked), ()
    from_host = []
    if not _has_metadata(stack):  # the fixed ones are not in the lock: name those pinned
        pinned = {canonicalize_name(name) for name, _ in cell.pins}
        from_host = [
            f"{d.name}=={d.version}" for d in stack.provided if canonicalize_name(d.name) in pinned
        ]
    host = {canonicalize_name(d.name): _public(d.version) for d in stack.host.distributions}
    fetch = []
    for line in locked:
        name, _, version = line.partition("==")
        installed = host.get(canonicalize_name(name))
        if installed is not None and same_version(installed, _public(version)):
            from_host.append(line)
        else:
            fetch.append(line)
    return fetch, tuple(sorted(from_host))


def _has_metadata(stack: HostStack) -> bool:
    """From a host snapshot (with metadata), not a freeze (names and versions)."""
    return all(d.metadata for d in stack.host.distributions)


def download(wheel: Wheel, folder: Path) -> bool:
    """Put ``wheel`` in ``folder`` (hash checked); False if an equal file is already there."""
    path = folder / wheel.filename
    if path.exists() and (wheel.sha256 is None or _sha256(path) == wheel.sha256):
        return False
    partial = folder / f".{wheel.filename}.part"

    def attempt() -> OSError | None:
        try:
            _fetch(wheel.url, partial)
        except OSError as exc:  # urllib's errors included: DNS, resets, timeouts
            partial.unlink(missing_ok=True)
            return exc
        return None

    failed = retried(attempt, lambda exc: exc is not None, sleep=time.sleep)
    if failed is not None:
        raise WheelhouseError(f"{wheel.filename}: download failed: {failed}") from None
    if wheel.sha256 is not None and _sha256(partial) != wheel.sha256:
        partial.unlink(missing_ok=True)
        raise WheelhouseError(f"{wheel.filename}: sha256 differs from the index's: not kept")
    partial.replace(path)
    return True


def _host_stack(
    install: InstallOptions, target: Target, host_freeze: Path | None
) -> HostStack | None:
    """The host's packages a system-packages cell takes, from ``--host-packages``."""
    # Read whenever given: a file that is not there, or not a freeze, was ignored unsaid
    host = None if host_freeze is None else read_host_packages(host_freeze, target)
    if not install.system_packages:
        return None
    if host is None:
        raise WheelhouseError(
            "install.system-packages takes packages from the host: pass --host-packages "
            "FILE, the output of `python -m pip list --format=freeze` on that host"
        )
    stack = choose(host, install.system_packages)
    if stack.missing:
        names = ", ".join(repr(n) for n in stack.missing)
        raise WheelhouseError(
            f"install.system-packages names {names}; {host_freeze} has no such distribution"
        )
    return stack


def _manifest_contents(
    resolved: Sequence[CellWheels], wanted: Mapping[str, Wheel], folder: Path
) -> dict[str, Any]:
    """The manifest's cells (each with its wheels) and wheels (each with its hash and size)."""
    return {
        "cells": [
            {
                "label": need.cell.label,
                "id": need.cell.id,
                "pins": dict(need.cell.pins),
                "uninstallable": need.uninstallable,
                "from_host": list(need.from_host),
                "wheels": [w.filename for w in need.wheels],
            }
            for need in resolved
        ],
        "wheels": [
            {"file": w.filename, "sha256": w.sha256, "size": (folder / w.filename).stat().st_size}
            for w in sorted(wanted.values(), key=lambda w: w.filename)
        ],
    }


def build_wheelhouse(
    cells: Sequence[Cell],
    install: InstallOptions,
    env: Mapping[str, str],
    target: Target,
    folder: Path,
    *,
    limits: Limits | None = None,
    host_freeze: Path | None = None,
    describe: Mapping[str, Any] | None = None,
    log: Callable[[str], None] = print,
) -> Summary:
    """Resolve every cell for ``target``, then download the union of their wheels."""
    target.uv_platform  # noqa: B018 -- an unknown platform fails before anything runs
    _writable(folder)
    stack = _host_stack(install, target, host_freeze)
    resolved: list[CellWheels] = []
    uv_binary()  # located once before the threads: it reads sysconfig, not thread-safe
    with (
        tempfile.TemporaryDirectory(prefix="ftmatrix-wheelhouse-") as scratch,
        ThreadPoolExecutor(max_workers=RESOLVE_THREADS) as pool,
    ):
        # uv waits on the index most of the time: cells resolve side by side.
        answers = pool.map(
            lambda c: resolve_for_target(
                c, install, env, target, stack=stack, scratch=Path(scratch), limits=limits
            ),
            cells,
        )
        for number, need in enumerate(answers, start=1):
            resolved.append(need)
            prefix = f"[{number}/{len(cells)}] {need.cell.label}"
            if need.uninstallable:
                log(f"{prefix}: uninstallable, nothing to download: {need.uninstallable}")
                continue
            size = sum(w.size or 0 for w in need.wheels)
            host = f"; from the host: {', '.join(need.from_host)}" if need.from_host else ""
            log(f"{prefix}: {len(need.wheels)} wheels, {_megabytes(size)}{host}")
    wanted = {w.filename: w for need in resolved for w in need.wheels}
    log(f"downloading {len(wanted)} wheels into {folder}")
    with ThreadPoolExecutor(max_workers=DOWNLOAD_THREADS) as pool:
        fresh = sum(pool.map(lambda w: download(w, folder), wanted.values()))
    size = sum((folder / name).stat().st_size for name in wanted)
    manifest = {
        **(describe or {}),
        "python": target.python,
        "platform": target.platform,
        "host_packages": stack.versions() if stack else {},
        **_manifest_contents(resolved, wanted, folder),
    }
    write_atomically(folder / MANIFEST, json.dumps(manifest, indent=1) + "\n")
    return Summary(
        folder=folder,
        wheels=len(wanted),
        size=size,
        downloaded=fresh,
        cells=len(cells),
        skipped=tuple(n.cell.label for n in resolved if n.uninstallable),
    )


def summary_line(summary: Summary) -> str:
    """The closing line: how many wheels, how big, where the manifest is."""
    skipped = f", {len(summary.skipped)} uninstallable" if summary.skipped else ""
    return (
        f"wheelhouse {summary.folder}: {summary.wheels} wheels, {_megabytes(summary.size)} "
        f"({summary.downloaded} downloaded now) for {summary.cells} cells{skipped}; "
        f"manifest {summary.folder / MANIFEST}"
    )


def _best_wheel(package: Mapping[str, Any], tags: Sequence[Tag], target: Target) -> Wheel:
    rank = {tag: index for index, tag in enumerate(tags)}
    best: tuple[int, Mapping[str, Any]] | None = None
    for entry in package.get("wheels", []):
        url = str(entry.get("url") or "")
        if not url and entry.get("path"):  # a local find-links file
            url = Path(str(entry["path"])).resolve().as_uri()
        filename = entry.get("name") or urllib.parse.unquote(url.rsplit("/", 1)[-1])
        try:
            wheel_tags = parse_wheel_filename(filename)[3]
        except ValueError:
            continue
        score = min((rank[t] for t in wheel_tags if t in rank), default=None)
        if score is not None and (best is None or score < best[0]):
            best = (score, {**entry, "name": filename, "url": url})
    if best is None:
        raise WheelhouseError(
            f"{package['name']}=={package['version']} has no wheel for Python {target.python} "
            f"on {target.platform}"
        )
    entry = best[1]
    return Wheel(
        name=str(package["name"]),
        version=str(package["version"]),
        filename=str(entry["name"]),
        url=str(entry["url"]),
        sha256=(entry.get("hashes") or {}).get("sha256"),
        size=entry.get("size"),
    )


def _fetch(url: str, path: Path) -> None:
    if url.startswith("file://"):
        shutil.copyfile(urllib.request.url2pathname(urllib.parse.urlsplit(url).path), path)
        return
    with urllib.request.urlopen(url, timeout=120) as response, path.open("wb") as out:
        shutil.copyfileobj(response, out, 1 << 20)


def _writable(folder: Path) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".write-test-"):
            pass
    except OSError as exc:
        raise WheelhouseError(f"{folder}: not a writable folder: {exc.strerror or exc}") from None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _public(version: str) -> str:
    """The version without its local part: ``2.11.0+cu130`` is ``2.11.0`` on an index."""
    try:
        return Version(version).public
    except InvalidVersion:
        return version


def _public_lines(pins: str) -> str:
    """``name==version`` lines with public versions: an index has no ``+cu130`` builds."""
    lines = (line.partition("==") for line in pins.splitlines())
    return "".join(f"{name}=={_public(version)}\n" for name, _, version in lines)


def _megabytes(size: int) -> str:
    return f"{size / 1e6:.1f} MB"


def run_wheelhouse(args: Any, env: Mapping[str, str], *, root: Path, now: datetime) -> int:
    """``ftmatrix wheelhouse``: plan the matrix for the runner's Python, then gather the
    wheels of its cells."""
    if not re.fullmatch(r"3\.\d+", args.python):
        raise UsageError(f"--python {args.python!r}: expected a version such as 3.12")
    target = Target(python=args.python, platform=args.platform)
    target.uv_platform  # noqa: B018 -- an unknown platform is an error before any work
    # Cells with no python of their own run on the runner's, as they will there.
    matrix, cells = plan_for_python(env, root=root, now=now, python=args.python, select=args.select)
    print(
        f"{len(cells)} cells selected; resolving each for Python {args.python} on {args.platform}"
    )
    summary = build_wheelhouse(
        cells,
        matrix.install,
        env,
        target,
        Path(args.folder),
        limits=matrix.limits,
        host_freeze=Path(args.host_packages) if args.host_packages else None,
        describe={"matrix": matrix.source, "profile": matrix.profile},
    )
    print(summary_line(summary))
    return 0
