"""The noxfile lists the cells of a kept plan: `nox -l` asks no network once a plan exists.

A local index (PEP 691 JSON) serves the releases of six and counts the requests it
answers; closing it leaves its port refusing connections, as an unreachable index does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from ftmatrix.config import load_matrix
from ftmatrix.pipeline import list_cells, load
from ftmatrix.plan import UNRESOLVED, Installability, Plan, plan_cells
from ftmatrix.plan_cache import keep_plan, kept_plan, plan_key
from ftmatrix.settings import Settings

ROOT = Path(__file__).parent.parent
NOW = datetime(2026, 12, 1, 3, 0, tzinfo=UTC)
SELECTOR_MATRIX = "packages:\n  six: {latest: 2}\n"


class Index:
    """A package index on 127.0.0.1 serving six's releases; ``hits`` counts its answers."""

    def __init__(self, versions: Sequence[str]) -> None:
        self.versions = list(versions)
        self.hits = 0
        index = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                index.hits += 1
                if self.path.rstrip("/") != "/simple/six":
                    self.send_error(404)
                    return
                files = [
                    {"filename": f"six-{v}-py2.py3-none-any.whl", "upload-time": None}
                    for v in index.versions
                ]
                self.send_response(200)
                self.send_header("Content-Type", "application/vnd.pypi.simple.v1+json")
                self.end_headers()
                self.wfile.write(json.dumps({"files": files}).encode())

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_port}/simple"

    def close(self) -> None:
        """Stop answering: the port refuses connections from now on."""
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def index() -> Iterator[Index]:
    served = Index(["1.15.0", "1.16.0", "1.17.0"])
    yield served
    served.close()


def env_for(tmp_path: Path, index: Index, matrix: str = SELECTOR_MATRIX) -> dict[str, str]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "matrix.yaml").write_text(matrix)
    return {
        "FTMATRIX_MATRIX": str(tmp_path / "matrix.yaml"),
        "FTMATRIX_OUT": str(tmp_path / "out"),
        "FTMATRIX_CACHE_DIR": str(tmp_path / "cache"),
        "UV_INDEX_URL": index.url,
    }


def listed_sessions(env: Mapping[str, str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("FTMATRIX_", "UV_", "PIP_"))}
    return subprocess.run(
        [sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py"), "-l"],
        env={**clean, **env},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )


def matrix_sessions(listed: subprocess.CompletedProcess[str]) -> list[str]:
    return [line.split()[1] for line in listed.stdout.splitlines() if line.startswith("* matrix(")]


def labels(env: Mapping[str, str], now: datetime = NOW) -> list[str]:
    listed = list_cells(env, root=Path.cwd(), now=now)
    assert listed.loaded is not None, listed.problem
    return [cell.label.split("-")[-1] for cell in listed.loaded.selected]


def test_nox_lists_a_kept_plan_without_asking_the_index(tmp_path: Path, index: Index):
    env = env_for(tmp_path, index)
    first = listed_sessions(env, tmp_path)
    assert first.returncode == 0, first.stderr
    expected = ["matrix(cpu-py3.11-six1.16.0)", "matrix(cpu-py3.11-six1.17.0)"]
    assert matrix_sessions(first) == expected
    assert index.hits > 0  # the first listing planned, and kept the plan

    asked = index.hits
    again = listed_sessions(env, tmp_path)
    assert (again.returncode, matrix_sessions(again)) == (0, expected), again.stderr
    assert index.hits == asked  # no request, while the index was there to answer

    index.close()  # unreachable now: any request is refused
    unreachable = listed_sessions(env, tmp_path)
    assert (unreachable.returncode, matrix_sessions(unreachable)) == (0, expected)
    assert "ftmatrix:" not in unreachable.stderr, unreachable.stderr


def test_a_plan_step_replaces_the_kept_plan(tmp_path: Path, index: Index):
    env = env_for(tmp_path, index)
    assert labels(env) == ["six1.16.0", "six1.17.0"]
    index.versions.append("1.18.0")
    assert labels(env) == ["six1.16.0", "six1.17.0"]  # the kept plan stands
    load(env, root=Path.cwd(), now=NOW)  # as `ftmatrix plan`, `run`, `ci-matrix` do
    assert labels(env) == ["six1.17.0", "six1.18.0"]


def test_a_kept_plan_stands_for_the_resolve_ttl_and_none_is_kept_with_it_0(
    tmp_path: Path, index: Index
):
    env = {**env_for(tmp_path, index), "FTMATRIX_RESOLVE_TTL": "3600"}
    assert labels(env) == ["six1.16.0", "six1.17.0"]
    index.versions.append("1.18.0")
    assert labels(env, NOW + timedelta(seconds=3600)) == ["six1.16.0", "six1.17.0"]
    assert labels(env, NOW + timedelta(seconds=3601)) == ["six1.17.0", "six1.18.0"]

    off = {**env_for(tmp_path / "off", index), "FTMATRIX_RESOLVE_TTL": "0"}
    index.versions.append("1.19.0")
    assert labels(off) == ["six1.18.0", "six1.19.0"]
    hits = index.hits
    assert labels(off) == ["six1.18.0", "six1.19.0"]
    assert index.hits > hits  # planned again: nothing was kept
    assert not (tmp_path / "off" / "cache").exists()


def test_a_plan_that_asks_no_network_is_not_kept(tmp_path: Path, index: Index):
    env = env_for(tmp_path, index, "packages:\n  six: ['1.16.0', '1.17.0']\n")
    assert labels(env) == ["six1.16.0", "six1.17.0"]
    load(env, root=Path.cwd(), now=NOW)
    assert index.hits == 0
    assert not (tmp_path / "cache").exists()


def settings_of(path: Path, text: str, **env: str) -> Settings:
    path.write_text(text)
    return Settings.from_env({"FTMATRIX_MATRIX": str(path), **env}, root=Path.cwd(), now=NOW)


def test_the_key_is_the_content_the_profile_the_python_and_the_index_variables(tmp_path: Path):
    text = SELECTOR_MATRIX + "profiles: {more: {packages: {six: {latest: 3}}}}\n"
    base = settings_of(tmp_path / "a.yaml", text)
    key = plan_key(base, {})
    assert plan_key(settings_of(tmp_path / "b.yaml", text), {}) == key  # another path
    assert plan_key(settings_of(tmp_path / "c.yaml", text + "# more\n"), {}) != key
    assert plan_key(settings_of(tmp_path / "d.yaml", text, FTMATRIX_PROFILE="more"), {}) != key
    assert plan_key(settings_of(tmp_path / "e.yaml", text, FTMATRIX_PYTHON="3.99"), {}) != key
    for variable in (
        "UV_EXCLUDE_NEWER",
        "UV_INDEX_URL",
        "PIP_FIND_LINKS",
        "UV_OFFLINE",
        "PIP_NO_INDEX",
    ):
        assert plan_key(base, {variable: "x"}) != key, variable
    # A constraints file edited in place: the same path, another plan.
    constraints = tmp_path / "constraints.txt"
    constraints.write_text("six<1.17\n")
    before = plan_key(base, {"UV_CONSTRAINT": str(constraints)})
    constraints.write_text("six<2\n")
    assert plan_key(base, {"UV_CONSTRAINT": str(constraints)}) != before
    # What selects among the planned cells is applied after reading: no part of the key.
    assert plan_key(base, {"FTMATRIX_SELECT": "cpu-*", "FTMATRIX_SHARD": "1/2"}) == key


PAIRWISE = """
packages:
  a: ["1.0", "2.0"]
  b: ["1.0", "2.0", none]
  c: ["1.0", "2.0"]
strategy: pairwise
"""


def pairwise_plan(tmp_path: Path, *, proven: bool = True) -> tuple[Settings, Plan]:
    settings = settings_of(tmp_path / "pairwise.yaml", PAIRWISE)
    matrix = load_matrix(settings.matrix, default_python="3.11")

    def oracle(queries: Sequence[Mapping[str, str | None]]) -> list[Installability]:
        return [
            Installability(installable=False, reason="a 2.0 needs b<2", proven=proven)
            if q.get("a") == "2.0" and q.get("b") == "2.0"
            else Installability(installable=True)
            for q in queries
        ]

    return settings, plan_cells(matrix, oracle)


def test_a_pairwise_plan_comes_back_whole_with_its_findings(tmp_path: Path):
    settings, plan = pairwise_plan(tmp_path)
    env = {"FTMATRIX_CACHE_DIR": str(tmp_path / "cache")}
    keep_plan(plan, settings, env, now=NOW)
    matrix = load_matrix(settings.matrix, default_python="3.11")
    assert kept_plan(settings, matrix, env, now=NOW) == plan
    assert kept_plan(settings, matrix, env, now=NOW + timedelta(hours=7)) is None  # 6 h


def test_a_plan_with_an_unproven_answer_is_not_kept(tmp_path: Path):
    settings, plan = pairwise_plan(tmp_path, proven=False)
    assert plan.covering is not None and plan.covering.of_kind(UNRESOLVED)
    env = {"FTMATRIX_CACHE_DIR": str(tmp_path / "cache")}
    keep_plan(plan, settings, env, now=NOW)
    assert not (tmp_path / "cache").exists()
