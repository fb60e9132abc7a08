"""What a report must say before its grid: a run still going on (the report is partial),
record lines that could not be read or are another run's or cell's (in a records file, or
kept apart in its cell's quarantine file) or records kept out of the history (finished
after the report's time: a clock ahead), planned cells that left no record, and cells a
run stopped in the middle of.

Shown first in the HTML page and the Markdown summary, and listed in results.json
(``in_progress``, ``unreadable_records``, ``planned_without_records``,
``unfinished_cells``), so no reader
takes a partial or damaged history for a whole one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from html import escape
from pathlib import Path

from ftmatrix.cell.files import QUARANTINE_SUFFIX
from ftmatrix.cell.records import lines_kept_apart, quarantined_lines
from ftmatrix.cell.signature import clean_paths
from ftmatrix.live_runs import RunInProgress
from ftmatrix.report.md_text import md_code, md_text
from ftmatrix.report.unfinished import UnfinishedCell


def quarantined(records_root: Path) -> list[str]:
    """One line per quarantine file under ``records_root``: how many lines it keeps."""
    pattern = f"*{QUARANTINE_SUFFIX}"
    found = []
    for path in sorted(records_root.rglob(pattern)) if records_root.is_dir() else []:
        found.append(
            f"{path}: {lines_kept_apart(*quarantined_lines(path))} kept apart "
            "(quarantined); a resumed run ran their cases again"
        )
    return found


# What the page, summary.md and the command's warning say of the lines the report set aside.
UNREADABLE = "record line(s) could not be read or were kept out of the history"


def notices_html(in_progress: Sequence[RunInProgress], unreadable: Sequence[str]) -> str:
    """The notices section of the page ('' when there is nothing to say)."""
    parts = [
        f"<section id=in-progress class=problems><h2>{escape(run.describe())}</h2></section>"
        for run in in_progress
    ]
    parts.append(
        _section_html(
            "unreadable",
            f"{len(unreadable)} {UNREADABLE}",
            [escape(clean_paths(p)) for p in unreadable],
        )
    )
    return "".join(parts)


def notices_markdown(in_progress: Sequence[RunInProgress], unreadable: Sequence[str]) -> list[str]:
    """The notices as Markdown lines, for the top of summary.md."""
    lines = [f"**{run.describe()}**" for run in in_progress]
    if unreadable:
        lines.append(f"**{len(unreadable)} {UNREADABLE}:**")
        lines += [f"- {clean_paths(p)}" for p in unreadable]
    return [*lines, ""] if lines else []


def missing_headline(count: int) -> str:
    cells = "cell" if count == 1 else "cells"
    return (
        f"{count} planned {cells} produced no records tonight (the job failed before its "
        "records were kept, or was cancelled): no verdict for them"
    )


def missing_html(missing: Sequence[str]) -> str:
    """The page's section on planned cells without records ('' when there are none)."""
    items = [_html_code(label) for label in missing]
    return _section_html("missing", missing_headline(len(missing)), items)


def missing_markdown(missing: Sequence[str]) -> list[str]:
    """The same as Markdown lines, for summary.md."""
    return _section_markdown(missing_headline(len(missing)), [md_code(m) for m in missing])


def unfinished_headline(cells: Sequence[UnfinishedCell]) -> str:
    without = sum(cell.without_record or 0 for cell in cells)
    one = len(cells) == 1
    return (
        f"{len(cells)} {'cell' if one else 'cells'} stopped before finishing "
        f"{'its' if one else 'their'} cases (the run was stopped or killed): {without} "
        "collected case(s) have no record, so no verdict for them; resume the run to finish "
        f"{'it' if one else 'them'}"
    )


def _unfinished_item(
    cell: UnfinishedCell, code: Callable[[str], str], text: Callable[[str], str]
) -> str:
    return (
        f"{cell.stopped(code, text)}; resume: {code(cell.resume())} before the run's command "
        f"({code('ftmatrix run')} or {code('nox -s matrix')}) runs only the cases without a "
        "record"
    )


def unfinished_html(cells: Sequence[UnfinishedCell]) -> str:
    """The page's section on cells a run stopped in ('' when there are none)."""
    items = [_unfinished_item(cell, _html_code, escape) for cell in cells]
    return _section_html("unfinished", unfinished_headline(cells), items)


def unfinished_markdown(cells: Sequence[UnfinishedCell]) -> list[str]:
    """The same as Markdown lines, for summary.md."""
    items = [_unfinished_item(cell, md_code, md_text) for cell in cells]
    return _section_markdown(md_text(unfinished_headline(cells)), items)


def _section_html(anchor: str, headline: str, items: Sequence[str]) -> str:
    """A problems section of the page: its headline and its items (HTML already), or ''."""
    if not items:
        return ""
    listed = "".join(f"<li>{item}</li>" for item in items)
    return (
        f"<section id={anchor} class=problems><h2>{escape(headline)}</h2>"
        f"<ul>{listed}</ul></section>"
    )


def _section_markdown(headline: str, items: Sequence[str]) -> list[str]:
    """The same in summary.md: the headline in bold, then one line per item (Markdown)."""
    if not items:
        return []
    return [f"**{headline}**", "", *(f"- {item}" for item in items), ""]


def _html_code(text: str) -> str:
    return f"<code>{escape(text)}</code>"
