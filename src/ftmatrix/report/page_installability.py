"""The page's section on the plan's installability findings: per pair of axes with a
pair of values that cannot co-install, a matrix of which pairs can; then every finding
with the resolver's reason."""

from __future__ import annotations

from collections.abc import Mapping
from html import escape
from typing import Any

from ftmatrix.messages import conflict_summary
from ftmatrix.report.installability import FINDING_WORDS

# A finding's pins, as a key: sorted (package, version or None) pairs.
PinsKey = tuple[tuple[str, str | None], ...]
# One pair of axes: (value of the first, value of the second) -> do they co-install.
PairTable = dict[tuple[str, str], bool]


def installability_html(data: Mapping[str, Any] | None) -> str:
    """The section ('' when the plan found every pair co-installs, or was not kept)."""
    if not data or not data.get("pairs"):
        return ""
    reasons = _reasons(data)
    parts = [
        "<h2 id=installability>What cannot co-install</h2>",
        "<p>Pairs of axis values the resolver proved cannot be installed together: findings "
        "of the plan, not cells. Each pair of axes with such a pair is shown; every pair "
        "marked co-install that occurs in an installable combination runs in a cell.</p>",
    ]
    for (a, b), pairs in _pair_tables(data).items():
        if not all(pairs.values()):
            parts.append(_pair_table(a, b, pairs, reasons))
    parts.append(_findings_list(data))
    return "".join(parts)


def _reasons(data: Mapping[str, Any]) -> dict[PinsKey, str]:
    reasons = {}
    for finding in [*data.get("impossible_pairs", []), *data.get("uninstallable_values", [])]:
        reasons[tuple(sorted(finding["pins"].items(), key=str))] = finding.get("reason") or ""
    return reasons


def _pair_tables(data: Mapping[str, Any]) -> dict[tuple[str, str], PairTable]:
    tables: dict[tuple[str, str], PairTable] = {}
    for a, va, b, vb, ok in data["pairs"]:
        tables.setdefault((a, b), {})[(va or "none", vb or "none")] = ok
    return tables


def _pair_table(a: str, b: str, pairs: PairTable, reasons: Mapping[PinsKey, str]) -> str:
    rows = list(dict.fromkeys(va for va, _ in pairs))
    columns = list(dict.fromkeys(vb for _, vb in pairs))
    head = "".join(f"<th>{escape(b)} {escape(c)}</th>" for c in columns)
    body = []
    for row in rows:
        tds = []
        for column in columns:
            ok = pairs.get((row, column))
            why = _why(reasons, ((a, _pin(row)), (b, _pin(column))))
            mark = "" if ok is None else ("co-install" if ok else "cannot")
            css = "pass" if ok else "uninstallable"
            tds.append(f"<td class={css} title='{escape(why)}'>{mark}</td>")
        body.append(f"<tr><th>{escape(a)} {escape(row)}</th>{''.join(tds)}</tr>")
    return f"<table class=installability><tr><th></th>{head}</tr>{''.join(body)}</table>"


def _pin(value: str) -> str | None:
    return None if value == "none" else value


def _why(reasons: Mapping[PinsKey, str], pins: PinsKey) -> str:
    """The reason the pair cannot co-install: its own finding's, else the first of a
    value of it that installs with nothing."""
    key = tuple(sorted(pins, key=str))
    single = [v for k, v in reasons.items() if len(k) == 1 and k[0] in key]
    return reasons.get(key) or (single[0] if single else "")


def _findings_list(data: Mapping[str, Any]) -> str:
    impossible = [
        *data.get("uninstallable_values", []),
        *data.get("impossible_pairs", []),
        *data.get("uncovered_pairs", []),
        *data.get("unresolved", []),
    ]
    if not impossible:
        return ""
    items = "".join(
        f"<li><code>{escape(' x '.join(f'{k} {v}' for k, v in f['pins'].items()))}</code> "
        f"({escape(FINDING_WORDS.get(f.get('kind', ''), ''))}): "
        f"{escape(conflict_summary(f.get('reason') or ''))}</li>"
        for f in impossible
    )
    return f"<ul class=installability>{items}</ul>"
