"""The host's own packages in a cell: a preinstalled torch/CUDA stack, taken as installed.

Hosts that ship their own torch (NGC containers, clusters without internet) set
``install.system-packages``: ``true`` (every distribution the host has) or names and globs
(``[torch, triton, 'nvidia-*']``). The host is the interpreter in FTMATRIX_HOST_PYTHON, else
the one running ftmatrix. The distributions named are *fixed*: the cell uses them at the
host's versions, and a pin or requirement they do not meet makes the cell ``uninstallable``
(with the host's version named), never a download. The host's other distributions are
*preferred*: used where they fit, replaced in the cell's venv where they do not (an older
transformers for a seed cell), as pip would with ``--system-site-packages``.

- The resolver sees every host distribution as a metadata-only wheel (a "stub", in a
  find-links folder of its own, so no index or network is needed for them), the fixed ones
  pinned by constraints, and all at the host's versions as uv's preferences (an existing
  output file);
- the install leaves out what resolved to the host's version. uv counts as installed only
  what a venv holds itself, even with ``--system-site-packages`` (astral-sh/uv#7358, #4466:
  it would download torch again); a ``.pth`` in the cell's venv appends the host's site
  folders to ``sys.path`` instead. ``--system-site-packages`` would show the base
  interpreter's folder, which for a host that is itself a venv (``/opt/torch/.venv``) is the
  wrong one. What the cell installs comes first on ``sys.path`` and shadows the host's copy;
- records list them (the results plugin reads every distribution on ``sys.path``) and name
  what came from the host (``host_packages``).
"""

from __future__ import annotations

import base64
import fnmatch
import functools
import hashlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from ftmatrix.cell.status import Status
from ftmatrix.config import InstallOptions
from ftmatrix.errors import HostError as HostError  # noqa: PLC0414 -- a re-export
from ftmatrix.plan import Cell

HOST_PYTHON_VARIABLE = "FTMATRIX_HOST_PYTHON"
PTH_NAME = "_ftmatrix_host_site.pth"
KEY = "install.system-packages"

# Run by the host interpreter: its version, its site folders in sys.path order, and every
# distribution it would import (the first of a name on sys.path, as imports do).
_PROBE = r"""
import json, sys
from importlib import metadata
dirs = [p for p in sys.path if p.rstrip("/").endswith(("site-packages", "dist-packages"))]
seen, dists = set(), []
for dist in metadata.distributions():
    name = dist.metadata["Name"]
    if not name:
        continue
    key = name.lower().replace("_", "-").replace(".", "-")
    if key in seen:
        continue
    seen.add(key)
    dists.append([name, dist.version, dist.read_text("METADATA") or dist.read_text("PKG-INFO")])
print(json.dumps({"python": sys.executable, "version": "%d.%d" % sys.version_info[:2],
                  "site": list(dict.fromkeys(dirs)), "dists": dists}))
"""


@dataclass(frozen=True, kw_only=True)
class HostDistribution:
    """One distribution installed on the host."""

    name: str
    version: str
    metadata: str


@dataclass(frozen=True, kw_only=True)
class Host:
    """What the host interpreter has: its version, site folders and distributions."""

    python: str
    version: str
    site_dirs: tuple[str, ...]
    distributions: tuple[HostDistribution, ...]


@dataclass(frozen=True, kw_only=True)
class HostStack:
    """The host's distributions as a cell takes them: ``provided`` (fixed, by
    ``system-packages``) and every other one preferred where it fits."""

    host: Host
    provided: tuple[HostDistribution, ...]
    missing: tuple[str, ...] = ()

    def versions(self) -> dict[str, str]:
        """name -> installed version of what the host provides (the fixed ones)."""
        return {d.name: d.version for d in self.provided}

    def constraints(self) -> str:
        """uv constraints pinning each provided distribution to its installed version."""
        return "".join(f"{d.name}=={d.version}\n" for d in self.provided)

    def preferences(self) -> str:
        """The host's other distributions at their versions: uv's preferences (an existing
        lock). The fixed ones are constrained instead: a preference is exact, a constraint
        ``==2.13.0`` lets an index's ``2.13.0+cpu`` count as the host's ``2.13.0``."""
        fixed = {canonicalize_name(d.name) for d in self.provided}
        return "".join(
            f"{d.name}=={d.version}\n"
            for d in self.host.distributions
            if canonicalize_name(d.name) not in fixed
        )

    def refusal(self, cell: Cell) -> tuple[Status, str] | None:
        """Why the cell cannot use this host as it stands, before asking the resolver."""
        where = f"the host ({self.host.python})"
        if self.missing:
            names = ", ".join(repr(n) for n in self.missing)
            return Status.INSTALL_ERROR, f"{KEY} names {names}; {where} has no such distribution"
        if _minor(cell.python) != self.host.version:
            return Status.UNINSTALLABLE, (
                f"{KEY}: the cell's Python {cell.python} is not "
                f"{where}'s Python {self.host.version}"
            )
        have = {canonicalize_name(d.name): d for d in self.provided}
        for package, version in cell.pins:
            dist = have.get(canonicalize_name(package))
            if dist is None:
                continue
            if version is None:
                return Status.UNINSTALLABLE, (
                    f"{package}: none is pinned, but {KEY} takes {package} from {where}, "
                    f"which has {dist.version}"
                )
            if not _pin_matches(version, dist.version):
                return Status.UNINSTALLABLE, (
                    f"{package}=={version} is pinned, but {KEY} takes {package} from {where}, "
                    f"which has {dist.version}"
                )
        return None

    def resolver_args(self, folder: Path) -> list[str]:
        """uv arguments that resolve against the host: its stubs and the constraints.

        The folder is named by a hash of the host's distributions and the fixed ones, so
        the paths in these arguments (part of the resolution cache key) change with any
        version. Preferences go in the output file (:meth:`preferences`), not here.
        """
        material = [
            [[d.name, d.version, d.metadata] for d in self.host.distributions],
            [d.name for d in self.provided],
        ]
        digest = hashlib.sha256(json.dumps(material).encode()).hexdigest()[:16]
        place = folder / digest
        if not (place / "constraints.txt").exists():
            _write_stubs(self.host.distributions, self.constraints(), place)
        return [
            "--constraint",
            str(place / "constraints.txt"),
            "--find-links",
            str(place / "stubs"),
        ]

    def strip(self, lock: str) -> str:
        """The lock without what resolved to the host's version: what the venv installs."""
        host = {canonicalize_name(d.name): d.version for d in self.host.distributions}
        kept = []
        for line in lock.splitlines():
            requirement = line.split("#", 1)[0].strip()
            name, _, version = requirement.partition("==")
            installed = host.get(canonicalize_name(name.strip()))
            if (
                requirement
                and not requirement.startswith("-")
                and installed is not None
                and same_version(installed, version.strip())
            ):
                continue
            kept.append(line)
        return "\n".join(kept) + "\n"

    def visible(self, installed: Sequence[str]) -> dict[str, str]:
        """name -> version of the host's distributions the cell imports: all but those it
        installs itself (from ``installed``, the ``name==version`` lines it synced)."""
        own = {canonicalize_name(line.split("==", 1)[0]) for line in installed}
        return {
            d.name: d.version
            for d in self.host.distributions
            if canonicalize_name(d.name) not in own
        }


def host_note(stack: HostStack, explanation: str) -> str:
    """A line for the resolver's explanation naming the host's versions it mentions."""
    text = explanation.lower().replace("_", "-")
    named = [
        d
        for d in stack.provided
        if re.search(rf"(?<![\w.-]){re.escape(canonicalize_name(d.name))}(?![\w-])", text)
    ]
    if not named:
        return ""
    versions = ", ".join(f"{d.name} {d.version}" for d in named)
    return f"\n{KEY}: the host ({stack.host.python}) has {versions}"


def host_python(env: Mapping[str, str]) -> str:
    """The host interpreter: FTMATRIX_HOST_PYTHON, else the one running ftmatrix."""
    return env.get(HOST_PYTHON_VARIABLE) or sys.executable


def venv_interpreter(install: InstallOptions, env: Mapping[str, str], python: str) -> str:
    """What a cell's venv is made from: the host interpreter when it takes the host's
    packages (their compiled code needs the same Python build), else ``python``."""
    return host_python(env) if install.system_packages else python


def host_stack(install: InstallOptions, env: Mapping[str, str]) -> HostStack | None:
    """The host distributions ``install.system-packages`` chooses (None when it is off).

    HostError when the host interpreter cannot be run.
    """
    if not install.system_packages:
        return None
    return choose(probe_host(host_python(env)), install.system_packages)


def choose(host: Host, patterns: Sequence[str]) -> HostStack:
    """The host's distributions that match ``patterns`` (names or globs, any spelling)."""
    wanted = [canonicalize_name(p) if not _is_glob(p) else p.lower() for p in patterns]
    provided = [
        d
        for d in host.distributions
        if any(fnmatch.fnmatchcase(canonicalize_name(d.name), w) for w in wanted)
    ]
    names = {canonicalize_name(d.name) for d in host.distributions}
    missing = [
        p for p, w in zip(patterns, wanted, strict=True) if not _is_glob(p) and w not in names
    ]
    return HostStack(host=host, provided=tuple(provided), missing=tuple(missing))


@functools.cache
def probe_host(python: str) -> Host:
    """Ask the interpreter ``python`` what it has installed (once per process)."""
    try:
        done = subprocess.run(
            [python, "-I", "-c", _PROBE], capture_output=True, text=True, check=False, timeout=120
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise HostError(f"{KEY}: cannot run the host python {python!r}: {exc}") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise HostError(f"{KEY}: the host python {python!r} failed: {last}")
    return host_from_snapshot(json.loads(done.stdout))


def host_from_snapshot(data: Mapping[str, Any]) -> Host:
    """A host from its snapshot: what ``python -m ftmatrix.system_packages`` prints there."""
    return Host(
        python=str(data["python"]),
        version=str(data["version"]),
        site_dirs=tuple(data["site"]),
        distributions=tuple(
            HostDistribution(name=name, version=version, metadata=text or "")
            for name, version, text in data["dists"]
        ),
    )


def main() -> None:
    """Print this interpreter's snapshot (JSON): run it on an offline host, then give it
    to ``ftmatrix wheelhouse --host-packages`` on a networked machine."""
    exec(compile(_PROBE, "<ftmatrix host probe>", "exec"), {"__name__": "probe"})


if __name__ == "__main__":
    main()


def link_host_site(venv_python: Path, stack: HostStack | None) -> None:
    """Make the venv import the host's site folders after its own (or stop, for None).

    A reused venv may have been made for a cell that took the host's packages: the
    ``.pth`` goes when the matrix no longer asks for them.
    """
    if stack is None:
        for old in venv_python.parent.parent.glob(f"lib/python*/site-packages/{PTH_NAME}"):
            old.unlink(missing_ok=True)
        return
    purelib = subprocess.run(
        [str(venv_python), "-I", "-c", "import sysconfig;print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    own = Path(purelib).resolve()
    dirs = [d for d in stack.host.site_dirs if Path(d).resolve() != own]
    (Path(purelib) / PTH_NAME).write_text("".join(f"{d}\n" for d in dirs), encoding="utf-8")


def _write_stubs(dists: Sequence[HostDistribution], constraints: str, place: Path) -> None:
    """Metadata-only wheels of ``dists`` and the constraints, written atomically."""
    place.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=place.parent, prefix=".stubs-"))
    (staging / "stubs").mkdir()
    for dist in dists:
        if dist.metadata and _valid(dist.version):  # uv would refuse the folder otherwise
            _write_stub(dist, staging / "stubs")
    (staging / "constraints.txt").write_text(constraints, encoding="utf-8")
    try:
        staging.rename(place)
    except OSError:  # another process wrote the same stubs first: theirs are equal
        shutil.rmtree(staging, ignore_errors=True)


def _write_stub(dist: HostDistribution, folder: Path) -> None:
    """A wheel holding only the host's METADATA: enough for uv to resolve, never installed."""
    name = canonicalize_name(dist.name).replace("-", "_")
    info = f"{name}-{dist.version}.dist-info"
    files = {
        f"{info}/METADATA": dist.metadata.encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: ftmatrix-host-stub\n"
        b"Root-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    files[f"{info}/RECORD"] = ("\n".join(record) + f"\n{info}/RECORD,,\n").encode()
    with zipfile.ZipFile(folder / f"{name}-{dist.version}-py3-none-any.whl", "w") as wheel:
        for path, data in files.items():
            wheel.writestr(path, data)


def same_version(one: str, other: str) -> bool:
    """Equal as PEP 440 versions (uv prints ``2023.1`` for an installed ``2023.01``)."""
    try:
        return Version(one) == Version(other)
    except InvalidVersion:
        return one == other


def _pin_matches(pin: str, installed: str) -> bool:
    """Does the host's version satisfy the pin? ``2.13.0`` accepts ``2.13.0+cpu``."""
    try:
        return Version(installed) in SpecifierSet(f"=={pin}")
    except InvalidVersion:
        return pin == installed


def _valid(version: str) -> bool:
    try:
        Version(version)
    except InvalidVersion:
        return False
    return True


def _minor(python: str) -> str:
    return ".".join(python.split(".")[:2])


def _is_glob(pattern: str) -> bool:
    return any(c in pattern for c in "*?[")
