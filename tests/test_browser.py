"""The report in a real browser: Debian's Chromium driven by Playwright.

Slow tier. Playwright's own browser download is impossible here, so it drives
/usr/bin/chromium (`apt-get install chromium`); .ci/run installs it.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from conftest import make_record

from ftmatrix.cell.files import CellFiles
from ftmatrix.cell.record import WHOLE_CELL
from ftmatrix.cell.records import CellRecordFile
from ftmatrix.cell.status import Status
from ftmatrix.report.render import render_report
from ftmatrix.store import merge_outputs

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
XSS = '<script>window.__xss=1</script><img src=x onerror="window.__xss=2;alert(1)">'
XSS_VERSION = '<img src=x onerror="window.__xss=3;alert(3)">'
XSS_REASON = '<img src=x onerror="window.__xss=5;alert(5)">'
XSS_CASE = 'test_sft.py::test_sft[<img src=x onerror="window.__xss=4;alert(4)">]'
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed"),
]


@pytest.fixture
def report(tmp_path: Path) -> Path:
    labels = [
        ("c1", "cpu-py3.11-tf4.57.6-trl0.19.1"),
        ("c2", "cpu-py3.11-tf5.23.0-trl0.19.1"),
        ("c3", "cpu-py3.11-tf5.23.0-trl1.16.0"),
    ]
    for cell_id, label in labels:
        broken = label == labels[1][1]
        CellRecordFile(CellFiles.of(tmp_path, "r1", cell_id).records).add(
            make_record(
                run_id="r1",
                cell_id=cell_id,
                cell_label=label,
                pins={
                    "transformers": label.split("-tf")[1].split("-")[0],
                    "trl": label.split("-trl")[1],
                },
                status=Status.FAIL if broken else Status.PASS,
                message=XSS if broken else None,
                exception_type="RuntimeError" if broken else None,
                traceback=XSS if broken else None,
                signature="abcdefabcdef" if broken else None,
            )
        )
    merge_outputs(tmp_path)
    render_report(tmp_path, now=datetime(2026, 11, 22, tzinfo=UTC))
    return tmp_path / "index.html"


def test_report_in_chromium(report: Path, tmp_path: Path):
    from playwright.sync_api import expect, sync_playwright

    errors: list[str] = []
    dialogs: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        page.goto(report.as_uri() + "#rows=cell&cols=case")  # cells x cases, as chosen

        rows = page.locator("table.grid tbody tr:visible")
        assert rows.count() == 3
        page.fill("#filter", "tf5.23")  # the grid redraws shortly after typing stops
        expect(rows).to_have_count(2)
        page.select_option("#status-filter", "fail")
        expect(rows).to_have_count(1)
        page.fill("#filter", "")
        page.select_option("#status-filter", "")
        expect(rows).to_have_count(3)

        # A click on "details" right after typing, while the filter's write of the view
        # to the URL is still due: the failure is open at the click itself (the write
        # may come before the browser's hashchange and take the link's target away).
        opened_at_click = page.evaluate(
            """() => {
                const filter = document.querySelector("#filter");
                filter.value = "cpu";
                filter.dispatchEvent(new Event("input"));
                document.querySelector("table.grid a[href^='#']").click();
                return document.querySelector("details.failure").open;
            }"""
        )
        assert opened_at_click is True
        detail = page.locator("details.failure").first
        expect(detail).to_have_js_property("open", True)
        page.wait_for_timeout(300)  # the filter's write is done: still open
        assert detail.evaluate("d => d.open") is True
        assert "window.__xss" in detail.inner_text()  # shown as text, never run

        # What `ftmatrix check --freeze` prints with this report's results.json.
        page.fill("#freeze", "transformers==5.23.0\ntrl==1.16.0\ntorch==2.13.0+cpu")
        page.click("#check")
        answer = page.locator("#verdict pre").inner_text().splitlines()
        assert (
            answer[0]
            == "stack: your pip freeze (pip freeze): transformers 5.23.0, trl 1.16.0; Python not named"
        )
        assert (
            "sft on cpu: pass: cpu-py3.11-tf5.23.0-trl1.16.0 (your versions) passes: 1 pass"
            in answer
        )

        shot = tmp_path / "report.png"
        page.screenshot(path=str(shot), full_page=True)
        if os.environ.get("FTMATRIX_SCREENSHOT"):
            shutil.copy(shot, os.environ["FTMATRIX_SCREENSHOT"])
        assert page.evaluate("window.__xss") is None
        browser.close()
    assert shot.stat().st_size > 10_000
    assert dialogs == []
    assert errors == []


CASES = {
    "test_sft.py::test_sft": "sft",
    "test_grpo.py::test_grpo": "grpo",
    "test_lora.py::test_merge": "lora",
}
# (transformers, trl, peft) -> status per case, or one whole-cell status.
PIVOT_CELLS: dict[tuple[str, str, str], dict[str, Status] | Status] = {
    ("4.57.6", "0.19.1", "0.17.1"): {"sft": Status.PASS, "grpo": Status.NOT_APPLICABLE},
    ("4.57.6", "0.19.1", "0.18.1"): {"sft": Status.PASS, "grpo": Status.NOT_APPLICABLE},
    ("4.57.6", "1.16.0", "0.17.1"): Status.UNINSTALLABLE,
    ("4.57.6", "1.16.0", "0.18.1"): {},
    ("5.23.0", "0.19.1", "0.17.1"): {},
    ("5.23.0", "0.19.1", "0.18.1"): {"grpo": Status.FAIL},
    ("5.23.0", "1.16.0", "0.17.1"): {},
    ("5.23.0", "1.16.0", "0.18.1"): {"grpo": Status.SKIP, "lora": Status.CRASH},
    ("5.23.0", "1.16.0", XSS_VERSION): {XSS_CASE: Status.FAIL},
}


@pytest.fixture
def pivot_report(tmp_path: Path) -> Path:
    for number, ((tf, trl, peft), statuses) in enumerate(PIVOT_CELLS.items()):
        cell_id = f"cell{number}"
        common = dict(
            run_id="r1",
            cell_id=cell_id,
            cell_label=f"cpu-py3.11-tf{tf}-trl{trl}-peft{number}",
            pins={"transformers": tf, "trl": trl, "peft": peft},
        )
        file = CellRecordFile(CellFiles.of(tmp_path, "r1", cell_id).records)
        if isinstance(statuses, Status):
            file.add(
                make_record(
                    **common,
                    case=WHOLE_CELL,
                    operation="install",
                    status=statuses,
                    reason="Because trl==1.16.0 depends on transformers>=4.56.2 " + XSS_REASON,
                )
            )
            continue
        cases = [XSS_CASE] if XSS_CASE in statuses else list(CASES)
        for case in cases:
            operation = CASES.get(case, "sft")
            status = statuses.get(case, statuses.get(operation, Status.PASS))
            broken = status in (Status.FAIL, Status.CRASH)
            file.add(
                make_record(
                    **common,
                    case=case,
                    operation=operation,
                    status=status,
                    message=XSS if broken else None,
                    exception_type="RuntimeError" if broken else None,
                )
            )
    merge_outputs(tmp_path)
    render_report(tmp_path, now=datetime(2026, 11, 22, tzinfo=UTC))
    return tmp_path / "index.html"


def cell_text(page, row: str, column: str) -> str:
    """The text of the grid cell at the row and column headed ``row`` and ``column``."""
    return page.evaluate(
        """([row, column]) => {
          const table = document.querySelector("table.grid");
          const heads = Array.from(table.tHead.rows[0].cells).map(c => c.textContent);
          const index = heads.indexOf(column);
          const tr = Array.from(table.tBodies[0].rows)
            .find(r => r.cells[0].textContent === row);
          if (index < 0 || !tr) { return null; }
          return tr.cells[index].textContent;
        }""",
        [row, column],
    )


@pytest.fixture
def pivot_page(pivot_report: Path) -> Iterator[tuple[Any, list[str]]]:
    """The pivot report open in Chromium, and the console errors and dialogs it raised."""
    from playwright.sync_api import sync_playwright

    problems: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: problems.append(str(e)))
        page.on("dialog", lambda d: (problems.append(f"dialog: {d.message}"), d.dismiss()))
        # Cells x cases, as a reader chooses it (the page opens on the axes that vary).
        page.goto(pivot_report.as_uri() + "#rows=cell&cols=case")
        yield page, problems
        browser.close()


def assert_nothing_ran(page: Any, problems: list[str]) -> None:
    assert page.evaluate("window.__xss") is None
    assert problems == []


def test_pivot_any_two_axes_with_the_others_as_filters(pivot_page, tmp_path: Path):
    from playwright.sync_api import expect

    page, problems = pivot_page
    # The default view: one row per cell, one column per case; the uninstallable
    # cell is one span with the resolver's reason.
    expect(page.locator("table.grid tbody tr")).to_have_count(len(PIVOT_CELLS))
    uninstallable = page.locator("table.grid td[colspan]")
    expect(uninstallable).to_have_count(1)
    expect(uninstallable).to_contain_text("uninstallable")
    expect(uninstallable).to_contain_text("depends on transformers>=4.56.2 " + XSS_REASON)
    expect(page.locator("table.grid img")).to_have_count(0)

    page.select_option("#row-axis", label="transformers")
    page.select_option("#column-axis", label="trl")
    expect(page.locator("table.grid tbody tr")).to_have_count(2)
    expect(page.locator("#pivot-summary")).to_contain_text("rows: transformers (2)")
    # Worst status, how many have it, out of how many (the uninstallable cell stands
    # for each of the four cases it never ran).
    assert cell_text(page, "4.57.6", "0.19.1") == "pass 4/6"
    assert cell_text(page, "4.57.6", "1.16.0") == "uninstallable 4/7"
    assert cell_text(page, "5.23.0", "0.19.1") == "fail 1/6"
    assert cell_text(page, "5.23.0", "1.16.0") == "crash 1/7"
    # The axes shown are not filters; the others are.
    expect(page.locator('select[data-name="transformers"]')).to_be_hidden()
    expect(page.locator('select[data-name="peft"]')).to_be_visible()

    page.select_option('select[data-name="peft"]', label="0.17.1")
    expect(page.locator("#pivot-summary")).to_contain_text("13 of 26 results")
    assert cell_text(page, "5.23.0", "0.19.1") == "pass 3/3"
    assert cell_text(page, "4.57.6", "1.16.0") == "uninstallable 4/4"
    page.select_option('select[data-name="peft"]', label="all")
    page.select_option('select[data-name="operation"]', label="grpo")
    expect(page.locator("#pivot-summary")).to_contain_text("8 of 26 results")
    assert cell_text(page, "5.23.0", "0.19.1") == "fail 1/2"
    assert cell_text(page, "4.57.6", "0.19.1") == "n/a 2/2"
    page.select_option('select[data-name="operation"]', label="all")
    page.select_option("#status-filter", "crash")
    expect(page.locator("table.grid tbody tr")).to_have_count(1)
    page.select_option("#status-filter", "")

    # Choosing the column axis as rows swaps the two.
    page.select_option("#row-axis", label="trl")
    assert page.locator("#column-axis option:checked").inner_text() == "transformers"
    assert cell_text(page, "1.16.0", "5.23.0") == "crash 1/7"

    shot = tmp_path / "pivot.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000
    assert_nothing_ran(page, problems)


def test_a_combined_cell_opens_the_records_it_holds(pivot_page):
    from playwright.sync_api import expect

    page, problems = pivot_page
    page.select_option("#row-axis", label="transformers")
    page.select_option("#column-axis", label="trl")
    combined = page.locator("table.grid tbody tr", has_text="5.23.0").locator("details")
    combined.nth(0).locator("summary").click()
    items = combined.nth(0).locator("li")
    expect(items).to_have_count(6)
    expect(items.first).to_contain_text("fail")  # worst first
    failing = items.filter(has_text="fail")
    expect(failing).to_have_count(1)
    expect(failing).to_contain_text("cpu-py3.11-tf5.23.0-trl0.19.1-peft5")
    expect(failing).to_contain_text("test_grpo.py::test_grpo")
    expect(failing).to_contain_text("window.__xss=2")  # the message, as text
    failing.locator("a", has_text="details").click()
    detail = page.locator("details.failure[open]")
    expect(detail).to_have_count(1)
    expect(detail).to_contain_text("test_grpo.py::test_grpo")
    assert_nothing_ran(page, problems)


def test_record_text_on_the_axes_stays_text(pivot_page):
    from playwright.sync_api import expect

    page, problems = pivot_page
    page.select_option("#row-axis", label="peft")
    page.select_option("#column-axis", label="case")
    expect(page.locator("table.grid thead th", has_text=XSS_CASE)).to_have_count(1)
    expect(page.locator("table.grid tbody th", has_text=XSS_VERSION)).to_have_count(1)
    assert cell_text(page, XSS_VERSION, XSS_CASE) == "fail details" + XSS
    expect(page.locator("table.grid img")).to_have_count(0)
    # The cell filter names cells by what varies; the full label is the option's title.
    label = "cpu-py3.11-tf5.23.0-trl1.16.0-peft8"
    option = page.locator(f'select[data-name="cell"] option[title="{label}"]')
    page.select_option('select[data-name="cell"]', value=option.get_attribute("value"))
    expect(page.locator("table.grid tbody tr")).to_have_count(1)
    expect(page.locator("table.grid tbody th")).to_have_text(XSS_VERSION)
    page.select_option('select[data-name="cell"]', label="all")
    # ...and in the lists combined cells open, the whole-cell reason included.
    page.select_option("#row-axis", label="transformers")
    page.select_option("#column-axis", label="trl")
    for row in ("4.57.6", "5.23.0"):
        for details in page.locator("table.grid tbody tr", has_text=row).locator("details").all():
            details.locator("summary").click()
    expect(page.locator("table.grid details[open]")).to_have_count(4)
    expect(page.locator("table.grid li", has_text=XSS_CASE)).to_have_count(2)
    expect(page.locator("table.grid li", has_text=XSS_REASON)).to_have_count(4)
    expect(page.locator("table.grid img")).to_have_count(0)
    page.fill("#filter", "peft8")
    expect(page.locator("table.grid tbody tr")).to_have_count(1)
    # Redrawn by the script, the uninstallable cell spans its row as the server drew it.
    page.select_option("#row-axis", label="cell")
    page.select_option("#column-axis", label="case")
    page.fill("#filter", "peft2")
    expect(page.locator("#pivot-summary")).to_contain_text("4 of 26 results")
    spanning = page.locator("table.grid td[colspan]")
    expect(spanning).to_have_attribute("colspan", "4")
    expect(spanning).to_contain_text("uninstallable details")
    expect(spanning).to_contain_text(XSS_REASON)
    expect(page.locator("table.grid img")).to_have_count(0)
    assert_nothing_ran(page, problems)


def open_page(playwright: Any, url: str, problems: list[str], **options: Any) -> Any:
    browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
    page = browser.new_page(viewport={"width": 1280, "height": 900}, **options)
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.on("dialog", lambda d: (problems.append(f"dialog: {d.message}"), d.dismiss()))
    page.goto(url)
    return page


def square(page: Any, row: str, column: str) -> Any:
    """The compatibility table's square for ``row`` x ``column``."""
    return page.locator(f"table.compat button.sq[data-a='{row}'][data-b='{column}']")


def test_first_screen_answers_at_1280_px_and_a_square_opens_its_records(pivot_page):
    from playwright.sync_api import expect

    page, problems = pivot_page
    expect(page.locator("#headline")).to_contain_text("8 cells ran 22 cases")
    expect(page.locator("#headline")).to_contain_text("1 could not install")
    table = page.locator("table.compat")
    expect(table.locator("caption")).to_have_text("transformers \u00d7 trl, all operations")
    box = table.bounding_box()
    assert box is not None and box["y"] + box["height"] < 900  # on the first screen
    assert page.evaluate("document.documentElement.scrollWidth") <= 1280
    # Worst status, with the count; hover for the summary.
    fail = square(page, "5.23.0", "0.19.1")
    expect(fail).to_have_text("1")
    expect(fail).to_have_class("sq s-fail")
    expect(fail).to_have_attribute("title", "transformers 5.23.0 \u00d7 trl 0.19.1: 1 fail, 5 pass")
    # A cell that could not install (it pins a third package) does not judge a pair
    # whose other cells ran: the square shows what ran, the title counts everything.
    capped = square(page, "4.57.6", "1.16.0")
    expect(capped).to_have_class("sq s-pass")
    expect(capped).to_have_attribute(
        "title", "transformers 4.57.6 \u00d7 trl 1.16.0: 4 uninstallable, 3 pass"
    )
    fail.click()
    items = page.locator("#selection li")
    expect(items).to_have_count(6)
    expect(items.first).to_contain_text("fail")
    expect(items.first).to_contain_text("window.__xss=2")  # the message, as text
    assert "sa=5.23.0" in page.url and "sb=0.19.1" in page.url
    items.first.locator("a", has_text="details").click()
    expect(page.locator("details.failure[open]")).to_have_count(1)
    # Another operation redraws the table; another package as rows shows its values as text.
    page.select_option("#compat-op", "grpo")
    expect(square(page, "5.23.0", "0.19.1")).to_have_attribute(
        "title", "transformers 5.23.0 \u00d7 trl 0.19.1: 1 fail, 1 pass"
    )
    assert "op=grpo" in page.url
    page.select_option("#compat-op", "")
    # Redrawn by the script, judged as the page's Python judged it.
    expect(square(page, "4.57.6", "1.16.0")).to_have_class("sq s-pass")
    page.select_option("#compat-a", "peft")
    expect(page.locator("table.compat tbody th", has_text=XSS_VERSION)).to_have_count(1)
    expect(page.locator("table.compat img, #selection img")).to_have_count(0)
    # The compact grid: cells x operations, a square opens that cell's records there.
    hud = page.locator("table.hud tbody tr")
    expect(hud).to_have_count(len(PIVOT_CELLS))
    # Rows are named by the axes that vary; the full label is the row's data-cell.
    peft5 = hud.filter(has=page.locator("th[data-cell$='-peft5']"))
    hud_square = peft5.locator("button.sq[data-op='grpo']")
    hud_square.hover()
    expect(hud_square).to_have_attribute(
        "title", "cpu-py3.11-tf5.23.0-trl0.19.1-peft5 grpo: 1 fail"
    )
    hud_square.click()
    expect(items).to_have_count(1)
    expect(items.first).to_contain_text("test_grpo.py::test_grpo")
    assert_nothing_ran(page, problems)


def test_a_deep_link_restores_the_view(pivot_report: Path):
    from playwright.sync_api import expect, sync_playwright

    problems: list[str] = []
    view = (
        "#a=peft&b=trl&op=grpo&sa=0.17.1&sb=0.19.1"
        "&rows=transformers&cols=trl&f.peft=0.17.1&group=" + "{group}"
    )
    with sync_playwright() as playwright:
        page = open_page(playwright, pivot_report.as_uri(), problems)
        group = page.locator("section.group").first.get_attribute("id")
        page.goto(pivot_report.as_uri() + view.format(group=group))
        page.reload()
        expect(page.locator("table.compat caption")).to_have_text("peft \u00d7 trl, grpo")
        items = page.locator("#selection li")
        expect(items).to_have_count(2)  # peft 0.17.1 x trl 0.19.1, grpo: n/a and pass
        expect(page.locator("#pivot-summary")).to_contain_text("13 of 26 results")
        assert page.locator("#row-axis option:checked").inner_text() == "transformers"
        expect(page.locator(f"#{group} details.cells")).to_have_attribute("open", "")
        # Keyboard: a square is a button; Enter opens its records.
        page.locator("table.compat button.sq").first.focus()
        page.keyboard.press("Enter")
        expect(page.locator("#selection")).to_be_focused()
        assert page.evaluate("window.__xss") is None
        page.context.browser.close()
    assert problems == []


def test_dark_mode_and_print(pivot_report: Path):
    from playwright.sync_api import sync_playwright

    problems: list[str] = []
    with sync_playwright() as playwright:
        page = open_page(playwright, pivot_report.as_uri(), problems, color_scheme="dark")
        background = page.evaluate("getComputedStyle(document.body).backgroundColor")
        assert background == "rgb(13, 17, 23)"
        page.emulate_media(media="print")
        assert page.locator("#compat-controls").is_hidden()
        page.context.browser.close()
    assert problems == []


def test_a_large_matrix_draws_the_any_two_axes_table_when_scrolled_to(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    from playwright.sync_api import expect, sync_playwright

    import ftmatrix.report.page_grid

    monkeypatch.setattr(ftmatrix.report.page_grid, "SERVER_PIVOT_LIMIT", 0)
    for number, label in enumerate(["cpu-a", "cpu-b"]):
        CellRecordFile(CellFiles.of(tmp_path, "r1", f"c{number}").records).add(
            make_record(
                run_id="r1", cell_id=f"c{number}", cell_label=label, pins={"trl": f"1.{number}.0"}
            )
        )
    merge_outputs(tmp_path)
    render_report(tmp_path, now=datetime(2026, 11, 22, tzinfo=UTC))
    assert "<table class=grid>" not in (tmp_path / "index.html").read_text()
    problems: list[str] = []
    with sync_playwright() as playwright:
        page = open_page(playwright, (tmp_path / "index.html").as_uri(), problems)
        page.locator("#grid-holder").scroll_into_view_if_needed()
        # Opened on what varies: operations (one, sft) x trl.
        expect(page.locator("table.grid tbody tr")).to_have_count(1)
        expect(page.locator("table.grid thead th")).to_have_count(3)
        page.context.browser.close()
    assert problems == []


OVER_COUNT_TITLE = "transformers' Trainer counts every label position for num_items_in_batch"
OVER_COUNT_REPORT = "https://github.com/huggingface/transformers/issues/46204"


@pytest.fixture
def causes_report(tmp_path: Path) -> Path:
    """Two cells differing in transformers only; one known issue over two signatures (SFT's
    and the Trainer's), one unexplained break, the rest passing."""
    known = tmp_path / "known_issues.yaml"
    known.write_text(
        f'- id: over-count\n  title: "{OVER_COUNT_TITLE}"\n  package: transformers\n'
        f"  upstream: {OVER_COUNT_REPORT}\n"
        "  match: {message: 'contracts broken: exact_update'}\n",
        encoding="utf-8",
    )
    cases = {
        "test_sft.py::test_sft_exact_update[accumulation-1]": ("sft", "sig-sft"),
        "test_sft.py::test_sft_exact_update[accumulation-2]": ("sft", "sig-sft"),
        "test_train.py::test_train_exact_update[accumulation-1]": ("train", "sig-train"),
        "test_lora.py::test_lora_roundtrip": ("lora", "sig-lora"),
        "test_dpo.py::test_dpo_two_steps": ("dpo", None),
    }
    for cell_id, tf in (("c1", "4.57.6"), ("c2", "5.23.0")):
        # Where a run writes a cell's records (docs/reference/output.md).
        file = CellRecordFile(tmp_path / "records" / "r1" / f"{cell_id}.jsonl")
        for case, (operation, signature) in cases.items():
            over_counted = tf == "4.57.6" and operation in ("sft", "train")
            lora_broken = tf == "5.23.0" and operation == "lora"
            file.add(
                make_record(
                    run_id="r1",
                    cell_id=cell_id,
                    cell_label=f"cpu-py3.11-torch2.13.0-tf{tf}-trl1.16.0",
                    pins={"torch": "2.13.0", "transformers": tf, "trl": "1.16.0"},
                    case=case,
                    operation=operation,
                    status=Status.FAIL if over_counted or lora_broken else Status.PASS,
                    exception_type="helpers.contracts.ContractError",
                    message=(
                        "contracts broken: exact_update, update_scale\nexact_update: weights "
                        "after one SGD step (batch 4 x 1) against minus the reference gradient"
                        if over_counted
                        else "contracts broken: merged_logits\nmerged_logits: ..."
                        if lora_broken
                        else None
                    ),
                    signature=signature if over_counted or lora_broken else None,
                )
            )
    merge_outputs(tmp_path)
    render_report(tmp_path, now=datetime(2026, 11, 27, tzinfo=UTC), known_issues=known)
    return tmp_path


def on_first_screen(page: Any, selector: str) -> None:
    box = page.locator(selector).first.bounding_box()
    assert box is not None and box["y"] < 900, (selector, box)


def assert_cells_named_by_what_varies(page: Any) -> None:
    from playwright.sync_api import expect

    # The any-two-axes table opens on what varies: operations x transformers.
    assert page.locator("#row-axis option:checked").inner_text() == "operation"
    assert page.locator("#column-axis option:checked").inner_text() == "transformers"
    heads = page.locator("table.grid thead th").all_inner_texts()
    assert heads == ["operation \\ transformers", "4.57.6", "5.23.0"]
    on_first_screen(page, "table.grid tbody tr")
    expect(page.locator(".fixed-axes")).to_contain_text(
        "Every cell: hardware cpu, python 3.11, torch 2.13.0, trl 1.16.0"
    )
    # The compact grid names each cell by the axis that varies.
    labels = page.locator("table.hud th.label")
    assert labels.all_inner_texts() == ["tf4.57.6", "tf5.23.0"]
    expect(labels.first).to_have_attribute("data-cell", "cpu-py3.11-torch2.13.0-tf4.57.6-trl1.16.0")
    # Cells as rows of the any-two-axes table: named the same way, the label a hover away.
    page.select_option("#row-axis", label="cell")
    rows = page.locator("table.grid tbody th")
    expect(rows).to_have_count(2)
    assert rows.all_inner_texts() == ["tf4.57.6", "tf5.23.0"]
    expect(rows.first).to_have_attribute("title", "cpu-py3.11-torch2.13.0-tf4.57.6-trl1.16.0")
    page.select_option("#row-axis", label="operation")
    # No compatibility table where one package varies: a square still lists its records.
    expect(page.locator("table.compat")).to_have_count(0)
    page.locator("table.hud tbody tr").first.locator("button.sq[data-op='sft']").click()
    expect(page.locator("#selection li")).to_have_count(2)


def assert_one_cause_per_known_issue(page: Any) -> None:
    from playwright.sync_api import expect

    # The headline: one line per cause, the known issue's title a link to its report.
    causes = page.locator("#headline ul.causes li")
    expect(causes).to_have_count(2)
    expect(causes.first.locator("a.issue")).to_have_attribute("href", OVER_COUNT_REPORT)
    expect(causes.first.locator("a.issue")).to_have_text(OVER_COUNT_TITLE)
    expect(causes.first.locator(".known a")).to_have_attribute("href", OVER_COUNT_REPORT)
    expect(causes.first).to_contain_text("3 results in 1 cell")
    expect(causes.nth(1)).to_contain_text("lora: merged logits is wrong")
    expect(causes.nth(1).locator(".new")).to_have_text("unexplained")
    on_first_screen(page, "#headline ul.causes")
    # One section per known issue, however many signatures: its cell listed once.
    sections = page.locator("section.group")
    expect(sections).to_have_count(2)
    over_count = sections.filter(has_text=OVER_COUNT_TITLE)
    expect(over_count.locator("h3 a.issue")).to_have_attribute("href", OVER_COUNT_REPORT)
    expect(over_count.locator("ul.signatures > li")).to_have_count(2)
    causes.first.locator("a[data-group]").click()
    expect(over_count).to_have_class(re.compile(r"\bchosen\b"))
    cells = over_count.locator("ul.cause-cells > li")
    expect(cells).to_have_count(1)
    expect(cells.locator("li")).to_have_count(3)


def test_the_first_screen_at_1400_px_names_what_varies_and_each_cause_once(
    causes_report: Path, tmp_path: Path
):
    from playwright.sync_api import expect, sync_playwright
    from screenshots import open_first_screen, write_screenshots

    problems: list[str] = []
    with sync_playwright() as playwright:
        page = open_first_screen(playwright, causes_report / "index.html", problems)
        assert_cells_named_by_what_varies(page)
        # The legend is open and readable; text is 16 px.
        legend = page.locator(".legend")
        expect(legend).to_be_visible()
        expect(legend.locator("dt")).to_have_count(len(Status))
        on_first_screen(page, ".legend")
        assert page.evaluate("getComputedStyle(document.body).fontSize") == "16px"
        assert page.evaluate("document.documentElement.scrollWidth") <= 1400
        assert_one_cause_per_known_issue(page)
        page.context.browser.close()
    assert problems == []
    # The docs' screenshots come from the same page and the same script.
    shots = write_screenshots(causes_report, tmp_path / "shots")
    assert [p.name for p in shots] == ["report-first-screen.png", "report-cause.png"]
    assert all(p.read_bytes().startswith(b"\x89PNG") for p in shots)
