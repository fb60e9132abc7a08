"""The results plugin: runs inside each cell's pytest and writes the cell's records.

Activated with ``-p ftmatrix.pytest_plugin --ftmatrix-cell CELL.json --ftmatrix-record
OUT.jsonl``. It interprets the case markers (``operation``, ``requires_packages``,
``requires_hardware``), turns each case's outcome into exactly one status, and
rewrites the cell's record file atomically after every case.

Whom to blame decides between ``fail`` and ``error``: an assertion in the case
(a wrong result) or an exception raised inside a framework package is the
frameworks' ``fail``; any other exception raised by our own case code is our
``error``. Imports: the standard library, pytest and packaging (pytest's own
dependency), so the cell's environment holds nothing else of ours.
"""

from __future__ import annotations

import json
import os
import subprocess
import sysconfig
import time
import types
from collections.abc import Generator, Iterator, Mapping
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from ftmatrix.hardware import probe_hardware, usable_gpu_count
from ftmatrix.records import (
    CellRecordFile,
    Record,
    collected_cases_path,
    current_case_path,
    operation_from_path,
    redact,
    write_atomically,
)
from ftmatrix.signature import compute_signature, framework_module, innermost_framework_frame
from ftmatrix.status import Status
from ftmatrix.supervise import die_with_parent

MARKERS = (
    "operation(name): the operation family this case reproduces (sft, grpo, lora, ...)",
    "requires_packages(**specifiers): PEP 440 specifier per distribution; outside it the "
    "case is n/a (the versions do not have the feature)",
    "requires_hardware(cuda=False, gpus=0, min_compute_capability=None): what the machine "
    "must have; without it the case is skipped",
    "exclusive(reason): the case must not share the machine (it starts several processes, "
    "or takes every GPU); with pytest-xdist workers it runs alone, after the others",
)
MESSAGE_LIMIT = 4000


class NotApplicable(pytest.skip.Exception):  # type: ignore[name-defined,misc]
    """Raised to record ``n/a``: this version set does not have the feature."""


def not_applicable(reason: str) -> None:
    """Stop the running case and record it as ``n/a`` with ``reason``."""
    raise NotApplicable(msg=reason, pytrace=False)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("ftmatrix", "ftmatrix results")
    group.addoption("--ftmatrix-cell", help="JSON file describing the cell being run")
    group.addoption("--ftmatrix-record", help="JSONL file to write this cell's records to")
    group.addoption(
        "--ftmatrix-parallel",
        action="store_true",
        help="leave out the exclusive cases: this run shares the machine between workers",
    )


def pytest_configure(config: pytest.Config) -> None:
    for marker in MARKERS:
        config.addinivalue_line("markers", marker)
    cell_file = config.getoption("--ftmatrix-cell")
    record_file = config.getoption("--ftmatrix-record")
    if cell_file and record_file:
        cell = json.loads(Path(cell_file).read_text(encoding="utf-8"))
        config.pluginmanager.register(_Recorder(cell, Path(record_file)), "ftmatrix-recorder")
        if os.environ.get("PYTEST_XDIST_WORKER"):
            _die_with_controller()


def _die_with_controller() -> None:
    """In a pytest-xdist worker: be killed when the controller dies (``kill -9``, a lost runner).

    The supervisor gives the controller the same order. A worker left behind would
    finish its case and write its record while a resumed run writes the same file.
    Linux only, like the supervisor's.
    """
    if die_with_parent() and os.getppid() == 1:  # the controller died before we asked
        os._exit(1)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Gate the case on package versions (n/a) and hardware (skip) before it runs."""
    installed = _installed_versions()
    for marker in item.iter_markers("requires_packages"):
        for package, spec in marker.kwargs.items():
            reason = package_gap(package, str(spec), installed)
            if reason:
                not_applicable(reason)
    for marker in item.iter_markers("requires_hardware"):
        reason = hardware_gap(marker.kwargs, _fingerprint(item.config))
        if reason:
            pytest.skip(reason)


def is_exclusive(item: pytest.Item) -> bool:
    """Must the case have the machine to itself? Marked so, or it wants GPUs.

    A GPU is never shared between cases: two cases on one device would take each
    other's memory and time, and their ``oom`` and ``timeout`` would mean nothing.
    """
    if item.get_closest_marker("exclusive") is not None:
        return True
    for marker in item.iter_markers("requires_hardware"):
        if marker.kwargs.get("cuda") or int(marker.kwargs.get("gpus", 0)) > 0:
            return True
    return False


def package_gap(package: str, spec: str, installed: Mapping[str, str]) -> str | None:
    """Why ``package`` at its installed version lacks the feature, or None if it has it."""
    version = installed.get(canonicalize_name(package))
    if version is None:
        return f"{package} is not installed in this cell (needs {package}{spec})"
    if not SpecifierSet(spec).contains(Version(version), prereleases=True):
        return f"{package} {version} is outside {spec}"
    return None


def hardware_gap(needs: Mapping[str, Any], fingerprint: Mapping[str, Any]) -> str | None:
    """Why this machine cannot run a case needing ``needs``, or None if it can."""
    gpus = usable_gpu_count(fingerprint)
    wanted = int(needs.get("gpus", 1 if needs.get("cuda") else 0))
    if wanted and gpus < wanted:
        have = "no CUDA GPU" if gpus == 0 else f"{gpus} CUDA GPU{'s' if gpus > 1 else ''}"
        return f"needs {wanted} CUDA GPU{'s' if wanted > 1 else ''}; this machine has {have}"
    minimum = needs.get("min_compute_capability")
    if minimum is not None:
        devices = (fingerprint.get("torch") or {}).get("devices") or fingerprint.get("gpus", [])
        caps = [Version(str(d.get("compute_capability", "0"))) for d in devices]
        if not caps or min(caps) < Version(str(minimum)):
            have = ", ".join(str(c) for c in caps) or "none"
            return f"needs compute capability >= {minimum}; this machine has {have}"
    return None


class _Recorder:
    """Collects each case's phases and writes one record when its teardown ends."""

    def __init__(self, cell: Mapping[str, Any], path: Path) -> None:
        self.cell = cell
        self.file = CellRecordFile(path)
        # Set in a pytest-xdist worker: each worker notes its own running case.
        self.worker = os.environ.get("PYTEST_XDIST_WORKER") or None
        self.current = current_case_path(path, self.worker)
        self.collected = collected_cases_path(path)
        self.packages = _installed_versions(by_display_name=True)
        self.hardware: dict[str, Any] | None = None
        self.pending: dict[str, _CaseState] = {}
        self.selected: list[str] = []
        self.controller = False

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.controller = session.config.pluginmanager.has_plugin("dsession")

    @pytest.hookimpl(trylast=True)  # after -k and -m have taken their cases out
    def pytest_collection_modifyitems(
        self, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        self.selected = [i.nodeid for i in items]
        if config.getoption("--ftmatrix-parallel"):
            # The supervisor runs these alone once the shared pass is over.
            exclusive = [i for i in items if is_exclusive(i)]
            if exclusive:
                config.hook.pytest_deselected(items=exclusive)
                items[:] = [i for i in items if not is_exclusive(i)]

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        # The supervisor needs the whole list to finish a cell whose process died.
        if not self.collected.exists():
            write_atomically(self.collected, json.dumps(self.selected))

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> None:
        # Noted before the case starts, so that if the process dies or hangs in it,
        # the supervisor outside knows which case to blame.
        note = {
            "case": item.nodeid,
            "operation": _operation(item),
            "started": time.time(),
            "pid": os.getpid(),
            "worker": self.worker,
        }
        write_atomically(self.current, json.dumps(note))

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: object) -> None:
        """In pytest-xdist's controller: a worker died; add how to its running-case note.

        Only the controller, the worker's parent, can learn its exit status (the
        signal that killed it); the supervisor reads it from the note.
        """
        if not error:
            return
        note_path = current_case_path(self.file.path, str(node.gateway.id))
        try:
            note = json.loads(note_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return  # it died between cases: no case to blame
        note["exit"] = _worker_exit_status(node)
        write_atomically(note_path, json.dumps(note))

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, Any, None]:
        outcome = yield
        report: pytest.TestReport = outcome.get_result()
        state = self.pending.setdefault(item.nodeid, _CaseState(item))
        state.observe(call, report)
        if call.when == "teardown":
            del self.pending[item.nodeid]
            self.file.add(self._record(state))
            self.current.unlink(missing_ok=True)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        # In pytest-xdist's controller the workers' reports arrive too: they record them.
        if report.failed and not self.controller:
            now = _now()
            self.file.add(
                self._base_record(
                    case=report.nodeid or "<collection>",
                    operation=operation_from_path(report.nodeid),
                    status=Status.ERROR,
                    started_at=now,
                    finished_at=now,
                    duration=0.0,
                    exception_type="CollectionError",
                    message="the case file could not be collected",
                    traceback=redact(str(report.longreprtext), os.environ),
                )
            )

    def _record(self, state: _CaseState) -> Record:
        status, reason, exc = state.verdict()
        fields: dict[str, Any] = {"reason": reason}
        if exc is not None:
            exc_type = _qualified_name(type(exc.value))
            message = redact(str(exc.value)[:MESSAGE_LIMIT], os.environ) or ""
            frame = innermost_framework_frame(*_frames(exc.tb))
            fields.update(
                exception_type=exc_type,
                message=message,
                framework_frame=frame,
                signature=compute_signature(exc_type, message, frame),
                traceback=redact(state.longrepr, os.environ),
            )
        return self._base_record(
            case=state.item.nodeid,
            operation=state.operation,
            status=status,
            started_at=state.started_at,
            finished_at=_now(),
            duration=state.duration,
            metrics=state.metrics(),
            **fields,
        )

    def _base_record(self, **fields: Any) -> Record:
        if self.hardware is None:
            # Probed after the first case imported torch, so torch's view costs nothing.
            self.hardware = probe_hardware(os.environ, with_torch=True)
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
            **fields,
        )


class _CaseState:
    """What the setup, call and teardown phases of one case did."""

    def __init__(self, item: pytest.Item) -> None:
        self.item = item
        self.operation = _operation(item)
        self.started_at = _now()
        self.duration = 0.0
        self.failure: tuple[str, pytest.ExceptionInfo[BaseException]] | None = None
        self.skip: BaseException | None = None
        self.longrepr: str | None = None

    def observe(self, call: pytest.CallInfo[None], report: pytest.TestReport) -> None:
        self.duration += report.duration
        excinfo = call.excinfo
        if excinfo is None or self.failure is not None:
            return
        if isinstance(excinfo.value, pytest.skip.Exception):
            self.skip = excinfo.value
            return
        self.failure = (call.when, excinfo)
        self.longrepr = str(report.longreprtext)

    def verdict(self) -> tuple[Status, str | None, pytest.ExceptionInfo[BaseException] | None]:
        if self.failure is not None:
            _, excinfo = self.failure
            return classify_exception(excinfo.value, excinfo.tb), None, excinfo
        if self.skip is not None:
            status = Status.NOT_APPLICABLE if isinstance(self.skip, NotApplicable) else Status.SKIP
            return status, str(getattr(self.skip, "msg", self.skip)), None
        return Status.PASS, None, None

    def metrics(self) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for name, value in self.item.user_properties:
            values[str(name)] = (
                value if isinstance(value, int | float | str | bool) else repr(value)
            )
        return values


def classify_exception(error: BaseException, tb: types.TracebackType | None) -> Status:
    """``fail`` when the frameworks are to blame, ``oom`` for memory, else our ``error``."""
    if isinstance(error, MemoryError) or type(error).__name__ == "OutOfMemoryError":
        return Status.OOM
    if "CUDA out of memory" in str(error):
        return Status.OOM
    origin = _innermost_origin(tb)
    if origin == "framework":
        return Status.FAIL
    if origin == "case" and isinstance(error, AssertionError):
        return Status.FAIL  # our check of the frameworks' result did not hold
    return Status.ERROR


def _innermost_origin(tb: types.TracebackType | None) -> str | None:
    """Where the deepest frame that is neither stdlib nor the test runner lies.

    'framework' (an installed package), 'case' (our code) or None (no such frame).
    """
    stdlib = sysconfig.get_paths()["stdlib"]
    origin = None
    for filename in _frames(tb)[0]:
        if framework_module(filename) is not None:
            origin = "framework"
        elif filename.startswith((stdlib, "<")) or _is_runner_file(filename):
            continue  # the standard library and frozen import machinery blame nobody
        else:
            origin = "case"
    return origin


def _is_runner_file(filename: str) -> bool:
    return any(part in filename for part in ("/_pytest/", "/pluggy/", "/site-packages/pytest/"))


def _frames(tb: types.TracebackType | None) -> tuple[list[str], list[str]]:
    filenames, functions = [], []
    for frame in _walk(tb):
        filenames.append(frame.f_code.co_filename)
        functions.append(frame.f_code.co_name)
    return filenames, functions


def _walk(tb: types.TracebackType | None) -> Iterator[types.FrameType]:
    while tb is not None:
        yield tb.tb_frame
        tb = tb.tb_next


def _installed_versions(*, by_display_name: bool = False) -> dict[str, str]:
    versions = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            versions[name if by_display_name else canonicalize_name(name)] = dist.version
    return dict(sorted(versions.items(), key=lambda kv: kv[0].lower()))


def _fingerprint(config: pytest.Config) -> dict[str, Any]:
    cached: dict[str, Any] | None = getattr(config, "_ftmatrix_fingerprint", None)
    if cached is None:
        cached = probe_hardware(os.environ, with_torch=True)
        config._ftmatrix_fingerprint = cached  # type: ignore[attr-defined]
    return cached


def _worker_exit_status(node: Any) -> int | None:
    """The return code of a pytest-xdist worker that went down (negative: a signal)."""
    # execnet keeps the worker's Popen on its private IO object; without it, no status.
    popen = getattr(getattr(getattr(node, "gateway", None), "_io", None), "popen", None)
    if popen is None:
        return None
    try:
        return int(popen.wait(timeout=5))
    except (OSError, subprocess.TimeoutExpired):
        return None


def _qualified_name(cls: type) -> str:
    module = cls.__module__
    return cls.__qualname__ if module == "builtins" else f"{module}.{cls.__qualname__}"


def _operation(item: pytest.Item) -> str:
    marker = item.get_closest_marker("operation")
    return str(marker.args[0]) if marker and marker.args else operation_from_path(item.nodeid)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
