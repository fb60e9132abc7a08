"""Two runs into one output folder: each keeps its own records, or one refuses and touches nothing.

Slow tier: real nox, uv and pytest, one small cell per run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from ftmatrix.errors import SettingsError
from ftmatrix.settings import Settings, new_run_id

ROOT = Path(__file__).parent.parent
DATA = Path(__file__).parent / "data"
CELL = "cpu-*-six1.17.0-attrs25.3.0"

# A case that holds its cell until the test lets it go (or 60 s pass).
WAITING_CASE = """
import os, time
from pathlib import Path

def test_waits_for_the_test():
    state = Path(os.environ["FTMATRIX_TEST_STATE"])
    (state / "started").touch()
    deadline = time.monotonic() + 60
    while not (state / "go").exists() and time.monotonic() < deadline:
        time.sleep(0.1)

def test_second_case():
    # Runs after the first case let the cell go: its start was noted first.
    assert (Path(os.environ["FTMATRIX_TEST_STATE"]) / "started").exists()
"""


def test_run_ids_started_in_the_same_second_differ_and_sort_by_time() -> None:
    now = datetime(2026, 11, 25, 3, 0, 0, tzinfo=UTC)
    ids = {new_run_id(now) for _ in range(50)}
    assert len(ids) == 50
    assert all(i.startswith("20261125T030000Z-") for i in ids)
    later = new_run_id(datetime(2026, 11, 25, 3, 0, 1, tzinfo=UTC))
    assert max(ids) < later
    twice = [Settings.from_env({}, root=ROOT, now=now).run_id for _ in range(2)]
    assert twice[0] != twice[1]


def run_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    state = tmp_path / "state"
    state.mkdir(exist_ok=True)
    return {
        **{k: v for k, v in os.environ.items() if k != "FTMATRIX_RUN_ID"},
        "FTMATRIX_MATRIX": str(DATA / "small_matrix.yaml"),
        "FTMATRIX_CASES": str(tmp_path / "cases"),
        "FTMATRIX_OUT": str(tmp_path / "out"),
        "FTMATRIX_SELECT": CELL,
        "FTMATRIX_TEST_STATE": str(state),
        **extra,
    }


def start_run(tmp_path: Path, env: dict[str, str], name: str) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py")]
    command += ["--envdir", str(tmp_path / f"envs-{name}"), "-s", "matrix"]
    return subprocess.Popen(
        command, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def records_by_run(out: Path) -> dict[str, list[dict]]:
    runs: dict[str, list[dict]] = {}
    for path in sorted((out / "records").rglob("*.jsonl")):
        lines = path.read_text(encoding="utf-8").splitlines()
        runs.setdefault(path.parent.name, []).extend(json.loads(line) for line in lines)
    return runs


@pytest.fixture
def waiting_cases(tmp_path: Path) -> Path:
    cases = tmp_path / "cases"
    cases.mkdir()
    (cases / "test_waits.py").write_text(WAITING_CASE, encoding="utf-8")
    return cases


@pytest.mark.slow
def test_two_runs_started_together_keep_every_record(tmp_path: Path, waiting_cases: Path) -> None:
    """Once both took the same one-second run id and destroyed each other's cell."""
    (tmp_path / "state" / "go").parent.mkdir(exist_ok=True)
    (tmp_path / "state" / "go").touch()  # nobody waits here: both run straight through
    env = run_env(tmp_path)
    first, second = start_run(tmp_path, env, "a"), start_run(tmp_path, env, "b")
    outputs = [p.communicate(timeout=300)[0] for p in (first, second)]
    assert (first.returncode, second.returncode) == (0, 0), "\n".join(outputs)
    runs = records_by_run(tmp_path / "out")
    assert len(runs) == 2, runs.keys()
    for records in runs.values():
        assert sorted((r["case"].split("::")[-1], r["status"]) for r in records) == [
            ("test_second_case", "pass"),
            ("test_waits_for_the_test", "pass"),
        ]


@pytest.mark.slow
def test_a_second_run_into_the_same_run_id_refuses_and_touches_nothing(
    tmp_path: Path, waiting_cases: Path
) -> None:
    env = run_env(tmp_path, FTMATRIX_RUN_ID="20261125T030000Z-shared")
    first = start_run(tmp_path, env, "a")
    started = tmp_path / "state" / "started"
    deadline = time.monotonic() + 240
    while not started.exists() and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert started.exists(), first.communicate()[0]
    # The first run is inside its cell now; the second asks for the same cell of the same run.
    second = start_run(tmp_path, env, "b")
    refused = second.communicate(timeout=300)[0]
    (tmp_path / "state" / "go").touch()
    finished = first.communicate(timeout=300)[0]
    assert first.returncode == 0, finished
    assert second.returncode != 0, refused
    assert "run 20261125T030000Z-shared is writing this cell already (pid" in refused
    assert "start this one with another FTMATRIX_RUN_ID" in refused
    records = records_by_run(tmp_path / "out")["20261125T030000Z-shared"]
    assert sorted((r["case"].split("::")[-1], r["status"]) for r in records) == [
        ("test_second_case", "pass"),
        ("test_waits_for_the_test", "pass"),
    ]


@pytest.mark.parametrize(
    "run_id", ["../../../../x", "a/b", "..", ".hidden", "x" * 101, "a b", "a..b"]
)
def test_a_run_id_that_is_not_a_plain_folder_name_is_refused(run_id: str) -> None:
    """FTMATRIX_RUN_ID=../../x once wrote records outside FTMATRIX_OUT."""
    with pytest.raises(SettingsError, match=r"FTMATRIX_RUN_ID=.*: a run id is a folder name"):
        Settings.from_env({"FTMATRIX_RUN_ID": run_id}, root=ROOT, now=datetime.now(UTC))


def test_a_plain_run_id_is_kept() -> None:
    settings = Settings.from_env(
        {"FTMATRIX_RUN_ID": "nightly-42.1_a"}, root=ROOT, now=datetime.now(UTC)
    )
    assert settings.run_id == "nightly-42.1_a"
