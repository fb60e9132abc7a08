"""The results plugin: runs inside each cell's pytest and writes the cell's records.

Activated with ``-p ftmatrix.cell.plugin --ftmatrix-cell CELL.json --ftmatrix-record
OUT.jsonl``. It interprets the case markers (``operation``, ``requires_packages``,
``requires_hardware``), observes each case's phases, records the one status
:mod:`ftmatrix.cell.outcome` makes of them, and appends the case's record to the cell's
record file when it ends, before the next case starts. Imports: the standard library,
pytest and packaging (pytest's own dependency), so the cell's environment holds nothing
else of ours.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from json.encoder import encode_basestring_ascii as _json_string
from pathlib import Path
from typing import Any

import pytest

from ftmatrix.cell import api as _api
from ftmatrix.cell import secrets_set
from ftmatrix.cell.api import gpu_lease
from ftmatrix.cell.file_writes import (
    DISK_FULL_ERRNOS,
    LineAppender,
    NoteFile,
    note_text,
    read_note,
    write_atomically,
)
from ftmatrix.cell.files import CellFiles
from ftmatrix.cell.gates import (
    Gatekeeper,
    asks,
    display_versions,
    forget_marker_names,
    gate,
    is_exclusive,
    is_isolated,
    marker_names,
)
from ftmatrix.cell.hardware import probe_hardware
from ftmatrix.cell.outcome import text_of
from ftmatrix.cell.phases import CaseState, mask_report, now
from ftmatrix.cell.processes import die_with_parent, keeper_dying, worker_exit_status
from ftmatrix.cell.record import Record
from ftmatrix.cell.record_lines import CellLines
from ftmatrix.cell.records import (
    RUNNING_CASE_VARIABLE,
    UNWRITTEN_RECORD,
    operation_from_path,
    scan_records,
    shorten,
)
from ftmatrix.cell.redact import SECRET_NAME, current_redactor, is_secret
from ftmatrix.cell.signature import (
    clean_paths,
    compute_signature,
    innermost_framework_frame,
    unwrap_message,
)
from ftmatrix.cell.status import Status

# The fixture is registered where pytest looks for a plugin's fixtures: its attributes.
__all__ = ["gpu_lease"]
MESSAGE_LIMIT = 4000
# The case author's API is ftmatrix.cell.api; cases written against earlier releases
# import these names from here, which still works and warns.
_MOVED_TO_API = (
    "ChildProcessFailure",
    "GpuLease",
    "NotApplicable",
    "cpu_only_env",
    "not_applicable",
)


def __getattr__(name: str) -> Any:
    if name in _MOVED_TO_API:
        warnings.warn(
            f"import {name} from ftmatrix.cell.api (ftmatrix.cell.plugin's copy goes away)",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(_api, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("ftmatrix", "ftmatrix results")
    group.addoption("--ftmatrix-cell", help="JSON file describing the cell being run")
    group.addoption("--ftmatrix-record", help="JSONL file to write this cell's records to")
    group.addoption(
        "--ftmatrix-parallel",
        action="store_true",
        help="leave out the exclusive cases: this run shares the machine between workers",
    )
    group.addoption(
        "--ftmatrix-resume",
        action="store_true",
        help="leave out the cases that have a record (a resumed cell whose list of its "
        "cases was lost)",
    )
    group.addoption(
        "--ftmatrix-alone",
        action="store_true",
        help="this process runs one case alone: an isolated case runs here (else it is left "
        "out, for the supervisor to run in a process of its own)",
    )


def pytest_configure(config: pytest.Config) -> None:
    for marker in _api.MARKERS:
        config.addinivalue_line("markers", marker)
    cell_file = config.getoption("--ftmatrix-cell")
    record_file = config.getoption("--ftmatrix-record")
    if cell_file and record_file:
        cell = json.loads(Path(cell_file).read_text(encoding="utf-8"))
        recorder = _Recorder(cell, Path(record_file))
        _register(config.pluginmanager, recorder, "ftmatrix-recorder")
        secrets_set.listen(
            is_secret, SECRET_NAME
        )  # a secret a case sets and takes back is masked too
        if os.environ.get("PYTEST_XDIST_WORKER"):
            _register(config.pluginmanager, _ChannelGuard(recorder), "ftmatrix-channel-guard")
            _die_with_controller()


def _register(manager: pytest.PytestPluginManager, part: object, name: str) -> None:
    """Register ``part`` of the results plugin, even where a ``-p no:NAME`` blocked its name
    (in PYTEST_ADDOPTS, the cases' addopts): without it, cases would run unrecorded, or
    ungated (failing where they are n/a), and blocked, pytest would drop it unsaid."""
    if manager.is_blocked(name):
        unblock = getattr(manager, "unblock", None)  # pluggy 1.4+
        if unblock is not None:
            unblock(name)
        else:
            manager._name2plugin.pop(name, None)
    manager.register(part, name)


def _die_with_controller() -> None:
    """In a pytest-xdist worker: be killed when the controller dies (``kill -9``, a lost runner).

    The supervisor gives the controller the same order. A worker left behind would
    finish its case and write its record while a resumed run writes the same file.
    Linux only, like the supervisor's.
    """
    if die_with_parent() and os.getppid() == 1:  # the controller died before we asked
        os._exit(1)


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    """Gate the cases that ask for package versions or hardware, and those alone: a
    pytest whose cases ask for neither runs no gate at all."""
    asking = [item for item in session.items if asks(item)]
    if asking:
        _register(session.config.pluginmanager, Gatekeeper(asking), "ftmatrix-gatekeeper")


class _Recorder:
    """Collects each case's phases and writes one record when its teardown ends."""

    def __init__(self, cell: Mapping[str, Any], path: Path) -> None:
        self.cell = cell
        # Set in a pytest-xdist worker: each worker notes its own running case.
        self.worker = os.environ.get("PYTEST_XDIST_WORKER") or None
        # A record after every case, the file kept open; workers share it (and the lock).
        self.file = LineAppender(path, shared=self.worker is not None)
        self.lines: CellLines | None = None  # made with the first record (the machine known)
        self.files = CellFiles(path)
        self.current = self.files.running_case(self.worker)
        # Plain strings, made once: written before every case, and pathlib's objects cost
        # more than the system calls.
        self.note = NoteFile(self.current)
        self.starts = LineAppender(self.files.starts, short=True)
        self.worker_json = "null" if self.worker is None else _json_string(self.worker)
        self.pid = os.getpid()
        self.operations: dict[str, str] = {}  # each collected case's
        self.packages = dict(display_versions())
        self.hardware: dict[str, Any] | None = None
        self.pending: dict[str, CaseState] = {}  # by case id: the running case's phases
        # Each phase's exception by (case, phase) until its report is logged: pytest makes
        # the report, then logs it, but a plugin that runs a case again (rerunfailures)
        # makes all three phases' reports before it logs them.
        self.raised: dict[tuple[str, str], pytest.ExceptionInfo[BaseException]] = {}
        self.selected: list[str] = []
        self.controller = False
        self.unwritten: list[str] = []  # the lines of records a full disk refused, in order
        self.refused = False  # said once
        # In a pytest-xdist worker: a case closed the worker's channel to the controller.
        self.cut_off = False
        self.collected_list = ""  # the list of collected cases, where this process wrote it

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.controller = session.config.pluginmanager.has_plugin("dsession")

    @pytest.hookimpl(trylast=True)  # after -k and -m have taken their cases out
    def pytest_collection_modifyitems(
        self, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        self.selected = [i.nodeid for i in items]
        if config.getoption("--ftmatrix-resume"):
            recorded = {r.case for r in scan_records(self.file.path).records}
            _leave_out(config, items, lambda i: i.nodeid in recorded)
        if not config.getoption("--ftmatrix-alone"):
            # The supervisor runs each of these in a pytest of its own once this one ends;
            # a case its gate already answers (n/a, skip) is recorded here, with no process.
            isolated = _leave_out(config, items, lambda i: is_isolated(i) and gate(i) is None)
            if isolated:
                _note_isolated(self.files.isolated, isolated)
        if config.getoption("--ftmatrix-parallel"):
            # The supervisor runs these alone once the shared pass is over.
            _leave_out(config, items, lambda i: is_exclusive(i) and gate(i) is None)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        forget_marker_names()  # every hook that adds markers has run now
        # The supervisor needs the whole list to finish a cell whose process died.
        if not self.files.collected.exists():
            self.collected_list = json.dumps(self.selected)
            write_atomically(self.files.collected, self.collected_list)
        # Each case's operation, and its id masked for its record, worked out here, all
        # together: each among pytest's own work between two cases cost three times more.
        self.operations = {item.nodeid: _operation(item) for item in session.items}
        redactor = current_redactor()
        for case in self.operations:
            redactor.text(case)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> None:
        # Noted before the case starts, so that if the process dies or hangs in it,
        # the supervisor outside knows which case to blame. The JSON made by hand (as
        # json.dumps writes it): made before every case, json.dumps's calls cost more.
        case, started = item.nodeid, time.time()
        operation = self.operations.get(case) or _operation(item)
        self.pending[case] = CaseState(case, operation)
        quoted = _json_string(case)
        note = (
            f'{{"case": {quoted}, "operation": {_json_string(operation)}, '
            f'"started": {started!r}, "pid": {self.pid}, "worker": {self.worker_json}}}'
        )
        os.environ[RUNNING_CASE_VARIABLE] = case
        try:
            self.note.write(note)
            # One short line per case, appended whole by one write: workers share the file.
            self.starts.append(f'{{"case": {quoted}, "started": {started!r}}}\n'.encode())
        except OSError as exc:  # a full disk: the case runs unnoted, blamed for no death
            if exc.errno not in DISK_FULL_ERRNOS:
                raise

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: object) -> None:
        """In pytest-xdist's controller: a worker died; add how to its running-case note.

        Only the controller, the worker's parent, can learn its exit status (the
        signal that killed it); the supervisor reads it from the note.
        """
        if not error:
            return
        status = worker_exit_status(node)  # the note read after: what the worker left
        if status == "running":
            return  # its channel closed under a case still running: it records it
        note_path = self.files.running_case(str(node.gateway.id))
        note = read_note(note_path)
        if note is None:
            # It died between cases, or ended itself after its case's record (a case that
            # closed its channel): no case to blame.
            return
        note["exit"] = status
        write_atomically(note_path, note_text(json.dumps(note)), durable=False)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> None:
        # Only the phase's exception is taken here, for its report, which reaches
        # pytest_runtest_logreport: two plain hooks cost a case less than one wrapper.
        if call.excinfo is not None:
            self.raised[(item.nodeid, call.when)] = call.excinfo

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if self.controller:
            return  # pytest-xdist's controller: the workers record their cases
        case = report.nodeid  # (a property since pytest 9: read once)
        raised = self.raised.pop((case, report.when), None) if self.raised else None
        state = self.pending.get(case)
        if state is None:  # another plugin ran it past our protocol hook, or ran it again
            operation = self.operations.get(case) or operation_from_path(case)
            state = self.pending[case] = CaseState(case, operation)
        if raised is None:  # the usual phase: its time is all there is to take
            state.duration += report.duration
        else:
            state.observe(report, raised)
            mask_report(report)
        if report.when == "teardown":
            del self.pending[case]
            if keeper_dying():
                # The case ended the process watching it (its parent): this process dies
                # with it in a moment. Waited for here, with the case's note in place, so
                # the supervisor records this case as the crash, never the next one.
                _wait_for_the_end()
            self._keep(self._line(state, report))
            intact = self.note.clear() and not state.descriptors_lost and not self.cut_off
            if not intact and not self.unwritten:
                # The case closed descriptors it did not open (pytest's own, from which it
                # restores its output after each case, ours, or a pytest-xdist worker's
                # channel): every case after it in this process would fail to show its
                # output. Its record written, this process ends; the supervisor (or
                # pytest-xdist, which replaces the worker) runs the rest in a new one.
                self._end_early()
            with contextlib.suppress(KeyError):  # (a case may have unset it)
                del os.environ[RUNNING_CASE_VARIABLE]

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        # In pytest-xdist's controller the workers' reports arrive too: they record them.
        if report.failed and not self.controller:
            when = now()
            self._keep(
                self._record_line(
                    case=report.nodeid or "<collection>",
                    operation=operation_from_path(report.nodeid),
                    status=Status.ERROR,
                    started_at=when,
                    finished_at=when,
                    duration=0.0,
                    exception_type="CollectionError",
                    message="the case file could not be collected",
                    traceback=_masked(str(report.longreprtext)),
                )
            )

    def pytest_terminal_summary(self, terminalreporter: Any, config: pytest.Config) -> None:
        """Every pass's verdict in the log, a line each, as pytest's ``-rp`` wrote them
        (the cell's pytest runs with ``-ra``: pytest's own lines cost 0.04 ms a pass)."""
        passed = [r for r in terminalreporter.stats.get("passed", ()) if r.when == "call"]
        if not passed:
            return
        where: dict[str, str] = {}  # each case file's path from the folder pytest ran in
        lines = []
        for report in passed:
            path, sep, rest = str(report.nodeid).partition("::")
            shown = where.get(path)
            if shown is None:
                shown = _relative(config.rootpath / path, config.invocation_params.dir)
                where[path] = shown
            lines.append(f"PASSED {shown}{sep}{rest}\n")
        terminalreporter.write_sep("=", "passes")
        terminalreporter.write("".join(lines))

    def _keep(self, line: str) -> None:
        """Write a record's ``line``, and any the disk refused before (a full disk); what
        still cannot be written waits for the next record and the session's end."""
        waiting, self.unwritten = [*self.unwritten, line], []
        for each in waiting:
            try:
                self.file.append(each.encode("utf-8"))
            except OSError as exc:
                self.unwritten.append(each)
                if not self.refused:
                    self.refused = True
                    case = json.loads(each)["case"]
                    full = exc.errno in DISK_FULL_ERRNOS  # frees up
                    sys.stderr.write(
                        f"ftmatrix: the record of {case} cannot be written ({exc}); it is kept "
                        f"and written {'once the disk takes it' if full else 'if it can be'}\n"
                    )

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        self._finish()

    def _finish(self) -> None:
        """Close the files; hand the records a full disk still refuses to the supervisor."""
        self.note.close()
        self.starts.close()
        if self.collected_list and not self.files.collected.exists():  # a case removed it
            self.files.collected.parent.mkdir(parents=True, exist_ok=True)
            write_atomically(self.files.collected, self.collected_list)
        if self.unwritten:
            self._keep(self.unwritten.pop())  # a last try, of all of them in order
            for line in self.unwritten:  # each on a line of its own, after pytest's dots
                sys.stdout.write("\n" + UNWRITTEN_RECORD + line)
            sys.stdout.flush()
        self.file.close()

    def _end_early(self) -> None:
        """End this pytest between two cases, as a finished one (the note gone: a
        pytest-xdist controller that sees this worker end blames no case)."""
        self._finish()
        os._exit(0)

    def _line(self, state: CaseState, report: pytest.TestReport) -> str:
        # A case that raised nothing passed: the usual verdict, with no working out.
        passed = state.failure is None and state.skip is None
        if passed and self.lines is not None and not report.user_properties:
            return self.lines.pass_line(
                case=state.case,
                operation=state.operation,
                started_at=state.started_at,
                finished_at=now(),
                duration=state.duration,
            )
        status, reason, failure = (Status.PASS, None, None) if passed else state.verdict()
        fields: dict[str, Any] = {"reason": reason}
        if failure is not None and failure.crashed is not None:
            # As the supervisor records a process that died: how, and no exception.
            fields.update(message=reason, **_texts(failure.traceback, "traceback"))
        elif failure is not None:
            # Masked before shortened: a secret across the cut would keep its two ends.
            message = shorten(_masked(failure.message) or "", MESSAGE_LIMIT)
            frame = innermost_framework_frame(failure.filenames, failure.functions)
            # The signature follows the chain to its root, so a break seen through a
            # wrapper (trl's lazy import) and without one is one group.
            root_frame = (
                innermost_framework_frame(failure.root_filenames, failure.root_functions) or frame
            )
            root_type = failure.root_type or failure.exception_type
            root_message = clean_paths(
                unwrap_message(shorten(_masked(failure.root_message) or "", MESSAGE_LIMIT))
            )
            fields.update(
                exception_type=failure.exception_type,
                framework_frame=frame,
                root_exception_type=root_type,
                root_message=root_message,
                root_frame=root_frame,
                signature=compute_signature(root_type, root_message, root_frame),
                **_texts(message, "message"),
                **_texts(failure.traceback, "traceback"),
            )
        return self._record_line(
            case=state.case,
            operation=state.operation,
            status=status,
            started_at=state.started_at,
            finished_at=now(),
            duration=state.duration,
            metrics=_metrics(report.user_properties),
            **fields,
        )

    def _record_line(self, **fields: Any) -> str:
        """The line of the cell's record with ``fields``."""
        if self.lines is None:
            # Probed after the first case imported torch, so torch's view costs nothing.
            self.hardware = probe_hardware(os.environ, with_torch=True)
            self.lines = CellLines(self._base_record())
        return self.lines.line(**fields)

    def _base_record(self) -> Record:
        """A record of what every record of the cell holds alike; the case's own fields
        are left for :class:`CellLines` to fill in."""
        assert self.hardware is not None
        return Record(
            run_id=self.cell["run_id"],
            cell_id=self.cell["id"],
            cell_label=self.cell["label"],
            lock_id=self.cell.get("lock_id"),
            python=self.cell["python"],
            pins=self.cell["pins"],
            hardware_class=self.cell["hardware"],
            runner_labels=tuple(self.cell.get("runner_labels", ())),
            packages=self.packages,
            host_packages=self.cell.get("host_packages", {}),
            hardware=self.hardware,
            beyond_cap=self.cell.get("beyond_cap"),
            case="",
            operation="",
            status=Status.PASS,
            started_at="",
            finished_at="",
        )


class _ChannelGuard:
    """In a pytest-xdist worker: a case that closed the worker's channel to the controller
    (``os.closerange``) makes pytest-xdist's report of it fail to send. Without this, the
    error ends the case before its teardown and record (the note left, the case taken for
    a crash); with it, the case ends, its record is written, and the worker ends: the
    controller hands its other cases to a new one."""

    def __init__(self, recorder: _Recorder) -> None:
        self.recorder = recorder

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> Any:
        outcome = yield
        excinfo = outcome.excinfo
        # execnet's failed send: an OSError with no errno ("cannot send"); a real I/O
        # error of a hook (one with an errno) is not this and goes on as it was.
        if excinfo is None or not isinstance(excinfo[1], OSError) or excinfo[1].errno is not None:
            return
        outcome.force_result([])
        self.recorder.cut_off = True
        if report.when == "teardown":
            # The recorder runs before pytest-xdist's hook (registered after it): the
            # case's record is written; the send of its teardown report failed.
            self.recorder._end_early()


def _metrics(properties: Sequence[tuple[str, object]]) -> dict[str, Any]:
    """The numbers a case recorded (``record_property``), as its record holds them: a name
    or a value whose text cannot be made gets a stand-in (:func:`text_of`)."""
    values: dict[str, Any] = {}
    for name, value in properties:
        values[text_of(name)] = (
            value if isinstance(value, int | float | str | bool) else text_of(value, repr)
        )
    return values


def _texts(text: str | None, name: str) -> dict[str, str | None]:
    """``name`` with the machine's paths replaced (and secrets redacted), and
    ``raw_<name>`` with the paths kept, where they differ."""
    redacted = _masked(text)
    raw = None if redacted is None else shorten(redacted)
    clean = None if raw is None else clean_paths(raw)
    return {name: clean, f"raw_{name}": raw if raw != clean else None}


def _leave_out(
    config: pytest.Config, items: list[pytest.Item], left: Callable[[pytest.Item], bool]
) -> list[str]:
    """Take the cases ``left`` names out of this pytest's ``items``, as -k does; their ids."""
    out = {item.nodeid for item in items if left(item)}
    if out:
        config.hook.pytest_deselected(items=[i for i in items if i.nodeid in out])
        items[:] = [i for i in items if i.nodeid not in out]
    return sorted(out)


def _note_isolated(path: Path, cases: Sequence[str]) -> None:
    """Add ``cases`` to the list of isolated cases the supervisor reads."""
    try:
        known = set(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError):
        known = set()
    if not set(cases) <= known:
        write_atomically(path, json.dumps(sorted(known | set(cases))))


def _masked(text: str | None) -> str | None:
    """``text`` with every secret of the environment as it is now masked (the secrets
    worked out once per environment: :func:`current_redactor`); None stays None."""
    return None if text is None else current_redactor().text(text)


def _wait_for_the_end() -> None:
    """Wait to be killed with the keeper (its death signal); leave if it never comes."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        time.sleep(0.05)
    os._exit(137)


def _relative(path: Path, start: Path) -> str:
    """``path`` as pytest shows a case's file: from ``start``, with ``/``."""
    try:
        return Path(os.path.relpath(path, start)).as_posix()
    except ValueError:  # another drive (Windows)
        return path.as_posix()


def _operation(item: pytest.Item) -> str:
    if "operation" not in marker_names(item):
        return operation_from_path(item.nodeid)
    marker = item.get_closest_marker("operation")
    return str(marker.args[0]) if marker and marker.args else operation_from_path(item.nodeid)
