"""The page's sections on what went wrong: the changes since the previous run, failures
grouped by cause (with the known issue each is linked to), and every failure's record
in full with the command that reproduces it."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from html import escape
from typing import Any

from ftmatrix.cell.record import WHOLE_CELL, Record
from ftmatrix.cell.status import PROBLEM_STATUSES
from ftmatrix.known_issues import KnownIssue
from ftmatrix.messages import headline
from ftmatrix.report.causes import Cause, cut, web_link
from ftmatrix.report.changes import Comparison, StatusChange
from ftmatrix.report.grid import Grid, record_anchor, reuse_note
from ftmatrix.report.status_chips import status_chip
from ftmatrix.versions import version_order


def reproduce_command(record: Record) -> str:
    """The one command that rebuilds this cell and reruns this case locally."""
    selector = shlex.quote(f"matrix({record.cell_label})")
    command = f"nox -s {selector}"
    if record.case != WHOLE_CELL:
        command += f" -- {shlex.quote(record.case)}"
    return command


def changes_html(changes: Sequence[StatusChange], *, comparison: Comparison) -> str:
    if not changes:
        return f"<h2>Changed since the previous run</h2><p>{escape(comparison.unchanged())}</p>"
    items = []
    for change in changes:
        moved = ", ".join(
            f"{k} {a or 'none'} &rarr; {b or 'none'}"
            for k, (a, b) in (
                (escape(k), (escape(a or ""), escape(b or "")))
                for k, (a, b) in change.moved_packages.items()
            )
        )
        items.append(
            f"<li class={change.kind}><strong>{change.kind}</strong> "
            f"<code>{escape(change.after.cell_label)}</code> "
            f"<code>{escape(change.after.case)}</code>: "
            f"{status_chip(change.before.status)} &rarr; {status_chip(change.after.status)}"
            + (f" <span class=moved>packages that moved: {moved}</span>" if moved else "")
            + "</li>"
        )
    return f"<h2>Changed since the previous run</h2><ul class=changes>{''.join(items)}</ul>"


def causes_html(causes: Sequence[Cause]) -> str:
    """Failures by cause: one section per known issue (or unexplained signature)."""
    if not causes:
        return ""
    return "<h2 id=causes>Failures by cause</h2>" + "".join(_cause(c) for c in causes)


def _cause(cause: Cause) -> str:
    title = escape(cause.title)
    if cause.link:
        title = f'<a class=issue href="{escape(cause.link)}">{title}</a>'
    if cause.entries:
        claims = cause.groups[0].claims
        explained = "".join(_known_html(e, claims.get(e.id, "")) for e in cause.entries)
    else:
        explained = (
            "<p><strong class=new>unexplained</strong>: no known issue's signature fits it</p>"
        )
    late = sorted({x for g in cause.groups for x in g.late_fixes})
    late_html = (
        f"<p class=late>Still failing after its fix: {escape(', '.join(late))}</p>" if late else ""
    )
    bad = "".join(
        f"<li>first bad {escape(str(f.get('axis')))} {escape(str(f.get('first_bad')))} "
        f"(last good {escape(str(f.get('last_good')))})</li>"
        for f in {repr(f): f for g in cause.groups for f in g.first_bad}.values()
    )
    return (
        f'<section class=group id="{cause.anchor}"><h3>{status_chip(cause.status)} {title}</h3>'
        f"{explained}{_signatures(cause)}{late_html}"
        f"<p class=versions>Versions: {_versions(cause.records)}</p>"
        + (f"<ul class=first-bad>{bad}</ul>" if bad else "")
        + f"<details class=cells><summary>{cause.count_text()}</summary>{_cells(cause)}</details>"
        "</section>"
    )


def _signatures(cause: Cause) -> str:
    """How it broke: each signature's readable line, the whole message a click away."""
    items = []
    for group in cause.groups:
        line = group.blame or headline(group.message)
        kind = (group.exception_type or "").rsplit(".", 1)[-1]
        items.append(
            f"<li><details class=signature><summary>{len(group.records)} &times; "
            f"<code>{escape(kind)}</code> {escape(cut(line))}</summary>"
            f"<pre class=message>{escape(group.message)}</pre></details></li>"
        )
    return f"<ul class=signatures>{''.join(items)}</ul>"


def _versions(records: Sequence[Record]) -> str:
    seen: dict[str, set[str]] = {}
    for record in records:
        for package, version in record.pins.items():
            seen.setdefault(package, set()).add(version or "none")
    return "; ".join(
        f"{escape(k)} {escape(', '.join(sorted(v, key=version_order)))}" for k, v in seen.items()
    )


def _cells(cause: Cause) -> str:
    """Each cell once, its cases under it, each a link to its record."""
    by_cell: dict[str, list[Record]] = {r.cell_label: [] for r in cause.records}
    for record in cause.records:
        by_cell[record.cell_label].append(record)
    items = "".join(
        f"<li><code>{escape(label)}</code><ul>"
        + "".join(
            f'<li><a href="#{record_anchor(r)}"><code>{escape(r.case)}</code></a></li>'
            for r in records
        )
        + "</ul></li>"
        for label, records in by_cell.items()
    )
    return f"<ul class=cause-cells>{items}</ul>"


def _known_html(cause: KnownIssue, proven: str) -> str:
    """The known issue of a cause: its owning report, its range, its workaround."""
    url = web_link(cause)
    link = (
        f'<a href="{escape(url)}">{escape(cause.id)}</a>'
        if url
        else f"{escape(cause.id)} ({escape(cause.reported)})"
    )
    text = f"known issue {link} <span class=claim>{escape(proven)}</span>"
    if cause.workaround:
        text += f" <em>Workaround: {escape(cause.workaround)}</em>"
    return f"<p class=cause>{text}</p>"


def failures_html(grid: Grid) -> str:
    problems = [r for r in grid.records if r.status in PROBLEM_STATUSES]
    if not problems:
        return "<h2>Failures</h2><p>None.</p>"
    items = [_failure(r) for r in sorted(problems, key=lambda r: (r.cell_label, r.case))]
    return "<h2>Failures</h2>" + "".join(items)


def _failure(record: Record) -> str:
    facts = [
        ("status", status_chip(record.status)),
        ("case", f"<code>{escape(record.case)}</code>"),
        ("operation", escape(record.operation)),
        ("exception", f"<code>{escape(record.exception_type or '')}</code>"),
        ("framework frame", f"<code>{escape(record.framework_frame or '')}</code>"),
        ("signature", f"<code>{escape(record.signature or '')}</code>"),
        ("reproduce", f"<code>{escape(reproduce_command(record))}</code>"),
        ("pins", escape(", ".join(f"{k}=={v}" for k, v in record.pins.items()))),
        ("hardware", escape(_hardware_text(record.hardware))),
        ("result", escape(reuse_note(record) or "")),
    ]
    rows = "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in facts if v)
    message = record.message or record.reason or ""
    packages = ", ".join(
        f"{k}=={v}" + (" (host)" if k in record.host_packages else "")
        for k, v in record.packages.items()
    )
    traceback = (
        f"<details><summary>traceback</summary><pre>{escape(record.traceback)}</pre></details>"
        if record.traceback
        else ""
    )
    return (
        f'<details class=failure id="{record_anchor(record)}">'
        f"<summary>{status_chip(record.status)} <code>{escape(record.cell_label)}</code> "
        f"<code>{escape(record.case)}</code></summary>"
        f"<table>{rows}</table><pre class=message>{escape(message)}</pre>{traceback}"
        f"<details><summary>environment ({len(record.packages)} packages)</summary>"
        f"<p class=packages>{escape(packages)}</p></details></details>"
    )


def _hardware_text(hardware: Any) -> str:
    if not hardware:
        return ""
    gpus = hardware.get("gpus") or []
    gpu_text = ", ".join(str(g.get("name")) for g in gpus) or "no GPU"
    return f"{hardware.get('cpu', '?')} ({hardware.get('cpu_count', '?')} CPUs), {gpu_text}"
