"""What a public page gets: the rendered report and a path-free copy of the history.

``reports/`` is the machine's: records and ``history.sqlite`` keep each failure's raw text,
with the machine's absolute paths. ``reports/site/`` is what the nightly deploys to Pages:
the rendered files, and ``history.jsonl``, every record of the history as the page shows it
(paths replaced, raw text left out) with the bisect findings, from which the next night
restores its history when the Actions cache has lost it (:func:`restore_history`).
"""

from __future__ import annotations

import errno
import json
import shutil
import tempfile
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ftmatrix.cell.files import RUN_ID_RULE, is_run_id
from ftmatrix.cell.record import Record
from ftmatrix.cell.signature import clean_paths_in
from ftmatrix.download import read_text
from ftmatrix.errors import PathKindError, UsageError
from ftmatrix.history_checks import finding_problem, proof_problem
from ftmatrix.record_order import split_clock_ahead
from ftmatrix.store import (
    load_cell_runs,
    load_findings,
    load_history,
    load_proofs,
    restore,
    save_finding,
    save_proof,
)

SITE = "site"
HISTORY_FILE = "history.jsonl"
HISTORY_FORMAT = 1
# The rendered report (ftmatrix.report.render.render_report writes these).
RENDERED_FILES = ("index.html", "summary.md", "results.json")
RENDERED_FOLDERS = ("badges", "constraints")


def write_site(out_dir: Path) -> Path:
    """Build ``out_dir/site`` from the rendered report and the history; returns it.

    Built beside and swapped in whole, so a failure leaves the previous site as it was
    (and the half-built copy is removed: a full disk gets its space back).
    """
    site = out_dir / SITE
    building = out_dir / f".{SITE}.building"
    shutil.rmtree(building, ignore_errors=True)
    try:
        building.mkdir(parents=True)
        for name in RENDERED_FILES:
            if (out_dir / name).is_file():
                shutil.copy2(out_dir / name, building / name)
        for name in RENDERED_FOLDERS:
            if (out_dir / name).is_dir():
                _copy_folder(out_dir / name, building / name)
        with (building / HISTORY_FILE).open("w", encoding="utf-8") as history:
            for line in published_history(out_dir / "history.sqlite"):
                history.write(json.dumps(line, sort_keys=True, default=str) + "\n")
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        raise
    # The old site is moved aside whole, the new one takes its place, then the old one is
    # removed: a site that cannot be moved is left as it was, and one holding a file that
    # cannot be deleted is replaced all the same (that file stays apart, hidden).
    old = Path(tempfile.mkdtemp(prefix=f".{SITE}.old.", dir=out_dir))
    try:
        if site.exists() or site.is_symlink():
            site.rename(old)
    except OSError as exc:
        old.rmdir()
        shutil.rmtree(building, ignore_errors=True)
        if exc.errno not in (errno.EACCES, errno.EPERM, errno.ENOTEMPTY, errno.EEXIST):
            raise
        # Said, not a traceback; the report's own files are written, the site as it was.
        raise PathKindError(
            f"{site}: the previous site cannot be moved aside to publish the new one (check "
            "its folder's permissions), so it is left as it was; the report itself is written"
        ) from None
    building.rename(site)
    shutil.rmtree(old, ignore_errors=True)
    return site


def _copy_folder(source: Path, target: Path) -> None:
    """``source`` copied to ``target``; the first file that cannot be copied raises its own
    OSError (shutil.copytree gathers them into one shutil.Error that names no errno)."""
    target.mkdir()
    for path in sorted(source.rglob("*")):  # a folder before what it holds
        copy = target / path.relative_to(source)
        if path.is_dir():
            copy.mkdir()
        else:
            shutil.copy2(path, copy)


def published_history(store: Path) -> Iterator[dict[str, Any]]:
    """The lines of history.jsonl: a header, each record as published, each finding."""
    yield {"ftmatrix-history": HISTORY_FORMAT}
    for record in load_history(store):
        yield {"record": record.published().to_dict()}
    for finding in load_findings(store):
        yield {"finding": clean_paths_in(finding)}
    # Each known issue's newest range proof: the nightly proves again only what is stale.
    for proof in load_proofs(store).values():
        yield {"proof": clean_paths_in(proof)}
    # What each cell's run was run with: without it, no restored cell is ever reused.
    for run_id, cell_id, data in load_cell_runs(store):
        yield {"cell_run": {"run_id": run_id, "cell_id": cell_id, "data": clean_paths_in(data)}}


def restore_history(
    source: str,
    store: Path,
    *,
    timeout: float = 120,
    now: datetime | None = None,
    say: Callable[[str], object] = print,
) -> tuple[int, int]:
    """Add to ``store`` what a published history.jsonl (a path or an http(s) URL) has and it
    lacks; returns (records added, findings added). Never replaces a record it has: the local
    one keeps its raw text. Records that finished after ``now`` (default: the clock's) are
    kept out, as a report keeps them out, each cell run's said with ``say``.
    :class:`ftmatrix.download.NotFound` where nothing is published."""
    what = f"restore-history {source}"
    text = read_text(source, what, timeout=timeout, kind=f"a {HISTORY_FILE}")
    records, findings, cell_runs, proofs = _parse_history(text, what)
    records, ahead = split_clock_ahead(records, now or datetime.now(UTC))
    for line in ahead:
        say(f"{what}: {line}")
    added = restore(store, records, cell_runs)
    held = load_proofs(store)
    for proof in proofs:  # a proof the history has (or a newer one) is kept as it is
        kept = held.get(str(proof["entry"]))
        if kept is None or str(kept.get("proven_at")) < str(proof["proven_at"]):
            save_proof(store, proof, proven_at=str(proof["proven_at"]))
    return added, sum(save_finding(store, finding) for finding in findings)


def _cell_run(run: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
    """A history line's cell run, checked: its run id, cell id and data."""
    if not (
        isinstance(run.get("run_id"), str)
        and isinstance(run.get("cell_id"), str)
        and isinstance(run.get("data"), dict)
    ):
        raise ValueError("a cell run names its run_id, cell_id and data")
    if not is_run_id(run["run_id"]):
        raise ValueError(f"cell run: run id {run['run_id']!r} is not {RUN_ID_RULE}")
    return run["run_id"], run["cell_id"], run["data"]


def _parse_history(
    text: str, what: str
) -> tuple[
    list[Record],
    list[dict[str, Any]],
    list[tuple[str, str, dict[str, Any]]],
    list[dict[str, Any]],
]:
    # A byte-order mark: the file saved again by an editor that writes one.
    lines = text.removeprefix("\ufeff").splitlines()
    try:
        header = json.loads(lines[0]) if lines else None
    except (ValueError, RecursionError):  # not JSON; a number of too many digits
        header = None
    if not isinstance(header, dict) or header.get("ftmatrix-history") != HISTORY_FORMAT:
        start = " ".join(text[:40].split())
        raise UsageError(
            f"{what}: not a history.jsonl of format {HISTORY_FORMAT} (ftmatrix report writes "
            f"one into reports/{SITE}/); it starts {start!r}"
        )
    records: list[Record] = []
    findings: list[dict[str, Any]] = []
    cell_runs: list[tuple[str, str, dict[str, Any]]] = []
    proofs: list[dict[str, Any]] = []
    for number, line in enumerate(lines[1:], start=2):
        try:
            item = json.loads(line)
            if isinstance(item, dict) and isinstance(item.get("record"), dict):
                records.append(Record.from_mapping(item["record"]))
            elif isinstance(item, dict) and isinstance(item.get("finding"), dict):
                finding = item["finding"]
                if (problem := finding_problem(finding)) is not None:
                    raise ValueError(f"a finding, but {problem}")
                findings.append(finding)
            elif isinstance(item, dict) and isinstance(item.get("cell_run"), dict):
                cell_runs.append(_cell_run(item["cell_run"]))
            elif isinstance(item, dict) and isinstance(item.get("proof"), dict):
                proof = item["proof"]
                if not isinstance(proof.get("proven_at"), str):
                    raise ValueError("a proof, but its 'proven_at' is not text")
                if (problem := proof_problem(proof)) is not None:
                    raise ValueError(f"a proof, but {problem}")
                proofs.append(proof)
            else:
                raise ValueError(
                    'neither {"record": ...}, {"finding": ...}, {"cell_run": ...} nor '
                    '{"proof": ...}'
                )
        except (json.JSONDecodeError, RecursionError, ValueError, TypeError) as exc:
            reason = "not JSON" if isinstance(exc, json.JSONDecodeError) else str(exc)
            raise UsageError(f"{what}: line {number}: {reason}; nothing was restored") from None
    return records, findings, cell_runs, proofs
