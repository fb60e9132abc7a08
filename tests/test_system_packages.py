"""install.system-packages: a cell on the host's own torch, without installing it again.

Fast tier: the key's validation, the choice of host distributions, the checks made before
the resolver, and a real probe of this interpreter. Slow tier: a base interpreter with
the local CPU torch (PIP_FIND_LINKS) runs a real cell of tests/data/host_matrix.yaml.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from ftmatrix.cell.status import Status
from ftmatrix.config import ConfigError, InstallOptions, parse_matrix
from ftmatrix.plan import Cell
from ftmatrix.resolve import locked_requirements, resolve_cell, run_uv, uv_binary
from ftmatrix.system_packages import (
    Host,
    HostDistribution,
    choose,
    probe_host,
    venv_interpreter,
)

ROOT = Path(__file__).parent.parent
DATA = Path(__file__).parent / "data"


def matrix(install: str) -> str:
    return f"packages:\n  six: ['1.17.0']\ninstall: {install}\n"


def test_system_packages_accepts_true_false_and_names() -> None:
    def chosen(install: str) -> tuple[str, ...]:
        parsed = parse_matrix(matrix(install), source="m.yaml", default_python="3.11")
        return parsed.install.system_packages

    assert chosen("{system-packages: true}") == ("*",)
    assert chosen("{system-packages: false}") == ()
    assert chosen("{}") == ()
    assert chosen("{system-packages: [torch, triton, 'nvidia-*']}") == (
        "torch",
        "triton",
        "nvidia-*",
    )


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (
            "yes please",
            "m.yaml: install.system-packages: must be true, false or a list of distribution "
            "names such as [torch, triton, 'nvidia-*'], got 'yes please'",
        ),
        (
            "[]",
            "m.yaml: install.system-packages: must be true, false or a list of distribution "
            "names such as [torch, triton, 'nvidia-*'], got []",
        ),
        (
            "[torch, 3, 'to rch']",
            "m.yaml: install.system-packages[1]: 3 is not a distribution name or glob like "
            "'nvidia-*'",
        ),
    ],
)
def test_a_bad_value_names_the_key_path(value: str, problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_matrix(
            matrix(f"{{system-packages: {value}}}"), source="m.yaml", default_python="3.11"
        )
    assert caught.value.problems[0] == problem


def host(*dists: tuple[str, str], version: str = "3.11") -> Host:
    return Host(
        python="/opt/torch/.venv/bin/python",
        version=version,
        site_dirs=("/opt/torch/.venv/lib/python3.11/site-packages",),
        distributions=tuple(
            HostDistribution(
                name=n, version=v, metadata=f"Metadata-Version: 2.1\nName: {n}\nVersion: {v}\n"
            )
            for n, v in dists
        ),
    )


HOST = host(
    ("torch", "2.13.0+cpu"),
    ("triton", "3.5.0"),
    ("nvidia-cublas-cu12", "12.8.4.1"),
    ("nvidia_cudnn_cu12", "9.10.2.21"),
    ("transformers", "5.17.0"),
)


def cell(**pins: str | None) -> Cell:
    return Cell(python="3.11", pins=tuple(pins.items()), hardware="cpu")


def test_names_and_globs_choose_the_hosts_distributions() -> None:
    stack = choose(HOST, ["Torch", "nvidia-*", "triton", "vllm"])
    assert stack.versions() == {
        "torch": "2.13.0+cpu",
        "triton": "3.5.0",
        "nvidia-cublas-cu12": "12.8.4.1",
        "nvidia_cudnn_cu12": "9.10.2.21",
    }
    assert stack.missing == ("vllm",)
    assert choose(HOST, ["*"]).versions()["transformers"] == "5.17.0"


def test_a_pin_the_host_does_not_have_is_uninstallable_naming_the_hosts_version() -> None:
    stack = choose(HOST, ["torch"])
    assert stack.refusal(cell(torch="2.13.0", trl="0.19.1")) is None
    assert stack.refusal(cell(torch="2.14.1")) == (
        Status.UNINSTALLABLE,
        "torch==2.14.1 is pinned, but install.system-packages takes torch from the host "
        "(/opt/torch/.venv/bin/python), which has 2.13.0+cpu",
    )
    assert stack.refusal(cell(torch=None)) == (
        Status.UNINSTALLABLE,
        "torch: none is pinned, but install.system-packages takes torch from the host "
        "(/opt/torch/.venv/bin/python), which has 2.13.0+cpu",
    )
    # transformers is the host's too, but not taken from it: the cell installs its own.
    assert stack.refusal(cell(transformers="4.49.0")) is None


def test_a_host_of_another_python_or_without_a_named_package_is_refused() -> None:
    assert choose(host(("torch", "2.13.0"), version="3.12"), ["torch"]).refusal(cell()) == (
        Status.UNINSTALLABLE,
        "install.system-packages: the cell's Python 3.11 is not the host "
        "(/opt/torch/.venv/bin/python)'s Python 3.12",
    )
    assert choose(HOST, ["vllm"]).refusal(cell()) == (
        Status.INSTALL_ERROR,
        "install.system-packages names 'vllm'; the host (/opt/torch/.venv/bin/python) has "
        "no such distribution",
    )


def test_the_install_leaves_out_what_the_host_provides() -> None:
    lock = (
        "filelock==3.20.0\n    # via torch\ntorch==2.13.0+cpu\n    # via -r -\n"
        "Triton==3.5.0\nsix==1.17.0\ntransformers==4.49.0\nnvidia-cudnn-cu12==9.10.2.21\n"
        "nvidia-cublas-cu12==12.8.4.01\n"  # the host's, as uv may spell a version
    )
    stack = choose(HOST, ["torch", "triton"])
    stripped = stack.strip(lock)
    # The host's transformers is 5.17.0: the cell installs its own 4.49.0 over it.
    assert locked_requirements(stripped) == [
        "filelock==3.20.0",
        "six==1.17.0",
        "transformers==4.49.0",
    ]
    visible = stack.visible(locked_requirements(stripped))
    assert visible["torch"] == "2.13.0+cpu"
    assert "nvidia-cublas-cu12" in visible  # on sys.path through the .pth: the host's too
    assert "six" not in visible
    assert "transformers" not in visible  # its own copy shadows the host's


def test_stubs_and_constraints_resolve_against_the_hosts_version(tmp_path: Path) -> None:
    stack = choose(HOST, ["torch"])
    args = stack.resolver_args(tmp_path)
    constraints = Path(args[args.index("--constraint") + 1])
    stubs = Path(args[args.index("--find-links") + 1])
    assert constraints.read_text() == "torch==2.13.0+cpu\n"
    # Every host distribution has a stub: the fixed ones and those only preferred.
    assert len(list(stubs.iterdir())) == len(HOST.distributions)
    wheel = stubs / "torch-2.13.0+cpu-py3-none-any.whl"
    assert "torch-2.13.0+cpu.dist-info/METADATA" in zipfile.ZipFile(wheel).namelist()
    # uv itself resolves the stubs, offline, to the host's exact versions.
    done = subprocess.run(
        [uv_binary(), "pip", "compile", "-", "--no-index", "--no-header", "-q", *args],
        input="torch\ntransformers\n",
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "UV_CACHE_DIR": str(tmp_path / "uv")},
    )
    assert done.returncode == 0, done.stderr
    assert locked_requirements(done.stdout) == ["torch==2.13.0+cpu", "transformers==5.17.0"]
    assert stack.resolver_args(tmp_path) == args  # the same host: the same paths


def test_the_users_uv_constraint_still_applies_beside_the_hosts(tmp_path: Path) -> None:
    # uv drops UV_CONSTRAINT when --constraint is given; the host's constraint is one.
    args = choose(HOST, ["torch"]).resolver_args(tmp_path)
    mine = tmp_path / "mine.txt"
    mine.write_text("transformers<5\n")
    env = {**os.environ, "UV_CACHE_DIR": str(tmp_path / "uv"), "UV_CONSTRAINT": str(mine)}
    done = run_uv(
        ["pip", "compile", "-", "--no-index", "--no-header", "-q", *args], env, "transformers\n"
    )
    assert done.returncode != 0
    assert "transformers<5" in done.stderr


def test_the_probe_reads_this_interpreter() -> None:
    found = probe_host(sys.executable)
    assert found.version == f"{sys.version_info.major}.{sys.version_info.minor}"
    versions = {d.name.lower(): d.version for d in found.distributions}
    assert versions["pytest"] == pytest.__version__
    assert any(Path(d).is_dir() for d in found.site_dirs)


def test_a_host_python_that_does_not_run_is_an_install_error(tmp_path: Path) -> None:
    env = {**os.environ, "FTMATRIX_HOST_PYTHON": str(tmp_path / "nopython")}
    install = InstallOptions(system_packages=("torch",))
    answer = resolve_cell(cell(six="1.17.0"), install, env)
    assert answer.status is Status.INSTALL_ERROR
    assert answer.reason is not None
    assert answer.reason.startswith(
        f"install.system-packages: cannot run the host python '{tmp_path / 'nopython'}'"
    )
    assert venv_interpreter(install, env, "3.11") == str(tmp_path / "nopython")
    assert venv_interpreter(InstallOptions(), env, "3.11") == "3.11"


def find_links() -> list[str]:
    links = os.environ.get("PIP_FIND_LINKS", "").split()
    if not any(Path(d).glob("torch-2.13.0+cpu-*.whl") for d in links):
        pytest.skip("needs the local CPU torch 2.13.0 wheel in PIP_FIND_LINKS")
    return links


def make_host(tmp_path: Path) -> tuple[Path, str]:
    """A base interpreter with the CPU torch and what ftmatrix needs: the host."""
    links = find_links()
    base = tmp_path / "base"
    uv = uv_binary()
    subprocess.run([uv, "venv", "-q", "-p", sys.executable, str(base)], check=True)
    base_python = base / "bin" / "python"
    flags = [f"--find-links={d}" for d in links]
    subprocess.run(
        [uv, "pip", "install", "-q", "--python", str(base_python), *flags]
        + ["torch==2.13.0+cpu", "nox", "uv", "packaging", "pyyaml"],
        check=True,
    )
    host_site = subprocess.run(
        [str(base_python), "-c", "import sysconfig;print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    return base_python, host_site


def run_matrix(base_python: Path, env: dict[str, str], tmp_path: Path) -> None:
    done = subprocess.run(
        [str(base_python), "-m", "nox", "-f", str(ROOT / "noxfile.py")]
        + ["--envdir", str(tmp_path / "envs"), "-s", "matrix"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def read_records(out: Path) -> dict[tuple[str, str], dict[str, Any]]:
    found = {}
    for path in (out / "records").rglob("*.jsonl"):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            found[(record["pins"]["torch"], record["case"].split("::")[-1])] = record
    return found


@pytest.mark.slow
def test_a_cell_runs_on_the_hosts_torch_without_installing_it(tmp_path: Path) -> None:
    base_python, host_site = make_host(tmp_path)
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT / "src"),
        "FTMATRIX_MATRIX": str(DATA / "host_matrix.yaml"),
        "FTMATRIX_CASES": str(DATA / "host_cases"),
        "FTMATRIX_OUT": str(tmp_path / "out"),
        "FTMATRIX_RUN_ID": "20261123T180000Z",
        "FTMATRIX_CACHE_DIR": str(tmp_path / "resolve"),
        "FTMATRIX_TEST_HOST_SITE": host_site,
    }
    env.pop("FTMATRIX_HOST_PYTHON", None)  # the host is the interpreter running nox
    run_matrix(base_python, env, tmp_path)
    found = read_records(tmp_path / "out")
    ran = {case: r for (torch, case), r in found.items() if torch == "2.13.0"}
    assert {case: r["status"] for case, r in ran.items()} == {
        "test_torch_is_the_hosts": "pass",
        "test_cpu_training_step": "pass",
        "test_six_is_the_cells": "pass",
    }
    record = ran["test_torch_is_the_hosts"]
    assert record["packages"]["torch"] == "2.13.0+cpu"
    assert record["host_packages"]["torch"] == "2.13.0+cpu"
    assert "six" not in record["host_packages"]
    # torch's own requirements are preferred at the host's versions: not installed either.
    assert record["host_packages"]["sympy"] == record["packages"]["sympy"]
    # torch is in the cell's lock (resolved against the host) but not in its venv.
    # The venv that got the .pth naming the host's site folder (nox names it by a hash).
    (pth,) = (tmp_path / "envs").glob("*/lib/python*/site-packages/_ftmatrix_host_site.pth")
    assert pth.read_text().splitlines() == [host_site]
    site = pth.parent
    assert not list(site.glob("torch*")), "torch was installed into the cell's venv"
    assert not list(site.glob("sympy*")), "the host's sympy was installed again"
    assert (site / "six.py").exists()
    (lock,) = (tmp_path / "out" / "records").rglob("*.lock.txt")
    assert "torch==2.13.0+cpu" in locked_requirements(lock.read_text())
    refused = found[("2.14.1", "*")]
    assert refused["status"] == "uninstallable"
    assert refused["reason"] == (
        "torch==2.14.1 is pinned, but install.system-packages takes torch from the host "
        f"({base_python}), which has 2.13.0+cpu"
    )


@pytest.mark.slow
def test_an_offline_host_runs_from_a_wheelhouse_and_its_own_torch(tmp_path: Path) -> None:
    """The GPU host's recipe on CPU: its snapshot, a wheelhouse made with it, then its run
    with no index, uv offline and an empty uv cache."""
    base_python, host_site = make_host(tmp_path)
    source = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    snapshot = tmp_path / "host.json"
    snapshot.write_text(
        subprocess.run(
            [str(base_python), "-m", "ftmatrix.system_packages"],
            capture_output=True,
            text=True,
            check=True,
            env=source,
        ).stdout
    )
    house = tmp_path / "wheels"
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    matrix = tmp_path / "m.yaml"
    matrix.write_text(
        "packages:\n  torch: ['2.13.0']\n  six: ['1.17.0']\n"
        f"install: {{system-packages: [torch], find-links: [{house}]}}\n"
    )
    made = subprocess.run(
        [sys.executable, "-m", "ftmatrix", "wheelhouse", "--python", python]
        + ["--platform", "manylinux_2_28_x86_64", "--host-packages", str(snapshot), str(house)],
        capture_output=True,
        text=True,
        check=False,
        env={**source, "FTMATRIX_MATRIX": str(matrix)},
    )
    assert made.returncode == 0, made.stderr
    assert not list(house.glob("torch-*")) and not list(house.glob("sympy-*"))
    assert (house / "six-1.17.0-py2.py3-none-any.whl").exists()

    env = {k: v for k, v in source.items() if not k.startswith(("PIP_", "UV_"))}
    env.update(
        UV_OFFLINE="1",
        UV_CACHE_DIR=str(tmp_path / "empty-uv-cache"),
        FTMATRIX_MATRIX=str(matrix),
        FTMATRIX_CASES=str(DATA / "host_cases"),
        FTMATRIX_OUT=str(tmp_path / "out"),
        FTMATRIX_RUN_ID="20261123T183000Z",
        FTMATRIX_CACHE_DIR=str(tmp_path / "resolve"),
        FTMATRIX_TEST_HOST_SITE=host_site,
    )
    run_matrix(base_python, env, tmp_path)
    found = read_records(tmp_path / "out")
    assert {case: r["status"] for (_, case), r in found.items()} == {
        "test_torch_is_the_hosts": "pass",
        "test_cpu_training_step": "pass",
        "test_six_is_the_cells": "pass",
    }
