"""What the processes of a cell's cases receive: the GPUs, and the working directory.

Run by tests/test_runner_e2e.py on a machine whose nvidia-smi lists GPUs that are
not there: the lease is over device indices, and no case here touches a GPU.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ftmatrix.cell.api import GpuLease

STATE = Path(os.environ["FTMATRIX_TEST_STATE"])
SEEN = ("CUDA_VISIBLE_DEVICES", "FTMATRIX_GPU_LEASE")
CHILD = "import json, os, sys; print(json.dumps({k: os.environ.get(k) for k in sys.argv[1:]}))"
LEFT_BEHIND = Path("left-behind-by-a-case.txt")  # relative: lands in the working directory


def save(name: str, seen: dict) -> None:
    cell = os.environ.get("FTMATRIX_GPU_LEASE") or "no-lease"
    (STATE / f"{cell}-{name}.json").write_text(json.dumps(seen))


def test_in_process():
    save(
        "in-process",
        {
            **{name: os.environ.get(name) for name in SEEN},
            "cwd": str(Path.cwd()),
            "found_a_file_left_behind": LEFT_BEHIND.exists(),
        },
    )
    LEFT_BEHIND.write_text("written by a case")


@pytest.mark.requires_hardware(gpus=2)
def test_two_gpus(gpu_lease: GpuLease):
    child = subprocess.run(
        [sys.executable, "-c", CHILD, *SEEN],
        env=gpu_lease.child_env(),
        capture_output=True,
        text=True,
        check=True,
    )
    save("two-gpus-child", json.loads(child.stdout))


@pytest.mark.requires_hardware(gpus=3)
def test_three_gpus():
    raise AssertionError("must not run: the cell leased two GPUs")
