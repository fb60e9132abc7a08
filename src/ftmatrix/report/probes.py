"""The cap probes: cells that install only with a declared requirement overridden (uv's
``--override``), said apart from the grid, per cap and hardware class, in the page and
the job summary."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape

from ftmatrix.cell.record import Record
from ftmatrix.cell.status import Status
from ftmatrix.report.grid import worst_of
from ftmatrix.report.md_text import md_text


def probe_summaries(probes: Sequence[Record]) -> dict[tuple[str, str], str]:
    """Per (cap, hardware class): "past it: sft pass, grpo fail", the worst of each operation."""
    worst: dict[tuple[str, str], dict[str, Status]] = {}
    for record in probes:
        per = worst.setdefault((record.beyond_cap or "", record.hardware_class), {})
        per[record.operation] = worst_of(
            [*(x for x in [per.get(record.operation)] if x), record.status]
        )[0]
    return {
        key: ", ".join(f"{op} {status.value}" for op, status in sorted(per.items()))
        for key, per in sorted(worst.items())
    }


def cap_owner(cap: str) -> str:
    """``unsloth 2026.10.7: trl<=1.15.0`` -> ``unsloth's cap trl<=1.15.0``."""
    parts = []
    for one in cap.split(";"):
        owner, _, requirement = one.strip().partition(":")
        parts.append(f"{owner.split()[0]}'s cap {requirement.strip()}" if requirement else one)
    return " and ".join(parts)


def probes_html(probes: Sequence[Record], outcomes: Mapping[tuple[str, str], str]) -> str:
    """The page's section on cap probes ('' without probes); ``outcomes``: their
    :func:`probe_summaries`."""
    if not probes:
        return ""
    cells: dict[tuple[str, str], set[str]] = {}
    for record in probes:
        cells.setdefault((record.beyond_cap or "", record.hardware_class), set()).add(
            record.cell_label
        )
    items = "".join(
        f"<li><strong>{escape(hw)}</strong>: installs only past {escape(cap_owner(cap))} "
        f"({escape(cap)}); past it: {escape(text)} "
        f"<span class=moved>{escape(', '.join(sorted(cells[(cap, hw)])))}</span></li>"
        for (cap, hw), text in outcomes.items()
    )
    return (
        "<h2 id=probes>Past declared caps (probes)</h2>"
        "<p>Cells that install only with a declared requirement overridden (uv's "
        "<code>--override</code>); never mixed with the cells above. "
        "<code>reports/constraints/caps.txt</code> says whether each cap is justified.</p>"
        f"<ul class=probes>{items}</ul>"
    )


def probes_markdown(outcomes: Mapping[tuple[str, str], str]) -> str:
    """The job summary's section on cap probes (empty without probes)."""
    if not outcomes:
        return ""
    lines = ["", "## Past declared caps (probes)", ""]
    for (cap, hw), text in outcomes.items():
        lines.append(
            f"- {md_text(hw)}: installs only past {md_text(cap_owner(cap))}; past it: "
            f"{md_text(text)}"
        )
    return "\n".join(lines) + "\n"
