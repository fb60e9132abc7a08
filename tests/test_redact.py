"""Nothing secret reaches a published file or the console: every channel, masked by value.

Fast tier: the patterns, and a hypothesis property over every string field of a record
through the real writer, history and report. Slow tier: a real cell whose cases put
secrets in a parametrize id, a not_applicable() reason, a metric, a URL's userinfo and
token-shaped literals, with its console output checked too.
"""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from conftest import make_record
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ftmatrix.cell.records import CellRecordFile, record_path
from ftmatrix.cell.redact import redact_text
from ftmatrix.cell.status import Status
from ftmatrix.errors import PackageIndexError
from ftmatrix.report.render import render_report
from ftmatrix.store import merge_outputs

ROOT = Path(__file__).parent.parent
DATA = Path(__file__).parent / "data"

SECRET = "s3cr3t-Value-9f8e7d"
GITHUB = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
HUGGING_FACE = "hf_" + "aBcDeFgHiJkLmNoPqRsTuVwXyZ012345"
AWS = "AKIA" + "IOSFODNN7EXAMPLE"
OPENAI = "sk-proj-" + "abcdefghijklmnopqrstuvwxyz012345"


@pytest.mark.parametrize(
    ("text", "masked", "kept"),
    [
        (
            "connect postgres://admin:pw1234@db/x failed",
            "admin:pw1234",
            "postgres://<redacted>@db/x",
        ),
        (f"https://x-access-token:{GITHUB}@github.com/o/r", GITHUB, "@github.com/o/r"),
        (f"token {HUGGING_FACE} refused", HUGGING_FACE, "token <redacted> refused"),
        (f"key {AWS} here", AWS, "key <redacted> here"),
        (f"OPENAI {OPENAI}", OPENAI, "OPENAI <redacted>"),
        (
            "WANDB_API_KEY=0123456789abcdef0123456789abcdef01234567",
            "0123456789abcdef",
            "<redacted>",
        ),
        (f"with {SECRET} inside", SECRET, "<redacted:MY_TOKEN>"),
    ],
)
def test_each_kind_of_secret_is_masked(text: str, masked: str, kept: str) -> None:
    out = redact_text(text, {"MY_TOKEN": SECRET, "PATH": "/usr/bin"})
    assert masked not in out
    assert kept in out


def test_what_is_not_secret_stays() -> None:
    text = "see https://github.com/huggingface/peft/issues/3333 at 0123456789abcdef0123456789abcdef01234567"
    assert redact_text(text, {"HOME": "/root", "SHORT_TOKEN": "1"}) == text


def test_an_index_url_password_never_reaches_an_error_message() -> None:
    error = PackageIndexError("index http://user:hunter2pass@127.0.0.1:9/simple is unreachable")
    assert "hunter2pass" not in error.describe()
    assert "http://<redacted>@127.0.0.1:9/simple" in error.describe()


SECRETS = st.sampled_from(
    [SECRET, f"postgres://admin:{SECRET}@db/x", GITHUB, HUGGING_FACE, AWS, OPENAI]
)
FIELDS = st.sampled_from(["case", "reason", "message", "traceback", "metric value", "metric name"])


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    secret=SECRETS,
    field=FIELDS,
    before=st.text(max_size=20),
    after=st.text(max_size=20),
)
def test_no_published_file_holds_a_secret_put_in_any_field(
    tmp_path_factory: pytest.TempPathFactory, secret: str, field: str, before: str, after: str
) -> None:
    out = tmp_path_factory.mktemp("out")
    text = f"{before}{secret}{after}"
    values: dict = {"status": Status.FAIL, "message": "m", "traceback": "t"}
    if field == "case":
        values["case"] = f"test_x.py::test_x[{text}]"
    elif field == "metric value":
        values["metrics"] = {"loss": 1.0, "url": text}
    elif field == "metric name":
        values["metrics"] = {text: 1.0}
    else:
        values[field] = text
    record = make_record(run_id="20261125T000000Z-abcdef", **values)
    os.environ["FTMATRIX_TEST_TOKEN"] = SECRET
    try:
        CellRecordFile(record_path(out, record.run_id, record.cell_id)).add(record)
    finally:
        del os.environ["FTMATRIX_TEST_TOKEN"]
    merge_outputs(out)
    render_report(out, now=datetime(2026, 11, 25, tzinfo=UTC))
    leaked = [secret, SECRET, "admin:"]
    for path in out.rglob("*"):
        if path.is_file() and path.suffix in {".jsonl", ".html", ".md", ".json", ".sqlite"}:
            body = path.read_bytes()
            for value in leaked:
                assert value.encode() not in body, (path.name, field, value)


CASES = (
    """
import os
import pytest
from ftmatrix.cell.api import not_applicable

SECRET = os.environ["FTMATRIX_TEST_TOKEN"]


@pytest.mark.parametrize("value", [SECRET], ids=[f"id-{SECRET}"])
def test_secret_in_the_id(value, record_property):
    record_property("seen", f"metric {SECRET}")
    record_property(f"name-{SECRET}", 1.0)


def test_secret_in_a_reason():
    not_applicable(f"lacks it: {SECRET}")


def test_url_with_credentials():
    raise AssertionError("cannot reach " + os.environ["DB_URL"] + " or GITHUB_URL")


def test_token_shapes():
    print("HUGGING_FACE AWS")
    raise AssertionError("OPENAI")
""".replace("GITHUB_URL", f"https://x-access-token:{GITHUB}@github.com/o/r")
    .replace("HUGGING_FACE", HUGGING_FACE)
    .replace("AWS", AWS)
    .replace("OPENAI", OPENAI)
)


@pytest.mark.slow
def test_a_real_cell_publishes_and_prints_no_secret(tmp_path: Path) -> None:
    cases = tmp_path / "cases"
    cases.mkdir()
    (cases / "test_secrets.py").write_text(CASES)
    env = {
        **os.environ,
        "FTMATRIX_MATRIX": str(DATA / "small_matrix.yaml"),
        "FTMATRIX_CASES": str(cases),
        "FTMATRIX_OUT": str(tmp_path / "out"),
        "FTMATRIX_SELECT": "cpu-*-six1.17.0-attrs25.3.0",
        "FTMATRIX_TEST_TOKEN": SECRET,
        "DB_URL": f"postgres://admin:{SECRET[:8]}x@db/x",
    }
    ran = subprocess.run(
        [sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py"), "--envdir", str(tmp_path / "envs"),
         "-s", "matrix", "--", "-rA"],
        env=env, cwd=tmp_path, capture_output=True, text=True, check=False,
    )  # fmt: skip
    console = ran.stdout + ran.stderr
    assert "test_secrets.py" in console, console[-3000:]
    published = {p: p.read_bytes() for p in (tmp_path / "out").rglob("*") if p.is_file()}
    assert any(p.name == "index.html" for p in published)
    for value in (SECRET, SECRET[:8] + "x", GITHUB, HUGGING_FACE, AWS, OPENAI):
        assert value not in console, value
        for path, body in published.items():
            assert value.encode() not in body, (path, value)
