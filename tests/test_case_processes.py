"""Processes a case starts (training ranks, launchers): what they see, and how their end
reaches the case's record. Real child processes, run by cases/helpers/processes.py (through
cases/test_multiprocess.py's launch) inside a real pytest with the results plugin.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
# trl 1.16.0's trainers refuse DataParallel with this ValueError (trl/trainer/sft_trainer.py).
TRL_REFUSAL = (
    "SFTTrainer does not support `nn.DataParallel`, which `Trainer` uses when several GPUs are "
    "visible to a single process. Launch the script with `accelerate launch` or `torchrun`, or "
    "make a single GPU visible with `CUDA_VISIBLE_DEVICES`."
)
SHAPE_MISMATCH = (
    "The size of tensor a (2) must match the size of tensor b (4) at non-singleton dimension 0"
)
# The summary torchrun (and accelerate launch, through it) prints for a rank killed by a signal.
TORCHRUN_SUMMARY = """\
[rank1]:[E ProcessGroupNCCL.cpp:1316] Watchdog caught collective operation timeout
E1123 18:02:11.000000 123 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: -6) local_rank: 1 (pid: 4242) of binary: /venv/bin/python
Traceback (most recent call last):
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
sft_distributed.py FAILED
------------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-23_18:02:11
  host      : runner
  rank      : 1 (local_rank: 1)
  exitcode  : -6 (pid: 4242)
  error_file: <N/A>
  traceback : Signal 6 (SIGABRT) received by PID 4242
============================================================
"""
# torchrun 2.13's summary when rank 0 exits 3 while rank 1 still runs (captured from a real
# `torch.distributed.run --standalone --nproc_per_node 2`): the launcher ends rank 1 with
# SIGTERM and lists it under Failures; the root cause is rank 0's plain exit.
PEER_ENDED_SUMMARY = """\
W1125 10:29:04.568000 25105 torch/distributed/elastic/multiprocessing/api.py:1028] Sending process 25159 closing signal SIGTERM
E1125 10:29:04.570000 25105 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: 3) local_rank: 0 (pid: 25158) of binary: /venv/bin/python
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
s.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-11-25_10:29:04
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : -15 (pid: 25159)  (SIGTERM)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 25159
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-25_10:29:04
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : 3 (pid: 25158)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
============================================================
"""

# Each child is a rank: argv[1] is the folder its report (or error) goes to.
CHILDREN = {
    "framework_error.py": """
        from packaging.version import Version
        Version("not a version")
    """,
    "shape_mismatch.py": f"""
        from fakefw.ops import train
        train({SHAPE_MISMATCH!r})
    """,
    "refuses_dataparallel.py": f"""
        raise ValueError({TRL_REFUSAL!r})
    """,
    "killed.py": """
        import os, signal
        os.kill(os.getpid(), signal.SIGKILL)
    """,
    "rank_aborted.py": f"""
        import sys
        sys.stderr.write({TORCHRUN_SUMMARY!r})
        sys.exit(1)
    """,
    "peer_ended.py": f"""
        import sys
        sys.stderr.write({PEER_ENDED_SUMMARY!r})
        sys.exit(1)
    """,
    "exits_silently.py": """
        import sys
        sys.exit(3)
    """,
    "sees.py": """
        import json, os
        seen = {"CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES")}
        open(os.path.join(OUT, "rank0.json"), "w").write(json.dumps(seen))
    """,
}
CHILD_PRELUDE = f"""
import os, sys
sys.path.insert(0, {str(ROOT / "cases")!r})
from helpers.processes import run_reporting_errors
OUT = sys.argv[2]
def body():
"""

CASES = f"""
import os, sys
from pathlib import Path

import pytest

sys.path.insert(0, {str(ROOT / "cases")!r})
from test_multiprocess import launch

from ftmatrix.cell.api import GpuLease

CHILDREN = Path(__file__).parent / "children"


def rank(name, tmp_path, **kwargs):
    return launch("python", "sft", 1, Path("unused"), tmp_path, script=CHILDREN / name, **kwargs)


def test_framework_error_in_process():
    from packaging.version import Version
    Version("not a version")


def test_framework_error_in_a_rank(tmp_path):
    rank("framework_error.py", tmp_path)


def test_shape_mismatch_in_a_rank(tmp_path):
    rank("shape_mismatch.py", tmp_path)


def test_trl_refuses_dataparallel(tmp_path):
    rank("refuses_dataparallel.py", tmp_path)


def test_rank_killed(tmp_path):
    rank("killed.py", tmp_path)


def test_rank_aborted_under_torchrun(tmp_path):
    rank("rank_aborted.py", tmp_path)


def test_rank_exits_without_a_word(tmp_path):
    rank("exits_silently.py", tmp_path)


def test_rank_exits_and_the_launcher_ends_its_peer(tmp_path):
    rank("peer_ended.py", tmp_path)


def test_cpu_case_ranks(tmp_path):
    os.environ["CUDA_VISIBLE_DEVICES"] = "0"  # the runner's GPU, which a CPU case must hide
    (seen,) = rank("sees.py", tmp_path)
    assert seen == {{"CUDA_VISIBLE_DEVICES": ""}}


def test_gpu_case_ranks(tmp_path):
    os.environ["CUDA_VISIBLE_DEVICES"] = "3"  # the case's own process: one of the lease
    (seen,) = rank("sees.py", tmp_path, lease=GpuLease(devices=("3", "5")))
    assert seen == {{"CUDA_VISIBLE_DEVICES": "3,5"}}
"""


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    base = tmp_path_factory.mktemp("case-processes")
    children = base / "children"
    children.mkdir()
    for name, body in CHILDREN.items():
        code = CHILD_PRELUDE + textwrap.indent(textwrap.dedent(body), "    ")
        (children / name).write_text(code + "\nrun_reporting_errors(OUT, body)\n")
    # A stand-in framework: a real module in a folder named site-packages.
    framework = base / "fake" / "site-packages" / "fakefw"
    framework.mkdir(parents=True)
    (framework / "__init__.py").write_text("")
    (framework / "ops.py").write_text("def train(message):\n    raise RuntimeError(message)\n")
    (base / "test_children.py").write_text(CASES)
    cell = {
        "run_id": "r1",
        "id": "c1",
        "label": "cpu",
        "python": "3",
        "pins": {},
        "hardware": "cpu",
    }
    (base / "cell.json").write_text(json.dumps(cell))
    out = base / "out.jsonl"
    subprocess.run(
        [
            *(
                sys.executable,
                "-m",
                "pytest",
                "-p",
                "ftmatrix.cell.plugin",
                "-p",
                "no:cacheprovider",
            ),
            *("--ftmatrix-cell", str(base / "cell.json"), "--ftmatrix-record", str(out)),
            str(base / "test_children.py"),
        ],
        cwd=base,
        env={**os.environ, "PYTHONPATH": str(framework.parent)},  # fakefw, in the ranks too
        capture_output=True,
        text=True,
        check=False,
    )
    return {
        json.loads(line)["case"].split("::")[1]: json.loads(line)
        for line in out.read_text().splitlines()
    }


def test_a_rank_s_framework_error_is_recorded_as_if_raised_in_the_case(records: dict[str, dict]):
    in_rank, in_process = (
        records["test_framework_error_in_a_rank"],
        records["test_framework_error_in_process"],
    )
    for field in ("status", "exception_type", "message", "framework_frame", "signature"):
        assert in_rank[field] == in_process[field], field
    assert in_rank["status"] == "fail"
    assert in_rank["exception_type"] == "packaging.version.InvalidVersion"
    assert in_rank["framework_frame"].startswith("packaging/version.py:")
    assert "InvalidVersion: Invalid version: 'not a version'" in in_rank["traceback"]


def test_a_rank_s_runtime_error_keeps_its_type_for_the_known_issue(records: dict[str, dict]):
    # known_issues.yaml's trl-sft-dataparallel-batch matches on RuntimeError.
    record = records["test_shape_mismatch_in_a_rank"]
    assert (record["status"], record["exception_type"], record["message"]) == (
        "fail",
        "RuntimeError",
        SHAPE_MISMATCH,
    )
    assert record["framework_frame"] == "fakefw/ops.py:train"


def test_trl_refusing_dataparallel_is_not_applicable(records: dict[str, dict]):
    record = records["test_trl_refuses_dataparallel"]
    assert (record["status"], record["reason"]) == ("n/a", TRL_REFUSAL)


def test_a_rank_killed_by_a_signal_is_a_crash(records: dict[str, dict]):
    killed = records["test_rank_killed"]
    assert (killed["status"], killed["message"]) == (
        "crash",
        "a training process died: signal SIGKILL",
    )
    assert killed["exception_type"] is None
    aborted = records["test_rank_aborted_under_torchrun"]
    assert (aborted["status"], aborted["message"]) == (
        "crash",
        "a training process died: signal SIGABRT",
    )
    assert "Signal 6 (SIGABRT) received by PID 4242" in aborted["traceback"]


def test_a_rank_that_exits_without_an_error_or_a_signal_is_ours(records: dict[str, dict]):
    record = records["test_rank_exits_without_a_word"]
    assert record["status"] == "error"
    assert record["message"].startswith("the launch exited 3 and no rank left its error")


def test_a_peer_the_launcher_ended_is_no_crash(records: dict[str, dict]):
    """Rank 0 exited 3 without its error; torchrun then sent rank 1 SIGTERM: ours, as a
    plain non-zero exit is (was `crash`, "signal SIGTERM", from the peer's line)."""
    record = records["test_rank_exits_and_the_launcher_ends_its_peer"]
    assert record["status"] == "error", record["message"]
    assert record["message"].startswith("the launch exited 1 and no rank left its error")


def test_ranks_see_the_lease_of_a_gpu_case_and_no_gpu_of_a_cpu_case(records: dict[str, dict]):
    assert records["test_cpu_case_ranks"]["status"] == "pass"
    assert records["test_gpu_case_ranks"]["status"] == "pass"
