"""The report: newest run per cell, the worst record shown, and nothing from a record executes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from datetime import UTC, datetime
from html import escape
from pathlib import Path

import pytest
from conftest import make_record, write_records

from ftmatrix.cell.record import WHOLE_CELL, Record
from ftmatrix.cell.status import Status
from ftmatrix.errors import ConfigError, ExitCode
from ftmatrix.known_issues import KnownIssue, parse_known_issues
from ftmatrix.report.causes import causes_of
from ftmatrix.report.changes import (
    NO_EARLIER_RUN,
    NOTHING_IN_COMMON,
    Comparison,
    changes_since_previous,
    pass_rates,
)
from ftmatrix.report.failures import failure_groups
from ftmatrix.report.grid import (
    GridEntry,
    build_grid,
    grid_axes,
    grid_entries,
    pivot,
    pivot_data,
    worst_of,
)
from ftmatrix.report.model import report_data
from ftmatrix.report.overview import compatibility_table
from ftmatrix.report.page import render_html
from ftmatrix.report.page_failures import reproduce_command
from ftmatrix.report.page_grid import pivot_html
from ftmatrix.report.render import render_report
from ftmatrix.report.summary import MOST_CASE_COLUMNS, render_markdown
from ftmatrix.store import merge_outputs, newest_records

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
    page = render_html(report_data(build_grid([bad]), generated_at=NOW))
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
    data = report_data(build_grid([make_record(), cell]), generated_at=NOW)
    # With cells as rows (the page opens on the axes that vary; here none but the cell).
    table = pivot_html(data.grid, data.entries, data.axes, ("cell", "case"))
    assert '<td colspan="1"><span class="status s-uninstallable"' in table
    assert "depends on transformers&gt;=4.56.2" in render_html(data)
    assert reproduce_command(cell) == "nox -s 'matrix(cpu-py3.11-tf4.40.0-trl1.16.0)'"


def test_failure_detail_has_the_reproduce_command():
    record = make_record(status=Status.FAIL, message="boom", exception_type="RuntimeError")
    page = render_html(report_data(build_grid([record]), generated_at=NOW))
    assert "nox -s &#x27;matrix(cpu-py3.11-trl1.16.0)&#x27; -- test_sft.py::test_sft" in page


def test_markdown_and_json_reports(tmp_path: Path):
    write_records(tmp_path, make_record(status=Status.FAIL, message="a | b\nsecond line"))
    merge_outputs(tmp_path)
    grid = render_report(tmp_path, now=NOW)
    assert len(grid.records) == 1
    markdown = (tmp_path / "summary.md").read_text()
    assert "| cpu-py3.11-trl1.16.0 | fail |" in markdown
    assert "- **fail** `cpu-py3.11-trl1.16.0` `test_sft.py::test_sft`: a \\| b" in markdown
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["counts"] == {"fail": 1}
    assert (tmp_path / "index.html").read_text().startswith("<!DOCTYPE html>")


def test_rendering_reads_the_history_and_never_writes_it(tmp_path: Path):
    # Merging is its own step: records not merged yet are not in the report, nor the history.
    write_records(tmp_path, make_record(status=Status.FAIL))
    assert len(render_report(tmp_path, now=NOW).records) == 0
    assert newest_records(tmp_path / "history.sqlite") == []
    merged = merge_outputs(tmp_path)
    assert len(render_report(tmp_path, now=NOW, problems=merged.problems).records) == 1


def test_markdown_for_no_records():
    assert "No records." in render_markdown(report_data(build_grid([]), generated_at=NOW))


def test_failures_group_by_signature_and_link_known_issues():
    known = parse_known_issues(
        [
            {
                "id": "k1",
                "title": "t",
                "package": "trl",
                "upstream": "https://github.com/huggingface/trl/issues/1",
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
    assert [(g.key, len(g.records)) for g in groups] == [("s1 ~ k1", 3), ("s2", 1)]
    assert groups[0].known is not None and groups[0].known.id == "k1"
    assert groups[0].late_fixes == ("trl 1.16.0 (fixed in 1.0.0)",)
    assert groups[0].first_bad == (finding,)
    assert groups[1].known is None
    page = render_html(report_data(build_grid([*same, other]), generated_at=NOW, groups=groups))
    assert '<a href="https://github.com/huggingface/trl/issues/1">k1</a>' in page
    assert "<strong class=new>unexplained</strong>" in page


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
    write_records(
        tmp_path,
        make_record(status=Status.FAIL, message=XSS, pins={"trl": "</script><script>alert(3)"}),
    )
    merge_outputs(tmp_path)
    render_report(tmp_path, now=NOW)
    page = (tmp_path / "index.html").read_text()
    assert "</script><script>alert(3)" not in page
    badge = json.loads((tmp_path / "badges" / "sft.json").read_text())
    assert badge == {"schemaVersion": 1, "label": "sft", "message": "0/1 pass", "color": "red"}


def test_headline_keeps_the_cause_of_an_announced_error():
    from ftmatrix.messages import headline

    lazy = (
        "Failed to import trl.trainer.grpo_trainer because of the following error (look up "
        "to see its traceback):\nNo module named 'requests'"
    )
    assert headline(lazy).endswith("(look up to see its traceback): No module named 'requests'")
    assert headline("plain message\nsecond") == "plain message"
    assert headline(None) == ""
    # A resolver's proof: its first step names the conflict, not its "No solution found".
    proof = (
        "No solution found when resolving dependencies:\n"
        "Because only certifi<=2026.10.18 is available and unsloth>=2026.10.9 depends on "
        "certifi>=2026.10.19, we can conclude that unsloth>=2026.10.9 cannot be used."
    )
    assert headline(proof) == (
        "only certifi<=2026.10.18 is available and unsloth>=2026.10.9 depends on "
        "certifi>=2026.10.19"
    )


def pivot_records() -> list:
    """Two transformers x two trl, two cases each; one pair cannot be installed."""
    records = []
    for number, (tf, trl) in enumerate(
        [("4.57.6", "0.19.1"), ("5.23.0", "0.19.1"), ("10.0.0", "1.16.0")]
    ):
        for case, operation in [("test_sft.py::test_sft", "sft"), ("test_grpo.py::g", "grpo")]:
            broken = tf == "5.23.0" and operation == "grpo"
            records.append(
                make_record(
                    cell_id=f"c{number}",
                    cell_label=f"tf{tf}-trl{trl}",
                    pins={"transformers": tf, "trl": trl, "vllm": None},
                    case=case,
                    operation=operation,
                    status=Status.FAIL if broken else Status.PASS,
                    message="boom\nsecond line" if broken else None,
                )
            )
    records.append(
        make_record(
            cell_id="c9",
            cell_label="tf4.57.6-trl1.16.0",
            pins={"transformers": "4.57.6", "trl": "1.16.0"},
            case=WHOLE_CELL,
            operation="install",
            status=Status.UNINSTALLABLE,
            reason="Because trl==1.16.0 depends on transformers>=4.56.2",
        )
    )
    return records


def test_whole_cell_records_stand_for_each_case_their_cell_never_ran():
    records = pivot_records()
    entries = grid_entries(records)
    whole = [e for e in entries if e.record.case == WHOLE_CELL]
    assert [(e.case, e.operation) for e in whole] == [
        ("test_grpo.py::g", "grpo"),
        ("test_sft.py::test_sft", "sft"),
    ]
    assert len(entries) == 8
    # With no case anywhere, the whole-cell record is its own column.
    (alone,) = grid_entries(records[-1:])
    assert (alone.case, alone.operation) == (WHOLE_CELL, "install")
    # A cell that ran some cases before failing as a whole keeps its own results there.
    partial = make_record(cell_id="c0", case=WHOLE_CELL, status=Status.TIMEOUT, operation="x")
    spread = grid_entries([*records[:1], partial, *records[2:]])
    assert [(e.case, e.record.status) for e in spread if e.record.cell_id == "c0"] == [
        ("test_grpo.py::g", Status.TIMEOUT),
        ("test_sft.py::test_sft", Status.PASS),
    ]


def test_axes_are_the_fixed_ones_and_every_pinned_package_in_version_order():
    axes = grid_axes(grid_entries(pivot_records()))
    assert list(axes) == [
        "cell",
        "hardware",
        "python",
        "transformers",
        "trl",
        "vllm",
        "operation",
        "case",
    ]
    assert axes["transformers"] == ["4.57.6", "5.23.0", "10.0.0"]  # not string order
    assert axes["vllm"] == ["none", "unpinned"]  # null pin vs a cell that never pinned it
    assert axes["operation"] == ["grpo", "sft"]
    assert axes["hardware"] == ["cpu"]


def test_worst_of_ranks_by_severity_and_counts():
    assert worst_of([Status.PASS, Status.FAIL, Status.CRASH, Status.FAIL]) == (Status.CRASH, 1, 4)
    assert worst_of([Status.PASS, Status.SKIP, Status.PASS]) == (Status.PASS, 2, 3)
    assert worst_of([Status.NOT_APPLICABLE]) == (Status.NOT_APPLICABLE, 1, 1)


def test_pivot_any_two_axes_with_the_others_as_filters():
    entries = grid_entries(pivot_records())

    def shown(table: dict[tuple[str, str], list[GridEntry]]) -> dict[tuple[str, str], str]:
        out = {}
        for key, members in table.items():
            status, count, total = worst_of(m.record.status for m in members)
            out[key] = f"{status.value} {count}/{total}"
        return out

    table = pivot(entries, rows="transformers", columns="trl")
    assert shown(table) == {
        ("4.57.6", "0.19.1"): "pass 2/2",
        ("4.57.6", "1.16.0"): "uninstallable 2/2",
        ("5.23.0", "0.19.1"): "fail 1/2",
        ("10.0.0", "1.16.0"): "pass 2/2",
    }
    only_sft = pivot(entries, rows="transformers", columns="trl", filters={"operation": "sft"})
    assert shown(only_sft)[("5.23.0", "0.19.1")] == "pass 1/1"
    assert shown(only_sft)[("4.57.6", "1.16.0")] == "uninstallable 1/1"
    by_operation = pivot(entries, rows="operation", columns="vllm", filters={"trl": "0.19.1"})
    assert shown(by_operation) == {("grpo", "none"): "fail 1/2", ("sft", "none"): "pass 2/2"}


def decode(data: dict) -> list[tuple[str, str, str, str, str, str, str]]:
    """The embedded grid data back as (cell, transformers, operation, case, status,
    headline, anchor), the way the page's script reads it."""
    axes, values = data["axes"], data["values"]
    out = []
    flat = data["records"]
    for i in range(0, len(flat), 6):
        cell, operation, case, severity, text, anchor = flat[i : i + 6]
        row = data["cells"][cell]
        out.append(
            (
                values[0][row[1]],
                values[axes.index("transformers")][row[1 + axes.index("transformers")]],
                values[axes.index("operation")][operation],
                values[axes.index("case")][case],
                data["statuses"][severity][0],
                data["texts"][text],
                data["anchors"][anchor] if anchor >= 0 else "",
            )
        )
    return out


def test_embedded_grid_data_holds_every_result_once_with_strings_in_tables():
    entries = grid_entries(pivot_records())
    data = pivot_data(entries)
    assert data["axes"] == list(grid_axes(entries))
    assert [s[0] for s in data["statuses"]] == [
        "n/a",
        "skip",
        "pass",
        "uninstallable",
        "install-error",
        "error",
        "timeout",
        "oom",
        "fail",
        "crash",
    ]  # index = severity: the script takes the larger number as the worse
    decoded = decode(data)
    assert len(decoded) == len(entries) == 8
    assert (
        "tf5.23.0-trl0.19.1",
        "5.23.0",
        "grpo",
        "test_grpo.py::g",
        "fail",
        "boom",
        "f-c1-test-grpo-py--g",
    ) in decoded
    reason = "Because trl==1.16.0 depends on transformers>=4.56.2"
    assert (
        "tf4.57.6-trl1.16.0",
        "4.57.6",
        "sft",
        "test_sft.py::test_sft",
        "uninstallable",
        reason,
        "f-c9--",
    ) in decoded
    assert data["whole"] == [data["anchors"].index("f-c9--")]
    assert sorted(data["texts"]) == ["", reason, "boom"]  # each string once
    assert len(data["cells"]) == 4  # cell-level values once per cell, not per result


def test_default_grid_is_rendered_without_scripts_and_combines_same_label_cells():
    twin = make_record(cell_id="twin", status=Status.FAIL, message="on the other machine")
    page = render_html(report_data(build_grid([make_record(), twin]), generated_at=NOW))
    # Two cells with one label (say, one per runner) share a row: the worst shows, with
    # how many have it, and the list opens without any script.
    assert (
        '<td><details class=combo><summary title="1 fail, 1 pass">'
        '<span class="status s-fail">fail</span> 1/2'
        '</summary><ul><li><span class="status s-fail">fail</span>' in page
    )
    assert '<a href="#f-twin-test-sft-py--test-sft">details</a>' in page
    assert '<form class=filters id=pivot-controls hidden onsubmit="return false">' in page


def test_axis_values_and_cases_from_records_stay_inert_in_the_pivot():
    evil = make_record(
        case=f"test_x.py::test[{XSS}]",
        pins={XSS: XSS, "trl": "</script><script>alert(3)</script>"},
        status=Status.FAIL,
        message="</script><!--",
    )
    # A second cell with another value: the axis varies, so it is offered as a filter.
    other = make_record(cell_id="c2", cell_label="cpu-other", pins={XSS: "1", "trl": "1"})
    page = render_html(report_data(build_grid([evil, other]), generated_at=NOW))
    assert "<script>alert" not in page
    assert "<img src=x" not in page
    assert "</script><!--" not in page
    start = page.index('<script type="application/json" id=pivot-data>')
    blob = page[start:].split(">", 1)[1].split("</script>", 1)[0]
    data = json.loads(blob)  # the whole blob, unbroken, and its values intact
    assert XSS in data["axes"]
    assert XSS in data["values"][data["axes"].index(XSS)]
    assert "</script><script>alert(3)</script>" in data["values"][data["axes"].index("trl")]
    assert f"test_x.py::test[{XSS}]" in data["values"][-1]
    assert f'data-name="{escape(XSS)}"' in page


def test_probes_are_shown_apart_and_the_plan_findings_as_a_matrix(tmp_path: Path):
    from ftmatrix.config import parse_matrix
    from ftmatrix.plan import Installability, plan_cells
    from ftmatrix.planview import write_installability

    matrix = parse_matrix(
        "packages: {unsloth: ['2026.10.7'], trl: ['1.13.0', '1.16.0'], vllm: [none, '0.32.0']}\n"
        "strategy: pairwise\n",
        source="m.yaml",
        default_python="3.11",
    )
    reason = "Because unsloth==2026.10.7 depends on trl<=1.15.0 and you require trl==1.16.0"

    def oracle(queries):
        return [
            Installability(installable=False, reason=reason)
            if q.get("trl") == "1.16.0"
            else Installability(installable=True)
            for q in queries
        ]

    write_installability(tmp_path, "r1", plan_cells(matrix, oracle))
    plain = make_record(pins={"unsloth": "2026.10.7", "trl": "1.13.0"})
    probe = make_record(
        cell_id="probe0000000",
        cell_label="cpu-py3.11-unsloth2026.10.7-trl1.16.0-pastcap",
        pins={"unsloth": "2026.10.7", "trl": "1.16.0"},
        beyond_cap="unsloth 2026.10.7: trl<=1.15.0",
        status=Status.FAIL,
        operation="grpo",
        case="test_grpo.py::test_grpo",
    )
    write_records(tmp_path, plain)
    write_records(tmp_path, probe)
    merge_outputs(tmp_path)
    grid = render_report(tmp_path, now=NOW)
    assert grid.rows == ("cpu-py3.11-trl1.16.0",)  # the probe is not a row of the grid
    page = (tmp_path / "index.html").read_text()
    assert (
        "installs only past unsloth&#x27;s cap trl&lt;=1.15.0 (unsloth 2026.10.7: "
        "trl&lt;=1.15.0); past it: grpo fail"
    ) in page
    assert "<h2 id=installability>What cannot co-install</h2>" in page
    assert (
        "<code>trl 1.16.0</code> (installs with nothing): unsloth==2026.10.7 depends on "
        "trl&lt;=1.15.0"
    ) in page
    summary = (tmp_path / "summary.md").read_text()
    assert "- cpu: installs only past unsloth's cap trl&lt;=1.15.0; past it: grpo fail" in summary
    caps = (tmp_path / "constraints" / "caps.txt").read_text()
    assert "# unsloth 2026.10.7: trl<=1.15.0  # cap justified; past it: grpo fail" in caps
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["probes"] == [
        {"cap": "unsloth 2026.10.7: trl<=1.15.0", "hardware": "cpu", "outcome": "grpo fail"}
    ]
    assert results["installability"]["uninstallable_values"][0]["pins"] == {"trl": "1.16.0"}


def test_published_reports_show_no_path_of_the_machine(tmp_path: Path):
    # Paths as this machine writes them: its environment's packages, its standard
    # library, the cases' folder, a temporary folder.
    import sysconfig

    site = sysconfig.get_paths()["purelib"]
    stdlib = sysconfig.get_paths()["stdlib"]
    cases = tmp_path / "checkout" / "cases"
    message = (
        f"cannot import name 'HybridCache' from 'transformers' ({site}/transformers/__init__.py)"
    )
    traceback = (
        f'  File "{cases}/test_sft.py", line 3, in test_sft\n'
        f'  File "{stdlib}/importlib/__init__.py", line 126, in import_module\n'
        f'  File "{site}/peft/peft_model.py", line 37, in <module>\n'
        f"    open('{tmp_path}/model/config.json')\nImportError: {message}"
    )
    record = make_record(
        status=Status.FAIL,
        exception_type="ImportError",
        message=message,
        raw_message=message,
        traceback=traceback,
        raw_traceback=traceback,
        root_message=message,
        reason=f"see {tmp_path}/log.txt",
        attempts=({"status": "fail", "message": message},),
    )
    write_records(tmp_path, record)
    merge_outputs(tmp_path)
    render_report(tmp_path, now=NOW)
    machine = (site, stdlib, str(cases), str(tmp_path), str(Path.home()))
    for name in ("index.html", "summary.md", "results.json"):
        text = (tmp_path / name).read_text()
        if name == "summary.md":  # as rendered: Markdown's escapes gone (\_\_init\_\_)
            text = re.sub(r"\\(.)", r"\1", text)
        assert "&lt;venv&gt;/.../transformers/__init__.py" in text or (
            "<venv>/.../transformers/__init__.py" in text
        ), name
        leaked = [p for p in machine if p in text or escape(p) in text]
        assert leaked == [], (name, leaked)
    results = json.loads((tmp_path / "results.json").read_text())
    published = results["records"][0]
    assert published["raw_message"] is None and published["raw_traceback"] is None
    assert '"<cases>/test_sft.py"' in published["traceback"]
    assert '"<python>/importlib/__init__.py"' in published["traceback"]


def test_headline_says_what_broke_with_the_package_that_moved_and_the_largest_cause():
    from ftmatrix.report.overview import render_headline

    packages = {"peft": "0.17.1", "transformers": "5.22.0"}
    before = make_record(run_id="r1", packages=packages)
    after = make_record(
        run_id="r2",
        status=Status.FAIL,
        exception_type="ImportError",
        message="cannot import name 'HybridCache' from 'transformers' (<venv>/...)",
        root_message="cannot import name 'HybridCache' from 'transformers' (<venv>/...)",
        root_frame="peft/peft_model.py:<module>",
        signature="abcabcabcabc",
        packages={**packages, "transformers": "5.23.0"},
    )
    down = make_record(
        run_id="r2",
        cell_id="other",
        cell_label="cpu-other",
        case=WHOLE_CELL,
        status=Status.UNINSTALLABLE,
        reason="No solution found",
    )
    causes = causes_of(failure_groups([after]))
    html = render_headline(
        [after, down],
        changes_since_previous([before, after]),
        causes,
        comparison=Comparison(earlier=True, compared=1),
    )
    assert "<strong>1</strong> cell ran 1 case; <strong>1</strong> could not install." in html
    assert (
        "<strong>broke</strong>: 1 result (sft) in 1 cell when transformers 5.22.0 \u2192 "
        "5.23.0 moved" in html
    )
    assert (
        '1 result in 1 cell</a>: <span title="peft 0.17.1 imports HybridCache, which '
        'transformers 5.23.0 does not have">peft 0.17.1 imports HybridCache' in html
    )
    assert "<strong class=new>unexplained</strong>" in html
    assert "reused" not in html  # the records say nothing of reuse
    assert "Nothing broke and nothing was fixed since the previous run (1 result compared)" in (
        render_headline([before], [], [], comparison=Comparison(earlier=True, compared=1))
    )
    # Changes are shown whatever the comparison says (a caller that left it out).
    assert "<strong>broke</strong>" in render_headline(
        [after], changes_since_previous([before, after]), [], comparison=Comparison()
    )


def test_a_first_run_is_not_said_to_have_changed_nothing(tmp_path: Path):
    """The GPU host's first report said "Nothing broke and nothing was fixed since the
    previous run" of a history holding one run: there was no previous run to compare."""
    write_records(tmp_path, make_record(run_id="r1", status=Status.FAIL, message="x"))
    merge_outputs(tmp_path)
    render_report(tmp_path, now=NOW)
    page = (tmp_path / "index.html").read_text()
    assert "Nothing broke" not in page and "Nothing changed" not in page
    assert page.count(NO_EARLIER_RUN) == 2  # the headline and the changes section
    # A second run of the same cell is compared with the first, and says how much.
    write_records(tmp_path, make_record(run_id="r2", status=Status.FAIL, message="x"))
    merge_outputs(tmp_path)
    render_report(tmp_path, now=NOW)
    page = (tmp_path / "index.html").read_text()
    assert NO_EARLIER_RUN not in page
    assert "nothing was fixed since the previous run (1 result compared)" in page


def test_an_earlier_run_with_none_of_these_results_is_not_called_no_earlier_run(tmp_path: Path):
    """A first night whose cell did not install (its one record the whole cell's), a second
    that ran the cases: there was an earlier run, with nothing to compare."""
    write_records(
        tmp_path, make_record(run_id="r1", case=WHOLE_CELL, status=Status.INSTALL_ERROR, reason="x")
    )
    merge_outputs(tmp_path)
    write_records(tmp_path, make_record(run_id="r2"))
    merge_outputs(tmp_path)
    render_report(tmp_path, now=NOW)
    page = (tmp_path / "index.html").read_text()
    assert NO_EARLIER_RUN not in page
    assert page.count(NOTHING_IN_COMMON) == 2


def test_a_square_of_two_versions_is_judged_by_the_cells_that_installed():
    """A cell that pins a third package the pair cannot install with (unsloth capping trl)
    says nothing of the pair while other cells with the same two versions ran; only a pair
    that installed nowhere shows uninstallable. The tooltip counts every result."""

    def record(cell_id: str, status: Status, unsloth: str | None, trl: str) -> Record:
        pins = {"transformers": "4.57.6", "trl": trl, "unsloth": unsloth}
        return make_record(cell_id=cell_id, cell_label=f"cpu-{cell_id}", pins=pins, status=status)

    records = [
        record("ran", Status.PASS, None, "1.16.0"),
        record("capped", Status.UNINSTALLABLE, "2026.10.7", "1.16.0"),
        record("nowhere", Status.UNINSTALLABLE, "2026.10.7", "9.0.0"),
    ]
    table = compatibility_table(grid_entries(records), "transformers", "trl")
    squares = re.findall(r'<button type=button class="sq s-([a-z-]+)"[^>]*title="([^"]*)"', table)
    assert squares == [
        ("pass", "transformers 4.57.6 \u00d7 trl 1.16.0: 1 uninstallable, 1 pass"),
        ("uninstallable", "transformers 4.57.6 \u00d7 trl 9.0.0: 1 uninstallable"),
    ]


def test_the_job_summary_shows_hostile_text_as_text():
    """summary.md goes into GitHub's job summary, which renders Markdown and some HTML: a
    record's or a known issue's text must stay text (rendered here by a CommonMark parser
    with raw HTML on, as GitHub's is before it sanitises)."""
    from markdown_it import MarkdownIt

    hostile = (
        '<img src=x onerror="alert(1)"> [click](javascript:alert(1)) **bold** '
        "<script>alert(2)</script> `x` ![i](http://evil/x.png)"
    )
    known = KnownIssue(
        id="k [x](javascript:alert(3))",
        title="t",
        package="trl",
        upstream="javascript:alert(4)",
        message=re.compile("img"),
    )
    records = [
        make_record(status=Status.FAIL, message=hostile, signature="s1"),
        make_record(
            cell_id="c2",
            cell_label="cell`</code><b>x</b>",
            case="test_x.py::test_`y`",
            status=Status.ERROR,
            message=hostile,
        ),
    ]
    grid = build_grid(records)
    markdown = render_markdown(
        report_data(grid, generated_at=NOW, groups=failure_groups(grid.records, [known], []))
    )
    html = MarkdownIt("commonmark", {"html": True}).enable("table").render(markdown)
    for forbidden in ("<img", "<script", "<b>", 'javascript:alert(1)"', 'href="javascript'):
        assert forbidden not in html, (forbidden, html)
    assert "<a " not in html and "<strong>bold</strong>" not in html
    # ... and reads as the text it is.
    assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt; [click](javascript:alert(1))" in html
    assert "<code>cell`&lt;/code&gt;&lt;b&gt;x&lt;/b&gt;</code>" in html
    assert "<code>test_x.py::test_`y`</code>" in html
    assert "known: k [x](javascript:alert(3))" in html


def test_a_known_issue_links_only_to_a_web_page(tmp_path: Path):
    entry = {
        "id": "k",
        "title": "t",
        "package": "trl",
        "upstream": "javascript:alert(1)",
        "match": {"message": "x"},
    }
    with pytest.raises(ConfigError, match=r"k\.yaml.*upstream: 'javascript:alert\(1\)' is not a"):
        parse_known_issues([entry], source="k.yaml")


def test_a_pass_whose_contract_could_not_be_checked_is_never_shown_as_a_plain_pass():
    why = "unverified: computed inside compute_loss in this trl"
    records = [
        make_record(
            operation="grpo", case="test_grpo.py::test_grpo", metrics={"logps_contract": why}
        ),
        make_record(cell_id="c2", cell_label="cell-b", metrics={"logps_contract": "checked"}),
    ]
    grid = build_grid(records)
    page = render_html(report_data(grid, generated_at=NOW))
    assert page.count(why) >= 2  # under the pass in the grid, and in the pivot's data
    markdown = render_markdown(report_data(grid, generated_at=NOW))
    rows = {line.split(" | ")[0]: line for line in markdown.splitlines() if line.startswith("| ")}
    assert "pass (unverified)" in rows["| cpu-py3.11-trl1.16.0"]
    assert "pass" in rows["| cell-b"] and "unverified" not in rows["| cell-b"]


def test_a_summary_of_many_cases_counts_each_cells_statuses_instead_of_a_wall() -> None:
    # The GPU host's generic cell ran 92 cases: a 92-column table in the job summary.
    records = [
        make_record(case=f"test_x.py::test_{i}", status=Status.FAIL if i < 3 else Status.PASS)
        for i in range(MOST_CASE_COLUMNS + 1)
    ]
    records.append(
        make_record(
            case="test_y.py::test_unchecked",
            metrics={"logps_contract": "unverified: computed inside compute_loss"},
        )
    )
    markdown = render_markdown(report_data(build_grid(records), generated_at=NOW))
    table = [line for line in markdown.splitlines() if line.startswith("| ")]
    assert table[0] == "| cell | pass | fail |"
    assert table[1] == "| cpu-py3.11-trl1.16.0 | 11 (1 unverified) | 3 |"
    assert "14 cases: each cell's count by status" in markdown
    assert markdown.count("test_x.py::test_0") == 1  # once, under Problems


def test_known_issues_kept_apart_from_the_matrix_explain_its_failures(tmp_path: Path) -> None:
    # A matrix kept in a folder of its own (ci/gpu-host/'s) read no known issues at all.
    write_records(
        tmp_path / "out",
        make_record(status=Status.FAIL, message="the planted break", exception_type="ValueError"),
    )
    entry = {"id": "planted", "title": "a planted break", "package": "trl",
             "upstream": "https://github.com/huggingface/trl/issues/1",
             "match": {"message": "planted break"}}  # fmt: skip
    (tmp_path / "shared.yaml").write_text(json.dumps([entry]))
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "matrix.yaml").write_text("packages: {trl: ['1.16.0']}\n")
    env = {
        **os.environ,
        "FTMATRIX_OUT": str(tmp_path / "out"),
        "FTMATRIX_MATRIX": str(tmp_path / "elsewhere" / "matrix.yaml"),
        "FTMATRIX_KNOWN_ISSUES": str(tmp_path / "shared.yaml"),
    }
    command = [sys.executable, "-m", "ftmatrix", "report"]
    ran = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    assert ran.returncode == 0, ran.stderr
    assert "known: [planted]" in (tmp_path / "out" / "summary.md").read_text()
    env["FTMATRIX_KNOWN_ISSUES"] = str(tmp_path / "missing.yaml")
    ran = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    assert ran.returncode == ExitCode.SETTINGS and "Traceback" not in ran.stderr
    assert "FTMATRIX_KNOWN_ISSUES=" in ran.stderr and "no such file" in ran.stderr
