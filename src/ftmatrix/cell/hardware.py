"""What machine the cases run on: probed, never assumed.

The fingerprint goes into every record. GPUs are read from ``nvidia-smi`` (the
driver's view) and, inside a cell that has torch, from torch itself (what the
cases will actually see, after CUDA_VISIBLE_DEVICES). Runs inside cells:
standard library only.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

NVIDIA_SMI_QUERY = "name,memory.total,driver_version,compute_cap"


def probe_hardware(env: Mapping[str, str], *, with_torch: bool = False) -> dict[str, Any]:
    """A fingerprint of this machine; ``with_torch`` adds torch's own view of its devices."""
    fingerprint: dict[str, Any] = {
        "machine": platform.machine(),
        "system": platform.system(),
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count() or 0,
        "memory_gib": _memory_gib(),
        "gpus": _nvidia_gpus(),
        "cuda_visible_devices": env.get("CUDA_VISIBLE_DEVICES"),
        "gpu_lease": env.get("FTMATRIX_GPU_LEASE"),
    }
    fingerprint["gpu_count"] = len(fingerprint["gpus"])
    if with_torch:
        fingerprint["torch"] = _torch_view()
    return fingerprint


def usable_gpu_count(fingerprint: Mapping[str, Any]) -> int:
    """GPUs this process can use: torch's count when known, else the driver's.

    The driver (nvidia-smi) lists every GPU whatever CUDA_VISIBLE_DEVICES hides,
    so without torch's view the visible list caps the driver's count.
    """
    torch_view = fingerprint.get("torch") or {}
    if "cuda_device_count" in torch_view:
        return int(torch_view["cuda_device_count"])
    count = int(fingerprint.get("gpu_count", 0))
    visible = fingerprint.get("cuda_visible_devices")
    if visible is not None:
        count = min(count, len([d for d in str(visible).split(",") if d.strip()]))
    return count


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024**2, 1)
    except (OSError, ValueError, IndexError):
        pass
    return None


def _nvidia_gpus() -> list[dict[str, str]]:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        out = subprocess.run(
            [smi, f"--query-gpu={NVIDIA_SMI_QUERY}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return parse_nvidia_smi(out)


def parse_nvidia_smi(output: str) -> list[dict[str, str]]:
    """Rows of ``nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap``."""
    gpus = []
    for row in output.strip().splitlines():
        fields = [f.strip() for f in row.split(",")]
        if len(fields) != 4:
            continue
        name, memory, driver, capability = fields
        gpus.append(
            {"name": name, "memory_mib": memory, "driver": driver, "compute_capability": capability}
        )
    return gpus


def _torch_view() -> dict[str, Any]:
    try:
        import torch  # type: ignore[import-not-found,unused-ignore]  # noqa: PLC0415 -- only in cells
    except Exception as exc:  # a broken torch install is itself worth recording
        return {"import_error": f"{type(exc).__name__}: {exc}"}
    view: dict[str, Any] = {
        "version": torch.__version__,
        "cuda_runtime": torch.version.cuda,
        "cuda_available": bool(torch.cuda.is_available()),
        "cuda_device_count": torch.cuda.device_count() if torch.cuda.is_available() else 0,
        "devices": [],
    }
    for index in range(view["cuda_device_count"]):
        props = torch.cuda.get_device_properties(index)
        view["devices"].append(
            {
                "name": props.name,
                "compute_capability": f"{props.major}.{props.minor}",
                "memory_mib": props.total_memory // 2**20,
            }
        )
    return view
