"""A known_issues.yaml value of the wrong type is one problem naming its key path, never a
traceback: a property over every key of the schema, and the probe's cases through
``python -m ftmatrix report`` (exit 3, the config error's, as the matrix's).

A hostile value goes in any place of an entry that uses every key; the file is either
read (and each entry's parts are of their types) or refused with problems that each name
the file and the key path (``k.yaml: [0].proof.hold.torch: ...``).
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from test_hostile_values import HOSTILE, yaml_value

from ftmatrix.cli import main
from ftmatrix.config import ConfigError
from ftmatrix.errors import ExitCode
from ftmatrix.known_issues import ENTRY_KEYS, MATCH_KEYS, PROOF_KEYS, parse_known_issues
from ftmatrix.known_issues.parsing import CONTRACT_KEYS, FILE_KEYS

# An entry that uses every key of the schema, each with a value of its type.
ENTRY: dict[str, Any] = {
    "id": "trl-every-key",
    "title": "every key",
    "package": "trl",
    "upstream": "https://github.com/huggingface/trl/issues/1",
    "fix": "https://github.com/huggingface/trl/pull/2",
    "seen-in": ["https://example.org/thread"],
    "match": {
        "signatures": ["RuntimeError: boom"],
        "exception": "RuntimeError",
        "message": "boom",
        "frame": "trl/.*",
        "packages": {"trl": ">=0.19"},
        "cases": ["test_sft*"],
        "contracts": {"fail": ["loss_finite"], "pass": ["grads_flow"]},
        "parametrizations": {"accumulation-1": "pass", "accumulation-2": "fail"},
    },
    "affected": {"trl": ">=0.19,<0.20", "peft": None},
    "fixed-in": {"trl": "0.20.0"},
    "workaround": "pin trl<0.19",
    "proof": {
        "hardware": "cpu",
        "cases": ["test_sft.py::test_sft"],
        "hold": {"torch": "2.13.0", "peft": "none"},
        "support": ["transformers"],
        "vary": ["trl"],
        "oldest": {"transformers": "4.57.6"},
        "note": "a note",
    },
}
DOCUMENT: dict[str, Any] = {"repositories": {"trl": "huggingface/trl"}, "issues": [ENTRY]}


def places(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every key path of ``value``, a mapping's keys and a list's items, outermost first."""
    found = [path] if path else []
    if isinstance(value, dict):
        items: Any = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        items = ()
    for key, inner in items:
        found += places(inner, (*path, key))
    return found


PLACES = places(DOCUMENT)


def test_the_entry_uses_every_key_and_is_read() -> None:
    keys = {p[-1] for p in PLACES if isinstance(p[-1], str)}
    schema = {*FILE_KEYS, *ENTRY_KEYS, *MATCH_KEYS, *PROOF_KEYS, *CONTRACT_KEYS}
    assert schema <= keys, schema - keys
    (entry,) = parse_known_issues(DOCUMENT, source="k.yaml")
    assert entry.id == "trl-every-key"


def with_value(path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    document = json.loads(json.dumps(DOCUMENT))
    inner = document
    for key in path[:-1]:
        inner = inner[key]
    inner[path[-1]] = value
    return document


def shown_path(path: tuple[Any, ...]) -> str:
    """``k.yaml: [0].match.packages`` for ("issues", 0, "match", "packages")."""
    if path[0] == "repositories":
        return "k.yaml: " + ".".join(map(str, path))
    if path[0] == "issues" and len(path) > 1:
        return f"k.yaml: [{path[1]}]" + "".join(f".{p}" for p in path[2:3])
    return "k.yaml: "  # the list itself: its items are named [0], [1]


# Values of every type a wrong key could hold, and the names a path could hide in.
VALUES = st.one_of(
    HOSTILE,
    st.sampled_from(["../../evil", "a/b", ".", "..", "-x", "x" * 101, ">=2,<1", "==1,!=1"]),
    st.lists(HOSTILE, max_size=2),
    st.dictionaries(st.text(max_size=3), HOSTILE, max_size=2),
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(path=st.sampled_from(PLACES), value=VALUES)
@example(path=("issues", 0, "seen-in"), value=5)
@example(path=("repositories",), value=["a"])
@example(path=("repositories",), value=5)
@example(path=("issues", 0, "match", "packages"), value=["trl"])
@example(path=("issues", 0, "match", "signatures"), value=5)
@example(path=("issues", 0, "fixed-in"), value=[1])
@example(path=("issues", 0, "proof", "hardware"), value=["a"])
@example(path=("issues", 0, "proof", "cases"), value=5)
@example(path=("issues", 0, "proof", "hold"), value=5)
@example(path=("issues", 0, "proof", "oldest"), value=5)
@example(path=("issues", 0, "fixed-in", "trl"), value="1" * 5000)  # past int()'s limit
@example(path=("issues", 0, "affected", "trl"), value="<" + "1" * 5000)
@example(path=("issues", 0, "id"), value="../../evil")
@example(path=("issues", 0, "affected", "trl"), value=">=2,<1")
@example(path=("repositories", "trl"), value="a/b")  # text, but not the links' repository
@example(path=("repositories",), value={"\n": float("nan")})  # a key with a newline
def test_a_wrongly_typed_value_anywhere_is_a_problem_at_its_key_path(
    path: tuple[Any, ...], value: Any
) -> None:
    try:
        entries = parse_known_issues(with_value(path, value), source="k.yaml")
    except ConfigError as exc:
        assert exc.problems
        assert all(p.startswith("k.yaml: ") and "\n" not in p for p in exc.problems)
        # Text of the right type can still clash with another key (an empty range holds
        # the fixed-in version; another repository than the entries' links): a problem of
        # the entry, or of the entries; any other value is named at its key.
        where = shown_path(path) if not isinstance(value, str) else shown_path(path[:2])
        if isinstance(value, str) and path[0] == "repositories":
            where = "k.yaml: "
        assert any(p.startswith(where) for p in exc.problems), exc.problems
        return
    for entry in entries:  # read: every part is of its type, and the id a plain name
        assert entry.id.replace("-", "").replace("_", "").replace(".", "").isalnum()
        assert entry.id[0].isalnum()
        assert all(isinstance(s, str) for s in (*entry.seen_in, *entry.signatures))
        assert entry.workaround is None or isinstance(entry.workaround, str)
        assert isinstance(entry.proof.hardware, str)
        json.dumps(entry.to_dict())


def report(known_issues: str, root: Path) -> tuple[int, str]:
    (root / "k.yaml").write_text(known_issues, encoding="utf-8")
    env = {"FTMATRIX_OUT": str(root / "out"), "FTMATRIX_KNOWN_ISSUES": "k.yaml"}
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = main(["report"], env, root=root)
    return code, err.getvalue()


HEAD = (
    "- id: x\n  title: t\n  package: trl\n  upstream: https://github.com/huggingface/trl/issues/1\n"
)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (HEAD + "  match: {message: boom}\n  seen-in: 5\n",
         "k.yaml: [0].seen-in: must be a list of links"),
        ("repositories: [a]\nissues: []\n",
         "k.yaml: repositories: must map package names to GitHub repositories (owner/name), "
         "got ['a']"),
        ("repositories: 5\nissues: []\n",
         "k.yaml: repositories: must map package names to GitHub repositories (owner/name), "
         "got 5"),
        (HEAD + "  match: {message: boom, packages: [trl]}\n",
         "k.yaml: [0].match.packages: must map package names to version ranges, got ['trl']"),
        (HEAD + "  match: {signatures: 5}\n",
         "k.yaml: [0].match.signatures: must be a list of names (text), got 5"),
        (HEAD + "  match: {message: boom}\n  fixed-in: [1]\n",
         "k.yaml: [0].fixed-in: must map package names to versions, got [1]"),
        (HEAD + "  match: {message: boom}\n  proof: {hold: 5}\n",
         "k.yaml: [0].proof.hold: must map package names to versions (or none), got 5"),
        (HEAD + "  match: {message: boom}\n  proof: {oldest: 5}\n",
         "k.yaml: [0].proof.oldest: must map package names to versions, got 5"),
        (HEAD + "  match: {message: boom}\n  proof: {hardware: [a]}\n",
         "k.yaml: [0].proof.hardware: must be text, got ['a']"),
        (HEAD.replace("id: x", "id: ../../evil") + "  match: {message: boom}\n",
         "k.yaml: [0].id: '../../evil' is not a name: letters, digits, '.', '_' and '-', "
         "starting with a letter or digit (e.g. trl-sft-dataparallel-batch)"),
        (HEAD.replace("id: x", "id: [a]") + "  match: {message: boom}\n",
         "k.yaml: [0].id: ['a'] is not a name: letters, digits, '.', '_' and '-', "
         "starting with a letter or digit (e.g. trl-sft-dataparallel-batch)"),
        (HEAD + '  match: {message: boom}\n  affected: {trl: ">=2,<1"}\n',
         "k.yaml: [0].affected.trl: '>=2,<1' matches no version (its bounds exclude each other)"),
        (HEAD + "  match: {message: boom}\n  fixed-in: {trl: 0.20}\n",
         "k.yaml: [0].fixed-in.trl: 0.2 is not a version; write it as text (e.g. '4.46.0')"),
        (HEAD + f"  match: {{message: {yaml_value(math.nan)}}}\n",
         "k.yaml: [0].match.message: must be a pattern (text, a regular expression), got nan"),
    ],
)  # fmt: skip
def test_the_report_refuses_a_wrongly_typed_known_issue_in_one_line(text: str, says: str) -> None:
    with tempfile.TemporaryDirectory() as folder:
        code, err = report(text, Path(folder))
    assert "Traceback" not in err
    assert code == ExitCode.CONFIG, err
    problems = [line.removeprefix("  - ") for line in err.splitlines()[1:]]
    assert any(p.endswith(says) for p in problems), err
