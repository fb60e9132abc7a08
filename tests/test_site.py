"""The documentation site: every page in the nav, a short README, reference blocks the
code wrote, matrix examples the schema and the loader both accept, and (slow tier) the
built site in Chromium, offline."""

from __future__ import annotations

import functools
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from conftest import make_record

from ftmatrix.cell.files import CellFiles
from ftmatrix.cell.records import CellRecordFile
from ftmatrix.cell.status import Status
from ftmatrix.cli import main
from ftmatrix.config import TOP_LEVEL_KEYS, parse_matrix
from ftmatrix.docs_gen import stale_files
from ftmatrix.matrix_schema import matrix_json_schema
from ftmatrix.report.render import render_report
from ftmatrix.store import merge_outputs

ROOT = Path(__file__).parent.parent
DOCS = ROOT / "docs"
DATA = Path(__file__).parent / "data"
VALIDATOR = jsonschema.Draft7Validator(matrix_json_schema())


def test_the_readme_is_at_most_10_kb():
    assert len((ROOT / "README.md").read_bytes()) <= 10 * 1024


def nav_pages(entries: list[Any]) -> list[str]:
    pages = []
    for entry in entries:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        pages += nav_pages(value) if isinstance(value, list) else [value]
    return pages


def test_every_page_is_in_the_nav_once():
    nav = nav_pages(yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"])
    assert len(nav) == len(set(nav)), nav
    assert set(nav) == {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")}


def test_the_generated_blocks_and_files_are_current():
    stale = [str(p.relative_to(ROOT)) for p in stale_files(DOCS)]
    assert stale == [], "stale: run `python -m ftmatrix.docs_gen` and commit the result"


def test_docs_gen_check_exits_1_naming_a_stale_page(tmp_path: Path):
    docs = tmp_path / "docs"
    shutil.copytree(DOCS, docs)
    (tmp_path / "noxfile.py").write_text((ROOT / "noxfile.py").read_text())
    page = docs / "reference" / "exit-codes.md"
    page.write_text(
        page.read_text().replace("| 8 | `PackageIndexError`", "| 80 | `PackageIndexError`")
    )
    done = subprocess.run(
        [sys.executable, "-m", "ftmatrix.docs_gen", "--check", str(docs)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert (done.returncode, done.stdout) == (1, f"stale: {page}\n"), done.stderr
    subprocess.run([sys.executable, "-m", "ftmatrix.docs_gen", str(docs)], check=True)
    assert stale_files(docs) == []


def matrix_examples() -> dict[str, dict[str, Any]]:
    """Every ```yaml block of the README and the pages that is a matrix file (or a part of
    one: only matrix.yaml's keys), by page and place."""
    found = {}
    for path in [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]:
        for i, block in enumerate(re.findall(r"```yaml\n(.*?)```", path.read_text(), re.S)):
            data = yaml.safe_load(block)
            if isinstance(data, dict) and set(data) <= set(TOP_LEVEL_KEYS):
                found[f"{path.relative_to(ROOT)}[{i}]"] = data
    return found


def test_the_every_key_example_shows_every_key():
    assert any(set(data) == set(TOP_LEVEL_KEYS) for data in matrix_examples().values())


@pytest.mark.parametrize(("where", "data"), matrix_examples().items(), ids=matrix_examples())
def test_each_matrix_example_is_valid_for_the_schema_and_the_loader(where: str, data: dict):
    whole = {"packages": {"six": ["1.17.0"]}, **data}  # a part of a file: with an axis
    assert [e.message for e in VALIDATOR.iter_errors(whole)] == [], where
    parse_matrix(yaml.safe_dump(whole), source=where, default_python="3.11")


def test_the_plan_json_example_has_the_keys_plan_prints(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    page = (DOCS / "reference" / "output.md").read_text()
    shown = json.loads(re.search(r"```json\n(.*?)```", page, re.S).group(1))
    env = {k: v for k, v in os.environ.items() if not k.startswith("FTMATRIX_")}
    env |= {"FTMATRIX_MATRIX": str(DATA / "small_matrix.yaml"), "FTMATRIX_OUT": str(tmp_path)}
    assert main(["plan", "--json", "--no-resolve"], env=env) == 0
    printed = json.loads(capsys.readouterr().out)
    assert list(shown) == list(printed)
    assert list(shown["cells"][0]) == list(printed["cells"][0])


def test_the_results_json_table_names_every_key(tmp_path: Path):
    CellRecordFile(CellFiles.of(tmp_path, "r1", "c1").records).add(
        make_record(
            run_id="r1", cell_id="c1", status=Status.FAIL, exception_type="ValueError", message="x"
        )
    )
    merge_outputs(tmp_path)
    render_report(tmp_path, now=datetime(2026, 11, 25, tzinfo=UTC))
    results = json.loads((tmp_path / "results.json").read_text())
    section = (DOCS / "reference" / "output.md").read_text().split("## results.json", 1)[1]
    rows = dict(re.findall(r"^\| `(\w+)` \| (.*) \|$", section.split("## ", 1)[0], re.M))
    assert set(rows) == set(results)
    (group,) = results["failure_groups"]
    assert set(re.findall(r"`(\w+)`", rows["failure_groups"])) == set(group)


CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


@pytest.mark.slow
@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed")
def test_the_built_site_renders_in_chromium_without_the_network(tmp_path: Path):
    from playwright.sync_api import expect, sync_playwright

    site = tmp_path / "site"
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml")]
        + ["-d", str(site)],
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        check=False,
    )
    assert built.returncode == 0, built.stderr
    handler = functools.partial(QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    here = f"http://127.0.0.1:{server.server_port}/"
    outside: list[str] = []
    errors: list[str] = []

    def only_here(route: Any) -> None:
        if route.request.url.startswith(here):
            route.continue_()
        else:
            outside.append(route.request.url)
            route.abort()

    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=BROWSER_ARGS)
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.route("**/*", only_here)
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(here + "reference/matrix-yaml.html")
            expect(page.locator(".md-header")).to_be_visible()
            # The generated table: a row per key of the schema.
            keys = page.locator("table:has-text('packages.PACKAGE') tbody tr")
            assert keys.count() > len(TOP_LEVEL_KEYS)
            assert "Roboto" not in page.evaluate("getComputedStyle(document.body).fontFamily")
            page.goto(here + "index.html")
            page.fill("input.md-search__input", "wheelhouse")  # in the header at 1280 px
            # The search index loads in a web worker: on a loaded machine it takes seconds.
            expect(page.locator(".md-search-result__item").first).to_be_visible(timeout=60_000)
            browser.close()
    finally:
        server.shutdown()
    assert (outside, errors) == ([], [])


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


BROWSER_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"]
