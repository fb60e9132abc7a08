"""The docs' reference blocks, generated from the code they describe, never written twice.

A page marks each block it lets the code write::

    <!-- generated: exit-codes -->
    (whatever the generator wrote last)
    <!-- end generated -->

``python -m ftmatrix.docs_gen`` rewrites every block of every page under docs/ and the
files of :data:`FILES` (docs/matrix.schema.json); ``--check`` writes nothing and exits 1
naming what is stale (the tests and CI run it). Stale means other words, not other
whitespace: argparse wraps a long usage line differently from one Python to the next.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import ftmatrix
from ftmatrix.cell.record import FIELDS, json_schema
from ftmatrix.cell.status import status_table_markdown
from ftmatrix.cli import build_parser
from ftmatrix.errors import exit_code_table_markdown
from ftmatrix.matrix_schema import matrix_json_schema, matrix_json_schema_text
from ftmatrix.settings import ENV_VARS

HELP_WIDTH = 78  # argparse wraps to the terminal; the page, to what its code blocks show
ANSI = re.compile(r"\x1b\[[0-9;]*m")

BLOCK = re.compile(
    r"^(?P<open><!-- generated: (?P<name>[\w-]+) -->\n)(?P<body>.*?)"
    r"^(?P<close><!-- end generated -->)$",
    re.DOTALL | re.MULTILINE,
)


def cli_reference(root: Path) -> str:
    """``ftmatrix --help`` and every subcommand's, from the parser ``main()`` uses."""
    parser = build_parser()
    parsers = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            parsers += action.choices.values()
    sections = []
    for each in parsers:
        each.formatter_class = _fixed_width(each.formatter_class)
        heading = "ftmatrix" if each is parser else each.prog
        text = ANSI.sub("", each.format_help())  # Python 3.14 colours help on a terminal
        sections.append(f"## `{heading}`\n\n```text\n{text.rstrip()}\n```")
    return "\n\n".join(sections)


def _fixed_width(formatter: Any) -> Callable[..., argparse.HelpFormatter]:
    def make(prog: str) -> argparse.HelpFormatter:
        made: argparse.HelpFormatter = formatter(prog, width=HELP_WIDTH)
        return made

    return make


def package_sessions(root: Path) -> str:
    """The nox sessions ``ftmatrix.sessions`` gives any repository's noxfile."""
    return sessions_table(Path(ftmatrix.__file__).parent / "sessions.py")


def repository_sessions(root: Path) -> str:
    """The sessions this repository's own noxfile adds."""
    return sessions_table(root / "noxfile.py")


def sessions_table(noxfile: Path) -> str:
    """Each ``@nox.session`` function of ``noxfile``: its name and its docstring's first
    paragraph. Read from the source: importing the sessions would plan the matrix."""
    rows = ["| session | what it does |", "|---|---|"]
    for node in ast.parse(noxfile.read_text()).body:
        if not isinstance(node, ast.FunctionDef):
            continue
        name = _session_name(node)
        if name is None:
            continue
        doc = " ".join((ast.get_docstring(node) or "").split("\n\n")[0].split())
        rows.append(f"| `{name}` | {doc.replace('``', '`')} |")
    return "\n".join(rows)


def _session_name(function: ast.FunctionDef) -> str | None:
    for decorator in function.decorator_list:
        call = decorator if isinstance(decorator, ast.Call) else None
        target = call.func if call else decorator
        if ast.unparse(target) != "nox.session":
            continue
        for keyword in call.keywords if call else ():
            if keyword.arg == "name" and isinstance(keyword.value, ast.Constant):
                return str(keyword.value.value)
        return function.name
    return None


def environment_variables(root: Path) -> str:
    """``ENV_VARS``: every FTMATRIX_* variable a run reads."""
    rows = ["| variable | meaning |", "|---|---|"]
    rows += [f"| `{name}` | {text} |" for name, text in ENV_VARS.items()]
    return "\n".join(rows)


def record_fields(root: Path) -> str:
    """The fields of a record (``ftmatrix.cell.record.FIELDS``)."""
    required = set(json_schema()["required"])
    rows = ["| field | type | meaning |", "|---|---|---|"]
    for name, (kind, text) in FIELDS.items():
        kinds = " or ".join([kind] if isinstance(kind, str) else kind)
        optional = "" if name in required else " (optional)"
        rows.append(f"| `{name}` | {kinds}{optional} | {text} |")
    return "\n".join(rows)


PLACEHOLDERS = {"packages": "PACKAGE", "hardware": "CLASS", "profiles": "PROFILE"}


def matrix_keys(root: Path) -> str:
    """Every key of matrix.yaml, from its JSON Schema: path, type, default, meaning."""
    schema = matrix_json_schema()
    rows = ["| key | type | default | meaning |", "|---|---|---|---|"]
    for key, node in schema["properties"].items():
        rows += _key_rows(key, node, schema)
    return "\n".join(rows)


def _key_rows(path: str, node: dict[str, Any], schema: dict[str, Any]) -> list[str]:
    node = _resolve(node, schema)
    default = f"`{_yaml(node['default'])}`" if "default" in node else ""
    description = node.get("description", "")
    rows = [f"| `{path}` | {_type(node, schema)} | {default} | {description} |"]
    if path.startswith("profiles"):  # a profile's keys are the ones above
        return rows
    for key, child in node.get("properties", {}).items():
        rows += _key_rows(f"{path}.{key}", child, schema)
    named = node.get("additionalProperties")
    if isinstance(named, dict) and path in PLACEHOLDERS:
        child_path = f"{path}.{PLACEHOLDERS[path]}"
        rows += _key_rows(child_path, named, schema)
        for option in named.get("anyOf", ()):
            for key, child in option.get("properties", {}).items():
                rows += _key_rows(f"{child_path}.{key}", child, schema)
    return rows


def _resolve(node: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    if "$ref" in node:
        resolved: dict[str, Any] = schema["definitions"][node["$ref"].rsplit("/", 1)[1]]
        return resolved
    return node


def _type(node: dict[str, Any], schema: dict[str, Any]) -> str:
    """The node's type in words."""
    node = _resolve(node, schema)
    if "title" in node:
        return str(node["title"])
    if "const" in node:
        return f"`{node['const']}`"
    if "enum" in node:
        return " or ".join(f"`{value}`" for value in node["enum"])
    if "anyOf" in node:
        return " or ".join(_type(option, schema) for option in node["anyOf"])
    kinds = node.get("type", "any")
    words = []
    for kind in [kinds] if isinstance(kinds, str) else kinds:
        if kind == "array":
            words.append(f"list of {_type(node.get('items', {}), schema)}")
        elif kind == "object":
            words.append("mapping")
        else:
            words.append({"null": "null", "boolean": "true/false"}.get(kind, kind))
    return " or ".join(words)


def _yaml(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_yaml(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_yaml(v) for v in value) + "]"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


GENERATORS: dict[str, Callable[[Path], str]] = {
    "cli": cli_reference,
    "sessions": package_sessions,
    "repository-sessions": repository_sessions,
    "matrix-keys": matrix_keys,
    "environment": environment_variables,
    "exit-codes": lambda root: exit_code_table_markdown(),
    "statuses": lambda root: status_table_markdown(),
    "record-fields": record_fields,
}

# Whole files under docs/, written by the code.
FILES: dict[str, Callable[[], str]] = {"matrix.schema.json": matrix_json_schema_text}


def regenerate(text: str, *, root: Path, source: str = "<page>") -> str:
    """``text`` with every generated block written anew."""

    def fill(match: re.Match[str]) -> str:
        name = match["name"]
        if name not in GENERATORS:
            known = ", ".join(GENERATORS)
            raise ValueError(f"{source}: no generator named {name!r}; known: {known}")
        return f"{match['open']}\n{GENERATORS[name](root).rstrip()}\n\n{match['close']}"

    return BLOCK.sub(fill, text)


def stale_files(docs: Path, *, write: bool = False) -> list[Path]:
    """The pages and files under ``docs`` whose generated part differs from the code's;
    with ``write``, each is rewritten."""
    root = docs.parent
    expected = {path: regenerate(path.read_text(), root=root, source=str(path))
                for path in sorted(docs.rglob("*.md"))}  # fmt: skip
    expected |= {docs / name: make() for name, make in FILES.items()}
    stale = []
    for path, text in expected.items():
        # Whitespace aside: Python 3.13's argparse wraps a long usage line elsewhere.
        if not path.is_file() or path.read_text().split() != text.split():
            stale.append(path)
            if write:
                path.write_text(text)
    return stale


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ftmatrix.docs_gen",
        description="Write the docs' generated blocks and files from the code.",
    )
    parser.add_argument("docs", nargs="?", default="docs", help="the docs folder (default: docs)")
    parser.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 if anything is stale"
    )
    args = parser.parse_args(argv)
    stale = stale_files(Path(args.docs), write=not args.check)
    for path in stale:
        print(f"{'stale' if args.check else 'rewrote'}: {path}")
    if args.check and stale:
        print("run `python -m ftmatrix.docs_gen` and commit the result", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
