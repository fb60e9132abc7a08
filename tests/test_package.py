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
    assert commands[0] == "pip install ftmatrix"
    assert [c.split()[:2] for c in commands[1:]] == [
        ["ftmatrix", "init"],
        ["ftmatrix", "run"],
        ["nox", "-s"],
        ["ftmatrix", "check"],
    ]
    workflow = re.search(r"```yaml\n(.*?)```", SECTION, re.DOTALL)
    assert workflow, "README must show the nightly that calls the reusable workflow"
    assert workflow.group(1) == scaffold([parse_package("trl")], ["import"])[NIGHTLY]


def test_the_version_is_written_once():
    assert 'dynamic = ["version"]' in (ROOT / "pyproject.toml").read_text()
    assert re.fullmatch(r"\d+\.\d+\.\d+", __version__)


@pytest.mark.slow
def test_the_wheel_installs_and_runs_the_readme_in_another_repository(tmp_path: Path):
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("FTMATRIX_", "NOX_")) and k not in ("PYTHONPATH", "VIRTUAL_ENV")
    }

    def run(command: list[str], cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
        )
        assert done.returncode == 0, (command, done.stdout[-4000:], done.stderr[-4000:])
        return done

    # The release's two files, the wheel built from the sdist.
    dist = tmp_path / "dist"
    run(
        [sys.executable, "-m", "build", "--installer", "uv", "--outdir", str(dist), str(ROOT)], ROOT
    )
    (wheel,) = dist.glob("*.whl")
    (sdist,) = dist.glob("*.tar.gz")
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

    # `pip install ftmatrix`: the wheel, into a fresh venv outside this checkout.
    venv = tmp_path / "venv"
    uv = uv_binary()
    run([uv, "venv", "--python", sys.executable, str(venv)], tmp_path)
    run([uv, "pip", "install", "--python", str(venv / "bin" / "python"), str(wheel)], tmp_path)
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env['PATH']}"
    env["VIRTUAL_ENV"] = str(venv)

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

    # `ftmatrix check`: a stack pinned as one of the cells (its venv's own freeze) passes lora.
    cell_python = next((repo / ".nox").glob("*/bin/python"))
    freeze = run([uv, "pip", "freeze", "--python", str(cell_python)], repo).stdout
    (repo / "requirements.txt").write_text(freeze)
    checked = run(shlex.split(commands[3]), repo)  # ftmatrix check ...
    assert "lora on cpu: pass: " in checked.stdout, checked.stdout
    assert "(your versions)" in checked.stdout, checked.stdout


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
