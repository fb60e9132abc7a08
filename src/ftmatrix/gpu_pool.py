"""GPU leases: parallel cells on one machine never share a device.

Each device has a lock file; a cell holds an exclusive ``flock`` on the files of
the devices it uses for as long as it runs. The kernel drops a lock when its
holder dies, so a killed cell never leaves a device leased. What the cell's
cases see of the lease is ``ftmatrix.cell.gpu_lease``.
"""

from __future__ import annotations

import fcntl
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from ftmatrix.errors import LeaseError
from ftmatrix.path_kinds import check_kinds

POLL_SECONDS = 1.0


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
    # A FIFO opened to append blocks for ever; a file where the folder belongs is said.
    check_kinds([(lock_dir, "folder", "the GPU lease folder (FTMATRIX_LEASE_DIR)")])
    check_kinds((lock_dir / f"gpu-{d}.lock", "file", "a GPU's lease lock") for d in devices)
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


def default_lock_dir(env: Mapping[str, str]) -> Path:
    """Shared by every cell on the machine, whichever checkout or user started it."""
    return Path(env.get("FTMATRIX_LEASE_DIR", "/tmp/ftmatrix-gpu-leases"))


def _release(held: list[tuple[str, IO[str]]]) -> None:
    for _, handle in held:
        fcntl.flock(handle, fcntl.LOCK_UN)
        handle.close()
