"""The report's first screen as data: causes by known issue, the axes that vary, and
counts that read sensibly with one run (issue #40, item 2)."""

from __future__ import annotations

from datetime import UTC, datetime

from conftest import make_record

from ftmatrix.cell.record import WHOLE_CELL
from ftmatrix.cell.status import Status
from ftmatrix.known_issues import parse_known_issues
from ftmatrix.report.causes import causes_of, cut, short_form
from ftmatrix.report.failures import failure_groups
from ftmatrix.report.first_screen import (
    axes_shown,
    cell_names,
    default_pivot_axes,
    short_label,
    trend_text,
)
from ftmatrix.report.grid import build_grid, grid_axes, grid_entries
from ftmatrix.report.model import report_data
from ftmatrix.report.page import render_html
from ftmatrix.report.summary import render_markdown

NOW = datetime(2026, 11, 27, tzinfo=UTC)

OVER_COUNT = (
    "contracts broken: exact_update, update_scale\n"
    "exact_update: weights after one SGD step (batch 4 x 1) against minus the reference "
    "gradient, model.embed_tokens.weight at [12, 0] (largest gap 0.03): trainer -0.02 != "
    "reference -0.023 (tolerance 1e-05)"
)
KNOWN = parse_known_issues(
    [
        {
            "id": "over-count",
            "title": "transformers' Trainer counts every label position for num_items_in_batch",
            "package": "transformers",
            "upstream": "https://github.com/huggingface/transformers/issues/46204",
            "match": {"message": "contracts broken: exact_update"},
        }
    ],
    source="known_issues.yaml",
)


def broken(
    cell: str,
    case: str,
    signature: str,
    *,
    message: str = OVER_COUNT,
    tf: str = "4.57.6",
    exception: str = "helpers.contracts.ContractError",
):
    return make_record(
        cell_id=cell,
        cell_label=f"cpu-py3.11-torch2.13.0-tf{tf}-trl1.16.0",
        pins={"torch": "2.13.0", "transformers": tf, "trl": "1.16.0"},
        case=case,
        operation=case.split("_", 1)[1].split(".", 1)[0],
        status=Status.FAIL,
        exception_type=exception,
        message=message,
        signature=signature,
    )


def test_one_known_issue_over_two_signatures_is_one_cause_headed_by_its_title():
    # SFT and the Trainer break the same way with different signatures: two groups.
    records = [
        broken("c1", "test_sft.py::test_sft_exact_update[accumulation-1]", "sig-sft"),
        broken("c1", "test_sft.py::test_sft_exact_update[accumulation-2]", "sig-sft"),
        broken("c1", "test_train.py::test_train_exact_update[accumulation-1]", "sig-train"),
    ]
    groups = failure_groups(records, KNOWN)
    assert len(groups) == 2
    [cause] = causes_of(groups)
    assert cause.title == KNOWN[0].title
    assert cause.link == "https://github.com/huggingface/transformers/issues/46204"
    assert len(cause.groups) == 2
    # Three results in one cell: the cell listed once, its three cases under it.
    assert cause.count_text() == "3 results in 1 cell"
    assert list(cause.cells) == ["cpu-py3.11-torch2.13.0-tf4.57.6-trl1.16.0"]
    assert len(cause.cells["cpu-py3.11-torch2.13.0-tf4.57.6-trl1.16.0"]) == 3
    # The job summary heads it the same way: one line.
    summary = render_markdown(report_data(build_grid(records), generated_at=NOW, groups=groups))
    causes = summary.split("## Failures by cause", 1)[1].split("##", 1)[0].strip().splitlines()
    assert causes == [
        f"- 3 results in 1 cell, fail: {KNOWN[0].title} (known: [over-count]"
        "(https://github.com/huggingface/transformers/issues/46204) "
        "(affects an unestablished range (claimed, not proven: no cases named to prove it with "
        "(proof.cases))))"
    ]


def test_records_two_entries_explain_are_one_cause_naming_both_and_counted_once():
    second = parse_known_issues(
        [
            {
                "id": "also",
                "title": "a second report of the same break",
                "package": "transformers",
                "upstream": "https://github.com/huggingface/transformers/issues/1",
                "match": {"message": "update_scale"},
            }
        ],
        source="known_issues.yaml",
    )
    records = [
        broken("c1", "test_train.py::test_train_exact_update[accumulation-1]", "sig-train"),
        broken("c1", "test_sft.py::test_sft_exact_update[accumulation-1]", "sig-sft"),
    ]
    [cause] = causes_of(failure_groups(records, [*KNOWN, *second]))
    assert [e.id for e in cause.entries] == ["over-count", "also"]
    assert cause.title == KNOWN[0].title
    assert cause.count_text() == "2 results in 1 cell"


def test_unexplained_failures_are_headed_by_a_readable_short_form():
    contracts = broken("c1", "test_train.py::test_train_loss_options[gpt2]", "sig-gpt2")
    [cause] = causes_of(failure_groups([contracts]))
    assert cause.known is None and cause.link is None
    assert cause.title == "train: exact update and update scale are wrong"
    one = broken(
        "c1",
        "test_lora.py::test_lora_checkpointing",
        "sig-ckpt",
        message="contracts broken: checkpointing_gradient\ncheckpointing_gradient: ...",
    )
    assert short_form(failure_groups([one])[0]) == "lora: checkpointing gradient is wrong"
    raised = broken(
        "c1",
        "test_dpo.py::test_dpo_two_steps",
        "sig-dpo",
        message="'LlamaForCausalLM' object has no attribute 'warnings_issued'" + " x" * 200,
        exception="AttributeError",
    )
    heading = short_form(failure_groups([raised])[0])
    assert heading.startswith("AttributeError: 'LlamaForCausalLM' object has no attribute")
    assert len(heading) <= 120 and heading.endswith("\u2026")


def test_a_cell_that_never_ran_is_headed_by_its_status_and_reason():
    down = make_record(
        case=WHOLE_CELL,
        operation="install",
        status=Status.UNINSTALLABLE,
        reason="No solution found when resolving dependencies:\n"
        "Because unsloth==2026.10.7 depends on trl<=1.15.0 and you require trl==1.16.0, "
        "we can conclude that your requirements are unsatisfiable.",
    )
    [cause] = causes_of(failure_groups([down]))
    assert cause.title == (
        "uninstallable: unsloth==2026.10.7 depends on trl<=1.15.0 and you require trl==1.16.0"
    )


def test_cut_stops_at_a_word():
    assert cut("short") == "short"
    text = "weights after one SGD step (batch 4 x 1) against minus the reference gradient"
    assert cut(text, 40) == "weights after one SGD step (batch 4 x\u2026"


def test_the_axes_that_vary_name_the_cells_and_open_the_any_two_axes_view():
    records = [
        broken("c1", "test_sft.py::test_sft_x", "s", tf="4.57.6"),
        broken("c2", "test_sft.py::test_sft_x", "s", tf="5.23.0"),
    ]
    values = grid_axes(grid_entries(records))
    shown = axes_shown(values)
    assert shown.varying == ("transformers",)
    assert shown.fixed_text() == "hardware cpu, python 3.11, torch 2.13.0, trl 1.16.0"
    assert [short_label(r, shown.varying) for r in records] == ["tf4.57.6", "tf5.23.0"]
    # One package varies: its versions against the operations, never cells x cases.
    assert default_pivot_axes(shown) == ("operation", "transformers")


def test_cell_names_are_the_varying_axes_unless_two_cells_share_them():
    a = broken("c1", "test_sft.py::test_sft_x", "s", tf="4.57.6")
    b = broken("c2", "test_sft.py::test_sft_x", "s", tf="5.23.0")
    assert cell_names([a, b], ("transformers",)) == {
        a.cell_label: "tf4.57.6",
        b.cell_label: "tf5.23.0",
    }
    # Another profile's cell with the same versions (its support packages differ): both
    # keep their labels rather than two rows reading the same.
    twin = make_record(cell_id="c3", cell_label="cpu-py3.11-tf4.57.6-acc1.0", pins=a.pins)
    names = cell_names([a, b, twin], ("transformers",))
    assert names[a.cell_label] == a.cell_label and names[twin.cell_label] == twin.cell_label
    assert names[b.cell_label] == "tf5.23.0"


def test_transformers_and_trl_first_where_more_axes_vary():
    values = {
        "cell": ["a", "b"],
        "hardware": ["cpu", "l4"],
        "python": ["3.11"],
        "peft": ["0.17.1", "0.18.1"],
        "transformers": ["4.57.6", "5.23.0"],
        "trl": ["0.19.1", "1.16.0"],
        "unsloth": ["none", "2026.10.7"],
        "operation": ["sft"],
        "case": ["x"],
    }
    shown = axes_shown(values)
    assert shown.varying == ("transformers", "trl", "hardware", "peft", "unsloth")
    assert default_pivot_axes(shown) == ("transformers", "trl")
    record = make_record(
        hardware_class="l4",
        pins={"transformers": "5.23.0", "trl": "1.16.0", "peft": "0.18.1", "unsloth": None},
    )
    assert short_label(record, shown.varying) == "tf5.23.0-trl1.16.0-l4-peft0.18.1-nounsloth"


def test_a_single_cell_opens_on_operations():
    values = grid_axes(grid_entries([make_record()]))
    shown = axes_shown(values)
    assert shown.varying == ()
    assert default_pivot_axes(shown) == ("operation", "cell")
    assert short_label(make_record(), ()) == "cpu-py3.11-trl1.16.0"  # nothing varies: the label


def test_the_pass_rate_reads_sensibly_with_one_run_or_many():
    assert trend_text([("r1", 1.0)]) == "100% (the first run: no trend yet)"
    assert trend_text([("r1", 0.5), ("r2", 0.75)]) == (
        "75% in the newest run (50% in the run before; 2 runs shown)"
    )
    assert trend_text([("r1", 0.5), ("r2", 0.5), ("r3", 0.5)]) == (
        "50% in the newest run (same as the run before; 3 runs shown)"
    )


def test_the_cell_filter_names_cells_by_what_varies() -> None:
    records = [
        make_record(cell_id="c1", cell_label="cpu-py3.11-trl1.15.0", pins={"trl": "1.15.0"}),
        make_record(cell_id="c2", cell_label="cpu-py3.11-trl1.16.0", pins={"trl": "1.16.0"}),
    ]
    page = render_html(report_data(build_grid(records), generated_at=NOW))
    cell_filter = page.split('data-name="cell"', 1)[1].split("</select>", 1)[0]
    assert '<option value="0" title="cpu-py3.11-trl1.15.0">trl1.15.0</option>' in cell_filter
    assert "cpu-py3.11-trl1.16.0</option>" not in cell_filter
