"""The closed set of outcomes a record can have, each with exactly one meaning.

The record schema, the report legend and the docs' table are all derived from
:class:`Status`, so a status is described here and nowhere else.
"""

from __future__ import annotations

import enum


class Status(enum.Enum):
    """What happened to one case in one cell."""

    PASS = "pass"
    FAIL = "fail"
    CRASH = "crash"
    TIMEOUT = "timeout"
    OOM = "oom"
    SKIP = "skip"
    NOT_APPLICABLE = "n/a"
    UNINSTALLABLE = "uninstallable"
    INSTALL_ERROR = "install-error"
    ERROR = "error"

    @property
    def meaning(self) -> str:
        """One sentence a report reader can act on."""
        return _MEANINGS[self]

    @property
    def is_break(self) -> bool:
        """True where a run of the frameworks broke: ``fail``, ``crash``, ``timeout``, ``oom``.

        The one definition of "counts as a break" for constraints, autobisect and bisect.
        Not ``error`` (our case's bug), ``skip`` or ``n/a`` (it did not run), nor
        ``uninstallable`` and ``install-error``: those say whether the pins install, a
        finding of the plan, not that a run of them broke.
        """
        return self in _BREAKS

    @property
    def severity(self) -> int:
        """Rank for showing the worst of several records: higher is worse."""
        return _SEVERITY.index(self)

    @classmethod
    def parse(cls, value: str) -> Status:
        """The status named ``value``; a ValueError lists the allowed names."""
        try:
            return cls(value)
        except ValueError:
            allowed = ", ".join(s.value for s in cls)
            raise ValueError(f"unknown status {value!r}; allowed: {allowed}") from None


# What a report lists as failures, with details and a cause: all but a pass and the
# two ways of not running (skip, n/a).
PROBLEM_STATUSES = frozenset(
    s for s in Status if s not in (Status.PASS, Status.SKIP, Status.NOT_APPLICABLE)
)


_MEANINGS = {
    Status.PASS: "The operation ran and its result checks out.",
    Status.FAIL: "The frameworks raised or produced a wrong result.",
    Status.CRASH: "The process died (signal, CUDA fatal error).",
    Status.TIMEOUT: "The case or the cell ran past its time limit.",
    Status.OOM: "The case ran out of memory (CPU or GPU).",
    Status.SKIP: "This hardware cannot run it (needs CUDA, needs more GPUs).",
    Status.NOT_APPLICABLE: "This version set does not have the feature.",
    Status.UNINSTALLABLE: "The resolver proves the pins cannot be installed together.",
    Status.INSTALL_ERROR: "The install was attempted and failed for another reason.",
    Status.ERROR: "The case itself is broken: a bug of ours, never counted against a framework.",
}

_BREAKS = frozenset({Status.FAIL, Status.CRASH, Status.TIMEOUT, Status.OOM})

# Worst last: a grid cell holding several records shows the most severe one.
_SEVERITY = [
    Status.NOT_APPLICABLE,
    Status.SKIP,
    Status.PASS,
    Status.UNINSTALLABLE,
    Status.INSTALL_ERROR,
    Status.ERROR,
    Status.TIMEOUT,
    Status.OOM,
    Status.FAIL,
    Status.CRASH,
]


def status_table_markdown() -> str:
    """The docs' status table, generated from the enum (python -m ftmatrix.docs_gen)."""
    rows = [f"| `{s.value}` | {s.meaning} |" for s in Status]
    return "\n".join(["| status | meaning |", "|---|---|", *rows])
