"""A secret's value in every form a tool prints it: as Python's ``repr()`` and ``ascii()``
show it, JSON-escaped, URL-encoded, shell-quoted, HTML- or XML-escaped, with its quotes
doubled (YAML, CSV, SQL), each of those forms of another, and base64 (alone, or inside a
longer encoded text); and the pattern of it split by a terminal's colour codes or with
some of its characters percent-encoded (:func:`loose_pattern`). ftmatrix.cell.redact
masks each form it finds. Standard library only (runs inside cells).
"""

from __future__ import annotations

import base64
import functools
import html
import json
import re
import shlex
from collections.abc import Callable, Iterable
from urllib.parse import quote, quote_plus

# Short values are left alone: masking '1' or 'true' everywhere would garble messages
# while protecting nothing.
SHORTEST_SECRET = 6
# The fewest base64 characters of a value inside a longer encoded text that are masked:
# fewer would be any few letters of any base64 text.
SHORTEST_BASE64 = 8
# A terminal's control sequence (a colour, "erase the line"): one may stand between any two
# characters of a value a tool coloured (pytest's diff, a logger), and a console shows them
# as one word.
# A repr() or JSON shows its escape as text ("\\x1b[31m": an assertion on coloured output).
TERMINAL_CODES = r"(?:(?:\x1b|\\x1b|\\033|\\u001b|\\e)\[[0-9;?]*[ -/]*[@-~])*"
# What a text that holds such a code or a percent-encoded character holds.
LOOSE_MARKS = ("\x1b", "%", "\\x1b", "\\033", "\\u001b", "\\e[")
# Longer values (a whole PEM key) get no loose pattern: their lines and words have theirs.
LOOSE_LONGEST = 1024


def _python_forms(text: str) -> Iterable[str]:
    body = repr(text)[1:-1]
    yield body
    yield ascii(text)[1:-1]  # ascii(), %a: every character past ASCII escaped (\xe9)
    # repr() picks its quotes; printed in the other ones, the other quote is escaped.
    yield body.replace("\\'", "'")
    yield body.replace("'", "\\'").replace("\\\\'", "\\'")
    yield body.replace('"', '\\"')
    yield repr(text + "'\"")[1:-4]  # inside a repr that holds both quotes: \' escaped
    yield repr(text.encode("utf-8", "backslashreplace"))[2:-1]


def _json_forms(text: str) -> Iterable[str]:
    for body in (json.dumps(text)[1:-1], json.dumps(text, ensure_ascii=False)[1:-1]):
        yield body
        yield body.replace("/", "\\/")  # "\/": PHP's and some JavaScript encoders' slash


def _url_forms(text: str) -> Iterable[str]:
    for encoded in (quote(text, safe=""), quote(text), quote_plus(text)):
        yield encoded
        yield re.sub(r"%[0-9A-F]{2}", lambda m: m[0].lower(), encoded)


def _shell_forms(text: str) -> Iterable[str]:
    yield shlex.quote(text).removeprefix("'").removesuffix("'")
    yield text.replace("'", "'\\''")  # set -x, bash's own quoting
    yield re.sub(r"([^\w@%+=:,./-])", r"\\\1", text)  # printf %q


def _html_forms(text: str) -> Iterable[str]:
    yield html.escape(text)
    yield html.escape(text, quote=False)
    yield text.replace("'", "&#39;")
    yield html.escape(text).replace("&#x27;", "&apos;")  # XML's


def _doubled_quote_forms(text: str) -> Iterable[str]:
    # A quote written twice inside quotes: YAML's single-quoted scalars (a config dumped),
    # CSV's fields (a metrics log), SQL's literals.
    yield text.replace("'", "''")
    yield text.replace('"', '""')


_ESCAPES: tuple[Callable[[str], Iterable[str]], ...] = (
    _python_forms,
    _json_forms,
    _url_forms,
    _shell_forms,
    _html_forms,
    _doubled_quote_forms,
)


def base64_forms(value: str) -> Iterable[str]:
    """``value``'s base64 (standard and URL-safe alphabets, with and without padding), and
    the characters that encode it inside a longer encoded text (``user:value`` of a Basic
    Authorization header or a docker config's ``auth``): at each of the three byte offsets
    it can start at, the groups of four characters that encode its bytes alone."""
    data = value.encode("utf-8", "surrogateescape")
    whole = base64.b64encode(data).decode()
    encodings = [whole, whole.rstrip("=")]
    for shift in range(3):
        encoded = base64.b64encode(b"\0" * shift + data).decode()
        encodings.append(encoded[4 if shift else 0 : 4 * ((shift + len(data)) // 3)])
    for encoded in encodings:
        if len(encoded) >= SHORTEST_BASE64:
            yield encoded
            yield encoded.replace("+", "-").replace("/", "_")


@functools.lru_cache(maxsize=256)
def printed_forms(value: str) -> tuple[str, ...]:
    """``value`` as tools print it, longest first: itself, its base64, and each escaping
    of those and of their escapings (a ``repr()`` inside JSON doubles its backslashes
    twice)."""
    forms = {value, *base64_forms(value)}
    for _ in range(2):
        forms |= {form for text in forms for escape in _ESCAPES for form in escape(text)}
    return tuple(sorted((f for f in forms if len(f) >= SHORTEST_SECRET), key=lambda f: -len(f)))


@functools.lru_cache(maxsize=256)
def loose_pattern(value: str) -> re.Pattern[str] | None:
    """``value`` as a terminal or an encoder of its own may print it, in any letter case: a
    terminal's codes between any two of its characters, and any of its characters
    percent-encoded alone (an encoder that escapes other characters than Python's
    ``quote``: ``%2D`` for a ``-``, ``%65`` for an ``e``); None for a value too long."""
    if len(value) > LOOSE_LONGEST:
        return None
    characters = []
    for char in value:
        encoded = "".join(f"%{byte:02X}" for byte in char.encode("utf-8", "surrogateescape"))
        plus = r"|\+" if char == " " else ""
        # The encoded form first: a "%" of the value is also where its "%25" starts.
        characters.append(f"(?:{encoded}{plus}|{re.escape(char)})")
    return re.compile(TERMINAL_CODES.join(characters), re.IGNORECASE)


def loosely_held(pattern: re.Pattern[str], text: str) -> bool:
    """Does ``text`` hold a value by its :func:`loose_pattern`? Looked for only where the
    text holds a terminal's code (or its escape) or a "%" (found at C speed)."""
    return any(mark in text for mark in LOOSE_MARKS) and pattern.search(text) is not None
