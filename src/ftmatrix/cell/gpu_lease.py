"""What a cell's cases see of its GPU lease (``ftmatrix.gpu_pool`` takes the lease).

The pytest process sees only the first leased GPU (CUDA_VISIBLE_DEVICES), since
with several visible, transformers' Trainer wraps the model in DataParallel,
which no in-process case asks for; the whole lease is named in
FTMATRIX_GPU_LEASE, for the cases that declare ``gpus=N`` and start their own
processes on it. A cell without a lease sees no GPU. Runs inside cells (the
results plugin reads the lease): standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

LEASE_VARIABLE = "FTMATRIX_GPU_LEASE"


def lease_env(devices: Sequence[str]) -> dict[str, str]:
    """The environment of a cell's pytest: its first leased GPU visible, the lease named.

    No devices (a CPU cell, even on a GPU machine): no GPU visible, none leased.
    """
    return {"CUDA_VISIBLE_DEVICES": ",".join(devices[:1]), LEASE_VARIABLE: ",".join(devices)}


def leased_devices(env: Mapping[str, str]) -> tuple[str, ...] | None:
    """The cell's leased GPUs from ``env``; None when no runner set a lease."""
    lease = env.get(LEASE_VARIABLE)
    if lease is None:
        return None
    return tuple(d.strip() for d in lease.split(",") if d.strip())
