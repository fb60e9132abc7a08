"""The records a cell's supervisor writes itself: for the cases that ended without one.

A case whose process died, or that the supervisor killed (past its time, past the
memory limit), gets its verdict here; a crash is a first try, and the case waits for a
second, alone, to tell a flake from a break. The records the plugin handed over because
the disk refused them are written once it can. When the cell's cases are done, the
processes they left running go on the records of the cases that started them, and the
file is compacted to one line a case.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from ftmatrix.cell.file_writes import read_json, read_note, write_atomically
from ftmatrix.cell.files import CellFiles
from ftmatrix.cell.record import WHOLE_CELL, Record
from ftmatrix.cell.records import (
    CellRecordFile,
    RecordScanner,
    compact_records,
    lines_kept_apart,
    quarantined_lines,
    read_records,
    redact,
)
from ftmatrix.cell.status import Status
from ftmatrix.errors import PathKindError, path_problem
from ftmatrix.process_tree import Leftover, starter_of

# The verdict of a case the run ended under twice, once the run is resumed again.
RUN_ENDED_REASON = (
    "the run ended twice while this case ran (its supervisor was killed or interrupted, by "
    "the case or from outside) and it left no record; not run a third time: a case that "
    "ends the run would end every resume the same way"
)
Log = Callable[[str], None]
RecordFactory = Callable[..., Record]
# Told of each case concluded here, once its record is written: (case, status).
Concluded = Callable[[str, Status], None]


class CaseVerdicts:
    """Records the cases that ended without a record of their own, across passes.

    A crash is a first try: the case waits in :attr:`second_tries` for a second, alone.
    First tries are kept in a file until then: with workers, the second tries come after
    the shared pass, and a run killed meanwhile must still know, once resumed, that the
    case crashed once.
    """

    def __init__(
        self,
        files: CellFiles,
        make_record: RecordFactory,
        env: Mapping[str, str],
        log: Log,
        on_concluded: Concluded,
        *,
        resumed: bool,
        scanner: RecordScanner | None = None,
    ) -> None:
        self.files = files
        self.make_record = make_record
        self.env = env
        self.log = log
        self.on_concluded = on_concluded
        self.first_tries: dict[str, Record] = {}
        # The cell's records as they grow: each look reads only what was added since.
        self.scanner = scanner or RecordScanner(files.records)
        if not resumed:
            files.first_tries.unlink(missing_ok=True)  # from an earlier run of the cell
        elif files.first_tries.exists():
            self.first_tries = {r.case: r for r in read_records(files.first_tries).records}
        self.waiting: list[Record] = []  # records the plugin handed over, not yet written
        self.settle_second_tries()

    @property
    def second_tries(self) -> tuple[str, ...]:
        """The crashed cases waiting for their second try, in the order they crashed."""
        return tuple(self.first_tries)

    def settle(self, handed: Sequence[Record]) -> None:
        """After a pass: the records it handed over written (those the disk refuses
        kept for later), the second tries merged."""
        self.waiting = write_or_keep(self.files.records, [*self.waiting, *handed])
        self.settle_second_tries()

    def settle_second_tries(self) -> None:
        """Merge a crashed case's first try into the record its second try just wrote.

        Done at once, not at the end, so that a run killed later keeps the verdict.
        """
        latest = {r.case: r for r in self.scanner.scan().records} if self.first_tries else {}
        file = CellRecordFile(self.files.records)
        for case in list(self.first_tries):
            second = latest.get(case)
            if second is not None:
                file.add(merge_tries(self.first_tries.pop(case), second))
        self._save()

    def _save(self) -> None:
        if not self.first_tries:
            self.files.first_tries.unlink(missing_ok=True)
            return
        tries = self.first_tries.values()
        text = "".join(json.dumps(r.to_dict()) + "\n" for r in tries)
        write_atomically(self.files.first_tries, text)

    def recorded(self) -> set[str]:
        """The cases of the cell that have a record."""
        return {r.case for r in self.scanner.scan().records}

    def conclude_unrecorded(self, case: str, output: str) -> None:
        """A case that ran alone and ended normally, yet left no record: ours, once.

        Never expected; concluded so that the supervisor cannot run it forever.
        """
        if case not in self.recorded():
            reason = "the case ran in a process of its own and left no record"
            self.conclude({"case": case}, Status.ERROR, reason, output)

    def conclude(self, note: Mapping[str, Any], status: Status, reason: str, output: str) -> None:
        """The record of the case of running-case ``note``, which ended as ``status``."""
        case = str(note["case"])
        record = self.make_record(
            case=case,
            operation=str(note.get("operation") or "") or None,
            status=status,
            reason=reason,
            message=reason,
            traceback=redact(output, self.env),
            duration=time.time() - float(note.get("started") or time.time()),
        )
        if status is Status.CRASH and case not in self.first_tries:
            self.log(f"[ftmatrix] {case}: {reason}; trying it once more alone")
            self.first_tries[case] = record
            self._save()
            return
        first = self.first_tries.pop(case, None)
        if first is not None:
            record = merge_tries(first, record)
        CellRecordFile(self.files.records).add(record)
        if first is not None:
            self._save()  # once the merged record is safe, not before
        self.log(f"[ftmatrix] {case}: {status.value}: {reason}")
        self.on_concluded(case, status)

    def conclude_run_enders(self, notes: Sequence[Mapping[str, Any]]) -> None:
        """On resume: the case the run's end left a running-case note of, without a record.

        The run died under it: killed by the case itself (a signal to the supervisor, its
        pytest's grandparent, or to the run's process group) or from outside (Ctrl-C, a
        lost machine). The first time it runs again (most likely it was innocent); if the
        run ends under it again, it is recorded a crash here, not run a third time: a case
        that ends the run would end every resume. Several notes (pytest-xdist workers)
        cannot be told apart: they run again.
        """
        left = [note for note in notes if str(note["case"]) not in self.recorded()]
        if len(left) != 1:
            return
        note, case = left[0], str(left[0]["case"])
        again = set(case_list(self.files.left_running) or ())
        if case not in again:
            write_atomically(self.files.left_running, json.dumps(sorted(again | {case})))
            self.log(f"[ftmatrix] {case}: running when the run ended; it runs again once")
            return
        record = self.make_record(
            case=case,
            operation=str(note.get("operation") or "") or None,
            status=Status.CRASH,
            reason=RUN_ENDED_REASON,
            message=RUN_ENDED_REASON,
            duration=0.0,
        )
        first = self.first_tries.pop(case, None)
        CellRecordFile(self.files.records).add(merge_tries(first, record) if first else record)
        self._save()
        self.log(f"[ftmatrix] {case}: crash: {RUN_ENDED_REASON}")
        self.on_concluded(case, Status.CRASH)

    def record_cell_problem(self, reason: str, output: str, *, crashed: bool) -> None:
        """One record for the cell: pytest ended not as pytest ends, or before collecting."""
        CellRecordFile(self.files.records).add(
            self.make_record(
                case=WHOLE_CELL,
                status=Status.CRASH if crashed else Status.ERROR,
                reason=reason,
                message=reason,
                traceback=output,
            )
        )

    def record_unrun(self, cell_seconds: float) -> None:
        """A timeout for every collected case without a record: the cell's time ran out."""
        file = CellRecordFile(self.files.records)
        done = self.recorded()
        reason = f"not run: the cell ran past its {cell_seconds:g} s limit first"
        for case in case_list(self.files.collected) or ():
            if case not in done:
                file.add(
                    self.make_record(
                        case=case, status=Status.TIMEOUT, reason=reason, message=reason
                    )
                )

    def finish(self, ended: Sequence[Leftover], free_space: Callable[[], None]) -> list[Record]:
        """The records a full disk refused written, once ``free_space`` freed what the cases
        wrote (OSError if the disk still refuses them); the leftovers noted on their cases'
        records; then one line a case (a case recorded twice kept both lines), durably: the
        runner marks the cell done next. What cannot be read is kept apart."""
        if self.waiting:
            free_space()
            refused = write_or_keep(self.files.records, self.waiting)
            if refused:
                cases = ", ".join(r.case for r in refused)
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), f"the records of {cases}")
        _note_leftovers(self.files, ended, self.log)
        self.files.left_running.unlink(missing_ok=True)  # every case has its record now
        scan = compact_records(self.files.records, self.scanner)
        if scan.restored:
            self.log(
                f"[ftmatrix] the records file lost {scan.restored} record(s) under the run (a "
                f"case deleted or replaced it): written again from what was read of it"
            )
        if scan.damaged:
            kept = self.files.quarantine
            self.log(f"[ftmatrix] {scan.kept_apart()} moved to {kept}")
        return list(scan.records)


def _quarantined(quarantine: Path) -> tuple[int, int]:
    try:
        return quarantined_lines(quarantine)
    except OSError:
        return 0, 0


def left_over_notes(files: CellFiles) -> list[dict[str, Any]]:
    """The running-case notes the cell's last pytest left: the run ended under it."""
    notes = (read_note(path) for path in [files.running_case(), *files.workers_running_cases()])
    return [note for note in notes if note is not None]


def case_list(path: Path) -> list[str] | None:
    """The case ids the plugin listed in ``path`` (the collected or isolated cases); None
    where there is no such list or it is damaged (not a JSON list of strings): a first pass
    then collects the cases again, and the plugin writes the list anew."""
    cases = read_json(path)
    if isinstance(cases, list) and all(isinstance(c, str) for c in cases):
        return cases
    return None


def write_or_keep(record_file: Path, records: Sequence[Record]) -> list[Record]:
    """Write ``records`` in order; those the disk refuses, returned to try again. A records
    file of the wrong kind (made a folder under the running cell) is said as what it is,
    never as a full disk."""
    refused = []
    for index, record in enumerate(records):
        try:
            CellRecordFile(record_file).add(record)
        except OSError as exc:
            problem = path_problem(exc)  # (None for a full disk)
            if problem is not None:
                cases = ", ".join(r.case for r in records[index:])
                raise PathKindError(
                    f"the records of {cases} (cases that ran) are not written: {problem}"
                ) from None
            refused.append(record)
    return refused


def merge_tries(first: Record, second: Record) -> Record:
    """One record for a case tried twice: the worse outcome, flaky if they differ."""
    tries = [first, second]
    worst = max(tries, key=lambda r: r.status.severity)
    return replace(
        worst,
        flaky=first.status is not second.status,
        attempts=tuple(
            {"status": r.status.value, "reason": r.reason, "message": r.message} for r in tries
        ),
    )


def _note_leftovers(files: CellFiles, leftovers: Sequence[Leftover], log: Log) -> None:
    """Put each leftover on the record of the case that started it (metric
    ``leftover_processes``) and say so; the case starts the plugin noted go with it."""
    starts = []
    with contextlib.suppress(OSError):
        # Read only where a process was left: a line a case, and most cells leave none.
        lines = files.starts.read_text(encoding="utf-8", errors="replace") if leftovers else ""
        for line in lines.splitlines():
            with contextlib.suppress(ValueError, KeyError, TypeError):
                entry = json.loads(line)
                starts.append((str(entry["case"]), float(entry["started"])))
    files.starts.unlink(missing_ok=True)  # raw case ids: nothing of them stays
    by_case: dict[str | None, list[str]] = collections.defaultdict(list)
    for leftover in leftovers:
        by_case[starter_of(leftover, starts)].append(str(leftover))
    if not by_case:
        return
    cell = CellRecordFile(files.records)
    for record in cell.records:
        if record.case in by_case:
            shown = ", ".join(by_case[record.case])
            cell.add(replace(record, metrics={**record.metrics, "leftover_processes": shown}))
    for case, names in by_case.items():
        log(f"[ftmatrix] {case or 'before any case'} left running: {', '.join(names)} (ended)")


def no_verdict(records: Sequence[Record], quarantine: Path | None = None) -> str | None:
    """Why a cell's records hold no verdict on the frameworks, or None when they do.
    ``quarantine``: the cell's file of record lines kept apart (unreadable, or another
    run's or cell's), where it may have one."""
    if not records:
        kept = _quarantined(quarantine) if quarantine is not None else (0, 0)
        if any(kept):  # the cases ran: no record of theirs could be read back
            return (
                f"no record of the cell could be read: its quarantine file {quarantine} "
                f"holds {lines_kept_apart(*kept)}"
            )
        return "no case was collected (check the selection and pytest's -k/-m options)"
    if all(
        r.status in (Status.INSTALL_ERROR, Status.ERROR) and r.case == WHOLE_CELL for r in records
    ):
        first = records[0]
        return f"{first.status.value}: {first.reason or first.message or ''}".strip()
    return None
