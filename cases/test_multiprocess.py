"""Multi-process training: SFT under `accelerate launch` with 2 processes (CPU: gloo).

Also the GPU launch modes, which this file declares but only a GPU runner can run:
plain `python` on 2 GPUs (transformers wraps the model in DataParallel) and
`torchrun`.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parent / "scripts" / "sft_distributed.py"

# Every case here starts several processes (a launcher and its ranks): with
# pytest-xdist workers they would compete with the cases beside them.
pytestmark = pytest.mark.exclusive("starts several training processes")


def launch(mode: str, operation: str, processes: int, model_dir: Path, out: Path) -> list[dict]:
    """Start the training script under ``mode`` and return each rank's report."""
    out.mkdir(parents=True, exist_ok=True)
    script = [str(SCRIPT), str(model_dir), str(out), operation]
    if mode == "accelerate":
        # accelerate's torchrun launcher (--multi_gpu) starts the processes; with no
        # CUDA the script asks for the CPU and accelerate joins them with gloo.
        # (`--cpu` alone runs one process unless MPI is set up.)
        command = [
            sys.executable,
            "-m",
            "accelerate.commands.launch",
            "--multi_gpu",
            "--num_processes",
            str(processes),
            "--num_machines",
            "1",
            "--mixed_precision",
            "no",
            "--dynamo_backend",
            "no",
            *script,
        ]
    elif mode == "torchrun":
        command = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node",
            str(processes),
            *script,
        ]
    else:  # plain python: every visible GPU in one process, DataParallel
        command = [sys.executable, *script]
    completed = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        check=False,
    )
    if completed.returncode != 0:
        errors = [json.loads(p.read_text()) for p in sorted(out.glob("rank*.error.json"))]
        message = f"{mode} launch exited {completed.returncode}"
        if errors:
            message += f": {errors[0]['type']}: {errors[0]['message']} (at {errors[0]['frame']})"
        message += f"\n{completed.stderr[-4000:]}"
        # Blame as the results plugin would in-process: an error raised inside an
        # installed package is the frameworks' (fail); anything else is ours (error).
        if errors and all(e["framework"] for e in errors):
            raise AssertionError(message)
        raise RuntimeError(message)
    reports = [p for p in out.glob("rank*.json") if not p.name.endswith(".error.json")]
    return [json.loads(p.read_text()) for p in sorted(reports, key=lambda p: (len(p.name), p.name))]


@pytest.mark.operation("multiprocess")
@pytest.mark.requires_packages(trl=">=0.9", accelerate=">=0.20")
@pytest.mark.parametrize(
    "operation",
    ["sft", pytest.param("grpo", marks=pytest.mark.requires_packages(trl=">=0.14"))],
)
def test_accelerate_launch_two_processes(
    operation: str, tiny_model_dir: Path, tmp_path: Path, record_property
):
    ranks = launch("accelerate", operation, 2, tiny_model_dir, tmp_path / "ranks")
    assert [r["rank"] for r in ranks] == [0, 1]
    assert all(r["world_size"] == 2 and r["steps"] == 2 for r in ranks), ranks
    assert all(math.isfinite(r["loss"]) for r in ranks), ranks
    # Data parallel training keeps the replicas identical after every step.
    assert ranks[0]["weights_sha"] == ranks[1]["weights_sha"], ranks
    record_property("loss", ranks[0]["loss"])


@pytest.mark.operation("sft-multigpu")
@pytest.mark.requires_packages(trl=">=0.9", accelerate=">=0.20")
@pytest.mark.requires_hardware(cuda=True, gpus=2)
@pytest.mark.parametrize("mode", ["python", "accelerate", "torchrun"])
def test_sft_two_gpus(mode: str, tiny_model_dir: Path, tmp_path: Path, record_property):
    ranks = launch(mode, "sft", 2, tiny_model_dir, tmp_path / "ranks")
    expected_ranks = 1 if mode == "python" else 2
    assert len(ranks) == expected_ranks, ranks
    assert all(r["steps"] == 2 and math.isfinite(r["loss"]) for r in ranks), ranks
    if expected_ranks == 2:
        assert ranks[0]["weights_sha"] == ranks[1]["weights_sha"], ranks
    record_property("loss", ranks[0]["loss"])
