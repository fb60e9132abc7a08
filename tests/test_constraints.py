"""Constraints files derived from records: what is excluded, what is only conditional, what is not."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime
from pathlib import Path

from conftest import SFT, cell

from ftmatrix.cell.files import CellFiles
from ftmatrix.cell.record import Record
from ftmatrix.cell.records import CellRecordFile
from ftmatrix.cell.status import Status
from ftmatrix.constraints import derive_constraints, write_constraints
from ftmatrix.report.render import render_report
from ftmatrix.store import merge_outputs


def lines(records: list[Record]) -> list[str]:
    """The lines below the file's five-line header and its blank line."""
    (found,) = derive_constraints(records)
    return [line for line in found.render_text().splitlines()[6:] if line]


def test_a_version_failing_in_every_cell_it_was_tried_in_is_excluded():
    records = [
        cell(Status.FAIL, transformers="4.57.6", trl="0.18.0"),
        cell(Status.FAIL, transformers="5.23.0", trl="0.18.0"),
        cell(Status.PASS, transformers="4.57.6", trl="1.16.0"),
        cell(Status.PASS, transformers="5.23.0", trl="1.16.0"),
    ]
    assert lines(records) == [
        "trl!=0.18.0  # fails sft in every cell tried with it (2): "
        "test_sft.py::test_sft (fail ImportError [1a2b3c4d]) in "
        "cpu-py3.11-transformers4.57.6-trl0.18.0, cpu-py3.11-transformers5.23.0-trl0.18.0"
    ]


def test_a_break_of_one_combination_is_a_commented_conditional_line_both_ways():
    records = [
        cell(Status.PASS, transformers="4.57.6", trl="0.19.1"),
        cell(Status.FAIL, transformers="5.23.0", trl="0.19.1"),
        cell(Status.PASS, transformers="4.57.6", trl="1.16.0"),
        cell(Status.PASS, transformers="5.23.0", trl="1.16.0"),
    ]
    where = (
        "test_sft.py::test_sft (fail ImportError [1a2b3c4d]) in "
        "cpu-py3.11-transformers5.23.0-trl0.19.1"
    )
    assert lines(records) == [
        f"# transformers!=5.23.0  # with trl==0.19.1: fails sft: {where}",
        f"# trl!=0.19.1  # with transformers==5.23.0: fails sft: {where}",
    ]
    (found,) = derive_constraints(records)
    data = found.to_dict()["constraints"]
    assert [(c["requirement"], c["when"]) for c in data] == [
        ("transformers!=5.23.0", {"trl": "0.19.1"}),
        ("trl!=0.19.1", {"transformers": "5.23.0"}),
    ]
    assert data[1]["evidence"][0]["pins"] == {"transformers": "5.23.0", "trl": "0.19.1"}


def test_not_installed_is_a_condition_but_never_a_line():
    records = [
        cell(Status.PASS, trl="0.19.1", vllm="0.32.0"),
        cell(Status.FAIL, trl="0.19.1", vllm=None),
        cell(Status.PASS, trl="1.16.0", vllm=None),
        cell(Status.PASS, trl="1.16.0", vllm="0.32.0"),
    ]
    assert [line.split("  # ")[0] for line in lines(records)] == ["# trl!=0.19.1"]
    assert "with vllm not installed: fails sft" in lines(records)[0]


def test_the_newest_releases_all_failing_after_a_passing_one_become_an_upper_bound():
    records = [
        cell(Status.PASS, peft="0.17.1"),
        cell(Status.PASS, peft="0.18.1"),
        cell(Status.FAIL, peft="0.20.0"),
        cell(Status.FAIL, peft="0.21.2"),
    ]
    assert [line.split("  # ")[0] for line in lines(records)] == ["peft<0.20.0"]
    assert (
        "every release tried from 0.20.0 on fails sft (0.20.0, 0.21.2; 0.18.1 passes)"
        in (lines(records)[0])
    )


def test_oldest_releases_failing_become_a_lower_bound_and_one_failing_release_stays_excluded():
    records = [
        cell(Status.FAIL, trl="0.8.0"),
        cell(Status.FAIL, trl="0.9.0"),
        cell(Status.PASS, trl="0.10.0"),
        cell(Status.PASS, trl="1.0.0"),
        cell(Status.FAIL, trl="1.1.0"),  # the newest alone: no trend, so no bound
    ]
    assert [line.split("  # ")[0] for line in lines(records)] == ["trl>0.9.0", "trl!=1.1.0"]


def test_a_failing_run_at_the_end_without_a_pass_before_it_is_not_a_bound():
    # 0.18.1 was only ever an error (our bug): it proves nothing, so no bound reaches past it.
    records = [
        cell(Status.PASS, peft="0.17.1"),
        cell(Status.ERROR, peft="0.18.1"),
        cell(Status.FAIL, peft="0.20.0"),
        cell(Status.FAIL, peft="0.21.2"),
    ]
    assert [line.split("  # ")[0] for line in lines(records)] == ["peft<0.20.0"]
    assert "0.17.1 passes" in lines(records)[0]


def test_error_skip_na_and_install_statuses_are_no_evidence_either_way():
    quiet = [
        Status.ERROR,
        Status.SKIP,
        Status.NOT_APPLICABLE,
        Status.UNINSTALLABLE,
        Status.INSTALL_ERROR,
    ]
    records = [
        cell(status, trl="0.19.1", transformers=f"5.{i}.0") for i, status in enumerate(quiet)
    ]
    records += [cell(Status.PASS, trl="1.16.0", transformers="5.0.0")]
    (found,) = derive_constraints(records)
    assert found.constraints == ()
    assert found.records == 1
    assert "# No break known." in found.render_text()


def test_an_error_where_it_passes_elsewhere_does_not_make_a_pass_either():
    # trl 0.19.1 failed with tf 5; its only other record is an error: still excluded outright.
    records = [
        cell(Status.FAIL, trl="0.19.1", transformers="5.23.0"),
        cell(Status.ERROR, trl="0.19.1", transformers="4.57.6"),
        cell(Status.PASS, trl="1.16.0", transformers="5.23.0"),
    ]
    assert [line.split("  # ")[0] for line in lines(records)] == ["trl!=0.19.1"]


def test_a_case_failing_everywhere_is_unexplained_not_a_line():
    records = [
        cell(Status.FAIL, trl="0.19.1"),
        cell(Status.CRASH, trl="1.16.0"),
        cell(Status.PASS, trl="1.16.0", case="test_sft.py::test_other"),
    ]
    (found,) = derive_constraints(records)
    assert found.constraints == ()
    assert [(u.evidence.case, u.reason) for u in found.unexplained] == [
        (SFT, "passes in no cell tried"),
        (SFT, "passes in no cell tried"),
    ]
    assert "#   test_sft.py::test_sft crash in cpu-py3.11-trl1.16.0: passes in no cell tried" in (
        found.render_text()
    )


def test_a_break_needing_three_pins_is_unexplained():
    records = [
        cell(Status.FAIL, a="1", b="1", c="1"),
        cell(Status.PASS, a="1", b="1", c="2"),
        cell(Status.PASS, a="1", b="2", c="1"),
        cell(Status.PASS, a="2", b="1", c="1"),
    ]
    (found,) = derive_constraints(records)
    assert found.constraints == ()
    assert [u.reason for u in found.unexplained] == [
        "no pin, and no pair of pins, is set apart by a passing cell that differs from it "
        "in that pin alone"
    ]


def test_only_the_newest_run_of_a_cell_counts_and_flaky_records_not_at_all():
    records = [
        cell(Status.FAIL, trl="0.19.1", run_id="20261120T000000Z"),
        cell(Status.PASS, trl="0.19.1", run_id="20261121T000000Z"),
        cell(Status.PASS, trl="1.16.0"),
    ]
    assert derive_constraints(records)[0].constraints == ()
    flaky = Record(**{**cell(Status.FAIL, trl="0.18.0").__dict__, "flaky": True})
    assert derive_constraints([*records, flaky])[0].constraints == ()


def test_one_set_per_operation_and_hardware_class_in_a_stable_order():
    records = [
        cell(Status.FAIL, trl="0.19.1", transformers="5.23.0", operation=op, hardware=hw, case=c)
        for op, c in (("sft", SFT), ("dpo", "test_dpo.py::test_dpo"))
        for hw in ("l4", "cpu")
    ]
    records += [
        cell(Status.PASS, trl=t, transformers=tf, operation=op, hardware=hw, case=c)
        for op, c in (("sft", SFT), ("dpo", "test_dpo.py::test_dpo"))
        for hw in ("l4", "cpu")
        for t, tf in (("0.19.1", "4.57.6"), ("1.16.0", "5.23.0"), ("1.16.0", "4.57.6"))
    ]
    found = derive_constraints(records)
    assert [(s.operation, s.hardware) for s in found] == [
        ("dpo", "cpu"),
        ("dpo", "l4"),
        ("sft", "cpu"),
        ("sft", "l4"),
    ]
    texts = [s.render_text() for s in found]
    for seed in range(5):
        shuffled = records[:]
        random.Random(seed).shuffle(shuffled)
        assert [s.render_text() for s in derive_constraints(shuffled)] == texts


def test_files_are_written_and_stale_ones_removed(tmp_path: Path):
    folder = tmp_path / "constraints"
    folder.mkdir()
    (folder / "gone-cpu.txt").write_text("old")
    records = [cell(Status.FAIL, trl="0.18.0"), cell(Status.PASS, trl="1.16.0")]
    written = write_constraints(folder, records)
    assert sorted(p.name for p in folder.iterdir()) == ["sft-cpu.json", "sft-cpu.txt"]
    assert sorted(written) == sorted(folder.iterdir())
    text = (folder / "sft-cpu.txt").read_text()
    assert text.startswith("# ftmatrix constraints: operation 'sft' on hardware class 'cpu'.\n")
    assert "\ntrl!=0.18.0  # fails sft in every cell tried with it (1): " in text
    data = json.loads((folder / "sft-cpu.json").read_text())
    assert data["constraints"][0]["requirement"] == "trl!=0.18.0"


def test_the_report_writes_the_constraints_files(tmp_path: Path):
    run = "20261122T120000Z"
    for record in [
        cell(Status.FAIL, trl="0.19.1", transformers="5.23.0"),
        cell(Status.PASS, trl="0.19.1", transformers="4.57.6"),
        cell(Status.PASS, trl="1.16.0", transformers="5.23.0"),
    ]:
        CellRecordFile(CellFiles.of(tmp_path, run, record.cell_id).records).add(record)
    merge_outputs(tmp_path)
    render_report(tmp_path, now=datetime(2026, 11, 22, tzinfo=UTC))
    text = (tmp_path / "constraints" / "sft-cpu.txt").read_text()
    assert "\n# trl!=0.19.1  # with transformers==5.23.0: fails sft: " in text


def test_a_version_tried_in_one_cell_without_a_passing_neighbour_is_not_blamed():
    # As in the default matrix: torch 2.14.1 and unsloth appear in one cell only, whose
    # LoRA breaks through a support package (torchao); no cell tells their share apart.
    records = [
        cell(Status.FAIL, torch="2.14.1", peft="0.18.1", unsloth="2026.10.7"),
        cell(Status.PASS, torch="2.13.0", peft="0.18.1", unsloth=None),
        cell(Status.PASS, torch="2.13.0", peft="0.17.1", unsloth=None),
    ]
    (found,) = derive_constraints(records)
    assert found.constraints == ()
    assert [u.evidence.cell_label for u in found.unexplained] == [
        "cpu-py3.11-torch2.14.1-peft0.18.1-unsloth2026.10.7"
    ]
