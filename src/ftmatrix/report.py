"""The compatibility report: HTML for people, Markdown for job summaries, JSON for tools.

Pure functions from records to text; :func:`write_report` is the only I/O. Every
value that comes from a record is escaped: messages are framework output and
may contain anything, markup included.
"""

from __future__ import annotations

import json
import shlex
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from html import escape
from pathlib import Path
from typing import Any

from ftmatrix.records import WHOLE_CELL, Record, read_records, write_atomically
from ftmatrix.status import Status

STATUS_COLOURS = {
    # Colour-blind-safe pairs (Okabe-Ito based); the status text is always shown too.
    Status.PASS: ("#1a7f37", "#ffffff"),
    Status.FAIL: ("#b3261e", "#ffffff"),
    Status.CRASH: ("#6d1b7b", "#ffffff"),
    Status.TIMEOUT: ("#d55e00", "#ffffff"),
    Status.OOM: ("#e69f00", "#000000"),
    Status.SKIP: ("#d0d7de", "#000000"),
    Status.NOT_APPLICABLE: ("#eaeef2", "#57606a"),
    Status.UNINSTALLABLE: ("#56b4e9", "#000000"),
    Status.INSTALL_ERROR: ("#0072b2", "#ffffff"),
    Status.ERROR: ("#000000", "#f0e442"),
}
PROBLEM_STATUSES = frozenset(
    s for s in Status if s not in (Status.PASS, Status.SKIP, Status.NOT_APPLICABLE)
)


@dataclass(frozen=True, kw_only=True)
class Grid:
    """The latest record of every (cell, case), arranged for display."""

    rows: tuple[str, ...]  # cell labels
    columns: tuple[str, ...]  # case ids
    cells: dict[tuple[str, str], Record]
    whole_cell: dict[str, Record]
    records: tuple[Record, ...]
    runs: tuple[str, ...]


def latest_records(records: Iterable[Record]) -> list[Record]:
    """For each cell, the records of the newest run that has any for it."""
    newest: dict[str, str] = {}
    records = list(records)
    for record in records:
        if record.run_id > newest.get(record.cell_id, ""):
            newest[record.cell_id] = record.run_id
    return [r for r in records if r.run_id == newest[r.cell_id]]


def build_grid(records: Iterable[Record]) -> Grid:
    """Arrange the latest records as cells x cases."""
    latest = latest_records(records)
    cells: dict[tuple[str, str], Record] = {}
    whole: dict[str, Record] = {}
    for record in latest:
        if record.case == WHOLE_CELL:
            _keep_worst(whole, record.cell_label, record)
        else:
            _keep_worst(cells, (record.cell_label, record.case), record)
    rows = sorted({r.cell_label for r in latest})
    columns = sorted({r.case for r in latest if r.case != WHOLE_CELL})
    return Grid(
        rows=tuple(rows),
        columns=tuple(columns),
        cells=cells,
        whole_cell=whole,
        records=tuple(latest),
        runs=tuple(sorted({r.run_id for r in latest})),
    )


def _keep_worst(into: dict[Any, Record], key: Any, record: Record) -> None:
    current = into.get(key)
    if current is None or record.status.severity > current.status.severity:
        into[key] = record


def reproduce_command(record: Record) -> str:
    """The one command that rebuilds this cell and reruns this case locally."""
    selector = shlex.quote(f"matrix({record.cell_label})")
    command = f"nox -s {selector}"
    if record.case != WHOLE_CELL:
        command += f" -- {shlex.quote(record.case)}"
    return command


def render_html(grid: Grid, *, generated_at: datetime, problems: Sequence[str] = ()) -> str:
    """One self-contained HTML page: no script or style is fetched from anywhere."""
    counts = Counter(r.status for r in grid.records)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        "<title>ftmatrix compatibility report</title>",
        f"<style>{_CSS}</style></head><body>",
        "<h1>ftmatrix compatibility report</h1>",
        f"<p class=meta>Generated {escape(generated_at.isoformat(timespec='seconds'))}"
        f" from {len(grid.records)} records of {len(grid.rows)} cells"
        f" (runs: {escape(', '.join(grid.runs) or 'none')}).</p>",
        _summary(counts),
        _legend(),
        _grid_table(grid),
        _failures(grid),
    ]
    if problems:
        items = "".join(f"<li>{escape(p)}</li>" for p in problems)
        parts.append(f"<h2>Unreadable records</h2><ul class=problems>{items}</ul>")
    parts.append("</body></html>")
    return "\n".join(parts)


def render_markdown(grid: Grid) -> str:
    """A compact summary for a GitHub job summary."""
    counts = Counter(r.status for r in grid.records)
    lines = ["# ftmatrix compatibility report", ""]
    lines.append(", ".join(f"{counts[s]} {s.value}" for s in Status if counts[s]) or "No records.")
    lines += ["", "| cell | " + " | ".join(_md(c) for c in grid.columns) + " |"]
    lines.append("|---|" + "---|" * len(grid.columns))
    for row in grid.rows:
        whole = grid.whole_cell.get(row)
        values = []
        for column in grid.columns:
            record = grid.cells.get((row, column)) or whole
            values.append(record.status.value if record else "")
        if whole and not grid.columns:
            values = [whole.status.value]
        lines.append(f"| {_md(row)} | " + " | ".join(values) + " |")
    problems = [r for r in grid.records if r.status in PROBLEM_STATUSES]
    if problems:
        lines += ["", "## Problems", ""]
        for record in problems:
            detail = record.message or record.reason or ""
            first = detail.strip().splitlines()[0] if detail.strip() else ""
            lines.append(
                f"- **{record.status.value}** `{_md(record.cell_label)}` `{_md(record.case)}`: "
                f"{_md(first[:300])}"
            )
    return "\n".join(lines) + "\n"


def render_json(grid: Grid) -> str:
    """Machine-readable results: the latest record of every (cell, case)."""
    counts = Counter(r.status.value for r in grid.records)
    payload = {
        "schema": 1,
        "runs": list(grid.runs),
        "counts": dict(sorted(counts.items())),
        "records": [r.to_dict() for r in grid.records],
    }
    return json.dumps(payload, indent=1, sort_keys=True, default=str) + "\n"


def write_report(out_dir: Path, *, now: datetime) -> Grid:
    """Read every record under ``out_dir/records`` and write the three reports beside it."""
    result = read_records(out_dir / "records")
    grid = build_grid(result.records)
    write_atomically(
        out_dir / "index.html", render_html(grid, generated_at=now, problems=result.problems)
    )
    write_atomically(out_dir / "summary.md", render_markdown(grid))
    write_atomically(out_dir / "results.json", render_json(grid))
    return grid


def _summary(counts: Counter[Status]) -> str:
    chips = "".join(
        f"<li>{_badge(status)} {counts[status]}</li>" for status in Status if counts[status]
    )
    return f"<ul class=counts>{chips or '<li>No records yet.</li>'}</ul>"


def _legend() -> str:
    rows = "".join(
        f"<tr><td>{_badge(status)}</td><td>{escape(status.meaning)}</td></tr>" for status in Status
    )
    return f"<details class=legend><summary>Legend</summary><table>{rows}</table></details>"


def _badge(status: Status) -> str:
    background, colour = STATUS_COLOURS[status]
    return (
        f'<span class="status s-{_css_name(status)}" style="background:{background};'
        f'color:{colour}">{escape(status.value)}</span>'
    )


def _grid_table(grid: Grid) -> str:
    if not grid.rows:
        return "<p>No records found. Run <code>nox -s matrix</code> first.</p>"
    head = "".join(f"<th scope=col>{escape(c)}</th>" for c in grid.columns) or "<th>cell</th>"
    body = []
    for row in grid.rows:
        whole = grid.whole_cell.get(row)
        cells = []
        if whole is not None and not any((row, c) in grid.cells for c in grid.columns):
            span = max(len(grid.columns), 1)
            cells.append(f'<td colspan="{span}">{_grid_cell(whole)}</td>')
        else:
            for column in grid.columns:
                record = grid.cells.get((row, column)) or whole
                cells.append(f"<td>{_grid_cell(record) if record else ''}</td>")
        body.append(f"<tr><th scope=row><code>{escape(row)}</code></th>{''.join(cells)}</tr>")
    return (
        "<h2>Cells</h2><div class=scroll><table class=grid>"
        f"<thead><tr><th scope=col>cell</th>{head}</tr></thead>"
        f"<tbody>{''.join(body)}</tbody></table></div>"
    )


def _grid_cell(record: Record) -> str:
    text = record.message or record.reason or ""
    first = text.strip().splitlines()[0] if text.strip() else ""
    link = ""
    if record.status in PROBLEM_STATUSES:
        link = f' <a href="#{_anchor(record)}">details</a>'
    detail = f"<div class=msg>{escape(first[:240])}</div>" if first else ""
    return f"{_badge(record.status)}{link}{detail}"


def _failures(grid: Grid) -> str:
    problems = [r for r in grid.records if r.status in PROBLEM_STATUSES]
    if not problems:
        return "<h2>Failures</h2><p>None.</p>"
    items = [_failure(r) for r in sorted(problems, key=lambda r: (r.cell_label, r.case))]
    return "<h2>Failures</h2>" + "".join(items)


def _failure(record: Record) -> str:
    facts = [
        ("status", _badge(record.status)),
        ("case", f"<code>{escape(record.case)}</code>"),
        ("operation", escape(record.operation)),
        ("exception", f"<code>{escape(record.exception_type or '')}</code>"),
        ("framework frame", f"<code>{escape(record.framework_frame or '')}</code>"),
        ("signature", f"<code>{escape(record.signature or '')}</code>"),
        ("reproduce", f"<code>{escape(reproduce_command(record))}</code>"),
        ("pins", escape(", ".join(f"{k}=={v}" for k, v in record.pins.items()))),
        ("hardware", escape(_hardware_text(record.hardware))),
    ]
    rows = "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in facts if v)
    message = record.message or record.reason or ""
    packages = ", ".join(f"{k}=={v}" for k, v in record.packages.items())
    traceback = (
        f"<details><summary>traceback</summary><pre>{escape(record.traceback)}</pre></details>"
        if record.traceback
        else ""
    )
    return (
        f'<section class=failure id="{_anchor(record)}">'
        f"<h3><code>{escape(record.cell_label)}</code></h3>"
        f"<table>{rows}</table><pre class=message>{escape(message)}</pre>{traceback}"
        f"<details><summary>environment ({len(record.packages)} packages)</summary>"
        f"<p class=packages>{escape(packages)}</p></details></section>"
    )


def _hardware_text(hardware: Any) -> str:
    if not hardware:
        return ""
    gpus = hardware.get("gpus") or []
    gpu_text = ", ".join(str(g.get("name")) for g in gpus) or "no GPU"
    return f"{hardware.get('cpu', '?')} ({hardware.get('cpu_count', '?')} CPUs), {gpu_text}"


def _anchor(record: Record) -> str:
    safe = "".join(ch if ch.isalnum() else "-" for ch in record.case)
    return f"f-{record.cell_id}-{safe}"


def _css_name(status: Status) -> str:
    return status.name.lower().replace("_", "-")


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:1.5rem;color:#1f2328}
h1{font-size:1.5rem}h2{font-size:1.2rem;margin-top:2rem}
.meta{color:#57606a}
.counts{display:flex;gap:1rem;list-style:none;padding:0}
.status{display:inline-block;padding:.05rem .45rem;border-radius:.3rem;
 font-weight:600;font-size:.85em}
.scroll{overflow-x:auto}
table.grid{border-collapse:collapse}
table.grid th,table.grid td{border:1px solid #d0d7de;padding:.35rem .5rem;
 vertical-align:top;text-align:left}
table.grid td{min-width:9rem;max-width:28rem}
.msg{font-size:.8em;color:#57606a;word-break:break-word}
.failure{border:1px solid #d0d7de;border-radius:.4rem;padding:.5rem 1rem;margin:1rem 0}
.failure th{text-align:left;padding-right:1rem;color:#57606a;font-weight:500}
pre{background:#f6f8fa;padding:.6rem;overflow-x:auto;white-space:pre-wrap;word-break:break-word}
.packages{font-family:monospace;font-size:.8em}
"""
