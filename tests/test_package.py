"""The package as a user gets it: built, installed from the wheel, used in another repository.

`python -m build` makes the sdist and, from it, the wheel; the wheel goes into a fresh
venv outside this checkout, and there README's "Use it in your own repository" commands
run as written: `ftmatrix init`, `ftmatrix run` (two real cells, torch from the local
find-links), `nox -s report`. Nothing of this checkout is on any path.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest

import ftmatrix
from ftmatrix import __version__
from ftmatrix.resolve import uv_binary

ROOT = Path(__file__).parent.parent
README = (ROOT / "README.md").read_text()
SECTION = README.split("## Use it in your own repository", 1)[1].split("\n## ", 1)[0]


def readme_commands() -> list[str]:
    """The section's console commands, in order."""
    console = re.search(r"```console\n(.*?)```", SECTION, re.DOTALL)
    assert console, "README's 'Use it in your own repository' must show its commands"
    return [line[2:] for line in console.group(1).splitlines() if line.startswith("$ ")]


def test_the_readme_shows_install_init_run_report_and_the_nightly_init_writes():
    from ftmatrix.init import NIGHTLY, parse_package, scaffold

    commands = readme_commands()
    # Not on PyPI: from git (the wheel stands for it below; the requirement init writes
    # from such an install is tests/test_install_source.py's).
    assert commands[0] == 'pip install "ftmatrix @ git+https://github.com/OWNER/ftmatrix"'
    assert [c.split()[:2] for c in commands[1:]] == [
        ["ftmatrix", "init"],
        ["ftmatrix", "run"],
        ["nox", "-s"],
        ["for", "python"],
    ]
    assert "ftmatrix check --results reports/results.json" in commands[4]
    workflow = re.search(r"```yaml\n(.*?)```", SECTION, re.DOTALL)
    assert workflow, "README must show the nightly that calls the reusable workflow"
    written = scaffold(
        [parse_package("trl")],
        ["import"],
        ftmatrix="ftmatrix @ git+https://github.com/OWNER/ftmatrix@COMMIT",
    )
    assert workflow.group(1) == written[NIGHTLY]


def test_the_version_is_written_once():
    assert 'dynamic = ["version"]' in (ROOT / "pyproject.toml").read_text()
    assert re.fullmatch(r"\d+\.\d+\.\d+", __version__)


def user_env() -> dict[str, str]:
    """A user's environment: none of ftmatrix's or nox's settings, no venv active."""
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("FTMATRIX_", "NOX_")) and k not in ("PYTHONPATH", "VIRTUAL_ENV")
    }


def run_ok(
    command: list[str], cwd: Path, env: dict[str, str], timeout: int = 600
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, (command, done.stdout[-4000:], done.stderr[-4000:])
    return done


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The release's two files, the wheel built from the sdist: (wheel, sdist)."""
    folder = tmp_path_factory.mktemp("dist")
    run_ok(
        [sys.executable, "-m", "build", "--installer", "uv", "--outdir", str(folder), str(ROOT)],
        ROOT,
        user_env(),
    )
    (wheel,) = folder.glob("*.whl")
    (sdist,) = folder.glob("*.tar.gz")
    return wheel, sdist


def install_wheel(wheel: Path, venv: Path, env: dict[str, str]) -> None:
    """`pip install` of the release: the wheel, into a fresh venv outside this checkout; its
    bin/ first on ``env``'s PATH."""
    uv = uv_binary()
    run_ok([uv, "venv", "--python", sys.executable, str(venv)], venv.parent, env)
    run_ok(
        [uv, "pip", "install", "--python", str(venv / "bin" / "python"), str(wheel)],
        venv.parent,
        env,
    )
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env['PATH']}"
    env["VIRTUAL_ENV"] = str(venv)


@pytest.mark.slow
def test_the_wheel_installs_and_runs_the_readme_in_another_repository(
    tmp_path: Path, dist: tuple[Path, Path]
):
    env = user_env()

    def run(command: list[str], cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess[str]:
        return run_ok(command, cwd, env, timeout)

    wheel, sdist = dist
    assert wheel.name == f"ftmatrix-{__version__}-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as opened:
        inside = set(opened.namelist())
    for asset in (ROOT / "src" / "ftmatrix" / "report" / "assets").iterdir():
        assert f"ftmatrix/report/assets/{asset.name}" in inside
    # init's templates: one copy each in git, forced into the wheel (pyproject.toml)
    forced = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["hatch"]["build"]
    assert set(forced["targets"]["wheel"]["force-include"].values()) <= inside
    assert "ftmatrix/templates/cases/test_import.py" in inside
    with tarfile.open(sdist) as opened:
        assert f"ftmatrix-{__version__}/src/ftmatrix/cell/plugin.py" in opened.getnames()

    # README's install: the wheel, into a fresh venv outside this checkout.
    venv = tmp_path / "venv"
    install_wheel(wheel, venv, env)

    repo = tmp_path / "repo"
    repo.mkdir()
    commands = readme_commands()[1:]
    run(shlex.split(commands[0]), repo)  # ftmatrix init ...
    assert (repo / "noxfile.py").is_file() and (repo / ".github/workflows/ftmatrix.yml").is_file()
    # A case beside the examples: a cell sees the plugin, never ftmatrix's own environment.
    (repo / "cases" / "test_isolated.py").write_text(
        "import importlib.util\n\n\n"
        "def test_the_tools_environment_does_not_leak_into_the_cell():\n"
        "    import ftmatrix.cell.plugin  # noqa: F401 (the plugin is there)\n\n"
        "    leaked = [m for m in ('nox', 'uv', 'ftmatrix.cli') if importlib.util.find_spec(m)]\n"
        "    assert leaked == []\n"
    )
    ran = run(shlex.split(commands[1]), repo, timeout=900)  # ftmatrix run
    assert "2 cells selected" in ran.stdout, ran.stdout[-2000:]
    (repo / "reports" / "index.html").unlink()
    run(shlex.split(commands[2]), repo)  # nox -s report

    reports = repo / "reports"
    assert (reports / "index.html").is_file() and (reports / "summary.md").is_file()
    results = json.loads((reports / "results.json").read_text())
    records = results["records"]
    assert len({r["cell_id"] for r in records}) == 2
    statuses = {(r["cell_label"], r["case"]): r["status"] for r in records}
    assert any("test_lora.py::" in case for _, case in statuses), statuses
    assert set(statuses.values()) == {"pass"}, {k: v for k, v in statuses.items() if v != "pass"}
    assert all(
        (label, "test_isolated.py::test_the_tools_environment_does_not_leak_into_the_cell")
        in statuses
        for label in {r["cell_label"] for r in records}
    )
    # The venvs and every output stayed in the repository, none in the installed package.
    assert (repo / ".nox").is_dir()
    assert not list((venv / "lib").rglob("site-packages/ftmatrix/.nox"))

    # `ftmatrix check`, as written (a shell's globs and pipe): each cell's own venv, by its
    # interpreter and by its freeze, passes lora; nothing else was written for it.
    assert not (repo / "requirements.txt").exists()
    checked = run(["bash", "-c", commands[3]], repo)
    assert checked.stdout.count("lora on cpu: pass: ") == 2, checked.stdout
    assert checked.stdout.count("(your versions)") == 2, checked.stdout
    # The freeze piped in, as the text shows it, a cell's venv standing for ~/venvs/train.
    piped = re.search(r"\(`(uv pip freeze --python ~/venvs/train/bin/python \| [^`]+)`\)", SECTION)
    assert piped, "README shows a freeze piped into check"
    cell_python = next((repo / ".nox").glob("*/bin/python"))
    pipe = piped.group(1).replace("~/venvs/train/bin/python", shlex.quote(str(cell_python)))
    checked = run(["bash", "-c", f"{pipe} --operation lora"], repo)
    assert "lora on cpu: pass: " in checked.stdout, checked.stdout
    # The first try of a new user, the environment holding ftmatrix: refused, with what to run.
    refused = subprocess.run(
        ["ftmatrix", "check", "--results", "reports/results.json"],
        cwd=repo, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "It looks like the environment ftmatrix runs in, not a training stack." in refused.stderr
    assert "--python .nox/CELL/bin/python" in refused.stderr


def test_run_uses_the_folders_noxfile_only_where_it_imports_the_sessions(tmp_path: Path):
    from ftmatrix.pipeline import _noxfile

    packaged = Path(ftmatrix.__file__).parent / "_noxfile.py"
    assert _noxfile(tmp_path) == packaged
    (tmp_path / "noxfile.py").write_text("import nox\n")  # a repository's own, for other chores
    assert _noxfile(tmp_path) == packaged
    (tmp_path / "noxfile.py").write_text("from ftmatrix.sessions import *  # noqa: F403\n")
    assert _noxfile(tmp_path) == tmp_path / "noxfile.py"


@pytest.mark.slow
def test_run_in_a_folder_without_a_noxfile_keeps_everything_in_that_folder(tmp_path: Path):
    """The package's own noxfile runs the folder's matrix; records, report and venvs stay there."""
    shutil.copy(ROOT / "tests" / "data" / "small_matrix.yaml", tmp_path / "matrix.yaml")
    shutil.copytree(ROOT / "tests" / "data" / "small_cases", tmp_path / "cases")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FTMATRIX_")}
    ran = subprocess.run(
        [sys.executable, "-m", "ftmatrix", "run", "--select", "*six1.17.0-attrs25*"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    (records,) = (tmp_path / "reports" / "records").rglob("*.jsonl")
    statuses = {json.loads(line)["status"] for line in records.read_text().splitlines()}
    assert "pass" in statuses
    assert (tmp_path / "reports" / "index.html").is_file()
    # nox names the cell's venv by a hash of the session: one venv, in the folder's .nox/.
    venvs = [p for p in (tmp_path / ".nox").iterdir() if (p / "pyvenv.cfg").is_file()]
    assert len(venvs) == 1, sorted((tmp_path / ".nox").iterdir())
    assert not (Path(ftmatrix.__file__).parent / ".nox").exists()


@pytest.mark.slow
def test_the_nightly_init_writes_installs_ftmatrix_under_act(
    tmp_path: Path, dist: tuple[Path, Path]
):
    """A fresh repository's first night, as `ftmatrix init` writes it, under act (host mode,
    the stand-in actions of tests/test_nightly_act.py): its jobs install ftmatrix by the
    requirement init took from this install (the wheel's path), which no index holds, and
    the night publishes the report. It once wrote `ftmatrix==0.1.0`, which PyPI never had:
    every job's install failed."""
    from test_nightly_act import PLANNED, Nightly, make_tool_cache, standin_actions

    env = user_env()
    wheel, _ = dist
    install_wheel(wheel, tmp_path / "venv", env)
    repo, store = tmp_path / "repo", tmp_path / "github"
    repo.mkdir()
    init = run_ok(["ftmatrix", "init", "six=1.17.0", "--operation", "import"], repo, env)
    requirement = f"ftmatrix @ {wheel.as_uri()}"
    assert f"the nightly installs ftmatrix as {requirement!r}" in init.stdout, init.stdout
    assert "only a runner that has it there (a self-hosted one)" in init.stdout
    nightly = repo / ".github" / "workflows" / "ftmatrix-nightly.yml"
    text = nightly.read_text()
    assert f'ftmatrix: "{requirement}"' in text
    # The runner's tool cache holds this interpreter's version (init plans 3.11), and Pages
    # is a folder here: offline, the default (https://OWNER.github.io/REPO) cannot resolve.
    text = text.replace('python: "3.11"', f'python: "{PLANNED}"')
    nightly.write_text(text + f"      published-url: {store / 'published'}\n")
    git = ["git", "-c", "user.email=ftmatrix@example.com", "-c", "user.name=ftmatrix"]
    for command in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "ftmatrix init"]):
        run_ok([*git, *command], repo, env)
    make_tool_cache(store)
    services = [
        *("--env", f"STANDIN_ARTIFACTS={store / 'artifacts'}"),
        *("--env", f"STANDIN_CACHES={store / 'caches'}"),
        *("--env", f"STANDIN_PUBLISHED={store / 'published'}"),
        "--no-cache-server",
    ]
    night = Nightly(
        repo=repo,
        store=store,
        actions=standin_actions(repo / ".github" / "workflows" / "ftmatrix.yml"),
        services=services,
        caller=".github/workflows/ftmatrix-nightly.yml",
    )
    log = night.night(1)
    assert "Success - Main Install ftmatrix" in log, log[-4000:]
    assert "Failure - Main Install ftmatrix" not in log
    records = night.published_records()
    assert [(r["cell_label"], r["status"]) for r in records] == [
        (f"cpu-py{PLANNED}-six1.17.0", "pass")
    ]
