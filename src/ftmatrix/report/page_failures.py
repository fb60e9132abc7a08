"""The page's sections on what went wrong: the changes since the previous run, failures
grouped by cause (with the known issue each is linked to), and every failure's record
in full with the command that reproduces it."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from html import escape
from typing import Any

from ftmatrix.cell.records import WHOLE_CELL, Record
from ftmatrix.cell.status import PROBLEM_STATUSES
from ftmatrix.known_issues import KnownIssue
from ftmatrix.messages import headline
from ftmatrix.report.changes import StatusChange
from ftmatrix.report.failures import FailureGroup
from ftmatrix.report.grid import Grid, record_anchor, reuse_note
from ftmatrix.report.overview import group_id
from ftmatrix.report.status_chips import status_chip


def reproduce_command(record: Record) -> str:
    """The one command that rebuilds this cell and reruns this case locally."""
    selector = shlex.quote(f"matrix({record.cell_label})")
    command = f"nox -s {selector}"
    if record.case != WHOLE_CELL:
        command += f" -- {shlex.quote(record.case)}"
    return command


def changes_html(changes: Sequence[StatusChange]) -> str:
    if not changes:
        return "<h2>Changed since the previous run</h2><p>Nothing changed.</p>"
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


def groups_html(groups: Sequence[FailureGroup]) -> str:
    if not groups:
        return ""
    return "<h2>Failures by cause</h2>" + "".join(_group(g) for g in groups)


def _group(group: FailureGroup) -> str:
    first = headline(group.message)
    if group.causes:
        known = "".join(_cause_html(c, group.claims[c.id]) for c in group.causes)
    else:
        known = "<p><strong class=new>unexplained</strong>: no known issue's signature fits it</p>"
    late = (
        f"<p class=late>Still failing after its fix: {escape(', '.join(group.late_fixes))}</p>"
        if group.late_fixes
        else ""
    )
    bad = "".join(
        f"<li>first bad {escape(str(f.get('axis')))} {escape(str(f.get('first_bad')))} "
        f"(last good {escape(str(f.get('last_good')))})</li>"
        for f in group.first_bad
    )
    versions = "; ".join(f"{escape(k)} {escape(', '.join(v))}" for k, v in group.versions.items())
    cells = "".join(
        f'<li><a href="#{record_anchor(r)}"><code>{escape(r.cell_label)}</code> '
        f"<code>{escape(r.case)}</code></a></li>"
        for r in group.records
    )
    return (
        f'<section class=group id="{group_id(group)}"><h3>{status_chip(group.status)} '
        f"{len(group.records)} x "
        f"<code>{escape(group.exception_type or '')}</code> {escape(first[:300])}</h3>"
        + (f"<p class=blame>{escape(group.blame)}</p>" if group.blame else "")
        + f"{known}{late}<p class=versions>Versions: {versions}</p>"
        + (f"<ul class=first-bad>{bad}</ul>" if bad else "")
        + f"<details><summary>{len(group.records)} cells</summary><ul>{cells}</ul></details>"
        "</section>"
    )


def _cause_html(cause: KnownIssue, proven: str) -> str:
    """One known issue beside a failure group: its owning report, its range, its workaround."""
    link = (
        f'<a href="{escape(cause.upstream)}">{escape(cause.id)}</a>'
        if cause.upstream and cause.upstream.startswith("https://")
        else f"{escape(cause.id)} ({escape(cause.reported)})"
    )
    text = f"known issue {link}: {escape(cause.title)} <span class=claim>{escape(proven)}</span>"
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
