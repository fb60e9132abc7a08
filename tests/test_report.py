"""The report: newest run per cell, the worst record shown, and nothing from a record executes."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from test_records import make_record

from ftmatrix.known_issues import parse_known_issues
from ftmatrix.records import WHOLE_CELL, CellRecordFile, record_path
from ftmatrix.report import (
    build_grid,
    changes_since_previous,
    failure_groups,
    pass_rates,
    render_html,
    render_markdown,
    reproduce_command,
    write_report,
)
from ftmatrix.status import Status

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
XSS = '<script>alert(1)</script><img src=x onerror="alert(2)">'


def test_only_the_newest_run_of_each_cell_is_shown():
    old = make_record(run_id="20261121T000000Z", status=Status.FAIL, message="old")
    new = make_record(run_id="20261122T000000Z", status=Status.PASS)
    other = make_record(run_id="20261120T000000Z", cell_id="other", cell_label="cpu-other")
    grid = build_grid([old, new, other])
    assert grid.rows == ("cpu-other", "cpu-py3.11-trl1.16.0")
    assert grid.cells[("cpu-py3.11-trl1.16.0", "test_sft.py::test_sft")].status is Status.PASS
    assert grid.runs == ("20261120T000000Z", "20261122T000000Z")


def test_record_content_is_escaped_everywhere():
    bad = make_record(
        status=Status.FAIL,
        message=XSS,
        traceback=XSS,
        exception_type=XSS,
        case=f"test_x.py::test[{XSS}]",
        packages={"evil": XSS},
    )
    page = render_html(build_grid([bad]), generated_at=NOW)
    assert "<script>alert" not in page
    assert 'onerror="alert' not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_uninstallable_cell_spans_its_row_with_the_resolver_reason():
    cell = make_record(
        case=WHOLE_CELL,
        operation="install",
        status=Status.UNINSTALLABLE,
        reason="Because trl==1.16.0 depends on transformers>=4.56.2 ...",
        cell_id="c2",
        cell_label="cpu-py3.11-tf4.40.0-trl1.16.0",
    )
    page = render_html(build_grid([make_record(), cell]), generated_at=NOW)
    assert '<td colspan="1"><span class="status s-uninstallable"' in page
    assert "depends on transformers&gt;=4.56.2" in page
    assert reproduce_command(cell) == "nox -s 'matrix(cpu-py3.11-tf4.40.0-trl1.16.0)'"


def test_failure_detail_has_the_reproduce_command():
    record = make_record(status=Status.FAIL, message="boom", exception_type="RuntimeError")
    page = render_html(build_grid([record]), generated_at=NOW)
    assert "nox -s &#x27;matrix(cpu-py3.11-trl1.16.0)&#x27; -- test_sft.py::test_sft" in page


def test_markdown_and_json_reports(tmp_path: Path):
    CellRecordFile(record_path(tmp_path, "r1", "c1")).add(
        make_record(status=Status.FAIL, message="a | b\nsecond line")
    )
    grid = write_report(tmp_path, now=NOW)
    assert len(grid.records) == 1
    markdown = (tmp_path / "summary.md").read_text()
    assert "| cpu-py3.11-trl1.16.0 | fail |" in markdown
    assert "- **fail** `cpu-py3.11-trl1.16.0` `test_sft.py::test_sft`: a \\| b" in markdown
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["counts"] == {"fail": 1}
    assert (tmp_path / "index.html").read_text().startswith("<!DOCTYPE html>")


def test_markdown_for_no_records():
    assert "No records." in render_markdown(build_grid([]))


def test_failures_group_by_signature_and_link_known_issues():
    known = parse_known_issues(
        [
            {
                "id": "k1",
                "title": "t",
                "upstream": "https://github.com/o/r/issues/1",
                "match": {"message": "boom", "packages": {"trl": ">=0"}},
                "fixed-in": {"trl": "1.0.0"},
            }
        ],
        source="k.yaml",
    )
    same = [
        make_record(
            cell_id=f"c{i}",
            cell_label=f"cell{i}",
            status=Status.FAIL,
            message="boom 1",
            signature="s1",
            packages={"trl": "1.16.0"},
        )
        for i in range(3)
    ]
    other = make_record(
        cell_id="c9", cell_label="cell9", status=Status.FAIL, message="new thing", signature="s2"
    )
    finding = {"case": "test_sft.py::test_sft", "axis": "trl", "first_bad": "0.19.0"}
    groups = failure_groups([*same, other, make_record()], known, [finding])
    assert [(g.key, len(g.records)) for g in groups] == [("s1", 3), ("s2", 1)]
    assert groups[0].known is not None and groups[0].known.id == "k1"
    assert groups[0].late_fixes == ("trl 1.16.0 (fixed in 1.0.0)",)
    assert groups[0].first_bad == (finding,)
    assert groups[1].known is None
    page = render_html(build_grid([*same, other]), generated_at=NOW, groups=groups)
    assert '<a href="https://github.com/o/r/issues/1">k1</a>' in page
    assert "<strong class=new>new</strong>" in page


def test_changes_between_the_two_newest_runs_name_the_packages_that_moved():
    before = make_record(run_id="r1", packages={"trl": "1.16.0", "accelerate": "1.14.0"})
    after = make_record(
        run_id="r2",
        status=Status.FAIL,
        message="x",
        packages={"trl": "1.16.0", "accelerate": "1.15.0"},
    )
    (change,) = changes_since_previous([before, after])
    assert change.kind == "regression"
    assert change.moved_packages == {"accelerate": ("1.14.0", "1.15.0")}
    fixed = make_record(run_id="r3", packages={"trl": "1.16.0"})
    (change,) = changes_since_previous([before, after, fixed])
    assert change.kind == "fix"


def test_pass_rate_per_operation_per_run():
    records = [
        make_record(run_id="r1"),
        make_record(run_id="r1", case="b", status=Status.FAIL),
        make_record(run_id="r2"),
        make_record(run_id="r2", case="c", status=Status.SKIP),
    ]
    assert pass_rates(records) == {"sft": [("r1", 0.5), ("r2", 1.0)]}


def test_badges_and_embedded_data_cannot_break_out_of_the_page(tmp_path: Path):
    CellRecordFile(record_path(tmp_path, "r1", "c1")).add(
        make_record(status=Status.FAIL, message=XSS, pins={"trl": "</script><script>alert(3)"})
    )
    write_report(tmp_path, now=NOW)
    page = (tmp_path / "index.html").read_text()
    assert "</script><script>alert(3)" not in page
    badge = json.loads((tmp_path / "badges" / "sft.json").read_text())
    assert badge == {"schemaVersion": 1, "label": "sft", "message": "0/1 pass", "color": "red"}


def test_headline_keeps_the_cause_of_an_announced_error():
    from ftmatrix.report import headline

    lazy = (
        "Failed to import trl.trainer.grpo_trainer because of the following error (look up "
        "to see its traceback):\nNo module named 'requests'"
    )
    assert headline(lazy).endswith("(look up to see its traceback): No module named 'requests'")
    assert headline("plain message\nsecond") == "plain message"
    assert headline(None) == ""
