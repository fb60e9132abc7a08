"""The report in a real browser: Debian's Chromium driven by Playwright.

Slow tier. Playwright's own browser download is impossible here, so it drives
/usr/bin/chromium (`apt-get install chromium`); .ci/run installs it.
"""

from __future__ import annotations

import os
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest
from test_records import make_record

from ftmatrix.records import CellRecordFile, record_path
from ftmatrix.report import write_report
from ftmatrix.status import Status

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
XSS = '<script>window.__xss=1</script><img src=x onerror="window.__xss=2;alert(1)">'
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
        CellRecordFile(record_path(tmp_path, "r1", cell_id)).add(
            make_record(
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
    write_report(tmp_path, now=datetime(2026, 11, 22, tzinfo=UTC))
    return tmp_path / "index.html"


def test_report_in_chromium(report: Path, tmp_path: Path):
    from playwright.sync_api import sync_playwright

    errors: list[str] = []
    dialogs: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        page.goto(report.as_uri())

        rows = page.locator("table.grid tbody tr")
        assert rows.count() == 3
        page.fill("#filter", "tf5.23")
        assert page.locator("table.grid tbody tr:visible").count() == 2
        page.select_option("#status-filter", "fail")
        assert page.locator("table.grid tbody tr:visible").count() == 1
        page.fill("#filter", "")
        page.select_option("#status-filter", "")

        page.click("table.grid a:has-text('details')")
        detail = page.locator("details.failure").first
        assert detail.evaluate("d => d.open") is True
        assert "window.__xss" in detail.inner_text()  # shown as text, never run

        page.fill("#freeze", "transformers==5.23.0\ntrl==1.16.0\ntorch==2.13.0+cpu")
        page.click("#check")
        assert (
            page.locator("#verdict p")
            .first.inner_text()
            .startswith("cpu-py3.11-tf5.23.0-trl1.16.0 (2/2 pins match): 1 pass")
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
