"""Where this ftmatrix came from, as a requirement another machine's pip can install.

``ftmatrix init`` writes the nightly that installs ftmatrix on the runners. ftmatrix is
not on PyPI yet, so ``ftmatrix==VERSION`` would fail an adopter's first night; the
requirement is taken from how this ftmatrix itself was installed, which pip and uv record
beside it (PEP 610, ``direct_url.json``): from git, the same repository at the same
commit; from a wheel or a folder, that file or folder (which only a runner that has it,
a self-hosted one, can install); from an index (no record), ``ftmatrix==VERSION``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, distribution
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from ftmatrix import __version__

PROJECT = "ftmatrix"


@dataclass(frozen=True, kw_only=True)
class InstallSource:
    """The requirement, and what a user should know about it (None: nothing)."""

    requirement: str
    note: str | None = None


def install_source(direct_url: Mapping[str, Any] | None, version: str) -> InstallSource:
    """The requirement for ``direct_url`` (the parsed ``direct_url.json``; None: installed
    from an index)."""
    url = direct_url.get("url") if direct_url else None
    if not isinstance(url, str) or not url:
        return InstallSource(requirement=f"{PROJECT}=={version}")
    assert direct_url is not None
    url = _without_userinfo(url)
    vcs = direct_url.get("vcs_info")
    subdirectory = direct_url.get("subdirectory")
    fragment = f"#subdirectory={subdirectory}" if isinstance(subdirectory, str) else ""
    if isinstance(vcs, Mapping):
        commit = vcs.get("commit_id") or vcs.get("requested_revision")
        at = f"@{commit}" if commit else ""
        return InstallSource(requirement=f"{PROJECT} @ {vcs.get('vcs', 'git')}+{url}{at}{fragment}")
    requirement = f"{PROJECT} @ {url}{fragment}"
    if url.startswith("file:"):
        what = "folder" if isinstance(direct_url.get("dir_info"), Mapping) else "file"
        return InstallSource(
            requirement=requirement,
            note=(
                f"ftmatrix was installed from a {what} on this machine: only a runner that has "
                "it there (a self-hosted one) can install it; for hosted runners set the "
                "nightly's `ftmatrix:` to a requirement they can install (a git URL, "
                f"'{PROJECT} @ git+https://...@COMMIT', or '{PROJECT}==VERSION' once released)"
            ),
        )
    return InstallSource(requirement=requirement)


def this_install_source() -> InstallSource:
    """The requirement for the ftmatrix running now, from its ``direct_url.json``."""
    try:
        text = distribution(PROJECT).read_text("direct_url.json")
    except PackageNotFoundError:
        text = None
    try:
        data = json.loads(text) if text else None
    except ValueError:
        data = None
    return install_source(data if isinstance(data, Mapping) else None, __version__)


def _without_userinfo(url: str) -> str:
    """``url`` with no user or password (the nightly is committed to the repository), but
    ssh's ``git@``, which is no secret (PEP 610 keeps it too)."""
    parts = urlsplit(url)
    if "@" not in parts.netloc or parts.netloc.startswith("git@"):
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))
