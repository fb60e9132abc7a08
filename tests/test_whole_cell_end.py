"""A cell that ends as a whole (a skip on another machine, an install that fails) after
an earlier pass of the same run recorded some of its cases: those records are set aside,
never dropped unsaid."""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

from conftest import make_record

from ftmatrix.cell.files import CellFiles
from ftmatrix.cell.records import CellRecordFile, record_line
from ftmatrix.cell.status import Status
from ftmatrix.config import HardwareClass, InstallOptions
from ftmatrix.plan import Cell
from ftmatrix.runner import CellContext, run_cell


def test_saving_a_cells_records_sets_aside_every_line_it_replaces(tmp_path: Path) -> None:
    path = tmp_path / "records" / "20261122T120000Z" / "abc123def456.jsonl"
    path.parent.mkdir(parents=True)
    earlier = [make_record(case=f"test_sft.py::test_{n}") for n in "ab"]
    held = [record_line(r) for r in earlier]
    path.write_text("".join(held) + '{"torn\n')
    file = CellRecordFile(path)
    whole = make_record(case="<cell>", status=Status.SKIP)
    file.records = [whole, earlier[0]]  # one of them stays: it is not set aside
    assert file.save() == 2
    aside = CellFiles(path).set_aside.read_text().splitlines()
    assert aside == [held[1].strip(), '{"torn']
    assert path.read_text() == record_line(whole) + held[0]
    assert file.save() == 0  # saved again: nothing more to set aside


def test_a_resumed_cell_that_ends_as_a_skip_keeps_its_earlier_records(tmp_path: Path) -> None:
    """Resumed on a machine without the GPU its class asks for: the skip stands for the
    cell, and the records its first pass wrote on the GPU host are set aside."""
    cell = Cell(python=f"{sys.version_info[0]}.{sys.version_info[1]}", pins=(), hardware="gpu")
    ctx = CellContext(
        run_id="20261122T120000Z",
        out_dir=tmp_path / "out",
        cases_dir=tmp_path / "cases",
        case_selection=(),
        install=InstallOptions(),
        hardware_class=HardwareClass(name="gpu", runs_on=(), gpus=8, gpu_name="no such GPU"),
        env=dict(os.environ),
        resume=True,
    )
    files = CellFiles.of(ctx.out_dir, ctx.run_id, cell.id)
    files.records.parent.mkdir(parents=True)
    earlier = [
        dataclasses.replace(
            make_record(case=f"test_sft.py::test_{n}"), run_id=ctx.run_id, cell_id=cell.id
        )
        for n in "ab"
    ]
    files.records.write_text("".join(record_line(r) for r in earlier))
    said: list[str] = []
    records = run_cell(cell, Path(sys.executable), ctx, log=said.append)
    assert [r.status for r in records] == [Status.SKIP]
    assert len(files.set_aside.read_text().splitlines()) == 2
    assert any(f"2 record line(s) it had are set aside in {files.set_aside}" in s for s in said)
