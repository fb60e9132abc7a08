"""Automatic bisection: which new failures are searched after a run, within the budget."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from conftest import SFT, cell

from ftmatrix.bisection.auto import (
    AutoJob,
    ReleasesUnavailable,
    choose_bisects,
    immediate_finding,
    within_budget,
)
from ftmatrix.bisection.cells import BisectRequest
from ftmatrix.cell.files import CellFiles
from ftmatrix.cell.records import CellRecordFile
from ftmatrix.cell.status import Status
from ftmatrix.cli import main
from ftmatrix.known_issues import parse_known_issues
from ftmatrix.store import load_findings

RELEASES = {
    "trl": ["0.9.0", "1.0.0", "1.0.1", "1.0.2", "1.1.0", "1.2.0"],
    "transformers": ["4.57.6", "5.0.0", "5.1.0"],
}


def releases(package: str) -> list[str]:
    return RELEASES[package]


def test_a_new_failure_whose_neighbour_passes_is_chosen():
    records = [
        cell(Status.FAIL, trl="1.1.0", transformers="5.0.0"),
        cell(Status.PASS, trl="1.0.0", transformers="5.0.0"),
        cell(Status.PASS, trl="1.0.0", transformers="5.1.0"),  # two pins apart: no neighbour
    ]
    selection = choose_bisects(records, budget=8, releases=releases)
    (job,) = selection.jobs
    assert job.request.case == SFT
    assert (job.request.axis, job.request.good, job.request.bad) == ("trl", "1.0.0", "1.1.0")
    assert job.request.pins == (("transformers", "5.0.0"),)
    assert (job.request.hardware, job.request.python) == ("cpu", "3.11")
    assert job.releases == ("1.0.0", "1.0.1", "1.0.2", "1.1.0")
    assert job.cost == 4  # both ends, then the two releases between take two halvings
    assert job.describe() == (
        "test_sft.py::test_sft on cpu: trl 1.0.0 passes (cpu-py3.11-trl1.0.0-transformers5.0.0), "
        "1.1.0 fails (cpu-py3.11-trl1.1.0-transformers5.0.0; ImportError [1a2b3c4d]), "
        "holding transformers==5.0.0; 2 releases between: about 4 builds"
    )
    assert selection.nothing_reason() is None


def job(name: str, *, releases: int, shared: int) -> AutoJob:
    """A job over ``releases`` releases (2: adjacent, free) that ``shared`` failures share."""
    failing = cell(Status.FAIL, trl="1.1.0")
    return AutoJob(
        request=BisectRequest(case=name, axis="trl", good="1.0.0", bad="1.1.0"),
        signature=None,
        failing=failing,
        passing=cell(Status.PASS, trl="1.0.0"),
        releases=tuple(f"1.0.{i}" for i in range(releases)),
        shared=shared,
    )


@pytest.mark.parametrize(
    ("jobs", "budget", "chosen", "over"),
    [
        ([], 8, [], []),
        # Most widespread first: b (3 failures) is taken before a, which no longer fits.
        ([("a", 9, 1), ("b", 9, 3)], 5, ["b"], ["a"]),
        # A job that does not fit leaves the budget to a cheaper one after it.
        ([("big", 17, 2), ("small", 3, 1)], 5, ["small"], ["big"]),
        # Adjacent releases cost nothing: taken with the budget spent.
        ([("a", 5, 2), ("free", 2, 1)], 4, ["a", "free"], []),
        # Equal value: the cheaper first, then the request id.
        ([("x", 9, 1), ("y", 3, 1)], 9, ["y", "x"], []),
        ([("a", 3, 1)], 2, [], ["a"]),
    ],
)
def test_jobs_within_the_budget(
    jobs: list[tuple[str, int, int]], budget: int, chosen: list[str], over: list[str]
):
    candidates = [job(name, releases=n, shared=shared) for name, n, shared in jobs]
    taken, left = within_budget(candidates, budget)
    assert [j.request.case for j in taken] == chosen
    assert [j.request.case for j in left] == over


def test_no_passing_neighbour_one_pin_apart_means_nothing_to_bisect():
    records = [
        cell(Status.FAIL, trl="1.1.0", transformers="5.0.0"),
        cell(Status.PASS, trl="1.0.0", transformers="5.1.0"),
        cell(Status.ERROR, trl="1.0.0", transformers="5.0.0"),  # our bug: not a pass
        cell(Status.PASS, trl="1.1.0", transformers="5.0.0", hardware="l4"),  # other hardware
    ]
    selection = choose_bisects(records, budget=8, releases=releases)
    assert selection.jobs == ()
    assert [(p.what, p.kind) for p in selection.left_out] == [
        ("test_sft.py::test_sft in cpu-py3.11-trl1.1.0-transformers5.0.0", "no-neighbour")
    ]
    assert selection.nothing_reason() == (
        "none of 1 failing cases qualifies (1 without a passing cell one pin apart)"
    )


def test_a_failure_already_bisected_or_known_is_not_bisected_again():
    records = [
        cell(Status.FAIL, trl="1.1.0", transformers="5.0.0", signature="sig-a"),
        cell(Status.FAIL, trl="1.1.0", transformers="5.0.0", signature="sig-b", case="t.py::b"),
        cell(Status.FAIL, trl="1.1.0", transformers="5.0.0", signature="sig-c", case="t.py::c"),
        *[
            cell(Status.PASS, trl="1.0.0", transformers="5.0.0", case=case)
            for case in (SFT, "t.py::b", "t.py::c")
        ],
    ]
    by_signature = {
        "case": SFT,
        "axis": "trl",
        "signature": "sig-a",
        "last_good": "1.0.2",
        "first_bad": "1.1.0",
    }
    # A manual bisect (no signature): the same case, axis and held pins.
    by_search = {
        "case": "t.py::b",
        "axis": "trl",
        "held": {"transformers": "5.0.0"},
        "hardware": None,
        "last_good": "1.0.1",
        "first_bad": "1.0.2",
    }
    known = parse_known_issues(
        [
            {
                "id": "trl-x",
                "title": "t",
                "package": "trl",
                "upstream": "https://github.com/huggingface/trl/issues/9",
                "match": {"signatures": ["sig-c"]},
            }
        ],
        source="k.yaml",
    )
    selection = choose_bisects(
        records, budget=8, releases=releases, findings=[by_signature, by_search], known=known
    )
    assert selection.jobs == ()
    assert [(p.kind, p.reason) for p in selection.left_out] == [
        ("bisected", "already bisected: trl last good 1.0.1, first bad 1.0.2"),
        ("known", "known issue trl-x"),
        ("bisected", "already bisected: trl last good 1.0.2, first bad 1.1.0"),
    ]
    assert selection.nothing_reason() == (
        "none of 3 failing cases qualifies (2 already bisected, 1 explained by known_issues.yaml)"
    )
    # Without those findings, both unexplained failures would be searched.
    assert len(choose_bisects(records, budget=8, releases=releases, known=known).jobs) == 2


def test_one_search_per_signature_from_its_cheapest_neighbour():
    records = [
        cell(Status.FAIL, trl="1.2.0", transformers="5.0.0"),
        cell(Status.PASS, trl="0.9.0", transformers="5.0.0"),  # 6 releases: about 5 builds
        cell(Status.FAIL, trl="1.2.0", transformers="5.1.0"),
        cell(Status.PASS, trl="1.1.0", transformers="5.1.0"),  # adjacent: free
    ]
    (job,) = choose_bisects(records, budget=8, releases=releases).jobs
    assert (job.request.good, job.request.bad, job.shared) == ("1.1.0", "1.2.0", 2)
    assert job.immediate


def test_the_budget_keeps_the_most_widespread_failures_and_stops_when_spent():
    records = [
        # sig-wide breaks two cases; sig-narrow one. Each search costs about 4 builds.
        cell(Status.FAIL, trl="1.1.0", transformers="5.0.0", signature="sig-wide"),
        cell(Status.PASS, trl="1.0.0", transformers="5.0.0"),
        cell(Status.FAIL, trl="1.1.0", transformers="5.0.0", signature="sig-wide", case="t.py::w"),
        cell(
            Status.FAIL, trl="1.1.0", transformers="5.0.0", signature="sig-narrow", case="t.py::n"
        ),
        cell(Status.PASS, trl="1.0.0", transformers="5.0.0", case="t.py::n"),
    ]
    selection = choose_bisects(records, budget=5, releases=releases)
    assert [j.signature for j in selection.jobs] == ["sig-wide"]
    assert [j.signature for j in selection.over_budget] == ["sig-narrow"]
    assert selection.estimated == 4
    everything = choose_bisects(records, budget=8, releases=releases)
    assert [j.signature for j in everything.jobs] == ["sig-wide", "sig-narrow"]
    assert choose_bisects(records, budget=3, releases=releases).nothing_reason() == (
        "none of 3 failing cases qualifies (2 over the budget)"
    )


def test_adjacent_releases_give_the_finding_without_a_build():
    records = [
        cell(Status.FAIL, trl="1.0.0", transformers="5.1.0"),
        cell(Status.PASS, trl="1.0.0", transformers="5.0.0"),
    ]
    (job,) = choose_bisects(records, budget=1, releases=releases).jobs
    assert job.immediate
    assert job.cost == 0
    assert job.describe().endswith("; adjacent releases: found without a build")
    finding = immediate_finding(job)
    assert (finding.axis, finding.last_good, finding.first_bad) == (
        "transformers",
        "5.0.0",
        "5.1.0",
    )
    assert finding.exact
    assert [(s.version, s.verdict.value, s.status) for s in finding.steps] == [
        ("5.0.0", "good", "pass"),
        ("5.1.0", "bad", "fail"),
    ]


def test_releases_missing_from_the_index_or_an_unreadable_index_are_reported():
    records = [
        cell(Status.FAIL, trl="1.0.0", transformers="5.1.0"),
        cell(Status.PASS, trl="1.0.0", transformers="4.0.0"),
    ]

    def unreachable(package: str) -> list[str]:
        raise ReleasesUnavailable("https://pypi.org/simple/transformers/: could not be read")

    for lookup, reason in (
        (releases, "transformers: 4.0.0 not among the releases on the index"),
        (unreachable, "transformers: https://pypi.org/simple/transformers/: could not be read"),
    ):
        selection = choose_bisects(records, budget=8, releases=lookup)
        assert [(p.kind, p.reason) for p in selection.left_out] == [("no-releases", reason)]


def test_a_budget_of_zero_is_off_and_asks_the_index_nothing():
    def no_lookup(package: str) -> list[str]:
        raise AssertionError("the index must not be asked")

    records = [
        cell(Status.FAIL, trl="1.1.0", transformers="5.0.0"),
        cell(Status.PASS, trl="1.0.0", transformers="5.0.0"),
    ]
    selection = choose_bisects(records, budget=0, releases=no_lookup)
    assert selection.nothing_reason() == (
        "bisect.budget is 0 (off); set it in the matrix file, e.g. bisect: {budget: 8}"
    )


DATA = Path(__file__).parent / "data"


def cli_env(tmp_path: Path, matrix: Path) -> dict[str, str]:
    # No UV_/PIP_ index variables: the matrix file alone says where releases come from.
    return {
        "PATH": os.environ.get("PATH", ""),
        "HOME": os.environ.get("HOME", ""),
        "FTMATRIX_MATRIX": str(matrix),
        "FTMATRIX_CASES": str(DATA / "bisect_cases"),
        "FTMATRIX_OUT": str(tmp_path / "reports"),
    }


def test_the_cli_says_why_there_is_nothing_to_bisect(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    env = cli_env(tmp_path, DATA / "bisect_matrix.yaml")
    assert main(["autobisect", "--budget", "8"], env=env) == 0
    assert capsys.readouterr().out == "nothing to bisect: no records to look at\n"
    assert main(["autobisect"], env=env) == 0  # the file sets no budget: off
    assert capsys.readouterr().out == (
        "nothing to bisect: bisect.budget is 0 (off); set it in the matrix file, "
        "e.g. bisect: {budget: 8}\n"
    )


@pytest.fixture
def attrs_index() -> Iterator[str]:
    """A real PEP 691 index on localhost that lists a few attrs releases."""
    files = [f"attrs-{v}-py2.py3-none-any.whl" for v in ("21.1.0", "21.2.0", "21.3.0", "21.4.0")]
    body = json.dumps({"meta": {"api-version": "1.1"}, "files": [{"filename": f} for f in files]})

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.rstrip("/") != "/simple/attrs":
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/vnd.pypi.simple.v1+json")
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/simple"
    server.shutdown()
    server.server_close()


def test_the_cli_keeps_an_immediate_finding_and_does_not_find_it_twice(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], attrs_index: str
):
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(
        f"packages: {{attrs: ['21.3.0']}}\ninstall: {{index-url: '{attrs_index}'}}\n"
        "bisect: {budget: 4}\n"
        "hardware: {cpu: {runs-on: [ubuntu-latest]}, l4: {runs-on: [self-hosted, l4], gpus: 1}}\n"
    )
    env = cli_env(tmp_path, matrix)
    case = "test_attrs_namespace.py::test_attrs_namespace_exists"
    for record in (
        cell(Status.PASS, case=case, attrs="21.3.0"),
        cell(Status.FAIL, case=case, attrs="21.2.0", signature="sig-attrs"),
    ):
        out = tmp_path / "reports"
        CellRecordFile(CellFiles.of(out, record.run_id, record.cell_id).records).add(record)
    # A GPU runner bisects its own class's failures: none here; a class never declared is a typo.
    assert main(["autobisect", "--hardware", "l4"], env=env) == 0
    assert capsys.readouterr().out.splitlines() == [
        "autobisect: hardware class 'l4' only: 0 of 2 records",
        "nothing to bisect: no records to look at",
    ]
    assert main(["autobisect", "--hardware", "a100"], env=env) == 2
    assert capsys.readouterr().err == (
        f"ftmatrix: --hardware 'a100': {matrix} has no such hardware class (classes: cpu, l4)\n"
    )
    assert main(["autobisect", "--hardware", "cpu"], env=env) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "autobisect: hardware class 'cpu' only: 2 of 2 records"
    lines = lines[1:]
    assert lines[0] == "autobisect: 1 search chosen, for 1 of 1 failing cases; about 0 of 4 cells"
    assert lines[1].startswith(f"  bisect: {case} on cpu: attrs 21.3.0 passes")
    assert lines[-2] == "attrs: last good 21.3.0, first bad 21.2.0; 0 cells built"
    (finding,) = load_findings(tmp_path / "reports" / "history.sqlite")
    assert finding["signature"] == "sig-attrs"
    assert finding["immediate"] is True
    assert (finding["last_good"], finding["first_bad"]) == ("21.3.0", "21.2.0")
    (written,) = (tmp_path / "reports" / "bisect").glob("*/finding.json")
    assert json.loads(written.read_text()) == finding
    # The next night: the same failure is already bisected.
    assert main(["autobisect"], env=env) == 0
    assert capsys.readouterr().out.splitlines() == [
        "nothing to bisect: none of 1 failing cases qualifies (1 already bisected)",
        f"  not bisected: {case} in cpu-py3.11-attrs21.2.0: "
        "already bisected: attrs last good 21.3.0, first bad 21.2.0",
    ]


@pytest.mark.slow
def test_a_real_autobisect_builds_the_cells_and_keeps_the_finding(tmp_path: Path):
    """The nightly's two records of attrs (21.3.0 has the namespace, 20.3.0 not; 21.1.0 is yanked)."""
    case = "test_attrs_namespace.py::test_attrs_namespace_exists"
    out = tmp_path / "reports"
    for record in (
        cell(Status.PASS, case=case, attrs="21.3.0"),
        cell(Status.FAIL, case=case, attrs="20.3.0", signature="sig-attrs"),
    ):
        CellRecordFile(CellFiles.of(out, record.run_id, record.cell_id).records).add(record)
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text((DATA / "bisect_matrix.yaml").read_text() + "bisect: {budget: 3}\n")
    env = {
        **os.environ,
        "FTMATRIX_MATRIX": str(matrix),
        "FTMATRIX_CASES": str(DATA / "bisect_cases"),
        "FTMATRIX_OUT": str(out),
    }
    root = Path(__file__).parent.parent
    ran = subprocess.run(
        [sys.executable, "-m", "nox", "-f", str(root / "noxfile.py"), "-s", "autobisect"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    assert "autobisect: 1 search chosen, for 1 of 1 failing cases; about 3 of 3 cells" in ran.stdout
    assert "attrs: last good 21.3.0, first bad 21.2.0; 3 cells built" in ran.stdout
    (finding,) = load_findings(out / "history.sqlite")
    assert (finding["last_good"], finding["first_bad"], finding["exact"]) == (
        "21.3.0",
        "21.2.0",
        True,
    )
    assert finding["signature"] == "sig-attrs"
    assert [s["version"] for s in finding["steps"]] == ["21.3.0", "20.3.0", "21.2.0"]
