"""The report's first screen in Debian's Chromium at 1400 x 900, for the browser test and
for the screenshots the docs show.

Regenerate the committed screenshots from a report folder (one ``ftmatrix run`` or
``ftmatrix report`` made), no nox needed::

    python tests/screenshots.py reports/ docs/screenshots/

writes ``report-first-screen.png`` (the first screen) and ``report-cause.png`` (the
largest cause opened from the headline).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FIRST_SCREEN = {"width": 1400, "height": 900}
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


def open_first_screen(playwright: Any, page_file: Path, problems: list[str]) -> Any:
    """``page_file`` open at 1400 x 900; console errors, page errors and dialogs go to
    ``problems``."""
    browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
    page = browser.new_page(viewport=FIRST_SCREEN, color_scheme="light")
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.on("dialog", lambda d: (problems.append(f"dialog: {d.message}"), d.dismiss()))
    page.goto(page_file.as_uri())
    page.wait_for_load_state("load")
    return page


def write_screenshots(report: Path, out: Path) -> list[Path]:
    """The first screen and the largest cause opened, as PNG files in ``out``."""
    from playwright.sync_api import sync_playwright

    out.mkdir(parents=True, exist_ok=True)
    problems: list[str] = []
    first, cause = out / "report-first-screen.png", out / "report-cause.png"
    with sync_playwright() as playwright:
        page = open_first_screen(playwright, report / "index.html", problems)
        page.screenshot(path=str(first))
        written = [first]
        link = page.locator("#headline ul.causes a[data-group]").first
        if link.count():
            link.click()
            page.locator("section.group.chosen").scroll_into_view_if_needed()
            page.screenshot(path=str(cause))
            written.append(cause)
        page.context.browser.close()
    if problems:
        raise RuntimeError(f"the page reported errors: {problems}")
    return written


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python tests/screenshots.py REPORT_FOLDER OUT_FOLDER")
    for path in write_screenshots(Path(sys.argv[1]), Path(sys.argv[2])):
        print(path)
