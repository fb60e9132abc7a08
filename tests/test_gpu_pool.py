"""GPU leases between real processes, with real file locks.

This machine has no GPU: the leases are over device indices handed in, which is
all the lease logic sees on a GPU machine too (the indices come from nvidia-smi).
"""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path

import pytest

from ftmatrix.gpu_pool import LeaseError, lease_devices


def hold(lock_dir: str, wanted: int, devices: list[str], seconds: float, out) -> None:
    with lease_devices(wanted, devices, Path(lock_dir)) as got:
        out.put((time.monotonic(), got))
        time.sleep(seconds)


def test_two_cells_get_different_devices_and_a_third_waits(tmp_path: Path):
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    first = context.Process(target=hold, args=(str(tmp_path), 1, ["0", "1"], 3.0, out))
    second = context.Process(target=hold, args=(str(tmp_path), 1, ["0", "1"], 3.0, out))
    first.start()
    second.start()
    got = [out.get(timeout=30), out.get(timeout=30)]
    assert sorted(d for _, devices in got for d in devices) == ["0", "1"]
    started = time.monotonic()
    with lease_devices(2, ["0", "1"], tmp_path, sleep=lambda s: time.sleep(0.1)) as both:
        waited = time.monotonic() - started
        assert both == ["0", "1"]
    first.join()
    second.join()
    assert waited > 0.5  # it could only start once both holders had finished


def test_a_killed_holder_frees_its_device(tmp_path: Path):
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    holder = context.Process(target=hold, args=(str(tmp_path), 1, ["0"], 600.0, out))
    holder.start()
    out.get(timeout=30)
    holder.kill()
    holder.join()
    with lease_devices(1, ["0"], tmp_path) as got:
        assert got == ["0"]


def test_no_gpu_wanted_locks_nothing(tmp_path: Path):
    with lease_devices(0, [], tmp_path / "none") as got:
        assert got == []
    assert not (tmp_path / "none").exists()


def test_more_than_the_machine_has_is_an_error(tmp_path: Path):
    with (
        pytest.raises(LeaseError, match=r"2 GPU\(s\) wanted; this machine has 1"),
        lease_devices(2, ["0"], tmp_path),
    ):
        pass
