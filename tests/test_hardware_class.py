"""Whether this machine can stand for a hardware class: its GPUs' count and names.

The fingerprints are the shape cell/hardware.py writes, read off real machines (the GPU
host's H200 of 2026-11-27, a CPU runner); no GPU here, so the function is fed them.
"""

from __future__ import annotations

from typing import Any

import pytest

from ftmatrix.matrix_model import HardwareClass
from ftmatrix.runner import hardware_class_gap

H200 = {"gpu_count": 1, "gpus": [{"name": "NVIDIA H200", "memory_mib": "143771"}]}
TWO_H100 = {"gpu_count": 2, "gpus": [{"name": "NVIDIA H100 80GB HBM3"}] * 2}
CPU: dict[str, Any] = {"gpu_count": 0, "gpus": []}


@pytest.mark.parametrize(
    ("hardware", "fingerprint", "gap"),
    [
        (HardwareClass(name="cpu", runs_on=()), CPU, None),
        (HardwareClass(name="gpu", runs_on=(), gpus=1), H200, None),
        (HardwareClass(name="h100", runs_on=(), gpus=1, gpu_name="H100"), TWO_H100, None),
        (HardwareClass(name="hopper", runs_on=(), gpus=1, gpu_name="h100|h200"), H200, None),
        (
            HardwareClass(name="h100", runs_on=(), gpus=1, gpu_name="H100"),
            H200,
            "hardware class 'h100' needs 1 GPU(s) named like 'H100'; this machine has NVIDIA H200",
        ),
        (
            HardwareClass(name="h100x2", runs_on=(), gpus=2, gpu_name="H100"),
            H200,
            "hardware class 'h100x2' needs 2 GPU(s); this machine has 1",
        ),
        (
            HardwareClass(name="l4", runs_on=(), gpus=1, gpu_name="L4"),
            CPU,
            "hardware class 'l4' needs 1 GPU(s); this machine has 0",
        ),
    ],
)
def test_a_machine_stands_for_a_class_by_its_gpus_count_and_names(
    hardware: HardwareClass, fingerprint: dict[str, Any], gap: str | None
) -> None:
    assert hardware_class_gap(hardware, fingerprint) == gap
