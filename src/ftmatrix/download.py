"""Reading a published file over HTTP(S) without trusting the server.

``ftmatrix check --results URL`` and ``ftmatrix restore-history URL`` read what a web
server sends: one deadline for the whole download (a server that drips a byte at a time is
cut off), a size limit, redirects to http(s) only, and every failure one UsageError line.
"""

from __future__ import annotations

import http.client
import math
import re
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from email.message import Message
from typing import Any

from ftmatrix.errors import UsageError
from ftmatrix.user_files import read_user_text

# The most read from a URL: the default matrix's results.json is 1.7 MB, a year of a large
# nightly's results or history a few tens; past this it is not a file of ours.
MAX_BYTES = 200_000_000
CHUNK = 1 << 16


# The longest --timeout: a day. NaN, an infinity or 0 would wait for ever (or not at all).
MAX_TIMEOUT = 24 * 3600


def download_timeout(value: str | float, option: str = "--timeout") -> float:
    """``value`` (the option's text) as seconds for a whole download, or a UsageError."""
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not 0 < seconds <= MAX_TIMEOUT:
        raise UsageError(
            f"{option} {value!r}: must be a number of seconds > 0 and at most {MAX_TIMEOUT:,}"
        )
    return seconds


# What sets a download's time limit, as its error says.
TIMEOUT_OPTION = "--timeout sets the limit for the whole download"


class NotFound(UsageError):
    """The server answered 404: nothing is published there (yet)."""


class HttpStatus(UsageError):
    """The server answered another HTTP error status: ``status``, as urllib read it (a
    caller takes it from here, never from the message, whose reason phrase is the
    server's words)."""

    def __init__(self, message: str, *, status: int) -> None:
        super().__init__(message)
        self.status = status


class _HttpOnlyRedirects(urllib.request.HTTPRedirectHandler):
    """Redirects are followed to http(s) URLs only (urllib would follow ftp:// too)."""

    def redirect_request(  # noqa: PLR0917 -- urllib calls it with these positionals
        self, req: Any, fp: Any, code: int, msg: str, headers: Any, newurl: str
    ) -> Any:
        if not re.match(r"^https?://", newurl, re.IGNORECASE):
            raise urllib.error.URLError(f"redirected to {newurl!r}, which is not http(s)")
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def fetch_text(url: str, what: str, *, timeout: float, kind: str) -> str:
    """The UTF-8 body of ``url``; ``what`` starts every error, ``kind`` names the file
    expected ("a results.json"). ``timeout`` seconds in all, at most MAX_BYTES."""
    body, _ = fetch_bytes(url, what, timeout=timeout, kind=kind)
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"{what}: not UTF-8 text, so not {kind}") from None


def fetch_bytes(
    url: str,
    what: str,
    *,
    timeout: float,
    kind: str,
    headers: Mapping[str, str] | None = None,
    limit: str = TIMEOUT_OPTION,
    method: str = "GET",
) -> tuple[bytes, Message]:
    """The body of ``url`` and its response's headers: ``timeout`` seconds in all, at most
    MAX_BYTES, or a UsageError (:class:`NotFound` for HTTP 404) that starts with ``what``.
    ``limit`` says what sets the time limit.

    The whole exchange (connecting, the headers, the body) runs in a thread of its own
    that is left behind at the deadline: urllib's timeout bounds each socket read, so a
    server that sends its headers a byte at a time would hold it for ever.
    """
    outcome: list[tuple[bytes, Message] | BaseException] = []

    def fetch() -> None:
        try:
            outcome.append(
                _fetch(
                    url,
                    what,
                    timeout=timeout,
                    kind=kind,
                    headers=headers,
                    limit=limit,
                    method=method,
                )
            )
        except BaseException as exc:  # handed to the caller's thread, raised there
            outcome.append(exc)

    worker = threading.Thread(target=fetch, name="ftmatrix-download", daemon=True)
    worker.start()
    worker.join(timeout)
    if not outcome:
        raise UsageError(
            f"{what}: cannot be read: not all of it came within {timeout:g} s ({limit})"
        )
    if isinstance(outcome[0], BaseException):
        raise outcome[0]
    return outcome[0]


def _fetch(
    url: str,
    what: str,
    *,
    timeout: float,
    kind: str,
    headers: Mapping[str, str] | None,
    limit: str,
    method: str,
) -> tuple[bytes, Message]:
    opener = urllib.request.build_opener(_HttpOnlyRedirects)
    deadline = time.monotonic() + timeout
    chunks: list[bytes] = []
    size = 0
    try:
        request = urllib.request.Request(
            url, headers={"User-Agent": "ftmatrix", **(headers or {})}, method=method
        )
        with opener.open(request, timeout=timeout) as response:
            answered = response.headers
            while True:
                if time.monotonic() > deadline:
                    raise UsageError(
                        f"{what}: cannot be read: not all of it came within {timeout:g} s ({limit})"
                    )
                chunk = response.read1(CHUNK)
                if not chunk:
                    break
                size += len(chunk)
                if size > MAX_BYTES:
                    raise UsageError(
                        f"{what}: more than {MAX_BYTES // 1_000_000} MB; {kind} is far "
                        "smaller, so this is not one"
                    )
                chunks.append(chunk)
    except urllib.error.HTTPError as exc:
        said = f"{what}: cannot be read: {_one_line(f'HTTP {exc.code} {exc.reason}')}"
        if exc.code == 404:
            raise NotFound(said) from None
        raise HttpStatus(said, status=exc.code) from None
    except urllib.error.URLError as exc:
        raise UsageError(f"{what}: cannot be read: {_one_line(exc.reason)}") from None
    except (TimeoutError, OSError) as exc:
        raise UsageError(f"{what}: cannot be read: {_one_line(exc or 'timed out')}") from None
    except (http.client.HTTPException, ValueError) as exc:
        # Not HTTP (a status line of garbage, headers without end) or no URL urllib takes
        # (a port out of range, a broken IPv6 address).
        said = _one_line(f"{type(exc).__name__}: {exc}")
        raise UsageError(f"{what}: cannot be read: {said}") from None
    return b"".join(chunks), answered


def _one_line(text: object, limit: int = 300) -> str:
    """``text`` (a server's words among them) as one printable line, at most ``limit``
    characters: no control character of the server's reaches the terminal."""
    printable = "".join(c if c.isprintable() else " " for c in str(text))
    line = " ".join(printable.split())
    return line if len(line) <= limit else line[:limit] + "..."


def read_text(source: str, what: str, *, timeout: float, kind: str) -> str:
    """The UTF-8 text of ``source``: an http(s) URL (:func:`fetch_text`) or a file path
    (at most MAX_BYTES too; a named pipe or a device refused, a pipe of the shell's read:
    :mod:`ftmatrix.user_files`).

        Any other scheme (``ftp://``, ``file://``, ...) is refused by name rather than read
        as a path. :class:`NotFound` where nothing is there (HTTP 404, no such file).
    """
    if re.match(r"^https?://", source):
        return fetch_text(source, what, timeout=timeout, kind=kind)
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", source):
        raise UsageError(f"{what}: only https:// and http:// URLs or a file path can be read")
    try:
        # A file has the URL's limit; a named pipe or a device is refused (user_files).
        return read_user_text(source, what, limit=MAX_BYTES, kind=kind)
    except FileNotFoundError as exc:
        raise NotFound(f"{what}: cannot be read: {exc.strerror or exc}") from None
    except OSError as exc:
        raise UsageError(f"{what}: cannot be read: {exc.strerror or exc}") from None
