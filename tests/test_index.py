"""ftmatrix's own index client reads the indexes uv reads, private ones too.

A real HTTP server on 127.0.0.1 that asks for basic authentication, as a private index
(Artifactory, a devpi, a GitLab registry) does: an index URL with ``user:pass@`` works with
uv and pip, and once failed in ftmatrix (urllib does not take credentials from a URL).
"""

from __future__ import annotations

import base64
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ftmatrix.config import InstallOptions
from ftmatrix.errors import PackageIndexError
from ftmatrix.index import list_releases

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
    server = ThreadingHTTPServer(("127.0.0.1", 0), PrivateIndex)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


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
