"""The report at scale: a year of nightly history of a 500-cell x 30-case matrix.

Synthetic records (statuses drift from night to night, a few signatures repeat),
measured side by side in one run and printed as a table and JSON (never asserted):
- building the history: bulk load of all past nights, then merging one night's
  record files the way the report job does;
- building the report (HTML, Markdown, JSON, badges) from that history;
- the size of the page, and in headless Chromium (Debian's package) its time to first
  paint, to load, and to a first answer (an operation chosen, a square's records listed).

    python benchmarks/bench_report.py [--nights 365] [--cells 500] [--cases 30] [--json F]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sqlite3
import sys
import tempfile
import time
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

try:
    from playwright.sync_api import sync_playwright
except ImportError:  # the test extra brings it; without it, no page-load figure
    sync_playwright = None

from ftmatrix.cell.files import CellFiles  # noqa: E402
from ftmatrix.cell.record import Record  # noqa: E402
from ftmatrix.cell.records import CellRecordFile  # noqa: E402
from ftmatrix.cell.status import Status  # noqa: E402
from ftmatrix.report.render import render_report  # noqa: E402
from ftmatrix.store import merge_outputs, open_store, refresh_pass_rates  # noqa: E402

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
OPERATIONS = ["sft", "grpo", "dpo", "lora", "multiprocess", "import"]


def synthetic(night: int, cell: int, case: int, rng: random.Random) -> Record:
    run_id = run_id_of(night)
    broken = (cell * 7 + case) % 23 == 0 or rng.random() < 0.01
    return Record(
        run_id=run_id,
        cell_id=f"cell{cell:04d}",
        cell_label=f"cpu-py3.11-tf5.{cell % 25}.0-trl1.{cell // 25}.0-peft0.{case % 4}.0",
        python="3.11",
        pins={"transformers": f"5.{cell % 25}.0", "trl": f"1.{cell // 25}.0"},
        hardware_class="cpu",
        case=f"test_{OPERATIONS[case % 6]}.py::test_case[{case}]",
        operation=OPERATIONS[case % 6],
        status=Status.FAIL if broken else Status.PASS,
        started_at=f"{run_id}",
        finished_at=f"{run_id}",
        duration=1.0,
        exception_type="RuntimeError" if broken else None,
        message=f"mat1 and mat2 shapes cannot be multiplied ({cell}x4096 and 1x{case})"
        if broken
        else None,
        signature=f"sig{(cell * 7 + case) % 5:09d}" if broken else None,
        packages={
            "transformers": f"5.{cell % 25}.0",
            "trl": f"1.{cell // 25}.0",
            "accelerate": f"1.{night % 3}.0",
        },
    )


def run_id_of(night: int) -> str:
    return (datetime(2025, 11, 22, tzinfo=UTC) + timedelta(days=night)).strftime("%Y%m%dT020000Z")


def bulk_load(store: Path, nights: int, cells: int, cases: int, distinct: int = 7) -> None:
    """Past nights straight into SQLite (setup, not the measured merge).

    ``distinct`` nights are made record by record; the others copy them in SQL with
    their run id changed, so a year of history is set up in minutes, not an hour.
    """
    rng = random.Random(0)
    with closing(open_store(store)) as connection, connection:
        for night in range(nights):
            if night >= distinct:
                source, target = run_id_of(night % distinct), run_id_of(night)
                connection.execute(
                    "INSERT INTO records SELECT ?, cell_id, case_id, cell_label, operation,"
                    " status, hardware_class, signature, replace(finished_at, ?, ?),"
                    " replace(data, ?, ?) FROM records WHERE run_id = ?",
                    (target, source, target, source, target, source),
                )
                continue
            rows = []
            for cell in range(cells):
                for case in range(cases):
                    r = synthetic(night, cell, case, rng)
                    rows.append(
                        (
                            r.run_id,
                            r.cell_id,
                            r.case,
                            r.cell_label,
                            r.operation,
                            r.status.value,
                            r.hardware_class,
                            r.signature,
                            r.finished_at,
                            json.dumps(r.to_dict(), sort_keys=True),
                        )
                    )
            connection.executemany("INSERT INTO records VALUES (?,?,?,?,?,?,?,?,?,?)", rows)
        refresh_pass_rates(connection, [run_id_of(night) for night in range(nights)])


def page_timings(page_file: Path) -> dict[str, float | None]:
    """Seconds to first paint (Chromium's first-contentful-paint), to the load event, and
    to a first answer: the compatibility table for one operation, a square clicked, its
    records listed; and the filter of the any-two-axes table still answering."""
    chromium = shutil.which("chromium")
    if not chromium or sync_playwright is None:
        return {"first_paint_s": None, "load_s": None, "first_answer_s": None}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        start = time.perf_counter()
        page.goto(page_file.as_uri(), wait_until="load")
        load = time.perf_counter() - start
        paint = page.evaluate(
            "(performance.getEntriesByName('first-contentful-paint')[0] || {}).startTime"
        )
        page.select_option("#compat-op", "grpo")
        page.locator("table.compat button.sq").first.click()
        page.locator("#selection li").first.wait_for()
        answer = time.perf_counter() - start
        page.fill("#filter", "tf5.3")
        browser.close()
    return {
        "first_paint_s": round(paint / 1000, 3) if paint else None,
        "load_s": round(load, 3),
        "first_answer_s": round(answer, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nights", type=int, default=365)
    parser.add_argument("--cells", type=int, default=500)
    parser.add_argument("--cases", type=int, default=30)
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="ftmatrix-bench-report-"))
    out = work / "reports"
    store = out / "history.sqlite"
    start = time.perf_counter()
    bulk_load(store, args.nights - 1, args.cells, args.cases)
    bulk = time.perf_counter() - start

    rng = random.Random(1)
    for cell in range(args.cells):  # tonight's shards' files, as the report job gets them
        file = CellRecordFile(CellFiles.of(out, "tonight", f"cell{cell:04d}").records)
        file.records = [synthetic(args.nights - 1, cell, c, rng) for c in range(args.cases)]
        file.save()
    start = time.perf_counter()
    merge_outputs(out)
    render_report(out, now=datetime.now(UTC), known_issues=ROOT / "known_issues.yaml")
    report = time.perf_counter() - start
    with closing(sqlite3.connect(store)) as connection:
        rows = connection.execute("SELECT COUNT(*) FROM records").fetchone()[0]

    figures = {
        "nights": args.nights,
        "cells": args.cells,
        "cases": args.cases,
        "records_in_history": rows,
        "history_mb": round(store.stat().st_size / 2**20, 1),
        "bulk_load_past_nights_s": round(bulk, 1),
        "merge_tonight_and_build_report_s": round(report, 2),
        "index_html_mb": round((out / "index.html").stat().st_size / 2**20, 2),
        **page_timings(out / "index.html"),
    }
    width = max(len(k) for k in figures)
    print(f"{'measure':<{width}}  value")
    for key, value in figures.items():
        print(f"{key:<{width}}  {value}")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
