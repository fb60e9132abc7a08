"""Splitting the cells of a run across machines: stable, and balanced by expected cost.

Shard ``i/n`` of the same cells with the same costs is always the same set, so
CI jobs can be retried one by one. Costs are the durations of each cell's last
run where known, so one slow cell does not make one shard take all night.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence

from ftmatrix.cell.record import Record
from ftmatrix.plan import Cell
from ftmatrix.record_order import newest_per


def shard_cells(
    cells: Sequence[Cell], index: int, count: int, costs: Mapping[str, float]
) -> list[Cell]:
    """The cells of shard ``index`` of ``count`` (1-based), in plan order.

    Longest-processing-time-first: cells by decreasing expected cost (label breaks
    ties), each to the shard with the least load so far (lowest index breaks ties).
    A cell with no known cost is expected to take the median known cost.
    """
    if not 1 <= index <= count:
        raise ValueError(f"shard {index}/{count}: expected 1 <= index <= count")
    known = [costs[c.label] for c in cells if c.label in costs]
    default = statistics.median(known) if known else 1.0
    expected = {c.label: costs.get(c.label, default) for c in cells}
    # A shard past the number of cells never gets one (an empty shard of a lower index
    # always ties first), so only that many loads are kept, whatever N asks.
    slots = min(count, len(cells))
    loads = [0.0] * slots
    owner: dict[str, int] = {}
    for cell in sorted(cells, key=lambda c: (-expected[c.label], c.label)):
        target = min(range(slots), key=lambda i: (loads[i], i))
        loads[target] += expected[cell.label]
        owner[cell.label] = target + 1
    return [c for c in cells if owner[c.label] == index]


def cell_costs(records: Iterable[Record]) -> dict[str, float]:
    """Seconds each cell label took in the newest run that has it."""
    records = list(records)
    newest = newest_per(records, key=lambda r: r.cell_label)
    costs: dict[str, float] = {}
    for record in records:
        if record.run_id == newest[record.cell_label].run_id:
            costs[record.cell_label] = costs.get(record.cell_label, 0.0) + record.duration
    return costs
