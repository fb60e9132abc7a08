"""The report's files, written from the history: collect once, then write each format.

:func:`render_report` is the report's only I/O: the page (:mod:`ftmatrix.report.page`),
the job summary (:mod:`ftmatrix.report.summary`), results.json
(:mod:`ftmatrix.report.results_json`), the badges and the constraints files, all from
one :class:`~ftmatrix.report.model.ReportData`.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Unpack

from ftmatrix.cell.file_writes import write_atomically
from ftmatrix.constraints import write_constraints
from ftmatrix.report.badges import badge_files
from ftmatrix.report.grid import Grid
from ftmatrix.report.model import Sources, collect_report
from ftmatrix.report.page import render_html
from ftmatrix.report.results_json import render_json
from ftmatrix.report.summary import render_markdown


def render_report(out_dir: Path, *, now: datetime, **sources: Unpack[Sources]) -> Grid:
    """Write the reports from ``out_dir``'s history; it reads the history, never writes it.

    Merge the new records first (:func:`ftmatrix.store.merge_outputs`) and pass on the
    unreadable ones it names as ``problems``; ``in_progress``: the runs still going on
    (:func:`ftmatrix.live_runs.runs_in_progress`), said first. ``known_issues`` (a
    known_issues.yaml) links failure groups to upstream reports.
    """
    data = collect_report(out_dir, now=now, **sources)
    write_atomically(out_dir / "index.html", render_html(data))
    write_atomically(out_dir / "summary.md", render_markdown(data))
    write_atomically(out_dir / "results.json", render_json(data))
    for name, badge in badge_files(data.grid).items():
        write_atomically(out_dir / "badges" / name, badge)
    write_constraints(out_dir / "constraints", data.latest, derived=data.results.constraints)
    return data.grid
