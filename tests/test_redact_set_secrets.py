"""Secrets in the forms the third round found: a value a case set and took back before its
record (``monkeypatch``, ``mock.patch.dict``), a value printed without the blanks, quotes
or label around it in the environment, the end of a value pytest's diff of two long
texts cut, and source lines of code near secret names kept as code. Through a real
pytest with the results plugin, then ``python -m ftmatrix report``: none reaches a
record, a published file or pytest's own console output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ftmatrix.cell.files import CellFiles
from ftmatrix.cell.redact import redact_text

pytest_plugins = ["pytester"]

SET_BY_THE_CASE = "Rt7Mn3Bq9Xw2Vz5K"
PATCHED_IN = "Pa9Sd8Fg7Hj6Kl5Z"
WITH_A_CR = "Mx5Nc8Vb2Lk4Jh7G"
BEHIND_A_LABEL = "Kq7Wn3Ze9Rt2Yx5P"
QUOTED = "Zc4Xv8Bn2Mq6Wp9T"
DIFFED = "Qw3rTy9Zx8Kp7Lm2"

CASES = f"""
import os
from unittest import mock


def test_set_and_taken_back_by_monkeypatch(monkeypatch):
    monkeypatch.setenv("CORP_API_TOKEN", "{SET_BY_THE_CASE}")
    assert os.environ["CORP_API_TOKEN"] == "expected-other-value"


def login(token):
    raise PermissionError(f"server rejected token {{token!r}}")


def test_patched_in_for_a_moment():
    with mock.patch.dict(os.environ, {{"VAULT_TOKEN": "{PATCHED_IN}"}}):
        login(os.environ["VAULT_TOKEN"])


def test_printed_without_what_surrounds_it():
    print("sent", os.environ["CORP_SERVICE_TOKEN"].strip())
    raise AssertionError(
        "rejected " + os.environ["CORP_SERVICE_TOKEN"].strip()
        + " and " + os.environ["AUTH_HEADER"].split()[1]
        + " and " + os.environ["QUOTED_SECRET"].strip("'")
    )


def test_a_diff_that_cuts_a_secret():
    prefix = "x" * 50
    secret = os.environ["CORP_DB_PASSWORD"]
    assert prefix + secret + "A" == prefix + secret + "B"


def connect(password=None, api_key=None):
    password = password or os.environ.get("DB_PASS_FALLBACK")
    api_key = os.environ.setdefault("OTHER_NAME", "x")
    raise ConnectionError("no database")


def test_code_near_secret_names_stays_code():
    connect()
"""


def test_no_secret_set_stripped_or_cut_reaches_a_record_a_page_or_the_console(
    pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CORP_SERVICE_TOKEN", WITH_A_CR + "\r")
    monkeypatch.setenv("AUTH_HEADER", "Bearer " + BEHIND_A_LABEL)
    monkeypatch.setenv("QUOTED_SECRET", f"'{QUOTED}'")
    monkeypatch.setenv("CORP_DB_PASSWORD", DIFFED)
    out = tmp_path / "reports"
    run_id = "20261127T000000Z-abcdef"
    cell = {"run_id": run_id, "id": "cell1", "label": "cpu-py3.11-x1", "python": "3.11",
            "pins": {"x": "1"}, "hardware": "cpu"}  # fmt: skip
    (tmp_path / "cell.json").write_text(json.dumps(cell))
    pytester.makepyfile(test_set_secrets=CASES)
    files = CellFiles.of(out, run_id, "cell1")
    ran = pytester.runpytest_subprocess(
        "-p", "ftmatrix.cell.plugin", "--ftmatrix-cell", str(tmp_path / "cell.json"),
        "--ftmatrix-record", str(files.records), "-rA",
    )  # fmt: skip
    console = ran.stdout.str() + ran.stderr.str()
    assert "5 failed" in console, console[-3000:]
    files.done.write_text("{}")
    subprocess.run(
        [sys.executable, "-m", "ftmatrix", "report", "--out", str(out)], check=True,
        capture_output=True, env={**os.environ, "FTMATRIX_OUT": str(out)},
    )  # fmt: skip
    published = [p for p in out.rglob("*") if p.is_file() and p.name != "history.sqlite"]
    assert {"index.html", "results.json"} <= {p.name for p in published}
    # Each whole value, and the ten characters pytest's diff kept of the cut one.
    pieces = [SET_BY_THE_CASE, PATCHED_IN, WITH_A_CR, BEHIND_A_LABEL, QUOTED, DIFFED[-10:]]
    for piece in pieces:
        assert piece not in console, piece
        for path in published:
            assert piece.encode() not in path.read_bytes(), (path.name, piece)
    # The masks are there, and the code near secret names is left as code.
    records = files.records.read_text()
    assert "<redacted:CORP_API_TOKEN>" in records and "<redacted:VAULT_TOKEN>" in records
    [code] = [
        json.loads(line)
        for line in records.splitlines()
        if "stays_code" in json.loads(line)["case"]
    ]
    assert "password = password or os.environ.get" in code["traceback"]
    assert 'api_key = os.environ.setdefault("OTHER_NAME"' in code["traceback"]


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        # a value the environment holds with a CR, blanks, quotes or base64's padding
        ("rejected Mx5Nc8Vb2Lk4Jh7G.", "rejected <redacted:A_TOKEN>."),
        # the token of a value that names its scheme, not the scheme's word
        ("Bearer refused: Kq7Wn3Ze9Rt2Yx5P", "Bearer refused: <redacted:AUTH_HEADER>"),
    ],
)
def test_the_parts_of_a_value_a_tool_prints_alone_are_masked(text: str, masked: str) -> None:
    env = {"A_TOKEN": " 'Mx5Nc8Vb2Lk4Jh7G==' \r", "AUTH_HEADER": "Bearer Kq7Wn3Ze9Rt2Yx5P"}
    assert redact_text(text, env) == masked


@pytest.mark.parametrize(
    "text",
    [
        "password = password or self.api_key",
        'api_key = os.environ.get("API_KEY")',
        "client_secret=self.client_secret",
        "secret = self.load_secret()",
        "token=kwargs.get('token')",
        "password=None",
    ],
)
def test_code_near_secret_names_stays(text: str) -> None:
    assert redact_text(text, {}) == text


@pytest.mark.parametrize(
    "text",
    [
        "password=hunter2secret",
        "password = 'hunter2secret'",
        "db password: hunter2secret",
        # shaped like code, but a value: dots, a call's parenthesis, a secret-like word
        "config: password=hunter2secret.horse.battery",
        "client_secret=hunter2secret.def456",
        "password=Hunter2secret_secret",
        "db.password = hunter2secret(xyzzy",
        "credentials=hunter2secret.name.here",
    ],
)
def test_a_value_given_to_a_secret_name_is_still_masked(text: str) -> None:
    assert "hunter2secret" not in redact_text(text, {}).lower()


def test_prose_and_the_plain_words_of_a_value_are_not_masked() -> None:
    """Only pytest's own words of a cut diff mask a line's ends; a value's plain words,
    a port, a date are not masked alone (its token-shaped password is)."""
    dsn = "host=db.internal port=5432 user=postgres password=Xk9pQ2mZ7v"
    text = "the two are not identical\nwords matter\nport=5432 user=postgres on 2024-01-01"
    env = {"DATABASE_DSN": dsn, "PASSWORD": "hunter2password"}
    assert redact_text(text, env) == text
    assert redact_text("auth Xk9pQ2mZ7v", env) == "auth <redacted:DATABASE_DSN>"


def test_a_secret_set_after_many_others_is_still_masked() -> None:
    """The values heard were capped, new ones refused: the 257th secret a case set was
    published. The newest are kept (the oldest let go), and the redactor follows them."""
    script = """
import os
from ftmatrix.cell import secrets_set
from ftmatrix.cell.redact import SECRET_NAME, current_redactor, is_secret
secrets_set.listen(is_secret, SECRET_NAME)
for i in range(300):
    os.environ["HF_TOKEN"] = f"fake-token-{i:04d}"
    del os.environ["HF_TOKEN"]
    assert current_redactor().text(f"sent fake-token-{i:04d}") == "sent <redacted:HF_TOKEN>"
os.environ["HF_TOKEN"] = "realsecretvalue123"
del os.environ["HF_TOKEN"]
print(current_redactor().text("auth failed with realsecretvalue123"))
"""
    ran = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent / "src")},
    )  # fmt: skip
    assert ran.stdout.strip() == "auth failed with <redacted:HF_TOKEN>"
