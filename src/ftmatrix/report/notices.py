"""What a report must say before its grid: a run still going on (the report is partial),
record lines that could not be read (damaged, or kept apart in a quarantine file), and
planned cells that left no record.

Shown first in the HTML page and the Markdown summary, and listed in results.json
(``in_progress``, ``unreadable_records``, ``planned_without_records``), so no reader
takes a partial or damaged history for a whole one.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from pathlib import Path

from ftmatrix.cell.files import QUARANTINE_SUFFIX
from ftmatrix.cell.signature import clean_paths
from ftmatrix.live_runs import RunInProgress
from ftmatrix.report.md_text import md_code


def quarantined(records_root: Path) -> list[str]:
    """One line per quarantine file under ``records_root``: how many lines it keeps."""
    pattern = f"*{QUARANTINE_SUFFIX}"
    found = []
    for path in sorted(records_root.rglob(pattern)) if records_root.is_dir() else []:
        lines = sum(1 for line in path.read_bytes().split(b"\n") if line.strip())
        found.append(
            f"{path}: {lines} unreadable record line(s) kept apart (quarantined); "
            "a resumed run ran their cases again"
        )
    return found


def notices_html(in_progress: Sequence[RunInProgress], unreadable: Sequence[str]) -> str:
    """The notices section of the page ('' when there is nothing to say)."""
    parts = [
        f"<section id=in-progress class=problems><h2>{escape(run.describe())}</h2></section>"
        for run in in_progress
    ]
    if unreadable:
        items = "".join(f"<li>{escape(clean_paths(p))}</li>" for p in unreadable)
        parts.append(
            f"<section id=unreadable class=problems><h2>{len(unreadable)} record line(s) "
            f"could not be read</h2><ul>{items}</ul></section>"
        )
    return "".join(parts)


def notices_markdown(in_progress: Sequence[RunInProgress], unreadable: Sequence[str]) -> list[str]:
    """The notices as Markdown lines, for the top of summary.md."""
    lines = [f"**{run.describe()}**" for run in in_progress]
    if unreadable:
        lines.append(f"**{len(unreadable)} record line(s) could not be read:**")
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
    if not missing:
        return ""
    items = "".join(f"<li><code>{escape(label)}</code></li>" for label in missing)
    return (
        f"<section id=missing class=problems><h2>{escape(missing_headline(len(missing)))}"
        f"</h2><ul>{items}</ul></section>"
    )


def missing_markdown(missing: Sequence[str]) -> list[str]:
    """The same as Markdown lines, for summary.md."""
    if not missing:
        return []
    return [f"**{missing_headline(len(missing))}**", "", *(f"- {md_code(m)}" for m in missing), ""]
