"""The stack to check: what a ``pip freeze``, a ``trl env`` or an interpreter says is installed.

:func:`parse_freeze` and :func:`parse_trl_env` are pure (text in, :class:`Stack` out);
:func:`ask_interpreter` is the one edge that runs something. A line that cannot be read
is a :class:`~ftmatrix.errors.UsageError` naming the input, the line and its text.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion

from ftmatrix.errors import UsageError, one_line
from ftmatrix.versions import parse_version, shown, too_long

FREEZE_FORMAT = "name==version, name @ URL, -e ..., or a # comment"


@dataclass(frozen=True, kw_only=True)
class Stack:
    """What one input says is installed, by canonical distribution name.

    ``complete``: the input lists everything installed (a freeze, an interpreter), so a
    name it does not list is not installed. ``trl env`` names a fixed set of packages:
    any other (unsloth) is unknown, never assumed absent.
    """

    source: str
    kind: str  # "freeze", "trl-env" or "interpreter"
    packages: Mapping[str, str] = field(default_factory=dict)
    absent: frozenset[str] = frozenset()
    unversioned: Mapping[str, str] = field(default_factory=dict)  # name -> why no version
    complete: bool = True
    python: str | None = None  # "3.11"; None where the input does not say
    notes: tuple[str, ...] = ()  # lines left out, and why

    def knows(self, name: str) -> bool:
        """Does the input say whether ``name`` is installed, and at which version?"""
        name = canonicalize_name(name)
        if name in self.unversioned:
            return False
        return name in self.packages or name in self.absent or self.complete

    def version(self, name: str) -> str | None:
        """The installed version of ``name``; None: not installed (or not known: see knows)."""
        return self.packages.get(canonicalize_name(name))

    def to_dict(self) -> dict[str, object]:
        return {
            "source": self.source,
            "kind": self.kind,
            "python": self.python,
            "packages": dict(sorted(self.packages.items())),
            "absent": sorted(self.absent),
            "unversioned": dict(sorted(self.unversioned.items())),
            "complete": self.complete,
            "notes": list(self.notes),
        }


def _refuse_included_file(line: str, at: str) -> None:
    """``-r other.txt`` / ``-c other.txt``: pins check would silently not see."""
    if re.match(r"^(-r|-c|--requirement|--constraint)(\s|=|$)", line):
        raise UsageError(
            f"{at}: {line!r} names another file, which check does not follow: check the "
            "stack as installed (`pip freeze` prints every package) or list the other "
            "file's pins here"
        )


def parse_freeze(text: str, *, source: str) -> Stack:
    """``pip freeze`` / ``uv pip freeze`` (or ``pip list --format=freeze``) output.

    Usable: ``name==version`` (``===`` too) and ``name @ URL`` where the URL names a wheel
    or sdist file (its file name carries the version). Kept as installed at an unknown
    version: ``name @ URL`` of anything else (a git URL), ``-e ...#egg=name``. Left out,
    with a note: comments, other ``-e`` lines (uv writes ``-e file:///path``), option
    lines (``-i``, ``--find-links``). Anything else (a range, a bare name) is not a freeze.
    """
    packages: dict[str, str] = {}
    unversioned: dict[str, str] = {}
    where: dict[str, int] = {}
    notes: list[str] = []
    text = text.removeprefix("\ufeff")  # a BOM (Windows editors) is no part of line 1
    for number, raw in enumerate(text.splitlines(), start=1):
        line = re.sub(r"(^|\s+)#.*$", "", raw).strip()
        if not line:
            continue
        at = f"{source}:{number}"
        _refuse_included_file(line, at)
        if line.startswith("-e ") or line.startswith("--editable"):
            egg = re.search(r"[#&]egg=([A-Za-z0-9][A-Za-z0-9._-]*)", line)
            if egg:
                unversioned[canonicalize_name(egg.group(1))] = f"editable ({at})"
            else:
                notes.append(f"{at}: editable install without a name or version, left out: {line}")
            continue
        if line.startswith("-"):
            notes.append(f"{at}: option line, left out: {line}")
            continue
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            hint = (
                " (it reads like `trl env` output: use --trl-env)" if _TRL_ENV.search(text) else ""
            )
            raise UsageError(
                f"{at}: {line!r} is not a freeze line ({FREEZE_FORMAT}){hint}"
            ) from None
        name = canonicalize_name(requirement.name)
        if name in where:
            raise UsageError(
                f"{at}: {line!r}: {requirement.name} is listed twice (also at line {where[name]})"
            )
        where[name] = number
        if requirement.url:
            version = _version_from_url(requirement.url, name)
            if version is None:
                unversioned[name] = f"installed from {requirement.url} ({at})"
            else:
                packages[name] = version
            continue
        pins = list(requirement.specifier)
        if len(pins) != 1 or pins[0].operator not in ("==", "===") or "*" in pins[0].version:
            raise UsageError(
                f"{at}: {line!r} is not a pinned version ({FREEZE_FORMAT}): "
                "a freeze names the one version installed"
            )
        packages[name] = _checked_version(pins[0].version, at, line)
    return Stack(
        source=source,
        kind="freeze",
        packages=packages,
        unversioned=unversioned,
        notes=tuple(notes),
    )


# `trl env` says "- PyTorch version: 2.13.0"; these labels are not distribution names.
TRL_ENV_NAMES = {"pytorch": "torch", "hf hub": "huggingface-hub"}
_TRL_ENV_LINE = re.compile(r"^- (?P<label>[^:]+?) version: (?P<value>.*)$")
_TRL_ENV = re.compile(r"^- TRL version: ", re.MULTILINE)


def parse_trl_env(text: str, *, source: str) -> Stack:
    """What ``trl env`` prints ("- Transformers version: 5.23.0", "- PEFT version: not
    installed", "- TRL version: 1.16.0+abc1234" from a git checkout).

    It names a fixed set of packages (torch, transformers, trl, peft, accelerate,
    datasets, ...); any other package is unknown to it, so the stack is not complete.
    """
    packages: dict[str, str] = {}
    absent: set[str] = set()
    python = None
    notes: list[str] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        found = _TRL_ENV_LINE.match(raw.strip())
        if not found:
            continue
        at = f"{source}:{number}"
        label, value = found.group("label").strip(), found.group("value").strip()
        if label == "Python":
            python = _python_series(value, at)
            continue
        name = canonicalize_name(TRL_ENV_NAMES.get(label.lower(), label.replace(" ", "-")))
        if value == "not installed":
            absent.add(name)
        else:
            packages[name] = _checked_version(value, at, raw.strip())
    if "trl" not in packages:
        raise UsageError(
            f"{source}: no '- TRL version: ...' line: not the output of `trl env` "
            "(for `pip freeze` output use --freeze)"
        )
    accelerators = re.search(r"^- accelerator\(s\): (.*)$", text, re.MULTILINE)
    if accelerators:
        notes.append(f"{source}: accelerator(s): {accelerators.group(1).strip()}")
    return Stack(
        source=source,
        kind="trl-env",
        packages=packages,
        absent=frozenset(absent),
        complete=False,
        python=python,
        notes=tuple(notes),
    )


# Run by the interpreter asked: the first distribution of a name on sys.path wins, as
# an import would find it.
_ASK = """\
import json, sys
from importlib.metadata import distributions
found = {}
for dist in distributions():
    name = dist.metadata["Name"]
    if name and name not in found:
        found[name] = dist.version
print(json.dumps({"python": "%d.%d" % sys.version_info[:2], "packages": found}))
"""


def ask_interpreter(python: str, *, option: str = "--python", timeout: float = 120) -> Stack:
    """What ``python`` (a path or a command) has installed, read by importlib.metadata there."""
    what = f"{option} {one_line(python)}"
    done = _run_alone([python, "-c", _ASK], what, timeout=timeout)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise UsageError(f"{what}: exited with {done.returncode}: {last}")
    try:
        answer = json.loads(done.stdout)
        packages: dict[str, str] = {
            canonicalize_name(k): str(v) for k, v in answer["packages"].items()
        }
        series = str(answer["python"])
    except (ValueError, KeyError, TypeError, AttributeError):
        raise UsageError(f"{what}: did not answer as a Python interpreter does") from None
    return Stack(source=one_line(python), kind="interpreter", packages=packages, python=series)


def _run_alone(argv: list[str], what: str, *, timeout: float) -> subprocess.CompletedProcess[str]:
    """``argv`` run in a session of its own: at ``timeout`` its whole process group is
    killed, so nothing it started (a wrapper script's ``sleep``) is left running. An error
    names the interpreter, never the script it was given (dozens of lines of ours)."""
    try:
        process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
    except OSError as exc:
        raise UsageError(f"{what}: cannot be run: {exc}") from None
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        raise UsageError(
            f"{what}: cannot be run: asked for its installed packages, it did not answer "
            f"within {timeout:g} s"
        ) from None
    return subprocess.CompletedProcess(argv, process.returncode, stdout, stderr)


def _version_from_url(url: str, name: str) -> str | None:
    """The version in a wheel's or sdist's file name at the end of ``url``, if it is one."""
    filename = unquote(urlsplit(url).path.rsplit("/", 1)[-1])
    try:
        if filename.endswith(".whl"):
            named, version, *_ = parse_wheel_filename(filename)
        else:
            named, version = parse_sdist_filename(filename)
    except (InvalidWheelFilename, InvalidSdistFilename, InvalidVersion):
        return None
    return str(version) if named == name else None


def _checked_version(text: str, at: str, line: str) -> str:
    try:
        parse_version(text)
    except InvalidVersion:
        raise UsageError(
            f"{at}: {shown(line)}: {shown(text)} is not a version{too_long(text)}"
        ) from None
    return text


def _python_series(text: str, at: str) -> str:
    try:
        version = parse_version(text)
    except InvalidVersion:
        raise UsageError(f"{at}: Python version {shown(text)} is not a version") from None
    return f"{version.major}.{version.minor}"
