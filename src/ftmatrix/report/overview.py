"""The report's first screen: the headline, compatibility tables and a compact grid.

The headline says what broke and what was fixed since the previous run, with the
packages that moved, how many cells ran and how many could not install, and the
largest causes. A compatibility table answers "does trl X work with transformers Y
for GRPO?": package A's versions x package B's versions for one operation, one small
square per pair coloured by the worst status, with the count. The compact grid shows
cells x operations as small squares without messages, in the manner of pytorch's HUD.

Pure functions to HTML. The default view is rendered here, so the page reads with
scripts off; ``assets/overview.js`` redraws it from the embedded grid data when the
reader picks other packages or an operation, and lists the records of a square.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from html import escape

from ftmatrix.cell.record import WHOLE_CELL, Record
from ftmatrix.cell.status import Status
from ftmatrix.known_issues import KnownIssue
from ftmatrix.report.causes import Cause, cut, web_link
from ftmatrix.report.changes import Comparison, StatusChange
from ftmatrix.report.first_screen import PREFERRED_AXES, AxesShown, cell_names
from ftmatrix.report.grid import (
    CASE_AXES,
    CELL_AXES,
    GridEntry,
    axis_value,
    status_css_name,
    worst_of,
)
from ftmatrix.versions import version_order

ALL_OPERATIONS = ""
# The causes the headline names; the rest are a link away, in "Failures by cause".
HEADLINE_CAUSES = 5
HEADLINE_TITLE = 75  # characters of a cause's title: one line at 1400 px


def package_axes(values: dict[str, list[str]]) -> list[str]:
    """The pinned packages with more than one value: the axes a compatibility table can use."""
    fixed = set(CELL_AXES) | set(CASE_AXES)
    return [a for a, vs in values.items() if a not in fixed and len(vs) > 1]


def default_pair(values: dict[str, list[str]]) -> tuple[str, str] | None:
    """The two packages of the first compatibility table (rows, columns)."""
    axes = package_axes(values)
    # The question people ask most ("does trl X work with transformers Y?") first.
    if all(a in axes for a in PREFERRED_AXES):
        return PREFERRED_AXES
    return (axes[0], axes[1]) if len(axes) >= 2 else None


def render_headline(
    records: Sequence[Record],
    changes: Sequence[StatusChange],
    causes: Sequence[Cause],
    *,
    comparison: Comparison,
) -> str:
    """What happened, in a few lines: runs and cells, breaks and fixes, largest causes."""
    cells = {r.cell_id for r in records}
    not_installed = {
        r.cell_id
        for r in records
        if r.case == WHOLE_CELL and r.status in (Status.UNINSTALLABLE, Status.INSTALL_ERROR)
    }
    # Reused cells did not run tonight: their results stand from the run they name.
    reused = {r.cell_id: r.reused_from for r in records if r.reused_from}
    ran = cells - not_installed - set(reused)
    results = sum(1 for r in records if r.case != WHOLE_CELL and r.cell_id in ran)
    facts = [f"<strong>{len(ran)}</strong> {_plural(len(ran), 'cell')} ran {_n(results, 'case')}"]
    if not_installed:
        facts.append(f"<strong>{len(not_installed)}</strong> could not install")
    if reused:
        runs = sorted(set(reused.values()))
        since = runs[0] if len(runs) == 1 else f"{runs[0]} or later"
        facts.append(
            f"<strong>{len(reused)}</strong> {_plural(len(reused), 'cell')} reused "
            f"(unchanged since {escape(since)})"
        )
    parts = [f"<p class=facts>{'; '.join(facts)}.</p>"]
    parts.append(_changes_headline(changes, comparison))
    if causes:
        items = "".join(_cause_item(c) for c in causes[:HEADLINE_CAUSES])
        more = (
            f' <a href="#causes">{len(causes) - HEADLINE_CAUSES} more below</a>'
            if len(causes) > HEADLINE_CAUSES
            else ""
        )
        parts.append(
            f"<p class=causes-head>{_n(len(causes), 'cause')}, largest first:{more}</p>"
            f"<ul class=causes>{items}</ul>"
        )
    return f"<section id=headline aria-label=headline>{''.join(parts)}</section>"


def _plural(count: int, word: str) -> str:
    return word if count == 1 else word + "s"


def _n(count: int, word: str) -> str:
    return f"{count} {_plural(count, word)}"


def _cause_item(cause: Cause) -> str:
    """A cause in the headline: its title (a link to the owning project's report), the
    known issue's name, and how much it broke (a link to its section below)."""
    short = escape(cut(cause.title, HEADLINE_TITLE))
    title = f'<span title="{escape(cause.title)}">{short}</span>'
    if cause.link:
        title = (
            f'<a class=issue href="{escape(cause.link)}" title="{escape(cause.title)}">{short}</a>'
        )
    if cause.entries:
        names = ", ".join(_entry_name(e) for e in cause.entries)
        word = "known issue" if len(cause.entries) == 1 else "known issues"
        known = f" <span class=known>{word} {names}</span>"
    else:
        known = " <strong class=new>unexplained</strong>"
    count = f'<a href="#group={cause.anchor}" data-group="{cause.anchor}">{cause.count_text()}</a>'
    return f"<li>{count}: {title}{known}</li>"


def _entry_name(entry: KnownIssue) -> str:
    link = web_link(entry)
    if link:
        return f'<a href="{escape(link)}">{escape(entry.id)}</a>'
    return f"{escape(entry.id)} (no upstream report yet)"


def _changes_headline(changes: Sequence[StatusChange], comparison: Comparison) -> str:
    if not changes:
        return f"<p class=changed>{escape(comparison.unchanged())}</p>"
    # One line per (kind, packages that moved): "broke: 8 results in 2 cells when ...".
    lines: dict[tuple[str, str], list[StatusChange]] = {}
    for change in changes:
        moved = ", ".join(
            f"{k} {a or 'none'} \u2192 {b or 'none'}" for k, (a, b) in change.moved_packages.items()
        )
        lines.setdefault((change.kind, moved), []).append(change)
    items = []
    for (kind, moved), members in sorted(
        lines.items(), key=lambda kv: (kv[0][0] != "regression", -len(kv[1]))
    ):
        word = "broke" if kind == "regression" else "fixed"
        cells = len({c.after.cell_id for c in members})
        operations = ", ".join(sorted({c.after.operation for c in members}))
        because = f" when {escape(moved)} moved" if moved else " with no package moving"
        items.append(
            f"<li class={kind}><strong>{word}</strong>: {_n(len(members), 'result')}"
            f" ({escape(operations)}) in {_n(cells, 'cell')}{because}</li>"
        )
    return f"<ul class=changed>{''.join(items)}</ul>"


def render_compatibility(entries: Sequence[GridEntry], values: dict[str, list[str]]) -> str:
    """The compatibility table's controls and its default view (all operations)."""
    pair = default_pair(values)
    if pair is None:
        return ""
    axes = package_axes(values)

    def options(chosen: str) -> str:
        return "".join(
            f'<option value="{escape(a)}"{" selected" if a == chosen else ""}>{escape(a)}</option>'
            for a in axes
        )

    operations = "".join(
        f'<option value="{escape(op)}">{escape(op)}</option>' for op in values["operation"]
    )
    return (
        "<section id=compat aria-labelledby=compat-title>"
        "<h2 id=compat-title>Which versions work together</h2>"
        "<form class=compat-controls id=compat-controls onsubmit='return false'>"
        f"<label>rows <select id=compat-a>{options(pair[0])}</select></label> "
        f"<label>columns <select id=compat-b>{options(pair[1])}</select></label> "
        "<label>operation <select id=compat-op>"
        f'<option value="">all (worst status)</option>{operations}</select></label></form>'
        f"<div id=compat-holder>{compatibility_table(entries, pair[0], pair[1])}</div>"
        "</section>"
    )


def compatibility_table(
    entries: Sequence[GridEntry], a: str, b: str, operation: str = ALL_OPERATIONS
) -> str:
    """Package ``a``'s versions x package ``b``'s: a square per pair, worst status and count."""
    buckets: dict[tuple[str, str], list[Status]] = {}
    for entry in entries:
        if operation and entry.operation != operation:
            continue
        key = (axis_value(entry, a), axis_value(entry, b))
        buckets.setdefault(key, []).append(entry.record.status)
    rows = sorted({k[0] for k in buckets}, key=version_order)
    columns = sorted({k[1] for k in buckets}, key=version_order)
    head = "".join(f"<th scope=col>{escape(c)}</th>" for c in columns)
    body = []
    for row in rows:
        tds = []
        for column in columns:
            statuses = buckets.get((row, column))
            if not statuses:
                tds.append("<td></td>")
                continue
            tds.append(
                "<td>"
                + _square(
                    statuses,
                    f"{a} {row} \u00d7 {b} {column}",
                    {"a": row, "b": column},
                )
                + "</td>"
            )
        body.append(f"<tr><th scope=row>{escape(row)}</th>{''.join(tds)}</tr>")
    what = escape(operation or "all operations")
    return (
        f"<table class=compat><caption>{escape(a)} \u00d7 {escape(b)}, {what}</caption>"
        f"<thead><tr><th scope=col>{escape(a)} \\ {escape(b)}</th>{head}</tr></thead>"
        f"<tbody>{''.join(body)}</tbody></table>"
    )


def _installed_if_any(statuses: Sequence[Status]) -> Sequence[Status]:
    """What a square is judged by: the results of cells that installed, where there are any.

    A cell that could not install pins more than the square's two versions (unsloth with
    a trl it caps, say): that is no verdict on the pair when other cells with the same
    two versions installed and ran. The tooltip still counts it.
    """
    installed = [s for s in statuses if s is not Status.UNINSTALLABLE]
    return installed or statuses


def _square(statuses: Sequence[Status], where: str | None, data: dict[str, str]) -> str:
    """A square button: the worst status's colour and count; ``where`` titles it with
    the breakdown (the compact grid's squares get theirs from the script on hover,
    which keeps a 500-cell grid small)."""
    worst, count, _ = worst_of(_installed_if_any(statuses))
    title = ""
    if where is not None:
        tally = Counter(statuses)
        breakdown = ", ".join(
            f"{tally[s]} {s.value}" for s in sorted(tally, key=lambda s: -s.severity)
        )
        title = f' title="{escape(where)}: {escape(breakdown)}"'
    attributes = "".join(f' data-{k}="{escape(v)}"' for k, v in data.items())
    return (
        f'<button type=button class="sq s-{status_css_name(worst)}"{attributes}{title}>'
        f"{count}</button>"
    )


def fixed_axes_html(shown: AxesShown) -> str:
    """What every cell shares, said once above the grids that name cells by the rest."""
    if not shown.fixed:
        return ""
    varying = ", ".join(shown.varying) or "nothing: one cell"
    return (
        f"<p class=fixed-axes>Every cell: {escape(shown.fixed_text())}. "
        f"Cells differ in {escape(varying)}.</p>"
    )


def render_hud(entries: Sequence[GridEntry], values: dict[str, list[str]], shown: AxesShown) -> str:
    """Cells x operations as small squares: the worst status of the cell's cases there.

    Each row is named by the axes that vary (``tf4.57.6``), its full label in its title
    and ``data-cell``; what every cell shares is said once above the table."""
    operations = values["operation"]
    if not entries or not operations:
        return ""
    buckets: dict[tuple[str, str], list[Status]] = {}
    for entry in entries:
        buckets.setdefault((entry.record.cell_label, entry.operation), []).append(
            entry.record.status
        )
    labels = cell_names((e.record for e in entries), shown.varying)
    head = "".join(
        f'<th scope=col><span class=vertical title="{escape(op)}">{escape(op)}</span></th>'
        for op in operations
    )
    body = []
    for label in sorted(labels):
        tds = "".join(
            "<td>"
            + (
                _square(statuses, None, {"op": op})
                if (statuses := buckets.get((label, op)))
                else ""
            )
            + "</td>"
            for op in operations
        )
        body.append(
            f'<tr><th scope=row class=label data-cell="{escape(label)}" title="{escape(label)}">'
            f"{escape(labels[label])}</th>{tds}</tr>"
        )
    return (
        "<section id=hud aria-labelledby=hud-title>"
        "<h2 id=hud-title>Every cell, every operation</h2>"
        "<p class=meta>One square per cell and operation: the worst status of its cases"
        " and how many have it. Hover for the breakdown, click for the records.</p>"
        f"<table class=hud><thead><tr><th scope=col>cell</th>{head}</tr></thead>"
        f"<tbody>{''.join(body)}</tbody></table></section>"
    )
