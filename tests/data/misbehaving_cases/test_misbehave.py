"""Each case ends its process or itself in a different bad way; every other record survives.

Never part of the product's matrix: only the tool's own tests run these.
"""

import ctypes
import os
import threading
import time
from pathlib import Path

import pytest


@pytest.mark.operation("healthy")
def test_a_first_healthy_case():
    import six

    assert six.PY3


@pytest.mark.operation("segfault")
def test_b_segfault():
    # Threads that wait, as a framework's do: the interpreter's dump of every thread pushes
    # its first line ("Fatal Python error: Segmentation fault") out of the supervisor's tail.
    for _ in range(40):
        threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
    ctypes.string_at(0)  # reads address 0: SIGSEGV


@pytest.mark.operation("abort")
def test_c_abort():
    os.abort()


@pytest.mark.operation("hang")
def test_d_infinite_loop():
    while True:
        pass


@pytest.mark.operation("memory")
def test_e_allocation_blow_up():
    chunks = []
    for _ in range(200):  # up to 12.5 GiB, far past the matrix's 0.5 GiB limit
        chunks.append(bytearray(64 << 20))
        time.sleep(0.05)


@pytest.mark.operation("flaky")
def test_f_crashes_once_then_passes():
    marker = Path(os.environ["FTMATRIX_TEST_STATE"]) / "flaky-first-try-done"
    if not marker.exists():
        marker.touch()
        os.abort()


@pytest.mark.operation("slow")
def test_g_slow_but_in_time():
    time.sleep(float(os.environ.get("FTMATRIX_TEST_SLOW_SECONDS", "0.5")))


@pytest.mark.operation("healthy")
def test_h_last_healthy_case():
    import six

    assert six.ensure_str(b"ok") == "ok"
