"""Multi-process training: SFT under `accelerate launch` with 2 processes (CPU: gloo).

Also the GPU launch modes, which this file declares but only a GPU runner can run:
plain `python` on 2 GPUs (transformers wraps the model in DataParallel) and
`torchrun`. A rank's failure is the case's: its exception type, message and
frames reach the record as if raised here; a rank killed by a signal is a crash.
"""

from __future__ import annotations

import json
import math
import re
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NoReturn

import pytest

from ftmatrix.pytest_plugin import ChildProcessFailure, GpuLease, cpu_only_env, not_applicable

SCRIPT = Path(__file__).parent / "scripts" / "sft_distributed.py"
# trl's trainers (1.x, e.g. trl/trainer/sft_trainer.py) refuse DataParallel with a
# ValueError naming `accelerate launch`: the release does not offer that launch mode.
DATAPARALLEL_REFUSAL = "does not support `nn.DataParallel`"
# torchrun's (and so accelerate's) summary of a rank that died: "exitcode  : -9 (pid: 7)".
RANK_EXITCODE = re.compile(r"exitcode\s*:\s*(-?\d+)")

# Every case here starts several processes (a launcher and its ranks): with
# pytest-xdist workers they would compete with the cases beside them.
pytestmark = pytest.mark.exclusive("starts several training processes")


def launch_command(mode: str, processes: int, script: Sequence[str]) -> list[str]:
    """The command line that starts ``script`` (and its arguments) under ``mode``."""
    if mode == "accelerate":
        # accelerate's torchrun launcher (--multi_gpu) starts the processes; with no
        # CUDA the script asks for the CPU and accelerate joins them with gloo.
        # (`--cpu` alone runs one process unless MPI is set up.)
        return [
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
    if mode == "torchrun":
        return [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node",
            str(processes),
            *script,
        ]
    return [sys.executable, *script]  # plain python: every visible GPU in one process


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


def run_ranks(command: Sequence[str], out: Path, *, env: Mapping[str, str]) -> list[dict]:
    """Run ``command``, whose ranks write ``rank<N>.json`` (or ``.error.json``) into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    completed = subprocess.run(
        list(command),
        capture_output=True,
        text=True,
        timeout=900,
        env={**env, "OMP_NUM_THREADS": "1"},
        check=False,
    )
    if completed.returncode != 0:
        raise_rank_failure(out, completed.returncode, completed.stderr)
    reports = [p for p in out.glob("rank*.json") if not p.name.endswith(".error.json")]
    return [json.loads(p.read_text()) for p in sorted(reports, key=_by_rank)]


def raise_rank_failure(out: Path, returncode: int, stderr: str) -> NoReturn:
    """Raise what the first failed rank raised; a rank that left no error died: a crash."""
    errors = [json.loads(p.read_text()) for p in sorted(out.glob("rank*.error.json"), key=_by_rank)]
    tail = stderr[-4000:]
    if errors:
        first = errors[0]
        if first["type"] == "ValueError" and DATAPARALLEL_REFUSAL in first["message"]:
            not_applicable(first["message"])
        raise ChildProcessFailure(
            exception_type=first["type"],
            message=first["message"],
            frames=[tuple(frame) for frame in first["frames"]],
            traceback=f"{first['traceback']}\n{tail}",
        )
    died = died_how(returncode, stderr)
    if died is not None:
        raise ChildProcessFailure(message=died, crashed=died, traceback=tail)
    raise RuntimeError(f"the launch exited {returncode} and no rank left its error\n{tail}")


def died_how(returncode: int, stderr: str) -> str | None:
    """``a training process died: signal SIGKILL``, or None if none died of a signal."""
    codes = [returncode, *(int(c) for c in RANK_EXITCODE.findall(stderr))]
    signals = [-code for code in codes if code < 0]
    if not signals:
        return None
    try:
        name = signal.Signals(signals[0]).name
    except ValueError:
        name = str(signals[0])
    return f"a training process died: signal {name}"


def _by_rank(path: Path) -> tuple[int, str]:
    return len(path.name), path.name


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
