"""A helper module of the cases: a change here changes what every case runs."""

import os
from pathlib import Path


def note_run(what: str) -> None:
    """Append a line to FTMATRIX_REUSE_LOG: proof, from outside, that a case ran."""
    log = os.environ.get("FTMATRIX_REUSE_LOG")
    if log:
        with Path(log).open("a", encoding="utf-8") as handle:
            handle.write(what + "\n")
