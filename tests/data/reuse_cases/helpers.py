"""A helper module of the cases: a change here changes what every case runs."""

import os
import time
from pathlib import Path


def note_run(what: str) -> None:
    """Append a line to FTMATRIX_REUSE_LOG: proof, from outside, that a case ran.

    FTMATRIX_BENCH_CASE_SECONDS stands for a real case's work (benchmarks/bench_nightly.py).
    """
    time.sleep(float(os.environ.get("FTMATRIX_BENCH_CASE_SECONDS") or 0))
    log = os.environ.get("FTMATRIX_REUSE_LOG")
    if log:
        with Path(log).open("a", encoding="utf-8") as handle:
            handle.write(what + "\n")
