"""What must never be published: secrets masked in every text a record or the console carries.

By value, not by field: a secret reaches a record through a message, a traceback, a
parametrize id, a ``not_applicable()`` reason or a metric alike, so every string of a
record is passed through :func:`redact_text` where records are written (a
:class:`Redactor` per environment), and the lines a cell prints are too. Masked:

- the values of environment variables whose names look secret (:data:`SECRET_NAME`: TOKEN,
  SECRET, KEY, PASS (PASSWORD, PASSPHRASE, ...), CREDENTIAL, AUTH, WEBHOOK, COOKIE, DSN,
  PRIVATE, JWT, BEARER, ``*_PAT``, ``*_PWD``), six characters or longer, in every form a
  tool prints them (:func:`printed_forms`: as Python's ``repr()`` and ``ascii()`` show
  them, JSON-escaped, URL-encoded, shell-quoted, HTML-escaped, those forms of each other,
  and base64, alone or inside a longer encoded text), in any letter case, across a line
  break a tool wrapped them at, split by a terminal's colour codes or with some of their
  characters percent-encoded, each line of a value of several lines (a PEM key), and
  the ends of a value a tool shortened around ``...`` (pytest's ``repr()`` of a long text);
- the value assigned to a secret-looking name in the text itself (``DB_PASSPHRASE=...``,
  ``"api_key": "..."``, ``--hf-token ...``, ``Authorization: Bearer ...``), whatever the
  environment holds;
- the userinfo of any URL (``https://user:pass@host`` -> ``https://<redacted>@host``),
  whatever the variable it came from is called;
- the known token shapes of Hugging Face, GitHub, AWS, OpenAI, Slack, Google, Stripe,
  JSON Web Tokens, and the body of a PEM private key.

A lone surrogate (text no file can hold) is written as its escape, ``\\udc80``.
Standard library only (runs inside cells). Every pattern is linear in the text's length.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import json
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

from ftmatrix.cell import secret_forms, secrets_set
from ftmatrix.cell.secret_forms import SHORTEST_SECRET, base64_forms, loose_pattern, printed_forms

# Names by pattern, not a list: a word anywhere in the name (DB_PASSPHRASE,
# SLACK_WEBHOOK_URL, GITLAB_PAT). PWD alone is the working folder, not a password.
SECRET_NAME = re.compile(
    r"TOKEN|SECRET|KEY|PASS|CREDENTIAL|CREDS|AUTH|WEBHOOK|COOKIE|DSN|PRIVATE|JWT|BEARER"
    r"|(?:^|_)PAT(?:_|$)|_PWD(?:_|$)",
    re.IGNORECASE,
)
# The shortest end of a shortened value that is masked beside its ``...``.
SHORTEST_FRAGMENT = 4
ELLIPSES = ("...", "\u2026")
# pytest's diff of two long texts says it left out their identical start or end ("Skipping
# 65 identical leading characters in diff"); each line of the diff then starts (or ends)
# with the ten characters before (after) the cut. A line, its diff marker skipped:
DIFF_CUT = re.compile(r"Skipping \d+ identical (?:leading|trailing) characters in diff")
DIFF_LINE = re.compile(r"(?m)^(?:[E>][ \t]+)?[ \t]*(?:[-+?] )?(.*)$")

# ://userinfo@ : whatever the scheme, and whatever stands before it.
URL_USERINFO = re.compile(r"(://)[^\s/?#@'\"<>]+@")
# Distinctive prefixes match anywhere, glued to other text too; OpenAI's bare `sk-` only
# where a word starts (ordinary words end in "sk-": "disk-cache-...").
TOKEN_SHAPES = re.compile(
    r"hf_[A-Za-z0-9]{30,}"  # Hugging Face
    r"|gh[pousr]_[A-Za-z0-9]{30,}"  # GitHub tokens
    r"|github_pat_[A-Za-z0-9_]{30,}"  # GitHub fine-grained tokens
    r"|(?:AKIA|ASIA)[0-9A-Z]{16}"  # AWS access key ids
    r"|sk-(?:proj|svcacct|admin)-[A-Za-z0-9_-]{20,}"  # OpenAI project and service keys
    r"|(?<![A-Za-z0-9_-])sk-[A-Za-z0-9]{32,}"  # OpenAI's older keys
)
# Rarer shapes, each looked for only where its fixed part is in the text (found at C
# speed): one pattern of them all cost a traceback half as much again.
RARE_TOKEN_SHAPES = (
    ("xox", re.compile(r"xox[abposr]-[A-Za-z0-9-]{10,}")),  # Slack tokens
    ("AIza", re.compile(r"AIza[0-9A-Za-z_-]{35}")),  # Google API keys
    ("k_live_", re.compile(r"[rs]k_live_[0-9A-Za-z]{20,}")),  # Stripe live keys
    ("eyJ", re.compile(r"eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}")),  # JWTs
    # A PEM private key's body (the class holds no "-": it ends at "-----END").
    ("PRIVATE KEY-----", re.compile(r"-----BEGIN[A-Z ]*PRIVATE KEY-----[A-Za-z0-9+/=\s\\]+")),
)
# A line break a tool wrapped a long text at, with what starts the next line in pytest's
# output ("E   ", "> "), and the blanks before it (LINE_END): a value split there is
# still the value.
LINE_BREAK = re.compile(r"\n[ \t]*(?:[E>|][ \t]+)?")
LINE_END = " \t\r"
# NAME=value, NAME: value, "name": "value", name='value' (a printed environment, a
# config dump, a keyword argument, a query string), found from its "=" or ":" (a search
# from every word would cost more than all the rest). Which names are secret is decided
# by :func:`_secret_assignee`.
SEPARATOR = re.compile(r"[=:]")
VALUE_AFTER = re.compile(
    r"(?::(?:[ \t]+|(?=['\"]))|=[ \t]*)['\"]?"  # ":" then a space or a quote: not "://"
    r"([^\s'\"<>,;&)\]}]+)"
)
# Lower-case names are words of code and prose too ("pad_token", "key"): only these.
LOWER_SECRET_NAME = re.compile(
    r"(?:^|[_.-])(?:password|passwd|passphrase|secret|client_secret|api_?key|private_key"
    r"|access_token|auth_token|refresh_token|api_token|hf_token|webhook_url|credentials?)$",
    re.IGNORECASE,
)
# A command line's option of a secret-looking name and its value (``--hf-token X``,
# ``--api-key=X``, ``--password X``): a logged command. Starts only where "--" starts a
# word, and the name runs up to a blank or "=", so each option is read once.
SECRET_OPTION = re.compile(
    r"((?<![\w-])--(?:[\w-]*[-_])?"
    r"(?:token|api[-_]?key|access[-_]?key|secret|secret[-_]key|password|passwd|passphrase"
    r"|credentials?)(?:[ \t]+|=)['\"]?)([^\s'\"<>,;&)\]}]+)",
    re.IGNORECASE,
)
AUTHORIZATION = re.compile(
    r"((?:proxy-)?authorization['\"]?\s*[:=]\s*['\"]?(?:(?:basic|bearer|token|digest)\s+)?)"
    r"[^\s'\"<>,;]+",
    re.IGNORECASE,
)


def secret_values(
    env: Mapping[str, str], also: Iterable[tuple[str, str]] = ()
) -> list[tuple[str, str]]:
    """(name, value) of the variables whose values are masked, longest value first:
    ``env``'s, and ``also``'s (the values a case set and took back)."""
    found = dict.fromkeys(pair for pair in [*env.items(), *also] if is_secret(*pair))
    return sorted(found, key=lambda pair: -len(pair[1]))


def is_secret(name: str, value: str) -> bool:
    """Is ``value``, held by the variable ``name``, one to mask?"""
    return bool(SECRET_NAME.search(name)) and len(value) >= SHORTEST_SECRET


def redact_text(text: str, env: Mapping[str, str]) -> str:
    """``text`` with every secret masked (see the module's list)."""
    return _masked(text, _known(env))


class Redactor:
    """:func:`redact_text` for one environment, and for JSON-like data, each distinct
    text masked once: a cell's records repeat most of their strings (its pins, packages,
    the second a case ended), and masking them again was most of a trivial case's cost.
    Masking depends on the text and the environment alone, so a remembered answer is
    the answer; a changed environment needs a new Redactor."""

    # Texts longer than this are masked each time (a traceback): they rarely repeat.
    REMEMBERED_LENGTH = 1024
    # Past this many texts the memory starts again (a cell of many cases' ids).
    REMEMBERED_TEXTS = 50_000

    def __init__(
        self,
        env: Mapping[str, str],
        *,
        remember: bool = True,
        also: Iterable[tuple[str, str]] = (),
    ) -> None:
        """``remember``: False for texts that seldom repeat (the lines a cell prints):
        the environment is still scanned once, not once per text. ``also``: (name, value)
        pairs masked as if ``env`` held them (the secrets a case set and took back)."""
        self._secrets = _known(env, also)
        self._masked: dict[str, str] = {}
        self._remember = remember
        self._json: dict[tuple[type, str], str] = {}

    def text(self, text: str) -> str:
        masked = self._masked.get(text)
        if masked is None:
            masked = _masked(text, self._secrets)
            if self._remember and len(text) <= self.REMEMBERED_LENGTH:
                if len(self._masked) >= self.REMEMBERED_TEXTS:
                    self._masked.clear()
                self._masked[text] = masked
        return masked

    def data(self, data: Any) -> Any:
        if isinstance(data, str):
            return self.text(data)
        if isinstance(data, dict):
            return {self.data(k): self.data(v) for k, v in data.items()}
        if isinstance(data, list | tuple):
            return [self.data(v) for v in data]
        return data

    def json_once(self, value: Any) -> str:
        """``value`` redacted, as sorted JSON text (``json.dumps(sort_keys=True)``; a
        mapping as a dict): made once per distinct value, for what every record of a cell
        repeats (its packages, its machine).

        Known by its type and ``repr()``, which tell plain values apart as JSON does
        (``1``, ``1.0``, ``True`` and ``'1'`` differ; a dict's order does not matter to
        the text, only to the memory), at a fraction of json.dumps's cost. Only values of
        JSON's own types are remembered: another object's repr may hide what str() writes.
        """
        key = (type(value), repr(value))
        text = self._json.get(key)
        if text is None:
            normal = dict(value) if isinstance(value, Mapping) else value
            text = json.dumps(
                self.data(json.loads(json.dumps(normal, sort_keys=True, default=str))),
                sort_keys=True,
            )
            if _plain(value):
                if len(self._json) >= 64:
                    self._json.clear()
                self._json[key] = text
        return text


def _plain(value: Any) -> bool:
    """Is ``value`` made of JSON's own types only (str, int, float, bool, None, and dicts,
    lists and tuples of them)?"""
    if value is None or type(value) in (str, int, float, bool):
        return True
    if type(value) is dict:
        return all(type(k) is str and _plain(v) for k, v in value.items())
    if type(value) in (list, tuple):
        return all(_plain(v) for v in value)
    return False


# Variables that name the running case (set anew for each): no secret, and left out of
# the environment a record is redacted for, which they would change with every case.
_PER_CASE_VARIABLES = frozenset({"PYTEST_CURRENT_TEST", "FTMATRIX_RUNNING_CASE"})
_PER_CASE_KEYS = _PER_CASE_VARIABLES | {name.encode() for name in _PER_CASE_VARIABLES}
# The environment the last record was redacted for, as os.environ holds it, how many
# secrets the cases had set by then, and its Redactor.
_redacted_for: tuple[dict[Any, Any], int, Redactor] | None = None


def current_redactor() -> Redactor:
    """The Redactor of this process's environment as it is now (a case may have set a
    secret in it), and of every secret a case set since it began (secrets_set: one a case
    set and took back is masked still): the last one while both are unchanged.

    Compared as os.environ stores it (bytes on POSIX, copied at C speed): reading it as
    text decodes every variable, which cost more than the rest of a trivial record.
    """
    global _redacted_for  # noqa: PLW0603 -- one process's environment, remembered
    stored = getattr(os.environ, "_data", None)
    if not isinstance(stored, dict):  # not CPython's os.environ: read it as text
        stored = dict(os.environ)
    now = stored.copy()
    for key in _PER_CASE_KEYS:
        now.pop(key, None)
    heard = secrets_set.changes()
    if _redacted_for is None or _redacted_for[0] != now or _redacted_for[1] != heard:
        env = {k: v for k, v in os.environ.items() if k not in _PER_CASE_VARIABLES}
        _redacted_for = (now, heard, Redactor(env, also=secrets_set.heard()))
    return _redacted_for[2]


def writable(text: str) -> str:
    """``text`` with each lone surrogate as its escape: UTF-8 cannot hold one, and a case's
    message with one (bytes decoded with ``surrogateescape``) must still be recorded."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


# (mask, the value's printed forms longest first, the same in lower case, the shortest
# form's length, its base64 forms, its loose pattern)
_Secret = tuple[str, tuple[str, ...], tuple[str, ...], int, frozenset[str], re.Pattern[str] | None]
# The base64 characters beside a value's own inside a longer encoded text: the group of
# four that holds its first (or last) bytes with another's.
_BASE64_EDGE = "[A-Za-z0-9+/_-]{0,4}"


def _known(env: Mapping[str, str], also: Iterable[tuple[str, str]] = ()) -> list[_Secret]:
    known = []
    for name, value in secret_values(env, also):
        for piece in _pieces(value):
            forms = printed_forms(piece)
            folded = tuple(form.lower() for form in forms)
            encoded = frozenset(base64_forms(piece))
            loose = loose_pattern(piece)
            known.append((f"<redacted:{name}>", forms, folded, len(forms[-1]), encoded, loose))
    return known


def _pieces(value: str) -> list[str]:
    """``value``, and the parts of it a tool prints alone: each line of a value of several
    lines (a PEM key), the value without the blanks, quotes or base64 padding around it
    (the CR a Windows .env leaves, a quoted value), and each word of it shaped like a
    token (the token of ``Bearer <token>``; not the words of a passphrase)."""
    pieces = [value]
    if "\n" in value:
        pieces += [line.strip() for line in value.splitlines()]
    bare = value.strip().strip("'\"").strip().rstrip("=")
    pieces.append(bare)
    words = bare.split()
    if len(words) > 1:
        # A key=value pair's value alone (a DSN's password=...), not its key.
        values = [word.rsplit("=", 1)[-1] for word in words]
        pieces += [value for value in values if _token_like(value)]
    return [p for p in dict.fromkeys(pieces) if len(p) >= SHORTEST_SECRET]


def _token_like(word: str) -> bool:
    """A word no prose holds: letters with digits or symbols, or capitals after its first
    letter (not a date, a port, a host name, a plain or capitalised word)."""
    if not any(c.isalpha() for c in word):
        return False
    marked = any(c.isdigit() or not (c.isalpha() or c in "._-") for c in word)
    return marked or (not word[1:].islower() and not word.isupper())


def _masked(text: str, secrets: list[_Secret]) -> str:
    text = writable(text)
    # A URL's whole userinfo first: the user name goes with the password.
    text = URL_USERINFO.sub(r"\1<redacted>@", text)
    shortened = any(ellipsis in text for ellipsis in ELLIPSES)
    # pytest's diff of two long texts, their common ends left out
    cut = " identical " in text and DIFF_CUT.search(text) is not None
    lowered = ""  # text.lower(), made once, again only where a secret changed text
    for secret in secrets:
        mask, forms, _folded, shortest, _encoded, _loose = secret
        if len(text) < shortest and not (shortened or cut):
            continue  # most strings of a record: a package's name or version
        text, lowered = _forms_masked(text, lowered or text.lower(), secret)
        if shortened or cut:
            text = _cut_ends_masked(text, forms, mask, shortened=shortened, cut=cut)
            lowered = text.lower()
    if secrets and "\n" in text:
        text = _wrapped_masked(text, secrets)
    if "--" in text:
        text = SECRET_OPTION.sub(_option_masked, text)
    if "=" in text or ":" in text:  # most strings of a record have neither
        if "uthorization" in text or "UTHORIZATION" in text:
            text = AUTHORIZATION.sub(r"\1<redacted>", text)
        text = _assigned_values_masked(text)
    return _shapes_masked(text)


def _forms_masked(text: str, lowered: str, secret: _Secret) -> tuple[str, str]:
    """``text`` (``lowered``: in lower case) with each of a secret's printed forms masked,
    in any letter case (a base64 form with the groups it shares with the text around it),
    and its loose pattern's matches; and the result in lower case."""
    mask, forms, folded, _shortest, encoded, loose = secret
    for form, low in zip(forms, folded, strict=True):
        if len(form) <= len(text) and low in lowered:
            if form in encoded and form in text:  # with the groups it shares
                edged = f"{_BASE64_EDGE}{re.escape(form)}{_BASE64_EDGE}=*"
                text = re.sub(edged, _literal(mask), text)
            elif form in text:
                text = text.replace(form, mask)
            else:
                text = re.sub(re.escape(form), _literal(mask), text, flags=re.IGNORECASE)
            lowered = text.lower()
    if loose is not None and secret_forms.loosely_held(loose, text):
        text = loose.sub(_literal(mask), text)  # split by a terminal's codes, or encoded
        lowered = text.lower()
    return text, lowered


def _shapes_masked(text: str) -> str:
    """``text`` with every known token shape masked."""
    for fixed, shape in RARE_TOKEN_SHAPES:
        if fixed in text:
            text = shape.sub("<redacted>", text)
    return TOKEN_SHAPES.sub("<redacted>", text)


def _wrapped_masked(text: str, secrets: list[_Secret]) -> str:
    """``text`` with each form of a secret that a line break (:data:`LINE_BREAK`) splits
    masked, piece by piece, the lines left as they are (a wrapped traceback line). A
    wrapper breaks a line in a word or at a blank it drops: both are tried."""
    pieces: list[str] = []  # the text between breaks
    starts: list[int] = []  # where each starts in text
    at = 0
    for brk in LINE_BREAK.finditer(text):
        pieces.append(text[at : brk.start()].rstrip(LINE_END))
        starts.append(at)
        at = brk.end()
    pieces.append(text[at:])
    starts.append(at)
    # Most breaks have no piece of any secret on either side: looked up at C speed, as the
    # ellipses are (a value split in two has four characters or more on one side, or is
    # one of the shortest split in the middle, which a piece across the break finds).
    fragments = _all_fragments(tuple(secret[2] for secret in secrets))
    if not any(
        before[-SHORTEST_FRAGMENT:].lower() in fragments
        or after[:SHORTEST_FRAGMENT].lower() in fragments
        or (before[-2:] + after[:2]).lower() in fragments
        for before, after in itertools.pairwise(pieces)
    ):
        return text
    spans: list[tuple[int, int]] = []
    masks: dict[int, str] = {}
    for joiner in ("", " "):
        joined = joiner.join(pieces).lower()
        ends, end = [], -len(joiner)  # where each piece ends in joined
        for piece in pieces:
            end += len(joiner) + len(piece)
            ends.append(end)
        for mask, _forms, folded, *_ in secrets:
            for low in folded:
                found = joined.find(low)
                while found != -1:
                    stop = found + len(low)
                    first, last = bisect.bisect_right(ends, found), bisect.bisect_left(ends, stop)
                    for index in range(first, last + 1) if last > first else ():
                        piece_start = ends[index] - len(pieces[index])
                        begin, finish = max(found, piece_start), min(stop, ends[index])
                        if finish > begin:
                            shift = starts[index] - piece_start
                            spans.append((begin + shift, finish + shift))
                            masks[begin + shift] = mask
                    found = joined.find(low, stop)
    kept, end = [], 0
    for begin, finish in sorted(spans):
        if begin < end:  # overlapping spans: extend the one already masked
            end = max(end, finish)
            continue
        kept += [text[end:begin], masks[begin]]
        end = finish
    return "".join(kept) + text[end:]


def _literal(mask: str) -> str:
    """``mask`` as re.sub's replacement, taken as it is."""
    return mask.replace("\\", "\\\\")


def _option_masked(option: re.Match[str]) -> str:
    value = option[2]
    if len(value) < SHORTEST_SECRET or value.startswith(("-", "<redacted")):
        return option[0]
    return f"{option[1]}<redacted>"


def _secret_assignee(name: str) -> bool:
    if not name:
        return False
    if name.isupper():  # an environment variable's name: the environment's rule
        return bool(SECRET_NAME.search(name))
    return bool(LOWER_SECRET_NAME.search(name))


def _name_before(text: str, at: int) -> str:
    """The name that ends before ``text[at]`` (past blanks and a quote), or ''."""
    end = at
    while end > 0 and text[end - 1] in " \t":
        end -= 1
    if end > 0 and text[end - 1] in "'\"":
        end -= 1
    start = end
    while start > 0 and (text[start - 1].isalnum() or text[start - 1] in "_.-"):
        start -= 1
    if start > 0 and text[start - 1] in "/\\":
        return ""  # the last part of a path ("/etc/passwd: ..."), not a name
    name = text[start:end]
    return name if name[:1].isascii() and name[:1].isalpha() else ""


def _quoted_token(name: str, text: str, value_at: int) -> bool:
    """``token='...'``: a literal given to ``token`` (a hub call's keyword). Unquoted it is
    code (``token=self.token``, ``token=kwargs.get("token")``), as frameworks' source
    lines in a traceback show it, and stays."""
    return name == "token" and text[value_at - 1 : value_at] in ("'", '"')


CODE_NAME = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")
# The first names of code that reads a secret (an attribute, the environment, a call's
# arguments), never a secret's own text.
CODE_ROOTS = frozenset({"self", "cls", "os", "kwargs", "args", "config", "settings", "env"})


def _code(text: str, name: str, value: re.Match[str]) -> bool:
    """Is the unquoted value given to the lower-case ``name`` with ``=`` code rather than a
    value, as the source lines of a traceback show them: the name itself again
    (``password = password or ...``), an attribute or a call of code's own roots
    (``self.api_key``, ``os.environ.get(...)``), or None, True, False? Anything else,
    dots and calls included (``password=prod.db.secret``), is masked as a value."""
    at = value.start(1)
    if text[at - 1 : at] in ("'", '"') or text[value.start() : value.start() + 1] != "=":
        return False
    word = value[1].split("(", 1)[0].split("[", 1)[0]
    if not CODE_NAME.fullmatch(word):
        return False
    own = name.rsplit(".", 1)[-1]
    return word in (own, "None", "True", "False") or word.split(".", 1)[0] in CODE_ROOTS


def _assigned_values_masked(text: str) -> str:
    pieces: list[str] = []
    end = 0
    for separator in SEPARATOR.finditer(text):
        at = separator.start()
        if at < end:
            continue
        # The value first, at C speed: most separators have none ("::" in a case id, "C:\\").
        value = VALUE_AFTER.match(text, at)
        if not value or len(value[1]) < SHORTEST_SECRET or value[1].startswith("<redacted"):
            continue
        name = _name_before(text, at)
        if not _secret_assignee(name) and not _quoted_token(name, text, value.start(1)):
            continue
        if not name.isupper() and _code(text, name, value):
            continue
        pieces += [text[end : value.start(1)], "<redacted>"]
        end = value.end(1)
    return "".join(pieces) + text[end:] if pieces else text


def _shortened_ends_masked(text: str, forms: tuple[str, ...], mask: str) -> str:
    """``text`` with the head of a form that ends at an ellipsis, and the tail of one that
    starts after it, masked: pytest shows a long text as its two ends around ``...``."""
    spans: list[tuple[int, int]] = []
    pieces = _fragments(forms)
    for ellipsis in ELLIPSES:
        at = text.find(ellipsis)
        while at != -1:
            after = at + len(ellipsis)
            head_piece = text[at - SHORTEST_FRAGMENT : at] if at >= SHORTEST_FRAGMENT else ""
            if head_piece not in pieces and text[after : after + SHORTEST_FRAGMENT] not in pieces:
                at = text.find(ellipsis, after)
                continue  # most ellipses: a tensor's, a path's
            for form in forms:
                head = _longest_head_ending_at(text, form, at)
                if head:
                    spans.append((at - head, at))
                tail = _longest_tail_starting_at(text, form, after)
                if tail:
                    spans.append((after, after + tail))
            at = text.find(ellipsis, after)
    return _spans_masked(text, spans, mask)


def _cut_ends_masked(
    text: str, forms: tuple[str, ...], mask: str, *, shortened: bool, cut: bool
) -> str:
    """``text`` with the ends of a form that a tool cut off masked: around an ellipsis
    (``shortened``), at a diff's lines (``cut``)."""
    if shortened:
        text = _shortened_ends_masked(text, forms, mask)
    return _diff_cut_ends_masked(text, forms, mask) if cut else text


def _diff_cut_ends_masked(text: str, forms: tuple[str, ...], mask: str) -> str:
    """``text`` with the tail of a form that starts a diff's line, and the head of one that
    ends it, masked: pytest's diff of two long texts leaves out the identical characters
    they start (or end) with but the last (or first) ten, which a secret may straddle."""
    spans: list[tuple[int, int]] = []
    for line in DIFF_LINE.finditer(text):
        start, end = line.start(1), line.start(1) + len(line[1].rstrip(LINE_END))
        for form in forms:
            tail = _longest_tail_starting_at(text, form, start)
            if tail:
                spans.append((start, start + tail))
            head = _longest_head_ending_at(text, form, end)
            if head:
                spans.append((end - head, end))
    return _spans_masked(text, spans, mask)


def _spans_masked(text: str, spans: list[tuple[int, int]], mask: str) -> str:
    """``text`` with each of ``spans`` (start, stop) replaced by ``mask``, overlaps as one."""
    if not spans:
        return text
    kept, end = [], 0
    for start, stop in sorted(spans):
        if start < end:  # overlapping spans: extend the one already masked
            end = max(end, stop)
            continue
        kept += [text[end:start], mask]
        end = stop
    return "".join(kept) + text[end:]


@functools.lru_cache(maxsize=64)
def _all_fragments(folded: tuple[tuple[str, ...], ...]) -> frozenset[str]:
    """Every piece of SHORTEST_FRAGMENT characters of every secret's forms."""
    return frozenset().union(*(_fragments(forms) for forms in folded))


@functools.lru_cache(maxsize=256)
def _fragments(forms: tuple[str, ...]) -> frozenset[str]:
    """Every piece of SHORTEST_FRAGMENT characters of the forms."""
    size = SHORTEST_FRAGMENT
    return frozenset(form[i : i + size] for form in forms for i in range(len(form) - size + 1))


def _longest_head_ending_at(text: str, form: str, at: int) -> int:
    """The longest length n >= SHORTEST_FRAGMENT with ``text[at-n:at] == form[:n]``; 0 if none."""
    if at < SHORTEST_FRAGMENT or text[at - SHORTEST_FRAGMENT : at] not in form:
        return 0  # the usual answer, found at C speed
    for n in range(min(len(form) - 1, at), SHORTEST_FRAGMENT - 1, -1):
        if text[at - 1] == form[n - 1] and text.startswith(form[:n], at - n):
            return n
    return 0


def _longest_tail_starting_at(text: str, form: str, at: int) -> int:
    """The longest length n >= SHORTEST_FRAGMENT with ``text[at:at+n] == form[-n:]``; 0 if none."""
    if text[at : at + SHORTEST_FRAGMENT] not in form or len(text) - at < SHORTEST_FRAGMENT:
        return 0
    for n in range(min(len(form) - 1, len(text) - at), SHORTEST_FRAGMENT - 1, -1):
        if text[at] == form[-n] and text.startswith(form[-n:], at):
            return n
    return 0
