"""Multi-process training: SFT under `accelerate launch` and `torchrun` with 2 processes
(CPU: gloo), GRPO under `accelerate launch`.

Also the GPU launch modes, which this file declares but only a GPU runner can run:
plain `python` on 2 GPUs (transformers wraps the model in DataParallel) and
`torchrun`. A rank's failure is the case's: its exception type, message and
frames reach the record as if raised here; a rank killed by a signal is a crash.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from helpers.processes import launch_command, run_ranks

from ftmatrix.cell.api import GpuLease, cpu_only_env

SCRIPT = Path(__file__).parent / "scripts" / "sft_distributed.py"

# Every case here starts several processes (a launcher and its ranks): with
# pytest-xdist workers they would compete with the cases beside them.
pytestmark = pytest.mark.exclusive("starts several training processes")


def launch(
    mode: str,
    operation: str,
    processes: int,
    model_dir: Path,
    out: Path,
    *,
    lease: GpuLease | None = None,
    script: Path = SCRIPT,
) -> list[dict]:
    """Start the training ``script`` under ``mode`` and return each rank's report.

    The ranks see the GPUs of ``lease``; without one, none: a CPU case's ranks on a
    GPU runner would otherwise each pick a GPU (rank 1 ``cuda:1``, which a one-GPU
    runner lacks) and the case would measure the runner, not the frameworks.
    """
    env = lease.child_env() if lease is not None else cpu_only_env()
    command = launch_command(mode, processes, [str(script), str(model_dir), str(out), operation])
    return run_ranks(command, out, env=env)


@pytest.mark.operation("multiprocess")
@pytest.mark.requires_packages(trl=">=0.7", accelerate=">=0.20")
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


@pytest.mark.operation("multiprocess")
@pytest.mark.requires_packages(trl=">=0.7", accelerate=">=0.20")
def test_torchrun_two_processes(tiny_model_dir: Path, tmp_path: Path, record_property):
    """The same SFT under plain `torchrun --nproc_per_node 2` (gloo on CPU): transformers'
    Trainer sets up the process group itself, with no accelerate launcher."""
    ranks = launch("torchrun", "sft", 2, tiny_model_dir, tmp_path / "ranks")
    assert [r["rank"] for r in ranks] == [0, 1]
    assert all(r["world_size"] == 2 and r["steps"] == 2 for r in ranks), ranks
    assert all(math.isfinite(r["loss"]) for r in ranks), ranks
    assert ranks[0]["weights_sha"] == ranks[1]["weights_sha"], ranks
    record_property("loss", ranks[0]["loss"])


@pytest.mark.operation("sft-multigpu")
@pytest.mark.requires_packages(trl=">=0.7", accelerate=">=0.20")
@pytest.mark.requires_hardware(cuda=True, gpus=2)
@pytest.mark.parametrize(
    ("mode", "operation"),
    [
        ("python", "sft"),
        # The upstream report's shape (huggingface/trl#3392): packing, a LoRA adapter,
        # gradient checkpointing and accumulation, started with plain python.
        pytest.param(
            "python", "sft-lora-packed", marks=pytest.mark.requires_packages(peft=">=0.10")
        ),
        ("accelerate", "sft"),
        ("torchrun", "sft"),
    ],
)
def test_sft_two_gpus(
    mode: str,
    operation: str,
    tiny_model_dir: Path,
    tmp_path: Path,
    gpu_lease: GpuLease,
    record_property,
):
    # The case's own process sees one GPU; its ranks see the cell's whole lease.
    ranks = launch(mode, operation, 2, tiny_model_dir, tmp_path / "ranks", lease=gpu_lease)
    expected_ranks = 1 if mode == "python" else 2
    assert len(ranks) == expected_ranks, ranks
    assert all(r["steps"] == 2 and math.isfinite(r["loss"]) for r in ranks), ranks
    if expected_ranks == 2:
        assert ranks[0]["weights_sha"] == ranks[1]["weights_sha"], ranks
    record_property("loss", ranks[0]["loss"])
