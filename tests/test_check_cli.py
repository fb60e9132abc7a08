"""``python -m ftmatrix check`` as a real process: results over HTTP, stdin, and bad input.

Each bad input is one line on stderr naming the input, exit 2, no traceback. Results
are served by a real http.server on 127.0.0.1 (published reports are https; check reads
http:// too, for servers like this one).
"""

from __future__ import annotations

import functools
import json
import os
import re
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from conftest import serving

ROOT = Path(__file__).parent.parent
RESULTS = ROOT / "tests" / "data" / "default_results.json"
FAILING_STACK = "torch==2.13.0+cpu\ntransformers==5.23.0\ntrl==1.16.0\npeft==0.17.1\n"


def ftmatrix(*args: str, stdin: str | None = None, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``python -m ftmatrix ARGS`` with this checkout's code."""
    return subprocess.run(
        [sys.executable, "-m", "ftmatrix", *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        timeout=120,
        check=False,
    )


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A folder served over HTTP: the real results, an HTML page, an older schema's results."""
    folder = tmp_path_factory.mktemp("served")
    (folder / "results.json").write_bytes(RESULTS.read_bytes())
    (folder / "index.html").write_text("<!DOCTYPE html>\n<html><body>a report</body></html>\n")
    old = json.loads(RESULTS.read_text())
    old["schema"] = 0
    (folder / "old.json").write_text(json.dumps(old))
    with serving(functools.partial(SimpleHTTPRequestHandler, directory=str(folder))) as url:
        yield url


@pytest.fixture(scope="module")
def served_tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """The real results over https, with a certificate of its own for 127.0.0.1."""
    folder = tmp_path_factory.mktemp("tls")
    (folder / "results.json").write_bytes(RESULTS.read_bytes())
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"]
        + ["-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1"]
        + ["-addext", "subjectAltName=IP:127.0.0.1"],
        check=True,
        capture_output=True,
    )
    handler = functools.partial(SimpleHTTPRequestHandler, directory=str(folder))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{server.server_address[1]}/results.json", cert
    finally:
        server.shutdown()
        server.server_close()


def one_line_usage_error(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout == ""
    assert "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    return done.stderr.rstrip("\n")


def test_results_from_a_url_and_the_stack_from_stdin(served: str, tmp_path: Path):
    done = ftmatrix(
        "check",
        "--freeze",
        "-",
        "--results",
        f"{served}/results.json",
        "--operation",
        "sft",
        stdin=FAILING_STACK,
        cwd=tmp_path,
    )
    assert done.returncode == 1, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("stack: <stdin> (pip freeze): peft 0.17.1, torch 2.13.0+cpu")
    assert (
        lines[1]
        == f"results: {served}/results.json: 421 records of 16 cells (run 20261123T200742Z)"
    )
    assert "https://github.com/huggingface/peft/issues/3333" in done.stdout


def test_results_over_https(served_tls: tuple[str, Path], tmp_path: Path):
    url, cert = served_tls
    args = ["check", "--freeze", "-", "--results", url, "--operation", "sft"]
    # Trusted (the client's CA file names the server's certificate): read, judged.
    done = subprocess.run(
        [sys.executable, "-m", "ftmatrix", *args],
        input=FAILING_STACK,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src"), "SSL_CERT_FILE": str(cert)},
        check=False,
    )
    assert done.returncode == 1, done.stderr
    assert f"results: {url}: 421 records of 16 cells" in done.stdout
    # Not trusted: one line, exit 2.
    error = one_line_usage_error(ftmatrix(*args, stdin=FAILING_STACK, cwd=tmp_path))
    assert error.startswith(
        f"ftmatrix: --results {url}: cannot be read: [SSL: CERTIFICATE_VERIFY_FAILED] "
        "certificate verify failed: self-signed certificate"
    )


def test_a_malformed_freeze_line(tmp_path: Path):
    (tmp_path / "freeze.txt").write_text("torch==2.13.0\ntrl>=1.0\n")
    done = ftmatrix("check", "--freeze", "freeze.txt", "--results", str(RESULTS), cwd=tmp_path)
    assert one_line_usage_error(done) == (
        "ftmatrix: freeze.txt:2: 'trl>=1.0' is not a pinned version (name==version, name @ URL, "
        "-e ..., or a # comment): a freeze names the one version installed"
    )


def test_a_freeze_that_includes_another_file_is_refused(tmp_path: Path):
    (tmp_path / "freeze.txt").write_text("torch==2.13.0\n-r more.txt\n")
    done = ftmatrix("check", "--freeze", "freeze.txt", "--results", str(RESULTS), cwd=tmp_path)
    assert one_line_usage_error(done).startswith(
        "ftmatrix: freeze.txt:2: '-r more.txt' names another file, which check does not follow"
    )


def test_what_a_freeze_leaves_out_is_said_and_a_bom_is_no_part_of_it(tmp_path: Path):
    # Saved by a Windows editor (a BOM), with an installer option line.
    (tmp_path / "freeze.txt").write_text(
        "\ufefftorch==2.13.0+cpu\n--index-url https://pypi.org/simple\n" + FAILING_STACK[18:],
        encoding="utf-8",
    )
    done = ftmatrix("check", "--freeze", "freeze.txt", "--results", str(RESULTS), cwd=tmp_path)
    assert "Traceback" not in done.stderr and done.returncode == 1, done.stderr
    assert "stack: freeze.txt (pip freeze): peft 0.17.1, torch 2.13.0+cpu," in done.stdout
    assert (
        "  note: freeze.txt:2: option line, left out: --index-url https://pypi.org/simple"
    ) in done.stdout


@pytest.mark.parametrize(
    ("path", "error"),
    [
        ("missing.json", "cannot be read: HTTP 404 File not found"),
        (
            "index.html",
            "not JSON (Expecting value at line 1 column 1); it starts '<!DOCTYPE html> <html><body>a report</bo'",
        ),
        ("old.json", "schema 0, written by an older ftmatrix; this ftmatrix reads schema 1"),
    ],
)
def test_results_url_that_is_not_a_report(served: str, tmp_path: Path, path: str, error: str):
    url = f"{served}/{path}"
    done = ftmatrix("check", "--freeze", "-", "--results", url, stdin=FAILING_STACK, cwd=tmp_path)
    assert one_line_usage_error(done) == f"ftmatrix: --results {url}: {error}"


@pytest.mark.parametrize(
    ("where", "error"),
    [
        ("https://127.0.0.1:9/results.json", "cannot be read: [Errno 111] Connection refused"),
        (
            "ftp://example.org/results.json",
            "only https:// and http:// URLs or a file path can be read",
        ),
        ("nowhere/results.json", "cannot be read: No such file or directory"),
    ],
)
def test_results_that_cannot_be_reached(tmp_path: Path, where: str, error: str):
    done = ftmatrix("check", "--freeze", "-", "--results", where, stdin=FAILING_STACK, cwd=tmp_path)
    assert one_line_usage_error(done) == f"ftmatrix: --results {where}: {error}"


def test_an_interpreter_that_cannot_be_run(tmp_path: Path):
    done = ftmatrix(
        "check", "--python", "/nonexistent/python", "--results", str(RESULTS), cwd=tmp_path
    )
    assert one_line_usage_error(done) == (
        "ftmatrix: --python /nonexistent/python: cannot be run: [Errno 2] No such file or "
        "directory: '/nonexistent/python'"
    )


def gone(pid: int) -> bool:
    """Whether process ``pid`` has ended (reaped, or a zombie no one has reaped yet)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state in ("Z", "X")


def test_an_interpreter_that_never_answers_is_killed_with_all_it_started(tmp_path: Path):
    """A --python that hangs (a wrapper whose child sleeps) is one line at the deadline,
    and what it started is killed with it, not left to PID 1."""
    from ftmatrix.check.stack import ask_interpreter
    from ftmatrix.errors import UsageError

    script = tmp_path / "hang.sh"
    script.write_text(f"#!/bin/sh\nsleep 1000 &\necho $! > {tmp_path / 'child'}\nwait\n")
    script.chmod(0o755)
    with pytest.raises(UsageError) as raised:
        ask_interpreter(str(script), timeout=2)
    child = int((tmp_path / "child").read_text())
    deadline = time.monotonic() + 10
    while not gone(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert gone(child), f"sleep {child} was left running"
    assert str(raised.value) == (
        f"--python {script}: cannot be run: asked for its installed packages, it did not "
        "answer within 2 s"
    )


# -- Real stacks: an interpreter, its `uv pip freeze`, its `trl env` ---------------------


@pytest.fixture(scope="module")
def failing_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv holding the stack of a failing cell of the default matrix (uv's cache)."""
    from ftmatrix.resolve import uv_binary

    venv = tmp_path_factory.mktemp("stack") / "venv"
    subprocess.run([uv_binary(), "venv", "-q", "-p", "3.11", str(venv)], check=True)
    links = [
        arg
        for link in os.environ.get("PIP_FIND_LINKS", "").split()
        for arg in ("--find-links", link)
    ]
    pins = ["torch==2.13.0", "transformers==5.23.0", "trl==1.16.0", "peft==0.17.1"]
    subprocess.run(
        [
            uv_binary(),
            "pip",
            "install",
            "-q",
            "--python",
            str(venv / "bin" / "python"),
            *links,
            *pins,
        ],
        check=True,
    )
    return venv


@pytest.mark.slow
def test_a_real_environment_read_three_ways(failing_venv: Path, tmp_path: Path):
    from ftmatrix.resolve import uv_binary

    python = failing_venv / "bin" / "python"
    sft = ["--results", str(RESULTS), "--operation", "sft"]
    verdict = (
        "sft on cpu: broken: cpu-py3.11-torch2.13.0-tf5.23.0-trl1.16.0-peft0.17.1-nounsloth "
        "(your versions) breaks: 8 fail"
    )
    # The interpreter, asked through importlib.metadata: named, and as the one running check.
    named = ftmatrix("check", "--python", str(python), *sft, cwd=tmp_path)
    running = subprocess.run(
        [str(python), "-m", "ftmatrix", "check", *sft],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        check=False,
    )
    for done in (named, running):
        assert done.returncode == 1, done.stderr
        # (the notes under the stack line say what it left out: its editable ftmatrix)
        lines = [x for x in done.stdout.splitlines() if not x.startswith("  note: ")]
        assert lines[0].startswith(f"stack: {python} (interpreter): peft 0.17.1, torch 2.13.0+cpu")
        assert lines[0].endswith("unsloth not installed; Python 3.11")
        assert lines[2] == "compared on: peft, torch, transformers, trl, unsloth, python"
        assert lines[4] == verdict
    # Its `uv pip freeze`.
    frozen = subprocess.run(
        [uv_binary(), "pip", "freeze", "--python", str(python)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "torch==2.13.0+cpu" in frozen.splitlines()
    (tmp_path / "freeze.txt").write_text(frozen)
    done = ftmatrix("check", "--freeze", "freeze.txt", *sft, cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert [x for x in done.stdout.splitlines() if not x.startswith("  note: ")][4] == verdict
    # Its `trl env`, piped in.
    printed = subprocess.run(
        [str(failing_venv / "bin" / "trl"), "env"], capture_output=True, text=True, check=True
    ).stdout
    assert "- PEFT version: 0.17.1" in printed
    done = ftmatrix("check", "--trl-env", "-", *sft, stdin=printed, cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    lines = [x for x in done.stdout.splitlines() if not x.startswith("  note: ")]
    assert (
        lines[2]
        == "compared on: peft, torch, transformers, trl, python; not named by your input: unsloth"
    )
    assert lines[4] == verdict


def docs_examples() -> list[tuple[str, str, int]]:
    """(command, output, exit code) of each console example of docs/guides/check.md."""
    page = (ROOT / "docs" / "guides" / "check.md").read_text()
    examples = []
    for block in re.findall(r"```console\n(.*?)```", page, re.DOTALL):
        command, rest = block.split("\n", 1)
        output, status = rest.split("$ echo $?\n")
        examples.append((command.removeprefix("$ "), output, int(status)))
    return examples


@pytest.mark.parametrize(("command", "output", "status"), docs_examples())
def test_the_docs_examples_print_what_they_show(command: str, output: str, status: int):
    done = subprocess.run(
        ["bash", "-c", command],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={
            **os.environ,
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
            "PYTHONPATH": str(ROOT / "src"),
        },
        check=False,
    )
    assert (done.stdout, done.returncode) == (output, status), done.stderr


def test_a_reader_that_goes_away_is_not_a_traceback(tmp_path: Path):
    """`ftmatrix check --json | head`: the pipe closes early; no traceback, exit 141."""
    process = subprocess.Popen(
        [sys.executable, "-m", "ftmatrix", "check", "--json", "--results", str(RESULTS)]
        + ["--freeze", "-"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )
    assert process.stdin is not None and process.stdout is not None
    assert process.stderr is not None
    process.stdout.close()  # the reader is gone before check writes (it waits for stdin)
    process.stdin.write(FAILING_STACK.encode())
    process.stdin.close()
    assert process.wait(timeout=120) == 141
    assert process.stderr.read().decode() == ""


# What a server that speaks no HTTP, or not to the end, sends (the path -> its bytes).
NOT_HTTP = {
    "/loop": b"HTTP/1.1 302 Found\r\nLocation: /loop\r\nContent-Length: 0\r\n\r\n",
    "/not-http": b"\x00\xff garbage\r\n\r\n",
    "/headers-without-end": b"HTTP/1.1 200 OK\r\n" + b"X-A: a\r\n" * 200 + b"\r\n",
    "/escapes": b"HTTP/1.1 500 boom\x1b[2J\x1b]0;owned\x07 down\r\nContent-Length: 0\r\n\r\n",
}


class HostileHandler(BaseHTTPRequestHandler):
    """A server that drips, sends too much, redirects to ftp://, or serves control codes."""

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        if self.path == "/slow-headers":
            # The status line, then a header a byte every half second: each read is quick,
            # so a timeout per read never fires (urllib's own).
            try:
                self.wfile.write(b"HTTP/1.1 200 OK\r\nX-Slow: ")
                for _ in range(1000):
                    self.wfile.write(b"x")
                    self.wfile.flush()
                    time.sleep(0.5)
            except OSError:
                return
        elif self.path == "/drip":
            self.send_response(200)
            self.send_header("Content-Length", "1000")
            self.end_headers()
            for _ in range(1000):  # a byte every half second: 500 s, each read quick
                try:
                    self.wfile.write(b" ")
                    self.wfile.flush()
                except OSError:
                    return
                time.sleep(0.5)
        elif self.path == "/huge":
            self.send_response(200)
            self.end_headers()
            block = b" " * (1 << 20)
            try:
                for _ in range(300):  # 300 MB of whitespace: valid JSON's lead-in, no end
                    self.wfile.write(block)
            except OSError:
                return
        elif self.path in NOT_HTTP:
            self.wfile.write(NOT_HTTP[self.path])
        elif self.path == "/to-ftp":
            self.send_response(302)
            self.send_header("Location", "ftp://127.0.0.1/results.json")
            self.end_headers()
        else:
            self.send_response(404)
            self.end_headers()


@pytest.fixture(scope="module")
def hostile() -> Iterator[str]:
    with serving(HostileHandler) as url:
        yield url


@pytest.mark.parametrize(
    ("path", "says"),
    [
        (
            "/drip",
            "not all of it came within 3 s (--timeout sets the limit for the whole download)",
        ),
        (
            "/slow-headers",
            "not all of it came within 3 s (--timeout sets the limit for the whole download)",
        ),
        ("/huge", "more than 200 MB; a results.json is far smaller"),
        ("/to-ftp", "redirected to 'ftp://127.0.0.1/results.json', which is not http(s)"),
        ("/loop", "HTTP 302 The HTTP server returned a redirect error that would lead to an"),
        ("/not-http", "cannot be read: BadStatusLine:"),
        ("/headers-without-end", "cannot be read: HTTPException: got more than 100 headers"),
        ("/escapes", "cannot be read: HTTP 500 boom [2J ]0;owned down"),
        ("[::1/x", "cannot be read: ValueError: Invalid IPv6 URL"),
    ],
)
def test_a_hostile_server_gets_one_line_and_no_more_time(
    hostile: str, path: str, says: str, tmp_path: Path
) -> None:
    url = f"http://{path}" if path.startswith("[") else f"{hostile}{path}"
    done = ftmatrix(
        "check", "--results", url, "--freeze", "-", "--timeout", "3",
        stdin="trl==1.16.0\n", cwd=tmp_path,
    )  # fmt: skip
    assert says in one_line_usage_error(done)


@pytest.mark.parametrize("path", ["/loop", "/not-http", "/headers-without-end", "/escapes"])
def test_restore_history_gets_one_line_from_a_server_that_is_no_http(
    hostile: str, path: str, tmp_path: Path
) -> None:
    done = ftmatrix(
        "restore-history", f"{hostile}{path}", "--out", str(tmp_path), "--timeout", "3",
        cwd=tmp_path,
    )  # fmt: skip
    assert "cannot be read: " in one_line_usage_error(done)


def test_control_characters_in_results_never_reach_the_terminal(tmp_path: Path) -> None:
    payload = json.loads(RESULTS.read_text())
    for group in payload.get("failure_groups") or []:
        if isinstance(group, dict) and isinstance(group.get("known_issue"), dict):
            group["known_issue"]["workaround"] = "upgrade\x1b[2J\x1b]0;owned\x07 now"
            group["blame"] = "peft\x1b[31m red"
    hostile_file = tmp_path / "results.json"
    hostile_file.write_text(json.dumps(payload))
    freeze = "transformers==5.23.0\npeft==0.17.1\ntrl==1.16.0\ntorch==2.13.0\n"
    done = ftmatrix(
        "check", "--results", str(hostile_file), "--freeze", "-", stdin=freeze, cwd=tmp_path
    )
    assert "\x1b" not in done.stdout + done.stderr
    assert "\\x1b[2J" in done.stdout


@pytest.mark.parametrize(
    "change",
    [
        {"status": 5},
        {"case": ["a"]},
        {"pins": "x"},
        {"metrics": []},
        {"hardware": 3},
        {"duration": "slow"},
        {"packages": [1, 2]},
        {"run_id": None},
    ],
)
def test_a_record_field_of_the_wrong_type_is_one_line(tmp_path: Path, change: dict) -> None:
    payload = json.loads(RESULTS.read_text())
    payload["records"][0].update(change)
    (tmp_path / "results.json").write_text(json.dumps(payload))
    done = ftmatrix("check", "--results", str(tmp_path / "results.json"), "--freeze", "-",
                    stdin="trl==1.16.0\n", cwd=tmp_path)  # fmt: skip
    assert "records[0]: " in one_line_usage_error(done)


def test_a_deeply_nested_results_file_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "results.json").write_text("[" * 200_000 + "]" * 200_000)
    done = ftmatrix("check", "--results", str(tmp_path / "results.json"), "--freeze", "-",
                    stdin="trl==1.16.0\n", cwd=tmp_path)  # fmt: skip
    assert "nested too deeply" in one_line_usage_error(done)


def test_the_environment_ftmatrix_runs_in_is_refused_with_what_to_run_instead():
    """A new user's first try: `ftmatrix check` (this Python, which holds ftmatrix and nox
    but no framework). Exit 2, one line naming the commands that check a training stack."""
    done = subprocess.run(
        [sys.executable, "-m", "ftmatrix", "check", "--results", str(RESULTS)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.splitlines()
    assert "none of the packages the results test is installed" in line
    assert "It looks like the environment ftmatrix runs in, not a training stack." in line
    assert "--python VENV/bin/python" in line and "--python .nox/CELL/bin/python" in line
    assert "uv pip freeze --python VENV/bin/python | ftmatrix check --freeze - ..." in line


def test_restore_history_keeps_its_timeout_when_the_headers_come_slowly(
    hostile: str, tmp_path: Path
) -> None:
    done = ftmatrix(
        "restore-history", f"{hostile}/slow-headers", "--timeout", "3", "--out", str(tmp_path),
        cwd=tmp_path,
    )  # fmt: skip
    assert "not all of it came within 3 s" in one_line_usage_error(done)


@pytest.mark.parametrize("command", ["check", "restore-history"])
@pytest.mark.parametrize("timeout", ["nan", "-1", "0", "inf", "1e9", "soon"])
def test_a_timeout_that_is_no_number_of_seconds_is_bad_input(
    command: str, timeout: str, tmp_path: Path
) -> None:
    args = ["--results", "r.json", "--freeze", "-"] if command == "check" else ["r.json"]
    done = ftmatrix(command, *args, "--timeout", timeout, stdin="trl==1.16.0\n", cwd=tmp_path)
    assert one_line_usage_error(done) == (
        f"ftmatrix: --timeout {timeout!r}: must be a number of seconds > 0 and at most 86,400"
    )
