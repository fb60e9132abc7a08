"""The GitHub Actions workflows: valid, secure, and wired to what really exists."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import make_record

from ftmatrix.cell.files import CellFiles
from ftmatrix.cell.records import CellRecordFile
from ftmatrix.cli import build_parser
from ftmatrix.errors import ExitCode
from ftmatrix.settings import ENV_VARS

ROOT = Path(__file__).parent.parent
SOURCE = ROOT / ".github" / "workflows"  # the one copy: GitHub runs it, the wheel ships it
WORKFLOWS = sorted(SOURCE.glob("*.yml"))


def tool(name: str) -> str:
    found = shutil.which(name) or str(Path(sys.executable).parent / name)
    if not Path(found).exists():
        pytest.fail(f"{name} is not installed: it is in the test extra of pyproject.toml")
    return found


def run_lines(workflow: Path) -> list[str]:
    data = yaml.safe_load(workflow.read_text())
    return [
        line
        for job in data["jobs"].values()
        for step in job.get("steps", [])
        for line in str(step.get("run", "")).splitlines()
    ]


def test_the_workflows_are_the_four_the_docs_name():
    assert [p.name for p in WORKFLOWS] == ["ftmatrix.yml", "nightly.yml", "pr.yml", "release.yml"]
    table = (ROOT / "docs" / "guides" / "nightly.md").read_text()
    assert all(f"| `{p.name}` |" in table for p in WORKFLOWS)


def test_the_release_publishes_by_trusted_publishing_only_when_switched_on():
    """No token: PyPI takes the publish job's OIDC token; the job runs for a tag only where
    the repository variable says so, after the files were built once and tested."""
    release = yaml.safe_load((SOURCE / "release.yml").read_text())
    publish = release["jobs"]["publish"]
    assert publish["needs"] == "test" and release["jobs"]["test"]["needs"] == "build"
    assert publish["if"] == "startsWith(github.ref, 'refs/tags/v') && vars.PYPI_PUBLISH == 'true'"
    assert publish["permissions"] == {"id-token": "write"}
    assert publish["environment"]["name"] == "pypi"
    assert "secrets." not in (SOURCE / "release.yml").read_text()
    (step,) = [s for s in publish["steps"] if "gh-action-pypi-publish" in s.get("uses", "")]
    assert "with" not in step  # no password: trusted publishing


def test_workflows_match_the_github_schema():
    done = subprocess.run(
        [
            tool("check-jsonschema"),
            "--builtin-schema",
            "vendor.github-workflows",
            *map(str, WORKFLOWS),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_zizmor_finds_nothing_of_medium_severity_or_above():
    done = subprocess.run(
        [tool("zizmor"), "--offline", "--min-severity", "medium", *map(str, WORKFLOWS)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_self_hosted_runners_never_see_pull_requests_and_every_job_is_bounded():
    for workflow in WORKFLOWS:
        data = yaml.safe_load(workflow.read_text())
        triggers = data[True] if True in data else data["on"]  # YAML reads `on` as True
        assert data["permissions"] == {}, workflow.name
        for name, job in data["jobs"].items():
            # A job that calls a reusable workflow takes no timeout: each called job has its own.
            if "uses" in job:
                assert re.fullmatch(r"\./\.github/workflows/[\w-]+\.yml", job["uses"]), job["uses"]
                assert (SOURCE / Path(job["uses"]).name).is_file(), job["uses"]
            else:
                assert "timeout-minutes" in job, (workflow.name, name)
            assert "permissions" in job, (workflow.name, name)
            for step in job.get("steps", []):
                uses = step.get("uses")
                if uses:
                    assert re.fullmatch(r"[\w./-]+@[0-9a-f]{40}", uses), uses
        if any(
            "self-hosted" in json.dumps(job) or "matrix.runs_on" in json.dumps(job)
            for job in data["jobs"].values()
        ):
            assert "pull_request" not in triggers and "pull_request_target" not in triggers


def test_sessions_commands_and_variables_the_workflows_use_exist():
    listed = subprocess.run(
        [sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py"), "-l"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    # `nox -l` marks every session: selected ones (*) on stdout, the others (-) on
    # stderr; `--json` would list the selected ones only.
    sessions = {
        line[2:].split()[0].split("(")[0]
        for line in (listed.stdout + listed.stderr).splitlines()
        if line.startswith(("* ", "- "))
    }
    commands = set(build_parser()._subparsers._group_actions[0].choices)
    text = "\n".join(w.read_text() for w in WORKFLOWS)
    for workflow in WORKFLOWS:
        for line in run_lines(workflow):
            for used in re.findall(r"nox -s ([\w\s-]+?)(?:$|&&|>>|\|)", line):
                for session in used.split():
                    assert session in sessions, (workflow.name, session)
            for command in re.findall(r"python -m ftmatrix ([\w-]+)", line):
                assert command in commands, (workflow.name, command)
    for variable in set(re.findall(r"\b(FTMATRIX_[A-Z_]+)\b", text)):
        assert variable in ENV_VARS, variable


def test_the_plan_output_has_the_shape_the_workflow_reads(tmp_path: Path):
    env = {
        **os.environ,
        "FTMATRIX_MATRIX": str(ROOT / "tests/data/small_matrix.yaml"),
        "FTMATRIX_OUT": str(tmp_path),
    }
    env.pop("FTMATRIX_PROFILE", None)
    done = subprocess.run(
        [sys.executable, "-m", "ftmatrix", "ci-matrix", "--cells-per-shard", "3"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    outputs = dict(line.split("=", 1) for line in done.stdout.splitlines())
    assert set(outputs) == {"matrix", "bisect", "run-id"}
    assert json.loads(outputs["bisect"]) == {"include": []}  # bisect.budget is 0: no jobs
    matrix = json.loads(outputs["matrix"])
    assert [j["shard"] for j in matrix["include"]] == ["1/2", "2/2"]
    expressions = re.findall(r"\$\{\{(.*?)\}\}", (SOURCE / "ftmatrix.yml").read_text())
    used = {name for e in expressions for name in re.findall(r"\bmatrix\.(\w+)", e)}
    for job in matrix["include"]:
        assert used <= set(job), used - set(job)
    # Each shard, run with the job's variables, selects a disjoint part of the cells.
    chosen = []
    for job in matrix["include"]:
        plan = subprocess.run(
            [sys.executable, "-m", "ftmatrix", "plan", "--no-resolve"],
            env={**env, "FTMATRIX_SELECT": job["select"], "FTMATRIX_SHARD": job["shard"]},
            capture_output=True,
            text=True,
            check=True,
        )
        chosen += [line.split()[0] for line in plan.stdout.splitlines()[1:-1]]
    assert len(chosen) == len(set(chosen)) == 4


def test_every_job_runs_the_cells_the_plan_planned_on_the_planned_python(tmp_path: Path):
    """The run and bisect jobs once used the runner's own python3: on a runner whose python3
    was 3.12 the cells planned as py3.11 matched no label (exit 4) or ran on 3.12."""
    env = {
        **os.environ,
        "FTMATRIX_MATRIX": str(ROOT / "tests/data/small_matrix.yaml"),
        "FTMATRIX_OUT": str(tmp_path),
        "FTMATRIX_PYTHON": "3.12",  # the plan job's Python: not the one running these tests
    }
    env.pop("FTMATRIX_PROFILE", None)
    done = subprocess.run(
        [sys.executable, "-m", "ftmatrix", "ci-matrix"],
        capture_output=True, text=True, env=env, check=True,
    )  # fmt: skip
    outputs = dict(line.split("=", 1) for line in done.stdout.splitlines())
    [job] = json.loads(outputs["matrix"])["include"]
    assert (job["python"], job["pythons"]) == ("3.12", "3.12")
    planned = job["select"].split(",")
    assert len(planned) == job["cells"] == 4 and all("-py3.12-" in x for x in planned)
    # The job, on a runner whose interpreter is another (this one), with the job's variables.
    job_env = {**env, "FTMATRIX_SELECT": job["select"], "FTMATRIX_SHARD": job["shard"]}
    job_env["FTMATRIX_PYTHON"] = job["python"]
    plan = subprocess.run(
        [sys.executable, "-m", "ftmatrix", "plan", "--no-resolve"],
        env=job_env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert sorted(line.split()[0] for line in plan.stdout.splitlines()[1:-1]) == sorted(planned)
    # ... which the workflow hands over, with actions/setup-python of those Pythons.
    jobs = yaml.safe_load((SOURCE / "ftmatrix.yml").read_text())["jobs"]
    for name in ("run", "bisect"):
        assert jobs[name]["env"]["FTMATRIX_PYTHON"] == "${{ matrix.python }}", name
        setup = [s for s in jobs[name]["steps"] if "setup-python" in s.get("uses", "")]
        assert setup and setup[0]["with"]["python-version"] == "${{ matrix.pythons }}", name
        assert not [s for s in jobs[name]["steps"] if "python3 " in s.get("run", "")], name
    bad = subprocess.run(
        [sys.executable, "-m", "ftmatrix", "plan", "--no-resolve"],
        env={**env, "FTMATRIX_PYTHON": "python3.12"}, capture_output=True, text=True,
        check=False,
    )  # fmt: skip
    assert bad.returncode == ExitCode.SETTINGS
    assert "FTMATRIX_PYTHON='python3.12': a Python version" in bad.stderr


def test_planned_cells_that_produced_nothing_fail_the_night_loudly(tmp_path: Path):
    """Two run jobs failed before uploading: the report once showed the other cells and
    never said four planned cells had no records."""
    out = tmp_path / "reports"
    env = {
        **os.environ,
        "FTMATRIX_MATRIX": str(ROOT / "tests/data/small_matrix.yaml"),
        "FTMATRIX_OUT": str(out),
        "FTMATRIX_RUN_ID": "20261125T021700Z-abcdef",
    }
    env.pop("FTMATRIX_PROFILE", None)
    ftmatrix = [sys.executable, "-m", "ftmatrix"]
    subprocess.run([*ftmatrix, "ci-matrix"], env=env, capture_output=True, check=True)
    planned = json.loads((out / "plan.json").read_text())
    assert planned["run_id"] == "20261125T021700Z-abcdef" and len(planned["cells"]) == 4
    # Last night's records of every cell are in the history: they must not count.
    for index, label in enumerate(planned["cells"]):
        CellRecordFile(CellFiles.of(out, "20261124T021700Z-000000", f"c{index}").records).add(
            make_record(run_id="20261124T021700Z-000000", cell_id=f"c{index}", cell_label=label)
        )
    # Tonight, only the first shard's two cells came back.
    for index, label in enumerate(planned["cells"][:2]):
        CellRecordFile(CellFiles.of(out, planned["run_id"], f"c{index}").records).add(
            make_record(run_id=planned["run_id"], cell_id=f"c{index}", cell_label=label)
        )
    done = subprocess.run(
        [*ftmatrix, "report"], env=env, capture_output=True, text=True, check=False
    )
    lost = planned["cells"][2:]
    assert done.returncode == ExitCode.FAILED, done.stderr
    assert done.stderr == (
        "ftmatrix: 2 planned cell(s) produced no records, so no verdict (see plan.json): "
        + ", ".join(lost) + "\n"
    )  # fmt: skip
    page = (out / "index.html").read_text()
    assert "2 planned cells produced no records tonight" in page
    assert all(f"<li><code>{label}</code></li>" in page for label in lost)
    assert "2 planned cells produced no records tonight" in (out / "summary.md").read_text()
    results = json.loads((out / "results.json").read_text())
    assert results["planned_without_records"] == lost
    assert (out / "site" / "index.html").read_text() == page  # published all the same
    # The workflow fails the night after publishing.
    steps = yaml.safe_load((SOURCE / "ftmatrix.yml").read_text())["jobs"]["report"]["steps"]
    names = [s.get("id") or s.get("name") for s in steps]
    assert names.index("report") < names.index("deploy") < len(names) - 1
    assert steps[-1]["if"] == "steps.report.outcome == 'failure'"
    # What Pages gets: the rendered site alone, never reports/ (records, history.sqlite).
    (pages,) = [s for s in steps if "upload-pages-artifact" in s.get("uses", "")]
    assert pages["with"]["path"] == "reports/site"
    # Every planned cell with a record of tonight: no complaint.
    for index, label in enumerate(lost, start=2):
        CellRecordFile(CellFiles.of(out, planned["run_id"], f"c{index}").records).add(
            make_record(run_id=planned["run_id"], cell_id=f"c{index}", cell_label=label)
        )
    done = subprocess.run(
        [*ftmatrix, "report"], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "planned" not in (out / "summary.md").read_text()
    # A plan left in a folder says nothing of a later run there (a local run after
    # ci-matrix): with a newer run in the history, the plan's cells are not asked for.
    stale = tmp_path / "stale"
    stale.mkdir()
    (stale / "plan.json").write_text((out / "plan.json").read_text())
    os.utime(stale / "plan.json", (1_600_000_000, 1_600_000_000))  # left there before the run
    later = "20261126T021700Z-ffffff"
    CellRecordFile(CellFiles.of(stale, later, "c0").records).add(
        make_record(run_id=later, cell_id="c0", cell_label=planned["cells"][0])
    )
    done = subprocess.run(
        [*ftmatrix, "report"], env={**env, "FTMATRIX_OUT": str(stale)},
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


def test_the_report_job_merges_two_shards_with_the_previous_history(tmp_path: Path):
    out = tmp_path / "reports"
    # Last night's history, as the cache would restore it.
    CellRecordFile(CellFiles.of(tmp_path / "old", "r0", "c1").records).add(
        make_record(run_id="r0", cell_id="c1", cell_label="cpu-a")
    )
    subprocess.run(
        [sys.executable, "-m", "ftmatrix", "report", "--out", str(tmp_path / "old")],
        check=True,
        capture_output=True,
    )
    out.mkdir()
    shutil.copy(tmp_path / "old" / "history.sqlite", out / "history.sqlite")
    # Two shards' artifacts downloaded with merge-multiple into one records folder.
    for cell_id, label in (("c1", "cpu-a"), ("c2", "cpu-b")):
        CellRecordFile(CellFiles.of(out, "r1", cell_id).records).add(
            make_record(run_id="r1", cell_id=cell_id, cell_label=label)
        )
    done = subprocess.run(
        [sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py"), "-s", "report"],
        env={**os.environ, "FTMATRIX_OUT": str(out)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    results = json.loads((out / "results.json").read_text())
    assert results["runs"] == ["r1"]
    assert sorted(r["cell_label"] for r in results["records"]) == ["cpu-a", "cpu-b"]
    assert "cpu-a" in (out / "summary.md").read_text()


def test_the_nightly_is_the_reusable_workflow_called_with_this_checkout():
    reusable = yaml.safe_load((SOURCE / "ftmatrix.yml").read_text())
    inputs = reusable[True]["workflow_call"]["inputs"]
    assert {"ftmatrix", "profile", "python", "runs-on", "select"} <= set(inputs)
    assert reusable["jobs"]["plan"]["runs-on"] == "${{ fromJSON(inputs.runs-on) }}"
    nightly = yaml.safe_load((SOURCE / "nightly.yml").read_text())
    (job,) = nightly["jobs"].values()
    assert job["uses"] == "./.github/workflows/ftmatrix.yml"
    assert job["with"]["ftmatrix"] == "."  # this repository installs its own checkout
    assert set(job["with"]) <= set(inputs)
    # The called jobs deploy to Pages: the caller must grant it.
    assert job["permissions"] == {"contents": "read", "pages": "write", "id-token": "write"}


def test_the_plan_restores_the_history_before_planning_and_hands_on_reused_records():
    """Reuse needs last night's history at plan time; the reused records reach the report."""
    workflow = yaml.safe_load((SOURCE / "ftmatrix.yml").read_text())
    steps = workflow["jobs"]["plan"]["steps"]
    names = [step.get("name", "") for step in steps]
    restore = next(i for i, s in enumerate(steps) if "cache/restore" in s.get("uses", ""))
    plan = next(i for i, s in enumerate(steps) if "ci-matrix" in s.get("run", ""))
    assert restore < plan, names
    assert steps[restore]["with"]["path"] == "reports/history.sqlite"
    upload = next(s for s in steps[plan:] if "upload-artifact" in s.get("uses", ""))
    assert upload["with"]["name"].startswith("records-")  # the report downloads records-*
    report = workflow["jobs"]["report"]["steps"]
    assert any(s.get("with", {}).get("pattern") == "records-*" for s in report)


def test_every_job_installs_ftmatrix_into_a_venv_of_its_own():
    """setup-python's interpreter lives in a self-hosted runner's tool cache, shared by its jobs
    and kept between nights: under act with the real setup-python, two jobs pip-installing
    into it at once broke each other's install (pip's OSError on a file the other removed)."""
    jobs = yaml.safe_load((SOURCE / "ftmatrix.yml").read_text())["jobs"]
    for name, job in jobs.items():
        steps = job["steps"]
        setup = next(i for i, s in enumerate(steps) if "setup-python" in s.get("uses", ""))
        install = next(i for i, s in enumerate(steps) if "INSTALL_FTMATRIX" in s.get("run", ""))
        lines = steps[install]["run"].splitlines()
        assert setup < install, name
        assert lines == [
            'python -m venv --without-pip "$RUNNER_TEMP/ftmatrix"',
            'python -m pip --python "$RUNNER_TEMP/ftmatrix/bin/python" install "$INSTALL_FTMATRIX"',
            'echo "$RUNNER_TEMP/ftmatrix/bin" >> "$GITHUB_PATH"',
        ], name
        later = "\n".join(str(s.get("run", "")) for s in steps[install + 1 :])
        assert "pip install" not in later, name


@pytest.mark.slow
def test_the_release_builds_both_files_and_each_works_installed_under_act(tmp_path: Path):
    """release.yml on a pull request, under act in host mode with the stand-in actions: the
    sdist and the wheel are built, and each, installed in a fresh venv, inits a repository
    and runs its cells (the publish job is for tags only). About 70 s."""
    from test_nightly_act import STANDINS, act_binary, make_repository, make_tool_cache, pins

    repo, store = tmp_path / "repo", tmp_path / "store"
    repo.mkdir()
    store.mkdir()
    make_repository(repo, store / "published")
    make_tool_cache(store)
    workflow = ".github/workflows/release.yml"
    actions = {  # pypa's publish action runs only for a tag: none is needed here
        f"{name}@{sha}": STANDINS / name.removeprefix("actions/")
        for name, sha in pins(repo / workflow)
        if name.startswith("actions/")
    }
    command = [
        act_binary(), "pull_request", "-W", workflow, "-P", "ubuntu-latest=-self-hosted",
        *(x for pin, at in actions.items() for x in ("--local-repository", f"{pin}={at}")),
        *("--action-cache-path", str(store / "act")),
        *("--env", f"AGENT_TOOLSDIRECTORY={store / 'toolcache'}"),
        *("--env", f"STANDIN_ARTIFACTS={store / 'artifacts'}"),
        "--no-cache-server",
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("FTMATRIX_")}
    env.pop("PYTHONPATH", None)
    ran = subprocess.run(
        command, cwd=repo, env=env, capture_output=True, text=True, timeout=900, check=False
    )
    log = ran.stdout + ran.stderr
    assert ran.returncode == 0, log[-6000:]
    for job in ("build", "test-1", "test-2"):
        assert f"[release/{job}] 🏁  Job succeeded" in log, job
    from ftmatrix import __version__

    assert f"Processing ./dist/ftmatrix-{__version__}-py3-none-any.whl" in log
    assert f"Processing ./dist/ftmatrix-{__version__}.tar.gz" in log
    assert log.count("[ftmatrix] 2/2 cells done in ") == 2
