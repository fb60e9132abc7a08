"""Failures grouped by cause: one group per signature (or whole-cell reason).

Each group knows the known issues whose signature fits it (none: unexplained; several:
causes that overlap in its cells), the fixed releases that still fail, and the first-bad
versions bisection found for its cases. Records of one error signature that different
entries explain (or none) are separate groups: no record borrows another's explanation. Its
message is the root cause's (the innermost error, not a wrapper's), and it names the
package to blame where the trace shows it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ftmatrix.cell.record import Record
from ftmatrix.cell.signature import blame
from ftmatrix.cell.status import PROBLEM_STATUSES, Status
from ftmatrix.check.results import CAUSE_SEPARATOR, group_key
from ftmatrix.known_issues import KnownIssue, cell_statuses, explain_all
from ftmatrix.messages import root_message
from ftmatrix.proofs import EntryProof, claim_text


@dataclass(frozen=True, kw_only=True)
class FailureGroup:
    """Records that broke the same way: one signature (or one whole-cell reason)."""

    key: str
    status: Status
    exception_type: str | None
    message: str
    records: tuple[Record, ...]
    causes: tuple[KnownIssue, ...]
    claims: Mapping[str, str]  # cause id -> its range, proven or only claimed
    late_fixes: tuple[str, ...]
    first_bad: tuple[dict[str, Any], ...]
    blame: str | None = None  # "peft 0.17.1 imports HybridCache, which transformers ..."

    @property
    def known(self) -> KnownIssue | None:
        """The first known issue that explains the group; None: unexplained."""
        return self.causes[0] if self.causes else None

    @property
    def signature_key(self) -> str:
        """The error signature (or whole-cell reason) the group's records share."""
        return self.key.split(CAUSE_SEPARATOR, 1)[0]

    @property
    def versions(self) -> dict[str, list[str]]:
        """For each pinned package, the versions among the group's cells."""
        seen: dict[str, set[str]] = {}
        for record in self.records:
            for package, version in record.pins.items():
                seen.setdefault(package, set()).add(version or "none")
        return {k: sorted(v) for k, v in seen.items()}


def failure_groups(
    records: Iterable[Record],
    known: Sequence[KnownIssue] = (),
    findings: Sequence[dict[str, Any]] = (),
    proofs: Mapping[str, EntryProof] | None = None,
) -> list[FailureGroup]:
    """Group the framework breaks among ``records`` by cause, largest group first."""
    records = list(records)
    cells = cell_statuses(records)
    buckets: dict[str, list[Record]] = {}
    causes: dict[str, tuple[KnownIssue, ...]] = {}
    for record in records:
        if record.status not in PROBLEM_STATUSES:
            continue
        entries = explain_all(record, known, cells)
        key = group_key(record)
        if entries:
            key += CAUSE_SEPARATOR + "+".join(e.id for e in entries)
        buckets.setdefault(key, []).append(record)
        causes[key] = entries
    groups = []
    for key, members in buckets.items():
        first = members[0]
        late = sorted(
            {x for r in members for e in causes[key] for x in e.still_failing_after_fix(r)}
        )
        cases = {r.case for r in members}
        groups.append(
            FailureGroup(
                key=key,
                status=first.status,
                exception_type=first.root_exception_type or first.exception_type,
                message=root_message(first),
                records=tuple(sorted(members, key=lambda r: (r.cell_label, r.case))),
                causes=causes[key],
                claims={c.id: claim_text(c, (proofs or {}).get(c.id)) for c in causes[key]},
                late_fixes=tuple(late),
                first_bad=tuple(f for f in findings if f.get("case") in cases),
                blame=_blame(members),
            )
        )
    return sorted(groups, key=lambda g: (-len(g.records), g.key))


def _blame(members: Sequence[Record]) -> str | None:
    """The first blame the group's records give, with that record's versions."""
    texts = [blame(root_message(r), r.root_frame or r.framework_frame, r.packages) for r in members]
    return next((t for t in texts if t), None)
