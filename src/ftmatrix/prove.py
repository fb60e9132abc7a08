"""ftmatrix known-issues prove: run the cells at known issues' boundaries, keep the proofs.

The edge of :mod:`ftmatrix.proofs`: for each entry it plans the boundary cells, builds
each as bisect does (its own uv venv under ``<out>/proofs/``, the other packages held at
``proof.hold``, only the entry's cases), judges the records by the entry's signature and
keeps the proof in the history (and as ``<out>/proofs/<id>/proof.json``, which a report
elsewhere merges as it merges bisect findings). ``--stale`` proves only the entries whose
proof is missing, was made for another claim, or predates a newer release in the range.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from packaging.version import Version

from ftmatrix import __version__
from ftmatrix.cell.file_writes import write_atomically
from ftmatrix.cell.record import Record
from ftmatrix.config import HardwareClass, Matrix
from ftmatrix.errors import ExitCode, UsageError
from ftmatrix.known_issues import KnownIssue, load_known_issues
from ftmatrix.lone_cell import hardware_named, run_lone_cell
from ftmatrix.pipeline import index_releases
from ftmatrix.plan import Cell
from ftmatrix.proofs import (
    BoundaryCell,
    CellVerdict,
    EntryProof,
    NotProvable,
    claim_key,
    claim_text,
    entry_proofs,
    observe,
    plan_boundaries,
    unprovable_reason,
)
from ftmatrix.runner import current_python
from ftmatrix.settings import Settings, known_issues_file
from ftmatrix.store import load_proofs, merge_outputs, save_proof

Log = Callable[[str], None]
Releases = Callable[[str], Sequence[str]]


@dataclass(frozen=True, kw_only=True)
class ProveSetup:
    """Where and how the boundary cells run."""

    matrix: Matrix
    hardware: HardwareClass
    cases_dir: Path
    out_dir: Path
    env: Mapping[str, str]
    now: datetime


def stale_entries(
    entries: Sequence[KnownIssue], proofs: Mapping[str, Mapping[str, Any]], releases: Releases
) -> list[KnownIssue]:
    """The entries whose proof is missing, was made for another claim than the entry's
    now, or predates a release inside an open range that none of its cells ran."""
    stale = []
    for entry in entries:
        proof = proofs.get(entry.id)
        if proof is None or proof.get("claim") != claim_key(entry):
            stale.append(entry)
            continue
        ran: dict[str, list[Version]] = {}
        for cell in proof.get("cells") or ():
            ran.setdefault(str(cell.get("package")), []).append(Version(str(cell["version"])))
        for package, spec in entry.affected.items():
            if spec is None or package in entry.fixed_in:
                continue
            newest = max(
                (Version(v) for v in releases(package) if spec.contains(Version(v))), default=None
            )
            if newest is not None and newest > max(ran.get(package) or [newest]):
                stale.append(entry)
                break
    return stale


def prove_entries(
    entries: Sequence[KnownIssue],
    setup: ProveSetup,
    *,
    releases: Releases,
    budget: int | None = None,
    log: Log = print,
) -> list[EntryProof]:
    """Prove each entry that can be proven on ``setup.hardware`` within ``budget`` cells;
    every proof made is kept in the history. Returns them, in the order of ``entries``."""
    made: list[EntryProof] = []
    ran: dict[tuple[Any, ...], list[Record]] = {}
    for entry in entries:
        why = unprovable_reason(entry, setup.hardware.name)
        if why is not None:
            log(f"[ftmatrix] {entry.id}: {claim_text(entry, None, hardware=setup.hardware.name)}")
            continue
        try:
            cells = plan_boundaries(entry, releases, hardware=setup.hardware.name)
        except NotProvable as exc:
            log(f"[ftmatrix] {exc}")
            continue
        new = [c for c in cells if _key(entry, c) not in ran]
        if budget is not None and len(new) > budget:
            log(
                f"[ftmatrix] {entry.id}: left for another night: {len(new)} cells, "
                f"{budget} left in the budget"
            )
            continue
        if budget is not None:
            budget -= len(new)
        verdicts = []
        for boundary in cells:
            cell = _cell(entry, boundary, setup)
            if _key(entry, boundary) not in ran:
                ran[_key(entry, boundary)] = _run(cell, entry, setup, log)
            observed = observe(entry, ran[_key(entry, boundary)])
            log(f"[ftmatrix] {entry.id}: {cell.label}: claimed {boundary.claim}, {observed}")
            verdicts.append(CellVerdict(cell=boundary, label=cell.label, observed=observed))
        proof = EntryProof(
            entry=entry.id,
            date=setup.now.date().isoformat(),
            ftmatrix_version=__version__,
            cells=tuple(verdicts),
            claim=claim_key(entry),
        )
        keep_proof(setup.out_dir, proof, proven_at=setup.now.isoformat())
        log(f"[ftmatrix] {entry.id}: {proof.verdict}: {claim_text(entry, proof)}")
        made.append(proof)
    if not made:
        log("[ftmatrix] no proof made")
    return made


def keep_proof(out_dir: Path, proof: EntryProof, *, proven_at: str) -> None:
    """The proof in the history and beside it as ``proofs/<id>/proof.json``."""
    document = {**proof.to_dict(), "proven_at": proven_at}
    write_atomically(
        out_dir / "proofs" / proof.entry / "proof.json", json.dumps(document, indent=1)
    )
    save_proof(out_dir / "history.sqlite", proof.to_dict(), proven_at=proven_at)


def newest_proofs(out_dir: Path) -> dict[str, EntryProof]:
    """Each entry's newest proof in the history under ``out_dir``."""
    return entry_proofs(load_proofs(out_dir / "history.sqlite"))


def _key(entry: KnownIssue, boundary: BoundaryCell) -> tuple[Any, ...]:
    return (tuple(sorted(boundary.pins.items(), key=str)), entry.proof.cases)


def _cell(entry: KnownIssue, boundary: BoundaryCell, setup: ProveSetup) -> Cell:
    # Only what the entry's cases need (proof.support): the matrix's own support packages
    # at their newest may not install or import beside an old boundary release.
    return Cell(
        python=current_python(),
        pins=tuple(boundary.pins.items()),
        hardware=setup.hardware.name,
        support=entry.proof.support,
    )


def _run(cell: Cell, entry: KnownIssue, setup: ProveSetup, log: Log) -> list[Record]:
    """One boundary cell, built as bisect builds its cells: its records."""
    return run_lone_cell(
        cell,
        setup.matrix,
        hardware=setup.hardware,
        home=setup.out_dir / "proofs" / entry.id,
        venvs=setup.out_dir / "proofs" / "envs",
        cases_dir=setup.cases_dir,
        case_selection=entry.proof.cases,
        env=setup.env,
        log=log,
    )


def add_known_issues_parser(sub: Any) -> None:
    """``ftmatrix known-issues prove [ID ...]``."""
    group = sub.add_parser(
        "known-issues",
        help="known_issues.yaml: prove each entry's range by the cells at its boundaries",
    )
    commands = group.add_subparsers(dest="known_issues_command", required=True)
    prove = commands.add_parser(
        "prove",
        help="run the cells at entries' boundaries and keep the proofs in the history",
        description="For each entry (default: every one this hardware can prove): the "
        "release before the first affected one, the first and last affected releases and "
        "the first fixed one, the other packages held at proof.hold, the entry's cases "
        "only. A cell that shows the opposite of the claim contradicts the entry (exit 1).",
    )
    prove.add_argument("ids", nargs="*", metavar="ID", help="entries to prove (default: all)")
    prove.add_argument(
        "--stale",
        action="store_true",
        help="only entries whose proof is missing, of another claim, or older than a "
        "release in their range (what the nightly runs)",
    )
    prove.add_argument(
        "--budget",
        type=_cells,
        metavar="CELLS",
        help="cells to build at most (default with --stale: the matrix's bisect.budget)",
    )
    prove.add_argument(
        "--hardware", metavar="CLASS", help="the hardware class to prove on (default: first)"
    )
    prove.add_argument("--matrix", help="matrix file for install settings (default: matrix.yaml)")


def _cells(text: str) -> int:
    """A --budget: a whole number of cells, 0 or more."""
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of cells")
    return int(text)


def run_known_issues(
    args: Any, *, settings: Settings, matrix: Matrix, env: Mapping[str, str], now: datetime
) -> int:
    """``known-issues prove``: the exit code (1 where a proof contradicts its entry)."""
    known = load_known_issues(known_issues_file(settings))
    wanted = list(args.ids)
    unknown = [i for i in wanted if i not in {e.id for e in known}]
    if unknown:
        raise UsageError(
            f"known-issues prove: no entry {', '.join(map(repr, unknown))} in "
            f"{known_issues_file(settings)}; entries: {', '.join(e.id for e in known)}"
        )
    entries = [e for e in known if not wanted or e.id in wanted]
    hardware = hardware_named(matrix, args.hardware)
    if hardware is None:
        names = [h.name for h in matrix.hardware]
        raise UsageError(f"--hardware {args.hardware!r}: the matrix's classes are {names}")
    lookup = index_releases(matrix, env)

    def releases(package: str) -> list[str]:
        return [str(v) for v in lookup(package)]

    merge_outputs(settings.out)
    budget = args.budget
    if args.stale:
        proofs = load_proofs(settings.out / "history.sqlite")
        provable = [e for e in entries if unprovable_reason(e, hardware.name) is None]
        entries = stale_entries(provable, proofs, releases)
        budget = matrix.bisect.budget if budget is None else budget
    setup = ProveSetup(
        matrix=matrix,
        hardware=hardware,
        cases_dir=settings.cases,
        out_dir=settings.out,
        env=env,
        now=now,
    )
    made = prove_entries(entries, setup, releases=releases, budget=budget)
    return ExitCode.FAILED if any(p.verdict == "contradicted" for p in made) else ExitCode.OK
