"""What one case's phases (setup, call, teardown) did, as the results plugin sees their
reports: the time they took, the first failure or skip, the output the case printed; and
pytest's own texts of a phase that raised, masked before pytest prints or sends them.
Runs inside cells.
"""

from __future__ import annotations

import errno
import time
from datetime import UTC, datetime

import pytest

from ftmatrix.cell.outcome import Failure, case_status
from ftmatrix.cell.redact import current_redactor
from ftmatrix.cell.status import Status


class CaseState:
    """What the setup, call and teardown phases of one case did."""

    def __init__(self, case: str, operation: str) -> None:
        self.case = case
        self.operation = operation
        self.started_at = now()
        self.duration = 0.0
        self.failure: Failure | None = None
        self.skip: BaseException | None = None
        self.output = ""
        self.descriptors_lost = False  # a phase met a descriptor closed under it

    def observe(
        self, report: pytest.TestReport, raised: pytest.ExceptionInfo[BaseException]
    ) -> None:
        """One phase's report that raised ``raised`` (one that raised nothing adds only
        its time: the recorder's)."""
        self.duration += report.duration
        if isinstance(raised.value, OSError) and raised.value.errno == errno.EBADF:
            self.descriptors_lost = True
        if self.failure is not None:
            return
        if isinstance(raised.value, pytest.skip.Exception):
            self.skip = raised.value
            return
        self.failure = Failure.from_exception(raised.value, raised.tb, str(report.longreprtext))
        # What the case and its children printed: vLLM's engine process logs its cause there.
        self.output = report.capstdout + report.capstderr

    def verdict(self) -> tuple[Status, str | None, Failure | None]:
        status, reason = case_status(self.failure, self.skip, self.output)
        return status, reason, self.failure


def mask_report(report: pytest.TestReport) -> None:
    """Mask pytest's own texts of a phase that raised (the traceback its log and its
    FAILURES section print, the output it captured): a secret a case set and took back is
    known to this process alone, not to the supervisor that masks the cell's console."""
    redactor = current_redactor()
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:  # a skip: (path, line, reason)
        report.longrepr = (longrepr[0], longrepr[1], redactor.text(str(longrepr[2])))
    elif longrepr is not None:
        text = str(longrepr)
        masked = redactor.text(text)
        if masked != text:  # else the structured report stays, for pytest's summary line
            report.longrepr = masked
    report.sections = [(title, redactor.text(content)) for title, content in report.sections]


def now() -> str:
    """The time now, in seconds (ISO 8601, UTC): made once a second, not twice a case."""
    global _this_second  # noqa: PLW0603 -- one process's clock
    second = int(time.time())
    if second != _this_second[0]:
        _this_second = (second, datetime.fromtimestamp(second, UTC).isoformat())
    return _this_second[1]


_this_second = (-1, "")
