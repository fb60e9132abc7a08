"""What ``ftmatrix bisect`` and ``ftmatrix autobisect`` do, step by step.

``bisect``: a request checked before any cell is built (:func:`check_request`), then one
search (``cells.run_bisect``). ``autobisect``: tonight's records merged into the
history, the new failures chosen within the budget (``auto.choose_bisects``), each
search run while the budget lasts, each finding kept beside the records and in the
history (:func:`autobisect`).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion

from ftmatrix.bisection.auto import AutoJob, ReleasesUnavailable, choose_bisects, immediate_finding
from ftmatrix.bisection.cells import BisectRequest, finding_document, run_bisect
from ftmatrix.bisection.search import BisectFinding
from ftmatrix.case_selection import check_case_selection
from ftmatrix.cell.file_writes import write_atomically
from ftmatrix.cell.record import Record
from ftmatrix.config import DISTRIBUTION_NAME, Matrix
from ftmatrix.errors import BisectError, PackageIndexError, UsageError
from ftmatrix.known_issues import load_known_issues
from ftmatrix.pipeline import index_releases
from ftmatrix.resolve import uv_binary
from ftmatrix.settings import Settings, known_issues_file
from ftmatrix.store import load_findings, merge_outputs, newest_records, save_finding
from ftmatrix.versions import parse_version, shown, too_long

Say = Callable[[str], None]


def parse_pins(texts: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """``--pins PKG==VERSION ...`` as pairs, or a UsageError naming the one that is not."""
    pins = []
    for text in texts:
        package, sep, version = text.partition("==")
        if not sep or not package or not version:
            raise UsageError(f"--pins {shown(text)}: expected PKG==VERSION, such as trl==0.19.1")
        _check_name(f"--pins {shown(text)}", package)
        try:
            parse_version(version)
        except InvalidVersion:
            raise UsageError(
                f"--pins {shown(text)}: {shown(version)} is not a version{too_long(version)}"
            ) from None
        pins.append((package, version))
    return tuple(pins)


def _check_name(option: str, package: str) -> None:
    # A name goes into a requirements file and an index URL: an option line
    # (--index-url=...) or a path there must never pass for a package.
    if not DISTRIBUTION_NAME.fullmatch(package):
        raise UsageError(
            f"{option}: {shown(package)} is not a distribution name (letters, digits, '.', "
            "'_' and '-', starting and ending with a letter or digit), such as 'trl'"
        )


def check_request(request: BisectRequest, matrix: Matrix, env: Mapping[str, str]) -> None:
    """The ends are versions, the hardware class exists, the Python can be found: else a
    UsageError before any cell is built."""
    _check_name(f"bisect --axis {shown(request.axis)}", request.axis)
    for flag, text in (("--good", request.good), ("--bad", request.bad)):
        try:
            parse_version(text)
        except InvalidVersion:
            raise UsageError(
                f"bisect {flag} {shown(text)}: not a version, such as 0.19.1{too_long(text)}"
            ) from None
    classes = [h.name for h in matrix.hardware]
    if request.hardware is not None and request.hardware not in classes:
        raise UsageError(
            f"bisect --hardware {request.hardware!r}: no such hardware class; classes: "
            + ", ".join(classes)
        )
    if request.python is not None:
        found = subprocess.run(
            [uv_binary(), "python", "find", request.python],
            env=dict(env), capture_output=True, text=True, check=False,
        )  # fmt: skip
        if found.returncode != 0:
            raise UsageError(
                f"bisect --python {request.python!r}: uv finds no such interpreter here "
                "(a version such as 3.11, installed or installable by uv)"
            )


def describe_finding(axis: str, finding: BisectFinding) -> str:
    """``trl: last good 0.19.1, first bad 0.20.0``, and what was left untested between."""
    exact = "" if finding.exact else f" (untested between: {', '.join(finding.untested_between)})"
    return f"{axis}: last good {finding.last_good}, first bad {finding.first_bad}{exact}"


def bisect_once(
    request: BisectRequest, settings: Settings, matrix: Matrix, env: Mapping[str, str]
) -> str:
    """``ftmatrix bisect``: the request checked, the search run; what it found, in a line."""
    check_request(request, matrix, env)
    # before a cell is built: a case in no file of the cases folder is never found
    check_case_selection(
        settings.cases, [request.case], source="bisect --case", from_command_line=True
    )
    finding = run_bisect(request, matrix, cases_dir=settings.cases, out_dir=settings.out, env=env)
    return f"{describe_finding(request.axis, finding)}; {len(finding.steps)} cells built" + (
        f", skipped {', '.join(finding.skipped)}" if finding.skipped else ""
    )


def autobisect(
    settings: Settings,
    matrix: Matrix,
    env: Mapping[str, str],
    *,
    budget: int,
    hardware: str | None = None,
    dry_run: bool = False,
    say: Say = print,
) -> None:
    """Bisect the new failures whose neighbour cell passes, within ``budget`` cells."""
    store = settings.out / "history.sqlite"
    merge_outputs(settings.out)  # what the report merges: tonight's records, findings on disk
    lookup = index_releases(matrix, env)

    def releases(package: str) -> list[str]:
        try:
            return [str(v) for v in lookup(package)]
        except PackageIndexError as exc:
            raise ReleasesUnavailable(str(exc)) from exc

    records = _of_hardware(newest_records(store), matrix, hardware, say)
    selection = choose_bisects(
        records,
        budget=budget,
        releases=releases,
        known=load_known_issues(known_issues_file(settings)),
        findings=load_findings(store),
    )
    nothing = selection.nothing_reason()
    if nothing is not None:
        say(f"nothing to bisect: {nothing}")
        for item in selection.left_out:
            say(f"  not bisected: {item.what}: {item.reason}")
        return
    searches = len(selection.jobs)
    say(
        f"autobisect: {searches} search{'es' if searches != 1 else ''} chosen, for "
        f"{sum(job.shared for job in selection.jobs)} of {selection.failures} failing cases; "
        f"about {selection.estimated} of {budget} cells"
    )
    for job in selection.jobs:
        say(f"  bisect: {job.describe()}")
    for job in selection.over_budget:
        say(f"  over budget: {job.describe()}")
    for item in selection.left_out:
        say(f"  not bisected: {item.what}: {item.reason}")
    if dry_run:
        return
    left, found = budget, 0
    for job in selection.jobs:
        if job.cost > left:
            say(f"{job.request.id}: budget spent ({left} cells left, about {job.cost} needed)")
            continue
        try:
            finding = (
                immediate_finding(job)
                if job.immediate
                else run_bisect(
                    job.request,
                    matrix,
                    cases_dir=settings.cases,
                    out_dir=settings.out,
                    env=env,
                    max_cells=left,
                    releases=lookup,
                )
            )
        except BisectError as exc:
            left -= 2  # the ends were built (at most) before the search gave up
            say(f"{job.request.id}: not bisected: {exc}")
            continue
        except ValueError as exc:  # no such hardware class in this matrix: nothing built
            say(f"{job.request.id}: not bisected: {exc}")
            continue
        built = 0 if job.immediate else len(finding.steps)
        left -= built
        _keep_finding(job, finding_document(job.request, finding), settings.out, store)
        found += 1
        say(f"{describe_finding(job.request.axis, finding)}; {built} cells built")
    findings = "finding" if found == 1 else "findings"
    say(f"autobisect: {found} {findings} saved to {store}; {budget - left} of {budget} cells used")


def _of_hardware(
    records: list[Record], matrix: Matrix, hardware: str | None, say: Say
) -> list[Record]:
    """The records of one hardware class (all of them for None); UsageError for a typo."""
    if hardware is None:
        return records
    classes = sorted(h.name for h in matrix.hardware)
    if hardware not in classes:
        raise UsageError(
            f"--hardware {hardware!r}: {matrix.source} has no such hardware class "
            f"(classes: {', '.join(classes)})"
        )
    mine = [r for r in records if r.hardware_class == hardware]
    say(f"autobisect: hardware class {hardware!r} only: {len(mine)} of {len(records)} records")
    return mine


def _keep_finding(job: AutoJob, document: dict[str, Any], out: Path, store: Path) -> None:
    """Write finding.json (the report re-reads it) with the signature it explains, and store it."""
    document = {
        **document,
        "signature": job.signature,
        "source": "autobisect",
        "immediate": job.immediate,
    }
    write_atomically(
        out / "bisect" / job.request.id / "finding.json", json.dumps(document, indent=1)
    )
    save_finding(store, document)
