"""The part of a record's text worth reading: its root message, and the one line of a
message that a grid cell, a failure group or a check verdict shows.

Below the report and check, which both show records' messages (check once imported
the report for these two), and beside the resolver, whose explanations they shorten:
text in, text out, so ``ftmatrix check`` loads neither the resolver nor the plan.
"""

from __future__ import annotations

from ftmatrix.cell.record import Record
from ftmatrix.cell.signature import unwrap_message


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


def conflict_summary(reason: str) -> str:
    """The resolver's explanation in one line: its first step, which names the package
    that conflicts and what it requires (the last step only says "unsatisfiable")."""
    lines = [line.strip() for line in reason.strip().splitlines() if line.strip()]
    if lines and lines[0].startswith("No solution found"):
        lines = lines[1:]
    joined = " ".join(lines)
    first, _, _ = joined.partition(", we can conclude")
    return first.removeprefix("Because ").strip() or joined
