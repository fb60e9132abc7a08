"""Fatal errors: one table of kinds and exit codes, one message each, no traceback."""

from __future__ import annotations

import ast
import http.server
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import ftmatrix
from ftmatrix.cli import main
from ftmatrix.config import InstallOptions
from ftmatrix.errors import FATAL_ERRORS, ExitCode, FatalError, exit_code_table_markdown
from ftmatrix.index import list_releases

ROOT = Path(__file__).parent.parent
PACKAGE = Path(ftmatrix.__file__).parent
EXIT_CODES_PAGE = (ROOT / "docs" / "reference" / "exit-codes.md").read_text()
DATA = Path(__file__).parent / "data"


def test_every_error_class_of_the_package_is_in_the_table():
    defined = {
        (path.name, node.name)
        for path in PACKAGE.rglob("*.py")
        if "templates" not in path.relative_to(PACKAGE).parts  # init's example cases: not ours
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef) and node.name.endswith("Error")
    }
    assert defined == {("errors.py", kind.__name__) for kind in (FatalError, *FATAL_ERRORS)}
    codes = [kind.return_code for kind in FATAL_ERRORS]
    assert len(set(codes)) == len(codes), "two kinds share an exit code"
    assert not {ExitCode.OK, ExitCode.FAILED} & set(codes)
    assert set(ExitCode) == {ExitCode.OK, ExitCode.FAILED, *codes}


def test_the_docs_show_the_exit_code_table():
    assert exit_code_table_markdown() in EXIT_CODES_PAGE


def test_the_docs_example_of_an_unreachable_index_is_real_output(tmp_path: Path):
    block = re.search(
        r"```console\n\$ (FTMATRIX_MATRIX=\S+) nox -s plan\n(.*?)```", EXIT_CODES_PAGE, re.S
    )
    assert block, "docs/reference/exit-codes.md must show nox -s plan on an unreachable index"
    variable, value = block.group(1).split("=")
    ran = subprocess.run(
        [sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py"), "-s", "plan"],
        env={**os.environ, variable: str(ROOT / value), "FTMATRIX_OUT": str(tmp_path)},
        capture_output=True,
        text=True,
        check=False,
    )
    shown = ran.stderr + f"$ echo $?\n{ran.returncode}\n"
    assert ran.stdout == ""
    assert shown == block.group(2)


def test_a_settings_error_is_one_line_and_its_own_code(capsys: pytest.CaptureFixture[str]):
    env = {"FTMATRIX_MATRIX": str(DATA / "small_matrix.yaml"), "FTMATRIX_SHARD": "5/4"}
    assert main(["plan", "--no-resolve"], env=env) == ExitCode.SETTINGS
    err = capsys.readouterr().err
    assert err == (
        "ftmatrix: FTMATRIX_SHARD='5/4': expected I/N with 1 <= I <= N and N at most 10,000, "
        "such as '1/4'\n"
    )


class _Index(http.server.BaseHTTPRequestHandler):
    """An index that answers 500 for 'broken', and a page that is no index for 'garbled'."""

    def do_GET(self) -> None:
        if "/broken/" in self.path:
            self.send_error(500)
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/vnd.pypi.simple.v1+json")
        self.end_headers()
        self.wfile.write(b"<html>a captive portal</html>")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def index_url() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Index)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/simple"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize(
    ("package", "why"),
    [
        ("broken", "HTTP 500 for {url}/broken/"),
        ("garbled", "its page for garbled is not a simple-API JSON page"),
    ],
)
def test_an_index_that_answers_badly_is_one_message_naming_it(
    index_url: str, package: str, why: str
):
    with pytest.raises(FatalError) as caught:
        list_releases(package, InstallOptions(), {"PIP_INDEX_URL": index_url})
    assert caught.value.return_code == ExitCode.INDEX
    assert caught.value.describe() == (
        f"ftmatrix: package index {index_url} (set by PIP_INDEX_URL) cannot be read: "
        f"{why.format(url=index_url)} (listing the releases of {package})"
    )
