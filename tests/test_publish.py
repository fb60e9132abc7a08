"""What the nightly publishes (reports/site/) and the history restored from it.

Pages once got all of reports/: the records and history.sqlite, whose raw text keeps the
machine's absolute paths. And the history lived only in the Actions cache, which GitHub
evicts after 7 days unused: a paused nightly started over with nothing.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from conftest import make_record

from ftmatrix.cell.files import CellFiles
from ftmatrix.cell.records import CellRecordFile
from ftmatrix.cell.status import Status
from ftmatrix.download import NotFound
from ftmatrix.errors import ExitCode, UsageError
from ftmatrix.report.publish import restore_history, write_site
from ftmatrix.report.render import render_report
from ftmatrix.store import (
    load_cell_runs,
    load_findings,
    load_history,
    merge_outputs,
    newest_records,
)

NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)
FINDING = {
    "case": "test_sft.py::test_sft",
    "axis": "trl",
    "held": {"transformers": "5.23.0"},
    "hardware": "cpu",
    "last_good": "1.15.0",
    "first_bad": "1.16.0",
}


def a_history(out: Path) -> None:
    """Two nights of one cell whose failure text carries this machine's paths."""
    message = f"cannot import name 'X' from 'trl' ({out}/venv/lib/site-packages/trl/__init__.py)"
    for run_id, status in (("20261123T000000Z-aaaaaa", Status.PASS), ("20261124T000000Z-bbbbbb", Status.FAIL)):  # fmt: skip
        CellRecordFile(CellFiles.of(out, run_id, "c1").records).add(
            make_record(
                run_id=run_id,
                cell_id="c1",
                status=status,
                message=message if status is Status.FAIL else None,
                raw_message=message if status is Status.FAIL else None,
                traceback=f'  File "{out}/cases/test_sft.py", line 3\n' if status is Status.FAIL else None,
                raw_traceback=f'  File "{out}/cases/test_sft.py", line 3\n' if status is Status.FAIL else None,
            )
        )  # fmt: skip
    marker = {"key": {"lock": "313c85fa698b", "cases": "2c20", "hardware": "c3c5", "version": 1},
              "since": "20261123T000000Z-aaaaaa", "ran_at": "2026-11-24T00:00:00+00:00"}  # fmt: skip
    (out / "records" / "20261124T000000Z-bbbbbb" / "c1.done.json").write_text(json.dumps(marker))
    finding_file = out / "bisect" / "one" / "finding.json"
    finding_file.parent.mkdir(parents=True)
    finding_file.write_text(json.dumps({**FINDING, "log": f"{out}/bisect/one/log.txt"}))
    merge_outputs(out)
    render_report(out, now=NOW)


def test_the_site_is_the_rendered_report_and_a_path_free_history(tmp_path: Path):
    out = tmp_path / "reports"
    a_history(out)
    site = write_site(out)
    assert site == out / "site"
    published = {str(p.relative_to(site)) for p in site.rglob("*") if p.is_file()}
    assert {"index.html", "summary.md", "results.json", "history.jsonl"} <= published
    assert any(name.startswith("badges/") for name in published)
    assert not any(name.startswith("records") or name.endswith(".sqlite") for name in published)
    for name in published:
        text = (site / name).read_text()
        assert str(tmp_path) not in text, name
        assert '"raw_traceback": "' not in text and '"raw_message": "' not in text, name
    lines = [json.loads(line) for line in (site / "history.jsonl").read_text().splitlines()]
    assert lines[0] == {"ftmatrix-history": 1}
    assert sum("record" in line for line in lines) == 2  # both nights, not only the newest
    assert [line["finding"]["first_bad"] for line in lines if "finding" in line] == ["1.16.0"]


def test_a_lost_history_comes_back_from_the_published_copy(tmp_path: Path):
    out = tmp_path / "reports"
    a_history(out)
    write_site(out)
    again = tmp_path / "next-night" / "history.sqlite"  # the cache was evicted
    assert restore_history(str(out / "site" / "history.jsonl"), again) == (2, 1)
    before = {(r.run_id, r.cell_id, r.case, r.status) for r in load_history(out / "history.sqlite")}
    assert {(r.run_id, r.cell_id, r.case, r.status) for r in load_history(again)} == before
    assert [r.status for r in newest_records(again)] == [Status.FAIL]
    assert load_findings(again)[0]["first_bad"] == "1.16.0"
    # ... and what the cell's run was run with: without it no restored cell is reused.
    assert load_cell_runs(again) == load_cell_runs(out / "history.sqlite") != []
    # A second restore adds nothing, and never replaces a record the history has (with its
    # raw text) by its published copy.
    assert restore_history(str(out / "site" / "history.jsonl"), out / "history.sqlite") == (0, 1)
    (kept,) = [r for r in newest_records(out / "history.sqlite")]
    assert kept.raw_message is not None and str(out) in kept.raw_message


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    folder = tmp_path / "pages"
    folder.mkdir()
    handler = functools.partial(SimpleHTTPRequestHandler, directory=str(folder))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", folder
    finally:
        server.shutdown()
        server.server_close()


def restore_cli(*args: str, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ftmatrix", "restore-history", *args],
        env={**os.environ, "FTMATRIX_OUT": str(out)},
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def test_restore_history_from_the_pages_url(tmp_path: Path, served: tuple[str, Path]):
    url, pages = served
    out = tmp_path / "reports"
    a_history(out)
    (pages / "history.jsonl").write_bytes((write_site(out) / "history.jsonl").read_bytes())
    fresh = tmp_path / "fresh"
    ran = restore_cli(f"{url}/history.jsonl", out=fresh)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == (
        f"restore-history: 2 records and 1 bisect findings added to {fresh / 'history.sqlite'}"
    )
    # Restored again: what the history already holds is not counted as added.
    again = restore_cli(f"{url}/history.jsonl", out=fresh)
    assert again.stdout.strip() == (
        f"restore-history: 0 records and 0 bisect findings added to {fresh / 'history.sqlite'}"
    )
    # The first night: nothing published yet. An error, unless the caller says it may be so.
    missing = restore_cli(f"{url}/nothing/history.jsonl", out=tmp_path / "first")
    assert missing.returncode == ExitCode.USAGE
    assert missing.stderr.strip().endswith("cannot be read: HTTP 404 File not found")
    assert "Traceback" not in missing.stderr
    first = restore_cli(f"{url}/nothing/history.jsonl", "--missing-ok", out=tmp_path / "first")
    assert first.returncode == 0, first.stderr
    assert first.stdout.startswith("restore-history: nothing published yet (")
    assert not (tmp_path / "first" / "history.sqlite").exists()


def test_a_file_that_is_not_a_published_history_restores_nothing(tmp_path: Path):
    out = tmp_path / "reports"
    a_history(out)
    good = (write_site(out) / "history.jsonl").read_text().splitlines()
    store = tmp_path / "fresh" / "history.sqlite"
    cases = {
        "index.html": ("<!DOCTYPE html>\n", "not a history.jsonl of format 1"),
        "truncated.jsonl": ("\n".join([*good[:2], good[2][:30]]), "line 3: not JSON"),
        "other.jsonl": ("\n".join([good[0], '{"x": 1}']), 'line 2: neither {"record"'),
        "badrecord.jsonl": (
            "\n".join([good[0], json.dumps({"record": {"schema": 1}})]),
            r"line 2: missing field\(s\)",
        ),
    }
    for name, (text, expected) in cases.items():
        path = tmp_path / name
        path.write_text(text)
        with pytest.raises(UsageError, match=expected):
            restore_history(str(path), store)
        assert load_history(store) == []  # all or nothing
    with pytest.raises(NotFound, match="cannot be read: No such file or directory"):
        restore_history(str(tmp_path / "absent.jsonl"), store)
    # Another scheme is refused by name, never read as a relative path "ftp:/...".
    with pytest.raises(UsageError, match="only https:// and http:// URLs or a file path"):
        restore_history("ftp://example.org/history.jsonl", store)
    ran = restore_cli(str(tmp_path / "truncated.jsonl"), out=tmp_path / "fresh")
    assert ran.returncode == ExitCode.USAGE and "line 3: not JSON" in ran.stderr
    assert "Traceback" not in ran.stderr


def test_reports_into_one_folder_at_once_all_succeed(tmp_path: Path):
    """Two runs into one folder (or a run's last cells, ending together) report at once:
    one removed the other's half-built site and that report failed (FileNotFoundError)."""
    out = tmp_path / "reports"
    a_history(out)
    env = {**os.environ, "FTMATRIX_OUT": str(out)}
    for _ in range(4):
        reports = [
            subprocess.Popen(
                [sys.executable, "-m", "ftmatrix", "report"],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(6)
        ]
        ended = [(r.wait(timeout=120), r.communicate()[1]) for r in reports]
        assert [code for code, _ in ended] == [0] * 6, [err for _, err in ended if err]
    assert (out / "site" / "history.jsonl").read_text().startswith('{"ftmatrix-history"')
    assert not list(out.glob(".site.building*"))


@pytest.mark.parametrize(
    ("name", "edit"),
    [
        ("a byte-order mark", lambda data: b"\xef\xbb\xbf" + data),
        ("CRLF line ends", lambda data: data.replace(b"\n", b"\r\n")),
        ("both", lambda data: b"\xef\xbb\xbf" + data.replace(b"\n", b"\r\n")),
    ],
)
def test_a_published_history_saved_again_by_an_editor_restores_whole(
    tmp_path: Path, name: str, edit: Callable[[bytes], bytes]
) -> None:
    out = tmp_path / "reports"
    a_history(out)
    published = tmp_path / "history.jsonl"
    published.write_bytes(edit((write_site(out) / "history.jsonl").read_bytes()))
    fresh = tmp_path / "fresh"
    ran = restore_cli(str(published), out=fresh)
    assert ran.returncode == 0, f"{name}: {ran.stderr}"
    assert ran.stdout.strip() == (
        f"restore-history: 2 records and 1 bisect findings added to {fresh / 'history.sqlite'}"
    )


@pytest.mark.parametrize("later_first", [False, True])
def test_two_lines_of_one_case_in_a_published_history_keep_the_later_finished(
    tmp_path: Path, later_first: bool
) -> None:
    """Restored, the first of them was kept whatever its time: the order of the lines
    chose the verdict, where a merge keeps the later-finished."""
    earlier = make_record(run_id="20261123T000000Z-aaaaaa", case="a.py::t")
    later = make_record(
        run_id="20261123T000000Z-aaaaaa",
        case="a.py::t",
        status=Status.FAIL,
        finished_at="2026-11-22T13:00:00+00:00",
    )
    lines = [later, earlier] if later_first else [earlier, later]
    published = tmp_path / "history.jsonl"
    published.write_text(
        '{"ftmatrix-history": 1}\n'
        + "".join(json.dumps({"record": r.to_dict()}) + "\n" for r in lines)
    )
    out = tmp_path / "reports"
    ran = restore_cli(str(published), out=out)
    assert ran.returncode == 0, ran.stderr
    (kept,) = load_history(out / "history.sqlite")
    assert (kept.status, kept.finished_at) == (Status.FAIL, "2026-11-22T13:00:00+00:00")
