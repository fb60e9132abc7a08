"""The selected cases: each run of test_counted leaves a line in FTMATRIX_REUSE_LOG."""

import hashlib
import os
import sys
from pathlib import Path

import six
from helpers import note_run


def test_counted():
    note_run(f"{sys.prefix} six {six.__version__}")
    assert six.PY3


def test_flaky_where_asked():
    """In the cells whose six is FTMATRIX_REUSE_FLAKY, the first try crashes and the second
    passes: a real flaky record (the supervisor tries a crashed case once more)."""
    if os.environ.get("FTMATRIX_REUSE_FLAKY") != six.__version__:
        return
    cell = hashlib.sha256(sys.prefix.encode()).hexdigest()[:12]
    mark = Path(os.environ["FTMATRIX_REUSE_LOG"]).with_name(f"crashed-once-{cell}")
    if not mark.exists():
        mark.write_text("")
        os.abort()
