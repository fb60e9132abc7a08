"""ftmatrix's own index client reads the indexes uv reads, private ones too.

A real HTTP server on 127.0.0.1 that asks for basic authentication, as a private index
(Artifactory, a devpi, a GitLab registry) does: an index URL with ``user:pass@`` works with
uv and pip, and once failed in ftmatrix (urllib does not take credentials from a URL).
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import time
import zipfile
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from conftest import serving

from ftmatrix import download
from ftmatrix import index as index_module
from ftmatrix.cli import main
from ftmatrix.config import InstallOptions
from ftmatrix.errors import ExitCode, PackageIndexError
from ftmatrix.index import JSON_ACCEPT, list_releases, requires_dist

USER, PASSWORD = "reader", "p@ss:word"
PAGE = (
    b"<!DOCTYPE html><html><body>"
    b'<a href="six-1.16.0-py2.py3-none-any.whl">six-1.16.0-py2.py3-none-any.whl</a>'
    b'<a href="six-1.17.0-py2.py3-none-any.whl">six-1.17.0-py2.py3-none-any.whl</a>'
    b"</body></html>"
)


class PrivateIndex(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        expected = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
        if self.headers.get("Authorization") != expected:
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="index"')
            self.end_headers()
            return
        if self.path != "/simple/six/":
            self.send_response(404)
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(PAGE)))
        self.end_headers()
        self.wfile.write(PAGE)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def index() -> Iterator[str]:
    with serving(PrivateIndex) as url:
        yield url.removeprefix("http://")


def test_an_index_url_with_credentials_is_read_as_uv_reads_it(index: str) -> None:
    quoted = PASSWORD.replace("@", "%40").replace(":", "%3A")
    install = InstallOptions(index_url=f"http://{USER}:{quoted}@{index}/simple")
    releases = list_releases("six", install, {})
    assert [str(r.version) for r in releases] == ["1.16.0", "1.17.0"]


def test_without_them_the_index_says_so_and_no_password_is_shown(index: str) -> None:
    with pytest.raises(PackageIndexError, match=r"HTTP 401"):
        list_releases("six", InstallOptions(index_url=f"http://{index}/simple"), {})
    wrong = InstallOptions(index_url=f"http://{USER}:wrong-secret@{index}/simple")
    with pytest.raises(PackageIndexError) as caught:
        list_releases("six", wrong, {})
    assert "wrong-secret" not in caught.value.describe()


class StatusIndex(BaseHTTPRequestHandler):
    """An index that answers every page with the server's ``status`` and ``reason``."""

    def do_GET(self) -> None:
        self.send_response(self.server.status, self.server.reason)  # type: ignore[attr-defined]
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.parametrize(
    "reason",
    [
        "",  # no reason phrase at all: the status read back from words was lost
        "Slow Down 429",
        "HTTP 404 Not Found",
    ],
)
def test_an_index_error_names_the_status_the_server_sent_whatever_its_words(
    reason: str,
) -> None:
    with serving(StatusIndex, status=503, reason=reason) as url:
        install = InstallOptions(index_url=f"{url}/simple")
        with pytest.raises(PackageIndexError) as caught:
            list_releases("six", install, {})
    assert caught.value.describe() == (
        f"ftmatrix: package index {url}/simple (set by install.index-url) cannot be read: "
        f"HTTP 503 for {url}/simple/six/ (listing the releases of six)"
    )


@pytest.mark.parametrize(
    "url", ["http://[::1/simple", "http://u:secret-pw@host:99999/simple"]
)  # fmt: skip
def test_an_index_url_urllib_cannot_take_apart_is_one_line(url: str) -> None:
    """A ValueError of urllib's (a broken IPv6 host, a port out of range) was a traceback."""
    with pytest.raises(PackageIndexError, match="not a URL that can be read") as caught:
        list_releases("six", InstallOptions(index_url=url), {})
    assert "secret-pw" not in caught.value.describe()


class HostileIndex(BaseHTTPRequestHandler):
    """An index that sends its page a byte at a time (a day's worth, in life), or without
    end."""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.end_headers()
        try:
            if self.path.startswith("/drip/"):
                for _ in range(50):  # 10 s, each read quick: a timeout per read never fires
                    self.wfile.write(b" ")
                    self.wfile.flush()
                    time.sleep(0.2)
            else:
                while True:
                    self.wfile.write(b" " * (1 << 16))
        except OSError:
            return

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def hostile_index() -> Iterator[str]:
    with serving(HostileIndex) as url:
        yield url


@pytest.mark.parametrize(
    ("path", "says"),
    [
        ("/drip", "not all of it came within 2 s (the limit for one page of an index)"),
        ("/endless", "more than 1 MB; an index page is far smaller, so this is not one"),
    ],
)
def test_an_index_that_drips_or_never_ends_is_one_line_of_plan(
    hostile_index: str, path: str, says: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Read with a time limit per read and no size limit, such a page held `plan` for
    hours, or took the machine's memory. Limits made small here, to be met in seconds."""
    monkeypatch.setattr(index_module, "PAGE_SECONDS", 2)
    monkeypatch.setattr(download, "MAX_BYTES", 1_000_000)
    (tmp_path / "matrix.yaml").write_text(
        f'packages:\n  six: {{latest: 2}}\ninstall: {{index-url: "{hostile_index}{path}"}}\n'
    )
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(
            ["plan", "--no-resolve"], {"FTMATRIX_OUT": str(tmp_path / "out")}, root=tmp_path
        )
    assert code == ExitCode.INDEX, err.getvalue()
    (line,) = err.getvalue().splitlines()
    assert line.startswith(f"ftmatrix: package index {hostile_index}{path} (set by install.")
    assert says in line


def _tiny_wheel() -> bytes:
    """A wheel of one METADATA file: what a range-read of an older upload looks for."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as wheel:
        wheel.writestr(
            "tiny-1.0.dist-info/METADATA",
            "Metadata-Version: 2.1\nName: tiny\nVersion: 1.0\nRequires-Dist: six<2\n",
        )
    return buffer.getvalue()


WHEEL = _tiny_wheel()
SIMPLE_JSON = json.dumps(
    {"files": [{"filename": "tiny-1.0-py3-none-any.whl", "url": "tiny-1.0-py3-none-any.whl"}]}
).encode()


class RangeIndex(BaseHTTPRequestHandler):
    """A JSON simple index whose wheel (no PEP 658 metadata) is read by HTTP range
    requests; under /drip/ each range is sent a byte at a time."""

    def do_HEAD(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(WHEEL)))
        self.end_headers()

    def do_GET(self) -> None:
        if self.path.endswith("/tiny/"):
            self.send_response(200)
            self.send_header("Content-Type", JSON_ACCEPT)
            self.end_headers()
            self.wfile.write(SIMPLE_JSON)
            return
        first, last = (int(x) for x in self.headers["Range"].split("=")[1].split("-"))
        part = WHEEL[first : last + 1]
        self.send_response(206)
        self.send_header("Content-Range", f"bytes {first}-{last}/{len(WHEEL)}")
        self.end_headers()
        try:
            for byte in part if self.path.startswith("/drip/") else [part]:
                self.wfile.write(bytes([byte]) if isinstance(byte, int) else byte)
                self.wfile.flush()
                if isinstance(byte, int):
                    time.sleep(0.2)
        except OSError:
            return

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.parametrize(("path", "found"), [("", ("six<2",)), ("/drip", None)])
def test_a_wheel_read_by_range_requests_gives_its_requirements_or_none_in_time(
    path: str, found: tuple[str, ...] | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A range that drips is given up at the page's time limit: the caps are then not
    known from that index (the plan goes on), never a plan that waits for ever."""
    monkeypatch.setattr(index_module, "PAGE_SECONDS", 2)
    with serving(RangeIndex) as base:
        url = f"{base}{path}/simple"
        assert requires_dist("tiny", "1.0", InstallOptions(index_url=url), {}) == found


class OddJsonIndex(BaseHTTPRequestHandler):
    """A simple-API JSON index whose page is the body the test puts on the server."""

    def do_GET(self) -> None:
        body = self.server.page  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Type", JSON_ACCEPT)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


A_WHEEL_NAME = "six-1.17.0-py2.py3-none-any.whl"


@pytest.mark.parametrize(
    "page",
    [
        [1, 2],
        {"files": 5},
        {"files": [5]},
        {"files": [{"filename": 5}]},
        {"files": [{"filename": A_WHEEL_NAME, "upload-time": "yesterday"}]},
        {"files": [{"filename": A_WHEEL_NAME, "upload-time": 1764230400}]},
        {"files": [{"filename": A_WHEEL_NAME, "url": 7}]},
        {"files": [{"filename": A_WHEEL_NAME, "size": "big"}]},
    ],
)
def test_a_json_page_that_is_no_simple_api_page_is_one_line(page: object) -> None:
    """A TypeError, KeyError or ValueError from deep in the listing was a traceback: the
    page is checked once, for everything that is read of it."""
    with serving(OddJsonIndex, page=json.dumps(page).encode()) as url:
        install = InstallOptions(index_url=f"{url}/simple")
        with pytest.raises(PackageIndexError, match="is not a simple-API JSON page"):
            list_releases("six", install, {})
        assert requires_dist("six", "1.17.0", install, {}) is None  # the index cannot say
