"""What must never be published: secrets masked in every text a record or the console carries.

By value, not by field: a secret reaches a record through a message, a traceback, a
parametrize id, a ``not_applicable()`` reason or a metric alike, so every string of a
record is passed through :func:`redact_text` where records are written
(:func:`redact_data`), and the lines a cell prints are too. Masked:

- the values of environment variables whose names look secret (TOKEN, SECRET, KEY,
  PASSWORD, PASSWD, CREDENTIAL, AUTH), six characters or longer;
- the userinfo of any URL (``https://user:pass@host`` -> ``https://<redacted>@host``),
  whatever the variable it came from is called;
- the known token shapes of Hugging Face, GitHub, AWS, OpenAI and W&B.

Standard library only (runs inside cells). Every pattern is linear in the text's length.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

SECRET_NAME = re.compile(r"TOKEN|SECRET|KEY|PASSWORD|PASSWD|CREDENTIAL|AUTH", re.IGNORECASE)
# Short values are left alone: masking '1' or 'true' everywhere would garble messages
# while protecting nothing.
SHORTEST_SECRET = 6

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
# A W&B key is 40 hex digits, like a commit hash: masked where it is named.
WANDB_KEY_ASSIGNED = re.compile(r"(WANDB_API_KEY\s*[=:]\s*['\"]?)[A-Za-z0-9_-]{20,}")


def secret_values(env: Mapping[str, str]) -> list[tuple[str, str]]:
    """(name, value) of the variables whose values are masked, longest value first."""
    found = [
        (name, value)
        for name, value in env.items()
        if SECRET_NAME.search(name) and len(value) >= SHORTEST_SECRET
    ]
    return sorted(found, key=lambda pair: -len(pair[1]))


def redact_text(text: str, env: Mapping[str, str]) -> str:
    """``text`` with every secret masked (see the module's list)."""
    return _masked(text, secret_values(env))


def redact_data(data: Any, env: Mapping[str, str]) -> Any:
    """``data`` (JSON-like: dicts, lists, strings) with every string and key redacted."""
    # The environment is scanned once for the whole of ``data``, not once per string: a
    # record holds a few hundred (every installed package's name and version).
    return _masked_data(data, secret_values(env))


def _masked(text: str, secrets: list[tuple[str, str]]) -> str:
    # A URL's whole userinfo first: the user name goes with the password.
    text = URL_USERINFO.sub(r"\1<redacted>@", text)
    for name, value in secrets:
        if value in text:
            text = text.replace(value, f"<redacted:{name}>")
    text = WANDB_KEY_ASSIGNED.sub(r"\1<redacted>", text)
    return TOKEN_SHAPES.sub("<redacted>", text)


def _masked_data(data: Any, secrets: list[tuple[str, str]]) -> Any:
    if isinstance(data, str):
        return _masked(data, secrets)
    if isinstance(data, dict):
        return {_masked_data(k, secrets): _masked_data(v, secrets) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [_masked_data(v, secrets) for v in data]
    return data
