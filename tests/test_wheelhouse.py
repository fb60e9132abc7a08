"""ftmatrix wheelhouse: the wheels an offline runner needs, and that runner's real run.

Fast tier: platform tags, the host's freeze, and bad input (one line, an exit code, no
traceback). Slow tier: a real wheelhouse of tests/data/small_matrix.yaml, then a cell run
from it with no index, uv offline and an empty uv cache.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ftmatrix.system_packages import choose
from ftmatrix.wheelhouse import (
    Target,
    WheelhouseError,
    platform_tags,
    read_host_freeze,
    read_host_packages,
    target_host,
    uv_platform,
)

ROOT = Path(__file__).parent.parent
DATA = Path(__file__).parent / "data"
SMALL = DATA / "small_matrix.yaml"


def ftmatrix(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ftmatrix", *args],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src"), **(env or {})},
        timeout=600,
    )


@pytest.mark.parametrize(
    ("tag", "uv"),
    [
        ("manylinux_2_28_x86_64", "x86_64-manylinux_2_28"),
        ("manylinux2014_aarch64", "aarch64-manylinux2014"),
        ("musllinux_1_2_x86_64", "x86_64-unknown-linux-musl"),
        ("macosx_14_0_arm64", "aarch64-apple-darwin"),
        ("win_amd64", "x86_64-pc-windows-msvc"),
    ],
)
def test_platform_tags_map_to_uvs_platforms(tag: str, uv: str) -> None:
    assert uv_platform(tag) == uv


def test_a_manylinux_host_takes_older_manylinux_wheels_too() -> None:
    tags = platform_tags("manylinux_2_28_x86_64")
    assert tags[0] == "manylinux_2_28_x86_64"
    assert "manylinux2014_x86_64" in tags
    assert tags.index("manylinux_2_17_x86_64") < tags.index("manylinux_2_5_x86_64")
    best = Target(python="3.12", platform="manylinux_2_28_x86_64").tags()
    assert str(best[0]) == "cp312-cp312-manylinux_2_28_x86_64"
    assert str(best[-1]) == "py30-none-any"


def test_the_hosts_freeze_pins_what_system_packages_takes(tmp_path: Path) -> None:
    freeze = tmp_path / "host.txt"
    freeze.write_text("torch==2.11.0+cu130\ntransformers==5.17.0\nnvidia-nccl-cu13==2.28.3\n")
    target = Target(python="3.12", platform="manylinux_2_28_x86_64")
    host = target_host(read_host_freeze(freeze), str(freeze), target)
    stack = choose(host, ["torch", "nvidia-*"])
    assert stack.versions() == {"torch": "2.11.0+cu130", "nvidia-nccl-cu13": "2.28.3"}
    freeze.write_text("torch==2.11.0\n-e git+https://example.org/x#egg=x\n")
    with pytest.raises(
        WheelhouseError, match=r"host.txt:2: '-e git\+https.*' is not name==version"
    ):
        read_host_freeze(freeze)


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (
            ["--platform", "linux_potato"],
            6,
            "ftmatrix: --platform 'linux_potato': not a platform this command knows; use a "
            "wheel platform tag such as manylinux_2_28_x86_64, manylinux2014_aarch64, "
            "musllinux_1_2_x86_64, macosx_14_0_arm64, win_amd64",
        ),
        (
            ["--python", "three"],
            2,
            "ftmatrix: --python 'three': expected a version such as 3.12",
        ),
    ],
)
def test_bad_arguments_are_one_line_and_an_exit_code(
    tmp_path: Path, args: list[str], code: int, message: str
) -> None:
    given = {"--python": "3.12", "--platform": "manylinux_2_28_x86_64"}
    given.update(zip(args[::2], args[1::2], strict=True))
    done = ftmatrix(
        "wheelhouse",
        *[x for pair in given.items() for x in pair],
        str(tmp_path / "wh"),
        env={"FTMATRIX_MATRIX": str(SMALL)},
    )
    assert (done.returncode, done.stderr) == (code, message + "\n")
    assert not (tmp_path / "wh").exists()


def test_a_folder_that_cannot_be_written_is_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    done = ftmatrix(
        "wheelhouse",
        "--python",
        "3.12",
        "--platform",
        "manylinux_2_28_x86_64",
        str(blocker / "wh"),
        env={"FTMATRIX_MATRIX": str(SMALL)},
    )
    assert done.returncode == 6
    assert done.stderr == f"ftmatrix: {blocker / 'wh'}: not a writable folder: Not a directory\n"


def test_system_packages_without_the_hosts_freeze_is_one_line(tmp_path: Path) -> None:
    done = ftmatrix(
        "wheelhouse",
        "--python",
        "3.11",
        "--platform",
        "manylinux_2_28_x86_64",
        str(tmp_path / "wh"),
        env={"FTMATRIX_MATRIX": str(DATA / "host_matrix.yaml")},
    )
    assert done.returncode == 6
    assert done.stderr == (
        "ftmatrix: install.system-packages takes packages from the host: pass "
        "--host-packages FILE, the output of `python -m pip list --format=freeze` on that host\n"
    )


@pytest.mark.slow
def test_a_cell_that_has_no_wheel_for_the_platform_is_one_line(tmp_path: Path) -> None:
    # torch publishes no musllinux wheels: it resolves for this machine, not for that one.
    matrix = tmp_path / "m.yaml"
    matrix.write_text("packages:\n  torch: ['2.13.0']\n")
    done = ftmatrix(
        "wheelhouse",
        "--python",
        "3.11",
        "--platform",
        "musllinux_1_2_x86_64",
        str(tmp_path / "wh"),
        env={"FTMATRIX_MATRIX": str(matrix)},
    )
    assert done.returncode == 6, done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith(
        "ftmatrix: cell cpu-py3.11-torch2.13.0 does not resolve for Python 3.11 on musllinux_1_2_x86_64: "
    )
    assert "Traceback" not in done.stdout + done.stderr


@pytest.mark.slow
def test_an_offline_runner_runs_a_cell_from_the_wheelhouse(tmp_path: Path) -> None:
    house = tmp_path / "wheels"
    select = {"FTMATRIX_MATRIX": str(SMALL), "FTMATRIX_SELECT": "*six1.17.0-attrs25.3.0"}
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    made = ftmatrix(
        "wheelhouse", "--python", python, "--platform", "manylinux_2_28_x86_64", str(house),
        env=select,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    lines = made.stdout.splitlines()
    assert (
        lines[0] == f"1 cells selected; resolving each for Python {python} on manylinux_2_28_x86_64"
    )
    assert lines[1].startswith(f"[1/1] cpu-py{python}-six1.17.0-attrs25.3.0: 7 wheels, ")
    assert lines[-1].startswith(f"wheelhouse {house}: 7 wheels, ")
    manifest = json.loads((house / "ftmatrix-wheelhouse.json").read_text())
    names = sorted(w["file"] for w in manifest["wheels"])
    assert "six-1.17.0-py2.py3-none-any.whl" in names
    assert any(n.startswith("pytest-") for n in names)
    assert sorted(p.name for p in house.glob("*.whl")) == names

    # The runner: no index, uv offline, an empty uv cache, the wheelhouse as find-links.
    matrix = tmp_path / "offline.yaml"
    matrix.write_text(SMALL.read_text() + f"install: {{find-links: [{house}]}}\n")
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("PIP_", "UV_INDEX", "UV_FIND_LINKS", "UV_DEFAULT_INDEX"))
    }
    env.update(
        PYTHONPATH=str(ROOT / "src"),
        UV_OFFLINE="1",
        UV_CACHE_DIR=str(tmp_path / "uv-cache"),
        FTMATRIX_CACHE_DIR=str(tmp_path / "resolve"),
        FTMATRIX_MATRIX=str(matrix),
        FTMATRIX_SELECT=select["FTMATRIX_SELECT"],
        FTMATRIX_CASES=str(DATA / "small_cases"),
        FTMATRIX_OUT=str(tmp_path / "out"),
        FTMATRIX_RUN_ID="20261123T190000Z",
    )
    ran = subprocess.run(
        [sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py")]
        + ["--envdir", str(tmp_path / "envs"), "-s", "matrix"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    (records,) = (tmp_path / "out" / "records").rglob("*.jsonl")
    statuses = {
        json.loads(line)["case"].split("::")[-1]: json.loads(line)["status"]
        for line in records.read_text().splitlines()
    }
    assert statuses == {
        "test_six_imports": "pass",
        "test_attrs_feature_gated": "pass",
        "test_needs_two_gpus": "skip",
        "test_framework_result_is_checked": "pass",
        "test_framework_raises": "fail",
        "test_case_bug": "error",
    }


@pytest.mark.slow
def test_what_the_host_provides_is_pinned_to_its_version_and_not_downloaded(
    tmp_path: Path,
) -> None:
    freeze = tmp_path / "host-pip-freeze.txt"
    freeze.write_text(
        "torch==2.13.0+cpu\nsympy==1.14.0\nsix==1.16.0\npytest==8.3.5\npluggy==1.5.0\n"
        "iniconfig==2.0.0\npackaging==24.2\n"
    )
    matrix = tmp_path / "m.yaml"
    matrix.write_text(
        "packages:\n  torch: ['2.13.0', '2.14.1']\n  six: ['1.17.0']\n"
        "install: {system-packages: [torch]}\n"
    )
    house = tmp_path / "wheels"
    made = ftmatrix(
        "wheelhouse", "--python", "3.11", "--platform", "manylinux_2_28_x86_64",
        "--host-packages", str(freeze), str(house), env={"FTMATRIX_MATRIX": str(matrix)},
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    lines = made.stdout.splitlines()
    # torch is fixed (never resolved from an index here: the host checks it); the host's
    # pytest is preferred, as the runner there will; its six 1.16.0 is not the pin.
    assert lines[1].startswith("[1/2] cpu-py3.11-torch2.13.0-six1.17.0: 1 wheels, ")
    assert lines[1].endswith(
        "; from the host: iniconfig==2.0.0, packaging==24.2, pluggy==1.5.0, pytest==8.3.5, "
        "torch==2.13.0+cpu"
    )
    assert lines[2] == (
        "[2/2] cpu-py3.11-torch2.14.1-six1.17.0: uninstallable, nothing to download: "
        "torch==2.14.1 is pinned, but install.system-packages takes torch from the host "
        f"({freeze}), which has 2.13.0+cpu"
    )
    assert sorted(p.name for p in house.glob("*.whl")) == ["six-1.17.0-py2.py3-none-any.whl"]
    manifest = json.loads((house / "ftmatrix-wheelhouse.json").read_text())
    assert manifest["host_packages"] == {"torch": "2.13.0+cpu"}


def test_a_host_snapshot_carries_each_distributions_metadata(tmp_path: Path) -> None:
    snapshot = tmp_path / "host.json"
    done = subprocess.run(
        [sys.executable, "-m", "ftmatrix.system_packages"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )
    snapshot.write_text(done.stdout)
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    host = read_host_packages(snapshot, Target(python=python, platform="manylinux_2_28_x86_64"))
    pytest_dist = next(d for d in host.distributions if d.name.lower() == "pytest")
    assert pytest_dist.version == pytest.__version__
    assert pytest_dist.metadata.startswith("Metadata-Version:")
    with pytest.raises(WheelhouseError, match=f"the host runs Python {python}, not 3.9"):
        read_host_packages(snapshot, Target(python="3.9", platform="manylinux_2_28_x86_64"))
