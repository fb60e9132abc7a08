"""GPU leases: parallel cells on one machine never share a device.

Each device has a lock file; a cell holds an exclusive ``flock`` on the files of
the devices it uses for as long as it runs. The kernel drops a lock when its
holder dies, so a killed cell never leaves a device leased.

What a cell's cases see of its lease: the pytest process sees only the first
leased GPU (CUDA_VISIBLE_DEVICES), since with several visible, transformers'
Trainer wraps the model in DataParallel, which no in-process case asks for;
the whole lease is named in FTMATRIX_GPU_LEASE, for the cases that declare
``gpus=N`` and start their own processes on it. A cell without a lease sees no
GPU. Runs inside cells too (the results plugin reads the lease): standard
library only.
"""

from __future__ import annotations

import fcntl
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO

POLL_SECONDS = 1.0
LEASE_VARIABLE = "FTMATRIX_GPU_LEASE"


class LeaseError(Exception):
    """More devices asked for than the machine has."""


@contextmanager
def lease_devices(
    wanted: int,
    devices: Sequence[str],
    lock_dir: Path,
    *,
    on_wait: Callable[[], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[list[str]]:
    """Hold ``wanted`` of ``devices`` (GPU indices) until the block ends; waits for free ones.

    ``wanted`` 0 yields no device and locks nothing. Asking for every device makes
    the cell wait until no other cell holds any: cases that need all GPUs run alone.
    """
    if wanted == 0:
        yield []
        return
    if wanted > len(devices):
        raise LeaseError(f"{wanted} GPU(s) wanted; this machine has {len(devices)}")
    lock_dir.mkdir(parents=True, exist_ok=True)
    held: list[tuple[str, IO[str]]] = []
    try:
        while True:
            for device in devices:
                if len(held) == wanted:
                    break
                if device in (d for d, _ in held):
                    continue
                handle = (lock_dir / f"gpu-{device}.lock").open("a")
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    handle.close()
                    continue
                held.append((device, handle))
            if len(held) == wanted:
                break
            # Give back a partial lease while waiting: two cells each holding half
            # of what both need would otherwise wait for each other forever.
            _release(held)
            held = []
            if on_wait:
                on_wait()
            sleep(POLL_SECONDS)
        yield [d for d, _ in held]
    finally:
        _release(held)


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


def default_lock_dir(env: Mapping[str, str]) -> Path:
    """Shared by every cell on the machine, whichever checkout or user started it."""
    return Path(env.get("FTMATRIX_LEASE_DIR", "/tmp/ftmatrix-gpu-leases"))


def _release(held: list[tuple[str, IO[str]]]) -> None:
    for _, handle in held:
        fcntl.flock(handle, fcntl.LOCK_UN)
        handle.close()
