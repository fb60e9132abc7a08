"""What a package index offers: the released versions of a package, with upload times,
and what a release declares it requires.

Reads the simple repository API in its JSON form (PEP 691, with upload times per
PEP 700) from the configured index and extra indexes, and wheel and sdist file
names from find-links folders, so a wheelhouse counts as an index. A release's
``Requires-Dist`` comes from a find-links wheel, the index's core metadata (PEP 658), or
the remote wheel's METADATA read by HTTP range requests.
"""

from __future__ import annotations

import base64
import io
import json
import re
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from email.message import Message
from email.parser import HeaderParser
from pathlib import Path
from typing import Any

from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import Version

from ftmatrix.config import InstallOptions
from ftmatrix.download import HttpStatus, NotFound, fetch_bytes
from ftmatrix.errors import PackageIndexError, UsageError

DEFAULT_INDEX = "https://pypi.org/simple"
# Where the primary index comes from when matrix.yaml names none, first found wins (as uv).
PRIMARY_VARIABLES = ("UV_INDEX_URL", "UV_DEFAULT_INDEX", "PIP_INDEX_URL")
EXTRA_VARIABLES = ("UV_EXTRA_INDEX_URL", "PIP_EXTRA_INDEX_URL")
JSON_ACCEPT = "application/vnd.pypi.simple.v1+json"
# The whole of one page of an index: PyPI sends torch's (every file of every release) in seconds.
PAGE_SECONDS = 300


@dataclass(frozen=True, kw_only=True)
class Release:
    """One version of a package and when its first file was uploaded (None: unknown)."""

    version: Version
    uploaded: datetime | None
    yanked: bool = False


def list_releases(
    package: str,
    install: InstallOptions,
    env: Mapping[str, str],
    *,
    exclude_newer: datetime | None = None,
) -> list[Release]:
    """Every non-yanked release of ``package`` on the configured indexes, oldest first."""
    found: dict[Version, Release] = {}
    for url, origin in configured_indexes(install, env):
        try:
            from_index = _from_index(url, package)
        except _Unreadable as exc:
            raise PackageIndexError(
                f"package index {url} ({origin}) cannot be read: {exc} "
                f"(listing the releases of {package})"
            ) from exc
        for release in from_index:
            _keep(found, release)
    for folder in find_links(install, env):
        for release in _from_folder(Path(folder), package):
            _keep(found, release)
    releases = [r for r in found.values() if not r.yanked]
    if exclude_newer is not None:
        releases = [r for r in releases if r.uploaded is None or r.uploaded <= exclude_newer]
    return sorted(releases, key=lambda r: r.version)


def index_urls(install: InstallOptions, env: Mapping[str, str]) -> list[str]:
    """The primary index (matrix.yaml, then UV_/PIP_ variables, then PyPI) and the extras."""
    return [url for url, _ in configured_indexes(install, env)]


# Variables that keep uv (and pip) off every index: an offline host reads its wheelhouse
# folders (find-links) and its own packages only, and so must ftmatrix.
NO_INDEX_VARIABLES = ("UV_OFFLINE", "PIP_NO_INDEX")  # uv 0.13 has no UV_NO_INDEX


def switched_on(env: Mapping[str, str], name: str) -> bool:
    """Is the on/off variable ``name`` on (``1``, ``true``, ``yes``, ``on``, any case)?"""
    return env.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


def index_disabled(env: Mapping[str, str]) -> bool:
    """Does a variable turn every index off (``UV_OFFLINE=1``)?"""
    return any(switched_on(env, name) for name in NO_INDEX_VARIABLES)


def configured_indexes(install: InstallOptions, env: Mapping[str, str]) -> list[tuple[str, str]]:
    """Each index URL with what chose it (a matrix key, a variable), for error messages;
    none where a variable turns the indexes off."""
    if index_disabled(env):
        return []
    primary = next(
        (
            (url, origin)
            for url, origin in (
                (install.index_url, "set by install.index-url"),
                *((env.get(name), f"set by {name}") for name in PRIMARY_VARIABLES),
            )
            if url
        ),
        (DEFAULT_INDEX, "the default index"),
    )
    extras = [
        *((url, "set by install.extra-index-urls") for url in install.extra_index_urls),
        *((url, f"set by {name}") for name in EXTRA_VARIABLES for url in env.get(name, "").split()),
    ]
    found: dict[str, str] = {}
    for url, origin in [primary, *extras]:
        found.setdefault(url, origin)
    return list(found.items())


def find_links(install: InstallOptions, env: Mapping[str, str]) -> list[str]:
    """Local wheelhouse folders: matrix.yaml's find-links, then UV_/PIP_FIND_LINKS."""
    links = [
        *install.find_links,
        *env.get("UV_FIND_LINKS", "").replace(",", " ").split(),
        *env.get("PIP_FIND_LINKS", "").split(),
    ]
    return [link for link in dict.fromkeys(links) if Path(link).is_dir()]


def _from_index(url: str, package: str) -> list[Release]:
    name = canonicalize_name(package)
    body, content_type = _fetch(f"{url.rstrip('/')}/{name}/", JSON_ACCEPT)
    if body is None:
        return []
    if JSON_ACCEPT in content_type:
        files = [
            (f["filename"], f.get("upload-time"), bool(f.get("yanked")))
            for f in _json_files(body, name)
        ]
    else:
        # PEP 503 HTML: names and yanked marks, no upload times.
        files = [
            (m.group("name"), None, "data-yanked" in m.group("attrs"))
            for m in _ANCHOR.finditer(body.decode("utf-8", "replace"))
        ]
        if urllib.parse.urlsplit(url).hostname == PYPI_HOST:
            files = _with_pypi_upload_times(name, files)
    releases = []
    for filename, uploaded, yanked in files:
        version = _version_of(filename, name)
        if version is not None:
            releases.append(Release(version=version, uploaded=_parse_time(uploaded), yanked=yanked))
    return releases


_ANCHOR = re.compile(r"<a(?P<attrs>[^>]*)>(?P<name>[^<]+)</a>", re.IGNORECASE)
PYPI_HOST = "pypi.org"


class _Unreadable(Exception):
    """A page of an index that could not be read; list_releases names the index."""


def _fetch(url: str, accept: str) -> tuple[bytes | None, str]:
    """A page of the index (None where there is none: 404), read as any published file is
    (ftmatrix.download): a whole deadline and a size limit, so a server that drips its
    page or sends gigabytes ends the plan with a line, not a hang or the machine's memory."""
    try:
        bare, headers = _with_credentials(url, {"Accept": accept})
    except ValueError as exc:  # a URL urllib cannot take apart ("http://[::1/x", a bad port)
        raise _Unreadable(f"{url}: not a URL that can be read ({exc})") from exc
    try:
        body, answered = fetch_bytes(
            bare, bare, timeout=PAGE_SECONDS, kind="an index page", headers=headers,
            limit="the limit for one page of an index",
        )  # fmt: skip
        return body, answered.get("Content-Type", "")
    except NotFound:
        return None, ""
    except HttpStatus as exc:  # the status urllib read, not one read back from words
        raise _Unreadable(f"HTTP {exc.status} for {url}") from exc
    except UsageError as exc:  # a dropped connection, a timeout, no HTTP, a URL that is no URL
        raise _Unreadable(str(exc).removeprefix(f"{bare}: cannot be read: ")) from exc


def _with_credentials(url: str, headers: dict[str, str]) -> tuple[str, dict[str, str]]:
    """``https://user:pass@host/...`` as uv and pip take it: the URL without its userinfo
    and the credentials as HTTP basic authentication (urllib would fail on the URL)."""
    parts = urllib.parse.urlsplit(url)
    if parts.username is None:
        return url, headers
    user = urllib.parse.unquote(parts.username)
    password = urllib.parse.unquote(parts.password or "")
    token = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
    netloc = parts.hostname or ""
    if ":" in netloc:  # an IPv6 address
        netloc = f"[{netloc}]"
    if parts.port is not None:
        netloc += f":{parts.port}"
    bare = urllib.parse.urlunsplit(parts._replace(netloc=netloc))
    return bare, {**headers, "Authorization": f"Basic {token}"}


def _with_pypi_upload_times(
    name: str, files: list[tuple[str, str | None, bool]]
) -> list[tuple[str, str | None, bool]]:
    """Upload times from PyPI's JSON API, for a simple page that only speaks HTML."""
    body, _ = _fetch(f"https://{PYPI_HOST}/pypi/{name}/json", "application/json")
    if body is None:
        return files
    try:
        times = {
            f["filename"]: f.get("upload_time_iso_8601")
            for release in json.loads(body).get("releases", {}).values()
            for f in release
        }
        for uploaded in times.values():
            _parse_time(uploaded)
    except (ValueError, AttributeError, TypeError, KeyError) as exc:
        raise _Unreadable(f"PyPI's JSON page for {name} cannot be read") from exc
    return [(filename, times.get(filename), yanked) for filename, _, yanked in files]


def _json_files(body: bytes, name: str) -> list[dict[str, Any]]:
    """The files of a simple-API JSON page (PEP 691), each checked for what is read of it:
    a page that is not one is unreadable, never a traceback further on."""
    unreadable = _Unreadable(f"its page for {name} is not a simple-API JSON page")
    try:
        page = json.loads(body)
    except ValueError as exc:
        raise unreadable from exc
    files = page.get("files", []) if isinstance(page, dict) else None
    if not isinstance(files, list) or not all(_a_file(f) for f in files):
        raise unreadable
    return files


def _a_file(entry: object) -> bool:
    """Is ``entry`` a file of a simple-API JSON page, as far as it is read here?"""
    if not isinstance(entry, dict) or not isinstance(entry.get("filename"), str):
        return False
    if not isinstance(entry.get("url", ""), str):
        return False
    if type(entry.get("size", 0)) not in (int, type(None)):
        return False
    uploaded = entry.get("upload-time")
    if uploaded is None:
        return True
    try:
        return isinstance(uploaded, str) and _parse_time(uploaded) is not None
    except ValueError:
        return False


def _parse_time(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text.replace("Z", "+00:00")) if text else None


def _from_folder(folder: Path, package: str) -> list[Release]:
    wanted = canonicalize_name(package)
    releases = []
    for path in folder.iterdir():
        version = _version_of(path.name, wanted)
        if version is not None:
            releases.append(Release(version=version, uploaded=None))
    return releases


def _version_of(filename: str, wanted: str | None = None) -> Version | None:
    try:
        if filename.endswith(".whl"):
            name, version, _, _ = parse_wheel_filename(filename)
        elif filename.endswith((".tar.gz", ".zip")):
            name, version = parse_sdist_filename(filename)
        else:
            return None
    except (InvalidWheelFilename, InvalidSdistFilename):
        return None
    if wanted is not None and canonicalize_name(name) != wanted:
        return None
    return version


def _keep(found: dict[Version, Release], release: Release) -> None:
    """One entry per version: the earliest upload, yanked only if every file is."""
    current = found.get(release.version)
    if current is None:
        found[release.version] = release
        return
    times = [t for t in (current.uploaded, release.uploaded) if t is not None]
    found[release.version] = Release(
        version=release.version,
        uploaded=min(times) if times else None,
        yanked=current.yanked and release.yanked,
    )


def requires_dist(
    package: str, version: str, install: InstallOptions, env: Mapping[str, str]
) -> tuple[str, ...] | None:
    """``package==version``'s declared requirements, from a find-links wheel or the index's
    core metadata (PEP 658); None when neither has them (the plan then probes nothing)."""
    name = canonicalize_name(package)
    wanted = Version(version)
    for folder in find_links(install, env):
        for path in sorted(Path(folder).glob("*.whl")):
            try:
                wheel_name, wheel_version, _, _ = parse_wheel_filename(path.name)
            except ValueError:
                continue
            if wheel_name == name and Version(wheel_version.public) == wanted:
                return _wheel_requires(path)
    for url in index_urls(install, env):
        try:
            found = _index_requires(url, name, wanted)
        except (PackageIndexError, _Unreadable):
            continue  # an index that cannot say (unreadable, no JSON page of files): the next
        if found is not None:
            return found
    return None


def _wheel_requires(path: Path | io.RawIOBase) -> tuple[str, ...] | None:
    with zipfile.ZipFile(path) as wheel:
        metadata = next((n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")), None)
        if metadata is None:
            return None
        return _parse_requires(wheel.read(metadata).decode("utf-8", "replace"))


def _index_requires(url: str, name: str, wanted: Version) -> tuple[str, ...] | None:
    page = f"{url.rstrip('/')}/{name}/"
    body, content_type = _fetch(page, JSON_ACCEPT)
    if body is None or JSON_ACCEPT not in content_type:
        return None
    wheels = []
    for entry in _json_files(body, name):
        filename = entry["filename"]
        try:
            _, file_version, _, _ = parse_wheel_filename(filename)
        except ValueError:
            continue
        if Version(file_version.public) == wanted:
            wheels.append(entry)
    for entry in wheels:
        if (entry.get("core-metadata") or entry.get("data-dist-info-metadata")) and entry.get(
            "url"
        ):
            metadata, _ = _fetch(urllib.parse.urljoin(page, entry["url"]) + ".metadata", "*/*")
            if metadata is not None:
                return _parse_requires(metadata.decode("utf-8", "replace"))
    # Older uploads have no PEP 658 metadata: the wheel's METADATA is read from the zip
    # with HTTP range requests (its end, the central directory, one member), as pip does.
    for entry in sorted(wheels, key=lambda e: e.get("size") or 0):
        if not entry.get("url"):
            continue
        try:
            with _RangeFile(urllib.parse.urljoin(page, entry["url"])) as remote:
                return _wheel_requires(remote)
        except (OSError, ValueError, zipfile.BadZipFile):
            continue
    return None


class _RangeFile(io.RawIOBase):
    """A remote file, read in blocks by HTTP range requests (enough for zipfile)."""

    BLOCK = 256 * 1024

    def __init__(self, url: str) -> None:
        super().__init__()
        self.url = url
        self.position = 0
        self.blocks: dict[int, bytes] = {}
        _, answered = _read_remote(url, method="HEAD")
        self.size = int(answered.get("Content-Length") or "x")  # ValueError: none

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.position, io.SEEK_END: self.size}[whence]
        self.position = max(0, base + offset)
        return self.position

    def read(self, size: int = -1) -> bytes:
        end = self.size if size is None or size < 0 else min(self.size, self.position + size)
        chunks = []
        while self.position < end:
            index = self.position // self.BLOCK
            block = self._block(index)
            start = self.position - index * self.BLOCK
            piece = block[start : start + end - self.position]
            if not piece:
                break
            chunks.append(piece)
            self.position += len(piece)
        return b"".join(chunks)

    def _block(self, index: int) -> bytes:
        if index not in self.blocks:
            first = index * self.BLOCK
            last = min(self.size, first + self.BLOCK) - 1
            block, answered = _read_remote(self.url, headers={"Range": f"bytes={first}-{last}"})
            if not str(answered.get("Content-Range") or "").startswith("bytes "):
                raise OSError(f"{self.url}: no range requests")
            self.blocks[index] = block
        return self.blocks[index]


def _read_remote(url: str, **how: Any) -> tuple[bytes, Message]:
    """A part of a wheel (``how``: the method, the headers), read as a page is; OSError
    where it cannot be (its caller tries the next wheel)."""
    try:
        return fetch_bytes(
            url, url, timeout=PAGE_SECONDS, kind="a part of a wheel",
            limit="the limit for one read of a wheel", **how,
        )  # fmt: skip
    except UsageError as exc:
        raise OSError(str(exc)) from exc


def _parse_requires(metadata: str) -> tuple[str, ...]:
    headers = HeaderParser().parsestr(metadata)
    return tuple(headers.get_all("Requires-Dist") or ())
