"""What a report must say before its grid: a run still going on (the report is partial),
and record lines that could not be read (damaged, or kept apart in a quarantine file).

Shown first in the HTML page and the Markdown summary, and listed in results.json
(``in_progress``, ``unreadable_records``), so no reader takes a partial or damaged
history for a whole one.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from pathlib import Path

from ftmatrix.cell.records import quarantine_path
from ftmatrix.cell.signature import clean_paths
from ftmatrix.run_progress import RunInProgress


def quarantined(records_root: Path) -> list[str]:
    """One line per quarantine file under ``records_root``: how many lines it keeps."""
    pattern = quarantine_path(Path("*.jsonl")).name
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
