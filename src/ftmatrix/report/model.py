"""The report as one value: everything its pages say, collected once from the history.

:func:`collect_report` reads a report folder (its history, the plan's findings, the
quarantined record lines) and :func:`report_data` computes the rest from what was read;
the writers (HTML, Markdown, results.json, badges, constraints) read only the
:class:`ReportData` they are given and compute nothing twice.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TypedDict, Unpack

from ftmatrix.cell.record import Record
from ftmatrix.cell.signature import clean_paths_in
from ftmatrix.check.results import KnownIssueLink, Results, member_key, results_of
from ftmatrix.known_issues import KnownIssue, load_known_issues
from ftmatrix.live_runs import RunInProgress
from ftmatrix.proofs import entry_proofs
from ftmatrix.report.causes import Cause, causes_of
from ftmatrix.report.changes import (
    FIRST_RUN,
    Comparison,
    StatusChange,
    compare_runs,
)
from ftmatrix.report.failures import FailureGroup, failure_groups
from ftmatrix.report.first_screen import AxesShown, axes_shown
from ftmatrix.report.grid import Grid, GridEntry, build_grid, grid_axes, grid_entries, reused_cells
from ftmatrix.report.installability import read_installability
from ftmatrix.report.notices import quarantined
from ftmatrix.report.probes import probe_summaries
from ftmatrix.report.unfinished import UnfinishedCell
from ftmatrix.store import load_findings, load_proofs, newest_records, pass_rate_table


@dataclass(frozen=True, slots=True, kw_only=True)
class ReportData:
    """What one report says, in every format it is written in."""

    generated_at: datetime
    grid: Grid  # the newest record of every (cell, case), cap probes left out
    entries: tuple[GridEntry, ...]  # the grid's (cell, case) results, as the pivot reads them
    axes: dict[str, list[str]]  # every axis of the entries and its values, in order
    reused: Mapping[str, str]  # cell label -> the run its results were carried from
    groups: tuple[FailureGroup, ...]  # failures grouped by signature, with their known issues
    causes: tuple[Cause, ...]  # the groups gathered by known issue: one heading per entry
    shown: AxesShown  # the cell-level axes that vary, and the rest said once
    changes: tuple[StatusChange, ...]  # regressions and fixes since the previous run
    comparison: Comparison  # whether an earlier run exists, how many results it shares
    trend: Mapping[str, list[tuple[str, float]]]  # operation -> (run, pass rate), oldest first
    probes: tuple[Record, ...]  # the cap probes' records: shown apart, never in the grid
    probe_outcomes: Mapping[tuple[str, str], str]  # (cap, hardware) -> what ran past it
    installability: Mapping[str, Any] | None  # the plan's findings (read_installability)
    missing: tuple[str, ...]  # planned cells without a record of the night
    unfinished: tuple[UnfinishedCell, ...]  # cells whose newest run stopped in their cases
    in_progress: tuple[RunInProgress, ...]  # runs still going on: the report is partial
    unreadable: tuple[str, ...]  # those and the lines kept apart in quarantine files
    results: Results  # what check reads from this report's results.json
    latest: tuple[Record, ...]  # every newest record, probes included: the constraints' input


def report_data(
    grid: Grid,
    *,
    generated_at: datetime,
    groups: Sequence[FailureGroup] = (),
    changes: Sequence[StatusChange] = (),
    comparison: Comparison = FIRST_RUN,
    trend: Mapping[str, list[tuple[str, float]]] | None = None,
    probes: Sequence[Record] = (),
    installability: Mapping[str, Any] | None = None,
    missing: Sequence[str] = (),
    unfinished: Sequence[UnfinishedCell] = (),
    in_progress: Sequence[RunInProgress] = (),
    problems: Sequence[str] = (),
    quarantined_lines: Sequence[str] = (),
    latest: Sequence[Record] | None = None,
) -> ReportData:
    """The report of ``grid`` and what is known besides it; the rest is computed here, once.

    ``latest`` defaults to the grid's records and the probes (what the history's newest
    records are, where they were not read from one)."""
    entries = tuple(grid_entries(grid.records))
    axes = grid_axes(entries)
    return ReportData(
        generated_at=generated_at,
        grid=grid,
        entries=entries,
        axes=axes,
        reused=reused_cells(grid.records),
        groups=tuple(groups),
        causes=tuple(causes_of(groups)),
        shown=axes_shown(axes),
        changes=tuple(changes),
        comparison=comparison,
        trend=dict(trend or {}),
        probes=tuple(probes),
        probe_outcomes=probe_summaries(probes),
        installability=installability,
        missing=tuple(missing),
        unfinished=tuple(unfinished),
        in_progress=tuple(in_progress),
        unreadable=(*problems, *quarantined_lines),
        results=check_results(grid, groups),
        latest=tuple((*grid.records, *probes) if latest is None else latest),
    )


class Sources(TypedDict, total=False):
    """What a report knows besides its folder's history, each optional."""

    problems: Sequence[str]  # the record lines the merge could not read
    known_issues: Path | None  # a known_issues.yaml: failure groups linked to upstream reports
    missing: Sequence[str]  # planned cells without a record (report.planned)
    unfinished: Sequence[UnfinishedCell]  # cells a run stopped in (report.unfinished)
    in_progress: Sequence[RunInProgress]  # the runs still going on (live_runs)


def collect_report(out_dir: Path, *, now: datetime, **sources: Unpack[Sources]) -> ReportData:
    """The report of ``out_dir``'s history; it reads the history, never writes it."""
    problems = sources.get("problems", ())
    known_issues = sources.get("known_issues")
    store = out_dir / "history.sqlite"
    # Published text shows no machine's paths: records keep them (raw_*), pages not.
    latest = [r.published() for r in newest_records(store)]
    # Cap probes ran past a declared requirement: shown apart, never in the grid.
    probes = [r for r in latest if r.beyond_cap]
    grid = build_grid(r for r in latest if not r.beyond_cap)
    known = load_known_issues(known_issues) if known_issues else ()
    findings = [clean_paths_in(f) for f in load_findings(store)]  # published too
    proofs = entry_proofs(load_proofs(store))
    previous = [x.published() for x in newest_records(store, back=1)]
    judged = [r for r in [*previous, *latest] if not r.beyond_cap]
    changes, comparison = compare_runs(judged, earlier=bool(previous))
    return report_data(
        grid,
        generated_at=now,
        groups=failure_groups(grid.records, known, findings, proofs),
        changes=changes,
        comparison=comparison,
        trend=pass_rate_table(store),
        probes=probes,
        # The plan's findings name the matrix file and uv's reasons (find-links paths).
        installability=clean_paths_in(read_installability(out_dir)),
        missing=sources.get("missing", ()),
        unfinished=sources.get("unfinished", ()),
        in_progress=sources.get("in_progress", ()),
        problems=problems,
        quarantined_lines=quarantined(out_dir / "records"),
        latest=latest,
    )


def check_results(grid: Grid, groups: Sequence[FailureGroup]) -> Results:
    """What check reads from this report's results.json (its records, its groups' known
    issues and blame), taken from what results.json is written from."""
    return results_of(
        grid.records,
        source="results.json",
        runs=grid.runs,
        known={
            member_key(r.cell_id, r.case): tuple(_link(c, g.claims) for c in g.causes)
            for g in groups
            for r in g.records
            if g.causes
        },
        blame={g.signature_key: g.blame for g in groups if g.blame},
    )


def _link(cause: KnownIssue, proven: Mapping[str, str]) -> KnownIssueLink:
    return KnownIssueLink(
        id=cause.id,
        title=cause.title,
        upstream=cause.reported,
        workaround=cause.workaround,
        claim=proven[cause.id],
    )
