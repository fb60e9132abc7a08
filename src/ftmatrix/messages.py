"""The part of a record's text worth reading: its root message, and the one line of a
message that a grid cell, a failure group or a check verdict shows.

Below the report and check, which both show records' messages (check once imported
the report for these two).
"""

from __future__ import annotations

from ftmatrix.cell.records import Record
from ftmatrix.cell.signature import unwrap_message
from ftmatrix.resolve import conflict_summary


def root_message(record: Record) -> str:
    """The message worth reading: the root cause's, a wrapper's inner text, or the reason."""
    text = record.root_message or unwrap_message(record.message or "") or record.reason or ""
    return text.strip()


def headline(message: str | None) -> str:
    """The line of a message worth showing in a grid: the first, and the next when the
    first only announces it ("Failed to import X because of the following error:")."""
    lines = [line.strip() for line in (message or "").strip().splitlines() if line.strip()]
    if not lines:
        return ""
    if lines[0].startswith("No solution found"):
        return conflict_summary(message or "")  # the resolver's first step names the conflict
    if lines[0].endswith(":") and len(lines) > 1:
        return f"{lines[0]} {lines[1]}"
    return lines[0]
