"""Nothing secret reaches a published file or the console: every channel, masked by value.

Fast tier: the patterns, and a hypothesis property over every string field of a record
through the real writer, history and report. Slow tier: a real cell whose cases put
secrets in a parametrize id, a not_applicable() reason, a metric, a URL's userinfo and
token-shaped literals, with its console output checked too.
"""

from __future__ import annotations

import base64
import html
import json
import os
import shlex
import subprocess
import sys
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote, quote_plus

import pytest
from _pytest._io.saferepr import saferepr
from conftest import make_record
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from ftmatrix.cell.files import CellFiles
from ftmatrix.cell.records import CellRecordFile
from ftmatrix.cell.redact import redact_text
from ftmatrix.cell.status import Status
from ftmatrix.config import load_matrix
from ftmatrix.errors import PackageIndexError
from ftmatrix.plan import Installability, plan_cells
from ftmatrix.planview import write_installability
from ftmatrix.report.render import render_report
from ftmatrix.store import merge_outputs

pytest_plugins = ["pytester"]

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


# Values with what tools escape: a backslash, both quotes, a space, '&' and '%'.
PASSPHRASE = "c0rrect\\horse'batt\"ery staple&%"
WEBHOOK = "https://hooks.slack.com/services/T0AAA/B0BBB/xyzWebhookSecret42"
LONG_TOKEN = "lt-" + "".join(f"{i:03d}q" for i in range(100))  # 403 characters


@pytest.mark.parametrize(
    "printed",
    [
        repr(PASSPHRASE),  # a backslash doubled, a quote escaped
        repr({"p": PASSPHRASE}),
        repr(PASSPHRASE.encode()),  # as bytes
        json.dumps({"p": PASSPHRASE}),
        json.dumps(repr(PASSPHRASE)),  # a repr inside JSON: doubled twice
        quote(PASSPHRASE, safe=""),
        quote(PASSPHRASE, safe="").lower(),
        quote_plus(PASSPHRASE),
        shlex.quote(PASSPHRASE),
        "+ curl -d " + shlex.quote(PASSPHRASE).replace("'\"'\"'", "'\\''"),  # set -x
        html.escape(PASSPHRASE),
    ],
)
def test_a_value_is_masked_in_every_form_a_tool_prints_it(printed: str) -> None:
    out = redact_text(f"E   {printed} != x", {"DEPLOY_PASSPHRASE": PASSPHRASE})
    assert "horse" not in out and "staple" not in out, out
    assert "<redacted:DEPLOY_PASSPHRASE>" in out


# A value split where a wrapper broke its line, the next line as pytest starts it.
def wrapped(text: str) -> str:
    return text[: len(text) // 2] + "\nE   " + text[len(text) // 2 :]


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


@pytest.mark.parametrize(
    ("printed", "masked"),
    [
        # base64: alone, URL-safe, and inside a longer encoded text (a docker config's
        # "auth", a Basic Authorization header): the groups it shares go with it
        (b64(PASSPHRASE), "<redacted:DEPLOY_PASSPHRASE>"),
        (base64.urlsafe_b64encode(PASSPHRASE.encode()).decode(), "<redacted:DEPLOY_PASSPHRASE>"),
        (json.dumps({"auth": b64("ci-bot:" + PASSPHRASE)}), '{"auth": "Y2ktYm90<redacted:DEPLOY_PASSPHRASE>"}'),
        (json.dumps({"auth": b64("u:" + PASSPHRASE)}), '{"auth": "<redacted:DEPLOY_PASSPHRASE>"}'),
        # another letter case
        (PASSPHRASE.upper(), "<redacted:DEPLOY_PASSPHRASE>"),
        # split where a wrapped traceback line broke it, in a word or at a blank (each
        # word shaped like a token is masked on its own too)
        (wrapped(PASSPHRASE), "<redacted:DEPLOY_PASSPHRASE>\nE   <redacted:DEPLOY_PASSPHRASE> <redacted:DEPLOY_PASSPHRASE>"),
        ("c0rrect\\horse'batt\"ery\n  staple&%", "<redacted:DEPLOY_PASSPHRASE>\n  <redacted:DEPLOY_PASSPHRASE>"),
        # split by a terminal's colour codes (a coloured diff, a logger), the codes inside it
        # going with it
        (f"{PASSPHRASE[:9]}\x1b[1;31m{PASSPHRASE[9:]}\x1b[0m", "<redacted:DEPLOY_PASSPHRASE>\x1b[0m"),
        ("\x1b[32m" + "\x1b[0m\x1b[32m".join(PASSPHRASE), "\x1b[32m<redacted:DEPLOY_PASSPHRASE>"),
        # some of its characters percent-encoded: another encoder's set than quote()'s
        # (JavaScript's encodeURIComponent), or a few by hand, in either letter case
        (quote(PASSPHRASE, safe="-_.!~*'()"), "<redacted:DEPLOY_PASSPHRASE>"),
        (PASSPHRASE.replace(" ", "%20").replace("'", "%27").replace("o", "%6f"), "<redacted:DEPLOY_PASSPHRASE>"),
        # its quotes doubled (a YAML single-quoted scalar, a CSV field, SQL), XML-escaped
        ("p: '" + PASSPHRASE.replace("'", "''") + "'", "p: '<redacted:DEPLOY_PASSPHRASE>'"),
        ('"' + PASSPHRASE.replace('"', '""') + '"', '"<redacted:DEPLOY_PASSPHRASE>"'),
        (html.escape(PASSPHRASE).replace("&#x27;", "&apos;"), "<redacted:DEPLOY_PASSPHRASE>"),
    ],
)  # fmt: skip
def test_a_value_is_masked_in_the_forms_the_first_round_missed(printed: str, masked: str) -> None:
    assert redact_text(printed, {"DEPLOY_PASSPHRASE": PASSPHRASE}) == masked


@pytest.mark.parametrize("show", [repr, json.dumps, lambda text: text.replace("\x1b", "\\033")])
def test_a_value_split_by_a_terminals_code_shown_as_its_escape_is_masked(show) -> None:
    """An assertion on coloured output: pytest shows the text's repr(), "\\x1b[31m" in it."""
    printed = show(f"{SECRET[:7]}\x1b[31m{SECRET[7:]}\x1b[0m")
    out = redact_text(f"E   assert {printed} == ''", {"MY_TOKEN": SECRET})
    assert SECRET[:7] not in out and SECRET[7:] not in out and "<redacted:MY_TOKEN>" in out, out


@pytest.mark.parametrize("value", ["k3y9Qz", "k3y9Qz7", "Ab0-+x/y"])
def test_the_shortest_values_split_in_the_middle_by_a_wrapper_are_masked(value: str) -> None:
    """Six characters split three and three leave no four on either side of the break,
    where the look for a piece of a secret started."""
    out = redact_text(f"E   token: {wrapped(value)} !", {"SHORT_API_TOKEN": value})
    assert out.count("<redacted:SHORT_API_TOKEN>") == 2, out


SLASHED = "Zq9/xT+u3\u00e9$k#Lw2pQ8r"  # a slash, a character past ASCII


@pytest.mark.parametrize(
    "printed",
    [
        json.dumps(SLASHED).replace("/", "\\/"),  # JSON's escaped slash (PHP, some JS)
        json.dumps(SLASHED, ensure_ascii=False).replace("/", "\\/"),
        ascii(SLASHED),  # ascii(), %a
        repr(SLASHED.encode()).upper(),
    ],
)
def test_a_value_is_masked_as_json_and_ascii_escape_it(printed: str) -> None:
    out = redact_text(f"sent {printed}", {"MY_API_KEY": SLASHED})
    assert "xt+u3" not in out.lower() and "lw2pq8r" not in out.lower(), out


PEM = (
    "-----BEGIN PRIVATE KEY-----\n"
    "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj\n"
    "MzEfYyjiWA4R4/M2bS1GB4t7NXp98C3SC6dVMvDuictGeurT8jNbvJZHtCSuYEvu\n"
    "-----END PRIVATE KEY-----"
)


def test_each_line_of_a_value_of_several_lines_is_masked() -> None:
    """A PEM key in a variable, logged line by line behind a prefix, or one line alone."""
    logged = "\n".join(f"INFO {line}" for line in PEM.splitlines())
    out = redact_text(logged + "\nbad line: " + PEM.splitlines()[2], {"SA_PRIVATE_KEY": PEM})
    assert "MIIEvQ" not in out and "MzEfYy" not in out, out
    assert out.startswith("INFO <redacted:SA_PRIVATE_KEY>\nINFO <redacted:SA_PRIVATE_KEY>")
    # A PEM private key's body is masked by its shape too, whatever holds it.
    assert "MIIEvQ" not in redact_text(PEM, {})


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("+ huggingface-cli login --token zq8x7c6v5b4n --add-to-git-credential", "zq8x7c"),
        ("wandb login --api-key=zq8x7c6v5b4n", "zq8x7c"),
        ("psql --password 'zq8x7c6v5b4n' -h db", "zq8x7c"),
        ("train.py --hub-token zq8x7c6v5b4n", "zq8x7c"),
        ("from_pretrained('m', token='zq8x7c6v5b4n')", "zq8x7c"),
        ("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U", "eyJzdWIi"),
        ("SLACK xoxb-123456789012-abcdefghijkl", "abcdefghijkl"),
        ("key AIzaSyA-1234567890abcdefghijklmnopqrstu", "1234567890abc"),
    ],
)  # fmt: skip
def test_a_secret_option_or_shape_in_the_text_is_masked(text: str, secret: str) -> None:
    assert secret not in redact_text(text, {})


def test_options_and_words_of_code_near_secret_names_stay() -> None:
    text = (
        "--max-tokens 512 --pad-token <eos> --tokenizer-name gpt2 --token -x pad_token=eos_token"
        ' token=self.token, token=load_config.download_kwargs.get("token")'  # framework code
    )
    assert redact_text(text, {}) == text


TOOL_FORMS = {
    "repr": repr,
    "repr in JSON": lambda v: json.dumps(repr(v)),
    "JSON": json.dumps,
    "JSON unicode": lambda v: json.dumps(v, ensure_ascii=False),
    "bytes": lambda v: repr(v.encode()),
    "URL": lambda v: quote(v, safe=""),
    "URL path": quote,
    "URL form": quote_plus,
    "shell": shlex.quote,
    "HTML": html.escape,
    "ascii": ascii,
    "JSON slash": lambda v: json.dumps(v).replace("/", "\\/"),
    "base64": b64,
    "base64 inside": lambda v: b64("user:" + v),
    "upper case": str.upper,
    "lower case": str.lower,
    "wrapped": wrapped,
    "coloured": lambda v: "\x1b[1m".join(v[i : i + 3] for i in range(0, len(v), 3)) + "\x1b[0m",
    "partly encoded": lambda v: "".join(quote(c, safe="") if i % 2 else c for i, c in enumerate(v)),
    "encodeURIComponent": lambda v: quote(v, safe="-_.!~*'()"),
    "YAML": lambda v: "'" + v.replace("'", "''") + "'",
    "CSV": lambda v: '"' + v.replace('"', '""') + '"',
    "XML": lambda v: html.escape(v).replace("&#x27;", "&apos;"),
}


@settings(max_examples=200, deadline=None)
@given(
    value=st.text(
        alphabet=st.sampled_from("aZ09_-\\'\" &%+/=:@#é\n\t"), min_size=8, max_size=24
    ).filter(lambda v: v.strip() == v and len(set(v)) > 4),
    tool=st.sampled_from(sorted(TOOL_FORMS)),
)
def test_any_value_in_any_tool_form_is_masked(value: str, tool: str) -> None:
    if tool == "wrapped":  # a wrapper breaks a line in a word, or at one space it drops
        half = len(value) // 2
        assume("\n" not in value and value[half - 1] != "\t" and value[half] not in " \t")
        assume(value[half - 2 : half] != "  ")
    printed = TOOL_FORMS[tool](value)
    out = redact_text(f"E   assert {printed} == 1", {"SIGNING_PASSPHRASE": value})
    assert printed not in out, (printed, out)
    assert "<redacted" in out  # by its name, or as a URL's userinfo ("x://a:b@")


def test_the_two_ends_of_a_value_pytest_shortened_are_masked() -> None:
    # pytest's own repr of a long value: its two ends around "...".
    shown = saferepr({"token": LONG_TOKEN})
    assert "..." in shown and LONG_TOKEN not in shown  # what pytest prints
    out = redact_text(f"AssertionError: assert {shown} == {{}}", {"LONG_TOKEN": LONG_TOKEN})
    assert "q" not in out.replace("<redacted:LONG_TOKEN>", ""), out
    assert "...<redacted:LONG_TOKEN>" in out


@pytest.mark.parametrize(
    "name",
    ["DEPLOY_PASSPHRASE", "SLACK_WEBHOOK_URL", "DB_PASS", "GITLAB_PAT", "MYSQL_PWD",
     "SESSION_COOKIE", "SENTRY_DSN", "SIGNING_PRIVATE_PEM", "AZURE_CREDS"],
)  # fmt: skip
def test_variables_named_like_secrets_are_masked_by_pattern(name: str) -> None:
    assert WEBHOOK not in redact_text(f"posting to {WEBHOOK}", {name: WEBHOOK})


@pytest.mark.parametrize("name", ["PWD", "OLDPWD", "PATH", "HOME", "LANG"])
def test_ordinary_variables_stay(name: str) -> None:
    text = "at /srv/work/project now"
    assert redact_text(text, {name: "/srv/work/project"}) == text


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("export DB_PASSPHRASE=correct-horse-battery", "correct-horse"),
        ("SLACK_WEBHOOK_URL: https://hooks.slack.com/services/T0/B0/abcdef", "hooks"),
        ("{'api_key': 'zq8x7c6v5b4n'}", "zq8x7c"),
        ('{"password":"zq8x7c6v5b4n"}', "zq8x7c"),
        ("GET /hook?client_secret=zq8x7c6v5b4n&x=1", "zq8x7c"),
        ("-H 'Authorization: Bearer zq8x7c6v5b4n'", "zq8x7c"),
        ("Authorization: Basic dXNlcjpodW50ZXIy", "dXNlcjp"),
    ],
)
def test_a_value_assigned_to_a_secret_name_in_the_text_is_masked(text: str, secret: str) -> None:
    assert secret not in redact_text(text, {})


def test_words_of_code_named_like_secrets_stay() -> None:
    text = (
        "pad_token=<|endoftext|> KeyError: 'transformers' key=value1234 "
        "TOKENIZERS_PARALLELISM=false see https://github.com/o/r max_tokens=512 "
        "packages.../../etc/passwd: '../../etc/passwd' is not a distribution name"
    )
    assert redact_text(text, {}) == text


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
        CellRecordFile(CellFiles.of(out, record.run_id, record.cell_id).records).add(record)
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


def test_a_value_as_repr_shows_it():
    print(repr(os.environ["DEPLOY_PASSPHRASE"]))
    assert os.environ["DEPLOY_PASSPHRASE"] == "x"


def test_undecodable():
    raise AssertionError(b"model-\\xff.bin".decode("utf-8", "surrogateescape"))
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
        "DEPLOY_PASSPHRASE": PASSPHRASE,
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
    # A lone surrogate in a message keeps its fail and its message (it was a crash).
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    [undecodable] = [r for r in results["records"] if r["case"].endswith("test_undecodable")]
    assert (undecodable["status"], undecodable["message"]) == ("fail", "model-\\udcff.bin")
    for value in (SECRET, SECRET[:8] + "x", GITHUB, HUGGING_FACE, AWS, OPENAI, "horse", "staple"):
        assert value not in console, value
        for path, body in published.items():
            assert value.encode() not in body, (path, value)


PRINTING_CASES = """
import base64, json, os, shlex
from urllib.parse import quote

import pytest

PASSPHRASE = os.environ["DEPLOY_PASSPHRASE"]
WEBHOOK = os.environ["SLACK_WEBHOOK_URL"]
LONG = os.environ["LONG_TOKEN"]
KEY_LINE = os.environ["SA_PRIVATE_KEY"].splitlines()[1]


def test_repr_of_a_value():
    assert PASSPHRASE == "x"


def test_a_long_value_pytest_shortens():
    assert {"token": LONG} == {}


def test_escaped_forms(record_property):
    record_property("sent", json.dumps({"p": PASSPHRASE, "hook": WEBHOOK}))
    print("+ curl -d", shlex.quote(PASSPHRASE), quote(WEBHOOK, safe=""))
    raise AssertionError("posted " + quote(PASSPHRASE, safe="") + " with DB_PASSPHRASE=hunter22ab")


def test_other_forms(record_property):
    record_property("docker", json.dumps({"auth": base64.b64encode(b"bot:" + PASSPHRASE.encode()).decode()}))
    print(json.dumps({"hook": WEBHOOK}).replace("/", "\\\\/"), PASSPHRASE.upper(), KEY_LINE)
    print("+ huggingface-cli login --token zq8x7c6v5b4nQ")
    half = len(PASSPHRASE) // 2
    raise AssertionError(PASSPHRASE[:half] + "\\n" + PASSPHRASE[half:])


def test_machine_paths():
    searched = ":".join(["/home/zelda/src", "/srv/zelda/lib", "/opt/ci zelda/work dir/pkgs"])
    windows = json.dumps(["C:\\\\Users\\\\zelda\\\\x.py", "\\\\\\\\zelda-nas\\\\share\\\\x.py"])
    raise AssertionError(
        f"not found in {searched}; see file:///home/zelda/r.html or /Users/zelda; {windows} "
        "file://zelda-pc/share/r.html ?f=%2Fhome%2Fzelda%2Fx.py ../../../home/zelda"
    )


def test_coloured_and_partly_encoded(record_property):
    record_property("coloured", LONG[:50] + "\\x1b[1;31m" + LONG[50:] + "\\x1b[0m")
    print("\\x1b[32m" + PASSPHRASE[:10] + "\\x1b[0m" + PASSPHRASE[10:])
    yaml = "passphrase: '" + PASSPHRASE.replace("'", "''") + "'"  # yaml.safe_dump's
    raise AssertionError("GET /hook?u=" + quote(WEBHOOK, safe="-_.!~*'()") + "&p=" + PASSPHRASE.replace(" ", "%20") + yaml)


# A path in the case's id, alone and after the "-" pytest joins an id's values with.
@pytest.mark.parametrize(("n", "where"), [(0, "/home/zelda/data"), (1, "/srv/zelda/data")])
def test_path_in_an_id(n, where, record_property):
    record_property("C:\\\\Users\\\\zelda\\\\cache", where)  # and in a metric
"""


def test_no_form_of_a_planted_secret_reaches_a_published_file(
    pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real cell's pytest with the results plugin, then `python -m ftmatrix report`."""
    for name, value in [
        ("DEPLOY_PASSPHRASE", PASSPHRASE),
        ("SLACK_WEBHOOK_URL", WEBHOOK),
        ("LONG_TOKEN", LONG_TOKEN),
        ("SA_PRIVATE_KEY", PEM),
    ]:
        monkeypatch.setenv(name, value)
    out = tmp_path / "reports"
    run_id = "20261125T000000Z-abcdef"
    cell = {"run_id": run_id, "id": "cell1", "label": "cpu-py3.11-x1", "python": "3.11",
            "pins": {"x": "1"}, "hardware": "cpu"}  # fmt: skip
    (tmp_path / "cell.json").write_text(json.dumps(cell))
    pytester.makepyfile(test_printing=PRINTING_CASES)
    pytester.runpytest_subprocess(
        "-l", "--color=yes", "-p", "ftmatrix.cell.plugin", "--ftmatrix-cell", str(tmp_path / "cell.json"),
        "--ftmatrix-record", str(CellFiles.of(out, run_id, "cell1").records),
    )  # fmt: skip
    records = CellFiles.of(out, run_id, "cell1").records.read_text()
    assert records.count("\n") == 8 and "<redacted:LONG_TOKEN>" in records
    # The runner marks the cell done once its pytest has ended (else: a cell that stopped).
    CellFiles.of(out, run_id, "cell1").done.write_text("{}")
    subprocess.run(
        [sys.executable, "-m", "ftmatrix", "report", "--out", str(out)], check=True,
        capture_output=True, env={**os.environ, "FTMATRIX_OUT": str(out)},
    )  # fmt: skip
    # What leaves the runner: not the records folder nor history.sqlite (raw paths kept).
    published = [
        p for p in out.rglob("*")
        if p.is_file() and "records" not in p.parts and p.name != "history.sqlite"
    ]  # fmt: skip
    names = {p.relative_to(out).as_posix() for p in published}
    assert {"index.html", "summary.md", "results.json", "site/index.html"} <= names
    pieces = ["c0rrect", "horse", "staple", "xyzWebhookSecret42", "hunter22ab", "000q001q"]
    pieces += [LONG_TOKEN[i : i + 8] for i in range(0, len(LONG_TOKEN) - 8, 8)]
    docker = b64("bot:" + PASSPHRASE)
    pieces += ["HORSE", "STAPLE", "MIIEvQ", "zq8x7c6v5b4nQ", docker[8:16], docker[-12:-4]]
    for path in [*published, CellFiles.of(out, run_id, "cell1").records, out / "history.sqlite"]:
        body = path.read_bytes()
        for piece in pieces:
            assert piece.encode() not in body, (path.name, piece)
    for path in published:  # the records keep raw paths on the runner; no published file
        assert b"zelda" not in path.read_bytes(), path.name


def test_the_plans_findings_publish_no_secret_and_no_machine_path(tmp_path: Path) -> None:
    """The report publishes the plan's installability findings: the matrix file's path and
    uv's reasons, which may name an index URL holding a token or a find-links folder."""
    folder = tmp_path / "home" / "zelda" / "proj"
    folder.mkdir(parents=True)
    (folder / "matrix.yaml").write_text(
        'strategy: pairwise\npackages:\n  six: ["1.16.0", "1.17.0"]\n  attrs: ["24.1.0", "25.3.0"]\n'
    )
    matrix = load_matrix(folder / "matrix.yaml", default_python="3.11")
    token = "zq8x7c6v5b4nQ"

    def oracle(queries: Sequence[Mapping[str, str | None]]) -> list[Installability]:
        refused = {"six": "1.16.0", "attrs": "25.3.0"}
        return [
            Installability(
                installable=False,
                reason=f"Failed to fetch: https://pypi.fury.io/{token}/acme/six/ "
                "(find-links /home/zelda/wheels)",
            )
            if refused.items() <= q.items()
            else Installability(installable=True)
            for q in queries
        ]

    out = tmp_path / "reports"
    write_installability(
        out, "20261125T000000Z-abcdef", plan_cells(matrix, oracle), {"FURY_TOKEN": token}
    )
    render_report(out, now=datetime(2026, 11, 25, tzinfo=UTC))
    results = json.loads((out / "results.json").read_text())
    assert results["installability"]["impossible_pairs"], results["installability"]
    for name in ("results.json", "index.html", "summary.md"):
        body = (out / name).read_text()
        assert token not in body and "zelda" not in body, name
