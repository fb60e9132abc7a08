"""Text shown as itself in GitHub-flavoured Markdown: a record's text is framework
output and may hold anything, so it is never a link, emphasis, code span, table cell
boundary or raw HTML in the job summary."""

from __future__ import annotations

import re

# Markdown's punctuation: escaped, a record's text is never a link, emphasis, code span or
# table cell boundary. HTML's three are written as entities, so no raw HTML gets through.
# (Our text never starts a line, so #, -, + and 1. cannot make headings or lists.)
_MD_PUNCTUATION = frozenset("\\`*_[]|~!")
_HTML_ENTITIES = {"<": "&lt;", ">": "&gt;", "&": "&amp;", '"': "&quot;"}


def md_text(text: str) -> str:
    """Text shown as itself in GitHub-flavoured Markdown, on one line."""
    line = " ".join(text.splitlines())
    return "".join(
        _HTML_ENTITIES.get(c)
        or (f"\\{c}" if c in _MD_PUNCTUATION and not _intraword_underscore(line, i) else c)
        for i, c in enumerate(line)
    )


def _intraword_underscore(line: str, i: int) -> bool:
    """An ``_`` between two letters or digits (``test_sft``) never emphasises: kept as is."""
    return (
        line[i] == "_" and 0 < i < len(line) - 1 and line[i - 1].isalnum() and line[i + 1].isalnum()
    )


def md_code(text: str) -> str:
    """A code span of ``text``: its fence longer than any run of backticks inside."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    line = " ".join(text.splitlines())
    pad = " " if line.startswith("`") or line.endswith("`") else ""  # stripped when rendered
    return f"{fence}{pad}{line}{pad}{fence}"


def md_link(label: str, url: str) -> str:
    """A Markdown link to an http(s) page; any other address is shown as text only."""
    if re.fullmatch(r"https?://[^\s<>()\[\]`]+", url):
        return f"[{md_text(label)}]({url})"
    return md_text(label)
